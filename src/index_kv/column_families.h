// The index's column families (docs/index-format.md) and the RocksDB -> Status mapping.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/status.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/ids.h"
#include "granary/common/status.h"

namespace granary::index_kv {

inline constexpr const char* kBucketsCf = "buckets";
inline constexpr const char* kObjectsCf = "objects";
inline constexpr const char* kManifestsCf = "manifests";
inline constexpr const char* kGcCf = "gc";
inline constexpr const char* kBlobRefsCf = "blobrefs";
inline constexpr const char* kUploadsCf = "uploads";
inline constexpr const char* kPartsCf = "parts";
inline constexpr const char* kRecordsCf = "records";
inline constexpr const char* kRecordSetsCf = "record_sets";
inline constexpr const char* kRecordOrderCf = "record_order";
inline constexpr const char* kRecordGcCf = "record_gc";
inline constexpr const char* kUsersCf = "users";
inline constexpr const char* kDeadVersionsCf = "dead_versions";

// Handles owned by the index; valid while its DB is open.
struct ColumnFamilies {
  rocksdb::ColumnFamilyHandle* buckets = nullptr;
  rocksdb::ColumnFamilyHandle* objects = nullptr;
  rocksdb::ColumnFamilyHandle* manifests = nullptr;
  rocksdb::ColumnFamilyHandle* gc = nullptr;
  rocksdb::ColumnFamilyHandle* blobrefs = nullptr;
  rocksdb::ColumnFamilyHandle* uploads = nullptr;
  rocksdb::ColumnFamilyHandle* parts = nullptr;
  rocksdb::ColumnFamilyHandle* records = nullptr;
  rocksdb::ColumnFamilyHandle* record_sets = nullptr;
  rocksdb::ColumnFamilyHandle* record_order = nullptr;
  rocksdb::ColumnFamilyHandle* record_gc = nullptr;
  rocksdb::ColumnFamilyHandle* users = nullptr;
  rocksdb::ColumnFamilyHandle* dead_versions = nullptr;
};

// kInvalidArgument unless the bucket name is non-empty and free of '/' (the key layouts
// rely on it).
Status checkBucketName(std::string_view bucket);

// A consistent view for reads that touch more than one row.
class Snapshot {
 public:
  explicit Snapshot(rocksdb::DB* db) : db_(db), snapshot_(db->GetSnapshot()) {
    options_.snapshot = snapshot_;
  }
  ~Snapshot() { db_->ReleaseSnapshot(snapshot_); }
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
  const rocksdb::ReadOptions& options() const { return options_; }
  rocksdb::ReadOptions& options() { return options_; }

 private:
  rocksdb::DB* db_;
  const rocksdb::Snapshot* snapshot_;
  rocksdb::ReadOptions options_;
};

// Maps a failed RocksDB status to ours: NotFound, Corruption, IOError/NoSpace, Busy/TryAgain
// (retryable kUnavailable); anything else is kInternal.
Status fromRocks(const rocksdb::Status& s, std::string_view context);

// True if the DB's rows reference blob version `version` (docs/index-format.md, blobrefs):
// its manifests row, or a blobrefs row starting with its 16 bytes. Read with `options`
// (a snapshot, for isBlobVersionReferenced).
Result<bool> versionReferencedInDb(rocksdb::DB* db, const ColumnFamilies& cfs,
                                   const rocksdb::ReadOptions& options,
                                   const VersionId& version);

// Every value of a (small) column family, decoded, in key order.
template <typename T>
inline Result<std::vector<T>> decodeAll(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf,
                                        Result<T> (*decode)(std::string_view), const char* what) {
  std::vector<T> out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), cf));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto value = decode(it->value().ToStringView());
    if (!value) return fail(value.error());
    out.push_back(std::move(*value));
  }
  if (!it->status().ok()) {
    return fail(fromRocks(it->status(), std::string("index: listing ") + what));
  }
  return out;
}

}  // namespace granary::index_kv

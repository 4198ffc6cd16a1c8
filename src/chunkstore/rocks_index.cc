#include "rocks_index.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <vector>

#include <fmt/core.h>

#include "granary/common/log.h"
#include "granary/common/rocks_resources.h"

namespace granary::chunkstore {

namespace {

constexpr const char* kMetaFamily = "meta";
constexpr std::string_view kNextExtentKey = "next_extent";
// Followed by BlobId::encode(): one key (empty value) per blob marked corrupt.
constexpr std::string_view kCorruptPrefix = "corrupt/";

std::string corruptKey(const BlobId& id) {
  auto key = id.encode();
  std::string out(kCorruptPrefix);
  out.append(reinterpret_cast<const char*>(key.data()), key.size());
  return out;
}

Status fromRocks(const rocksdb::Status& s, std::string_view context) {
  std::string msg = fmt::format("{}: {}", context, s.ToString());
  if (s.IsNotFound()) return Status::notFound(std::move(msg));
  if (s.IsNoSpace()) return Status::noSpace(std::move(msg));
  if (s.IsCorruption()) return Status::corruption(std::move(msg));
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) return Status::unavailable(std::move(msg));
  return Status::ioError(std::move(msg));
}

rocksdb::Slice slice(const std::array<uint8_t, BlobId::kEncodedSize>& key) {
  return {reinterpret_cast<const char*>(key.data()), key.size()};
}

rocksdb::WriteOptions syncedWrite() {
  rocksdb::WriteOptions w;
  w.sync = true;
  return w;
}

std::span<const uint8_t> bytes(const rocksdb::Slice& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

Result<std::unique_ptr<RocksIndex>> RocksIndex::open(const std::string& path,
                                                     RocksResources& resources,
                                                     uint64_t cache_bytes) {
  rocksdb::Options options = resources.baseOptions();
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, resources.columnFamilyOptions()},
      {kMetaFamily, resources.columnFamilyOptions()},
  };
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(options), path, families, &handles, &db);
  if (!s.ok()) return fail(fromRocks(s, "opening blob index " + path));
  std::unique_ptr<RocksIndex> index(new RocksIndex(cache_bytes));
  index->path_ = path;
  index->db_ = db;
  index->blobs_ = handles[0];
  index->meta_ = handles[1];
  return index;
}

RocksIndex::~RocksIndex() {
  if (db_ == nullptr) return;
  for (auto* h : {blobs_, meta_}) {
    rocksdb::Status s = db_->DestroyColumnFamilyHandle(h);
    if (!s.ok()) log::warn("closing column family of {}: {}", path_, s.ToString());
  }
  rocksdb::Status s = db_->Close();
  if (!s.ok()) log::warn("closing blob index {}: {}", path_, s.ToString());
  delete db_;
}

Result<IndexRecord> RocksIndex::get(const BlobId& id, bool memory_only) {
  if (!cache_.enabled()) return getStored(id, memory_only);
  uint64_t generation = 0;
  if (auto cached = cache_.find(id, generation)) return *cached;
  auto rec = getStored(id, memory_only);
  if (rec) cache_.insertIfUnchanged(id, *rec, kCachedEntryCost, generation);
  return rec;
}

Result<IndexRecord> RocksIndex::getStored(const BlobId& id, bool memory_only) {
  auto key = id.encode();
  rocksdb::PinnableSlice value;
  rocksdb::ReadOptions ro;
  if (memory_only) ro.read_tier = rocksdb::kBlockCacheTier;
  rocksdb::Status s = db_->Get(ro, blobs_, slice(key), &value);
  if (s.IsNotFound()) return fail(Status::notFound("blob " + id.toString() + " not found"));
  if (s.IsIncomplete()) return fail(Status::unavailable("blob index entry not in memory"));
  if (!s.ok()) return fail(fromRocks(s, "looking up blob " + id.toString()));
  auto rec = decodeIndexRecord(bytes(value));
  if (!rec) {
    return fail(Status::corruption(
        fmt::format("index entry of blob {}: {}", id.toString(), rec.error().message())));
  }
  return rec;
}

Status RocksIndex::putBatch(std::span<const std::pair<BlobId, IndexRecord>> entries) {
  rocksdb::WriteBatch batch;
  for (const auto& [id, record] : entries) {
    auto key = id.encode();
    auto value = encodeIndexRecord(record);
    rocksdb::Slice v(reinterpret_cast<const char*>(value.data()), value.size());
    if (rocksdb::Status s = batch.Put(blobs_, slice(key), v); !s.ok()) {
      return fromRocks(s, "indexing blob " + id.toString());
    }
  }
  rocksdb::Status s = db_->Write(syncedWrite(), &batch);
  if (!s.ok()) return fromRocks(s, fmt::format("indexing {} blobs", entries.size()));
  for (const auto& [id, record] : entries) cache_.insert(id, record, kCachedEntryCost);
  return Status::ok();
}

Status RocksIndex::remove(const BlobId& id, bool unmark_corrupt) {
  auto key = id.encode();
  rocksdb::WriteBatch batch;
  rocksdb::Status s = batch.Delete(blobs_, slice(key));
  if (s.ok() && unmark_corrupt) s = batch.Delete(meta_, corruptKey(id));
  if (s.ok()) s = db_->Write(syncedWrite(), &batch);
  // After the delete, whatever it returned: a lookup that read the entry before it can no
  // longer cache it, and one after it finds nothing.
  cache_.erase(id);
  if (!s.ok()) return fromRocks(s, "unindexing blob " + id.toString());
  return Status::ok();
}

Status RocksIndex::forEach(std::optional<BlobId> after,
                           const std::function<bool(const BlobId&, const IndexRecord&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), blobs_));
  std::array<uint8_t, BlobId::kEncodedSize> start{};
  if (after) {
    start = after->encode();
    it->Seek(slice(start));
    if (it->Valid() && it->key() == slice(start)) it->Next();
  } else {
    it->SeekToFirst();
  }
  for (; it->Valid(); it->Next()) {
    auto id = BlobId::decode(bytes(it->key()));
    if (!id) return Status::corruption("blob index " + path_ + ": malformed key");
    auto rec = decodeIndexRecord(bytes(it->value()));
    if (!rec) {
      return Status::corruption(fmt::format("blob index {}: entry of {}: {}", path_,
                                            id->toString(), rec.error().message()));
    }
    if (!fn(*id, *rec)) return Status::ok();
  }
  if (!it->status().ok()) return fromRocks(it->status(), "scanning blob index " + path_);
  return Status::ok();
}

Status RocksIndex::markCorrupt(const BlobId& id) {
  rocksdb::Status s = db_->Put(syncedWrite(), meta_, corruptKey(id), rocksdb::Slice());
  if (!s.ok()) return fromRocks(s, "marking blob " + id.toString() + " corrupt");
  return Status::ok();
}

Status RocksIndex::unmarkCorrupt(const BlobId& id) {
  rocksdb::Status s = db_->Delete(syncedWrite(), meta_, corruptKey(id));
  if (!s.ok()) return fromRocks(s, "unmarking blob " + id.toString());
  return Status::ok();
}

Result<std::vector<BlobId>> RocksIndex::corruptMarks(size_t limit) {
  std::vector<BlobId> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->Seek(kCorruptPrefix); it->Valid() && out.size() < limit; it->Next()) {
    rocksdb::Slice key = it->key();
    if (!key.starts_with(kCorruptPrefix)) break;
    key.remove_prefix(kCorruptPrefix.size());
    auto id = BlobId::decode(bytes(key));
    if (!id) return fail(Status::corruption("blob index " + path_ + ": malformed corrupt mark"));
    out.push_back(*id);
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "listing corrupt marks"));
  return out;
}

Result<uint32_t> RocksIndex::nextExtent() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, kNextExtentKey, &value);
  if (s.IsNotFound()) return 0u;
  if (!s.ok()) return fail(fromRocks(s, "reading next extent of " + path_));
  if (value.size() != 4) return fail(Status::corruption("meta next_extent is not 4 bytes"));
  return static_cast<uint32_t>(getLe(reinterpret_cast<const uint8_t*>(value.data()), 4));
}

Status RocksIndex::putNextExtent(uint32_t next) {
  uint8_t v[4];
  putLe(v, next, 4);
  rocksdb::Status s = db_->Put(syncedWrite(), meta_, kNextExtentKey,
                               rocksdb::Slice(reinterpret_cast<const char*>(v), 4));
  if (!s.ok()) return fromRocks(s, "recording next extent of " + path_);
  return Status::ok();
}

}  // namespace granary::chunkstore

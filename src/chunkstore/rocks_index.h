// RocksIndex: one drive's blob index in RocksDB (D/index). Column family "default" maps
// BlobId::encode() -> IndexRecord; column family "meta" holds the drive's bookkeeping
// (the next extent number). Encodings: docs/chunkstore-format.md.
// Every write is WAL-synced before it returns. Thread safety: all methods are thread safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <string>

#include "blob_format.h"
#include "granary/common/ids.h"
#include "granary/common/status.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace granary {
class RocksResources;
}

namespace granary::chunkstore {

class RocksIndex {
 public:
  static Result<std::unique_ptr<RocksIndex>> open(const std::string& path,
                                                  RocksResources& resources);
  ~RocksIndex();
  RocksIndex(const RocksIndex&) = delete;
  RocksIndex& operator=(const RocksIndex&) = delete;

  // kNotFound when the blob is not indexed. `memory_only`: kUnavailable when the entry is
  // not in RocksDB's memtables or block cache (no disk read; for an event loop).
  Result<IndexRecord> get(const BlobId& id, bool memory_only = false);
  // Indexes every blob of `entries` in one synced WriteBatch (group commit): all or none.
  Status putBatch(std::span<const std::pair<BlobId, IndexRecord>> entries);
  Status remove(const BlobId& id);
  // Blobs in id order, strictly after `after` when given, until `fn` returns false.
  Status forEach(std::optional<BlobId> after,
                 const std::function<bool(const BlobId&, const IndexRecord&)>& fn);

  // 0 when never set.
  Result<uint32_t> nextExtent();
  Status putNextExtent(uint32_t next);

 private:
  RocksIndex() = default;

  std::string path_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* blobs_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
};

}  // namespace granary::chunkstore

// RocksIndex: one drive's blob index in RocksDB (D/index). Column family "default" maps
// BlobId::encode() -> IndexRecord; column family "meta" holds the drive's bookkeeping
// (the next extent number, the blobs found corrupt). Encodings: docs/chunkstore-format.md.
// Every write is WAL-synced before it returns. Thread safety: all methods are thread safe.
//
// Entries of recently put or looked-up blobs are also kept in memory (a BlobLru of
// `cache_bytes`), so that a read's lookup is one hash probe instead of a walk of RocksDB's
// memtable skip list and block cache: the index lookup was a quarter of the submitting
// thread's time in random 4 KiB reads (docs/benchmarks.md). Writes go to RocksDB first
// and then to the cache; a lookup that misses caches what it read only if no write
// touched the cache meanwhile (BlobLru::insertIfUnchanged), so a removed blob is never
// found in the cache. That holds as long as callers do not put and remove one id at the
// same time (ChunkStore's IdClaim serializes them): a put whose cache insert came after a
// concurrent removal would leave the entry cached.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "blob_format.h"
#include "blob_lru.h"
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
  // What one cached entry costs: the entry (id, record, LRU links) and its map node.
  static constexpr uint64_t kCachedEntryCost = 192;

  static Result<std::unique_ptr<RocksIndex>> open(const std::string& path,
                                                  RocksResources& resources,
                                                  uint64_t cache_bytes = 0);
  ~RocksIndex();
  RocksIndex(const RocksIndex&) = delete;
  RocksIndex& operator=(const RocksIndex&) = delete;

  // kNotFound when the blob is not indexed. `memory_only`: kUnavailable when the entry is
  // not in the cache, RocksDB's memtables or its block cache (no disk read; for an event
  // loop).
  Result<IndexRecord> get(const BlobId& id, bool memory_only = false);
  // get() without the in-memory entries: RocksDB only, nothing cached or counted (for
  // lookups that are no client's read: a put's existence check, a removal, the scrubber's
  // walk, which would push out the entries of the blobs clients read).
  Result<IndexRecord> getUncached(const BlobId& id) { return getStored(id, false); }
  // Indexes every blob of `entries` in one synced WriteBatch (group commit): all or none.
  Status putBatch(std::span<const std::pair<BlobId, IndexRecord>> entries);
  // `unmark_corrupt`: the blob's corrupt mark (markCorrupt) goes in the same write.
  Status remove(const BlobId& id, bool unmark_corrupt = false);
  // Blobs in id order, strictly after `after` when given, until `fn` returns false.
  Status forEach(std::optional<BlobId> after,
                 const std::function<bool(const BlobId&, const IndexRecord&)>& fn);

  // Blobs a read or the scrubber found corrupt or unreadable (repair's suspects): kept
  // until remove(id, true) or unmarkCorrupt(id), so that a restart does not forget them.
  Status markCorrupt(const BlobId& id);
  Status unmarkCorrupt(const BlobId& id);
  // At most `limit` marked blobs, in id order.
  Result<std::vector<BlobId>> corruptMarks(size_t limit);

  // 0 when never set.
  Result<uint32_t> nextExtent();
  Status putNextExtent(uint32_t next);

  // The in-memory entries: lookups answered by them and those that were not, since open;
  // memory they hold now.
  uint64_t cacheHits() const { return cache_.hits(); }
  uint64_t cacheMisses() const { return cache_.misses(); }
  uint64_t cacheBytes() const { return cache_.bytes(); }

 private:
  explicit RocksIndex(uint64_t cache_bytes) : cache_(cache_bytes) {}
  Result<IndexRecord> getStored(const BlobId& id, bool memory_only);

  std::string path_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* blobs_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  BlobLru<IndexRecord> cache_;
};

}  // namespace granary::chunkstore

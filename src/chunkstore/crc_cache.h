// CrcCache: the verified block CRC32C tables of recently read blobs, so that the next read
// of a blob fetches only the payload blocks it wants: one I/O instead of two (header and
// payload apart), or 4 KiB instead of 8 KiB for a one-block blob (header and payload
// together). The bytes read are still checked against the CRCs; only the header region
// (read, decoded and verified when the table was cached) is not read again.
//
// An entry belongs to one blob at one place (extent, offset): blobs are write-once, and a
// range of an extent is never written twice, so an entry cannot go stale while the blob
// is indexed there. remove() erases it; a lookup also checks the place against the
// caller's index entry.
//
// Bounded by bytes (each entry costs its table plus kEntryOverhead), least recently used
// out first, in kShards independently locked shards. Thread safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "blob_format.h"
#include "granary/common/ids.h"

namespace granary::chunkstore {

struct CachedCrcs {
  uint32_t extent = 0;
  uint64_t offset = 0;
  uint64_t payload_len = 0;
  uint32_t block_size = 0;
  std::vector<uint32_t> crcs;  // one per payload block
};

class CrcCache {
 public:
  static constexpr size_t kShards = 16;
  // What an entry costs besides its table: list node, map node and bucket, the shared
  // CachedCrcs with its control block, allocation headers.
  static constexpr uint64_t kEntryOverhead = 256;

  // capacity_bytes 0: nothing is ever cached.
  explicit CrcCache(uint64_t capacity_bytes);
  CrcCache(const CrcCache&) = delete;
  CrcCache& operator=(const CrcCache&) = delete;

  // The table of `id` if it is cached for the blob at `rec`'s place (and then the most
  // recently used).
  std::shared_ptr<const CachedCrcs> find(const BlobId& id, const IndexRecord& rec);
  // Caches the verified table of `header`, the blob at `rec`. No-op when it does not fit,
  // or when memory for it cannot be had (caching is best effort: this runs on completion
  // threads, which must not throw).
  void insert(const BlobId& id, const IndexRecord& rec, const BlobHeader& header);
  void erase(const BlobId& id);

  uint64_t bytes() const;
  uint64_t entries() const;
  // Lookups (find() calls) that returned a table, and those that did not, since
  // construction. One read may look up more than once (a gateway's try on its event loop,
  // then on a worker; a retry).
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  using Hash = BlobIdHash;
  struct Shard {
    using Lru = std::list<std::pair<BlobId, std::shared_ptr<const CachedCrcs>>>;
    mutable std::mutex mu;
    Lru lru;  // most recently used first
    std::unordered_map<BlobId, Lru::iterator, Hash> map;
    uint64_t bytes = 0;
  };
  static uint64_t charge(uint64_t blocks) { return blocks * 4 + kEntryOverhead; }
  Shard& shardOf(const BlobId& id) { return shards_[Hash{}(id) % kShards]; }
  static void eraseLocked(Shard& s, std::unordered_map<BlobId, Shard::Lru::iterator, Hash>::iterator it);

  const uint64_t shard_capacity_;
  Shard shards_[kShards];
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
};

}  // namespace granary::chunkstore

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
// out first (approximately: blob_lru.h). Thread safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "blob_format.h"
#include "blob_lru.h"
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
  static constexpr size_t kShards = BlobLru<int>::kShards;
  // What an entry costs besides its table: list node, map node and bucket, the shared
  // CachedCrcs with its control block, allocation headers.
  static constexpr uint64_t kEntryOverhead = 256;

  // capacity_bytes 0: nothing is ever cached.
  explicit CrcCache(uint64_t capacity_bytes) : lru_(capacity_bytes) {}

  // The table of `id` if it is cached for the blob at `rec`'s place (and then the most
  // recently used).
  std::shared_ptr<const CachedCrcs> find(const BlobId& id, const IndexRecord& rec);
  // Caches the verified table of `header`, the blob at `rec`. No-op when it does not fit,
  // or when memory for it cannot be had (caching is best effort: this runs on completion
  // threads, which must not throw).
  void insert(const BlobId& id, const IndexRecord& rec, const BlobHeader& header);
  void erase(const BlobId& id) { lru_.erase(id); }

  uint64_t bytes() const { return lru_.bytes(); }
  uint64_t entries() const { return lru_.entries(); }
  // Lookups (find() calls) that returned a table, and those that did not, since
  // construction. One read may look up more than once (a gateway's try on its event loop,
  // then on a worker; a retry).
  uint64_t hits() const { return lru_.hits(); }
  uint64_t misses() const { return lru_.misses(); }

 private:
  BlobLru<std::shared_ptr<const CachedCrcs>> lru_;
};

}  // namespace granary::chunkstore

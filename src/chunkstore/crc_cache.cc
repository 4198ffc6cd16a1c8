#include "crc_cache.h"

#include <new>

namespace granary::chunkstore {

std::shared_ptr<const CachedCrcs> CrcCache::find(const BlobId& id, const IndexRecord& rec) {
  auto found = lru_.find(id, [&](const std::shared_ptr<const CachedCrcs>& e) {
    // Another blob of that id now: this one is gone.
    return e->extent == rec.extent && e->offset == rec.offset &&
           e->payload_len == rec.payload_len && e->block_size == rec.block_size;
  });
  return found ? std::move(*found) : nullptr;
}

void CrcCache::insert(const BlobId& id, const IndexRecord& rec, const BlobHeader& header) {
  const uint64_t cost = header.blocks * 4 + kEntryOverhead;
  if (!lru_.fits(cost)) return;  // before building a table that would not be kept
  try {
    auto e = std::make_shared<CachedCrcs>();
    e->extent = rec.extent;
    e->offset = rec.offset;
    e->payload_len = rec.payload_len;
    e->block_size = rec.block_size;
    e->crcs.resize(header.blocks);
    for (uint64_t b = 0; b < header.blocks; ++b) e->crcs[b] = header.blockCrc(b);
    lru_.insert(id, std::move(e), cost);
  } catch (const std::bad_alloc&) {
    // Not cached: the next read reads the header.
  }
}

}  // namespace granary::chunkstore

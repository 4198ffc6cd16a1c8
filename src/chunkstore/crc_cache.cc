#include "crc_cache.h"

#include <cstring>
#include <new>

namespace granary::chunkstore {

CrcCache::CrcCache(uint64_t capacity_bytes) : shard_capacity_(capacity_bytes / kShards) {}

std::shared_ptr<const CachedCrcs> CrcCache::find(const BlobId& id, const IndexRecord& rec) {
  std::shared_ptr<const CachedCrcs> found;
  if (shard_capacity_ > 0) {
    Shard& s = shardOf(id);
    std::lock_guard lock(s.mu);
    if (auto it = s.map.find(id); it != s.map.end()) {
      const CachedCrcs& e = *it->second->second;
      if (e.extent != rec.extent || e.offset != rec.offset ||
          e.payload_len != rec.payload_len || e.block_size != rec.block_size) {
        eraseLocked(s, it);  // another blob of that id now: this one is gone
      } else {
        s.lru.splice(s.lru.begin(), s.lru, it->second);
        found = it->second->second;
      }
    }
  }
  (found ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  return found;
}

void CrcCache::insert(const BlobId& id, const IndexRecord& rec, const BlobHeader& header) {
  const uint64_t cost = charge(header.blocks);
  if (cost > shard_capacity_) return;
  try {
    auto e = std::make_shared<CachedCrcs>();
    e->extent = rec.extent;
    e->offset = rec.offset;
    e->payload_len = rec.payload_len;
    e->block_size = rec.block_size;
    e->crcs.resize(header.blocks);
    for (uint64_t b = 0; b < header.blocks; ++b) e->crcs[b] = header.blockCrc(b);
    Shard& s = shardOf(id);
    std::lock_guard lock(s.mu);
    if (auto it = s.map.find(id); it != s.map.end()) eraseLocked(s, it);
    s.lru.emplace_front(id, std::move(e));
    try {
      s.map.emplace(id, s.lru.begin());
    } catch (...) {
      s.lru.pop_front();  // every list node has its map entry
      throw;
    }
    s.bytes += cost;
    while (s.bytes > shard_capacity_) eraseLocked(s, s.map.find(s.lru.back().first));
  } catch (const std::bad_alloc&) {
    // Not cached: the next read reads the header.
  }
}

void CrcCache::erase(const BlobId& id) {
  if (shard_capacity_ == 0) return;
  Shard& s = shardOf(id);
  std::lock_guard lock(s.mu);
  if (auto it = s.map.find(id); it != s.map.end()) eraseLocked(s, it);
}

void CrcCache::eraseLocked(Shard& s,
                           std::unordered_map<BlobId, Shard::Lru::iterator, Hash>::iterator it) {
  s.bytes -= charge(it->second->second->crcs.size());
  s.lru.erase(it->second);
  s.map.erase(it);
}

uint64_t CrcCache::bytes() const {
  uint64_t total = 0;
  for (const Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    total += s.bytes;
  }
  return total;
}

uint64_t CrcCache::entries() const {
  uint64_t total = 0;
  for (const Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    total += s.map.size();
  }
  return total;
}

}  // namespace granary::chunkstore

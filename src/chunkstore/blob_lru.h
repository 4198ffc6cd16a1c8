// BlobLru<V>: a memory-bounded map from BlobId to V, least recently used out first, in
// kShards independently locked shards. The one cache structure of a drive's caches: the
// blob index's (rocks_index.h) and the block CRCs' (crc_cache.h).
//
// Each entry is charged what the caller says it costs; a shard holds capacity / kShards.
// Every change to a shard (insert, erase) moves its generation on, so that a value read
// from the source of truth outside the lock can be inserted only if nothing changed the
// shard meanwhile (generation() before the read, insertIfUnchanged() after): a lookup that
// races a removal can never cache what was removed. Thread safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <new>
#include <optional>
#include <unordered_map>
#include <utility>

#include "blob_format.h"
#include "granary/common/ids.h"

namespace granary::chunkstore {

template <typename V>
class BlobLru {
 public:
  static constexpr size_t kShards = 16;

  // capacity_bytes 0: nothing is ever cached.
  explicit BlobLru(uint64_t capacity_bytes) : shard_capacity_(capacity_bytes / kShards) {}
  BlobLru(const BlobLru&) = delete;
  BlobLru& operator=(const BlobLru&) = delete;

  bool enabled() const { return shard_capacity_ > 0; }

  // A copy of the value of `id` (then the most recently used) if it is cached and
  // `valid(value)`; an entry that is not valid is erased. Counts a hit or a miss.
  template <typename Valid>
  std::optional<V> find(const BlobId& id, Valid&& valid) {
    std::optional<V> found;
    if (enabled()) {
      Shard& s = shardOf(id);
      std::lock_guard lock(s.mu);
      if (auto it = s.map.find(id); it != s.map.end()) {
        if (!valid(it->second->value)) {
          eraseLocked(s, it);
        } else {
          s.lru.splice(s.lru.begin(), s.lru, it->second);
          found = it->second->value;
        }
      }
    }
    (found ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
    return found;
  }
  std::optional<V> find(const BlobId& id) {
    return find(id, [](const V&) { return true; });
  }

  // Caches `value` for `id` at `cost` bytes, replacing what `id` had. No-op when it does
  // not fit, or when memory for it cannot be had (caching is best effort: callers include
  // completion threads, which must not throw).
  void insert(const BlobId& id, V value, uint64_t cost) {
    if (cost > shard_capacity_) return;
    Shard& s = shardOf(id);
    std::lock_guard lock(s.mu);
    put(s, id, std::move(value), cost);
  }

  // The shard generation of `id`, for insertIfUnchanged().
  uint64_t generation(const BlobId& id) {
    Shard& s = shardOf(id);
    std::lock_guard lock(s.mu);
    return s.generation;
  }
  // insert(), but only when `id`'s shard is still at `generation` (nothing inserted or
  // erased there since it was taken) and `id` is not cached.
  void insertIfUnchanged(const BlobId& id, V value, uint64_t cost, uint64_t generation) {
    if (cost > shard_capacity_) return;
    Shard& s = shardOf(id);
    std::lock_guard lock(s.mu);
    if (s.generation != generation || s.map.count(id) > 0) return;
    put(s, id, std::move(value), cost);
  }

  void erase(const BlobId& id) {
    if (!enabled()) return;
    Shard& s = shardOf(id);
    std::lock_guard lock(s.mu);
    ++s.generation;
    if (auto it = s.map.find(id); it != s.map.end()) eraseLocked(s, it);
  }

  uint64_t bytes() const {
    return sum([](const Shard& s) { return s.bytes; });
  }
  uint64_t entries() const {
    return sum([](const Shard& s) { return s.map.size(); });
  }
  // find() calls that returned a value, and those that did not, since construction.
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    BlobId id;
    V value;
    uint64_t cost;
  };
  struct Shard {
    using Lru = std::list<Entry>;
    mutable std::mutex mu;
    Lru lru;  // most recently used first
    std::unordered_map<BlobId, typename Lru::iterator, BlobIdHash> map;
    uint64_t bytes = 0;
    uint64_t generation = 0;
  };
  using MapIt = typename decltype(Shard::map)::iterator;

  Shard& shardOf(const BlobId& id) { return shards_[BlobIdHash{}(id) % kShards]; }

  void put(Shard& s, const BlobId& id, V&& value, uint64_t cost) {
    ++s.generation;
    if (auto it = s.map.find(id); it != s.map.end()) eraseLocked(s, it);
    try {
      s.lru.push_front(Entry{id, std::move(value), cost});
      try {
        s.map.emplace(id, s.lru.begin());
      } catch (...) {
        s.lru.pop_front();  // every list node has its map entry
        throw;
      }
    } catch (const std::bad_alloc&) {
      return;  // not cached
    }
    s.bytes += cost;
    while (s.bytes > shard_capacity_) eraseLocked(s, s.map.find(s.lru.back().id));
  }

  static void eraseLocked(Shard& s, MapIt it) {
    s.bytes -= it->second->cost;
    s.lru.erase(it->second);
    s.map.erase(it);
  }

  template <typename F>
  uint64_t sum(F&& f) const {
    uint64_t total = 0;
    for (const Shard& s : shards_) {
      std::lock_guard lock(s.mu);
      total += f(s);
    }
    return total;
  }

  const uint64_t shard_capacity_;
  Shard shards_[kShards];
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
};

}  // namespace granary::chunkstore

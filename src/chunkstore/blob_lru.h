// BlobLru<V>: a memory-bounded map from BlobId to V, least recently used out first (by the
// CLOCK approximation: a hit only marks its entry, and eviction gives a marked entry a
// second chance, so that a hit touches one list node instead of relinking four), in
// kShards independently locked shards. The one cache structure of a drive's caches: the
// blob index's (rocks_index.h) and the block CRCs' (crc_cache.h).
//
// Each entry is charged what the caller says it costs; a shard holds capacity / kShards.
// Every write to a shard (insert, erase) moves its generation on, so that a value read
// from the source of truth outside the lock can be inserted only if no write touched the
// shard meanwhile (the generation from find() or generation() before the read,
// insertIfUnchanged() after): a lookup that races a removal can never cache what was
// removed. Fills by insertIfUnchanged() (and their evictions) change no source of truth
// and leave the generation as it is. Thread safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <iterator>
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
  // Whether an entry of `cost` bytes can be cached at all (it must fit in one shard).
  bool fits(uint64_t cost) const { return cost <= shard_capacity_ && enabled(); }

  // A copy of the value of `id` (then marked used) if it is cached and `valid(value)`; an
  // entry that is not valid is erased. On a miss, `generation` (when given) receives the
  // shard's generation under the same lock, for insertIfUnchanged(). Counts a hit or a
  // miss.
  template <typename Valid>
  std::optional<V> find(const BlobId& id, Valid&& valid, uint64_t* generation = nullptr) {
    std::optional<V> found;
    if (enabled()) {
      Shard& s = shardOf(id);
      std::lock_guard lock(s.mu);
      if (auto it = s.map.find(id); it != s.map.end() && !valid(it->second->value)) {
        eraseLocked(s, it);
      } else if (it != s.map.end()) {
        it->second->used = true;
        found = it->second->value;
      }
      if (!found && generation != nullptr) *generation = s.generation;
    }
    (found ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
    return found;
  }
  std::optional<V> find(const BlobId& id) {
    return find(id, [](const V&) { return true; });
  }
  std::optional<V> find(const BlobId& id, uint64_t& generation) {
    return find(id, [](const V&) { return true; }, &generation);
  }

  // Caches `value` for `id` at `cost` bytes, replacing what `id` had. No-op when it does
  // not fit, or when memory for it cannot be had (caching is best effort: callers include
  // completion threads, which must not throw).
  void insert(const BlobId& id, V value, uint64_t cost) {
    if (!fits(cost)) return;
    Shard& s = shardOf(id);
    std::lock_guard lock(s.mu);
    ++s.generation;
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
    if (!fits(cost)) return;
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
    bool used = false;  // found since it was inserted or last given a second chance
  };
  struct alignas(64) Shard {  // no two shards' locks on one cache line
    using Lru = std::list<Entry>;
    mutable std::mutex mu;
    Lru lru;  // most recently inserted (or given a second chance) first
    std::unordered_map<BlobId, typename Lru::iterator, BlobIdHash> map;
    uint64_t bytes = 0;
    uint64_t generation = 0;
  };
  using MapIt = typename decltype(Shard::map)::iterator;

  Shard& shardOf(const BlobId& id) { return shards_[BlobIdHash{}(id) % kShards]; }

  void put(Shard& s, const BlobId& id, V&& value, uint64_t cost) {
    if (auto it = s.map.find(id); it != s.map.end()) eraseLocked(s, it);
    try {
      s.lru.push_front(Entry{id, std::move(value), cost, false});
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
    // The new entry (at the front) stays; a marked entry gets a second chance, unmarked,
    // just behind it (in front of it, a shard of marked entries would turn around and
    // evict the new one first).
    while (s.bytes > shard_capacity_) {
      Entry& oldest = s.lru.back();
      if (oldest.used) {
        oldest.used = false;
        s.lru.splice(std::next(s.lru.begin()), s.lru, std::prev(s.lru.end()));
      } else {
        eraseLocked(s, s.map.find(oldest.id));
      }
    }
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

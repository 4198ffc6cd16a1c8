// BlobLru (the drives' cache structure) and the blob index's in-memory entries built on it:
// a lookup answered from memory must never find a blob that was removed.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "blob_lru.h"
#include "rocks_index.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

namespace {

IndexRecord recordAt(uint64_t offset) { return IndexRecord{3, offset, 4096, 100, 4096, 1}; }

bool samePlace(const IndexRecord& a, const IndexRecord& b) {
  return a.extent == b.extent && a.offset == b.offset && a.payload_len == b.payload_len;
}

// `count` ids other than `id`, and other than each other, in the same BlobLru shard as it.
std::vector<BlobId> neighboursOf(const BlobId& id, size_t count) {
  const size_t shard = BlobIdHash{}(id) % BlobLru<int>::kShards;
  std::vector<BlobId> out;
  for (uint64_t n = 1'000'000; out.size() < count; ++n) {
    BlobId other = makeId(n);
    if (other != id && BlobIdHash{}(other) % BlobLru<int>::kShards == shard) {
      out.push_back(other);
    }
  }
  return out;
}

BlobId neighbourOf(const BlobId& id) { return neighboursOf(id, 1)[0]; }

}  // namespace

TEST_CASE("BlobLru keeps what fits, least recently used out first") {
  constexpr uint64_t kCost = 100;
  BlobLru<int> lru(3 * kCost * BlobLru<int>::kShards);  // three entries a shard
  const BlobId a = makeId(1);
  const std::vector<BlobId> more = neighboursOf(a, 3);
  const BlobId b = more[0], c = more[1], d = more[2];
  lru.insert(a, 1, kCost);
  lru.insert(b, 2, kCost);
  lru.insert(c, 3, kCost);
  CHECK(lru.find(a) == 1);  // a is now marked used: b, the oldest unmarked, is next out
  lru.insert(d, 4, kCost);
  CHECK(lru.find(b) == std::nullopt);
  CHECK(lru.find(a) == 1);
  CHECK(lru.find(c) == 3);
  CHECK(lru.find(d) == 4);
  CHECK(lru.bytes() == 3 * kCost);
  CHECK(lru.entries() == 3);
  CHECK(lru.hits() == 4);
  CHECK(lru.misses() == 1);

  SECTION("a shard whose entries were all found since keeps the new one") {
    // a, c and d were all found above: one of them goes, never the newcomer.
    const BlobId e = neighboursOf(a, 4)[3];
    lru.insert(e, 5, kCost);
    CHECK(lru.find(e) == 5);
    CHECK(lru.entries() == 3);
    int kept = 0;
    for (const BlobId& old : {a, c, d}) kept += lru.find(old).has_value() ? 1 : 0;
    CHECK(kept == 2);
  }
  SECTION("an insert replaces the value") {
    lru.insert(a, 10, kCost);
    CHECK(lru.find(a) == 10);
    CHECK(lru.entries() == 3);
  }
  SECTION("an entry its caller finds invalid is dropped") {
    CHECK(lru.find(a, [](int v) { return v != 1; }) == std::nullopt);
    CHECK(lru.find(a) == std::nullopt);
    CHECK(lru.bytes() == 2 * kCost);
  }
  SECTION("what costs more than a shard holds is not cached") {
    lru.insert(makeId(7), 7, 4 * kCost);
    CHECK(lru.find(makeId(7)) == std::nullopt);
  }
  SECTION("capacity 0 caches nothing") {
    BlobLru<int> none(0);
    none.insert(a, 1, 1);
    CHECK(none.find(a) == std::nullopt);
    CHECK(none.entries() == 0);
  }
}

TEST_CASE("BlobLru caches a value read outside its lock only if nothing changed meanwhile") {
  BlobLru<int> lru(1 << 20);
  const BlobId id = makeId(1);
  const BlobId neighbour = neighbourOf(id);

  SECTION("unchanged: cached") {
    const uint64_t g = lru.generation(id);
    lru.insertIfUnchanged(id, 1, 10, g);
    CHECK(lru.find(id) == 1);
  }
  SECTION("an erase of the id in between: not cached") {
    const uint64_t g = lru.generation(id);
    lru.erase(id);  // the removal raced the lookup
    lru.insertIfUnchanged(id, 1, 10, g);
    CHECK(lru.find(id) == std::nullopt);
  }
  SECTION("any change of its shard in between: not cached (the guard is per shard)") {
    const uint64_t g = lru.generation(id);
    lru.insert(neighbour, 2, 10);
    lru.insertIfUnchanged(id, 1, 10, g);
    CHECK(lru.find(id) == std::nullopt);
  }
  SECTION("a fill of another id in between does not stop it (fills write nothing)") {
    const uint64_t g = lru.generation(id);
    lru.insertIfUnchanged(neighbour, 2, 10, lru.generation(neighbour));
    lru.insertIfUnchanged(id, 1, 10, g);
    CHECK(lru.find(id) == 1);
    CHECK(lru.find(neighbour) == 2);
  }
  SECTION("find() gives the generation of a miss") {
    uint64_t g = 0;
    CHECK(lru.find(id, g) == std::nullopt);
    lru.erase(id);
    lru.insertIfUnchanged(id, 1, 10, g);
    CHECK(lru.find(id) == std::nullopt);
    CHECK(lru.find(id, g) == std::nullopt);
    lru.insertIfUnchanged(id, 1, 10, g);
    CHECK(lru.find(id) == 1);
  }
  SECTION("never replaces a newer value") {
    const uint64_t g = lru.generation(id);
    lru.insert(id, 5, 10);
    lru.insertIfUnchanged(id, 1, 10, lru.generation(id));
    lru.insertIfUnchanged(id, 1, 10, g);
    CHECK(lru.find(id) == 5);
  }
}

TEST_CASE("The blob index answers lookups of put blobs from memory") {
  TempDir dir;
  RocksResources resources{RocksBudget{8 << 20, 8 << 20}};
  auto index = RocksIndex::open(dir.path() + "/index", resources, 1 << 20);
  REQUIRE(index);
  RocksIndex& ix = **index;
  const BlobId id = makeId(1);
  const std::pair<BlobId, IndexRecord> entry{id, recordAt(8192)};
  REQUIRE(ix.putBatch({&entry, 1}).isOk());
  CHECK(ix.cacheBytes() == RocksIndex::kCachedEntryCost);

  auto got = ix.get(id);
  REQUIRE(got);
  CHECK(samePlace(*got, recordAt(8192)));
  auto in_memory = ix.get(id, /*memory_only=*/true);
  REQUIRE(in_memory);
  CHECK(samePlace(*in_memory, recordAt(8192)));
  CHECK(ix.cacheHits() == 2);
  CHECK(ix.cacheMisses() == 0);

  REQUIRE(ix.remove(id).isOk());
  CHECK(ix.get(id).error().isNotFound());
  CHECK(ix.get(id, true).error().isNotFound());
  CHECK(ix.cacheBytes() == 0);
  CHECK(ix.cacheMisses() == 2);  // both went to RocksDB, which no longer has it
}

TEST_CASE("The blob index reopened finds its entries in RocksDB and caches them") {
  TempDir dir;
  RocksResources resources{RocksBudget{8 << 20, 8 << 20}};
  const BlobId id = makeId(1);
  {
    auto index = RocksIndex::open(dir.path() + "/index", resources, 1 << 20);
    REQUIRE(index);
    const std::pair<BlobId, IndexRecord> entry{id, recordAt(4096)};
    REQUIRE((*index)->putBatch({&entry, 1}).isOk());
  }
  auto index = RocksIndex::open(dir.path() + "/index", resources, 1 << 20);
  REQUIRE(index);
  // Lookups that are no client's read neither use nor fill the entries in memory.
  REQUIRE((*index)->getUncached(id));
  CHECK((*index)->cacheBytes() == 0);
  CHECK((*index)->cacheMisses() == 0);
  REQUIRE((*index)->get(id));
  REQUIRE((*index)->get(id));
  CHECK((*index)->cacheMisses() == 1);
  CHECK((*index)->cacheHits() == 1);
  CHECK((*index)->cacheBytes() == RocksIndex::kCachedEntryCost);
}

TEST_CASE("A blob index lookup racing a removal never leaves the removed entry in memory") {
  TempDir dir;
  RocksResources resources{RocksBudget{8 << 20, 8 << 20}};
  // One entry a shard: the reader's lookups of `id` and of its neighbour evict each other,
  // so that every lookup of `id` reads RocksDB and offers what it read to the cache while
  // the removal runs.
  auto index = RocksIndex::open(dir.path() + "/index", resources,
                                RocksIndex::kCachedEntryCost * BlobLru<int>::kShards);
  REQUIRE(index);
  RocksIndex& ix = **index;
  int stale = 0;
  for (uint64_t round = 0; round < 300; ++round) {
    const BlobId id = makeId(round);
    const BlobId neighbour = neighbourOf(id);
    const std::pair<BlobId, IndexRecord> entries[] = {{id, recordAt(round * 4096)},
                                                      {neighbour, recordAt(1 << 30)}};
    REQUIRE(ix.putBatch(entries).isOk());
    std::atomic<bool> removed{false};
    std::atomic<int> lookups{0};
    std::thread reader([&] {
      // A lookup of `id` that read RocksDB before the removal may offer its entry to the
      // cache after it: the loop ends with such a lookup, not with an eviction.
      while (!removed.load()) {
        (void)ix.get(neighbour);
        (void)ix.get(id);
        ++lookups;
      }
    });
    while (lookups.load() < 3) std::this_thread::yield();
    REQUIRE(ix.remove(id).isOk());
    removed = true;
    reader.join();
    if (ix.get(id)) ++stale;
    REQUIRE(ix.remove(neighbour).isOk());
  }
  CHECK(stale == 0);
}

// Verified page-cache pages trusted while they stay cached (verified_mappings.h), through
// the store's pinIfCached().
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

namespace {

ChunkStoreOptions trusting(size_t mappings = 16) {
  ChunkStoreOptions o;
  o.verified_mappings = mappings;
  o.verified_mapping_bytes = 64 << 20;
  return o;
}

// Puts `data` as blob `id` and reads it all once, which leaves it in the page cache.
void putCached(ChunkStore& store, const BlobId& id, const std::vector<uint8_t>& data) {
  REQUIRE(store.put(descriptor(id), data).isOk());
  std::vector<uint8_t> out(data.size());
  REQUIRE(store.read(id, 0, out).isOk());
}

// Unmaps the pages of this process's mapping of `path` from `file_offset`, as reclaim does
// before it drops them (the mapping is found in /proc/self/maps, as the kernel lists it).
bool unmapLikeReclaim(const std::string& path, uint64_t file_offset) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    unsigned long begin = 0, end = 0, offset = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx", &begin, &end, perms, &offset) != 4) continue;
    if (offset != file_offset || line.size() < path.size() ||
        line.compare(line.size() - path.size(), path.size(), path) != 0) {
      continue;
    }
    return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0;
  }
  return false;
}

DriveStats statsOf(ChunkStore& store) {
  auto s = store.stats();
  REQUIRE(s);
  return *s;
}

}  // namespace

TEST_CASE("Pages verified twice in the page cache are trusted until one is unmapped") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine, trusting());
  const BlobId id = makeId(1);
  const auto data = randomBytes(40 * 4096 + 100, 3);
  putCached(*f.store, id, data);

  REQUIRE(f.store->pinIfCached(id, 0, 8192));  // verified; seen once
  CHECK(statsOf(*f.store).verified_admitted == 0);
  auto whole = f.store->pinIfCached(id, 0, data.size());  // verified again: admitted
  REQUIRE(whole);
  CHECK(rangeBytes(*whole) == data);
  DriveStats s = statsOf(*f.store);
  REQUIRE(s.verified_admitted == 1);
  CHECK(s.verified_blobs == 1);
  CHECK(s.verified_bytes == 41 * 4096);
  CHECK(s.verified_hits == 0);

  auto part = f.store->pinIfCached(id, 5000, 70'000);
  REQUIRE(part);
  CHECK(rangeBytes(*part) == std::vector<uint8_t>(data.begin() + 5000, data.begin() + 75'000));
  CHECK(statsOf(*f.store).verified_hits == 1);
  CHECK_FALSE(f.store->pinIfCached(id, data.size() - 50, 100));  // past the end, still

  // A write through the page cache changes a page in place, without unmapping it: the
  // trusted range is not read again, which shows that it is not verified again.
  flipBit(extentPath(f.options.dir, 0), kFirstPayload + 30 * 4096 + 7);
  CHECK(f.store->pinIfCached(id, 0, data.size()));
  CHECK(statsOf(*f.store).verified_hits == 2);

  SECTION("once reclaim unmaps its pages, the blob is verified again") {
    REQUIRE(unmapLikeReclaim(extentPath(f.options.dir, 0), kFirstPayload));
    CHECK_FALSE(f.store->pinIfCached(id, 0, data.size()));  // the flipped bit is seen
    s = statsOf(*f.store);
    CHECK(s.verified_hits == 2);
    CHECK(s.verified_blobs == 0);  // forgotten
    CHECK(f.store->pinIfCached(id, 0, 4096));  // blocks away from the flip still pass
  }
  SECTION("a hole punched in it unmaps the pages there") {
    // As remove() punches (here under the store: the mapping is not told).
    const int fd = ::open(extentPath(f.options.dir, 0).c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        static_cast<off_t>(kFirstPayload + 8 * 4096), 4096) == 0);
    ::close(fd);
    CHECK(f.store->pinIfCached(id, 0, 8 * 4096));  // pages before the hole: still trusted
    CHECK(statsOf(*f.store).verified_hits == 3);
    CHECK_FALSE(f.store->pinIfCached(id, 8 * 4096, 100));  // zeros there now: fails its CRC
    CHECK(statsOf(*f.store).verified_blobs == 0);
  }
  SECTION("remove() unmaps it") {
    REQUIRE(f.store->remove(id).isOk());
    CHECK(statsOf(*f.store).verified_blobs == 0);
    CHECK_FALSE(f.store->pinIfCached(id, 0, 100));
  }
}

TEST_CASE("Verified mappings: off by default, bounded, and only for fully cached blobs") {
  auto engine = makeUringEngine();
  const auto data = randomBytes(16 * 4096, 5);

  SECTION("the default options verify every read") {
    StoreFixture f(*engine);
    putCached(*f.store, makeId(1), data);
    for (int i = 0; i < 3; ++i) REQUIRE(f.store->pinIfCached(makeId(1), 0, data.size()));
    CHECK(statsOf(*f.store).verified_admitted == 0);
  }
  SECTION("the least recently used blob is unmapped past the bound") {
    StoreFixture f(*engine, trusting(2));
    for (uint64_t n = 1; n <= 3; ++n) {
      putCached(*f.store, makeId(n), data);
      REQUIRE(f.store->pinIfCached(makeId(n), 0, data.size()));
      REQUIRE(f.store->pinIfCached(makeId(n), 0, data.size()));
    }
    DriveStats s = statsOf(*f.store);
    CHECK(s.verified_admitted == 3);
    CHECK(s.verified_blobs == 2);
    REQUIRE(f.store->pinIfCached(makeId(3), 0, 100));  // held
    REQUIRE(f.store->pinIfCached(makeId(2), 0, 100));  // held
    REQUIRE(f.store->pinIfCached(makeId(1), 0, 100));  // unmapped: verified, seen once
    s = statsOf(*f.store);
    CHECK(s.verified_hits == 2);
    CHECK(s.verified_admitted == 3);
  }
  SECTION("a blob not all in the page cache is not mapped") {
    StoreFixture f(*engine, trusting());
    const auto big = randomBytes(64 * 4096, 7);
    putCached(*f.store, makeId(1), big);
    // Its last 32 pages out of the page cache (nothing maps them yet, so they go).
    const int fd = ::open(extentPath(f.options.dir, 0).c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::posix_fadvise(fd, static_cast<off_t>(kFirstPayload + 32 * 4096), 32 * 4096,
                            POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
    REQUIRE(f.store->pinIfCached(makeId(1), 0, 4096));
    REQUIRE(f.store->pinIfCached(makeId(1), 0, 4096));
    CHECK(statsOf(*f.store).verified_admitted == 0);
  }
}

TEST_CASE("Verified mappings under concurrent reads, evictions and removes") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine, trusting(3));
  constexpr uint64_t kBlobs = 8;
  std::vector<std::vector<uint8_t>> data;
  for (uint64_t n = 0; n < kBlobs; ++n) {
    data.push_back(randomBytes((4 + n) * 4096 + 10 * n, 100 + n));
    putCached(*f.store, makeId(n), data.back());
  }
  std::atomic<int> wrong{0};
  std::atomic<int> served{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const uint64_t n = static_cast<uint64_t>(i * 7 + t) % kBlobs;
        const uint64_t off = static_cast<uint64_t>(i % 3) * 1000;
        auto r = f.store->pinIfCached(makeId(n), off, data[n].size() - off);
        if (!r) continue;  // removed
        ++served;
        std::vector<uint8_t> got(r->length);
        if (::pread(r->fd, got.data(), got.size(), static_cast<off_t>(r->offset)) !=
                static_cast<ssize_t>(got.size()) ||
            !std::equal(got.begin(), got.end(), data[n].begin() + static_cast<long>(off))) {
          ++wrong;
        }
      }
    });
  }
  std::thread remover([&] {
    for (uint64_t n = kBlobs - 2; n < kBlobs; ++n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      (void)f.store->remove(makeId(n));
    }
  });
  for (auto& r : readers) r.join();
  remover.join();
  CHECK(wrong == 0);
  CHECK(served > 600);
  const DriveStats s = statsOf(*f.store);
  CHECK(s.verified_hits > 0);
  CHECK(s.verified_blobs <= 3);
}

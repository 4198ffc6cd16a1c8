// CrcCache, and the chunk store's reads that take a blob's block CRCs from it instead of
// reading the header region again.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

#include <fmt/core.h>

#include "blob_format.h"
#include "crc_cache.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

namespace {

// Counts the read I/Os made of extent files and their bytes (each part of a preadv is
// counted as bytes of one I/O).
class ReadCounter final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    note(out.size());
    return target_->pread(fd, out, offset);
  }
  Status preadv(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset) override {
    noteParts(parts);
    return target_->preadv(fd, parts, offset);
  }
  bool preadNoWait(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset) override {
    noteParts(parts);
    return target_->preadNoWait(fd, parts, offset);
  }
  void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) override {
    note(out.size());
    target_->readAsync(fd, out, offset, std::move(done));
  }
  void reset() {
    ios = 0;
    bytes = 0;
  }
  std::atomic<int> ios{0};
  std::atomic<uint64_t> bytes{0};

 private:
  void note(size_t n) {
    ++ios;
    bytes += n;
  }
  void noteParts(std::span<const std::span<uint8_t>> parts) {
    ++ios;
    for (auto p : parts) bytes += p.size();
  }
};

ChunkStoreOptions driveReads(uint64_t crc_cache_bytes) {
  ChunkStoreOptions o;
  o.cached_reads = false;  // the drive path: every read is an I/O the counter sees
  o.crc_cache_bytes = crc_cache_bytes;
  return o;
}

BlobHeader headerWith(std::vector<uint8_t>& table, uint64_t blocks, uint32_t seed) {
  table.assign(blocks * 4, 0);
  for (uint64_t b = 0; b < blocks; ++b) putLe(table.data() + 4 * b, seed + b, 4);
  BlobHeader h;
  h.blocks = blocks;
  h.block_size = 4096;
  h.payload_len = blocks * 4096;
  h.crc_table = table;
  return h;
}

// n bytes of `buf` (n + 1 long) that do not start on a 4 KiB boundary: a read into an
// aligned buffer may land there in two I/Os (header, then payload) instead of one.
std::span<uint8_t> unaligned(std::vector<uint8_t>& buf, size_t n) {
  buf.resize(n + 1);
  const bool aligned = reinterpret_cast<uintptr_t>(buf.data()) % 4096 == 0;
  return {buf.data() + (aligned ? 1 : 0), n};
}

IndexRecord placeOf(uint64_t offset, uint64_t blocks) {
  return IndexRecord{0, offset, 4096, blocks * 4096, 4096, 1};
}

}  // namespace

TEST_CASE("CrcCache keeps tables for their place, least recently used out first") {
  constexpr uint64_t kPerShard = 2000;  // room for 7 one-block entries (260 bytes each)
  static_assert(7 * (4 + CrcCache::kEntryOverhead) <= kPerShard &&
                8 * (4 + CrcCache::kEntryOverhead) > kPerShard);
  CrcCache cache(kPerShard * CrcCache::kShards);
  std::vector<uint8_t> table;
  const BlobHeader one = headerWith(table, 1, 7);
  for (uint64_t n = 0; n < 1000; ++n) cache.insert(makeId(n), placeOf(n * 8192, 1), one);
  CHECK(cache.bytes() <= kPerShard * CrcCache::kShards);
  CHECK(cache.entries() < 1000);
  CHECK(cache.entries() >= 6 * CrcCache::kShards);  // every shard holds what fits
  // The last one in is there, with its CRC; the first ones are gone.
  auto last = cache.find(makeId(999), placeOf(999 * 8192, 1));
  REQUIRE(last != nullptr);
  CHECK(last->crcs == std::vector<uint32_t>{7});
  CHECK(cache.find(makeId(0), placeOf(0, 1)) == nullptr);

  SECTION("a lookup for another place misses and drops the entry") {
    CHECK(cache.find(makeId(999), placeOf(4096, 1)) == nullptr);
    CHECK(cache.find(makeId(999), placeOf(999 * 8192, 1)) == nullptr);
  }
  SECTION("erase drops it") {
    cache.erase(makeId(999));
    CHECK(cache.find(makeId(999), placeOf(999 * 8192, 1)) == nullptr);
  }
  SECTION("a table larger than a shard's share is not cached") {
    std::vector<uint8_t> big;
    cache.insert(makeId(5000), placeOf(0, 600), headerWith(big, 600, 1));
    CHECK(cache.find(makeId(5000), placeOf(0, 600)) == nullptr);
    CHECK(cache.bytes() <= kPerShard * CrcCache::kShards);
  }
  SECTION("capacity 0 caches nothing") {
    CrcCache none(0);
    none.insert(makeId(1), placeOf(0, 1), one);
    CHECK(none.find(makeId(1), placeOf(0, 1)) == nullptr);
    CHECK(none.entries() == 0);
  }
}

TEST_CASE("A blob read once is read again without its header region") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto real = makeUringEngine();
  ReadCounter counter(real.get());
  StoreFixture f(counter, driveReads(32 << 20));

  SECTION("a one-block blob: 4 KiB instead of header and payload (8 KiB)") {
    BlobId id = makeId(1);
    auto data = randomBytes(4096, 1);
    REQUIRE(f.store->put(descriptor(id), data).isOk());
    std::vector<uint8_t> buf;
    auto out = unaligned(buf, 4096);
    counter.reset();
    REQUIRE(readVia(*f.store, async, id, 0, out).isOk());
    CHECK(counter.ios == 1);
    CHECK(counter.bytes == 8192);  // header region and payload in one I/O
    counter.reset();
    REQUIRE(readVia(*f.store, async, id, 0, out).isOk());
    CHECK(counter.ios == 1);
    CHECK(counter.bytes == 4096);
    CHECK(std::equal(out.begin(), out.end(), data.begin()));
    auto stats = f.store->stats();
    REQUIRE(stats);
    CHECK(stats->crc_cache_misses == 1);
    CHECK(stats->crc_cache_hits == 1);
    CHECK(stats->crc_cache_bytes == 4 + CrcCache::kEntryOverhead);
  }
  SECTION("a block far into a large blob: one I/O instead of two") {
    BlobId id = makeId(2);
    auto data = randomBytes(1 << 20, 2);
    REQUIRE(f.store->put(descriptor(id), data).isOk());
    std::vector<uint8_t> out(100);
    counter.reset();
    REQUIRE(readVia(*f.store, async, id, 512 * 1024 + 10, out).isOk());
    CHECK(counter.ios == 2);  // the header, then the block (too far apart to merge)
    counter.reset();
    REQUIRE(readVia(*f.store, async, id, 700 * 1024 + 10, out).isOk());
    CHECK(counter.ios == 1);
    CHECK(counter.bytes == 4096);
    CHECK(std::equal(out.begin(), out.end(), data.begin() + 700 * 1024 + 10));
  }
}

TEST_CASE("Without a CRC cache every read reads the header region") {
  auto real = makeUringEngine();
  ReadCounter counter(real.get());
  StoreFixture f(counter, driveReads(0));
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(4096, 1)).isOk());
  std::vector<uint8_t> buf;
  auto out = unaligned(buf, 4096);
  for (int i = 0; i < 2; ++i) {
    counter.reset();
    REQUIRE(f.store->read(id, 0, out).isOk());
    CHECK(counter.bytes == 8192);
  }
}

TEST_CASE("Cached CRCs still catch a flipped payload bit") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto engine = makeUringEngine();
  StoreFixture f(*engine, driveReads(32 << 20));
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(3 * 4096, 1)).isOk());
  std::vector<uint8_t> out(100);
  REQUIRE(readVia(*f.store, async, id, 0, out).isOk());  // caches the CRCs
  flipBit(extentPath(f.options.dir, 0), 4096 + 4096 + 77);  // payload block 1
  // Each read fails against the cached table, then against the header read again (the
  // first drops the entry: the second read starts from the header).
  for (int i = 0; i < 2; ++i) {
    Status st = readVia(*f.store, async, id, 4096, out);
    CHECK(st.code() == Status::Code::kCorruption);
    CHECK(st.message().find("block 1") != std::string::npos);
  }
  CHECK(readVia(*f.store, async, id, 2 * 4096, out).isOk());
}

TEST_CASE("The scrubber's reads verify the header region even when its CRCs are cached") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine, driveReads(32 << 20));
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(5000, 1)).isOk());
  std::vector<uint8_t> out(10);
  REQUIRE(f.store->read(id, 0, out).isOk());
  flipBit(extentPath(f.options.dir, 0), 71);  // in the header's bucket name
  // Until the damage is found, a client read checks its blocks against the CRCs verified
  // before the flip: the payload is intact (docs/chunkstore-format.md, "Block CRC cache").
  CHECK(f.store->read(id, 0, out).isOk());
  CHECK(f.store->describe(id).error().code() == Status::Code::kCorruption);
  CHECK(f.store->readFromDrive(id, 0, out).code() == Status::Code::kCorruption);
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{id});
  // Found: every read now sees the damaged header, repair's check of the suspect too.
  CHECK(f.store->read(id, 0, out).code() == Status::Code::kCorruption);
}

TEST_CASE("A blob removed and stored again is read with its new CRCs") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto engine = makeUringEngine();
  StoreFixture f(*engine, driveReads(32 << 20));
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(6000, 1)).isOk());
  std::vector<uint8_t> out(6000);
  REQUIRE(readVia(*f.store, async, id, 0, out).isOk());
  REQUIRE(f.store->remove(id).isOk());
  auto second = randomBytes(6000, 2);
  REQUIRE(f.store->put(descriptor(id), second).isOk());
  REQUIRE(readVia(*f.store, async, id, 0, out).isOk());
  CHECK(out == second);
}

TEST_CASE("Ranged reads through the page cache land in place and return the exact bytes") {
  auto real = makeUringEngine();
  ReadCounter counter(real.get());
  StoreFixture f(counter);  // cached_reads: through the page cache
  BlobId id = makeId(1);
  const auto data = randomBytes(100'000, 1);  // 25 blocks, the last one partial (1,696 bytes)
  REQUIRE(f.store->put(descriptor(id), data).isOk());
  std::vector<uint8_t> buf;
  REQUIRE(f.store->read(id, 0, unaligned(buf, 10)).isOk());  // caches the CRCs

  const auto readsExactly = [&](uint64_t off, uint64_t len, uint64_t disk_bytes) {
    INFO("range " << off << "+" << len);
    auto out = unaligned(buf, len);
    counter.reset();
    REQUIRE(f.store->read(id, off, out).isOk());
    CHECK(std::equal(out.begin(), out.end(), data.begin() + off));
    CHECK(counter.ios == 1);
    CHECK(counter.bytes == disk_bytes);
  };
  // Partial blocks at both ends: blocks 1 to 10, no 4 KiB rounding beyond them.
  readsExactly(5000, 40'000, 11 * 4096 - 4096);
  // Whole blocks into an unaligned buffer.
  readsExactly(8192, 8192, 8192);
  // Up to the payload's end, whose last block is partial.
  readsExactly(100, 100'000 - 100, 100'000);
  // Within one block (not in place: that block, verified, then its bytes copied).
  readsExactly(4100, 10, 4096);

}

TEST_CASE("Random ranges read in place return the exact bytes, for every block size") {
  const uint32_t block_size = GENERATE(512u, 4096u, 65536u);
  INFO("block size " << block_size);
  auto engine = makeUringEngine();
  ChunkStoreOptions o;
  o.block_size = block_size;
  StoreFixture f(*engine, o);  // cached_reads: through the page cache
  BlobId id = makeId(1);
  const auto data = randomBytes(300'001, 2);
  REQUIRE(f.store->put(descriptor(id), data).isOk());
  std::vector<uint8_t> buf;
  REQUIRE(f.store->read(id, 0, unaligned(buf, 10)).isOk());  // caches the CRCs
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    const uint64_t off = rng() % data.size();
    const uint64_t len = 1 + rng() % (data.size() - off);
    auto out = unaligned(buf, len);
    REQUIRE(f.store->read(id, off, out).isOk());
    REQUIRE(std::equal(out.begin(), out.end(), data.begin() + off));
    // readIfCached takes the same path on the event loop (the pages are cached now).
    std::fill(out.begin(), out.end(), uint8_t{0});
    REQUIRE(f.store->readIfCached(id, off, out));
    REQUIRE(std::equal(out.begin(), out.end(), data.begin() + off));
  }
  CHECK(f.store->stats()->crc_cache_misses <= 2);  // all but the first found the CRCs
}

TEST_CASE("A flipped bit in a block read in place or in an edge block is kCorruption") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(64 * 1024, 1)).isOk());
  std::vector<uint8_t> buf;
  REQUIRE(f.store->read(id, 0, unaligned(buf, 10)).isOk());  // caches the CRCs
  uint64_t block = GENERATE(1, 5, 9);  // the first edge, inside, the last edge
  INFO("block " << block);
  flipBit(extentPath(f.options.dir, 0), 4096 + block * 4096 + 100);
  Status st = f.store->read(id, 4096 + 50, unaligned(buf, 8 * 4096));  // blocks 1 to 9
  CHECK(st.code() == Status::Code::kCorruption);
  CHECK(st.message().find(fmt::format("block {}", block)) != std::string::npos);
}

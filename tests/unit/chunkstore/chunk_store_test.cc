#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "common/filling_fs.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

namespace {

std::vector<uint8_t> readRange(ChunkStore& store, const BlobId& id, uint64_t offset,
                               size_t len, bool async = false) {
  std::vector<uint8_t> out(len);
  Status st = readVia(store, async, id, offset, out);
  INFO(st.toString());
  REQUIRE(st.isOk());
  return out;
}

}  // namespace

TEST_CASE("Blobs of every size round-trip through put and read on both engines") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  INFO("engine " << engine_name);
  auto engine = makeEngine(engine_name);
  StoreFixture f(*engine);
  const std::vector<size_t> sizes = {0, 1, 4095, 4096, 4097, (1 << 20) + 3};
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto data = randomBytes(sizes[i], i + 1);
    REQUIRE(f.store->put(descriptor(makeId(i)), data).isOk());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    INFO("size " << sizes[i]);
    CHECK(readRange(*f.store, makeId(i), 0, sizes[i]) == randomBytes(sizes[i], i + 1));
    auto info = f.store->stat(makeId(i));
    REQUIRE(info.has_value());
    CHECK(info->length == sizes[i]);
    CHECK(info->created_unix_nanos == f.clock.nowUnixNanos());
  }
}

namespace {

// Counts the sizes of the writes that reach the engine.
class WriteSizes final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    {
      std::lock_guard lock(mu);
      sizes.push_back(data.size());
    }
    return target_->pwrite(fd, data, offset);
  }
  std::vector<size_t> take() {
    std::lock_guard lock(mu);
    return std::exchange(sizes, {});
  }
  std::mutex mu;
  std::vector<size_t> sizes;
};

}  // namespace

TEST_CASE("Large page-aligned payloads are written in place, as two writes, and read back") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  INFO("engine " << engine_name);
  auto inner = makeEngine(engine_name);
  // The wrapper has no asynchronous path: the writes come to its pwrite, one each.
  WriteSizes engine(inner.get());
  StoreFixture f(engine);
  REQUIRE(f.store->put(descriptor(makeId(100)), randomBytes(10, 100)).isOk());  // the extent
  (void)engine.take();
  struct Case {
    size_t size;
    size_t skew;  // bytes past a 4 KiB boundary where the payload starts
    std::vector<size_t> writes;
  };
  const std::vector<Case> cases = {
      {64 << 10, 0, {4096, 64 << 10}},             // in place: header region, then payload
      {1 << 20, 0, {4096, 1 << 20}},               // in place
      {(1 << 20) + 4096, 0, {4096, (1 << 20) + 4096}},
      {(64 << 10) - 4096, 0, {4096 + (60 << 10)}},  // under kInPlaceMin: one copied image
      {(64 << 10) + 1, 0, {4096 + (68 << 10)}},     // not whole blocks: copied
      {1 << 20, 16, {4096 + (1 << 20)}},            // not aligned in memory: copied
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO("case " << i << ": " << c.size << " bytes at +" << c.skew);
    auto data = randomBytes(c.size, i + 1);
    std::vector<uint8_t> padded(c.skew, 0);
    padded.insert(padded.end(), data.begin(), data.end());
    auto buf = pageAlignedCopy(padded);
    REQUIRE(f.store->put(descriptor(makeId(i)), buf.span().subspan(c.skew)).isOk());
    CHECK(engine.take() == c.writes);
  }
  auto check = [&] {
    for (size_t i = 0; i < cases.size(); ++i) {
      INFO("case " << i);
      const auto want = randomBytes(cases[i].size, i + 1);
      CHECK(readRange(*f.store, makeId(i), 0, want.size()) == want);
      CHECK(readRange(*f.store, makeId(i), 0, want.size(), /*async=*/true) == want);
    }
  };
  check();
  auto before = f.store->stats();
  REQUIRE(f.reopen().isOk());  // recovery reads the headers and recounts the bytes
  check();
  auto after = f.store->stats();
  REQUIRE(before);
  REQUIRE(after);
  CHECK(after->disk_bytes == before->disk_bytes);
  CHECK(after->payload_bytes == before->payload_bytes);
}

TEST_CASE("describe returns the descriptor stored in the blob's header, flags included") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobDescriptor desc = descriptor(makeId(7));
  desc.ec = {4, 2};
  desc.stripe_data_len = 12345;
  desc.bucket = "bkt";
  desc.key = "dir/obj\xff";
  desc.flags = kBlobFlagLastStripe;
  REQUIRE(f.store->put(desc, randomBytes(20000, 3)).isOk());
  REQUIRE(f.store->put(descriptor(makeId(8)), randomBytes(10, 4)).isOk());
  auto got = f.store->describe(makeId(7));
  REQUIRE(got.has_value());
  CHECK(*got == desc);
  auto plain = f.store->describe(makeId(8));
  REQUIRE(plain.has_value());
  CHECK(plain->flags == 0);
  CHECK(f.store->describe(makeId(9)).error().code() == Status::Code::kNotFound);
}

TEST_CASE("Ranged reads at odd offsets crossing block boundaries return the exact bytes") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  auto block_size = GENERATE(as<uint32_t>{}, 4096u, 1536u, 65536u);
  const bool async = GENERATE(false, true);
  INFO("engine " << engine_name << ", block size " << block_size << (async ? ", readAsync" : ""));
  auto engine = makeEngine(engine_name);
  ChunkStoreOptions opts;
  opts.block_size = block_size;
  StoreFixture f(*engine, opts);
  const size_t size = 300'001;
  auto data = randomBytes(size, 99);
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), data).isOk());
  const std::vector<std::pair<uint64_t, size_t>> ranges = {
      {0, 1},       {1, 4095},    {4095, 2},      {4095, 8193},  {1535, 3},
      {65535, 2},   {70000, 1},   {100'003, 90'001}, {size - 1, 1}, {size - 5000, 5000},
      {size, 0},    {0, size},    {12345, 0},     {200'000, 100'001}};
  for (auto [off, len] : ranges) {
    INFO("range " << off << "+" << len);
    auto got = readRange(*f.store, id, off, len, async);
    CHECK(std::equal(got.begin(), got.end(), data.begin() + static_cast<ptrdiff_t>(off)));
  }
}

TEST_CASE("Reading past the end of a blob is an invalid argument") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(3);
  REQUIRE(f.store->put(descriptor(id), randomBytes(5000, 3)).isOk());
  std::vector<uint8_t> out(10);
  CHECK(f.store->read(id, 4995, out).code() == Status::Code::kInvalidArgument);
  CHECK(f.store->read(id, 5001, std::span<uint8_t>(out.data(), 0)).code() ==
        Status::Code::kInvalidArgument);
  CHECK(f.store->read(id, UINT64_MAX - 2, out).code() == Status::Code::kInvalidArgument);
  CHECK(f.store->read(id, 4990, out).isOk());
  CHECK(f.store->read(makeId(4), 0, out).code() == Status::Code::kNotFound);
}

TEST_CASE("A second put of an existing id is kAlreadyExists and keeps the first bytes") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(7);
  auto first = randomBytes(10'000, 1);
  REQUIRE(f.store->put(descriptor(id), first).isOk());
  Status again = f.store->put(descriptor(id), randomBytes(20'000, 2));
  CHECK(again.code() == Status::Code::kAlreadyExists);
  CHECK(readRange(*f.store, id, 0, first.size()) == first);
  auto stats = f.store->stats();
  REQUIRE(stats.has_value());
  CHECK(stats->blobs == 1);
  CHECK(stats->payload_bytes == first.size());
}

TEST_CASE("Concurrent puts of one id: exactly one wins and its bytes are stored") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(8);
  std::vector<Status> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      results[t] = f.store->put(descriptor(id), randomBytes(8192, 100 + t));
    });
  }
  for (auto& th : threads) th.join();
  int winners = 0;
  int winner = -1;
  for (int t = 0; t < 8; ++t) {
    if (results[t].isOk()) {
      ++winners;
      winner = t;
    } else {
      CHECK(results[t].code() == Status::Code::kAlreadyExists);
    }
  }
  REQUIRE(winners == 1);
  CHECK(readRange(*f.store, id, 0, 8192) == randomBytes(8192, 100 + winner));
}

TEST_CASE("Concurrent puts of distinct ids from 8 threads are all readable") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  auto engine = makeEngine(engine_name);
  ChunkStoreOptions opts;
  opts.extent_size = 256 << 10;  // force extent rolls under contention
  StoreFixture f(*engine, opts);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int n = t * kPerThread + i;
        if (!f.store->put(descriptor(makeId(n)), randomBytes(1000 + 517 * n, n)).isOk()) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(failures == 0);
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int n = t * kPerThread + i;
        size_t len = 1000 + 517 * n;
        std::vector<uint8_t> out(len);
        if (!f.store->read(makeId(n), 0, out).isOk() || out != randomBytes(len, n)) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(f.store->stats()->blobs == kThreads * kPerThread);
}

TEST_CASE("Bucket names over 255 bytes and keys over 1024 bytes are rejected") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  auto d = descriptor(makeId(1));
  d.bucket = std::string(256, 'b');
  CHECK(f.store->put(d, randomBytes(10, 1)).code() == Status::Code::kInvalidArgument);
  d.bucket = std::string(255, 'b');
  d.key = std::string(1025, 'k');
  CHECK(f.store->put(d, randomBytes(10, 1)).code() == Status::Code::kInvalidArgument);
  d.key = std::string(1024, 'k');
  CHECK(f.store->put(d, randomBytes(10, 1)).isOk());
  CHECK(readRange(*f.store, d.id, 0, 10) == randomBytes(10, 1));
}

TEST_CASE("Blobs survive reopening the store, list in id order and counts are recomputed") {
  auto engine = makeUringEngine();
  ChunkStoreOptions opts;
  opts.extent_size = 64 << 10;
  StoreFixture f(*engine, opts);
  std::vector<BlobId> ids;
  uint64_t bytes = 0;
  for (int n = 0; n < 20; ++n) {
    ids.push_back(makeId(n, n % 3, n % 6));
    REQUIRE(f.store->put(descriptor(ids.back()), randomBytes(3000 * n + 1, n)).isOk());
    bytes += 3000 * n + 1;
  }
  REQUIRE(f.reopen().isOk());
  for (int n = 0; n < 20; ++n) {
    CHECK(readRange(*f.store, ids[n], 0, 3000 * n + 1) == randomBytes(3000 * n + 1, n));
  }
  std::sort(ids.begin(), ids.end());
  auto listed = f.store->list(std::nullopt, 100);
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == ids.size());
  for (size_t i = 0; i < ids.size(); ++i) CHECK((*listed)[i].id == ids[i]);
  auto stats = f.store->stats();
  REQUIRE(stats.has_value());
  CHECK(stats->blobs == 20);
  CHECK(stats->payload_bytes == bytes);
  CHECK(stats->capacity_bytes > 0);
  CHECK(stats->available_bytes <= stats->capacity_bytes);

  // New writes go to a fresh extent, never after bytes of unknown state.
  std::error_code ec;
  size_t extents_before = 0;
  for (auto& e : std::filesystem::directory_iterator(f.options.dir + "/extents", ec)) {
    (void)e;
    ++extents_before;
  }
  BlobId fresh = makeId(1000);
  REQUIRE(f.store->put(descriptor(fresh), randomBytes(777, 5)).isOk());
  CHECK(readRange(*f.store, fresh, 0, 777) == randomBytes(777, 5));
  CHECK(std::filesystem::exists(extentPath(f.options.dir, extents_before)));
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stats()->blobs == 21);
  CHECK(readRange(*f.store, fresh, 0, 777) == randomBytes(777, 5));
}

TEST_CASE("Remove makes a blob kNotFound, lowers the stats and punches its hole") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  auto engine = makeEngine(engine_name);
  StoreFixture f(*engine);
  BlobId keep = makeId(1);
  BlobId gone = makeId(2);
  REQUIRE(f.store->put(descriptor(keep), randomBytes(100'000, 1)).isOk());
  REQUIRE(f.store->put(descriptor(gone), randomBytes(2 << 20, 2)).isOk());
  auto before = f.store->stats();
  int64_t allocated_before = allocatedBytes(extentPath(f.options.dir, 0));

  REQUIRE(f.store->remove(gone).isOk());
  std::vector<uint8_t> out(10);
  CHECK(f.store->read(gone, 0, out).code() == Status::Code::kNotFound);
  CHECK(f.store->stat(gone).error().code() == Status::Code::kNotFound);
  CHECK(f.store->remove(gone).code() == Status::Code::kNotFound);
  auto after = f.store->stats();
  CHECK(after->blobs == before->blobs - 1);
  CHECK(after->payload_bytes == before->payload_bytes - (2 << 20));
  // ext4/xfs/btrfs free the blocks; the 2 MiB blob held at least that much.
  CHECK(allocatedBytes(extentPath(f.options.dir, 0)) <= allocated_before - (2 << 20));
  CHECK(readRange(*f.store, keep, 0, 100'000) == randomBytes(100'000, 1));

  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stats()->blobs == 1);
  CHECK(f.store->read(gone, 0, out).code() == Status::Code::kNotFound);
  // The id may be stored again after removal.
  CHECK(f.store->put(descriptor(gone), randomBytes(50, 3)).isOk());
}

TEST_CASE("List pages through blobs in id order with `after`") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  std::vector<BlobId> ids;
  for (int n = 0; n < 25; ++n) {
    ids.push_back(makeId(n));
    REQUIRE(f.store->put(descriptor(ids.back()), randomBytes(n, n)).isOk());
  }
  std::sort(ids.begin(), ids.end());
  std::vector<BlobId> seen;
  std::optional<BlobId> after;
  for (;;) {
    auto page = f.store->list(after, 10);
    REQUIRE(page.has_value());
    if (page->empty()) break;
    CHECK(page->size() <= 10);
    for (auto& info : *page) seen.push_back(info.id);
    after = page->back().id;
  }
  CHECK(seen == ids);
  CHECK(f.store->list(std::nullopt, 0)->empty());
  // `after` need not be a stored id.
  BlobId between = ids[4];
  between.fragment += 1;
  auto page = f.store->list(between, 1);
  REQUIRE(page->size() == 1);
  CHECK((*page)[0].id == ids[5]);
  CHECK((*page)[0].length == f.store->stat(ids[5])->length);
}

TEST_CASE("Blobs larger than the extent size roll to new extents and stay readable") {
  auto engine = makeUringEngine();
  ChunkStoreOptions opts;
  opts.extent_size = 16 << 10;
  StoreFixture f(*engine, opts);
  for (int n = 0; n < 6; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(10'000 * (n + 1), n)).isOk());
  }
  for (int n = 0; n < 6; ++n) {
    CHECK(readRange(*f.store, makeId(n), 0, 10'000 * (n + 1)) == randomBytes(10'000 * (n + 1), n));
  }
  CHECK(std::filesystem::exists(extentPath(f.options.dir, 5)));
}

namespace {

// The descriptors this process has open on files under `dir` (from /proc/self/fd).
std::vector<std::string> openFilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && target.starts_with(dir + "/")) out.push_back(target);
  }
  return out;
}

}  // namespace

TEST_CASE("A drive keeps at most its bound of extent descriptors open, reopening what it closed") {
  const std::string engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  const bool async = GENERATE(false, true);
  INFO("engine " << engine_name << (async ? ", readAsync" : ""));
  auto engine = makeEngine(engine_name);
  ChunkStoreOptions opts;
  opts.extent_size = 16 << 10;  // 10,000-byte blobs: one extent each
  opts.extent_descriptors = 4;
  StoreFixture f(*engine, opts);
  const std::string extents = std::filesystem::canonical(f.options.dir + "/extents").string();
  constexpr int kBlobs = 12;
  for (int n = 0; n < kBlobs; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(10'000, n)).isOk());
    CHECK(openFilesUnder(extents).size() <= 4);
  }
  REQUIRE(std::filesystem::exists(extentPath(f.options.dir, kBlobs - 1)));
  // Half an extent (a 4 KiB header and a 4 KiB block): the next such put fills the rest.
  REQUIRE(f.store->put(descriptor(makeId(100)), randomBytes(1'000, 100)).isOk());
  for (int round = 0; round < 2; ++round) {  // the second round reopens every extent
    for (int n = 0; n < kBlobs; ++n) {
      CHECK(readRange(*f.store, makeId(n), 0, 10'000, async) == randomBytes(10'000, n));
      CHECK(openFilesUnder(extents).size() <= 4);
      auto s = f.store->stats();
      REQUIRE(s);
      CHECK(s->open_descriptors == openFilesUnder(extents).size());
    }
  }
  auto s = f.store->stats();
  REQUIRE(s);
  // Each read after the first three closed one (puts closed the extents they left).
  CHECK(s->descriptors_closed >= 2 * kBlobs);
  // A put after all that lands in the active extent, whose descriptor was never closed.
  REQUIRE(f.store->put(descriptor(makeId(101)), randomBytes(1'000, 101)).isOk());
  CHECK_FALSE(std::filesystem::exists(extentPath(f.options.dir, kBlobs + 1)));
  for (int n : {100, 101}) {
    CHECK(readRange(*f.store, makeId(n), 0, 1'000, async) == randomBytes(1'000, n));
  }
}

TEST_CASE("An extent descriptor held by a pinned range is not closed to make room") {
  auto engine = makeUringEngine();
  ChunkStoreOptions opts;
  opts.extent_size = 16 << 10;
  opts.extent_descriptors = 2;
  StoreFixture f(*engine, opts);
  for (int n = 0; n < 6; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(10'000, n)).isOk());
  }
  CHECK(readRange(*f.store, makeId(0), 0, 10'000) == randomBytes(10'000, 0));
  auto range = f.store->pinIfCached(makeId(0), 0, 10'000);
  REQUIRE(range);
  const std::string held = std::filesystem::read_symlink(
      "/proc/self/fd/" + std::to_string(range->fd)).string();
  CHECK(held == std::filesystem::canonical(extentPath(f.options.dir, 0)).string());
  for (int n = 1; n < 5; ++n) {  // each opens a descriptor: the bound is met every time
    CHECK(readRange(*f.store, makeId(n), 0, 10'000) == randomBytes(10'000, n));
  }
  // Still open, still the same file: no later open was given its number.
  CHECK(std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(range->fd)).string() ==
        held);
  CHECK(rangeBytes(*range) == randomBytes(10'000, 0));
  // The table kept it: reading its extent again uses it, and opens no second one.
  CHECK(readRange(*f.store, makeId(0), 0, 10'000) == randomBytes(10'000, 0));
  CHECK(std::ranges::count(openFilesUnder(std::filesystem::path(held).parent_path()), held) == 1);
  auto s = f.store->stats();
  REQUIRE(s);
  CHECK(s->open_descriptors == 3);  // the pinned one, the active extent's, the last read's
  range.reset();  // its descriptor closes with the next open
  CHECK(readRange(*f.store, makeId(1), 0, 10'000) == randomBytes(10'000, 1));
  s = f.store->stats();
  REQUIRE(s);
  CHECK(s->open_descriptors == 2);
}

TEST_CASE("A drive whose blob index is gone refuses to open and removes nothing") {
  // Recovery removes what its index does not know of: on an empty index that would be
  // every extent. The index records the next extent number before each extent is made, so
  // extents beyond it give the lost index away.
  auto engine = makeUringEngine();
  ChunkStoreOptions opts;
  opts.extent_size = 64 << 10;
  StoreFixture f(*engine, opts);
  for (int n = 0; n < 8; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(20000, n)).isOk());
  }
  f.store.reset();
  auto extents = [&] {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(f.options.dir + "/extents")) {
      if (e.path().extension() == ".ext") names.insert(e.path().filename().string());
    }
    return names;
  };
  const auto before = extents();
  REQUIRE(before.size() >= 2);
  std::filesystem::remove_all(f.options.dir + "/index");
  Status st = f.reopen();
  CHECK(st.code() == Status::Code::kCorruption);
  CHECK(st.message().find("never recorded") != std::string::npos);
  CHECK(extents() == before);
}

TEST_CASE("An extent is presized (a hole), and cut after its last blob when reopened") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  auto engine = makeEngine(engine_name);
  ChunkStoreOptions opts;
  opts.extent_size = 8 << 20;
  StoreFixture f(*engine, opts);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(100'000, 1)).isOk());
  REQUIRE(f.store->put(descriptor(makeId(2)), randomBytes(5'000, 2)).isOk());
  const std::string path = extentPath(f.options.dir, 0);
  // Appends do not grow the file (ext4 serialises O_DIRECT writes that do), and the
  // presized tail allocates nothing.
  CHECK(std::filesystem::file_size(path) == (8u << 20));
  const uint64_t on_disk = f.store->stats()->disk_bytes;
  CHECK(on_disk >= 100'000 + 5'000 + 2 * 4096);  // header regions and padded payloads
  CHECK(allocatedBytes(path) <= static_cast<int64_t>(on_disk + 2 * 4096));

  REQUIRE(f.reopen().isOk());
  CHECK(std::filesystem::file_size(path) == on_disk);
  CHECK(readRange(*f.store, makeId(1), 0, 100'000) == randomBytes(100'000, 1));
  CHECK(readRange(*f.store, makeId(2), 0, 5'000) == randomBytes(5'000, 2));
}

TEST_CASE("A drive whose blob index found its disk full takes writes again once there is room") {
  auto engine = makePosixEngine();
  TempDir dir;
  auto fs = std::make_shared<granary::testing::FillingFileSystem>();
  RocksResources resources(RocksBudget{8 << 20, 8 << 20}, fs);
  ManualClock clock(1'700'000'000'000'000'000);
  ChunkStoreOptions opts;
  opts.dir = dir.path() + "/drive";
  auto opened = openChunkStore(opts, *engine, resources, clock);
  REQUIRE(opened.has_value());
  auto& store = **opened;
  const auto data = randomBytes(10'000, 3);
  REQUIRE(store.put(descriptor(makeId(1)), data).isOk());

  fs->full = granary::testing::FillingFileSystem::kAll;  // its WAL cannot grow
  CHECK_FALSE(store.put(descriptor(makeId(2)), data).isOk());
  fs->full = granary::testing::FillingFileSystem::kNone;
  // RocksDB retries each second and resumes; the store waits out its own 5 s
  // "full" back-off by its clock.
  bool resumed = false;
  for (int i = 0; i < 60 && !resumed; ++i) {
    clock.advance(6'000'000'000);
    resumed = store.put(descriptor(makeId(3)), data).isOk();
    if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  REQUIRE(resumed);
  CHECK(store.remove(makeId(1)).isOk());
  CHECK(readRange(store, makeId(3), 0, 10'000) == data);
}

TEST_CASE("Opening a store with an unusable block size is an invalid argument") {
  auto engine = makePosixEngine();
  TempDir dir;
  RocksResources resources(RocksBudget{8 << 20, 8 << 20});
  ManualClock clock(1);
  ChunkStoreOptions opts;
  opts.dir = dir.path();
  opts.block_size = 1000;
  auto s = openChunkStore(opts, *engine, resources, clock);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().code() == Status::Code::kInvalidArgument);
}

TEST_CASE("readAsync on the io_uring engine completes on the engine's thread, not the caller's") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  const auto data = randomBytes(200'000, 5);
  REQUIRE(f.store->put(descriptor(makeId(1)), data).isOk());
  for (uint64_t offset : {uint64_t{0}, uint64_t{150'000}}) {  // one I/O, then two
    INFO("offset " << offset);
    std::vector<uint8_t> out(1000);
    std::promise<std::thread::id> ran_on;
    Status st = waitAsync([&](IoDone done) {
      f.store->readAsync(makeId(1), offset, out, [&ran_on, done = std::move(done)](Status s) mutable {
        ran_on.set_value(std::this_thread::get_id());
        done(std::move(s));
      });
    });
    REQUIRE(st.isOk());
    CHECK(ran_on.get_future().get() != std::this_thread::get_id());
    CHECK(std::equal(out.begin(), out.end(), data.begin() + static_cast<ptrdiff_t>(offset)));
  }
}

namespace {

// Once closed, holds every fdatasync until release(): what a slow drive's sync looks like
// to the store.
class GatedSyncEngine final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Status fdatasync(int fd) override {
    {
      std::unique_lock lock(mu_);
      if (!open_) {
        ++waiting_;
        cv_.notify_all();
        // At most 30 s: a put that wrongly waits for its sync then makes the test fail
        // (its callback runs before release()), not hang.
        cv_.wait_for(lock, std::chrono::seconds(30), [&] { return open_; });
      }
    }
    return target_->fdatasync(fd);
  }
  // Writes keep the target's asynchronous path; counted once the store has had their
  // completion.
  void writeAsync(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                  uint64_t offset, IoDone done) override {
    target_->writeAsync(fd, head, tail, offset, [this, done = std::move(done)](Status st) mutable {
      done(std::move(st));
      std::lock_guard lock(mu_);
      ++writes_;
      cv_.notify_all();
    });
  }
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  // Bounded waits too: a test that fails here still goes on to release().
  bool waitForSyncer() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return waiting_ > 0; });
  }
  bool waitForWrites(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return writes_ >= n; });
  }
  void release() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  int writes_ = 0;
  bool open_ = true;
};

}  // namespace

TEST_CASE("A caller's callback that throws does not leave its operation open for ever") {
  for (auto make : {&makePosixEngine, &makeUringEngine}) {
    auto engine = make();
    auto f = std::make_shared<StoreFixture>(*engine);
    const auto data = randomBytes(20'000, 8);
    REQUIRE(f->store->put(descriptor(makeId(1)), data).isOk());
    std::atomic<int> called{0};
    f->store->putAsync(descriptor(makeId(2)), data, [&called](Status) {
      ++called;
      throw std::runtime_error("a caller's bug");
    });
    std::vector<uint8_t> out(1000);
    try {  // the posix engine answers on this thread: the exception comes back here
      f->store->readAsync(makeId(1), 0, out, [&called](Status) {
        ++called;
        throw std::runtime_error("a caller's bug");
      });
    } catch (const std::runtime_error&) {
    }
    // The store's destructor waits for its operations to end: it must return.
    REQUIRE(closesWithin(f, std::chrono::seconds(10)));
    CHECK(called == 2);
  }
}

TEST_CASE("putAsync returns before the sync, puts queued behind a slow sync share the next one") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  auto inner = makeEngine(engine_name);
  GatedSyncEngine engine(inner.get());
  StoreFixture f(engine);
  constexpr int kPuts = 24;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> results;
  std::vector<std::vector<uint8_t>> payloads(kPuts);  // valid until each put's callback
  auto put = [&](int n) {
    payloads[n] = randomBytes(5000 + 999 * n, n);
    f.store->putAsync(descriptor(makeId(n)), payloads[n], [&](Status st) {
      std::lock_guard lock(mu);
      results.push_back(std::move(st));
      cv.notify_all();
    });
  };
  // The first put creates the extent (its directory sync must not wait at the gate).
  REQUIRE(f.store->put(descriptor(makeId(kPuts)), randomBytes(100, kPuts)).isOk());
  engine.close();
  put(0);
  CHECK(engine.waitForSyncer());  // the first batch is stuck in its fdatasync
  for (int n = 1; n < kPuts; ++n) put(n);  // none of these calls waits for it
  CHECK(engine.waitForWrites(kPuts + 1));  // every write is done and its put queued for the next sync
  {
    std::lock_guard lock(mu);
    CHECK(results.empty());  // nothing is acknowledged before its sync
  }
  // Not yet durable, so not readable either.
  std::vector<uint8_t> out(10);
  CHECK(f.store->read(makeId(1), 0, out).isNotFound());
  engine.release();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return results.size() == kPuts; });
  }
  for (const Status& st : results) CHECK(st.isOk());
  CHECK(f.store->read(makeId(1), 0, out).isOk());
  auto stats = f.store->stats();
  REQUIRE(stats);
  CHECK(stats->committed_puts == kPuts + 1);
  // After the first put's own batch, the held sync had one batch and everything queued
  // behind it went in the next one.
  CHECK(stats->commit_batches == 3);
  for (int n = 0; n < kPuts; ++n) {
    CHECK(readRange(*f.store, makeId(n), 0, 5000 + 999 * n) == randomBytes(5000 + 999 * n, n));
  }
}

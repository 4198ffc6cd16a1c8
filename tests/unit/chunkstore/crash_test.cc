// Crash consistency: a simulated process death at every named step of the write order,
// followed by a power loss that drops everything not yet synced (PowerLossEngine), must
// leave every acknowledged blob readable and verified, no half-written blob readable, and
// no orphan bytes after the next open. Also: group commit, and recovery's reclamation.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "extent_set.h"
#include "power_loss_engine.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

namespace {

// Bytes allocated by all extent files of a drive (what `du` and `df` see).
int64_t extentBytes(const std::string& drive_dir) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(drive_dir + "/extents")) {
    total += allocatedBytes(e.path().string());
  }
  return total;
}

// The store's own idea of its live bytes must match the filesystem's: exactly, but for
// the filesystem's own metadata (an ext4 extent-tree block for a file fragmented by many
// holes counts in st_blocks too): at most two blocks per extent file.
void checkSpaceMatchesDisk(StoreFixture& f) {
  auto stats = f.store->stats();
  REQUIRE(stats);
  int64_t files = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator(f.options.dir + "/extents")) {
    ++files;
  }
  const int64_t allocated = extentBytes(f.options.dir);
  const int64_t live = static_cast<int64_t>(stats->disk_bytes + stats->reserved_bytes);
  INFO("store disk_bytes " << stats->disk_bytes << " + reserved " << stats->reserved_bytes
                           << ", " << files << " extent files allocate " << allocated);
  CHECK(allocated >= live);
  CHECK(allocated <= live + files * 2 * 4096);
}

// Writes 64 KiB past the end of extent file `path`: bytes no index entry covers, as a
// crash between a write and its commit leaves them.
void appendOrphanBytes(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  const off_t end = ::lseek(fd, 0, SEEK_END);
  std::vector<uint8_t> junk(64 * 1024, 0xAB);
  REQUIRE(::pwrite(fd, junk.data(), junk.size(), end) == static_cast<ssize_t>(junk.size()));
  ::close(fd);
}

void checkReadsBack(ChunkStore& store, const std::map<uint64_t, std::vector<uint8_t>>& blobs) {
  for (const auto& [n, data] : blobs) {
    std::vector<uint8_t> out(data.size());
    Status st = store.read(makeId(n), 0, out);
    INFO("blob " << n << ": " << st.toString());
    REQUIRE(st.isOk());
    CHECK(out == data);
  }
}

// Spare zeroing on small extents: spares are prepared and used within a few puts.
ChunkStoreOptions spareOptions() {
  ChunkStoreOptions o;
  o.extent_size = 256 * 1024;
  o.spare_zero_rate = 1ull << 30;
  return o;
}

std::string sparePath(const ChunkStoreOptions& o) { return o.dir + "/extents/spare.zero"; }

// Waits (up to 10 s) until the drive's spare extent is ready.
bool waitForSpare(const ChunkStoreOptions& o) {
  for (int i = 0; i < 1000 && !std::filesystem::exists(sparePath(o)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::filesystem::exists(sparePath(o));
}

// A fixture whose crash hook fires at one armed point: the engine then dies, as the
// process would.
struct CrashFixture {
  explicit CrashFixture(IoEngine& real, ChunkStoreOptions base = {})
      : engine(&real), f(engine, options(std::move(base))) {}

  ChunkStoreOptions options(ChunkStoreOptions o) {
    o.crash_point = [this](std::string_view point) {
      std::lock_guard lock(mu);  // the spare zeroer's thread calls it too
      if (armed != point) return false;
      armed.clear();
      fired = true;
      engine.crash();
      return true;
    };
    return o;
  }
  void arm(std::string point) {
    std::lock_guard lock(mu);
    armed = std::move(point);
  }
  // The process is gone (its store closed, with whatever the dead engine refuses), the
  // power fails, and the process starts again on the same drive.
  void restart() {
    f.store.reset();
    engine.powerLoss();
    Status st = f.reopen();
    INFO(st.toString());
    REQUIRE(st.isOk());
  }

  // Declared before `f`: the hook may run while `f` is built.
  std::mutex mu;
  std::string armed;  // guarded by mu
  std::atomic<bool> fired{false};
  PowerLossEngine engine;
  StoreFixture f;
};

}  // namespace

TEST_CASE("A crash at any step of put or remove loses nothing acknowledged") {
  const std::string point = GENERATE(as<std::string>{}, "extent.after_persist_next",
                                     "extent.after_create", "extent.after_resize",
                                     "put.after_write",
                                     "put.after_sync", "put.after_index",
                                     "remove.after_index");
  auto real = makeEngine(GENERATE(as<std::string>{}, "posix", "io_uring"));
  CrashFixture c(*real);
  std::map<uint64_t, std::vector<uint8_t>> acked;
  for (uint64_t n = 1; n <= 6; ++n) {
    acked[n] = randomBytes(1000 + 7000 * n, n);
    REQUIRE(c.f.store->put(descriptor(makeId(n)), acked[n]).isOk());
  }
  REQUIRE(c.f.store->remove(makeId(6)).isOk());
  acked.erase(6);
  // A restart makes the next put create a new extent, so extent points are reached too.
  c.restart();

  c.arm(point);
  // Copied into the blob image, or (a large page-aligned payload) written in place.
  const bool in_place = GENERATE(false, true);
  INFO((in_place ? "payload written in place" : "payload copied"));
  const auto doomed = randomBytes(in_place ? 128 << 10 : 50'000, 99);
  auto doomed_payload = pageAlignedCopy(doomed);
  if (point == "remove.after_index") {
    Status st = c.f.store->remove(makeId(3));
    CHECK(st.code() == Status::Code::kUnavailable);
  } else {
    Status st = c.f.store->put(descriptor(makeId(99)), doomed_payload.span());
    CHECK(st.code() == Status::Code::kUnavailable);
  }
  REQUIRE(c.fired);
  c.restart();

  if (point == "remove.after_index") {
    // The removal was durable before the crash: gone, and its bytes reclaimed.
    acked.erase(3);
    std::vector<uint8_t> out(10);
    CHECK(c.f.store->read(makeId(3), 0, out).code() == Status::Code::kNotFound);
  } else if (point == "put.after_index") {
    // Indexed before the crash (not acknowledged): it must then be whole and verified.
    std::vector<uint8_t> out(doomed.size());
    REQUIRE(c.f.store->read(makeId(99), 0, out).isOk());
    CHECK(out == doomed);
    acked[99] = doomed;
  } else {
    std::vector<uint8_t> out(10);
    CHECK(c.f.store->read(makeId(99), 0, out).code() == Status::Code::kNotFound);
  }
  checkReadsBack(*c.f.store, acked);
  checkSpaceMatchesDisk(c.f);
  auto listed = c.f.store->list(std::nullopt, 100);
  REQUIRE(listed);
  CHECK(listed->size() == acked.size());

  // The store keeps working after recovery.
  acked[100] = randomBytes(20'000, 100);
  REQUIRE(c.f.store->put(descriptor(makeId(100)), acked[100]).isOk());
  c.restart();
  checkReadsBack(*c.f.store, acked);
}

TEST_CASE("The power-loss harness catches a missing fdatasync") {
  // Negative control: an engine that forgets to sync data makes an indexed blob unreadable
  // after a power loss. If this stopped failing, the crash test above proves nothing.
  class NoDataSync final : public IoEngineWrapper {
   public:
    using IoEngineWrapper::IoEngineWrapper;
    Status fdatasync(int fd) override {
      if (std::filesystem::is_directory("/proc/self/fd/" + std::to_string(fd))) {
        return target_->fdatasync(fd);
      }
      return Status::ok();  // the bug
    }
  };
  auto real = makePosixEngine();
  PowerLossEngine power(real.get());
  NoDataSync broken(&power);
  StoreFixture f(broken);
  const auto data = randomBytes(30'000, 5);
  REQUIRE(f.store->put(descriptor(makeId(5)), data).isOk());
  power.powerLoss();
  REQUIRE(f.reopen().isOk());
  std::vector<uint8_t> out(data.size());
  Status st = f.store->read(makeId(5), 0, out);
  CHECK(st.code() == Status::Code::kCorruption);
}

TEST_CASE("Concurrent puts share fdatasyncs (group commit) and all read back") {
  class CountingEngine final : public IoEngineWrapper {
   public:
    using IoEngineWrapper::IoEngineWrapper;
    Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
      // Slow writes make puts overlap, as they do on a busy drive.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return target_->pwrite(fd, data, offset);
    }
    Status fdatasync(int fd) override {
      ++syncs;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return target_->fdatasync(fd);
    }
    std::atomic<int> syncs{0};
  };
  auto real = makeUringEngine();
  CountingEngine engine(real.get());
  StoreFixture f(engine);
  const int before = engine.syncs.load();  // directory syncs of the first extent
  constexpr int kThreads = 16;
  constexpr int kPerThread = 8;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        uint64_t n = static_cast<uint64_t>(t * 100 + i);
        if (!f.store->put(descriptor(makeId(n)), randomBytes(9000, n)).isOk()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  const int syncs = engine.syncs.load() - before;
  INFO("fdatasyncs for " << kThreads * kPerThread << " puts: " << syncs);
  CHECK(syncs < kThreads * kPerThread / 3);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      uint64_t n = static_cast<uint64_t>(t * 100 + i);
      auto expected = randomBytes(9000, n);
      std::vector<uint8_t> out(expected.size());
      REQUIRE(f.store->read(makeId(n), 0, out).isOk());
      CHECK(out == expected);
    }
  }
}

TEST_CASE("A failed group fdatasync fails every blob of the batch and retires the extent") {
  class FailingSync final : public IoEngineWrapper {
   public:
    using IoEngineWrapper::IoEngineWrapper;
    Status fdatasync(int fd) override {
      if (fail_next.exchange(false)) return Status::fromErrno(EIO, "injected fdatasync EIO");
      return target_->fdatasync(fd);
    }
    std::atomic<bool> fail_next{false};
  };
  auto real = makePosixEngine();
  FailingSync engine(real.get());
  StoreFixture f(engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(5000, 1)).isOk());
  engine.fail_next = true;
  CHECK(f.store->put(descriptor(makeId(2)), randomBytes(5000, 2)).code() ==
        Status::Code::kIoError);
  std::vector<uint8_t> out(10);
  CHECK(f.store->read(makeId(2), 0, out).code() == Status::Code::kNotFound);
  // The next blob goes to a fresh extent, never next to bytes of unknown state.
  REQUIRE(f.store->put(descriptor(makeId(3)), randomBytes(5000, 3)).isOk());
  CHECK(std::filesystem::exists(extentPath(f.options.dir, 1)));
  CHECK(f.store->read(makeId(1), 0, out).isOk());
  CHECK(f.store->read(makeId(3), 0, out).isOk());
}

TEST_CASE("Opening a drive reclaims orphan bytes and empty extents, space matches the disk") {
  auto engine = makePosixEngine();
  ChunkStoreOptions options;
  options.extent_size = 256 * 1024;  // a few blobs per extent
  StoreFixture f(*engine, options);
  std::map<uint64_t, std::vector<uint8_t>> kept;
  for (uint64_t n = 1; n <= 24; ++n) {
    auto data = randomBytes(30'000 + 1000 * n, n);
    REQUIRE(f.store->put(descriptor(makeId(n)), data).isOk());
    if (n % 3 != 0 && n > 8) kept[n] = std::move(data);
  }
  for (uint64_t n = 1; n <= 24; ++n) {
    if (!kept.contains(n)) REQUIRE(f.store->remove(makeId(n)).isOk());
  }
  checkSpaceMatchesDisk(f);
  // Orphans as a crash leaves them: bytes written past the last indexed blob of an extent.
  appendOrphanBytes(extentPath(f.options.dir, 3));
  const int64_t with_orphans = extentBytes(f.options.dir);
  REQUIRE(f.reopen().isOk());
  CHECK(extentBytes(f.options.dir) < with_orphans);
  CHECK(f.store->stats()->unreclaimed_extents == 0);
  checkSpaceMatchesDisk(f);
  // Extent 0 held blobs 1-5 only (all removed): it is gone.
  CHECK_FALSE(std::filesystem::exists(extentPath(f.options.dir, 0)));
  checkReadsBack(*f.store, kept);
}

TEST_CASE("Orphans that cannot be reclaimed are left for the next open: the drive opens") {
  // Removing, truncating and punching extents fail (a failing disk region): the drive
  // opens all the same, serves its blobs, and a later open reclaims what was left.
  class FailingReclaim final : public IoEngineWrapper {
   public:
    using IoEngineWrapper::IoEngineWrapper;
    Status remove(const std::string& path) override {
      if (failing && path.ends_with(".ext")) return Status::fromErrno(EIO, "injected");
      return target_->remove(path);
    }
    Status resize(int fd, uint64_t size) override {
      if (failing) return Status::fromErrno(EIO, "injected resize fault");
      return target_->resize(fd, size);
    }
    Status punchHole(int fd, uint64_t offset, uint64_t len) override {
      if (failing) return Status::fromErrno(EIO, "injected punch fault");
      return target_->punchHole(fd, offset, len);
    }
    std::atomic<bool> failing{false};
  };
  auto base = makePosixEngine();
  FailingReclaim engine(base.get());
  ChunkStoreOptions options;
  options.extent_size = 256 * 1024;
  StoreFixture f(engine, options);
  std::map<uint64_t, std::vector<uint8_t>> kept;
  for (uint64_t n = 1; n <= 24; ++n) {
    auto data = randomBytes(30'000 + 1000 * n, n);
    REQUIRE(f.store->put(descriptor(makeId(n)), data).isOk());
    if (n > 8) kept[n] = std::move(data);
  }
  for (uint64_t n = 1; n <= 8; ++n) REQUIRE(f.store->remove(makeId(n)).isOk());
  appendOrphanBytes(extentPath(f.options.dir, 3));  // as a crash leaves them
  const int64_t with_orphans = extentBytes(f.options.dir);
  engine.failing = true;
  REQUIRE(f.reopen().isOk());
  engine.failing = false;
  CHECK(std::filesystem::exists(extentPath(f.options.dir, 0)));  // held blobs 1-5 only
  CHECK(extentBytes(f.options.dir) == with_orphans);
  {  // every extent failed (each is cut to its last blob's end, extent 0 unlinked), and
     // the drive says so
    auto stats = f.store->stats();
    REQUIRE(stats);
    const std::filesystem::directory_iterator dir(f.options.dir + "/extents");
    const auto files = std::distance(begin(dir), end(dir));
    CHECK(files == 5);
    CHECK(stats->unreclaimed_extents == static_cast<uint64_t>(files));
  }
  checkReadsBack(*f.store, kept);
  REQUIRE(f.store->put(descriptor(makeId(100)), randomBytes(5000, 100)).isOk());
  kept[100] = randomBytes(5000, 100);
  REQUIRE(f.reopen().isOk());
  CHECK_FALSE(std::filesystem::exists(extentPath(f.options.dir, 0)));
  CHECK(extentBytes(f.options.dir) < with_orphans);
  checkSpaceMatchesDisk(f);
  checkReadsBack(*f.store, kept);
}

TEST_CASE("Power cuts at random moments under concurrent puts and removes, with torn writes") {
  // Each round: 6 threads put (and some remove) blobs until the "power" fails at a random
  // moment; unsynced writes are torn at random 512-byte boundaries. After the restart
  // every acknowledged blob reads back exactly, every listed blob reads back verified,
  // and the drive holds no orphan bytes. With spares, 256 KiB extents roll every few puts
  // and most start as pre-zeroed spares, prepared while the puts run.
  const bool spares = GENERATE(false, true);
  INFO((spares ? "with" : "without") << " pre-zeroed spare extents");
  auto real = makeUringEngine();
  PowerLossEngine engine(real.get());
  StoreFixture f(engine, spares ? spareOptions() : ChunkStoreOptions{});
  std::mutex mu;
  std::map<uint64_t, std::vector<uint8_t>> acked;  // guarded by mu
  std::mt19937_64 rng(20261122);
  uint64_t next_id = 1;
  for (int round = 0; round < 12; ++round) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      const uint64_t base = next_id + static_cast<uint64_t>(t) * 100'000;
      threads.emplace_back([&, base, t] {
        for (uint64_t i = 0; !stop; ++i) {
          const uint64_t n = base + i;
          // Every other blob is page-aligned whole blocks of 64 KiB or more: written in
          // place, as two writes that a power cut may tear or keep apart.
          auto data = n % 2 == 0 ? randomBytes(1 + (n * 7919) % 70'000, n)
                                 : randomBytes((16 + n % 24) * 4096, n);
          auto payload = pageAlignedCopy(data);
          if (f.store->put(descriptor(makeId(n)), payload.span()).isOk()) {
            std::lock_guard lock(mu);
            acked[n] = std::move(data);
          }
          if (t == 0 && i % 5 == 4) {  // remove one acknowledged blob now and then
            uint64_t victim = 0;
            {
              std::lock_guard lock(mu);
              if (!acked.empty()) victim = acked.begin()->first;
            }
            if (victim != 0 && f.store->remove(makeId(victim)).isOk()) {
              std::lock_guard lock(mu);
              acked.erase(victim);
            }
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 80));
    engine.crash();
    stop = true;
    for (auto& t : threads) t.join();
    next_id += 6 * 100'000;
    f.store.reset();  // the dead process's threads (the spare zeroer too) are gone
    engine.powerLoss(/*torn=*/true, rng());
    REQUIRE(f.reopen().isOk());

    INFO("round " << round << ", " << acked.size() << " acknowledged blobs");
    checkReadsBack(*f.store, acked);
    auto listed = f.store->list(std::nullopt, 1'000'000);
    REQUIRE(listed);
    for (const BlobInfo& b : *listed) {
      std::vector<uint8_t> out(b.length);
      Status st = f.store->read(b.id, 0, out);
      INFO(st.toString());
      REQUIRE(st.isOk());  // indexed => whole and verified, acknowledged or not
    }
    // Blobs indexed but never acknowledged (crash after the index write) count as live.
    CHECK(listed->size() >= acked.size());
    checkSpaceMatchesDisk(f);
  }
}

TEST_CASE("A spare dropped while it is zeroed is abandoned, and the drive goes on") {
  // dropSpare() is what an ENOSPC on a put calls; the zeroer sees it between two pieces.
  auto engine = makeEngine(GENERATE(as<std::string>{}, "posix", "io_uring"));
  TempDir dir;
  std::filesystem::create_directories(dir.path() + "/extents");
  ExtentSet set(*engine, dir.path() + "/extents", 256 * 1024, /*direct_io=*/true, 64,
                [](uint32_t) { return Status::ok(); }, nullptr);
  REQUIRE(set.open(0).isOk());
  std::promise<void> zeroing, dropped;
  int pieces = 0;
  auto pace = [&, waited = dropped.get_future().share()](uint64_t) {
    if (++pieces == 2) {  // one piece written: the spare is half made
      zeroing.set_value();
      waited.wait();
    }
    return true;
  };
  std::promise<Status> result;
  std::thread zeroer([&] { result.set_value(set.prepareSpare(64 * 1024, pace)); });
  zeroing.get_future().wait();
  set.dropSpare();
  dropped.set_value();
  auto outcome = result.get_future();
  if (outcome.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // The zeroer holds the extent set's lock forever: every put of the drive would hang.
    std::fprintf(stderr, "prepareSpare did not return after dropSpare(): deadlock\n");
    std::abort();
  }
  zeroer.join();
  CHECK(outcome.get().code() == Status::Code::kUnavailable);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/extents/spare.tmp"));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/extents/spare.zero"));
  // The drive's allocation lock is free: blobs go on being placed.
  auto alloc = set.allocate(4096);
  REQUIRE(alloc);
  CHECK_FALSE(set.retired(alloc->extent));
}

TEST_CASE("Pre-zeroed spare extents: rolls use them, and space matches the disk") {
  class FullDisk final : public IoEngineWrapper {
   public:
    using IoEngineWrapper::IoEngineWrapper;
    // Only the puts' writes fail: the zeroer's (synchronous) writes would succeed.
    void writeAsync(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                    uint64_t offset, IoDone done) override {
      if (full) return done(Status::fromErrno(ENOSPC, "injected write ENOSPC"));
      target_->writeAsync(fd, head, tail, offset, std::move(done));
    }
    std::atomic<bool> full{false};
  };
  auto real = makeEngine(GENERATE(as<std::string>{}, "posix", "io_uring"));
  FullDisk engine(real.get());
  StoreFixture f(engine, spareOptions());
  const uint64_t extent = f.options.extent_size;
  std::map<uint64_t, std::vector<uint8_t>> acked;
  uint64_t n = 0;
  // A 30,000-byte blob takes 36 KiB (a 4 KiB header region): 7 fit in a 256 KiB extent.
  auto putOne = [&](size_t size = 30'000) {
    ++n;
    acked[n] = randomBytes(size, n);
    REQUIRE(f.store->put(descriptor(makeId(n)), acked[n]).isOk());
  };
  auto reserved = [&] {
    auto stats = f.store->stats();
    REQUIRE(stats);
    return stats->reserved_bytes;
  };

  // A drive gets a spare once its active extent is half full, not before.
  for (int i = 0; i < 3; ++i) putOne();  // 108 KiB
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(std::filesystem::exists(sparePath(f.options)));
  CHECK(reserved() == 0);
  putOne();  // 144 KiB
  REQUIRE(waitForSpare(f.options));
  CHECK(reserved() == extent);
  CHECK(f.store->stats()->spare_zeroed_bytes == extent);
  checkSpaceMatchesDisk(f);

  // The roll renames the spare into place: extent 1 is allocated whole from the start, and
  // its unused part counts as reserved.
  for (int i = 0; i < 4; ++i) putOne();  // blob 8 opens extent 1
  CHECK(allocatedBytes(extentPath(f.options.dir, 1)) == static_cast<int64_t>(extent));
  CHECK(reserved() == extent - 36 * 1024);
  checkSpaceMatchesDisk(f);

  // Rolling off a pre-zeroed extent frees its unused tail.
  for (int i = 0; i < 3; ++i) putOne();  // extent 1: 144 KiB
  REQUIRE(waitForSpare(f.options));
  putOne();                              // 180 KiB
  putOne(100'000);                       // 104 KiB: does not fit, opens extent 2 (a spare)
  const uint64_t extent2_tail = extent - 104 * 1024;
  for (int i = 0; i < 1000 && reserved() != extent2_tail; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(reserved() == extent2_tail);
  CHECK(allocatedBytes(extentPath(f.options.dir, 1)) <= static_cast<int64_t>(188 * 1024));
  checkSpaceMatchesDisk(f);
  checkReadsBack(*f.store, acked);

  // A ready spare outlives a reopen, and the first extent after it is the spare.
  putOne();  // extent 2: 140 KiB
  REQUIRE(waitForSpare(f.options));
  REQUIRE(f.reopen().isOk());
  CHECK(std::filesystem::exists(sparePath(f.options)));
  CHECK(reserved() == extent);  // extent 2's tail was cut by recovery
  checkSpaceMatchesDisk(f);
  putOne();
  CHECK(allocatedBytes(extentPath(f.options.dir, 3)) == static_cast<int64_t>(extent));
  CHECK_FALSE(std::filesystem::exists(sparePath(f.options)));
  checkReadsBack(*f.store, acked);

  // ENOSPC gives the spare's space back to the drive, and the zeroer makes no new one
  // while the drive counts as full (5 s on the store's clock, which this test holds still).
  for (int i = 0; i < 3; ++i) putOne();  // extent 3: 144 KiB
  REQUIRE(waitForSpare(f.options));
  engine.full = true;
  CHECK(f.store->put(descriptor(makeId(999)), randomBytes(1000, 999)).code() ==
        Status::Code::kNoSpace);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(std::filesystem::exists(sparePath(f.options)));
  // Only extent 3's unused part remains reserved (the failed put took 8 KiB of it, which
  // is punched).
  CHECK(reserved() == extent - 152 * 1024);
  checkReadsBack(*f.store, acked);
  engine.full = false;
  checkSpaceMatchesDisk(f);
}

TEST_CASE("The spare zeroer keeps to its rate while clients use the drive, not when quiet") {
  auto engine = makePosixEngine();
  ChunkStoreOptions o;
  o.extent_size = 1 << 20;
  o.spare_zero_rate = 4096;  // past its 256 KiB burst, a 1 MiB spare would take minutes
  StoreFixture f(*engine, o);
  const uint64_t extent = f.options.extent_size;
  for (uint64_t n = 1; n <= 15; ++n) {  // 15 x 36 KiB: past half of the active extent
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(30'000, n)).isOk());
  }
  // The store's clock stands still, so the puts were "just now": the zeroer keeps to its
  // rate (the burst and one piece of debt, 512 KiB, then minutes of waiting). Waited for
  // (a loaded machine may take a while to write them), then half a second more.
  for (int i = 0; i < 1000 && f.store->stats()->spare_zeroed_bytes < extent / 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK_FALSE(std::filesystem::exists(sparePath(f.options)));
  CHECK(f.store->stats()->spare_zeroed_bytes == extent / 2);
  // A read 200 ms later keeps it at its rate too (the clock never shows 250 ms without a
  // client in between).
  const uint64_t zeroed = f.store->stats()->spare_zeroed_bytes;
  f.clock.advance(200'000'000);
  std::vector<uint8_t> out(30'000);
  REQUIRE(f.store->read(makeId(1), 0, out).isOk());
  f.clock.advance(200'000'000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(std::filesystem::exists(sparePath(f.options)));
  CHECK(f.store->stats()->spare_zeroed_bytes == zeroed);
  // Quiet for a second: the rest is zeroed at once, uncharged.
  f.clock.advance(1'000'000'000);
  REQUIRE(waitForSpare(f.options));
  CHECK(f.store->stats()->spare_zeroed_bytes == extent);
  CHECK(f.store->stats()->reserved_bytes == extent);
}

TEST_CASE("Drives that share a DriveActivity are quiet only together") {
  auto engine = makePosixEngine();
  auto activity = std::make_shared<DriveActivity>();
  ChunkStoreOptions o;
  o.extent_size = 1 << 20;
  o.spare_zero_rate = 4096;
  o.activity = activity;
  StoreFixture f(*engine, o);
  for (uint64_t n = 1; n <= 15; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(30'000, n)).isOk());
  }
  // Another drive of the set is busy: this one, idle for a second, keeps to its rate.
  activity->begin(f.clock.monotonicNanos());
  f.clock.advance(1'000'000'000);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK_FALSE(std::filesystem::exists(sparePath(f.options)));
  // The other drive's operation ends; a second later the set is quiet.
  activity->end(f.clock.monotonicNanos());
  f.clock.advance(1'000'000'000);
  REQUIRE(waitForSpare(f.options));
}

TEST_CASE("A crash while a spare extent is zeroed or put in place loses nothing") {
  // "durable": the spare's directory entry was fsynced before the crash (by another
  // extent's creation), so the power loss undoes the rename instead of deleting the file.
  const std::string variant = GENERATE(as<std::string>{}, "spare.after_sync",
                                       "extent.after_spare_rename", "durable");
  const std::string point = variant == "durable" ? "extent.after_spare_rename" : variant;
  auto real = makeEngine(GENERATE(as<std::string>{}, "posix", "io_uring"));
  INFO(variant);
  CrashFixture c(*real, spareOptions());
  std::map<uint64_t, std::vector<uint8_t>> acked;
  auto put = [&](uint64_t n) {
    acked[n] = randomBytes(30'000, n);
    REQUIRE(c.f.store->put(descriptor(makeId(n)), acked[n]).isOk());
  };
  if (point == "spare.after_sync") {
    c.arm(point);
    for (uint64_t n = 1; n <= 4; ++n) put(n);  // half full: the zeroer starts, and dies
    for (int i = 0; i < 1000 && !c.fired; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    for (uint64_t n = 1; n <= 7; ++n) put(n);
    REQUIRE(waitForSpare(c.f.options));
    if (variant == "durable") {
      // A blob larger than an extent gets a hole extent of its own (never the spare), and
      // that extent's directory fsync makes spare.zero durable too.
      acked[9] = randomBytes(300'000, 9);
      REQUIRE(c.f.store->put(descriptor(makeId(9)), acked[9]).isOk());
      REQUIRE(std::filesystem::exists(sparePath(c.f.options)));
    }
    c.arm(point);
    CHECK(c.f.store->put(descriptor(makeId(8)), randomBytes(30'000, 8)).code() ==
          Status::Code::kUnavailable);
  }
  REQUIRE(c.fired);
  c.restart();
  checkReadsBack(*c.f.store, acked);
  std::vector<uint8_t> out(10);
  CHECK(c.f.store->read(makeId(8), 0, out).code() == Status::Code::kNotFound);
  // A durable spare is back under its name, whole, and kept; an undurable one is gone.
  CHECK(std::filesystem::exists(sparePath(c.f.options)) == (variant == "durable"));
  checkSpaceMatchesDisk(c.f);

  // The store keeps working, with spares, across more rolls and a power cut.
  for (uint64_t n = 10; n <= 30; ++n) put(n);
  c.restart();
  checkReadsBack(*c.f.store, acked);
  checkSpaceMatchesDisk(c.f);
  auto listed = c.f.store->list(std::nullopt, 100);
  REQUIRE(listed);
  CHECK(listed->size() == acked.size());
}

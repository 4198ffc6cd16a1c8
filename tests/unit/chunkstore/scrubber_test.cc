// The scrubber: finds corrupt blobs, keeps to its rate, starts and stops cleanly.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "granary/chunkstore/scrubber.h"
#include "granary/common/rate_limiter.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

TEST_CASE("A scrub pass verifies every blob and reports the corrupt one") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  // Blob 1 is the first in extent 0: header at 0, payload from 4096. Blob 2 (600 KB)
  // needs three scrub pieces.
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(100'000, 1)).isOk());
  REQUIRE(f.store->put(descriptor(makeId(2)), randomBytes(600'000, 2)).isOk());
  REQUIRE(f.store->put(descriptor(makeId(3)), randomBytes(0, 3)).isOk());
  flipBit(extentPath(f.options.dir, 0), 4096 + 77'777);

  std::vector<BlobId> reported;
  ScrubOptions options;
  options.rate_bytes_per_second = 0;
  options.piece_bytes = 256 << 10;
  Scrubber scrubber(*f.store, "test drive", options,
                    [&](const BlobId& id, const Status& st) {
                      CHECK(st.isCorruption());
                      reported.push_back(id);
                    });
  REQUIRE(scrubber.runPass().isOk());
  ScrubStats s = scrubber.stats();
  CHECK(s.passes == 1);
  CHECK(s.blobs == 2);
  CHECK(s.corrupt == 1);
  REQUIRE(s.recent.size() == 1);
  CHECK(s.recent[0] == makeId(1));
  CHECK(reported == std::vector<BlobId>{makeId(1)});
  CHECK(s.bytes == 600'000);  // blob 2 whole; blob 1 fails in its only piece; blob 3 empty
}

TEST_CASE("The scrubber keeps to its configured rate, with no start-up burst") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  for (uint64_t n = 0; n < 8; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(256 * 1024, n)).isOk());
  }
  ScrubOptions options;
  options.rate_bytes_per_second = 4 << 20;  // 2 MiB of blobs: 32 pieces
  options.piece_bytes = 64 * 1024;
  Scrubber scrubber(*f.store, "test drive", options);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(scrubber.runPass().isOk());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(scrubber.stats().blobs == 8);
  // Two pieces (128 KiB) may go up front, the rest at 4 MiB/s: the 32nd piece starts no
  // sooner than (31 x 64 KiB - 128 KiB) / 4 MiB/s = 0.453 s. A bucket of a tenth of a
  // second's worth (410 KiB) would let it start at 0.384 s.
  CHECK(seconds >= 0.44);
}

TEST_CASE("A running scrubber makes passes and stops promptly") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(10'000, 1)).isOk());
  ScrubOptions options;
  options.pass_interval = std::chrono::milliseconds(10);
  Scrubber scrubber(*f.store, "test drive", options);
  scrubber.start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (scrubber.stats().passes < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(scrubber.stats().passes >= 3);
  const auto stop_start = std::chrono::steady_clock::now();
  scrubber.stop();
  CHECK(std::chrono::steady_clock::now() - stop_start < std::chrono::seconds(2));
}

namespace {

// A store whose blob list fails `fail_times` times when asked for the blobs after
// `fail_after`; every other call goes through. Not thread-safe: one scrubber at a time.
class ListFaults : public ChunkStore {
 public:
  explicit ListFaults(ChunkStore& inner) : inner_(inner) {}
  std::optional<BlobId> fail_after;
  int fail_times = 0;
  std::vector<std::optional<BlobId>> asked;  // `after` of each list call

  Status put(const BlobDescriptor& d, std::span<const uint8_t> p) override {
    return inner_.put(d, p);
  }
  void putAsync(const BlobDescriptor& d, std::span<const uint8_t> p, IoDone done) override {
    inner_.putAsync(d, p, std::move(done));
  }
  Status read(const BlobId& id, uint64_t off, std::span<uint8_t> out) override {
    return inner_.read(id, off, out);
  }
  Status readFromDrive(const BlobId& id, uint64_t off, std::span<uint8_t> out) override {
    return inner_.readFromDrive(id, off, out);
  }
  void verifiedOnDrive(const BlobId& id) override { inner_.verifiedOnDrive(id); }
  bool readIfCached(const BlobId& id, uint64_t off, std::span<uint8_t> out) override {
    return inner_.readIfCached(id, off, out);
  }
  std::optional<CachedRange> pinIfCached(const BlobId& id, uint64_t off,
                                         uint64_t len) override {
    return inner_.pinIfCached(id, off, len);
  }
  void readAsync(const BlobId& id, uint64_t off, std::span<uint8_t> out,
                 IoDone done) override {
    inner_.readAsync(id, off, out, std::move(done));
  }
  Result<BlobInfo> stat(const BlobId& id) override { return inner_.stat(id); }
  Result<BlobDescriptor> describe(const BlobId& id) override { return inner_.describe(id); }
  Status remove(const BlobId& id) override { return inner_.remove(id); }
  void drain() override { inner_.drain(); }
  Result<std::vector<BlobInfo>> list(std::optional<BlobId> after, size_t limit) override {
    asked.push_back(after);
    if (fail_times > 0 && after == fail_after) {
      --fail_times;
      return fail(Status::ioError("injected: the blob index could not be read"));
    }
    return inner_.list(after, limit);
  }
  Result<DriveStats> stats() override { return inner_.stats(); }
  bool writable() override { return inner_.writable(); }

 private:
  ChunkStore& inner_;
};

}  // namespace

TEST_CASE("A pass whose blob list fails goes on from where it stopped") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  constexpr uint64_t kBlobs = 260;  // more than one list batch (256)
  for (uint64_t n = 0; n < kBlobs; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(100, n)).isOk());
  }
  ListFaults store(*f.store);
  ScrubOptions options;
  options.rate_bytes_per_second = 0;
  Scrubber scrubber(store, "test drive", options);

  REQUIRE(scrubber.runPass().isOk());  // a whole pass: two list calls, from the start
  REQUIRE(store.asked.size() == 2);
  CHECK(!store.asked[0].has_value());
  REQUIRE(store.asked[1].has_value());
  const BlobId batch_end = *store.asked[1];
  CHECK(scrubber.stats().blobs == kBlobs);

  // The first batch is verified again, then the list fails.
  store.asked.clear();
  store.fail_after = batch_end;
  store.fail_times = 1;
  CHECK(scrubber.runPass().code() == Status::Code::kIoError);
  CHECK(scrubber.stats().passes == 1);
  CHECK(scrubber.stats().blobs == kBlobs + 256);

  // The next pass goes on after the first batch, and ends the interrupted pass.
  store.asked.clear();
  REQUIRE(scrubber.runPass().isOk());
  CHECK(store.asked == std::vector<std::optional<BlobId>>{batch_end});
  CHECK(scrubber.stats().passes == 2);
  CHECK(scrubber.stats().blobs == 2 * kBlobs);

  // And the one after it starts from the first blob again.
  store.asked.clear();
  REQUIRE(scrubber.runPass().isOk());
  CHECK(store.asked == std::vector<std::optional<BlobId>>{std::nullopt, batch_end});
  CHECK(scrubber.stats().blobs == 3 * kBlobs);
}

TEST_CASE("A running scrubber whose blob list failed tries again before its pass interval") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(10'000, 1)).isOk());
  ListFaults store(*f.store);
  store.fail_times = 1;  // the first call, from the start
  ScrubOptions options;
  options.pass_interval = std::chrono::hours(24);
  options.list_retry = std::chrono::milliseconds(10);
  Scrubber scrubber(store, "test drive", options);
  scrubber.start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (scrubber.stats().passes < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  scrubber.stop();
  CHECK(scrubber.stats().passes == 1);
  CHECK(scrubber.stats().blobs == 1);
  CHECK(store.asked.size() == 2);  // the failed call and the one that went on
}

TEST_CASE("RateLimiter: a waiver lets work through at once, without charging it") {
  RateLimiter slow(1024, 1024);  // 1 KiB/s
  std::atomic<bool> idle{false};
  auto waived = [&] { return idle.load(); };
  REQUIRE(slow.acquire(1024, waived));
  REQUIRE(slow.acquire(1 << 20, waived));  // a debt of about 17 minutes
  std::atomic<bool> returned{false};
  std::atomic<bool> result{false};
  std::thread waiter([&] {
    result = slow.acquire(1, waived);  // waits for the debt, until the waiver
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  CHECK_FALSE(returned);
  const auto waived_at = std::chrono::steady_clock::now();
  idle = true;
  waiter.join();
  CHECK(result);
  CHECK(std::chrono::steady_clock::now() - waived_at < std::chrono::seconds(5));
  slow.stop();

  // Waived work is not charged (100 MiB through a 1 MiB/s limiter leave no 100 s of
  // debt), and saves up no tokens either: once the waiver ends, the rate holds from the
  // next request on.
  RateLimiter fast(1 << 20, 1 << 20);
  for (int i = 0; i < 100; ++i) REQUIRE(fast.acquire(1 << 20, waived));
  // Timed from before the waiver ends: the refill runs from the last waived acquire, so
  // a stall of this thread here must count in `waited`.
  const auto start = std::chrono::steady_clock::now();
  idle = false;
  REQUIRE(fast.acquire(1 << 20, waived));  // nothing owed: at once, leaving 1 MiB owed
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  REQUIRE(fast.acquire(1));  // waits for that MiB: about 1 s (no burst was saved up)
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= std::chrono::milliseconds(500));
  CHECK(waited < std::chrono::seconds(10));
}

TEST_CASE("RateLimiter: time that passed before a waived request still pays a debt off") {
  RateLimiter limiter(1000, 0);  // 1,000 B/s, nothing saved up
  REQUIRE(limiter.acquire(1000));  // 1 s owed
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // paid off by now
  REQUIRE(limiter.acquire(1, [] { return true; }));  // waived
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(limiter.acquire(1));  // owes nothing: at once (it waited the whole second before)
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
}

TEST_CASE("RateLimiter: unlimited never waits, stop releases waiters") {
  RateLimiter unlimited(0);
  for (int i = 0; i < 1000; ++i) REQUIRE(unlimited.acquire(1 << 30));
  RateLimiter slow(1024, 1024);  // 1 KiB/s
  REQUIRE(slow.acquire(1024));
  REQUIRE(slow.acquire(1 << 20));  // goes through, leaving a debt of about 17 minutes
  std::atomic<bool> returned{false};
  std::atomic<bool> result{true};
  std::thread waiter([&] {
    result = slow.acquire(1);  // waits for the debt to be paid
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  slow.stop();
  waiter.join();
  CHECK(returned);
  CHECK_FALSE(result);
}

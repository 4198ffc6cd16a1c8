// The object data path against real chunk stores (POSIX engine, temp dirs): ObjectWriter
// stripes, encodes and places fragments; readObjectRange reads ranges back, decoding from
// parity when fragments fail. Faults come from a ChunkClient wrapper.
#include "run_task.h"
#include "asio.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <exception>
#include <future>
#include <latch>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "gateway_test_util.h"
#include "granary/common/random.h"
#include "granary/common/worker_pool.h"
#include "granary/ec/erasure_code.h"
#include "granary/placement/placement.h"
#include "data_path_util.h"
#include "object_io.h"

namespace granary::gateway {
namespace {

using testing::FaultyChunkClient;
using testing::randomString;
using testing::Counters;
using testing::TestCluster;
using testing::writeAll;

constexpr uint32_t kFragmentLen = 4096;
constexpr uint64_t kStripe = 4 * kFragmentLen;  // k = 4

void runVoid(asio::io_context& io, Task<void> task) {
  bool done = false;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
    error = e;
    done = true;
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  REQUIRE(done);
}

// Collects the body; optionally fails the N-th write (1-based).
class StringSink final : public BodySink {
 public:
  explicit StringSink(int fail_write = 0) : fail_write_(fail_write) {}
  Task<Status> writeHead(const S3Response&, uint64_t) override { co_return Status::ok(); }
  Task<Status> write(std::span<const uint8_t> data) override {
    ++writes_;
    if (writes_ == fail_write_) co_return Status::ioError("client went away");
    body.append(reinterpret_cast<const char*>(data.data()), data.size());
    co_return Status::ok();
  }
  std::string body;

 private:
  int fail_write_;
  int writes_ = 0;
};

// A sink on a plain socket, as far as readObjectRange can tell: it takes page-cache ranges
// too, and reads them from their descriptors as sendfile would.
class FileSink final : public BodySink {
 public:
  Task<Status> writeHead(const S3Response&, uint64_t) override { co_return Status::ok(); }
  Task<Status> write(std::span<const uint8_t> data) override {
    body.append(reinterpret_cast<const char*>(data.data()), data.size());
    co_return Status::ok();
  }
  bool sendsFiles() const override { return true; }
  Task<Status> sendFile(int fd, uint64_t offset, uint64_t length) override {
    ++files_sent;
    std::string bytes(length, '\0');
    if (::pread(fd, bytes.data(), length, static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(length)) {
      co_return Status::ioError("short pread");
    }
    body += bytes;
    co_return Status::ok();
  }
  std::string body;
  int files_sent = 0;
};

Task<Status> readInto(DataPath& dp, const index_kv::Manifest& m, uint64_t first, uint64_t length,
                      BodySink& sink) {
  Status st = co_await readObjectRange(dp, m, first, length, sink, /*prepaid=*/false,
                                       BufferBudget::Holds::kLease);
  co_return st;
}

constexpr int kBulkNice = 5;

struct DataPathFixture {
  explicit DataPathFixture(int drives = 6, uint32_t fragment_len = kFragmentLen,
                           uint64_t buffer_budget = 512ull << 20,
                           std::chrono::milliseconds admission_wait = std::chrono::seconds(30))
      : cluster(drives),
        code(std::move(*ec::ErasureCode::create({4, 2}))),
        dp(cluster.map, *cluster.chunks, *code, pool, bulk, fragment_len,
           testing::countersOf(counters), buffer_budget, admission_wait) {}

  // Writes `data` as `version` (default: a new one) and returns its manifest (REQUIREs
  // success).
  index_kv::Manifest write(const std::string& data, std::optional<VersionId> version = {}) {
    index_kv::Manifest m;
    m.version = version ? *version : VersionId::generate(cluster.clock, random);
    m.size = data.size();
    m.ec = code->profile();
    ObjectWriter w(dp, m.version, "bucket", "key", io.get_executor(), data.size(), false);
    Status st = runTask(io, writeAll(w, data));
    REQUIRE(st.isOk());
    m.drives = w.drives();
    m.stripes = w.stripes();
    return m;
  }

  // Reads [first, first + length) into a string sink.
  std::pair<Status, std::string> read(const index_kv::Manifest& m, uint64_t first,
                                      uint64_t length) {
    StringSink sink;
    Status st = runTask(io, readInto(dp, m, first, length, sink));
    return {st, sink.body};
  }

  // The drive holding fragment `j` of stripe `s`.
  static std::string driveOf(const index_kv::Manifest& m, size_t s, size_t j) {
    return m.drives[m.stripes[s].drives[j]];
  }

  // Stripes of a whole-object read that touch a data fragment on one of `failing`.
  static int stripesTouching(const index_kv::Manifest& m, const std::set<std::string>& failing) {
    int n = 0;
    for (const auto& s : m.stripes) {
      uint64_t touched = (s.data_len + s.fragment_len - 1) / s.fragment_len;
      for (uint64_t j = 0; j < touched; ++j) {
        if (failing.contains(m.drives[s.drives[j]])) {
          ++n;
          break;
        }
      }
    }
    return n;
  }

  TestCluster cluster;
  std::unique_ptr<ec::ErasureCode> code;
  SeededRandom random{7};
  Counters counters;
  WorkerPool pool{4, "dp-test"};  // after the cluster: drained before the stores close
  WorkerPool bulk{4, "dp-bulk", kBulkNice};
  DataPath dp;
  asio::io_context io;
};

TEST_CASE("Cached stripes go to a sink that sends files as verified page-cache ranges") {
  DataPathFixture f;
  const uint64_t size = 3 * kStripe + 5000;
  std::string data = randomString(size, 11);
  index_kv::Manifest m = f.write(data);
  auto readFiles = [&](uint64_t first, uint64_t length, FileSink& sink) {
    REQUIRE(runTask(f.io, readInto(f.dp, m, first, length, sink)).isOk());
    CHECK(sink.body == data.substr(first, length));
  };
  {
    // The first read goes through stripe buffers (the fragments were written with
    // O_DIRECT: nothing in the page cache), and puts them there.
    auto [st, body] = f.read(m, 0, size);
    REQUIRE(st.isOk());
  }
  SECTION("whole and ranged reads") {
    FileSink whole;
    readFiles(0, size, whole);
    CHECK(whole.files_sent >= 4 * 3);  // a range per data fragment of each full stripe
    CHECK(f.counters.sent_from_cache.Value() == static_cast<double>(size));
    FileSink ranged;
    readFiles(kFragmentLen / 2, kStripe + 3 * kFragmentLen, ranged);
    CHECK(ranged.files_sent > 0);
  }
  SECTION("a drive that fails reads: its stripes go through buffers, decoded") {
    // A parity drive of the first stripe (sent whole from the page cache) that holds a
    // data fragment of a later one.
    std::string failing;
    for (size_t s = 1; s < m.stripes.size() && failing.empty(); ++s) {
      for (size_t j = 0; j < 4; ++j) {
        const std::string d = DataPathFixture::driveOf(m, s, j);
        if (d == DataPathFixture::driveOf(m, 0, 4) || d == DataPathFixture::driveOf(m, 0, 5)) {
          failing = d;
        }
      }
    }
    REQUIRE_FALSE(failing.empty());
    f.cluster.chunks->failReads(failing, Status::ioError("injected"));
    FileSink sink;
    readFiles(0, size, sink);
    CHECK(f.counters.degraded.Value() >= 1);
    CHECK(sink.files_sent > 0);  // the other stripes still went out from the page cache
  }
  SECTION("sendfile turned off") {
    f.dp.setSendfile(false);
    FileSink sink;
    readFiles(0, size, sink);
    CHECK(sink.files_sent == 0);
  }
}

TEST_CASE("A first slice partly in the page cache goes out only once all of it is read") {
  // Its cached leading ranges went out by sendfile before the rest was read: when the rest
  // could not be, the GET was a 200 cut short, not the 503 a client retries.
  DataPathFixture f;
  const std::string data = randomString(kStripe, 12);
  index_kv::Manifest m = f.write(data);
  REQUIRE(f.read(m, 0, kStripe).first.isOk());  // now in the page cache
  // Fragment 0 stays cached; 1, 2 and 4 fail: the stripe cannot be read.
  for (size_t j : {1, 2, 4}) {
    f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, j), Status::ioError("EIO"));
  }
  FileSink failed;
  CHECK_FALSE(runTask(f.io, readInto(f.dp, m, 0, kStripe, failed)).isOk());
  CHECK(failed.files_sent == 0);
  CHECK(failed.body.empty());  // nothing went out: the GET can still answer with an error
  f.cluster.chunks->clearFaults();
  FileSink whole;
  REQUIRE(runTask(f.io, readInto(f.dp, m, 0, kStripe, whole)).isOk());
  CHECK(whole.body == data);
  CHECK(whole.files_sent == 4);  // all of it cached: all by sendfile
}

TEST_CASE("Writers encode and write on the bulk pool, at its lower priority") {
  DataPathFixture f;
  // Every thread of the reads' pool held: an upload needs none of them. An upload that did
  // would wait until the holders give up after 30 s, and the check below fails.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> gave_up{0};
  std::latch holders(static_cast<std::ptrdiff_t>(f.pool.threads()));
  for (size_t i = 0; i < f.pool.threads(); ++i) {
    f.pool.submit([&, released] {
      if (released.wait_for(std::chrono::seconds(30)) != std::future_status::ready) ++gave_up;
      holders.count_down();
    });
  }
  const std::string data = randomString(2 * kStripe + 123, 5);
  index_kv::Manifest m = f.write(data);
  release.set_value();
  holders.wait();
  CHECK(gave_up == 0);
  auto [st, body] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(body == data);

  // The bulk pool's threads: this one's niceness (the process's) plus kBulkNice.
  auto niceness = [] { return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())); };
  std::promise<int> nice;
  f.bulk.submit([&] { nice.set_value(niceness()); });
  CHECK(nice.get_future().get() == std::min(19, niceness() + kBulkNice));
}

TEST_CASE("Objects of many sizes round-trip through stripes, and ranges equal the source") {
  DataPathFixture f;
  const uint64_t size =
      GENERATE(uint64_t{1}, uint64_t{kFragmentLen - 1}, kStripe, 3 * kStripe + 5000);
  CAPTURE(size);
  std::string data = randomString(size, size);
  index_kv::Manifest m = f.write(data);

  const uint64_t stripes = (size + kStripe - 1) / kStripe;
  REQUIRE(m.stripes.size() == stripes);
  CHECK(m.drives.size() == 6);
  uint64_t sum = 0;
  for (const auto& s : m.stripes) {
    CHECK(s.drives.size() == 6);
    CHECK(std::set<uint16_t>(s.drives.begin(), s.drives.end()).size() == 6);
    CHECK(s.fragment_len % 4096 == 0);
    CHECK(uint64_t(4) * s.fragment_len >= s.data_len);
    sum += s.data_len;
  }
  CHECK(sum == size);
  CHECK(f.cluster.allBlobs().size() == stripes * 6);
  CHECK(f.counters.encoded.Value() > 0);
  // Every fragment header names the object, its stripe's length, and marks the last
  // stripe (what rebuild-index reads).
  for (size_t s = 0; s < m.stripes.size(); ++s) {
    for (size_t j = 0; j < 6; ++j) {
      auto desc = f.cluster.chunks->describe(
          f.driveOf(m, s, j), BlobId{m.version, uint32_t(s), uint16_t(j)});
      REQUIRE(desc.has_value());
      CHECK(desc->bucket == "bucket");
      CHECK(desc->key == "key");
      CHECK(desc->stripe_data_len == m.stripes[s].data_len);
      CHECK(desc->flags ==
            (s + 1 == m.stripes.size() ? chunkstore::kBlobFlagLastStripe : uint16_t{0}));
    }
  }

  auto [st, whole] = f.read(m, 0, size);
  REQUIRE(st.isOk());
  CHECK(whole == data);

  std::mt19937_64 rng(size);
  for (int i = 0; i < 25; ++i) {
    uint64_t first = rng() % size;
    uint64_t length = 1 + rng() % (size - first);
    CAPTURE(first, length);
    auto [rst, got] = f.read(m, first, length);
    REQUIRE(rst.isOk());
    CHECK(got == data.substr(first, length));
  }
  if (size > kStripe) {
    // Exactly across a stripe boundary and a fragment boundary.
    auto [bst, got] = f.read(m, kStripe - 3, 6);
    REQUIRE(bst.isOk());
    CHECK(got == data.substr(kStripe - 3, 6));
    auto [fst, frag] = f.read(m, kFragmentLen - 1, 2);
    REQUIRE(fst.isOk());
    CHECK(frag == data.substr(kFragmentLen - 1, 2));
  }
  CHECK(f.counters.degraded.Value() == 0);
  CHECK(f.counters.fragment_errors.Value() == 0);
}

TEST_CASE("Short last stripes use a smaller fragment length and still round-trip") {
  constexpr uint32_t kBigFragment = 16384;
  constexpr uint64_t kBigStripe = 4 * kBigFragment;
  DataPathFixture f(6, kBigFragment);
  struct Case {
    uint64_t size;
    uint32_t last_fragment_len;
  };
  const Case c = GENERATE(Case{20000, 8192}, Case{kBigStripe + 5000, 4096},
                          Case{3 * kBigStripe + 40000, 12288}, Case{2 * kBigStripe, kBigFragment});
  CAPTURE(c.size);
  std::string data = randomString(c.size, c.size);
  index_kv::Manifest m = f.write(data);
  REQUIRE(m.stripes.size() == (c.size + kBigStripe - 1) / kBigStripe);
  for (size_t i = 0; i + 1 < m.stripes.size(); ++i) {
    CHECK(m.stripes[i].fragment_len == kBigFragment);
  }
  CHECK(m.stripes.back().fragment_len == c.last_fragment_len);
  auto infos = f.cluster.blobs(DataPathFixture::driveOf(m, m.stripes.size() - 1, 0));
  bool found = false;
  for (const auto& b : infos) {
    if (b.id.stripe == m.stripes.back().blob_stripe && b.id.fragment == 0) {
      CHECK(b.length == c.last_fragment_len);
      found = true;
    }
  }
  CHECK(found);

  auto [st, whole] = f.read(m, 0, c.size);
  REQUIRE(st.isOk());
  CHECK(whole == data);
  std::mt19937_64 rng(c.size);
  for (int i = 0; i < 10; ++i) {
    uint64_t first = rng() % c.size;
    uint64_t length = 1 + rng() % (c.size - first);
    CAPTURE(first, length);
    auto [rst, got] = f.read(m, first, length);
    REQUIRE(rst.isOk());
    CHECK(got == data.substr(first, length));
  }

  // The last stripe decoded from parity with two of its fragments failing.
  const size_t last = m.stripes.size() - 1;
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, last, 0), Status::ioError("EIO"));
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, last, 4), Status::ioError("EIO"));
  const uint64_t tail_first = last * kBigStripe;
  auto [dst, tail] = f.read(m, tail_first, c.size - tail_first);
  REQUIRE(dst.isOk());
  CHECK(tail == data.substr(tail_first));
  CHECK(f.counters.degraded.Value() == 1);
}

TEST_CASE("GET does not ask a drive whose server does not answer: it decodes at once") {
  DataPathFixture f;
  const uint64_t size = 2 * kStripe + 777;
  std::string data = randomString(size, 23);
  index_kv::Manifest m = f.write(data);
  const std::string down = DataPathFixture::driveOf(m, 0, 1);
  // Were the drive asked, the read would hang for the test's patience, then fail.
  f.cluster.chunks->failReads(down, Status::timeout("would have waited"));
  f.cluster.chunks->setUnreachable(down);
  auto [st, got] = f.read(m, 0, size);
  REQUIRE(st.isOk());
  CHECK(got == data);
  CHECK(f.cluster.chunks->injected() == 0);
  CHECK(f.counters.degraded.Value() == DataPathFixture::stripesTouching(m, {down}));
}

TEST_CASE("A degraded read reads k fragments, the other parity only should one of them fail") {
  DataPathFixture f;  // 4 + 2
  const uint64_t size = kStripe - 100;  // one stripe
  std::string data = randomString(size, 29);
  index_kv::Manifest m = f.write(data);
  REQUIRE(m.stripes.size() == 1);
  const std::string lost = DataPathFixture::driveOf(m, 0, 0);
  const std::string first_parity = DataPathFixture::driveOf(m, 0, 4);
  const std::string last_parity = DataPathFixture::driveOf(m, 0, 5);
  f.cluster.chunks->failReads(lost, Status::notFound("blob vanished"));
  // A server that would hang: asked, the read fails after the test's patience.
  f.cluster.chunks->failReads(last_parity, Status::timeout("a spare fragment was asked"));
  auto [st, got] = f.read(m, 0, size);
  REQUIRE(st.isOk());
  CHECK(got == data);
  CHECK(f.cluster.chunks->injected() == 1);  // the lost fragment's fast-path read only
  CHECK(f.counters.degraded.Value() == 1);
  // The first parity fragment failing too: the last one is read after all.
  f.cluster.chunks->clearFaults();
  f.cluster.chunks->failReads(lost, Status::notFound("blob vanished"));
  f.cluster.chunks->failReads(first_parity, Status::ioError("bad sector"));
  auto [st2, got2] = f.read(m, 0, size);
  REQUIRE(st2.isOk());
  CHECK(got2 == data);
  CHECK(f.counters.degraded.Value() == 2);
}

TEST_CASE("readRangeDirect does not ask a drive whose server does not answer") {
  DataPathFixture f;
  std::string data = randomString(2 * kStripe, 31);
  index_kv::Manifest m = f.write(data);
  const std::string down = DataPathFixture::driveOf(m, 0, 1);
  f.cluster.chunks->failReads(down, Status::timeout("would have waited"));
  f.cluster.chunks->setUnreachable(down);
  std::string out(2 * kFragmentLen, '\0');
  Status st = readRangeDirect(f.dp, m, 0, out.size(), reinterpret_cast<uint8_t*>(out.data()));
  CHECK(st.code() == Status::Code::kUnavailable);
  CHECK(f.cluster.chunks->injected() == 0);
}

TEST_CASE("A slow data fragment is hedged: the stripe is decoded from the other fragments") {
  DataPathFixture f;
  const bool hedging = GENERATE(true, false);
  CAPTURE(hedging);
  f.dp.setHedgeAfter(std::chrono::milliseconds(hedging ? 50 : 0));
  std::string data = randomString(2 * kStripe + 100, 23);
  index_kv::Manifest m = f.write(data);
  f.cluster.chunks->delayReads(f.driveOf(m, 0, 1), std::chrono::milliseconds(700));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
  // Only the stripe that put fragment 1 on the slow drive is decoded (the drive may hold
  // other fragments of other stripes: those are hedged too).
  CHECK((f.counters.hedged.Value() > 0) == hedging);
  CHECK(f.counters.hedged.Value() == f.counters.degraded.Value());
  CHECK(f.counters.fragment_errors.Value() == 0);  // slow is not failed
}

TEST_CASE("A hedged stripe counts the fast reads that failed before it, once") {
  // The hedge decodes without waiting for the slow read; the failed one was counted
  // nowhere when the decode succeeded.
  DataPathFixture f;
  f.dp.setHedgeAfter(std::chrono::milliseconds(50));
  const std::string data = randomString(kStripe, 24);
  index_kv::Manifest m = f.write(data);
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 0), Status::ioError("EIO"));
  f.cluster.chunks->delayReads(DataPathFixture::driveOf(m, 0, 1),
                               std::chrono::milliseconds(700));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
  CHECK(f.counters.hedged.Value() == 1);
  CHECK(f.counters.fragment_errors.Value() == 1);
}

// Runs readers of `objects` (whole single-stripe objects) on f.io, concurrently.
struct Readers {
  Readers(DataPathFixture& f, const std::vector<index_kv::Manifest>& objects)
      : sinks(objects.size()), results(objects.size(), Status::internal("not run")) {
    for (size_t i = 0; i < objects.size(); ++i) {
      asio::co_spawn(f.io, readInto(f.dp, objects[i], 0, objects[i].size, sinks[i]),
                     [this, i](std::exception_ptr e, Status st) {
                       results[i] = e ? Status::internal("exception") : std::move(st);
                     });
    }
  }
  std::vector<StringSink> sinks;
  std::vector<Status> results;
};

TEST_CASE("A stalled drive holds about readsPerDrive() workers: the others read around it") {
  // Each fragment read holds a worker until its drive answers (a stalled chunk server: up
  // to the client's 30 s). Unbounded, the reads of one stalled drive took every worker and
  // every GET, of any drive, waited behind them.
  DataPathFixture f;  // 4 workers
  f.dp.setReadsPerDrive(2);
  std::vector<std::string> datas;
  std::vector<index_kv::Manifest> all;
  for (int i = 0; i < 16; ++i) {
    datas.push_back(randomString(kStripe, 100 + i));
    all.push_back(f.write(datas.back()));
  }
  // The drive holding a data fragment of the most objects, and those objects.
  std::map<std::string, std::vector<size_t>> holders;
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < 4; ++j) holders[DataPathFixture::driveOf(all[i], 0, j)].push_back(i);
  }
  const auto& [stall, objects] = *std::max_element(
      holders.begin(), holders.end(),
      [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  REQUIRE(objects.size() >= 6);
  f.cluster.chunks->delayReads(stall, std::chrono::milliseconds(1500));
  // Two readers meet the stall first; the others come once their reads have run a while.
  std::vector<index_kv::Manifest> first, later;
  for (size_t i = 0; i < objects.size(); ++i) (i < 2 ? first : later).push_back(all[objects[i]]);
  Readers early(f, first);
  f.io.restart();
  f.io.run_for(DataPath::kStalledRead + std::chrono::milliseconds(150));
  Readers rest(f, later);
  f.io.run();
  for (size_t i = 0; i < objects.size(); ++i) {
    INFO("object " << objects[i]);
    const Readers& r = i < 2 ? early : rest;
    const size_t at = i < 2 ? i : i - 2;
    CHECK(r.results[at].isOk());
    CHECK(r.sinks[at].body == datas[objects[i]]);
  }
  CHECK(f.cluster.chunks->peakReads(stall) <= 2);
  CHECK(f.counters.degraded.Value() >= static_cast<double>(later.size()));  // read around
  CHECK(f.counters.fragment_errors.Value() == 0);  // not asked is not failed
  CHECK(f.counters.refused.Value() >= static_cast<double>(later.size()));
}

TEST_CASE("Reads of a server that answers are never refused, a stalled server's are") {
  DataPathFixture f;
  f.dp.setReadsPerDrive(1);
  // d0 and d1 are one remote server's (one count, each its own progress); d2 is this
  // process's.
  f.cluster.map.drives[0].endpoint = f.cluster.map.drives[1].endpoint = "10.0.0.1:9100";
  const auto stall = DataPath::kStalledRead + std::chrono::milliseconds(20);
  auto a = f.dp.beginRead("d0");
  REQUIRE(a);
  auto b = f.dp.beginRead("d1");
  CHECK(b);  // no read of d1 running: it cannot be stalled
  std::this_thread::sleep_for(stall);
  CHECK_FALSE(f.dp.beginRead("d1"));  // stalled: one server's drives share the count
  CHECK(f.dp.beginRead("d2"));        // another server
  // A read of d1 ends: it answers, however slow its oldest read is. (Admitted within
  // 100 ms of that end: tried three times, should a loaded machine pause this thread.)
  bool admitted = false;
  for (int attempt = 0; attempt < 3 && !admitted; ++attempt) {
    f.dp.beginRead("d1", /*must=*/true).reset();
    admitted = f.dp.beginRead("d1").has_value();
  }
  CHECK(admitted);
  CHECK_FALSE(f.dp.beginRead("d0"));  // d0, of the same server, did not: still stalled
  std::this_thread::sleep_for(stall);
  CHECK_FALSE(f.dp.beginRead("d1"));  // and none of d1's ended since
  a.reset();
  b.reset();
  CHECK(f.dp.beginRead("d1"));  // none of its reads running
  CHECK(f.counters.refused.Value() >= 3);
}

TEST_CASE("A fragment not asked for its server being stalled is read when it is needed") {
  DataPathFixture f;
  f.dp.setReadsPerDrive(1);
  const std::string data = randomString(kStripe, 31);
  index_kv::Manifest m = f.write(data);
  // Fragment 0's drive has a read running for a while (a stalled one), and two other
  // fragments are lost: k = 4 of the other five cannot be had without fragment 0.
  auto stuck = f.dp.beginRead(DataPathFixture::driveOf(m, 0, 0));
  REQUIRE(stuck);
  std::this_thread::sleep_for(DataPath::kStalledRead + std::chrono::milliseconds(20));
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 1), Status::ioError("EIO"));
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 2), Status::ioError("EIO"));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
  // The read just made ended: stalled again only once none has ended for a while.
  std::this_thread::sleep_for(DataPath::kStalledRead + std::chrono::milliseconds(20));
  std::string direct(10, '\0');
  CHECK(readRangeDirect(f.dp, m, 5, 10, reinterpret_cast<uint8_t*>(direct.data())).code() ==
        Status::Code::kUnavailable);
}

TEST_CASE("A refused fragment read made after all to decode, and failing, is a fragment error") {
  DataPathFixture f;
  f.dp.setReadsPerDrive(1);
  const std::string data = randomString(kStripe, 32);
  index_kv::Manifest m = f.write(data);
  const std::string stalled = DataPathFixture::driveOf(m, 0, 0);
  auto stuck = f.dp.beginRead(stalled);
  REQUIRE(stuck);
  std::this_thread::sleep_for(DataPath::kStalledRead + std::chrono::milliseconds(20));
  // Fragment 0 is refused on the fast path; with 1 and 2 lost the decode needs it after
  // all, and its read fails too.
  for (int j = 0; j < 3; ++j) {
    f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, j), Status::ioError("EIO"));
  }
  auto [st, got] = f.read(m, 0, data.size());
  CHECK_FALSE(st.isOk());
  CHECK(f.counters.refused.Value() == 1);
  // Each failed read once: 1 and 2 on the fast path, then 0, 1 and 2 whole for the decode.
  CHECK(f.counters.fragment_errors.Value() == 5);
}

TEST_CASE("A hedged stripe's slow reads keep their buffer charged to the budget until they end") {
  // The read moves on without them; their buffer lives on until they end (up to the chunk
  // client's timeout on a stalled drive): uncharged, a stalled drive let memory grow past
  // the budget by a slice per hedged stripe.
  DataPathFixture f;
  f.dp.setHedgeAfter(std::chrono::milliseconds(50));
  std::string data = randomString(kStripe, 25);
  index_kv::Manifest m = f.write(data);
  // Slow enough that the read, hedged at 50 ms, is back long before it even on a loaded
  // machine (1.5 s was not always under ctest -j2 on 2 cores).
  f.cluster.chunks->delayReads(f.driveOf(m, 0, 1), std::chrono::milliseconds(5000));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
  REQUIRE(f.counters.hedged.Value() == 1);
  CHECK(f.dp.budget().stats().used >= data.size());  // the slow read is still out
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (f.dp.budget().stats().used > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(f.dp.budget().stats().used == 0);  // and given back once it ended
}

TEST_CASE("A hedged stripe that cannot be decoded waits for its slow data fragment") {
  DataPathFixture f;
  f.dp.setHedgeAfter(std::chrono::milliseconds(50));
  std::string data = randomString(kStripe, 24);
  index_kv::Manifest m = f.write(data);
  f.cluster.chunks->delayReads(f.driveOf(m, 0, 0), std::chrono::milliseconds(500));
  f.cluster.chunks->failReads(f.driveOf(m, 0, 4), Status::ioError("gone"));
  f.cluster.chunks->failReads(f.driveOf(m, 0, 5), Status::ioError("gone"));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
  CHECK(f.counters.hedged.Value() == 0);  // tried, not decoded: not counted
  CHECK(f.counters.degraded.Value() == 0);
}

TEST_CASE("GET asks drives believed down when the others cannot decode the stripe") {
  DataPathFixture f;
  std::string data = randomString(kStripe, 29);
  index_kv::Manifest m = f.write(data);
  // Both parity drives are believed down (they are not), and two data fragments fail.
  f.cluster.chunks->setUnreachable(DataPathFixture::driveOf(m, 0, 4));
  f.cluster.chunks->setUnreachable(DataPathFixture::driveOf(m, 0, 5));
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 0), Status::ioError("EIO"));
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 1), Status::ioError("EIO"));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("GET of stripes with a missing data fragment decodes them from parity") {
  DataPathFixture f;
  const uint64_t size = 3 * kStripe + 5000;
  std::string data = randomString(size, 11);
  index_kv::Manifest m = f.write(data);
  const std::string lost = DataPathFixture::driveOf(m, 0, 0);
  f.cluster.chunks->failReads(lost, Status::notFound("blob vanished"));
  const int expected = DataPathFixture::stripesTouching(m, {lost});
  REQUIRE(expected >= 1);

  auto [st, got] = f.read(m, 0, size);
  REQUIRE(st.isOk());
  CHECK(got == data);
  CHECK(f.counters.degraded.Value() == expected);
  CHECK(f.counters.fragment_errors.Value() == expected);

  // A range inside the lost fragment of stripe 0.
  auto [rst, range] = f.read(m, 100, 1000);
  REQUIRE(rst.isOk());
  CHECK(range == data.substr(100, 1000));
  CHECK(f.counters.degraded.Value() == expected + 1);
}

TEST_CASE("A degraded read decodes with the object's EC profile, not the map's new one") {
  DataPathFixture f;
  const uint64_t size = 2 * kStripe + 300;
  std::string data = randomString(size, 12);
  index_kv::Manifest m = f.write(data);  // 4+2
  // The operator changed the map's profile to 3+3 (the same six fragments a stripe): new
  // objects use it, old ones must still decode with their own matrix.
  auto code33 = ec::ErasureCode::create({3, 3});
  REQUIRE(code33.has_value());
  DataPath changed(f.cluster.map, *f.cluster.chunks, **code33, f.pool, f.bulk, kFragmentLen,
                   testing::countersOf(f.counters), 512ull << 20);
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 1), Status::notFound("gone"));
  StringSink sink;
  Status st = runTask(f.io, readInto(changed, m, 0, size, sink));
  REQUIRE(st.isOk());
  CHECK(sink.body == data);
  CHECK(f.counters.degraded.Value() >= 1);
}

TEST_CASE("A degraded read asks again for a data fragment that failed on the fast path") {
  DataPathFixture f;
  const uint64_t size = kStripe - 100;  // one stripe
  std::string data = randomString(size, 13);
  index_kv::Manifest m = f.write(data);
  // Both parity fragments are lost, and fragment 0's server is believed down (a stale
  // mark) though it answers: only the fragments the fast path skipped can make k = 4.
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 4), Status::notFound("gone"));
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 5), Status::notFound("gone"));
  f.cluster.chunks->setUnreachable(DataPathFixture::driveOf(m, 0, 0));
  auto [st, got] = f.read(m, 0, size);
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("A degraded read charges its decode space to the buffer budget and waits for it") {
  constexpr uint64_t kBudget = 64 << 10;
  DataPathFixture f(6, kFragmentLen, kBudget);
  std::string data = randomString(kStripe, 13);
  index_kv::Manifest m = f.write(data);
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 0), Status::notFound("gone"));
  // Room for the 1,000-byte slice, not for the 6 fragments the decode reads whole.
  BufferBudget::Lease held = f.dp.budget().tryAcquire(kBudget - 2000);
  REQUIRE(held.held());
  StringSink sink;
  std::optional<Status> result;
  asio::co_spawn(f.io, readInto(f.dp, m, 100, 1000, sink),
                 [&result](std::exception_ptr e, Status st) {
                   result = e ? Status::internal("exception") : std::move(st);
                 });
  f.io.restart();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (f.dp.budget().stats().waiting == 0 && !result &&
         std::chrono::steady_clock::now() < deadline) {
    f.io.run_one_for(std::chrono::milliseconds(5));
  }
  CHECK(f.dp.budget().stats().waiting == 1);  // the decode waits for its space
  CHECK_FALSE(result.has_value());
  held.reset();
  f.io.run();
  REQUIRE(result.has_value());
  REQUIRE(result->isOk());
  CHECK(sink.body == data.substr(100, 1000));
  auto stats = f.dp.budget().stats();
  CHECK(stats.overdrafts == 0);
  CHECK(stats.used == 0);
  CHECK(stats.peak >= 6 * kFragmentLen + 1000);
}

TEST_CASE("GET survives m = 2 failed drives: one corrupt, one with I/O errors") {
  DataPathFixture f;
  const uint64_t size = 2 * kStripe + 1;
  std::string data = randomString(size, 12);
  index_kv::Manifest m = f.write(data);
  const std::string corrupt = DataPathFixture::driveOf(m, 0, 0);
  const std::string broken = DataPathFixture::driveOf(m, 0, 1);
  f.cluster.chunks->failReads(corrupt, Status::corruption("crc mismatch"));
  f.cluster.chunks->failReads(broken, Status::ioError("EIO"));

  auto [st, got] = f.read(m, 0, size);
  REQUIRE(st.isOk());
  CHECK(got == data);
  CHECK(f.counters.degraded.Value() == DataPathFixture::stripesTouching(m, {corrupt, broken}));
  CHECK(f.counters.degraded.Value() >= 1);
  // Every decoded stripe rebuilt k fragments' worth of data; only the corrupt drive's
  // failures count as CRC failures, the I/O errors do not.
  CHECK(f.counters.decoded.Value() == f.counters.degraded.Value() * 4 * kFragmentLen);
  CHECK(f.counters.crc_failures.Value() >= 1);
  CHECK(f.counters.crc_failures.Value() < f.counters.fragment_errors.Value());
  auto [rst, range] = f.read(m, kStripe - 10, 20);
  REQUIRE(rst.isOk());
  CHECK(range == data.substr(kStripe - 10, 20));
}

TEST_CASE("GET with more than m failed drives is an error, never wrong bytes") {
  DataPathFixture f;
  const uint64_t size = 2 * kStripe + 100;
  std::string data = randomString(size, 13);
  index_kv::Manifest m = f.write(data);
  for (size_t j = 0; j < 3; ++j) {
    f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, j), Status::ioError("EIO"));
  }
  auto [st, got] = f.read(m, 0, size);
  CHECK_FALSE(st.isOk());
  CHECK(st.code() == Status::Code::kUnavailable);
  CHECK(got.empty());  // stripe 0 is the first one sent, and it cannot be rebuilt
  CHECK(f.counters.degraded.Value() == 0);

  // Stripe 1 has all four data fragments touched, so at least one is on a failed drive,
  // and only three of its six fragments are readable.
  auto [rst, partial] = f.read(m, kStripe + 7, size - kStripe - 7);
  CHECK(rst.code() == Status::Code::kUnavailable);
  CHECK(partial.empty());
}

TEST_CASE("A sink failing mid-stream ends readObjectRange with its error") {
  DataPathFixture f;
  const uint64_t size = 4 * kStripe;
  std::string data = randomString(size, 14);
  index_kv::Manifest m = f.write(data);
  StringSink sink(/*fail_write=*/2);
  Status st = runTask(f.io, readInto(f.dp, m, 0, size, sink));
  CHECK(st.code() == Status::Code::kIoError);
  CHECK(sink.body == data.substr(0, kStripe));
}

TEST_CASE("A failed fragment put surfaces from flush/finish and abandon removes the rest") {
  DataPathFixture f;  // 6 drives, one domain each, EC 4+2
  const bool multi = GENERATE(false, true);
  const uint64_t size = multi ? 3 * kStripe + 17 : kStripe / 2;
  CAPTURE(size);
  std::string data = randomString(size, 15);
  // Three drives fail every put: their fragments may move, but never onto fewer than k = 4
  // failure domains, and only three drives are left.
  for (const char* d : {"d0", "d2", "d4"}) {
    f.cluster.chunks->failPuts(d, Status::ioError("disk on fire"));
  }

  VersionId version = VersionId::generate(f.cluster.clock, f.random);
  ObjectWriter w(f.dp, version, "bucket", "key", f.io.get_executor(), data.size(), false);
  Status st = runTask(f.io, writeAll(w, data));
  CHECK(st.code() == Status::Code::kIoError);
  CHECK(st.message() == "disk on fire");
  CHECK(f.cluster.chunks->injected() >= 3);
  // Fragments of the failed stripe(s) did land on the other drives...
  CHECK_FALSE(f.cluster.allBlobs().empty());
  for (const char* d : {"d0", "d2", "d4"}) CHECK(f.cluster.blobs(d).empty());

  // ...and abandon finds them where they went, moved or not.
  runVoid(f.io, w.abandon());
  CHECK(f.cluster.allBlobs().empty());
}

TEST_CASE("A fragment whose drive fails its put is written to a drive of a free domain") {
  DataPathFixture f(7);  // one spare domain per stripe
  // Failed, or landed with its answer lost (no answer, or the connection cut after it
  // went out): the copy left there is not the manifest's.
  const int how = GENERATE(0, 1, 2);
  CAPTURE(how);
  std::string data = randomString(3 * kStripe + 5, 31);
  VersionId version = VersionId::generate(f.cluster.clock, f.random);
  // The drive the first stripe's placement puts fragment 1 on.
  auto chosen = placement::chooseDrives(f.cluster.map, version.toHex() + ":0", 6);
  REQUIRE(chosen);
  const std::string failing = f.cluster.map.drives[(*chosen)[1]].id;
  if (how == 0) f.cluster.chunks->failPuts(failing, Status::ioError("disk on fire"));
  if (how == 1) f.cluster.chunks->failPutsAfterLanding(failing, Status::timeout("no answer"));
  if (how == 2) {
    f.cluster.chunks->failPutsAfterLanding(failing, Status::unavailable("outcome unknown"));
  }

  index_kv::Manifest m = f.write(data, version);
  // Moved at least once (later stripes may avoid the drive from the start), each time to a
  // drive of a domain the stripe did not hold: six distinct drives per stripe, never it.
  CHECK(f.counters.moved_puts.Value() >= 1);
  CHECK(f.counters.moved_puts.Value() <= 4);
  for (const auto& s : m.stripes) {
    std::set<std::string> drives;
    for (uint16_t d : s.drives) drives.insert(m.drives[d]);
    CHECK(drives.size() == 6);
    CHECK_FALSE(drives.contains(failing));
  }
  // The manifest lists only the drives its stripes use.
  CHECK(std::find(m.drives.begin(), m.drives.end(), failing) == m.drives.end());
  // Every fragment where the manifest says; a landed copy on the failing drive is extra
  // (the orphan sweep's once the version is gone).
  CHECK(f.cluster.allBlobs().size() - f.cluster.blobs(failing).size() == 4 * 6);
  CHECK(f.cluster.blobs(failing).empty() == (how == 0));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("A fragment whose drive fails its put goes degraded when no domain is free") {
  DataPathFixture f;  // 6 drives: every domain holds a fragment of each stripe
  f.cluster.chunks->failPuts("d3", Status::noSpace("full"));
  std::string data = randomString(2 * kStripe, 32);
  index_kv::Manifest m = f.write(data);
  CHECK(f.cluster.blobs("d3").empty());
  CHECK(f.counters.moved_puts.Value() >= 1);
  for (const auto& s : m.stripes) {
    std::set<uint16_t> distinct(s.drives.begin(), s.drives.end());
    CHECK(distinct.size() == 5);  // one of the five others holds two fragments
  }
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("A fragment whose server does not answer is not moved to that server's other drive") {
  DataPathFixture f(7);
  // d0 and d1 are one server's two drives, one failure domain; d2..d6 a domain each: every
  // stripe holds a fragment in each of the six domains.
  for (auto& d : f.cluster.map.drives) {
    d.endpoint = "server-" + d.id;
    d.domain = d.id;
  }
  for (int i : {0, 1}) {
    f.cluster.map.drives[i].endpoint = "server-s0";
    f.cluster.map.drives[i].domain = "s0";
  }
  std::string data = randomString(2 * kStripe, 34);
  VersionId version = VersionId::generate(f.cluster.clock, f.random);
  auto chosen = placement::chooseDrives(f.cluster.map, version.toHex() + ":0", 6);
  REQUIRE(chosen);
  std::string failing, sibling;
  for (size_t idx : *chosen) {
    if (f.cluster.map.drives[idx].domain == "s0") failing = f.cluster.map.drives[idx].id;
  }
  sibling = failing == "d0" ? "d1" : "d0";
  // Its put times out: the server is hung, and its other drive would hang the same.
  f.cluster.chunks->failPuts(failing, Status::timeout("no answer"));
  index_kv::Manifest m = f.write(data, version);
  CHECK(f.counters.moved_puts.Value() >= 1);
  // The only free domain was the server's own: stripe 0's fragment went degraded
  // elsewhere. (The sibling answers here: a stripe placed before that failure was known
  // may have used it.)
  for (const auto& s : m.stripes) {
    for (uint16_t d : s.drives) CHECK(m.drives[d] != failing);
  }
  for (uint16_t d : m.stripes[0].drives) CHECK(m.drives[d] != sibling);
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("A moved fragment whose new drive fails too is moved once more") {
  DataPathFixture f(8);  // two drives spare in every stripe
  std::string data = randomString(kStripe, 35);
  VersionId version = VersionId::generate(f.cluster.clock, f.random);
  const std::string key = version.toHex() + ":0";
  auto chosen = placement::chooseDrives(f.cluster.map, key, 6);
  REQUIRE(chosen);
  const std::string first = f.cluster.map.drives[(*chosen)[2]].id;
  // Where fragment 2 goes when `first` fails: the writer's own choice, made here ahead.
  std::vector<std::string> holding;
  for (size_t j = 0; j < 6; ++j) {
    if (j != 2) holding.push_back(f.cluster.map.drives[(*chosen)[j]].id);
  }
  auto next = placement::chooseAnotherDrive(
      f.cluster.map, key, holding, [&](const placement::Drive& d) { return d.id != first; },
      true);
  REQUIRE(next);
  const std::string second = f.cluster.map.drives[*next].id;
  f.cluster.chunks->failPuts(first, Status::ioError("disk on fire"));
  f.cluster.chunks->failPuts(second, Status::noSpace("full"));
  index_kv::Manifest m = f.write(data, version);
  CHECK(f.counters.moved_puts.Value() == 2);
  std::set<std::string> drives;
  for (uint16_t d : m.stripes[0].drives) drives.insert(m.drives[d]);
  CHECK(drives.size() == 6);
  CHECK_FALSE(drives.contains(first));
  CHECK_FALSE(drives.contains(second));
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("A fragment put failing for a reason not the drive's is not moved") {
  DataPathFixture f(7);
  for (const auto& d : f.cluster.map.drives) {
    f.cluster.chunks->failPuts(d.id, Status::invalidArgument("bad descriptor"));
  }
  std::string data = randomString(kStripe, 33);
  VersionId version = VersionId::generate(f.cluster.clock, f.random);
  ObjectWriter w(f.dp, version, "bucket", "key", f.io.get_executor(), data.size(), false);
  Status st = runTask(f.io, writeAll(w, data));
  CHECK(st.code() == Status::Code::kInvalidArgument);
  CHECK(f.counters.moved_puts.Value() == 0);
  CHECK(f.cluster.chunks->injected() == 6);
}

TEST_CASE("The writer keeps at most two stripes in flight, and overlaps them") {
  DataPathFixture f;
  for (const auto& d : f.cluster.map.drives) {
    f.cluster.chunks->delayPuts(d.id, std::chrono::milliseconds(300));
  }
  std::string data = randomString(4 * kStripe, 18);
  index_kv::Manifest m = f.write(data);
  CHECK(m.stripes.size() == 4);
  // A stripe is submitted while the one before it is still being acknowledged (up to 12
  // puts: 12 unless the machine is too loaded to submit a stripe within the 300 ms), and
  // the writer waits for that one before it refills its buffer (never 18).
  CHECK(f.cluster.chunks->peakPutsInFlight() > 6);
  CHECK(f.cluster.chunks->peakPutsInFlight() <= 2 * 6);
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("A writer the budget cannot spare a second buffer writes one stripe at a time") {
  constexpr uint64_t kSlot = kStripe + 2 * kFragmentLen;  // data and parity of one stripe
  DataPathFixture f(6, kFragmentLen, 2 * kSlot);  // uploads may hold half: one buffer
  for (const auto& d : f.cluster.map.drives) {
    f.cluster.chunks->delayPuts(d.id, std::chrono::milliseconds(100));
  }
  std::string data = randomString(3 * kStripe + 5, 19);
  index_kv::Manifest m = f.write(data);
  CHECK(m.stripes.size() == 4);
  CHECK(f.cluster.chunks->peakPutsInFlight() <= 6);  // never two stripes at once
  CHECK(f.cluster.chunks->peakPutsInFlight() > 1);   // a stripe's puts overlap
  auto stats = f.dp.budget().stats();
  CHECK(stats.peak == kSlot);
  CHECK(stats.used == 0);  // given back when the writer ended
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("Concurrent writers share the buffer budget: never more than it, every object right") {
  constexpr uint64_t kSlot = kStripe + 2 * kFragmentLen;
  // Uploads may hold half the budget, room for two and a half writers' buffers: writers
  // wait for their turn to start, and the spare buffer is taken only when nobody waits.
  DataPathFixture f(6, kFragmentLen, 5 * kSlot);
  for (const auto& d : f.cluster.map.drives) {
    f.cluster.chunks->delayPuts(d.id, std::chrono::milliseconds(5));
  }
  constexpr int kWriters = 8;
  std::vector<std::string> data;
  std::vector<VersionId> versions;
  std::vector<std::unique_ptr<ObjectWriter>> writers;
  std::vector<Status> results(kWriters, Status::internal("not run"));
  for (int i = 0; i < kWriters; ++i) {
    data.push_back(randomString(3 * kStripe + 100 * i, 200 + i));
    versions.push_back(VersionId::generate(f.cluster.clock, f.random));
    writers.push_back(std::make_unique<ObjectWriter>(f.dp, versions[i], "bucket",
                                                     "key" + std::to_string(i),
                                                     f.io.get_executor(), data[i].size(), false));
    asio::co_spawn(f.io, writeAll(*writers[i], data[i]),
                   [&results, i](std::exception_ptr e, Status st) {
                     results[i] = e ? Status::internal("exception") : std::move(st);
                   });
  }
  f.io.restart();
  f.io.run();
  auto stats = f.dp.budget().stats();
  CHECK(stats.peak <= stats.capacity / 2);
  CHECK(stats.peak >= 2 * kSlot);
  CHECK(stats.waits > 0);  // the writers did have to wait for each other
  CHECK(stats.refusals == 0);
  for (int i = 0; i < kWriters; ++i) {
    INFO("writer " << i);
    REQUIRE(results[i].isOk());
    index_kv::Manifest m;
    m.version = versions[i];
    m.size = data[i].size();
    m.ec = f.code->profile();
    m.drives = writers[i]->drives();
    m.stripes = writers[i]->stripes();
    auto [st, got] = f.read(m, 0, data[i].size());
    REQUIRE(st.isOk());
    CHECK(got == data[i]);
  }
  writers.clear();
  CHECK(f.dp.budget().stats().used == 0);
}

TEST_CASE("A writer takes no spare buffer after its last stripe") {
  constexpr uint64_t kSlot = kStripe + 2 * kFragmentLen;
  DataPathFixture f(6, kFragmentLen, 8 * kSlot);
  std::string data = randomString(2 * kStripe, 21);  // two full stripes
  index_kv::Manifest m = f.write(data);
  CHECK(m.stripes.size() == 2);
  // The first stripe's flush took the spare to fill the second; the second's took none.
  CHECK(f.dp.budget().stats().peak == 2 * kSlot);
  CHECK(f.dp.budget().stats().used == 0);
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("A writer that cannot get a buffer within the admission wait is refused") {
  DataPathFixture f(6, kFragmentLen, 64 << 10, std::chrono::milliseconds(30));
  BufferBudget::Lease everything = f.dp.budget().tryAcquire(32 << 10, BufferBudget::Kind::kUpload);
  REQUIRE(everything.held());
  ObjectWriter w(f.dp, VersionId{}, "bucket", "key", f.io.get_executor(), kStripe, false);
  Status st = runTask(f.io, w.start());
  CHECK(st.code() == Status::Code::kUnavailable);
  CHECK(f.dp.budget().stats().refusals == 1);
  CHECK(f.cluster.allBlobs().empty());
  everything.reset();
  CHECK(runTask(f.io, w.start()).isOk());  // a later try, once there is room, goes ahead
}

TEST_CASE("The writer's buffer fits the object, with one byte to spare, up to a stripe") {
  constexpr uint32_t kFragment = 64 * 1024;  // a stripe of 256 KiB; a 16 KiB unit (4 x 4 KiB)
  DataPathFixture f(6, kFragment);
  const auto bufferFor = [&](uint64_t size) {
    ObjectWriter w(f.dp, VersionId{}, "bucket", "key", f.io.get_executor(), size, false);
    REQUIRE(runTask(f.io, w.start()).isOk());
    return w.buffer().size();
  };
  CHECK(bufferFor(0) == 16 * 1024);
  CHECK(bufferFor(100) == 16 * 1024);
  CHECK(bufferFor(16 * 1024 - 1) == 16 * 1024);
  CHECK(bufferFor(16 * 1024) == 32 * 1024);  // the byte to spare needs the next unit
  CHECK(bufferFor(4 * kFragment - 1) == 4 * kFragment);
  CHECK(bufferFor(10 * 4 * kFragment) == 4 * kFragment);
  // A stripe whose bytes do not fit its buffer is refused, not written past the end.
  ObjectWriter w(f.dp, VersionId{}, "bucket", "key", f.io.get_executor(), 100, false);
  REQUIRE(runTask(f.io, w.start()).isOk());
  CHECK(runTask(f.io, w.flush(w.buffer().size() + 1)).code() ==
        Status::Code::kInvalidArgument);
}

TEST_CASE("abandon after a successful write removes every fragment of the version") {
  DataPathFixture f;
  std::string data = randomString(2 * kStripe + 3, 16);
  VersionId version = VersionId::generate(f.cluster.clock, f.random);
  ObjectWriter w(f.dp, version, "bucket", "key", f.io.get_executor(), data.size(), false);
  REQUIRE(runTask(f.io, writeAll(w, data)).isOk());
  CHECK(f.cluster.allBlobs().size() == 3 * 6);
  runVoid(f.io, w.abandon());
  CHECK(f.cluster.allBlobs().empty());
}

TEST_CASE("The writer places no fragments on drives that are not writable") {
  DataPathFixture f(7);
  f.cluster.chunks->setReadOnly("d2");
  std::string data = randomString(4 * kStripe, 17);
  index_kv::Manifest m = f.write(data);
  CHECK(f.cluster.blobs("d2").empty());
  CHECK(std::find(m.drives.begin(), m.drives.end(), "d2") == m.drives.end());
  CHECK(f.cluster.allBlobs().size() == 4 * 6);
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("Fewer writable drives than k + m, but k of them, still take every fragment") {
  DataPathFixture f;  // 6 drives, one failure domain each, EC 4+2
  f.cluster.chunks->setReadOnly("d0");
  f.cluster.chunks->setReadOnly("d3");
  std::string data = randomString(2 * kStripe, 19);
  index_kv::Manifest m = f.write(data);
  CHECK(f.cluster.blobs("d0").empty());
  CHECK(f.cluster.blobs("d3").empty());
  // Degraded placement: all six fragments of each stripe on the four other drives.
  CHECK(f.cluster.allBlobs().size() == 2 * 6);
  for (const auto& stripe : m.stripes) {
    std::set<uint16_t> distinct(stripe.drives.begin(), stripe.drives.end());
    CHECK(stripe.drives.size() == 6);
    CHECK(distinct.size() == 4);
  }
  auto [st, got] = f.read(m, 0, data.size());
  REQUIRE(st.isOk());
  CHECK(got == data);
}

TEST_CASE("Too few writable drives for k fails the write without writing anything") {
  DataPathFixture f;
  for (const char* d : {"d0", "d2", "d4"}) f.cluster.chunks->setReadOnly(d);
  std::string data = randomString(kStripe, 18);
  VersionId version = VersionId::generate(f.cluster.clock, f.random);
  ObjectWriter w(f.dp, version, "bucket", "key", f.io.get_executor(), data.size(), false);
  Status st = runTask(f.io, writeAll(w, data));
  // Drives refuse new blobs when full: the client gets 507 XGranaryStorageFull.
  CHECK(st.code() == Status::Code::kNoSpace);
  CHECK(st.message().find("3 drives are full") != std::string::npos);
  runVoid(f.io, w.abandon());
  CHECK(f.cluster.allBlobs().empty());
}

TEST_CASE("readRangeDirect reads ranges across fragments and stripes, and fails on a lost one") {
  DataPathFixture f;
  const uint64_t size = 2 * kStripe + 12345;
  std::string data = randomString(size, 21);
  index_kv::Manifest m = f.write(data);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    uint64_t first = rng() % size;
    uint64_t length = std::min<uint64_t>(size - first, 1 + rng() % (kStripe + 7000));
    std::string out(length, '\0');
    REQUIRE(readRangeDirect(f.dp, m, first, length, reinterpret_cast<uint8_t*>(out.data()))
                .isOk());
    CHECK(out == data.substr(first, length));
  }
  // A lost data fragment fails the direct read (the caller falls back to readObjectRange).
  f.cluster.chunks->failReads(DataPathFixture::driveOf(m, 0, 0), Status::notFound("gone"));
  std::string out(1000, '\0');
  CHECK_FALSE(readRangeDirect(f.dp, m, 100, 1000, reinterpret_cast<uint8_t*>(out.data())).isOk());
  auto [st, got] = f.read(m, 100, 1000);
  REQUIRE(st.isOk());
  CHECK(got == data.substr(100, 1000));
  // Ranges outside the stripes are corruption, not a crash.
  Status past = readRangeDirect(f.dp, m, size, 10, reinterpret_cast<uint8_t*>(out.data()));
  CHECK(past.code() == Status::Code::kCorruption);
}

}  // namespace
TEST_CASE("crc32cOfRanges reads each span once and gives every range its own CRC") {
  // Batch insert computes the CRCs of its rows this way: two million tiny rows were two
  // million reads of the container.
  DataPathFixture f;
  const std::string data = randomString(3 * kCrcSpanGap + 5000, 41);
  index_kv::Manifest m = f.write(data);
  const std::vector<ByteRange> ranges = {
      {100, 50},                   // out of order,
      {0, 10},   {5, 100},         // overlapping,
      {60, 0},                     // empty,
      {kCrcSpanGap + 100, 7},      // within the gap of the span before: one span
      {3 * kCrcSpanGap, 5000},     // past a wider gap: its own span
      {3 * kCrcSpanGap + 10, 20}};
  const CrcPlan plan = planCrcs(ranges);
  CHECK(plan.spans.size() == 2);
  CHECK(plan.bytes == kCrcSpanGap + 107 + 5000);
  auto crcs = runTask(f.io, crc32cOfRanges(f.dp, m, ranges, plan));
  REQUIRE(crcs);
  REQUIRE(crcs->size() == ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    INFO("range " << i);
    CHECK((*crcs)[i] == ec::crc32c({reinterpret_cast<const uint8_t*>(data.data()) +
                                        ranges[i].first,
                                    ranges[i].length}));
  }
  const std::vector<ByteRange> past = {{data.size() - 1, 2}};
  CHECK_FALSE(runTask(f.io, crc32cOfRanges(f.dp, m, past, planCrcs(past))));

  // Stripes of 256 KiB: the sink gets writes over 64 KiB (fed on the pool), and ranges
  // that go on across stripe slices.
  DataPathFixture big(6, 64 * 1024);
  const std::string bytes = randomString(3 * 256 * 1024 + 777, 42);
  index_kv::Manifest bm = big.write(bytes);
  const std::vector<ByteRange> wide = {
      {1000, 600 * 1024}, {255 * 1024, 2048}, {0, bytes.size()}, {bytes.size() - 5, 5}};
  auto wide_crcs = runTask(big.io, crc32cOfRanges(big.dp, bm, wide, planCrcs(wide)));
  REQUIRE(wide_crcs);
  for (size_t i = 0; i < wide.size(); ++i) {
    INFO("wide range " << i);
    CHECK((*wide_crcs)[i] == ec::crc32c({reinterpret_cast<const uint8_t*>(bytes.data()) +
                                             wide[i].first,
                                         wide[i].length}));
  }
}

TEST_CASE("Concurrent reads share the buffer budget: never more than it, every byte right") {
  // Room for one and a half stripes, and a stripe is charged whole: one stream at a time
  // holds a full stripe's buffer, so the streams must take turns.
  DataPathFixture f(6, kFragmentLen, kStripe + kStripe / 2);
  const std::string data = randomString(5 * kStripe + 123, 77);
  index_kv::Manifest m = f.write(data);
  constexpr int kStreams = 8;
  std::vector<StringSink> sinks(kStreams);
  std::vector<Status> results(kStreams, Status::internal("not run"));
  for (int i = 0; i < kStreams; ++i) {
    asio::co_spawn(f.io, readInto(f.dp, m, 0, data.size(), sinks[i]),
                   [&results, i](std::exception_ptr e, Status st) {
                     results[i] = e ? Status::internal("exception") : std::move(st);
                   });
  }
  f.io.restart();
  f.io.run();
  for (int i = 0; i < kStreams; ++i) {
    INFO("stream " << i);
    CHECK(results[i].isOk());
    CHECK(sinks[i].body == data);
  }
  auto stats = f.dp.budget().stats();
  CHECK(stats.peak <= stats.capacity);
  CHECK(stats.peak >= kStripe);
  CHECK(stats.waits > 0);  // the streams did have to wait for each other
  CHECK(stats.used == 0);
}


TEST_CASE("A record insert's CRC reads hold no lease: refused once twice the budget is lent") {
  // They are asked with Holds::kNothing: with a lease's right to overdraw without bound,
  // many inserts (or upload indexings) could hold any multiple of the budget.
  DataPathFixture f(6, kFragmentLen, /*buffer_budget=*/64 << 10, std::chrono::seconds(1));
  const index_kv::Manifest m = f.write(randomString(100 << 10, 3));
  BufferBudget& budget = f.dp.budget();
  BufferBudget::Lease held = budget.tryAcquire(64 << 10);
  BufferBudget::Lease over =
      runTask(f.io, budget.acquire(64 << 10, BufferBudget::Kind::kRead,
                                   BufferBudget::Holds::kLease));  // after its patience
  REQUIRE((held.held() && over.held()));
  const std::vector<ByteRange> ranges = {{0, 100 << 10}};
  auto crcs = runTask(f.io, crc32cOfRanges(f.dp, m, ranges, planCrcs(ranges)));
  REQUIRE_FALSE(crcs.has_value());
  CHECK(crcs.error().code() == Status::Code::kUnavailable);
  CHECK(budget.stats().refusals == 1);
  held.reset();
  over.reset();
  auto again = runTask(f.io, crc32cOfRanges(f.dp, m, ranges, planCrcs(ranges)));
  CHECK(again.has_value());
}

}  // namespace granary::gateway

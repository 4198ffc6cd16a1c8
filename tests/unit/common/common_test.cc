#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <latch>
#include <set>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <rocksdb/db.h>

#include "granary/common/base64.h"
#include "granary/common/clock.h"
#include "granary/common/cpus.h"
#include "granary/common/durable_dirs.h"
#include "granary/common/files.h"
#include "granary/common/hex.h"
#include "granary/common/ids.h"
#include "granary/common/log.h"
#include "granary/common/periodic_thread.h"
#include "granary/common/strings.h"
#include "granary/common/random.h"
#include "granary/common/rocks_resources.h"
#include "granary/common/status.h"
#include "granary/common/worker_pool.h"
#include "common/filling_fs.h"

using namespace granary;

TEST_CASE("Status maps a process short of descriptors or memory to a retryable error, EIO not") {
  for (int err : {EMFILE, ENFILE, ENOMEM}) {
    CHECK(Status::fromErrno(err, "open").retryable());
  }
  for (int err : {EIO, EROFS}) {
    CHECK(Status::fromErrno(err, "write").code() == Status::Code::kIoError);
    CHECK_FALSE(Status::fromErrno(err, "write").retryable());
  }
}

TEST_CASE("Status maps ENOSPC to kNoSpace and EAGAIN to a retryable I/O error") {
  Status s = Status::fromErrno(ENOSPC, "write");
  CHECK(s.code() == Status::Code::kNoSpace);
  CHECK(s.message().find("write") == 0);
  Status again = Status::fromErrno(EAGAIN, "read");
  CHECK(again.code() == Status::Code::kIoError);
  CHECK(again.retryable());
  CHECK(Status::ok().isOk());
}

TEST_CASE("Version ids sort by creation time and round-trip through hex") {
  ManualClock clock(1'700'000'000'000'000'000);
  SeededRandom random(42);
  VersionId a = VersionId::generate(clock, random);
  clock.advance(1);
  VersionId b = VersionId::generate(clock, random);
  CHECK(a < b);
  CHECK(a.createdUnixNanos() == 1'700'000'000'000'000'000);
  auto parsed = VersionId::fromHex(a.toHex());
  REQUIRE(parsed.has_value());
  CHECK(*parsed == a);
  CHECK_FALSE(VersionId::fromHex("xyz").has_value());
}

TEST_CASE("SecureRandom: small draws from its per-thread block never repeat, large ones bypass it") {
  SecureRandom random;
  // Draws of every small size, crossing the block's refills many times: no 16-byte draw
  // repeats, and no draw is all zeros (a wiped or unfilled block would give zeros).
  std::set<std::array<uint8_t, 16>> seen;
  for (int i = 0; i < 2000; ++i) {
    std::array<uint8_t, 16> id{};
    random.fill(id);
    CHECK(seen.insert(id).second);
    std::array<uint8_t, 33> odd{};
    random.fill(std::span<uint8_t>(odd.data(), 1 + static_cast<size_t>(i) % odd.size()));
    CHECK(std::any_of(id.begin(), id.end(), [](uint8_t b) { return b != 0; }));
  }
  // Another thread draws from its own block: its first draws differ from this one's.
  std::array<uint8_t, 16> mine{}, theirs{};
  random.fill(mine);
  std::thread([&] { random.fill(theirs); }).join();
  CHECK(mine != theirs);
  std::vector<uint8_t> large(4096);
  random.fill(large);
  CHECK(std::count(large.begin(), large.end(), 0) < 64);  // ~16 expected
}

TEST_CASE("Blob ids encode to 22 bytes and decode back") {
  SeededRandom random(7);
  ManualClock clock(5);
  BlobId id{VersionId::generate(clock, random), 123456, 7};
  auto enc = id.encode();
  auto dec = BlobId::decode(enc);
  REQUIRE(dec.has_value());
  CHECK(*dec == id);
  CHECK_FALSE(BlobId::decode(std::span<const uint8_t>(enc.data(), 21)).has_value());
}

TEST_CASE("Hex decoding rejects odd lengths and non-hex digits") {
  CHECK(fromHex("0aFF").value() == std::vector<uint8_t>{0x0a, 0xff});
  CHECK_FALSE(fromHex("abc").has_value());
  CHECK_FALSE(fromHex("zz").has_value());
  uint8_t buf[8];
  putBe64(buf, 0x0102030405060708ull);
  CHECK(getBe64(buf) == 0x0102030405060708ull);
  CHECK(buf[0] == 1);
}

TEST_CASE("WorkerPool runs every submitted task, drained before destruction") {
  std::atomic<int> done{0};
  {
    WorkerPool pool(3, "test");
    for (int i = 0; i < 1000; ++i) pool.submit([&] { done++; });
  }
  CHECK(done == 1000);
}

TEST_CASE("usableCores counts the CPUs of the thread's affinity mask, not every CPU online") {
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  CHECK(usableCores() == static_cast<size_t>(CPU_COUNT(&mine)));
  CHECK(usableCores() <= std::max(1u, std::thread::hardware_concurrency()));
  // A thread pinned to one CPU of the mask (as `taskset -c N` pins a process) sees one.
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  size_t pinned = 0;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0) pinned = usableCores();
  }).join();
  CHECK(pinned == 1);
}

TEST_CASE("A RocksDB instance whose flush found its disk full takes writes again once there is room") {
  char tmpl[] = "/tmp/granary-rocks-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  auto fs = std::make_shared<testing::FillingFileSystem>();
  {
    RocksResources resources(RocksBudget{8 << 20, 8 << 20}, fs);
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(resources.baseOptions(), dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::WriteOptions synced;
    synced.sync = true;
    REQUIRE(db->Put(synced, "a", "1").ok());
    // A flush (a table file) finds no room: RocksDB stops the instance's writes.
    fs->full = testing::FillingFileSystem::kAll;
    CHECK_FALSE(db->Flush(rocksdb::FlushOptions()).ok());
    fs->full = testing::FillingFileSystem::kNone;
    // Room again: RocksDB resumes by itself (it retries each second).
    bool resumed = false;
    for (int i = 0; i < 100 && !resumed; ++i) {
      resumed = db->Put(synced, "b", "2").ok();
      if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    CHECK(resumed);
    std::string value;
    CHECK(db->Get(rocksdb::ReadOptions(), "a", &value).ok());
    CHECK(value == "1");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("createDirectoriesDurably syncs every component into its parent, top down") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("granary-dirs-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  std::vector<fs::path> synced;
  auto record = [&](const fs::path& p) {
    synced.push_back(p);
    return fsyncPath(p);
  };
  // The parents of root's own components, from "/" down, come first.
  std::vector<fs::path> above;
  for (fs::path p = root.parent_path(); p.has_relative_path(); p = p.parent_path()) {
    above.insert(above.begin(), p);
  }
  above.insert(above.begin(), root.root_path());
  auto chain = [&](std::vector<fs::path> below) {
    std::vector<fs::path> all = above;
    all.insert(all.end(), below.begin(), below.end());
    return all;
  };

  REQUIRE(createDirectoriesDurably(root / "a" / "b" / "c" / "", record).isOk());
  CHECK(fs::is_directory(root / "a" / "b" / "c"));
  CHECK(synced == chain({root, root / "a", root / "a" / "b"}));

  SECTION("directories that exist are synced again (a crash may have come before)") {
    synced.clear();
    REQUIRE(createDirectoriesDurably(root / "a" / "b" / "d", record).isOk());
    CHECK(synced == chain({root, root / "a", root / "a" / "b"}));
  }
  SECTION("a failed sync is an error for a directory made here, not for one that existed") {
    auto failing = [](const fs::path& p) { return Status::ioError("fsync " + p.string()); };
    CHECK(createDirectoriesDurably(root / "x" / "y", failing).code() == Status::Code::kIoError);
    CHECK(createDirectoriesDurably(root / "a" / "b" / "c", failing).isOk());
  }
  SECTION("a file in the way is an error, not an exception") {
    { std::ofstream(root / "file") << "x"; }
    CHECK(!createDirectoriesDurably(root / "file" / "sub", record).isOk());
    CHECK(!createDirectoriesDurably(root / "file", record).isOk());
  }
  fs::remove_all(root);
}

TEST_CASE("readWholeFile returns every byte, or an error: never a short or empty success") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("granary-read-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  std::string big(200 * 1024 + 7, '\0');  // more than one read, NUL bytes included
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131);
  { std::ofstream(root / "big", std::ios::binary) << big; }
  { std::ofstream(root / "empty", std::ios::binary); }
  auto read = readWholeFile(root / "big");
  REQUIRE(read.has_value());
  CHECK(*read == big);
  auto empty = readWholeFile(root / "empty");
  REQUIRE(empty.has_value());
  CHECK(empty->empty());
  auto missing = readWholeFile(root / "missing");
  REQUIRE(!missing.has_value());
  CHECK(missing.error().isNotFound());
  auto directory = readWholeFile(root);  // opens, then read() fails with EISDIR
  REQUIRE(!directory.has_value());
  CHECK(directory.error().code() == Status::Code::kIoError);
  CHECK(directory.error().message().find("Is a directory") != std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("A periodic pass sees stopping() once stop() is called, and stop() waits for it") {
  PeriodicThread thread;
  std::latch running(1);
  std::atomic<bool> returned{false};
  thread.start(std::chrono::milliseconds(1), [&] {
    running.count_down();
    // A long pass (a sweep over many drives) returning between its steps.
    while (!thread.stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    returned = true;
  });
  running.wait();
  CHECK_FALSE(thread.stopping());
  thread.stop();  // would wait for ever if the pass could not see it
  CHECK(returned);
  CHECK(thread.stopping());
}

TEST_CASE("A start() during a stop() waits for the old thread: two passes never overlap") {
  PeriodicThread thread;
  std::atomic<int> in_pass{0}, most{0}, second_passes{0};
  auto enter = [&] {
    const int now = ++in_pass;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
  };
  std::latch running(1), gate(1);
  thread.start(std::chrono::milliseconds(1), [&] {
    enter();
    running.count_down();
    gate.wait();  // still in its pass while stop() joins and start() comes
    while (!thread.stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    --in_pass;
  });
  running.wait();
  std::thread stopper([&] { thread.stop(); });
  // The stopper is joining (it set the flag): a start() now must wait for it, not be a
  // no-op on the running thread.
  while (!thread.stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread starter([&] {
    thread.start(std::chrono::milliseconds(1), [&] {
      enter();
      ++second_passes;
      --in_pass;
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gate.count_down();
  // Before, start() cleared the stop flag the old pass was waiting to see: both ran.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (second_passes == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  thread.stop();  // first: before, the stopper's join waited for this
  stopper.join();
  starter.join();
  CHECK(second_passes > 0);
  CHECK(most == 1);
}

TEST_CASE("A periodic thread's first pass may come sooner than its interval") {
  PeriodicThread thread;
  std::latch ran(1);
  std::atomic<int> passes{0};
  thread.start(std::chrono::hours(1), [&] {
    if (passes++ == 0) ran.count_down();
  }, std::chrono::milliseconds(1));
  // At the default first delay it would come in an hour: fail after 30 s, not hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ran.try_wait() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  thread.stop();       // wakes its wait at once
  CHECK(passes == 1);  // the first came; the next, an hour later, never did
}

namespace granary {

TEST_CASE("strictUtf8 takes what RFC 3629 allows and nothing else") {
  for (std::string_view ok : {"", "plain", "caf\xc3\xa9", "\xe2\x82\xac", "\xed\x9f\xbf",
                              "\xee\x80\x80", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"}) {
    INFO(ok);
    CHECK(strictUtf8(ok));
    CHECK(validUtf8(ok));
  }
  for (std::string_view bad :
       {"caf\xe9", "\x80", "\xc3", "\xc0\xaf", "\xc1\xbf",  // stray, truncated, over-long
        "\xe0\x80\x80", "\xe0\x9f\xbf",                     // over-long three bytes
        "\xed\xa0\x80", "\xed\xbf\xbf",                     // surrogates
        "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf",             // over-long four bytes
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff",     // past U+10FFFF
        "\xe2\x82", "\xe2\x28\xac"}) {
    INFO(bad);
    CHECK_FALSE(strictUtf8(bad));
  }
  // Object keys keep the looser check they were stored under: surrogates, say.
  CHECK(validUtf8("\xed\xa0\x80"));
  CHECK_FALSE(validUtf8("caf\xe9"));
}

TEST_CASE("base64Decode takes the standard alphabet, end padding, and zero bits after the end") {
  CHECK(base64Decode("") == std::vector<uint8_t>{});
  CHECK(base64Decode("YQ==") == std::vector<uint8_t>{'a'});
  CHECK(base64Decode("YWI=") == std::vector<uint8_t>{'a', 'b'});
  CHECK(base64Decode("Y2Fm6Q==") == std::vector<uint8_t>{'c', 'a', 'f', 0xe9});
  CHECK(base64Decode("+/+/") == std::vector<uint8_t>{0xfb, 0xff, 0xbf});
  for (std::string_view bad : {"YQ=", "YQ==YQ==", "Y2Fm----", "Y2Fm6Q==\n\n\n\n", "Y2 m",
                               "-_-_", "====", "A===", "Y=Q=", "YR==", "YWJ=", "Y2Fm6R=="}) {
    INFO(bad);
    CHECK_FALSE(base64Decode(bad));
  }
  const std::string bytes("\0\xff\x10 binary", 10);
  CHECK(base64Decode(base64Encode(bytes)) ==
        std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

}  // namespace granary

TEST_CASE("A log line is unambiguous: CR, LF, controls, backslash, bad UTF-8 and bidi escaped") {
  // An object key is a client's bytes: with a newline it would forge a log entry.
  char path[] = "/tmp/granary-log-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(fd, STDERR_FILENO) >= 0);
  // A backslash is doubled (a key holding "\n" as two characters is not a newline), bytes
  // that are not UTF-8 are \xHH, and C1 controls (U+009B is a terminal's CSI), bidi
  // overrides and isolates (U+202E, U+2067) and the line separator U+2028 are \uHHHH.
  log::warn("key {}", std::string("a\n2025-01-01T00:00:00Z ERROR forged\r\x01\x7f\tb\xc3\xa9"
                                  "\\n\xc2\x9b\xff\xe2\x82\xac\xed\xa0\x80."
                                  "\xe2\x80\xae\xe2\x81\xa7\xe2\x80\xa8\xe2\x80\x8d"));
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(text.ends_with(" WARN key a\\n2025-01-01T00:00:00Z ERROR forged\\r\\x01\\x7f\tb\xc3\xa9"
                       "\\\\n\\u009b\\xff\xe2\x82\xac\\xed\\xa0\\x80."
                       "\\u202e\\u2067\\u2028\xe2\x80\x8d\n"));  // a joiner (U+200D) passes
}

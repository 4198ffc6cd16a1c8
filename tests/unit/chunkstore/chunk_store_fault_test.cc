// Corruption on disk and injected I/O faults.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <new>
#include <thread>
#include <utility>

#include "aligned_buffer.h"
#include "granary/chunkstore/scrubber.h"
#include "rocks_index.h"
#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

namespace {

// Fails pwrite or fdatasync of extent files with a chosen errno while armed.
class FaultyEngine final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    if (write_errno != 0) return Status::fromErrno(write_errno, "injected pwrite fault");
    return target_->pwrite(fd, data, offset);
  }
  Status fdatasync(int fd) override {
    if (sync_errno != 0) return Status::fromErrno(sync_errno, "injected fdatasync fault");
    return target_->fdatasync(fd);
  }
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    if (read_errno != 0) return Status::fromErrno(read_errno, "injected pread fault");
    return target_->pread(fd, out, offset);
  }
  std::atomic<int> write_errno{0};
  std::atomic<int> sync_errno{0};
  std::atomic<int> read_errno{0};
};

}  // namespace

TEST_CASE("A flipped payload bit fails reads touching its block only") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  auto engine = makeEngine(engine_name);
  StoreFixture f(*engine);
  BlobId id = makeId(1);
  auto data = randomBytes(4 * 4096, 1);
  REQUIRE(f.store->put(descriptor(id), data).isOk());
  flipBit(extentPath(f.options.dir, 0), kFirstPayload + 4096 + 1234);  // block 1

  std::vector<uint8_t> out(100);
  Status st = readVia(*f.store, async, id, 4096 + 1200, out);
  CHECK(st.code() == Status::Code::kCorruption);
  CHECK(st.message().find(id.toString()) != std::string::npos);
  CHECK(st.message().find("block 1") != std::string::npos);
  // A range that only touches the edge of block 1 still reads (and fails) the whole block.
  CHECK(readVia(*f.store, async, id, 4000, out).code() == Status::Code::kCorruption);
  // Other blocks of the same blob are verified on their own and still read.
  CHECK(readVia(*f.store, async, id, 0, std::span<uint8_t>(out.data(), 100)).isOk());
  CHECK(std::equal(out.begin(), out.end(), data.begin()));
  std::vector<uint8_t> tail(2 * 4096);
  CHECK(readVia(*f.store, async, id, 2 * 4096, tail).isOk());
  CHECK(std::equal(tail.begin(), tail.end(), data.begin() + 2 * 4096));
  // The drive remembers the corrupt blob (repair reads it) until it is removed.
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{id});
  REQUIRE(f.store->remove(id).isOk());
  CHECK(f.store->stats()->corrupt_ids.empty());
}

namespace {

// Knows which descriptors were opened without O_DIRECT (the page cache's), counts the reads
// made through each kind, remembers the buffers they landed in, and flips a byte of every
// cached read while `rot_cache` is set, as a bad memory page under the page cache would.
class CacheWatcher final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    auto fd = target_->open(path, flags, mode);
    if (fd && path.ends_with(".ext")) {
      std::lock_guard lock(mu_);
      cached_[*fd] = (flags & O_DIRECT) == 0;
    }
    return fd;
  }
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    return seen(fd, out, target_->pread(fd, out, offset));
  }
  Status preadv(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset) override {
    Status st = target_->preadv(fd, parts, offset);
    for (auto part : parts) st = seen(fd, part, std::move(st));
    return st;
  }
  void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) override {
    target_->readAsync(fd, out, offset, [this, fd, out, done = std::move(done)](Status st) mutable {
      done(seen(fd, out, std::move(st)));
    });
  }
  bool sawBuffer(const uint8_t* p) {
    std::lock_guard lock(mu_);
    return std::find(buffers_.begin(), buffers_.end(), p) != buffers_.end();
  }
  std::atomic<bool> rot_cache{false};
  std::atomic<int> cached_reads{0};
  std::atomic<int> direct_reads{0};

 private:
  Status seen(int fd, std::span<uint8_t> out, Status st) {
    bool cached;
    {
      std::lock_guard lock(mu_);
      cached = cached_[fd];
      buffers_.push_back(out.data());
    }
    ++(cached ? cached_reads : direct_reads);
    if (st.isOk() && cached && rot_cache && !out.empty()) out[out.size() - 1] ^= 0x08;
    return st;
  }
  std::mutex mu_;
  std::map<int, bool> cached_;
  std::vector<const uint8_t*> buffers_;
};

}  // namespace

TEST_CASE("Whole blocks read into an aligned buffer land there, and are still verified") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto inner = makeUringEngine();
  CacheWatcher engine(inner.get());
  StoreFixture f(engine);
  BlobId id = makeId(1);
  auto data = randomBytes(16 * 4096, 3);
  REQUIRE(f.store->put(descriptor(id), data).isOk());

  AlignedBuffer buf(data.size() + 4096, AlignedBuffer::Fill::kUninitialized);
  REQUIRE(buf.valid());
  SECTION("the whole blob") {
    REQUIRE(readVia(*f.store, async, id, 0, buf.span().first(data.size())).isOk());
    CHECK(engine.sawBuffer(buf.data()));
    CHECK(std::equal(data.begin(), data.end(), buf.data()));
  }
  SECTION("blocks further on (header and payload apart)") {
    const size_t at = 12 * 4096, len = 4 * 4096;
    REQUIRE(readVia(*f.store, async, id, at, buf.span().first(len)).isOk());
    CHECK(engine.sawBuffer(buf.data()));
    CHECK(std::equal(data.begin() + at, data.end(), buf.data()));
  }
  SECTION("an unaligned buffer or range goes through a buffer of the store's") {
    REQUIRE(readVia(*f.store, async, id, 0, buf.span().subspan(1, 8192)).isOk());
    CHECK(std::equal(data.begin(), data.begin() + 8192, buf.data() + 1));
    REQUIRE(readVia(*f.store, async, id, 100, buf.span().first(8192)).isOk());
    CHECK(std::equal(data.begin() + 100, data.begin() + 100 + 8192, buf.data()));
    CHECK_FALSE(engine.sawBuffer(buf.data()));
    CHECK_FALSE(engine.sawBuffer(buf.data() + 1));
  }
  SECTION("a flipped bit is caught in place") {
    flipBit(extentPath(f.options.dir, 0), kFirstPayload + 5 * 4096 + 99);  // block 5
    Status st = readVia(*f.store, async, id, 0, buf.span().first(data.size()));
    CHECK(engine.sawBuffer(buf.data()));
    CHECK(st.code() == Status::Code::kCorruption);
    CHECK(st.message().find("block 5") != std::string::npos);
  }
}


TEST_CASE("Reads go through the page cache, readFromDrive and --direct-reads do not") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto inner = makeUringEngine();
  CacheWatcher engine(inner.get());
  ChunkStoreOptions options;
  SECTION("cached reads (the default)") {
    StoreFixture f(engine, options);
    BlobId id = makeId(1);
    auto data = randomBytes(3 * 4096 + 10, 4);
    REQUIRE(f.store->put(descriptor(id), data).isOk());
    std::vector<uint8_t> out(data.size());
    REQUIRE(readVia(*f.store, async, id, 0, out).isOk());
    CHECK(out == data);
    CHECK(engine.cached_reads > 0);
    CHECK(engine.direct_reads == 0);
    const int cached = engine.cached_reads;
    REQUIRE(f.store->readFromDrive(id, 0, out).isOk());
    CHECK(out == data);
    CHECK(engine.cached_reads == cached);
    CHECK(engine.direct_reads > 0);
  }
  SECTION("direct reads") {
    options.cached_reads = false;
    StoreFixture f(engine, options);
    BlobId id = makeId(1);
    auto data = randomBytes(5000, 4);
    REQUIRE(f.store->put(descriptor(id), data).isOk());
    std::vector<uint8_t> out(data.size());
    REQUIRE(readVia(*f.store, async, id, 0, out).isOk());
    CHECK(out == data);
    CHECK(engine.cached_reads == 0);
    CHECK(engine.direct_reads > 0);
  }
}

TEST_CASE("readIfCached serves verified bytes from memory, and declines anything else") {
  auto engine = makeUringEngine();
  ChunkStoreOptions options;
  SECTION("cached reads") {
    StoreFixture f(*engine, options);
    BlobId id = makeId(1);
    auto data = randomBytes(6 * 4096, 8);
    REQUIRE(f.store->put(descriptor(id), data).isOk());
    std::vector<uint8_t> out(data.size());
    // Written with O_DIRECT: not in the page cache yet (and the extent's cached descriptor
    // is not open).
    CHECK_FALSE(f.store->readIfCached(id, 0, out));
    REQUIRE(f.store->read(id, 0, out).isOk());
    std::fill(out.begin(), out.end(), 0);
    REQUIRE(f.store->readIfCached(id, 0, out));
    CHECK(out == data);
    std::vector<uint8_t> part(100);
    REQUIRE(f.store->readIfCached(id, 5000, part));
    CHECK(std::equal(part.begin(), part.end(), data.begin() + 5000));
    CHECK_FALSE(f.store->readIfCached(id, data.size() - 50, part));  // past the end
    CHECK_FALSE(f.store->readIfCached(makeId(2), 0, part));           // no such blob
    // A flipped bit: declined, and read() reports it.
    flipBit(extentPath(f.options.dir, 0), kFirstPayload + 2 * 4096 + 7);
    CHECK_FALSE(f.store->readIfCached(id, 0, out));
    CHECK(f.store->read(id, 0, out).code() == Status::Code::kCorruption);
  }
  SECTION("direct reads never take it") {
    options.cached_reads = false;
    StoreFixture f(*engine, options);
    BlobId id = makeId(1);
    auto data = randomBytes(5000, 8);
    REQUIRE(f.store->put(descriptor(id), data).isOk());
    std::vector<uint8_t> out(data.size());
    REQUIRE(f.store->read(id, 0, out).isOk());
    CHECK_FALSE(f.store->readIfCached(id, 0, out));
  }
}

TEST_CASE("pinIfCached pins verified page-cache bytes, and a remove punches once the pin goes") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(1);
  auto data = randomBytes(40 * 4096 + 100, 9);  // more than one verification piece
  REQUIRE(f.store->put(descriptor(id), data).isOk());
  // Written with O_DIRECT: not in the page cache until a read puts it there.
  CHECK_FALSE(f.store->pinIfCached(id, 0, data.size()));
  std::vector<uint8_t> out(data.size());
  REQUIRE(f.store->read(id, 0, out).isOk());

  auto whole = f.store->pinIfCached(id, 0, data.size());
  REQUIRE(whole);
  CHECK(rangeBytes(*whole) == data);
  auto part = f.store->pinIfCached(id, 5000, 70'000);  // not block aligned, either end
  REQUIRE(part);
  CHECK(rangeBytes(*part) ==
        std::vector<uint8_t>(data.begin() + 5000, data.begin() + 75'000));
  CHECK_FALSE(f.store->pinIfCached(id, data.size() - 50, 100));  // past the end
  CHECK_FALSE(f.store->pinIfCached(makeId(2), 0, 100));           // no such blob
  CHECK_FALSE(f.store->pinIfCached(id, 0, 0));

  SECTION("a flipped bit is declined, and read() reports it") {
    whole.reset();
    part.reset();
    flipBit(extentPath(f.options.dir, 0), kFirstPayload + 30 * 4096 + 7);
    CHECK_FALSE(f.store->pinIfCached(id, 0, data.size()));
    CHECK(f.store->pinIfCached(id, 0, 4096));  // blocks away from the flip still pass
    CHECK(f.store->read(id, 0, out).code() == Status::Code::kCorruption);
  }
  SECTION("a remove while pinned punches when the last pin goes") {
    const int64_t allocated = allocatedBytes(extentPath(f.options.dir, 0));
    REQUIRE(f.store->remove(id).isOk());
    CHECK(f.store->read(id, 0, out).code() == Status::Code::kNotFound);
    CHECK_FALSE(f.store->pinIfCached(id, 0, 100));  // removed: no new pin
    // Both ranges still hold the blob's bytes: a send from them stays correct.
    CHECK(rangeBytes(*whole) == data);
    whole.reset();
    CHECK(allocatedBytes(extentPath(f.options.dir, 0)) == allocated);
    CHECK(rangeBytes(*part) ==
          std::vector<uint8_t>(data.begin() + 5000, data.begin() + 75'000));
    const CachedRange last{part->fd, part->offset, part->length, nullptr};  // no pin
    part.reset();
    // The punch is made on a thread of its own (the last pin may go on an event loop).
    const std::string extent = extentPath(f.options.dir, 0);
    for (int i = 0; i < 500 && allocatedBytes(extent) > allocated - 40 * 4096; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(allocatedBytes(extent) <= allocated - 40 * 4096);
    CHECK(rangeBytes(last) == std::vector<uint8_t>(last.length, 0));
  }
  SECTION("a pin may outlive its store") {
    f.store.reset();
    whole.reset();
    part.reset();
  }
}

TEST_CASE("A page-cache copy that fails its CRC is read again from the drive") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto inner = makeUringEngine();
  CacheWatcher engine(inner.get());
  StoreFixture f(engine);
  BlobId id = makeId(1);
  auto data = randomBytes(4 * 4096, 6);
  REQUIRE(f.store->put(descriptor(id), data).isOk());
  engine.rot_cache = true;
  std::vector<uint8_t> out(data.size());
  REQUIRE(readVia(*f.store, async, id, 0, out).isOk());
  CHECK(out == data);
  CHECK(engine.cached_reads > 0);
  CHECK(engine.direct_reads > 0);
  // Not a corrupt blob: the drive's copy is good.
  CHECK(f.store->stats()->corrupt_ids.empty());
}

TEST_CASE("A flipped header bit makes every read of the blob kCorruption") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(5000, 1)).isOk());
  SECTION("in the bucket name") { flipBit(extentPath(f.options.dir, 0), 71); }
  SECTION("in the CRC table") { flipBit(extentPath(f.options.dir, 0), 72 + 13 + 21 + 2); }
  SECTION("in the magic") { flipBit(extentPath(f.options.dir, 0), 0); }
  std::vector<uint8_t> out(10);
  CHECK(readVia(*f.store, async, id, 0, out).code() == Status::Code::kCorruption);
  CHECK(readVia(*f.store, async, id, 4500, out).code() == Status::Code::kCorruption);
  CHECK(f.store->describe(id).error().code() == Status::Code::kCorruption);
}

TEST_CASE("describe of a blob removed under it is kNotFound, of one stored again its new self") {
  // The blob goes between describe's index lookup and its header read (the engine runs
  // the change just before that read): its bytes are punched, which is no corruption.
  class BeforeRead final : public IoEngineWrapper {
   public:
    using IoEngineWrapper::IoEngineWrapper;
    Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
      if (auto hook = std::exchange(before, nullptr)) hook();
      return target_->pread(fd, out, offset);
    }
    std::function<void()> before;
  };
  auto base = makeUringEngine();
  BeforeRead engine(base.get());
  StoreFixture f(engine);
  const BlobId id = makeId(1);
  BlobDescriptor first = descriptor(id);
  first.key = "first";
  REQUIRE(f.store->put(first, randomBytes(5000, 1)).isOk());
  REQUIRE(f.store->put(descriptor(makeId(2)), randomBytes(5000, 2)).isOk());  // not at 0
  SECTION("removed") {
    engine.before = [&] { REQUIRE(f.store->remove(id).isOk()); };
    CHECK(f.store->describe(id).error().code() == Status::Code::kNotFound);
  }
  SECTION("removed and stored again") {
    BlobDescriptor second = descriptor(id);
    second.key = "second";
    engine.before = [&] {
      REQUIRE(f.store->remove(id).isOk());
      REQUIRE(f.store->put(second, randomBytes(7000, 3)).isOk());
    };
    auto got = f.store->describe(id);
    REQUIRE(got.has_value());
    CHECK(got->key == "second");
  }
  CHECK(engine.before == nullptr);  // the change did run under the read
  CHECK(f.store->stats()->corrupt_ids.empty());
}

TEST_CASE("A punched (zeroed) blob still indexed is kCorruption, not zeros") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(9000, 1)).isOk());
  int fd = ::open(extentPath(f.options.dir, 0).c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(engine->punchHole(fd, 0, 16384).isOk());
  ::close(fd);
  std::vector<uint8_t> out(10);
  CHECK(readVia(*f.store, async, id, 0, out).code() == Status::Code::kCorruption);
}

TEST_CASE("A put whose data write fails is neither indexed nor readable") {
  auto base = makeUringEngine();
  FaultyEngine engine(base.get());
  StoreFixture f(engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(100, 1)).isOk());
  engine.write_errno = EIO;
  BlobId id = makeId(2);
  Status st = f.store->put(descriptor(id), randomBytes(10'000, 2));
  CHECK(st.code() == Status::Code::kIoError);
  std::vector<uint8_t> out(10);
  CHECK(f.store->read(id, 0, out).code() == Status::Code::kNotFound);
  CHECK(f.store->stat(id).error().code() == Status::Code::kNotFound);
  CHECK(f.store->list(std::nullopt, 10)->size() == 1);
  CHECK(f.store->stats()->blobs == 1);
  CHECK(f.store->stats()->commit_batches == 1);  // the failed write's batch synced nothing
  // Once the fault clears, the same id can be written.
  engine.write_errno = 0;
  CHECK(f.store->put(descriptor(id), randomBytes(10'000, 2)).isOk());
  CHECK(f.store->read(id, 0, out).isOk());
  CHECK(f.store->stats()->commit_batches == 2);
}

TEST_CASE("A payload written in place: a failure of either write fails the put") {
  // A large page-aligned payload goes to the disk as two writes, the header region's and
  // the payload's (ChunkStore::putAsync); each may fail alone.
  class FailOneWrite final : public IoEngineWrapper {
   public:
    using IoEngineWrapper::IoEngineWrapper;
    Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
      if (data.size() == fail_size) return Status::fromErrno(EIO, "injected pwrite fault");
      return target_->pwrite(fd, data, offset);
    }
    std::atomic<size_t> fail_size{0};
  };
  const bool header = GENERATE(true, false);
  INFO((header ? "the header region's write fails" : "the payload's write fails"));
  auto base = makeEngine(GENERATE(as<std::string>{}, "posix", "io_uring"));
  FailOneWrite engine(base.get());
  StoreFixture f(engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(100, 1)).isOk());
  const auto data = randomBytes(256 << 10, 2);
  auto payload = pageAlignedCopy(data);
  engine.fail_size = header ? 4096 : data.size();
  BlobId id = makeId(2);
  Status st = f.store->put(descriptor(id), payload.span());
  CHECK(st.code() == Status::Code::kIoError);
  std::vector<uint8_t> out(10);
  CHECK(f.store->read(id, 0, out).code() == Status::Code::kNotFound);
  CHECK(f.store->stats()->blobs == 1);
  engine.fail_size = 0;
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->read(id, 0, out).code() == Status::Code::kNotFound);
  REQUIRE(f.store->put(descriptor(id), payload.span()).isOk());
  out.resize(data.size());
  REQUIRE(f.store->read(id, 0, out).isOk());
  CHECK(out == data);
}

TEST_CASE("A put whose fdatasync fails is not indexed") {
  auto base = makePosixEngine();
  FaultyEngine engine(base.get());
  StoreFixture f(engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(100, 1)).isOk());
  engine.sync_errno = EIO;
  BlobId id = makeId(2);
  CHECK_FALSE(f.store->put(descriptor(id), randomBytes(10'000, 2)).isOk());
  CHECK(f.store->stat(id).error().code() == Status::Code::kNotFound);
  engine.sync_errno = 0;
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stat(id).error().code() == Status::Code::kNotFound);
  CHECK(f.store->stats()->blobs == 1);
}

TEST_CASE("ENOSPC while writing a blob is kNoSpace") {
  auto base = makeUringEngine();
  FaultyEngine engine(base.get());
  StoreFixture f(engine);
  engine.write_errno = ENOSPC;
  BlobId id = makeId(1);
  CHECK(f.store->put(descriptor(id), randomBytes(4096, 1)).code() == Status::Code::kNoSpace);
  CHECK(f.store->stat(id).error().code() == Status::Code::kNotFound);
  engine.write_errno = 0;
  engine.sync_errno = ENOSPC;
  CHECK(f.store->put(descriptor(id), randomBytes(4096, 1)).code() == Status::Code::kNoSpace);
  CHECK(f.store->stat(id).error().code() == Status::Code::kNotFound);
}

namespace {

// A filesystem that refuses O_DIRECT the way tmpfs did before Linux 6.6: open fails EINVAL.
class NoDirectEngine final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    if ((flags & O_DIRECT) != 0) {
      ++refused;
      return fail(Status::fromErrno(EINVAL, "open " + path));
    }
    return target_->open(path, flags, mode);
  }
  std::atomic<int> refused{0};
};

}  // namespace

TEST_CASE("A drive whose filesystem refuses O_DIRECT falls back to buffered I/O") {
  auto base = makePosixEngine();
  NoDirectEngine engine(base.get());
  StoreFixture f(engine);
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(10'000, 1)).isOk());
  std::vector<uint8_t> out(10'000);
  REQUIRE(f.store->read(id, 0, out).isOk());
  CHECK(out == randomBytes(10'000, 1));
  CHECK(engine.refused == 1);  // asked once, then remembered for the drive
  REQUIRE(f.reopen().isOk());
  REQUIRE(f.store->read(id, 0, out).isOk());
}

namespace {

// O_DIRECT works, but one open fails for another reason (out of descriptors).
class FlakyOpenEngine final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    if ((flags & O_DIRECT) != 0 && fail_next_direct.exchange(false)) {
      return fail(Status::fromErrno(EMFILE, "open " + path));
    }
    if ((flags & O_ACCMODE) == O_RDWR && (flags & O_DIRECT) == 0) ++buffered_writable;
    return target_->open(path, flags, mode);
  }
  std::atomic<bool> fail_next_direct{false};
  std::atomic<int> buffered_writable{0};
};

}  // namespace

TEST_CASE("A drive that took O_DIRECT keeps it when a later open fails for another reason") {
  auto base = makePosixEngine();
  FlakyOpenEngine engine(base.get());
  ChunkStoreOptions opts;
  opts.extent_size = 1 << 20;  // a few blobs an extent: the next put opens a new one
  StoreFixture f(engine, opts);
  const auto data = randomBytes(400'000, 4);
  REQUIRE(f.store->put(descriptor(makeId(1)), data).isOk());
  engine.fail_next_direct = true;
  bool failed_once = false;
  for (int n = 2; n < 8; ++n) {  // rolls into new extents; one open fails (EMFILE)
    if (!f.store->put(descriptor(makeId(n)), data).isOk()) failed_once = true;
  }
  CHECK(failed_once);
  CHECK(engine.buffered_writable == 0);  // still O_DIRECT: no buffered extent descriptor
  std::vector<uint8_t> out(1000);
  for (int pass = 0; pass < 2; ++pass) {  // the second read may use cached block CRCs
    REQUIRE(f.store->read(makeId(1), 1234, out).isOk());
    CHECK(out == std::vector<uint8_t>(data.begin() + 1234, data.begin() + 2234));
  }
}

namespace {

// Its second read submission in a row fails to allocate (after the first went through).
class ThrowingSubmitEngine final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) override {
    if (armed && ++submissions == 2) throw std::bad_alloc();
    target_->readAsync(fd, out, offset, std::move(done));
  }
  std::atomic<bool> armed{false};
  std::atomic<int> submissions{0};
};

}  // namespace

TEST_CASE("A read whose submission fails answers with an error and ends") {
  auto base = makePosixEngine();
  ThrowingSubmitEngine engine(base.get());
  auto f = std::make_shared<StoreFixture>(engine);
  const auto data = randomBytes(300'000, 6);
  REQUIRE(f->store->put(descriptor(makeId(1)), data).isOk());
  f->store.reset();  // cold: the next read takes a header read and a body read
  REQUIRE(f->reopen().isOk());
  engine.armed = true;
  std::vector<uint8_t> out(40'000);
  std::promise<Status> answered;
  f->store->readAsync(makeId(1), 250'000, out,
                      [&answered](Status st) { answered.set_value(std::move(st)); });
  auto answer = answered.get_future();
  REQUIRE(answer.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK_FALSE(answer.get().isOk());
  CHECK(engine.submissions == 2);
  engine.armed = false;
  REQUIRE(closesWithin(f, std::chrono::seconds(10)));
}

TEST_CASE("A blob whose extent file vanished reads as kCorruption") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  BlobId id = makeId(1);
  REQUIRE(f.store->put(descriptor(id), randomBytes(100, 1)).isOk());
  f.store.reset();
  REQUIRE(std::filesystem::remove(extentPath(f.options.dir, 0)));
  REQUIRE(f.reopen().isOk());
  std::vector<uint8_t> out(100);
  CHECK(readVia(*f.store, async, id, 0, out).code() == Status::Code::kCorruption);
}

TEST_CASE("Reads racing a remove see the bytes or kNotFound, never kCorruption") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  constexpr int kBlobs = 40;
  for (int n = 0; n < kBlobs; ++n) {
    REQUIRE(f.store->put(descriptor(makeId(n)), randomBytes(64 << 10, n)).isOk());
  }
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::vector<uint8_t> out(64 << 10);
      for (int i = t; !done; i = (i + 1) % kBlobs) {
        Status st = readVia(*f.store, async, makeId(i), 0, out);
        if (st.isOk() ? out != randomBytes(64 << 10, i) : !st.isNotFound()) ++bad;
      }
    });
  }
  for (int n = 0; n < kBlobs; ++n) REQUIRE(f.store->remove(makeId(n)).isOk());
  done = true;
  for (auto& th : readers) th.join();
  CHECK(bad == 0);
  CHECK(f.store->stats()->blobs == 0);
}

TEST_CASE("A full or failing drive fails puts, stops taking blobs for a while, and keeps serving reads") {
  // ENOSPC: 5 s, then statvfs decides; EIO (a dying disk, a read-only remount): 30 s.
  // Placement leaves the drive out meanwhile, so that PUTs retried by their clients land
  // on other drives.
  struct Failure {
    int err;
    Status::Code code;
    int64_t paused_nanos;
  };
  const Failure failure = GENERATE(Failure{ENOSPC, Status::Code::kNoSpace, 5'000'000'000},
                                   Failure{EIO, Status::Code::kIoError, 30'000'000'000});
  INFO("errno " << failure.err);
  auto real = makeUringEngine();
  FaultyEngine engine(real.get());
  StoreFixture f(engine);
  const auto kept = randomBytes(20'000, 1);
  REQUIRE(f.store->put(descriptor(makeId(1)), kept).isOk());
  CHECK(f.store->writable());

  SECTION("on the data write") { engine.write_errno = failure.err; }
  SECTION("on the fdatasync") { engine.sync_errno = failure.err; }
  Status st = f.store->put(descriptor(makeId(2)), randomBytes(20'000, 2));
  CHECK(st.code() == failure.code);
  CHECK(st.message().find(makeId(2).toString()) != std::string::npos);
  CHECK_FALSE(f.store->writable());
  std::vector<uint8_t> out(kept.size());
  REQUIRE(f.store->read(makeId(1), 0, out).isOk());
  CHECK(out == kept);
  CHECK(f.store->read(makeId(2), 0, out).code() == Status::Code::kNotFound);

  // The disk recovers (space comes back): after the back-off the drive takes blobs again.
  engine.write_errno = 0;
  engine.sync_errno = 0;
  f.clock.advance(failure.paused_nanos - 1'000'000'000);
  CHECK_FALSE(f.store->writable());
  f.clock.advance(2'000'000'000);
  CHECK(f.store->writable());
  REQUIRE(f.store->put(descriptor(makeId(2)), randomBytes(20'000, 2)).isOk());
}

TEST_CASE("A drive with less free space than its reserve is not writable") {
  auto engine = makePosixEngine();
  ChunkStoreOptions options;
  options.reserve_bytes = UINT64_MAX / 2;
  StoreFixture f(*engine, options);
  CHECK_FALSE(f.store->writable());
}

TEST_CASE("A read that fails with EIO is an error, never data") {
  const bool async = GENERATE(false, true);
  INFO((async ? "readAsync" : "read"));
  auto base = makeUringEngine();
  FaultyEngine engine(base.get());
  StoreFixture f(engine);
  const auto data = randomBytes(30'000, 1);
  REQUIRE(f.store->put(descriptor(makeId(1)), data).isOk());
  engine.read_errno = EIO;
  std::vector<uint8_t> out(data.size(), 0);
  Status st = readVia(*f.store, async, makeId(1), 0, out);
  CHECK(st.code() == Status::Code::kIoError);
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
  // The disk refused the bytes: a suspect for repair, as a CRC failure is.
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{makeId(1)});
  engine.read_errno = 0;
  REQUIRE(readVia(*f.store, async, makeId(1), 0, out).isOk());
  CHECK(out == data);
  // Short of descriptors is the process's state, not the disk's: no suspect.
  REQUIRE(f.store->put(descriptor(makeId(2)), data).isOk());
  engine.read_errno = EMFILE;
  CHECK_FALSE(readVia(*f.store, async, makeId(2), 0, out).isOk());
  engine.read_errno = 0;
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{makeId(1)});
}

TEST_CASE("A scrub that the disk refuses (EIO) reports the blob as lost, EMFILE as nothing") {
  auto base = makePosixEngine();
  FaultyEngine engine(base.get());
  StoreFixture f(engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(10'000, 1)).isOk());
  ScrubOptions options;
  options.rate_bytes_per_second = 0;
  std::vector<BlobId> reported;
  Scrubber scrubber(*f.store, "test drive", options,
                    [&](const BlobId& id, const Status&) { reported.push_back(id); });
  engine.read_errno = EMFILE;  // the process is short of descriptors: try again later
  REQUIRE(scrubber.runPass().isOk());
  CHECK(scrubber.stats().corrupt == 0);
  CHECK(scrubber.stats().blobs == 0);  // not verified either
  CHECK(f.store->stats()->corrupt_ids.empty());
  engine.read_errno = EIO;
  REQUIRE(scrubber.runPass().isOk());
  engine.read_errno = 0;
  CHECK(scrubber.stats().corrupt == 1);
  CHECK(reported == std::vector<BlobId>{makeId(1)});
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{makeId(1)});  // repair's list
}

TEST_CASE("A short write (file size limit) fails the put and leaves nothing readable") {
  // RLIMIT_FSIZE makes a write that crosses the limit short, and the engine's retry of
  // the rest fail with EFBIG: a real short write, through each engine.
  auto engine = makeEngine(GENERATE(as<std::string>{}, "posix", "io_uring"));
  ChunkStoreOptions options;
  StoreFixture f(*engine, options);
  const auto first = randomBytes(600 * 1024, 1);
  REQUIRE(f.store->put(descriptor(makeId(1)), first).isOk());
  struct rlimit old {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = old;
  limited.rlim_cur = 1 << 20;  // the next blob would end past 1 MiB
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  Status st = f.store->put(descriptor(makeId(2)), randomBytes(600 * 1024, 2));
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
  ::signal(SIGXFSZ, old_handler);
  INFO(st.toString());
  CHECK_FALSE(st.isOk());
  std::vector<uint8_t> out(first.size());
  CHECK(f.store->read(makeId(2), 0, std::span<uint8_t>(out.data(), 10)).code() ==
        Status::Code::kNotFound);
  REQUIRE(f.store->read(makeId(1), 0, out).isOk());
  CHECK(out == first);
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->read(makeId(2), 0, std::span<uint8_t>(out.data(), 10)).code() ==
        Status::Code::kNotFound);
  REQUIRE(f.store->put(descriptor(makeId(2)), randomBytes(600 * 1024, 2)).isOk());
}

TEST_CASE("A drive remembers its corrupt blobs across a reopen, until they are removed") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  const BlobId bad = makeId(1);
  const BlobId good = makeId(2);
  const auto data = randomBytes(3 * 4096, 1);
  REQUIRE(f.store->put(descriptor(bad), data).isOk());
  REQUIRE(f.store->put(descriptor(good), data).isOk());
  flipBit(extentPath(f.options.dir, 0), kFirstPayload + 100);  // the first blob's block 0
  std::vector<uint8_t> out(100);
  REQUIRE(f.store->read(bad, 0, out).code() == Status::Code::kCorruption);
  REQUIRE(f.store->read(bad, 0, out).code() == Status::Code::kCorruption);  // noted once
  REQUIRE(f.store->stats()->corrupt_ids == std::vector<BlobId>{bad});

  // A restart before repair came by: the suspect is still repair's to rebuild.
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{bad});
  CHECK(f.store->read(good, 0, out).isOk());

  // Removed (repair wrote it elsewhere): its mark goes with it, also on disk.
  REQUIRE(f.store->remove(bad).isOk());
  CHECK(f.store->stats()->corrupt_ids.empty());
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stats()->corrupt_ids.empty());

  // A mark whose blob is not stored (a removal that raced a read's note) is dropped.
  f.store.reset();
  {
    auto index = RocksIndex::open(f.options.dir + "/index", f.resources);
    REQUIRE(index);
    REQUIRE((*index)->markCorrupt(makeId(9)).isOk());
    REQUIRE((*index)->markCorrupt(good).isOk());
  }
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{good});
  f.store.reset();
  auto index = RocksIndex::open(f.options.dir + "/index", f.resources);
  REQUIRE(index);
  auto marks = (*index)->corruptMarks(10);
  REQUIRE(marks);
  CHECK(*marks == std::vector<BlobId>{good});
}

namespace {

// Remembers the threads that synced a RocksDB write-ahead log.
class SyncThreadsFs final : public rocksdb::FileSystemWrapper {
 public:
  SyncThreadsFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "SyncThreadsFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    auto st = target()->NewWritableFile(name, options, result, dbg);
    if (st.ok() && name.ends_with(".log")) *result = std::make_unique<File>(std::move(*result), *this);
    return st;
  }
  std::set<std::thread::id> threads() {
    std::lock_guard lock(mu_);
    return threads_;
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, SyncThreadsFs& fs)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      fs_.note();
      return target()->Sync(o, d);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      fs_.note();
      return target()->Fsync(o, d);
    }

   private:
    SyncThreadsFs& fs_;
  };
  void note() {
    std::lock_guard lock(mu_);
    threads_.insert(std::this_thread::get_id());
  }
  std::mutex mu_;
  std::set<std::thread::id> threads_;
};

}  // namespace

TEST_CASE("A corrupt mark is written off the completion thread, which must never block") {
  auto fs = std::make_shared<SyncThreadsFs>();
  TempDir dir;
  RocksResources resources(RocksBudget{8 << 20, 8 << 20}, fs);
  ManualClock clock{1'700'000'000'000'000'000};
  auto engine = makeUringEngine();
  ChunkStoreOptions options;
  options.dir = dir.path() + "/drive";
  auto opened = openChunkStore(options, *engine, resources, clock);
  REQUIRE(opened);
  std::unique_ptr<ChunkStore> store = std::move(*opened);
  const BlobId bad = makeId(1);
  REQUIRE(store->put(descriptor(bad), randomBytes(2 * 4096, 1)).isOk());
  flipBit(extentPath(options.dir, 0), kFirstPayload + 100);
  std::vector<uint8_t> out(100);
  std::promise<std::pair<Status, std::thread::id>> completed;
  store->readAsync(bad, 0, out, [&](Status st) {
    completed.set_value({std::move(st), std::this_thread::get_id()});
  });
  auto [status, completion_thread] = completed.get_future().get();
  CHECK(status.code() == Status::Code::kCorruption);
  store.reset();  // waits for the mark to be written
  CHECK_FALSE(fs->threads().contains(completion_thread));
  opened = openChunkStore(options, *engine, resources, clock);
  REQUIRE(opened);
  CHECK((*opened)->stats()->corrupt_ids == std::vector<BlobId>{bad});  // it was written
}

TEST_CASE("A corrupt mark that does not decode costs a warning, not the drive's opening") {
  auto engine = makePosixEngine();
  StoreFixture f(*engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(4096, 1)).isOk());
  f.store.reset();
  {
    // A damaged key in the meta column family, beside a good mark.
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
        {"meta", rocksdb::ColumnFamilyOptions()}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(rocksdb::DBOptions(), f.options.dir + "/index", families,
                              &handles, &raw)
                .ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    REQUIRE(db->Put(rocksdb::WriteOptions(), handles[1], "corrupt/xx", "").ok());
    for (auto* h : handles) REQUIRE(db->DestroyColumnFamilyHandle(h).ok());
    REQUIRE(db->Close().ok());
  }
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stats()->corrupt_ids.empty());
  std::vector<uint8_t> out(4096);
  CHECK(f.store->read(makeId(1), 0, out).isOk());
}

TEST_CASE("A suspect read whole from the drive with every CRC verified is one no more") {
  auto base = makeUringEngine();
  FaultyEngine engine(base.get());
  ChunkStoreOptions options;
  options.cached_reads = false;  // every read from the drive, as the scrubber's are
  StoreFixture f(engine, options);
  const auto data = randomBytes(3 * 4096, 1);
  REQUIRE(f.store->put(descriptor(makeId(1)), data).isOk());
  engine.read_errno = EIO;  // a passing fault
  std::vector<uint8_t> out(data.size());
  REQUIRE_FALSE(f.store->read(makeId(1), 0, out).isOk());
  engine.read_errno = 0;
  REQUIRE(f.store->stats()->corrupt_ids == std::vector<BlobId>{makeId(1)});
  // A part of it proves nothing about the rest.
  std::vector<uint8_t> part(4096);
  REQUIRE(f.store->read(makeId(1), 4096, part).isOk());
  CHECK(f.store->stats()->corrupt_ids == std::vector<BlobId>{makeId(1)});
  REQUIRE(f.store->read(makeId(1), 0, out).isOk());
  CHECK(out == data);
  CHECK(f.store->stats()->corrupt_ids.empty());
  REQUIRE(f.reopen().isOk());  // its mark went too
  CHECK(f.store->stats()->corrupt_ids.empty());
}

TEST_CASE("A scrub that verifies a suspect in pieces clears it, and its mark") {
  auto base = makePosixEngine();
  FaultyEngine engine(base.get());
  StoreFixture f(engine);
  const auto data = randomBytes(3 * 4096, 1);
  REQUIRE(f.store->put(descriptor(makeId(1)), data).isOk());
  engine.read_errno = EIO;  // a passing fault makes it a suspect
  std::vector<uint8_t> out(100);
  REQUIRE_FALSE(f.store->readFromDrive(makeId(1), 0, out).isOk());
  engine.read_errno = 0;
  REQUIRE(f.store->stats()->corrupt_ids == std::vector<BlobId>{makeId(1)});
  ScrubOptions options;
  options.rate_bytes_per_second = 0;
  options.piece_bytes = 4096;  // three reads, none of them the whole blob
  Scrubber scrubber(*f.store, "test drive", options, nullptr);
  REQUIRE(scrubber.runPass().isOk());
  CHECK(scrubber.stats().blobs == 1);
  CHECK(f.store->stats()->corrupt_ids.empty());
  REQUIRE(f.reopen().isOk());
  CHECK(f.store->stats()->corrupt_ids.empty());
}

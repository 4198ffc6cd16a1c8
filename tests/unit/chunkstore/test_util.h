// Helpers shared by the chunkstore unit tests: temp dirs, ids, payloads, a store fixture.
#pragma once

#include "support/temp_dir.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "granary/chunkstore/chunk_store.h"
#include "granary/chunkstore/io_engine.h"
#include "granary/common/aligned_bytes.h"
#include "granary/common/clock.h"
#include "granary/common/ids.h"
#include "granary/common/rocks_resources.h"

namespace granary::chunkstore::testing {

using granary::test_support::TempDir;

inline BlobId makeId(uint64_t n, uint32_t stripe = 0, uint16_t fragment = 0) {
  BlobId id;
  // Spread the bits so ids do not sort in creation order.
  uint64_t x = n * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < 8; ++i) {
    id.version.bytes[i] = static_cast<uint8_t>(x >> (56 - 8 * i));
    id.version.bytes[8 + i] = static_cast<uint8_t>(n >> (56 - 8 * i));
  }
  id.stripe = stripe;
  id.fragment = fragment;
  return id;
}

inline std::vector<uint8_t> randomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// A copy of `bytes` at a 4 KiB-aligned address: a put of 64 KiB or more of whole 4 KiB
// blocks from it is written in place (ChunkStore::putAsync), as the gateway's are.
inline AlignedBytes pageAlignedCopy(std::span<const uint8_t> bytes) {
  AlignedBytes out(bytes.size());
  std::copy(bytes.begin(), bytes.end(), out.data());
  return out;
}

inline BlobDescriptor descriptor(const BlobId& id) {
  BlobDescriptor d;
  d.id = id;
  d.ec = {4, 2};
  d.stripe_data_len = 4 << 20;
  d.bucket = "training-data";
  d.key = "shards/part-00017.tar";
  return d;
}

inline std::unique_ptr<IoEngine> makeEngine(const std::string& name) {
  return name == "posix" ? makePosixEngine() : makeUringEngine();
}

// Starts an asynchronous operation with a callback and waits for the status it reports.
// Aborts after 30 s: a lost callback cannot be unwound from (it would set a promise that is
// gone, and the engine would wait for the operation forever).
inline Status waitAsync(const std::function<void(IoDone)>& start) {
  std::promise<Status> result;
  auto future = result.get_future();
  start([&result](Status st) { result.set_value(std::move(st)); });
  if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::fprintf(stderr, "waitAsync: no completion after 30 s\n");
    std::abort();
  }
  return future.get();
}

// store.read(), or store.readAsync() and a wait for its callback: one test checks both.
inline Status readVia(ChunkStore& store, bool async, const BlobId& id, uint64_t offset,
                      std::span<uint8_t> out) {
  if (!async) return store.read(id, offset, out);
  return waitAsync([&](IoDone done) { store.readAsync(id, offset, out, std::move(done)); });
}

inline std::string extentPath(const std::string& dir, uint32_t extent) {
  char buf[16];
  snprintf(buf, sizeof buf, "%08x.ext", extent);
  return dir + "/extents/" + buf;
}

// Flips one bit of a file (an extent) with plain syscalls, behind the store's back.
inline void flipBit(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("flipBit: cannot open " + path);
  uint8_t b = 0;
  bool ok = ::pread(fd, &b, 1, static_cast<off_t>(offset)) == 1;
  b ^= 0x10;
  ok = ok && ::pwrite(fd, &b, 1, static_cast<off_t>(offset)) == 1 && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("flipBit: cannot rewrite " + path);
}

// The first blob of a fresh store sits at offset 0 of extent 0; a small blob's header
// region is one 4 KiB page (docs/chunkstore-format.md): its payload starts here.
inline constexpr uint64_t kFirstPayload = 4096;

// The bytes a CachedRange names, read from its descriptor.
inline std::vector<uint8_t> rangeBytes(const CachedRange& r) {
  std::vector<uint8_t> out(r.length);
  if (::pread(r.fd, out.data(), out.size(), static_cast<off_t>(r.offset)) !=
      static_cast<ssize_t>(out.size())) {
    throw std::runtime_error("rangeBytes: short read");
  }
  return out;
}

inline int64_t allocatedBytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_blocks) * 512;
}

// One store on a temp dir; reopen() closes and opens it again on the same directory.
struct StoreFixture {
  explicit StoreFixture(IoEngine& engine_in, ChunkStoreOptions opts = {})
      : engine(engine_in), options(std::move(opts)) {
    options.dir = dir.path() + "/drive";
    auto s = openChunkStore(options, engine, resources, clock);
    if (!s) throw std::runtime_error("open failed: " + s.error().toString());
    store = std::move(*s);
  }
  Status reopen() {
    store.reset();
    auto s = openChunkStore(options, engine, resources, clock);
    if (!s) return s.error();
    store = std::move(*s);
    return Status::ok();
  }

  TempDir dir;
  IoEngine& engine;
  ChunkStoreOptions options;
  RocksResources resources{RocksBudget{8 << 20, 8 << 20}};
  ManualClock clock{1'700'000'000'000'000'000};
  std::unique_ptr<ChunkStore> store;
};

// Closes the fixture's store on another thread: true if that returned within `limit` (the
// destructor waits for the store's operations to end). On false the thread is left
// running, holding the fixture.
inline bool closesWithin(std::shared_ptr<StoreFixture> f, std::chrono::seconds limit) {
  auto closed = std::make_shared<std::promise<void>>();
  auto closed_future = closed->get_future();
  std::thread([f = std::move(f), closed] {
    f->store.reset();
    closed->set_value();
  }).detach();
  return closed_future.wait_for(limit) == std::future_status::ready;
}

}  // namespace granary::chunkstore::testing

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <stdlib.h>

#include <thread>

#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

namespace {

struct AlignedBytes {
  explicit AlignedBytes(size_t n) : size(n) {
    void* p = nullptr;
    REQUIRE(posix_memalign(&p, 4096, n) == 0);
    data = static_cast<uint8_t*>(p);
  }
  ~AlignedBytes() { free(data); }
  std::span<uint8_t> span() { return {data, size}; }
  uint8_t* data;
  size_t size;
};

}  // namespace

TEST_CASE("Both engines write, sync, read back and punch holes in O_DIRECT files") {
  auto engine_name = GENERATE(as<std::string>{}, "posix", "io_uring");
  auto engine = makeEngine(engine_name);
  INFO("engine " << engine_name);
  if (engine_name == "io_uring") CHECK(engine->name() == "io_uring");  // io_uring works here
  TempDir dir;
  auto fd = engine->open(dir.path() + "/f", O_RDWR | O_CREAT | O_DIRECT, 0644);
  REQUIRE(fd.has_value());
  const size_t n = 3 << 20;
  AlignedBytes in(n);
  auto data = randomBytes(n, 5);
  std::copy(data.begin(), data.end(), in.data);
  REQUIRE(engine->pwrite(*fd, {in.data, n}, 8192).isOk());
  REQUIRE(engine->fdatasync(*fd).isOk());
  AlignedBytes out(n);
  REQUIRE(engine->pread(*fd, out.span(), 8192).isOk());
  CHECK(std::equal(data.begin(), data.end(), out.data));

  // Reading past the end of the file is corruption: the index promised bytes that are not there.
  CHECK(engine->pread(*fd, out.span(), 8192 + 4096).code() == Status::Code::kCorruption);

  REQUIRE(engine->punchHole(*fd, 8192, 1 << 20).isOk());
  REQUIRE(engine->pread(*fd, {out.data, 4096}, 8192).isOk());
  CHECK(std::all_of(out.data, out.data + 4096, [](uint8_t b) { return b == 0; }));
  REQUIRE(engine->pread(*fd, {out.data, 4096}, 8192 + (1 << 20)).isOk());
  CHECK(std::equal(out.data, out.data + 4096, data.begin() + (1 << 20)));
  CHECK(engine->close(*fd).isOk());
  CHECK(engine->open(dir.path() + "/missing", O_RDONLY, 0).error().code() ==
        Status::Code::kNotFound);
}

TEST_CASE("The io_uring engine serves many threads at once, each on its own ring") {
  auto engine = makeUringEngine();
  TempDir dir;
  auto fd = engine->open(dir.path() + "/f", O_RDWR | O_CREAT, 0644);
  REQUIRE(fd.has_value());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto data = randomBytes(64 << 10, t);
      for (int i = 0; i < 20; ++i) {
        uint64_t off = (uint64_t(t) * 20 + i) * (64 << 10);
        if (!engine->pwrite(*fd, data, off).isOk()) ++failures;
        std::vector<uint8_t> back(data.size());
        if (!engine->pread(*fd, back, off).isOk() || back != data) ++failures;
      }
      if (!engine->fdatasync(*fd).isOk()) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(engine->close(*fd).isOk());
}

#include <catch2/catch.hpp>

#include <fstream>
#include <thread>

#include "granary/chunkstore/chunk_client.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

TEST_CASE("The local chunk client routes by drive id and refuses unknown drives") {
  auto engine = makeUringEngine();
  TempDir dir;
  RocksResources resources(RocksBudget{8 << 20, 8 << 20});
  ManualClock clock(1000);
  std::map<std::string, std::unique_ptr<ChunkStore>, std::less<>> drives;
  for (std::string name : {"d0", "d1"}) {
    ChunkStoreOptions opts;
    opts.dir = dir.path() + "/" + name;
    auto s = openChunkStore(opts, *engine, resources, clock);
    REQUIRE(s.has_value());
    drives.emplace(name, std::move(*s));
  }
  LocalChunkClient client(std::move(drives));
  BlobId id = makeId(1);
  auto data = randomBytes(6000, 1);
  REQUIRE(client.put("d1", descriptor(id), data).isOk());
  std::vector<uint8_t> out(data.size());
  REQUIRE(client.read("d1", id, 0, out).isOk());
  CHECK(out == data);
  CHECK(client.read("d0", id, 0, out).code() == Status::Code::kNotFound);
  CHECK(client.list("d1", std::nullopt, 10)->size() == 1);
  CHECK(client.stats("d1")->blobs == 1);
  CHECK(client.stats("d0")->blobs == 0);
  CHECK(client.writable("d0"));
  CHECK_FALSE(client.writable("nope"));
  CHECK(client.put("nope", descriptor(id), data).code() == Status::Code::kNotFound);
  CHECK(client.read("nope", id, 0, out).code() == Status::Code::kNotFound);
  CHECK(client.remove("nope", id).code() == Status::Code::kNotFound);
  CHECK(client.list("nope", std::nullopt, 1).error().code() == Status::Code::kNotFound);
  CHECK(client.stats("nope").error().code() == Status::Code::kNotFound);
  REQUIRE(client.remove("d1", id).isOk());
  CHECK(client.read("d1", id, 0, out).code() == Status::Code::kNotFound);
}

TEST_CASE("A drive that did not open is unavailable, not empty, through the local client") {
  // A drive whose directory is a file (or whose blob index is corrupt) fails to open; the
  // process serves the others. Its fragments are not lost (kNotFound would tell readers
  // and repair they are): every call on it is a retryable kUnavailable.
  auto engine = makeUringEngine();
  TempDir dir;
  RocksResources resources(RocksBudget{8 << 20, 8 << 20});
  ManualClock clock(1000);
  {
    std::ofstream(dir.path() + "/bad") << "not a directory";
  }
  std::map<std::string, std::unique_ptr<ChunkStore>, std::less<>> drives;
  std::map<std::string, Status, std::less<>> unopened;
  for (std::string name : {"good", "bad"}) {
    ChunkStoreOptions opts;
    opts.dir = dir.path() + "/" + name;
    auto s = openChunkStore(opts, *engine, resources, clock);
    if (s) {
      drives.emplace(name, std::move(*s));
    } else {
      unopened.emplace(name, s.error());
    }
  }
  REQUIRE(drives.contains("good"));
  REQUIRE(unopened.contains("bad"));
  LocalChunkClient client(std::move(drives), std::move(unopened));
  BlobId id = makeId(1);
  auto data = randomBytes(6000, 1);
  REQUIRE(client.put("good", descriptor(id), data).isOk());
  std::vector<uint8_t> out(data.size());
  CHECK(client.read("good", id, 0, out).isOk());
  CHECK(client.writable("good"));
  CHECK_FALSE(client.writable("bad"));
  const Status put = client.put("bad", descriptor(id), data);
  CHECK(put.code() == Status::Code::kUnavailable);
  CHECK(put.retryable());
  CHECK(put.message().find("did not open") != std::string::npos);
  CHECK(client.read("bad", id, 0, out).code() == Status::Code::kUnavailable);
  CHECK(client.stat("bad", id).error().code() == Status::Code::kUnavailable);
  CHECK(client.stats("bad").error().code() == Status::Code::kUnavailable);
  CHECK(client.remove("bad", id).code() == Status::Code::kUnavailable);
  CHECK(client.read("nope", id, 0, out).code() == Status::Code::kNotFound);  // not ours
}

TEST_CASE("Scrubbers started by the local chunk client report through stats()") {
  auto engine = makeUringEngine();
  StoreFixture f(*engine);
  REQUIRE(f.store->put(descriptor(makeId(1)), randomBytes(50'000, 1)).isOk());
  REQUIRE(f.store->put(descriptor(makeId(2)), randomBytes(50'000, 2)).isOk());
  flipBit(extentPath(f.options.dir, 0), 4096 + 10);  // blob 1's payload (first in extent 0)
  std::map<std::string, std::unique_ptr<ChunkStore>, std::less<>> drives;
  drives.emplace("d0", std::move(f.store));
  LocalChunkClient client(std::move(drives));
  ScrubOptions scrub;
  scrub.pass_interval = std::chrono::milliseconds(20);
  client.startScrubbers(scrub);
  DriveStats stats;
  for (int i = 0; i < 500; ++i) {
    stats = *client.stats("d0");
    if (stats.scrub_passes >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(stats.scrub_passes >= 1);
  CHECK(stats.corrupt_blobs >= 1);
  CHECK(stats.scrubbed_bytes >= 50'000);
}

// granary-bench's pure parts: workload specs, sizes and durations, latency percentiles and
// the payload that lets a reader check bytes it did not write.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "spec.h"
#include "stats.h"

using namespace granary::bench;

TEST_CASE("Sizes take binary and decimal units") {
  CHECK(parseSize("4096").value() == 4096);
  CHECK(parseSize("4KiB").value() == 4096);
  CHECK(parseSize("4k").value() == 4096);
  CHECK(parseSize("64MiB").value() == (64ull << 20));
  CHECK(parseSize("1M").value() == (1ull << 20));
  CHECK(parseSize("2GiB").value() == (2ull << 30));
  CHECK(parseSize("5MB").value() == 5'000'000);
  CHECK(parseSize("0").value() == 0);
  CHECK_FALSE(parseSize(""));
  CHECK_FALSE(parseSize("KiB"));
  CHECK_FALSE(parseSize("4 KiB"));
  CHECK_FALSE(parseSize("-1"));
  CHECK_FALSE(parseSize("99999999999999999999"));
  CHECK_FALSE(parseSize("20000000000TiB"));
  CHECK(formatSize(4096) == "4KiB");
  CHECK(formatSize(64ull << 20) == "64MiB");
  CHECK(formatSize(1536) == "1536B");
}

TEST_CASE("Durations take s, ms, m and h") {
  CHECK(parseSeconds("30").value() == 30);
  CHECK(parseSeconds("30s").value() == 30);
  CHECK(parseSeconds("500ms").value() == Approx(0.5));
  CHECK(parseSeconds("2m").value() == 120);
  CHECK(parseSeconds("1.5s").value() == Approx(1.5));
  CHECK_FALSE(parseSeconds("fast"));
  CHECK_FALSE(parseSeconds("-3s"));
}

TEST_CASE("A workload spec parses every field and fills defaults") {
  auto spec = parseWorkload(
      "name=loader,op=range,size=64MiB,range=64KiB-4MiB,objects=16,concurrency=8,count=1000,"
      "prefix=shards/,prepare=skip,cleanup=no");
  REQUIRE(spec);
  CHECK(spec->name == "loader");
  CHECK(spec->op == Op::kRange);
  CHECK(spec->size == (64ull << 20));
  CHECK(spec->range_min == (64ull << 10));
  CHECK(spec->range_max == (4ull << 20));
  CHECK(spec->objects == 16);
  CHECK(spec->concurrency == 8);
  CHECK(spec->count == 1000);
  CHECK(spec->prefix == "shards/");
  CHECK_FALSE(spec->prepare);
  CHECK_FALSE(spec->cleanup);
  // describe() gives the spec back in a form parseWorkload reads.
  auto again = parseWorkload(spec->describe());
  REQUIRE(again);
  CHECK(again->describe() == spec->describe());

  auto get = parseWorkload("op=get");
  REQUIRE(get);
  CHECK(get->name == "main");
  CHECK(get->objects == 100);  // reads need prepared objects
  auto put = parseWorkload("op=put,size=1MiB");
  REQUIRE(put);
  CHECK(put->objects == 0);  // a new key per PUT
  CHECK_FALSE(put->needsObjects());
}

TEST_CASE("A paced workload keeps its rate, a bad rate is refused") {
  auto spec = parseWorkload("name=loader,op=range,size=64MiB,rate=250.5");
  REQUIRE(spec);
  CHECK(spec->rate == Approx(250.5));
  auto again = parseWorkload(spec->describe());
  REQUIRE(again);
  CHECK(again->rate == Approx(250.5));
  CHECK(parseWorkload("op=get")->rate == 0);  // a closed loop unless asked
  CHECK(parseWorkload("op=get")->describe().find("rate") == std::string::npos);
  for (const char* bad : {"op=get,rate=0", "op=get,rate=-5", "op=get,rate=fast", "op=get,rate=",
                          "op=get,rate=nan", "op=get,rate=inf", "op=get,rate=1e9"}) {
    INFO(bad);
    CHECK_FALSE(parseWorkload(bad));
  }
}

TEST_CASE("A mix spec keeps its weights") {
  auto spec = parseWorkload("name=m,mix=get:70+put:20+delete:10,objects=5");
  REQUIRE(spec);
  CHECK_FALSE(spec->op);
  REQUIRE(spec->mix.size() == 3);
  CHECK(spec->mix[0].op == Op::kGet);
  CHECK(spec->mix[0].weight == 70);
  CHECK(spec->mix[2].op == Op::kDelete);
  CHECK(spec->needsObjects());
  CHECK(parseWorkload(spec->describe()).value().describe() == spec->describe());
}

TEST_CASE("Bad workload specs are refused with a reason") {
  for (const char* bad : {"", "name=x", "op=fly", "op=get,size=big", "op=get,objects=0",
                          "op=get,concurrency=0", "op=get,colour=red", "op=get,range",
                          "op=range,size=1KiB,range=4KiB-8KiB", "op=range,range=8KiB-4KiB",
                          "mix=get:0", "mix=list:5", "mix=get", "op=list,page=5000",
                          "name=a/b,op=get", "op=get,prepare=maybe", "op=get,cleanup=perhaps"}) {
    INFO(bad);
    auto spec = parseWorkload(bad);
    REQUIRE_FALSE(spec);
    CHECK_FALSE(spec.error().message().empty());
  }
}

TEST_CASE("Percentiles are nearest-rank over all samples") {
  std::vector<uint32_t> samples;
  for (uint32_t i = 1000; i >= 1; --i) samples.push_back(i * 1000);  // 1..1000 ms, reversed
  LatencySummary s = summarize(samples);
  CHECK(s.p50_ms == 500);
  CHECK(s.p90_ms == 900);
  CHECK(s.p99_ms == 990);
  CHECK(s.p999_ms == 999);
  CHECK(s.max_ms == 1000);
  CHECK(s.mean_ms == Approx(500.5));
  std::vector<uint32_t> none;
  CHECK(summarize(none).max_ms == 0);
  std::vector<uint32_t> one{2500};
  CHECK(summarize(one).p999_ms == 2.5);
}

TEST_CASE("OpStats merge adds counts and keeps every sample") {
  OpStats a, b;
  a.record(100, 10);
  b.record(200, 20, 3);
  ++b.errors;
  a.merge(b);
  CHECK(a.ops == 2);
  CHECK(a.errors == 1);
  CHECK(a.bytes == 30);
  CHECK(a.items == 3);
  CHECK(a.latency_us.size() == 2);
}

TEST_CASE("OpStats keeps each operation's latency phases beside its latency, merged in order") {
  OpStats a, b;
  a.record(100, 10, 0, {5, 60, 35});
  b.record(300, 20, 0, {200, 70, 30});
  a.merge(b);
  REQUIRE(a.latency_us.size() == 2);
  CHECK(a.wait_us == std::vector<uint32_t>{5, 200});
  CHECK(a.to_head_us == std::vector<uint32_t>{60, 70});
  CHECK(a.body_us == std::vector<uint32_t>{35, 30});
  for (size_t i = 0; i < a.latency_us.size(); ++i) {
    CHECK(a.wait_us[i] + a.to_head_us[i] + a.body_us[i] == a.latency_us[i]);
  }
}

TEST_CASE("The payload checks any byte range and catches a flipped byte") {
  Payload payload(4096, 7);  // a small pattern, so objects wrap around it
  const uint64_t seed = payload.seedFor("bucket/obj-00000001");
  CHECK(seed < 4096);
  CHECK(payload.seedFor("bucket/obj-00000002") != seed);
  std::string object;
  payload.forEachPiece(seed, 0, 10'000, 1000, [&](std::span<const char> piece) {
    CHECK(piece.size() <= 1000);
    object.append(piece.data(), piece.size());
  });
  REQUIRE(object.size() == 10'000);
  CHECK(payload.matches(seed, 0, object));
  CHECK(payload.matches(seed, 4000, std::span<const char>(object).subspan(4000, 5000)));
  // The same bytes at the wrong offset, or with one byte changed, do not match.
  CHECK_FALSE(payload.matches(seed, 1, std::span<const char>(object).subspan(0, 5000)));
  object[7777] ^= 0x01;
  CHECK_FALSE(payload.matches(seed, 0, object));
  CHECK(payload.matches(seed, 0, std::span<const char>(object).subspan(0, 7777)));
}

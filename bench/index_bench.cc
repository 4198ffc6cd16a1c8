// index_bench: how a listing's speed recovers after a bulk delete (docs/benchmarks.md).
//
// Puts --keys objects under "gone/" (from --threads threads, so commits group as the
// gateway's do), deletes them all (a lifecycle expiry or `aws s3 rm --recursive`), puts
// "kept/x", then lists the bucket's first page with delimiter "/" every second for
// --watch seconds: each listing's time, and whether the deleted keys' tombstones are still
// walked (RocksDB skips them one by one until a compaction drops them). With
// --no-compact-on-deletion the column families are opened without RocksDB's
// CompactOnDeletionCollector, as before it was added: run both to compare.
//
// --refill N puts N more keys after the delete, elsewhere in the bucket, as writes go on.
//
// Usage: index_bench [--dir D] [--keys 1000000] [--refill 0] [--threads 32] [--watch 30]
//                    [--no-compact-on-deletion]
// --dir must be on the disk to measure; the bench removes what it creates there.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "bench_dir.h"
#include "granary/common/clock.h"
#include "granary/common/ids.h"
#include "granary/common/random.h"
#include "granary/common/rocks_resources.h"
#include "granary/index_kv/index.h"

using namespace granary;
using namespace granary::index_kv;
using Clk = std::chrono::steady_clock;

namespace {

double seconds(Clk::duration d) { return std::chrono::duration<double>(d).count(); }

// Runs fn(i) for i in [0, n) on `threads` threads; false if any call failed.
template <typename Fn>
bool parallelFor(uint64_t n, int threads, Fn fn) {
  std::atomic<uint64_t> next{0};
  std::atomic<bool> ok{true};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (uint64_t i = next++; i < n && ok; i = next++) {
        if (!fn(i)) ok = false;
      }
    });
  }
  for (auto& t : pool) t.join();
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "index-bench";
  uint64_t keys = 1'000'000;
  uint64_t refill = 0;
  int threads = 32;
  int watch = 30;
  bool compact_on_deletion = true;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return std::strcmp(argv[i], name) == 0 && i + 1 < argc; };
    if (arg("--dir")) {
      dir = argv[++i];
    } else if (arg("--keys")) {
      keys = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg("--refill")) {
      refill = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg("--threads")) {
      threads = std::atoi(argv[++i]);
    } else if (arg("--watch")) {
      watch = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-compact-on-deletion") == 0) {
      compact_on_deletion = false;
    } else {
      fmt::print(stderr,
                 "usage: index_bench [--dir D] [--keys N] [--refill N] [--threads T] "
                 "[--watch S] [--no-compact-on-deletion]\n");
      return 2;
    }
  }
  if (!granary::bench::claimBenchDir(dir)) return 2;
  SystemClock clock;
  SecureRandom random;
  RocksBudget budget;
  budget.compact_on_deletion = compact_on_deletion;
  RocksResources resources(budget);
  auto opened = openIndex(IndexOptions{dir, 512}, resources, clock);
  if (!opened) {
    fmt::print(stderr, "open: {}\n", opened.error().toString());
    return 1;
  }
  Index& index = **opened;
  BucketInfo bucket;
  bucket.name = bucket.owner = "bench";
  bucket.created_unix_nanos = clock.nowUnixNanos();
  (void)index.createBucket(bucket);
  fmt::print("index_bench: {} keys put then deleted from {} threads, compact-on-deletion {}, "
             "dir {}\n",
             keys, threads, compact_on_deletion ? "on" : "off", dir);

  auto keyOf = [](uint64_t i) { return fmt::format("gone/{:016x}", i * 0x9e3779b97f4a7c15ull); };
  auto manifestOf = [&] {
    Manifest m;
    m.version = VersionId::generate(clock, random);
    m.size = 100;
    m.etag = "0123456789abcdef0123456789abcdef";
    m.mtime_unix_nanos = clock.nowUnixNanos();
    m.is_inline = true;
    m.inline_data.assign(100, 'x');
    return m;
  };
  auto t0 = Clk::now();
  if (!parallelFor(keys, threads, [&](uint64_t i) {
        return index.putObject("bench", keyOf(i), manifestOf(), Precondition::none())
            .has_value();
      })) {
    fmt::print(stderr, "a put failed\n");
    return 1;
  }
  const double put_s = seconds(Clk::now() - t0);
  t0 = Clk::now();
  if (!parallelFor(keys, threads, [&](uint64_t i) {
        return index.deleteObject("bench", keyOf(i), Precondition::none()).has_value();
      })) {
    fmt::print(stderr, "a delete failed\n");
    return 1;
  }
  const double delete_s = seconds(Clk::now() - t0);
  // Then writes go on elsewhere (under "~", after every other key): enough to flush the
  // memtable holding the tombstones into a table file, which is what the collector sees.
  t0 = Clk::now();
  if (!parallelFor(refill, threads, [&](uint64_t i) {
        return index.putObject("bench", "~/" + keyOf(i), manifestOf(), Precondition::none())
            .has_value();
      })) {
    fmt::print(stderr, "a later put failed\n");
    return 1;
  }
  const double refill_s = seconds(Clk::now() - t0);
  if (!index.putObject("bench", "kept/x", manifestOf(), Precondition::none())) {
    fmt::print(stderr, "the last put failed\n");
    return 1;
  }
  fmt::print("put      {:>10} keys {:7.2f} s {:>9.0f} keys/s\n", keys, put_s, keys / put_s);
  fmt::print("delete   {:>10} keys {:7.2f} s {:>9.0f} keys/s\n", keys, delete_s,
             keys / delete_s);
  fmt::print("put      {:>10} keys {:7.2f} s (elsewhere, after the delete)\n", refill,
             refill_s);

  // The first page, delimiter "/": one common prefix ("kept/") past every tombstone.
  ListRequest req;
  req.delimiter = "/";
  double first_ms = 0, last_ms = 0, worst_ms = 0;
  for (int s = 0; s <= watch; ++s) {
    auto l0 = Clk::now();
    auto page = index.listObjects("bench", req);
    const double ms = seconds(Clk::now() - l0) * 1e3;
    if (!page || page->common_prefixes.size() != (refill > 0 ? 2 : 1) ||
        !page->objects.empty()) {
      fmt::print(stderr, "listing: wrong answer\n");
      return 1;
    }
    if (s == 0) first_ms = ms;
    last_ms = ms;
    worst_ms = std::max(worst_ms, ms);
    fmt::print("list t={:>3} s {:9.3f} ms\n", s, ms);
    if (s < watch) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  fmt::print("summary  list after delete: first {:.3f} ms, worst {:.3f} ms, after {} s {:.3f} ms\n",
             first_ms, worst_ms, watch, last_ms);
  opened->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

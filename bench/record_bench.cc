// record_bench: the record index's own speed, without HTTP (docs/benchmarks.md).
//
//   insert   --rows row inserts (WebDataset-like keys, 40-80 bytes) in batches of 8192,
//            as the gateway's indexer writes them, then one synced commit publishing
//            the set: rows/s and index bytes per row
//   lookup   --lookups exact-key lookups (listRecords with a key, the record GET's
//            lookup) of random existing keys from --threads threads: p50, p99, ops/s
//   prefix   listing pages of 1000 rows by key prefix: rows/s
//   parse    ContainerParser over an in-memory tar of --parse-mib MiB (64 KiB members),
//            fed in 1 MiB pieces as an upload streams: MB/s
//
// Usage: record_bench [--dir D] [--rows 10000000] [--lookups 200000] [--threads 4]
//                     [--parse-mib 512]
// --dir must be on the disk to measure; the bench removes what it creates there.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "bench_dir.h"
#include "granary/common/clock.h"
#include "granary/common/ids.h"
#include "granary/common/random.h"
#include "granary/common/rocks_resources.h"
#include "granary/ec/erasure_code.h"
#include "granary/index_kv/container_parser.h"
#include "granary/index_kv/index.h"

using namespace granary;
using namespace granary::index_kv;
using Clk = std::chrono::steady_clock;

namespace {

double seconds(Clk::duration d) { return std::chrono::duration<double>(d).count(); }

// Key i of shard s: "train/shard-000123/sample-000000456.jpg" (40-ish bytes).
std::string keyOf(uint64_t i) {
  static const char* kExt[] = {"jpg", "cls", "json", "txt"};
  return fmt::format("train/shard-{:06}/sample-{:09}.{}", i / 10000, i, kExt[i % 4]);
}

// A ustar tar of `mib` MiB of 64 KiB members named "m/<n>.bin".
std::vector<uint8_t> makeTar(uint64_t mib) {
  constexpr size_t kMember = 64 * 1024;
  std::vector<uint8_t> out;
  out.reserve(mib * (1u << 20) + mib * 16 * 512 + 1024);
  std::mt19937_64 rng(1);
  for (uint64_t n = 0; n < mib * 16; ++n) {
    uint8_t h[512] = {};
    const std::string name = fmt::format("m/{:09}.bin", n);
    std::copy(name.begin(), name.end(), h);
    std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
    std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011o", unsigned(kMember));
    std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0u);
    h[156] = '0';
    std::copy_n("ustar\0" "00", 8, h + 257);
    std::fill(h + 148, h + 156, ' ');
    unsigned sum = 0;
    for (uint8_t b : h) sum += b;
    std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
    out.insert(out.end(), h, h + 512);
    const size_t at = out.size();
    out.resize(at + kMember);
    for (size_t i = at; i < out.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(out.data() + i, &v, 8);
    }
  }
  out.resize(out.size() + 1024, 0);  // end-of-archive marker
  return out;
}

uint64_t dirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/granary-record-bench";
  uint64_t rows = 10'000'000;
  uint64_t lookups = 200'000;
  uint64_t parse_mib = 512;
  int threads = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--rows") rows = std::stoull(argv[i + 1]);
    else if (a == "--lookups") lookups = std::stoull(argv[i + 1]);
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--parse-mib") parse_mib = std::stoull(argv[i + 1]);
    else {
      fmt::print(stderr, "unknown option {}\n", a);
      return 2;
    }
  }
  if (!granary::bench::claimBenchDir(dir)) return 2;
  SystemClock clock;
  SecureRandom random;
  RocksResources resources;
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
  const uint64_t containers = std::max<uint64_t>(1, rows / 10000);
  fmt::print("record_bench: {} rows in {} containers of 10000, {} lookups from {} threads, dir {}\n",
             rows, containers, lookups, threads, dir);

  // ---- insert: one container per 10000 rows, each published by a commit.
  auto t0 = Clk::now();
  uint64_t done = 0;
  for (uint64_t c = 0; c < containers; ++c) {
    const std::string container = fmt::format("train/shard-{:06}.tar", c);
    Manifest m;
    m.version = VersionId::generate(clock, random);
    m.size = 1ull << 40;
    m.etag = "e";
    m.mtime_unix_nanos = clock.nowUnixNanos();
    m.is_inline = true;
    m.records = RecordIndexInfo{"tar", "indexed", "", VersionId::generate(clock, random), 0, 0};
    if (Status st = index.createRecordSet("bench", container, m.records.set); !st.isOk()) {
      fmt::print(stderr, "createRecordSet: {}\n", st.toString());
      return 1;
    }
    const uint64_t first = c * 10000;
    const uint64_t last = std::min(rows, first + 10000);
    std::vector<RecordRow> batch;
    for (uint64_t i = first; i < last; ++i) {
      batch.push_back(RecordRow{keyOf(i), container, m.records.set, (i - first) * 4096 + 512,
                                1000 + i % 3000, uint32_t(i * 2654435761u), ""});
      if (batch.size() == 8192 || i + 1 == last) {
        if (Status st = index.putRecordRows("bench", container, m.records.set, batch); !st.isOk()) {
          fmt::print(stderr, "putRecordRows: {}\n", st.toString());
          return 1;
        }
        batch.clear();
      }
    }
    m.records.rows = last - first;
    m.inline_data.clear();
    m.size = 0;
    if (auto put = index.putObject("bench", container, m, Precondition::none()); !put) {
      fmt::print(stderr, "putObject: {}\n", put.error().toString());
      return 1;
    }
    done += last - first;
  }
  const double insert_s = seconds(Clk::now() - t0);
  const uint64_t bytes = dirBytes(dir);
  fmt::print("insert   {:>12} rows  {:8.2f} s  {:>10.0f} rows/s  {:6.1f} bytes/row on disk (WAL+SST)\n",
             done, insert_s, done / insert_s, double(bytes) / double(done));

  // ---- exact-key lookups from several threads.
  std::vector<std::vector<double>> lat(threads);
  std::atomic<uint64_t> misses{0};
  t0 = Clk::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      RecordQuery q;
      q.limit = 16;
      for (uint64_t n = t; n < lookups; n += threads) {
        q.key = keyOf(rng() % rows);
        auto s = Clk::now();
        auto page = index.listRecords("bench", q);
        lat[t].push_back(seconds(Clk::now() - s) * 1e6);
        if (!page || page->records.size() != 1) ++misses;
      }
    });
  }
  for (auto& th : pool) th.join();
  const double lookup_s = seconds(Clk::now() - t0);
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[size_t(p * (all.size() - 1))]; };
  fmt::print("lookup   {:>12} keys  {:8.2f} s  {:>10.0f} lookups/s  p50 {:.1f} us  p99 {:.1f} us  misses {}\n",
             all.size(), lookup_s, all.size() / lookup_s, pct(0.50), pct(0.99), misses.load());

  // ---- prefix listing, pages of 1000.
  t0 = Clk::now();
  RecordQuery q;
  q.prefix = "train/shard-000";
  q.limit = 1000;
  uint64_t listed = 0;
  for (int pages = 0; pages < 1000; ++pages) {
    auto page = index.listRecords("bench", q);
    if (!page) break;
    listed += page->records.size();
    if (!page->truncated) break;
    q.start_after = page->next;
  }
  const double list_s = seconds(Clk::now() - t0);
  fmt::print("prefix   {:>12} rows  {:8.2f} s  {:>10.0f} rows/s (pages of 1000)\n", listed, list_s,
             listed / list_s);
  // ---- parse: the indexer's own cost per byte of an upload (tar; CRC32C of every member).
  const std::vector<uint8_t> tar = makeTar(parse_mib);
  ContainerParser parser(ParserOptions{});
  std::vector<ParsedRecord> parsed;
  t0 = Clk::now();
  Status pst;
  for (size_t at = 0; at < tar.size() && pst.isOk(); at += 1u << 20) {
    pst = parser.feed(std::span(tar).subspan(at, std::min<size_t>(1u << 20, tar.size() - at)),
                      parsed);
  }
  if (pst.isOk()) pst = parser.finish(parsed);
  const double parse_s = seconds(Clk::now() - t0);
  if (!pst.isOk() || parsed.size() != parse_mib * 16) {
    fmt::print(stderr, "parse: {} ({} rows)\n", pst.toString(), parsed.size());
    return 1;
  }
  fmt::print("parse    {:>12} MiB   {:8.2f} s  {:>10.0f} MB/s ({} tar members of 64 KiB)\n",
             parse_mib, parse_s, tar.size() / parse_s / 1e6, parsed.size());

  opened->reset();
  std::filesystem::remove_all(dir);
  return misses.load() == 0 ? 0 : 1;
}

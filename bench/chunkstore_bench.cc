// chunkstore_bench: one drive's ChunkStore against the same disk's raw figures from fio,
// measured in the same run, printed as ratios. The first three phases alternate the store
// and fio in --rounds rounds, and a ratio is the median of the rounds' ratios.
//
//   seq-write   1 MiB blob puts from --qd threads (each put durable: group commit)
//               vs fio io_uring direct=1 1 MiB writes at iodepth --qd with one fdatasync
//               per N writes, N = the store's measured puts per group commit
//   seq-read    1 MiB blob reads (CRC-verified) vs fio 1 MiB reads, iodepth --qd
//   rand-read   4 KiB blob reads of random blobs vs fio 4 KiB random reads, iodepth --qd
//   scrub       rand-read in alternating 0.5 s windows, quiet and with the scrubber running
//               at --scrub-rate-mib: the p99 ratio, the scrubber's achieved rate, and a
//               quiet-against-quiet control ratio
//   pre-zero    durable 4 KiB puts into a fresh extent (a hole) and into a pre-zeroed
//               spare, on two more drives of the disk, alternated in 5 rounds
// The main drive pre-zeroes its spares at --spare-zero-rate-mib, as `granary serve` does.
// Reads run twice: "async", --qd reads kept in flight from one thread through
// ChunkStore::readAsync (the engine's shared ring, as fio's io_uring engine keeps its
// iodepth), and "sync", --qd threads each waiting for its ChunkStore::read (once, after
// the rounds, for comparison), "async from N threads": the async form with its --qd reads
// submitted from one thread per core, as the chunk server's event loops submit theirs
// (once, for comparison), then with io_uring "chained": each completion starts the next
// read on the engine's completion thread, no submitting thread at all (once, for
// comparison). The scrub phase uses the async form.
//
// Usage: chunkstore_bench [--dir D] [--engine io_uring|posix] [--qd 32] [--write-mib 2048]
//                         [--small-blobs 100000] [--seconds 10] [--scrub-rate-mib 50]
//                         [--scrub-piece-kib 64] [--spare-zero-rate-mib 64] [--rounds 3]
//                         [--no-fio]
// --dir must be on the disk to measure; the bench removes what it creates there.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench_dir.h"
#include "granary/chunkstore/chunk_store.h"
#include "granary/chunkstore/io_engine.h"
#include "granary/chunkstore/scrubber.h"
#include "granary/common/clock.h"
#include "granary/common/cpus.h"
#include "granary/common/log.h"
#include "granary/common/rocks_resources.h"

using namespace granary;
using namespace granary::chunkstore;
using SteadyClock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string dir = "./bench-data/chunkstore";
  std::string engine = "io_uring";
  int qd = 32;
  uint64_t write_mib = 2048;
  uint64_t small_blobs = 100'000;
  double seconds = 10;
  uint64_t scrub_rate_mib = 50;
  uint64_t scrub_piece_kib = 64;
  uint64_t spare_zero_rate_mib = 64;
  int rounds = 3;
  bool fio = true;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "chunkstore_bench: %s\nusage: chunkstore_bench [--dir D] [--engine io_uring|posix]"
               " [--qd N] [--write-mib N] [--small-blobs N] [--seconds S] [--scrub-rate-mib N]"
               " [--scrub-piece-kib N] [--spare-zero-rate-mib N] [--rounds N] [--no-fio]\n",
               why);
  std::exit(2);
}

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + k).c_str());
      return argv[++i];
    };
    if (k == "--dir") a.dir = value();
    else if (k == "--engine") a.engine = value();
    else if (k == "--qd") a.qd = std::stoi(value());
    else if (k == "--write-mib") a.write_mib = std::stoull(value());
    else if (k == "--small-blobs") a.small_blobs = std::stoull(value());
    else if (k == "--seconds") a.seconds = std::stod(value());
    else if (k == "--scrub-rate-mib") a.scrub_rate_mib = std::stoull(value());
    else if (k == "--scrub-piece-kib") a.scrub_piece_kib = std::stoull(value());
    else if (k == "--spare-zero-rate-mib") a.spare_zero_rate_mib = std::stoull(value());
    else if (k == "--rounds") a.rounds = std::stoi(value());
    else if (k == "--no-fio") a.fio = false;
    else usage(("unknown argument " + k).c_str());
  }
  if (a.qd < 1 || a.write_mib < 1 || a.small_blobs < 1 || a.seconds <= 0 ||
      a.rounds < 1 || static_cast<uint64_t>(a.rounds) > a.write_mib) usage("bad value");
  return a;
}

BlobId blobId(uint64_t n) {
  BlobId id;
  for (int i = 0; i < 8; ++i) id.version.bytes[8 + i] = static_cast<uint8_t>(n >> (56 - 8 * i));
  id.version.bytes[0] = 0xB0;
  return id;
}

BlobDescriptor descriptor(uint64_t n) {
  BlobDescriptor d;
  d.id = blobId(n);
  d.ec = {4, 2};
  d.stripe_data_len = 4 << 20;
  d.bucket = "bench";
  d.key = fmt::format("blob-{}", n);
  return d;
}

double secondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// Runs `fn(thread, next)` on `threads` threads, handing out 0..count-1; returns seconds.
template <typename Fn>
double parallelFor(int threads, uint64_t count, Fn fn) {
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  auto start = SteadyClock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (uint64_t i; (i = next.fetch_add(1)) < count && !failed;) {
        Status st = fn(i);
        if (!st) {
          std::fprintf(stderr, "chunkstore_bench: %s\n", st.toString().c_str());
          failed = true;
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  if (failed) std::exit(1);
  return secondsSince(start);
}

struct Latencies {
  uint64_t ops = 0;
  double seconds = 0;
  double p50_us = 0;
  double p99_us = 0;
  double cpu_seconds = 0;  // the process's user and system time meanwhile, every thread
};

// The process's user and system CPU time so far, every thread.
double cpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

// Sorts `all` and reads its median and 99th percentile.
Latencies percentiles(std::vector<float>& all, double seconds) {
  Latencies out;
  out.seconds = seconds;
  out.ops = all.size();
  if (!all.empty()) {
    std::sort(all.begin(), all.end());
    out.p50_us = all[all.size() / 2];
    out.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return out;
}

// `raw`, when given, also receives every latency (to merge windows).
Latencies summarize(std::vector<std::vector<float>>& lat, double seconds,
                    std::vector<float>* raw) {
  std::vector<float> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  if (raw != nullptr) raw->insert(raw->end(), all.begin(), all.end());
  return percentiles(all, seconds);
}

[[noreturn]] void die(const Status& st) {
  std::fprintf(stderr, "chunkstore_bench: %s\n", st.toString().c_str());
  std::exit(1);
}

// kChained: each completion starts the next read from the engine's completion thread, as an
// event-driven server would (for comparison: no hand-off to a submitting thread). Only
// with an engine that completes asynchronous calls on its own thread (io_uring): one that
// completes them before returning would recurse.
enum class ReadMode { kSync, kAsync, kChained };

// Reads the first `len` bytes of blob pick(i) for i = 0, 1, ... until `count` reads are
// done or `seconds` have passed, `qd` at a time (the header's "sync" and "async"). `raw`,
// when given, also receives every latency.
template <typename Pick>
Latencies runReads(ChunkStore& store, ReadMode mode, int qd, size_t len, uint64_t count,
                   double seconds, Pick pick, std::vector<float>* raw = nullptr,
                   int submitters = 1) {
  std::vector<std::vector<float>> lat(qd);
  std::vector<std::vector<uint8_t>> bufs(qd, std::vector<uint8_t>(len));
  const double cpu_start = cpuSeconds();
  const auto start = SteadyClock::now();
  auto summarizeAll = [&] {
    Latencies out = summarize(lat, secondsSince(start), raw);
    out.cpu_seconds = cpuSeconds() - cpu_start;
    return out;
  };
  const auto deadline = start + std::chrono::duration<double>(seconds);
  if (mode == ReadMode::kSync) {
    std::atomic<uint64_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < qd; ++t) {
      pool.emplace_back([&, t] {
        for (uint64_t i; SteadyClock::now() < deadline && (i = next.fetch_add(1)) < count;) {
          auto t0 = SteadyClock::now();
          if (Status st = store.read(blobId(pick(i)), 0, bufs[t]); !st) die(st);
          lat[t].push_back(static_cast<float>(secondsSince(t0) * 1e6));
        }
      });
    }
    for (auto& t : pool) t.join();
    return summarizeAll();
  }
  if (mode == ReadMode::kChained) {
    std::mutex mu;
    std::condition_variable cv;
    int running = qd;
    std::atomic<uint64_t> next{0};
    std::function<void(int)> readNext = [&](int s) {
      const uint64_t i = next.fetch_add(1);
      if (i >= count || SteadyClock::now() >= deadline) {
        std::lock_guard lock(mu);
        if (--running == 0) cv.notify_one();
        return;
      }
      store.readAsync(blobId(pick(i)), 0, bufs[s], [&, s, t0 = SteadyClock::now()](Status st) {
        if (!st) die(st);
        lat[s].push_back(static_cast<float>(secondsSince(t0) * 1e6));
        readNext(s);
      });
    };
    for (int s = 0; s < qd; ++s) readNext(s);
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return running == 0; });
    return summarizeAll();
  }
  // kAsync: `submitters` threads, each keeping its share of the qd slots busy: submitter t
  // has slots [qd * t / submitters, qd * (t + 1) / submitters).
  std::atomic<uint64_t> next{0};
  auto submit = [&](int t) {
    const int first_slot = qd * t / submitters;
    const int slots = qd * (t + 1) / submitters - first_slot;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> idle;  // buffers (slots) with no read in flight
    for (int s = first_slot; s < first_slot + slots; ++s) idle.push_back(s);
    for (uint64_t i; SteadyClock::now() < deadline && (i = next.fetch_add(1)) < count;) {
      int s;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !idle.empty(); });
        s = idle.back();
        idle.pop_back();
      }
      store.readAsync(blobId(pick(i)), 0, bufs[s], [&, s, t0 = SteadyClock::now()](Status st) {
        if (!st) die(st);
        lat[s].push_back(static_cast<float>(secondsSince(t0) * 1e6));
        std::lock_guard lock(mu);
        idle.push_back(s);
        cv.notify_one();
      });
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return idle.size() == static_cast<size_t>(slots); });
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < submitters; ++t) threads.emplace_back(submit, t);
  submit(0);  // the first share on this thread
  for (auto& t : threads) t.join();
  return summarizeAll();
}

// A random-looking, repeatable blob number in [first, first + count) for read i.
uint64_t scattered(uint64_t i, uint64_t first, uint64_t count) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return first + (z ^ (z >> 31)) % count;
}

// Runs fio with JSON output and returns its first job.
nlohmann::json runFio(const std::string& args) {
  std::string cmd = "fio --output-format=json " + args + " 2>/dev/null";
  std::printf("  $ fio %s\n", args.c_str());
  std::fflush(stdout);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) usage("cannot run fio");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (::pclose(p) != 0) usage("fio failed (is it installed? scripts/install-deps.sh)");
  // fio may print notes before the JSON document.
  auto brace = out.find('{');
  if (brace == std::string::npos) usage("fio printed no JSON");
  return nlohmann::json::parse(out.substr(brace))["jobs"][0];
}

void row(const char* what, double mine, double fio, const char* unit, double goal) {
  if (fio > 0) {
    std::printf("  %-28s %10.1f %-6s fio %10.1f   ratio %.2f (goal >= %.1f)\n", what, mine, unit,
                fio, mine / fio, goal);
  } else {
    std::printf("  %-28s %10.1f %s\n", what, mine, unit);
  }
}

// One phase's figures in one round: the store's, and the reference's (fio's, measured right
// before or after it, or for the pre-zero phase a hole's).
struct Round {
  double mine = 0;
  double fio = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double medianFio(const std::vector<Round>& rounds) {
  std::vector<double> v;
  for (const Round& r : rounds) v.push_back(r.fio);
  return median(v);
}

// The medians of the store's figures and the reference's (fio's, unless `base` names
// another), the median of the rounds' ratios (what the goal, if any, is checked against),
// then each round's ratio.
void roundsRow(const char* what, const std::vector<Round>& rounds, const char* unit,
               double goal, const char* base = "fio") {
  std::vector<double> mine, ratios;
  std::string each;
  for (const Round& r : rounds) {
    mine.push_back(r.mine);
    if (r.fio > 0) {
      ratios.push_back(r.mine / r.fio);
      each += fmt::format("{}{:.2f}", each.empty() ? "" : ", ", r.mine / r.fio);
    }
  }
  if (ratios.empty()) return row(what, median(mine), 0, unit, goal);
  const std::string goal_text = goal > 0 ? fmt::format("goal >= {:.1f}; ", goal) : "";
  std::printf("  %-28s %10.1f %-6s %s %10.1f   ratio %.2f (%srounds %s)\n", what, median(mine),
              unit, base, medianFio(rounds), median(ratios), goal_text.c_str(), each.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parseArgs(argc, argv);
  log::setLevel(log::Level::kWarn);
  namespace fs = std::filesystem;
  const std::string drive = args.dir + "/drive";
  const std::string fio_dir = args.dir + "/fio";
  if (!granary::bench::claimBenchDir(args.dir)) return 2;
  fs::create_directories(fio_dir);

  auto engine = args.engine == "posix" ? makePosixEngine() : makeUringEngine();
  RocksResources resources(RocksBudget{256 << 20, 64 << 20});
  SystemClock clock;
  ChunkStoreOptions options;
  options.dir = drive;
  // The drive's own figures, as fio's direct=1 measures them: reads past the page cache
  // (`granary serve --direct-reads`; by default it serves hot blobs from the page cache).
  options.cached_reads = false;
  options.spare_zero_rate = args.spare_zero_rate_mib << 20;
  auto opened = openChunkStore(options, *engine, resources, clock);
  if (!opened) usage(opened.error().toString().c_str());
  ChunkStore& store = **opened;

  const uint64_t big = args.write_mib;  // 1 MiB blobs
  std::printf("chunkstore_bench: dir %s, engine %s, %d threads (queue depth), %llu x 1 MiB "
              "blobs, %llu x 4 KiB blobs, %.0f s random reads, %zu cores\n",
              args.dir.c_str(), std::string(engine->name()).c_str(), args.qd,
              static_cast<unsigned long long>(big),
              static_cast<unsigned long long>(args.small_blobs), args.seconds,
              usableCores());

  std::vector<uint8_t> payload(1 << 20);
  std::mt19937_64 rng(42);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());

  // Each of the three measured phases runs in --rounds parts that alternate the store and
  // fio (the store first in even rounds, fio first in odd ones); a figure is the median of
  // its rounds, and a ratio the median of the rounds' ratios. This virtio disk's rates
  // drift by tens of percent within a minute (fio's own 1 MiB reads: 1,084-2,140 MiB/s in
  // three consecutive runs), so two figures measured once each, a minute apart, gave
  // ratios that moved with the disk more than with the store.
  const int rounds = args.rounds;
  auto roundSlice = [&](int r, uint64_t n) {  // [first, last) of round r's share of n
    return std::pair<uint64_t, uint64_t>{n * r / rounds, n * (r + 1) / rounds};
  };
  // The store's spare zeroer runs at full speed once the drive has been quiet for 250 ms,
  // as it is while fio runs: fio starts only once the zeroer has had its quiet turn (its
  // zeroed-bytes count stood still for longer than that), so that it measures the disk
  // alone, as the store's rounds do with the zeroer at its rate.
  auto zeroerDone = [&] {
    uint64_t last = UINT64_MAX;
    for (int i = 0; i < 100; ++i) {
      auto stats = store.stats();
      if (!stats) return;
      if (stats->spare_zeroed_bytes == last) return;
      last = stats->spare_zeroed_bytes;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  };
  auto inOrder = [&](int r, auto&& store_part, auto&& fio_part) {
    if (r % 2 == 0) store_part();
    if (args.fio) {
      zeroerDone();
      fio_part();
    }
    if (r % 2 == 1) store_part();
  };
  auto fioJob = [&](const std::string& name, int r, uint64_t mib, const std::string& extra) {
    return runFio(fmt::format("--name={} --directory={} --filename=fio-{}.dat "
                              "--ioengine=io_uring --direct=1 --iodepth={} --size={}M {}",
                              name, fio_dir, r, args.qd, mib, extra));
  };
  if (args.fio) {
    std::printf("fio on the same disk, alternated with the store in %d rounds:\n", rounds);
  }

  // 1. Sequential 1 MiB writes; fio syncs as often as the store's group commit did in the
  // store's latest round.
  std::vector<Round> writes(rounds), reads(rounds), rand(rounds);
  std::vector<double> batch_sizes;
  int fsync_every = 1;
  for (int r = 0; r < rounds; ++r) {
    auto [lo, hi] = roundSlice(r, big);
    inOrder(
        r,
        [&] {
          auto before = store.stats();
          double sec = parallelFor(args.qd, hi - lo, [&](uint64_t i) {
            return store.put(descriptor(lo + i), payload);
          });
          auto after = store.stats();
          const double per_sync =
              double(after->committed_puts - before->committed_puts) /
              double(std::max<uint64_t>(1, after->commit_batches - before->commit_batches));
          batch_sizes.push_back(per_sync);
          fsync_every = std::max(1, static_cast<int>(per_sync + 0.5));
          writes[r].mine = double(hi - lo) / sec;
        },
        [&] {
          // Into a hole, as the store's extents are (ftruncate'd, not fallocate'd): fio's
          // default lays the file out first (native fallocate), which writes ~10% faster.
          auto w = fioJob("seqwrite", r, hi - lo,
                          fmt::format("--rw=write --bs=1M --fdatasync={} --fallocate=truncate",
                                      fsync_every));
          writes[r].fio = w["write"]["bw_bytes"].get<double>() / (1 << 20);
        });
  }

  // 2. Sequential 1 MiB reads (every block CRC-verified) of what each round wrote.
  for (int r = 0; r < rounds; ++r) {
    auto [lo, hi] = roundSlice(r, big);
    inOrder(
        r,
        [&] {
          auto got = runReads(store, ReadMode::kAsync, args.qd, 1 << 20, hi - lo, 1e9,
                              [lo](uint64_t i) { return lo + i; });
          reads[r].mine = double(got.ops) / got.seconds;
        },
        [&] {
          auto got = fioJob("seqread", r, hi - lo, "--rw=read --bs=1M");
          reads[r].fio = got["read"]["bw_bytes"].get<double>() / (1 << 20);
        });
  }
  auto sync_read = runReads(store, ReadMode::kSync, args.qd, 1 << 20, big, 1e9,
                            [](uint64_t i) { return i; });
  const double read_mibs_sync = double(sync_read.ops) / sync_read.seconds;

  // 3. 4 KiB blobs, then random reads of them.
  std::vector<uint8_t> small(4096);
  for (auto& b : small) b = static_cast<uint8_t>(rng());
  const uint64_t first_small = 1ull << 40;
  double ssec = parallelFor(args.qd, args.small_blobs, [&](uint64_t i) {
    return store.put(descriptor(first_small + i), small);
  });
  auto randomReads = [&](ReadMode mode, double seconds, std::vector<float>* raw = nullptr,
                         int submitters = 1) {
    return runReads(
        store, mode, args.qd, 4096, UINT64_MAX, seconds,
        [&](uint64_t i) { return scattered(i, first_small, args.small_blobs); }, raw,
        submitters);
  };
  const int rand_seconds = std::max(1, static_cast<int>(args.seconds / rounds + 0.5));
  std::vector<float> quiet_all;
  std::vector<double> fio_p99s;
  // The blob index's entries in memory, counted over the quiet random reads (all forms).
  const auto index_before = store.stats();
  double quiet_seconds_all = 0, quiet_cpu_all = 0;
  for (int r = 0; r < rounds; ++r) {
    auto [lo, hi] = roundSlice(r, big);
    inOrder(
        r,
        [&] {
          Latencies got = randomReads(ReadMode::kAsync, rand_seconds, &quiet_all);
          quiet_seconds_all += got.seconds;
          quiet_cpu_all += got.cpu_seconds;
          rand[r].mine = double(got.ops) / got.seconds;
        },
        [&] {
          auto got = fioJob("randread", r, hi - lo,
                            fmt::format("--rw=randread --bs=4k --time_based --runtime={}",
                                        rand_seconds));
          rand[r].fio = got["read"]["iops"].get<double>();
          fio_p99s.push_back(
              got["read"]["clat_ns"]["percentile"]["99.000000"].get<double>() / 1e3);
        });
  }
  Latencies quiet = percentiles(quiet_all, quiet_seconds_all);
  quiet.cpu_seconds = quiet_cpu_all;
  Latencies quiet_sync = randomReads(ReadMode::kSync, args.seconds);
  const int cores = static_cast<int>(usableCores());
  std::optional<Latencies> quiet_per_core;
  if (cores > 1 && args.qd >= cores) {
    quiet_per_core = randomReads(ReadMode::kAsync, args.seconds, nullptr, cores);
  }
  std::optional<Latencies> quiet_chained;
  if (args.engine == "io_uring") quiet_chained = randomReads(ReadMode::kChained, args.seconds);
  const auto index_after = store.stats();

  // 4. Random reads in alternating windows, quiet and with the scrubber running, so that
  // the disk's own drift (this virtio disk's p99 moves by tens of percent from one second
  // to the next) falls on both sides alike: many short windows. With four pairs of 2.5 s
  // windows, the same binary measured 0.75x to 2.53x. Each scrubbed window starts a fresh
  // scrubber and is followed by a second quiet window: the ratio of the second quiet
  // windows' p99 to the first's is the run's control, the spread that drift alone gives.
  constexpr double kWindow = 0.5;
  const int windows = std::max(4, static_cast<int>(args.seconds / kWindow + 0.5));
  ScrubOptions so;
  so.rate_bytes_per_second = args.scrub_rate_mib << 20;
  so.piece_bytes = args.scrub_piece_kib << 10;
  so.pass_interval = std::chrono::milliseconds(0);
  std::vector<float> quiet_raw, scrub_raw, control_raw;
  std::vector<double> quiet_p99s, scrub_p99s;
  uint64_t scrub_bytes = 0;
  double quiet_seconds = 0, scrub_seconds = 0, control_seconds = 0;
  for (int w = 0; w < windows; ++w) {
    Latencies q = randomReads(ReadMode::kAsync, kWindow, &quiet_raw);
    Scrubber scrubber(store, "bench", so);
    scrubber.start();
    Latencies s = randomReads(ReadMode::kAsync, kWindow, &scrub_raw);
    scrubber.stop();
    scrub_bytes += scrubber.stats().bytes;
    Latencies c = randomReads(ReadMode::kAsync, kWindow, &control_raw);
    quiet_seconds += q.seconds;
    scrub_seconds += s.seconds;
    control_seconds += c.seconds;
    quiet_p99s.push_back(q.p99_us);
    scrub_p99s.push_back(s.p99_us);
  }
  Latencies alternated_quiet = percentiles(quiet_raw, quiet_seconds);
  Latencies scrubbed = percentiles(scrub_raw, scrub_seconds);
  Latencies control = percentiles(control_raw, control_seconds);
  const double scrub_mibs = double(scrub_bytes) / double(1 << 20) / scrub_seconds;

  // 5. Durable 4 KiB puts into a fresh extent (a hole: each group commit's fdatasync also
  // commits the new blocks' allocation to the journal) and into a pre-zeroed spare, on two
  // more drives with 256 MiB extents. Each round reopens both drives, so that their puts
  // start a new extent: the spare drive's is the spare it prepared (at full speed, and
  // waited for) after the round before. The puts fill less than half of it, so no zeroing
  // runs while they are timed.
  constexpr int kZeroRounds = 5;
  constexpr uint64_t kZeroExtent = 256ull << 20;
  const uint64_t zero_puts = std::min<uint64_t>(args.small_blobs, 15'000);  // <= 117 MiB
  // 1 MiB puts that then take the extent past half (a 4 KiB blob takes 8 KiB).
  const uint64_t refill = (kZeroExtent / 2 - zero_puts * 8192) / (1 << 20) + 4;
  std::vector<Round> prezeroed(kZeroRounds);  // mine: into a spare; fio: into a hole (the base)
  {
    struct Drive {
      std::string dir;
      uint64_t zero_rate;
      std::unique_ptr<ChunkStore> store;
    };
    Drive holes{args.dir + "/drive-holes", 0, nullptr};
    Drive spares{args.dir + "/drive-spares", 1ull << 40, nullptr};  // unlimited
    auto reopen = [&](Drive& d) {
      d.store.reset();
      ChunkStoreOptions o;
      o.dir = d.dir;
      o.extent_size = kZeroExtent;
      o.spare_zero_rate = d.zero_rate;
      auto s = openChunkStore(o, *engine, resources, clock);
      if (!s) usage(s.error().toString().c_str());
      d.store = std::move(*s);
    };
    // Takes the drive's active extent past half with 1 MiB puts (the spare drive then
    // prepares its spare), and waits for the spare.
    auto fill = [&](Drive& d, uint64_t base, uint64_t count) {
      parallelFor(args.qd, count,
                  [&](uint64_t i) { return d.store->put(descriptor(base + i), payload); });
      for (int i = 0; d.zero_rate > 0 && !fs::exists(d.dir + "/extents/spare.zero"); ++i) {
        if (i == 3000) usage("the spare drive made no spare in 30 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    };
    auto puts = [&](Drive& d, uint64_t base) {
      double sec = parallelFor(args.qd, zero_puts, [&](uint64_t i) {
        return d.store->put(descriptor(base + i), small);
      });
      return double(zero_puts) / sec;
    };
    for (Drive* d : {&holes, &spares}) {
      reopen(*d);
      fill(*d, 1ull << 44, kZeroExtent / 2 / (1 << 20) + 8);
    }
    for (int r = 0; r < kZeroRounds; ++r) {
      const uint64_t base = (2ull + r) << 44;
      auto hole_part = [&] {
        reopen(holes);
        prezeroed[r].fio = puts(holes, base);
        fill(holes, base + zero_puts, refill);
      };
      auto spare_part = [&] {
        reopen(spares);
        prezeroed[r].mine = puts(spares, base);
        fill(spares, base + zero_puts, refill);
      };
      if (r % 2 == 0) hole_part();
      spare_part();
      if (r % 2 == 1) hole_part();
    }
  }

  std::printf("results (a figure is the median of %d rounds; the ratios of each round follow "
              "it):\n",
              rounds);
  roundsRow("seq write 1 MiB (MiB/s)", writes, "MiB/s", 0.8);
  std::printf("  %-28s %10.1f puts per fdatasync, median of the rounds (fio syncs as often)\n",
              "group commit", median(batch_sizes));
  roundsRow("seq read 1 MiB (MiB/s)", reads, "MiB/s", 0.9);
  row("  sync reads, for comparison", read_mibs_sync, medianFio(reads), "MiB/s", 0.9);
  row("4 KiB blob put (puts/s)", double(args.small_blobs) / ssec, 0, "", 0);
  roundsRow("rand read 4 KiB (IOPS)", rand, "IOPS", 0.7);
  row("  sync reads, for comparison", double(quiet_sync.ops) / quiet_sync.seconds,
      medianFio(rand), "IOPS", 0.7);
  if (quiet_per_core) {
    row(fmt::format("  async from {} threads", cores).c_str(),
        double(quiet_per_core->ops) / quiet_per_core->seconds, medianFio(rand), "IOPS", 0.7);
  }
  if (quiet_chained) {
    row("  chained from completions", double(quiet_chained->ops) / quiet_chained->seconds,
        medianFio(rand), "IOPS", 0.7);
  }
  auto cpuPerRead = [](const Latencies& l) {
    return l.cpu_seconds / std::max<double>(1, static_cast<double>(l.ops)) * 1e6;
  };
  std::string cpu_line =
      fmt::format("async {:.1f}, sync {:.1f}", cpuPerRead(quiet), cpuPerRead(quiet_sync));
  if (quiet_per_core) {
    cpu_line += fmt::format(", async from {} threads {:.1f}", cores, cpuPerRead(*quiet_per_core));
  }
  if (quiet_chained) cpu_line += fmt::format(", chained {:.1f}", cpuPerRead(*quiet_chained));
  std::printf("  %-28s %s (us of the process's CPU, all threads, user and system)\n",
              "rand read CPU per read", cpu_line.c_str());
  if (index_before && index_after) {
    const uint64_t hits = index_after->index_cache_hits - index_before->index_cache_hits;
    const uint64_t misses = index_after->index_cache_misses - index_before->index_cache_misses;
    std::printf("  %-28s %.1f%% of %llu lookups found in memory, %llu went to RocksDB (%llu "
                "blobs, %.1f MiB of entries)\n",
                "rand read index entries",
                100.0 * double(hits) / double(std::max<uint64_t>(1, hits + misses)),
                static_cast<unsigned long long>(hits + misses),
                static_cast<unsigned long long>(misses),
                static_cast<unsigned long long>(args.small_blobs),
                double(index_after->index_cache_bytes) / double(1 << 20));
  }
  std::printf("  %-28s p50 %.0f us, p99 %.0f us; sync p50 %.0f us, p99 %.0f us (fio p99 %.0f "
              "us)\n",
              "rand read latency", quiet.p50_us, quiet.p99_us, quiet_sync.p50_us,
              quiet_sync.p99_us, median(fio_p99s));
  std::printf("  %-28s %.0f IOPS, p99 %.0f us = %.2fx the p99 of the quiet windows between "
              "(%.0f us; goal <= 1.5x); scrubbed %.1f MiB/s (configured %llu)\n",
              "rand read + scrubber", double(scrubbed.ops) / scrubbed.seconds, scrubbed.p99_us,
              scrubbed.p99_us / std::max(1.0, alternated_quiet.p99_us), alternated_quiet.p99_us,
              scrub_mibs, static_cast<unsigned long long>(args.scrub_rate_mib));
  auto range = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return fmt::format("{:.0f}-{:.0f}", v.front(), v.back());
  };
  std::printf("  %-28s quiet %s, scrubbed %s us (%d pairs of %.1f s windows)\n",
              "  p99 of single windows", range(quiet_p99s).c_str(), range(scrub_p99s).c_str(),
              windows, kWindow);
  std::printf("  %-28s %.2fx (p99 %.0f us of the quiet windows after the scrubbed ones, "
              "against those before: what drift alone gives)\n",
              "  control", control.p99_us / std::max(1.0, alternated_quiet.p99_us),
              control.p99_us);
  roundsRow("4 KiB put into a spare", prezeroed, "puts/s", 0, "hole");
  std::printf("  %-28s the same puts into a fresh extent (a hole), %llu per round\n", "",
              static_cast<unsigned long long>(zero_puts));
  opened->reset();
  fs::remove_all(args.dir);
  return 0;
}

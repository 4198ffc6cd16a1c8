// granary-bench: an S3 load generator (SigV4, keep-alive connections) for Granary or any S3
// endpoint. See docs/benchmarks.md ("granary-bench") for the workloads and the figures.
//
//   granary-bench --endpoint http://127.0.0.1:9000 --op get --size 4KiB --concurrency 32
//   granary-bench --duration 60
//     --workload name=loader,op=range,size=64MiB,range=64KiB-4MiB,objects=16,concurrency=8
//     --workload name=checkpoint,op=put,size=256MiB,objects=4,concurrency=2
//
// Credentials: --access-key/--secret-key, else AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
// Exit status: 0 when every operation succeeded and every byte read was right, 3 when some
// failed (the table still prints), 1 when the run could not start.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fmt/core.h>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "granary/common/cpus.h"
#include "runner.h"

namespace po = boost::program_options;
using namespace granary;
using namespace granary::bench;

namespace {

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "granary-bench: %s\n", why.c_str());
  std::exit(1);
}

template <typename T>
T orDie(Result<T> r) {
  if (!r) die(r.error().message());
  return std::move(*r);
}

std::string envOr(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::move(fallback);
}

nlohmann::json latencyJson(const LatencySummary& l) {
  return {{"mean", l.mean_ms}, {"p50", l.p50_ms},   {"p90", l.p90_ms},
          {"p99", l.p99_ms},   {"p99.9", l.p999_ms}, {"max", l.max_ms}};
}

// Where the latency went (stats.h, LatencyPhases); sorts the samples.
nlohmann::json phasesJson(OpStats& s) {
  return {{"wait", latencyJson(summarize(s.wait_us))},
          {"to_head", latencyJson(summarize(s.to_head_us))},
          {"body", latencyJson(summarize(s.body_us))}};
}

}  // namespace

int main(int argc, char** argv) {
  RunConfig cfg;
  std::string endpoint, duration, size, range, json_path, single_op, run_id;
  std::vector<std::string> workload_specs;
  unsigned concurrency = 8;
  uint64_t objects = 0, count = 0;
  unsigned threads = 0;
  po::options_description opts("granary-bench options");
  opts.add_options()
      ("help,h", "this help")
      ("endpoint", po::value(&endpoint)->default_value("http://127.0.0.1:9000"), "S3 endpoint (http)")
      ("access-key", po::value(&cfg.creds.access_key), "access key (default: $AWS_ACCESS_KEY_ID)")
      ("secret-key", po::value(&cfg.creds.secret_key), "secret key (default: $AWS_SECRET_ACCESS_KEY)")
      ("region", po::value(&cfg.creds.region)->default_value("us-east-1"), "SigV4 region")
      ("bucket", po::value(&cfg.bucket)->default_value("granary-bench"), "bucket (created if missing)")
      ("duration", po::value(&duration)->default_value("30s"), "measured phase length (30s, 2m)")
      ("threads", po::value(&threads), "event-loop threads of each workload (default: cores, at most 4)")
      ("timeout", po::value(&cfg.timeout_s)->default_value(120), "seconds per network operation")
      ("prepare-concurrency", po::value(&cfg.prepare_concurrency)->default_value(32),
       "connections uploading prepared objects")
      ("workload", po::value(&workload_specs), "a workload spec (repeatable); see docs/benchmarks.md")
      ("op", po::value(&single_op), "single-workload shorthand: put get range head list delete")
      ("size", po::value(&size)->default_value("4KiB"), "shorthand: object size")
      ("range", po::value(&range), "shorthand: ranged GET length MIN-MAX")
      ("concurrency", po::value(&concurrency)->default_value(8), "shorthand: connections")
      ("objects", po::value(&objects), "shorthand: objects to prepare (or keys to cycle for put)")
      ("count", po::value(&count), "shorthand: stop after this many operations")
      ("run-id", po::value(&run_id), "key prefix root (default: a fresh one)")
      ("json", po::value(&json_path), "write the results as JSON here")
      ("no-create-bucket", "do not create the bucket (it exists, or the endpoint only serves GETs)")
      ("quiet", "no live progress line");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    die(e.what());
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  cfg.endpoint = orDie(cli::parseEndpoint(endpoint));
  if (cfg.creds.access_key.empty()) cfg.creds.access_key = envOr("AWS_ACCESS_KEY_ID", "");
  if (cfg.creds.secret_key.empty()) cfg.creds.secret_key = envOr("AWS_SECRET_ACCESS_KEY", "");
  if (cfg.creds.access_key.empty() || cfg.creds.secret_key.empty()) {
    die("no credentials: --access-key/--secret-key or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY");
  }
  cfg.duration_s = orDie(parseSeconds(duration));
  cfg.threads = threads ? threads : static_cast<unsigned>(std::clamp<size_t>(usableCores(), 1, 4));
  cfg.progress = !vm.count("quiet");
  cfg.create_bucket = !vm.count("no-create-bucket");
  if (run_id.empty()) {
    run_id = fmt::format("gb-{:x}-{}", std::chrono::system_clock::now().time_since_epoch().count() / 1000000, getpid());
  }
  if (!single_op.empty()) {
    if (!workload_specs.empty()) die("--op and --workload do not mix");
    std::string spec = fmt::format("name={},op={},size={},concurrency={}", single_op, single_op, size, concurrency);
    if (!range.empty()) spec += ",range=" + range;
    if (vm.count("objects")) spec += fmt::format(",objects={}", objects);
    if (count) spec += fmt::format(",count={}", count);
    workload_specs.push_back(spec);
  }
  if (workload_specs.empty()) die("nothing to run: give --op or --workload (see --help)");
  for (const auto& text : workload_specs) {
    auto spec = parseWorkload(text);
    if (!spec) die(fmt::format("--workload {}: {}", text, spec.error().message()));
    for (const auto& other : cfg.workloads) {
      if (other.name == spec->name) die("two workloads named " + spec->name);
    }
    if (spec->prefix.empty()) spec->prefix = run_id + "/" + spec->name + "/";
    cfg.workloads.push_back(std::move(*spec));
  }

  std::printf("granary-bench: endpoint %s, bucket %s, %u threads, duration %.1fs, run %s\n",
              endpoint.c_str(), cfg.bucket.c_str(), cfg.threads, cfg.duration_s, run_id.c_str());
  for (const auto& w : cfg.workloads) std::printf("  workload %s\n", w.describe().c_str());
  std::fflush(stdout);

  RunResult result = orDie(run(cfg));

  nlohmann::json out = {{"tool", "granary-bench"},
                        {"endpoint", endpoint},
                        {"bucket", cfg.bucket},
                        {"threads", cfg.threads},
                        {"duration_s", cfg.duration_s},
                        {"workloads", nlohmann::json::array()}};
  std::printf("\n%-12s %-6s %9s %7s %10s %9s %10s %8s %8s %8s %8s %8s\n", "workload", "op", "ops",
              "errors", "ops/s", "MB/s", "keys/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms",
              "max ms");
  uint64_t total_errors = 0;
  for (auto& w : result.workloads) {
    nlohmann::json wj = {{"name", w.spec.name},
                         {"spec", w.spec.describe()},
                         {"seconds", w.seconds},
                         {"ops", nlohmann::json::object()},
                         {"errors", w.error_samples}};
    const double secs = std::max(w.seconds, 1e-9);
    for (Op op : kAllOps) {
      OpStats& s = w.stats[static_cast<size_t>(op)];
      if (s.ops == 0 && s.errors == 0) continue;
      total_errors += s.errors;
      LatencySummary l = summarize(s.latency_us);
      const double ops_s = static_cast<double>(s.ops) / secs;
      const double mb_s = static_cast<double>(s.bytes) / secs / 1e6;
      const double keys_s = static_cast<double>(s.items) / secs;
      std::printf("%-12s %-6s %9llu %7llu %10.1f %9.1f %10.0f %8.2f %8.2f %8.2f %8.2f %8.2f\n",
                  w.spec.name.c_str(), std::string(opName(op)).c_str(),
                  static_cast<unsigned long long>(s.ops), static_cast<unsigned long long>(s.errors),
                  ops_s, mb_s, keys_s, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms);
      wj["ops"][std::string(opName(op))] = {{"ops", s.ops},           {"errors", s.errors},
                                            {"bytes", s.bytes},       {"keys", s.items},
                                            {"ops_per_s", ops_s},
                                            {"mb_per_s", mb_s},       {"keys_per_s", keys_s},
                                            {"latency_ms", latencyJson(l)},
                                            {"phases_ms", phasesJson(s)}};
    }
    for (const auto& e : w.error_samples) std::printf("  %s error: %s\n", w.spec.name.c_str(), e.c_str());
    out["workloads"].push_back(std::move(wj));
  }
  // Where the time went: waiting for a connection (a paced workload's operations that
  // fell due while all its connections were busy), until the response head, the body.
  std::printf("\n%-12s %-6s %17s %17s %17s\n", "phases", "op", "wait p50/p99 ms",
              "to head p50/p99", "body p50/p99");
  for (const auto& wj : out["workloads"]) {
    for (const auto& [op, figures] : wj["ops"].items()) {
      const auto& ph = figures["phases_ms"];
      auto cell = [&](const char* phase) {
        return fmt::format("{:.2f}/{:.2f}", ph[phase]["p50"].get<double>(),
                           ph[phase]["p99"].get<double>());
      };
      std::printf("%-12s %-6s %17s %17s %17s\n", wj["name"].get<std::string>().c_str(),
                  op.c_str(), cell("wait").c_str(), cell("to_head").c_str(), cell("body").c_str());
    }
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << "\n";
    if (!f) die("cannot write " + json_path);
  }
  if (total_errors) {
    std::printf("granary-bench: %llu operations failed\n", static_cast<unsigned long long>(total_errors));
    return 3;
  }
  return 0;
}

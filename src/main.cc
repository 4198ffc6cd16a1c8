// granary: one binary, subcommands. `serve` runs everything in one process (the embedded
// default): gateway, index and the chunk-store drives as directories under --data.
// Cluster mode splits them: `chunkserver` serves drive directories, `index` the index,
// and any number of stateless `gateway`s serve S3 over both. `records` is a client
// of the record index (docs/record-index.md, "CLI").
#include <fcntl.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include <boost/asio/ip/host_name.hpp>
#include <boost/program_options.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "granary/chunkstore/chunk_client.h"
#include "granary/chunkstore/chunk_server.h"
#include "granary/chunkstore/io_engine.h"
#include "granary/chunkstore/remote_chunk_client.h"
#include "granary/chunkstore/scrubber.h"
#include "granary/common/clock.h"
#include "granary/common/cpus.h"
#include "granary/common/durable_dirs.h"
#include "granary/common/files.h"
#include "granary/common/log.h"
#include "granary/common/random.h"
#include "granary/common/rocks_resources.h"
#include "granary/common/worker_pool.h"
#include "granary/gateway/background_leader.h"
#include "granary/gateway/gateway.h"
#include "granary/gateway/index_recovery.h"
#include "granary/gateway/lifecycle.h"
#include "granary/gateway/reclaimer.h"
#include "granary/index_kv/index.h"
#include "granary/index_kv/index_service.h"
#include "granary/placement/cluster_map.h"
#include "records_cli.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace granary;

namespace {

// Upper bounds of options that size threads and caches: far above any machine's need, low
// enough that a typo gets a message rather than a thread-creation abort or an overflow.
constexpr int kMaxThreads = 4096;
constexpr int64_t kMaxCacheMib = int64_t{1} << 30;  // 1 PiB

[[noreturn]] void die(const std::string& message) {
  std::cerr << "granary: " << message << "\n";
  std::exit(1);
}

// The file's bytes; dies (with the reason) when they cannot all be read.
std::string readFileOrDie(const fs::path& p) {
  auto bytes = readWholeFile(p);
  if (!bytes) die("cannot read " + bytes.error().message());
  return std::move(*bytes);
}

// Writes a file durably: temp file, fsync, rename, fsync of the directory.
void writeFileDurably(const fs::path& p, const std::string& content, mode_t mode) {
  fs::path tmp = p;
  tmp += ".tmp";
  // A temp file left by a crash keeps its mode through O_CREAT: start from none, so the
  // credentials get `mode` (0600), not an older file's.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) die("cannot replace " + tmp.string());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) die("cannot write " + tmp.string());
  if (::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size()) ||
      ::fsync(fd) != 0) {
    die("cannot write " + tmp.string());
  }
  ::close(fd);
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) die("cannot rename " + tmp.string() + ": " + ec.message());
  if (Status st = fsyncPath(p.parent_path()); !st) die(st.toString());
}

// Whether `p` exists; dies (with the reason) when that cannot be told, e.g. EACCES.
bool existsOrDie(const fs::path& p) {
  std::error_code ec;
  const bool exists = fs::exists(p, ec);
  if (ec) die("cannot read " + p.string() + ": " + ec.message());
  return exists;
}

// A root credentials file: {"access_key": ..., "secret_key": ...}.
gateway::RootUser readCredentials(const fs::path& file) {
  try {
    auto j = nlohmann::json::parse(readFileOrDie(file));
    return {j.at("access_key").get<std::string>(), j.at("secret_key").get<std::string>()};
  } catch (const std::exception& e) {
    die("cannot read " + file.string() + ": " + e.what());
  }
}

gateway::RootUser rootUser(const fs::path& data, Random& random) {
  const char* user = std::getenv("GRANARY_ROOT_USER");
  const char* password = std::getenv("GRANARY_ROOT_PASSWORD");
  if (user && password && *user && *password) return {user, password};
  if (user || password) die("set both GRANARY_ROOT_USER and GRANARY_ROOT_PASSWORD, or neither");
  fs::path file = data / "root-credentials.json";
  if (existsOrDie(file)) return readCredentials(file);
  gateway::RootUser root{"GR" + randomAlphanumeric(random, 18), randomAlphanumeric(random, 40)};
  nlohmann::json j = {{"access_key", root.access_key}, {"secret_key", root.secret_key}};
  writeFileDurably(file, j.dump(2) + "\n", 0600);
  return root;
}

placement::ClusterMap loadOrCreateMap(const fs::path& data, int drives, int k, int m) {
  fs::path file = data / "cluster.json";
  if (existsOrDie(file)) {
    auto map = placement::ClusterMap::fromJson(readFileOrDie(file));
    if (!map) die("invalid " + file.string() + ": " + map.error().toString());
    return *map;
  }
  placement::ClusterMap map;
  map.epoch = 1;
  if (k < 1 || k > 255 || m < 0 || m > 255) die("--ec-k must be 1-255 and --ec-m 0-255");
  if (drives < 1 || drives > 4096) die("--drives must be 1-4096");
  map.ec = {static_cast<uint8_t>(k), static_cast<uint8_t>(m)};
  for (int i = 0; i < drives; ++i) {
    std::string id = fmt::format("d{}", i);
    map.drives.push_back({id, "local", id, 1.0, "", fmt::format("drives/{}", id)});
  }
  auto checked = placement::ClusterMap::fromJson(map.toJson());
  if (!checked) die("invalid layout: " + checked.error().toString());
  writeFileDurably(file, map.toJson(), 0644);
  return map;
}

std::pair<std::string, uint16_t> parseListen(const std::string& listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) die("--listen must be HOST:PORT");
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  const std::string digits = listen.substr(colon + 1);
  auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (err != std::errc() || end != digits.data() + digits.size() || port < 0 || port > 65535) {
    die("bad port in --listen " + listen);
  }
  return {host, static_cast<uint16_t>(port)};
}

// The drive options, read once and checked (driveOptions).
struct DriveOptions {
  double spare_zero_rate = 0;  // MB/s, all drives together
  uint64_t extent_mib = 0;
  int64_t verified_cache_mib = 0;  // -1: a quarter of the memory
  int64_t crc_cache_mib = 0;
  int64_t index_cache_mib = 0;
  int64_t extent_descriptors = 0;  // -1: half of RLIMIT_NOFILE
  bool direct_reads = false;
  double scrub_rate = 0;   // MB/s, all drives together
  double scrub_hours = 0;  // between passes
};

struct OpenedDrives {
  std::map<std::string, std::unique_ptr<chunkstore::ChunkStore>, std::less<>> stores;
  std::map<std::string, Status, std::less<>> failed;  // drive id -> why it did not open
};

// Opens every (drive id, directory) drive. One that cannot be opened (a failing disk, a
// corrupt blob index) is logged and left out, as a dead disk would be: the other drives
// of the process serve, and its fragments are read from the others. Dies if none opens.
OpenedDrives openDrives(const std::vector<std::pair<std::string, fs::path>>& drives,
                        chunkstore::IoEngine& engine, RocksResources& rocks,
                        const Clock& clock, const DriveOptions& options) {
  OpenedDrives opened;
  const double zero_rate = options.spare_zero_rate;
  const uint64_t extent_mib = options.extent_mib;
  // One activity record for all the drives: a spare is zeroed at full speed only while no
  // drive of this process serves a client (they often share a disk).
  auto activity = std::make_shared<chunkstore::DriveActivity>();
  // Kernel mappings (VMAs) for verified blobs, all drives together: a process may have
  // 65,530 by default (vm.max_map_count), RocksDB and the allocator need some.
  constexpr size_t kVerifiedMappings = 16384;
  const int64_t verified_mib = options.verified_cache_mib;
  uint64_t verified_bytes = 0;
  if (verified_mib < 0) {  // default: a quarter of the machine's memory
    verified_bytes = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                     static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) / 4;
  } else {
    verified_bytes = static_cast<uint64_t>(verified_mib) << 20;
  }
  // The caches of block CRCs and blob index entries: one budget each for the process,
  // shared evenly by its drives (a server with many drives does not multiply it).
  const int64_t crc_mib = options.crc_cache_mib;
  const int64_t index_mib = options.index_cache_mib;
  // Extent descriptors, shared evenly too; by default half of RLIMIT_NOFILE (main raised it
  // to the hard limit): the rest is for sockets and the drives' RocksDB files.
  int64_t descriptors = options.extent_descriptors;
  if (descriptors == -1) {
    rlimit files{};
    descriptors = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                      ? static_cast<int64_t>(files.rlim_cur / 2)
                      : 1 << 20;
  }
  for (const auto& [id, dir] : drives) {
    chunkstore::ChunkStoreOptions co;
    co.crc_cache_bytes = (static_cast<uint64_t>(crc_mib) << 20) / drives.size();
    co.index_cache_bytes = (static_cast<uint64_t>(index_mib) << 20) / drives.size();
    co.dir = dir.string();
    co.cached_reads = !options.direct_reads;
    co.extent_size = extent_mib << 20;
    // At least 16 a drive: a drive needs a few open at once (the active extent, reads).
    co.extent_descriptors =
        std::max<size_t>(16, static_cast<size_t>(descriptors) / drives.size());
    co.activity = activity;
    co.verified_mappings = kVerifiedMappings / drives.size();
    co.verified_mapping_bytes = verified_bytes / drives.size();
    // Shared evenly, as --scrub-rate is: the drives of one process often share a disk.
    if (zero_rate > 0) {
      co.spare_zero_rate =
          std::max<uint64_t>(1, static_cast<uint64_t>(zero_rate * 1e6 / drives.size()));
    }
    auto store = chunkstore::openChunkStore(co, engine, rocks, clock);
    if (!store) {
      log::error("drive {} ({}) did not open, serving without it: {}", id, dir.string(),
                 store.error().toString());
      opened.failed.emplace(id, store.error());
      continue;
    }
    opened.stores.emplace(id, std::move(*store));
  }
  if (opened.stores.empty()) die("no drive could be opened (see above)");
  return opened;
}

// The /_granary/metrics bearer token, shared by `serve`, `gateway`, `chunkserver` and
// `index`.
void addMetricsOptions(po::options_description& opts) {
  opts.add_options()("metrics-token", po::value<std::string>()->default_value(""),
                     "require 'Authorization: Bearer TOKEN' on /_granary/metrics "
                     "(default: $GRANARY_METRICS_TOKEN; empty: open)");
}

std::string metricsToken(const po::variables_map& vm) {
  std::string token = vm["metrics-token"].as<std::string>();
  if (token.empty()) {
    if (const char* env = std::getenv("GRANARY_METRICS_TOKEN")) token = env;
  }
  return token;
}

// Request-body memory of the internal services, `chunkserver` and `index`
// (rpc::ServerOptions::body_memory_bytes).
void addBodyMemoryOption(po::options_description& opts) {
  opts.add_options()("body-memory", po::value<int>()->default_value(1024),
                     "MiB of request bodies held at once; a request that finds them full "
                     "waits up to 10 s, then is answered 503 (retryable)");
}

// Dies unless at least 16 MiB; checked before anything is opened.
uint64_t bodyMemoryBytes(const po::variables_map& vm) {
  if (vm["body-memory"].as<int>() < 16) die("--body-memory must be >= 16 (MiB)");
  return uint64_t(vm["body-memory"].as<int>()) << 20;
}

// The Prometheus text of `registry`, with the body memory of `server` (an rpc::Server or a
// ChunkServer) once it is set.
template <typename Server>
std::string renderWithBodyMemory(prometheus::Registry& registry, const Server* server) {
  auto families = registry.Collect();
  if (server != nullptr) rpc::appendBodyMemoryMetrics(server->bodyMemory(), families);
  return prometheus::TextSerializer().Serialize(families);
}

// Drive options shared by `serve` and `chunkserver`: reads, spare zeroing and scrubbing.
void addDriveOptions(po::options_description& opts) {
  opts.add_options()(
      "direct-reads", po::bool_switch()->default_value(false),
      "read blobs from the drives with O_DIRECT, past the page cache (by default reads go "
      "through it, so hot objects are served from memory; writes and scrubs always bypass "
      "it)")(
      "verified-cache", po::value<int64_t>()->default_value(-1),
      "MiB of blob bytes in the page cache whose CRC check is remembered while they stay "
      "there, so that sending them again skips reading them to verify (each such blob is "
      "mapped read-only: its pages count in RSS as file pages; default -1: a quarter of "
      "the memory; 0: verify on every read)")(
      "crc-cache", po::value<int64_t>()->default_value(96),
      "MiB of memory for recently read blobs' block CRCs, all drives together, so that "
      "their next reads skip the header's I/O (0: always read it)")(
      "index-cache", po::value<int64_t>()->default_value(96),
      "MiB of memory for recently put or read blobs' index entries, all drives together "
      "(about 87,000 blobs in 16 MiB), so that a read finds its blob without RocksDB "
      "(0: every lookup asks RocksDB)")(
      "extent-size", po::value<uint64_t>()->default_value(1024),
      "MiB of blobs per extent file on the drives (new extents only)")(
      "extent-descriptors", po::value<int64_t>()->default_value(-1),
      "extent file descriptors the drives may keep open, all together (an extent read or "
      "written holds one, two with O_DIRECT); past it, the least recently used idle ones "
      "are closed (default -1: half of the process's open-file limit)")(
      "spare-zero-rate", po::value<double>()->default_value(64),
      "MB/s the drives may write, all together, to pre-zero their next extent once the "
      "current one is half full, so that syncs of small writes commit no block allocations; "
      "unlimited while no drive has served a client for 250 ms (0: no pre-zeroing)")(
      "scrub-rate", po::value<double>()->default_value(50),
      "MB/s the scrubber may read, for all drives of this process together (0: no "
      "scrubbing)")(
      "scrub-interval", po::value<double>()->default_value(24),
      "hours between the end of one scrub pass over a drive and the next");
}

// Reads the drive options; dies with a message on one out of its range: called before
// anything is opened or created, so that a mistyped option costs a message, not a drive
// recovery. Rates are finite and bounded (1e9 MB/s, 100 years): infinity or NaN would pass
// a `< 0` test and make their conversions to integers undefined.
DriveOptions driveOptions(const po::variables_map& vm) {
  DriveOptions o;
  o.spare_zero_rate = vm["spare-zero-rate"].as<double>();
  if (!(o.spare_zero_rate >= 0 && o.spare_zero_rate <= 1e9)) {
    die("--spare-zero-rate must be 0-1e9 (MB/s)");
  }
  o.extent_mib = vm["extent-size"].as<uint64_t>();
  if (o.extent_mib < 1 || o.extent_mib > (1u << 20)) die("--extent-size must be 1..1048576 MiB");
  o.verified_cache_mib = vm["verified-cache"].as<int64_t>();
  if (o.verified_cache_mib > kMaxCacheMib) {
    die("--verified-cache must be at most " + std::to_string(kMaxCacheMib) + " (MiB)");
  }
  o.crc_cache_mib = vm["crc-cache"].as<int64_t>();
  o.index_cache_mib = vm["index-cache"].as<int64_t>();
  if (o.crc_cache_mib < 0 || o.index_cache_mib < 0 || o.crc_cache_mib > kMaxCacheMib ||
      o.index_cache_mib > kMaxCacheMib) {
    die("--crc-cache and --index-cache must be 0-" + std::to_string(kMaxCacheMib) + " (MiB)");
  }
  o.extent_descriptors = vm["extent-descriptors"].as<int64_t>();
  if (o.extent_descriptors < -1) die("--extent-descriptors must be >= 0, or -1 for the default");
  o.direct_reads = vm["direct-reads"].as<bool>();
  o.scrub_rate = vm["scrub-rate"].as<double>();
  o.scrub_hours = vm["scrub-interval"].as<double>();
  if (!(o.scrub_rate >= 0 && o.scrub_rate <= 1e9) ||
      !(o.scrub_hours >= 0 && o.scrub_hours <= 876000)) {
    die("--scrub-rate must be 0-1e9 (MB/s) and --scrub-interval 0-876000 (hours)");
  }
  return o;
}

// Starts one scrubber per drive, sharing --scrub-rate evenly (the drives of one process
// usually share a disk in the embedded setup).
void startScrubbing(chunkstore::LocalChunkClient& chunks, size_t drives,
                    const DriveOptions& options) {
  const double rate = options.scrub_rate;
  const double hours = options.scrub_hours;
  if (rate == 0 || drives == 0) return;
  chunkstore::ScrubOptions so;
  so.rate_bytes_per_second = std::max<uint64_t>(1, static_cast<uint64_t>(rate * 1e6 / drives));
  so.pass_interval = std::chrono::milliseconds(static_cast<int64_t>(hours * 3600e3));
  chunks.startScrubbers(so);
  log::info("scrubbing {} drives at {} MB/s in all, a pass every {} h", drives, rate, hours);
}

// Parses a subcommand's options; false if --help was asked for (and printed).
bool parseOptions(const po::options_description& opts, int argc, char** argv,
                  po::variables_map& vm) {
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::ostringstream s;
    s << opts;
    die(std::string(e.what()) + "\n" + s.str());
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return false;
  }
  const std::string level = vm["log-level"].as<std::string>();
  static const std::map<std::string, log::Level, std::less<>> kLevels = {
      {"debug", log::Level::kDebug}, {"info", log::Level::kInfo},
      {"warn", log::Level::kWarn}, {"error", log::Level::kError}};
  auto chosen = kLevels.find(level);
  if (chosen == kLevels.end()) die("--log-level must be debug, info, warn or error");
  log::setLevel(chosen->second);
  return true;
}

// SIGINT, SIGTERM and SIGHUP (a closed terminal) are handled by one thread with sigwait,
// so no other thread is interrupted: block them in every thread before any is started.
sigset_t blockStopSignals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sigs;
}

// The signal thread of a server process. The first stop signal calls `stop` (once, and
// only while the server runs); another one, while the shutdown goes on (a request that
// does not finish, a drain that hangs), ends the process at once, as kill -9 would: what
// was acknowledged is durable, and the next start recovers the rest. `on_usr1`, when given
// (and SIGUSR1 is in `sigs`), runs on each SIGUSR1 while the server runs.
class SignalWatch {
 public:
  SignalWatch(const sigset_t& sigs, std::function<void()> stop,
              std::function<void()> on_usr1)
      : sigs_(sigs), stop_(std::move(stop)), on_usr1_(std::move(on_usr1)) {
    thread_ = std::thread([this] { watch(); });
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ~SignalWatch() {
    {
      std::lock_guard lock(mu_);
      running_ = false;
      finished_ = true;
    }
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes the sigwait
    thread_.join();
    if (stopper_.joinable()) stopper_.join();
  }

  // The server's run() returned: from here on the process tears down, and `stop` (whose
  // server may be gone) is not called any more; a call in progress is waited for.
  void ranOut() {
    {
      std::lock_guard lock(mu_);
      running_ = false;
    }
    if (stopper_.joinable()) stopper_.join();  // no longer started once running_ is false
  }

 private:
  void watch() {
    bool stopping = false;
    for (;;) {
      int sig = 0;
      if (sigwait(&sigs_, &sig) != 0) continue;
      std::lock_guard lock(mu_);
      if (finished_) return;
      if (sig == SIGUSR1) {
        if (running_ && on_usr1_) on_usr1_();
        continue;
      }
      if (running_ && !stopping) {
        stopping = true;
        log::info("signal {}: shutting down (another one ends the process at once)", sig);
        // On a thread of its own: a gateway's stop() waits for the requests in progress,
        // and meanwhile this one keeps listening.
        stopper_ = std::thread(stop_);
        continue;
      }
      log::warn("signal {} during the shutdown: exiting now", sig);
      std::fflush(nullptr);
      _exit(1);
    }
  }

  const sigset_t sigs_;
  const std::function<void()> stop_;
  const std::function<void()> on_usr1_;
  std::mutex mu_;
  bool running_ = true;
  bool finished_ = false;
  std::thread stopper_;  // runs stop_ (started under mu_, while running_)
  std::thread thread_;
};

// Calls run() (which blocks until stop()) and stop() on the first stop signal. `watch` is
// the caller's, declared before what the teardown closes (drives, the index: a RocksDB
// close may flush for seconds), so that it is destroyed last: a second signal during all
// of the teardown exits.
template <typename Server>
void runUntilSignal(std::unique_ptr<SignalWatch>& watch, const sigset_t& sigs, Server& server,
                    std::function<void()> on_usr1 = nullptr) {
  watch = std::make_unique<SignalWatch>(sigs, [&server] { server.stop(); }, std::move(on_usr1));
  server.run();
  watch->ranOut();
}

// --event-loops, the same for every server subcommand.
constexpr const char* kEventLoopsHelp =
    "event-loop threads (0: one per CPU this process may run on)";

// --workers: blocking-I/O threads; 0 picks enough to keep many drives busy.
size_t workerThreads(int requested) {
  const size_t cores = usableCores();
  return requested > 0 ? static_cast<size_t>(requested) : std::max<size_t>(16, 8 * cores);
}

std::string urlHost(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// The S3 gateway's options, shared by `serve` (embedded) and `gateway` (cluster mode).
void addGatewayOptions(po::options_description& opts) {
  opts.add_options()(
      "listen", po::value<std::string>()->default_value("127.0.0.1:9000"),
      "HOST:PORT to serve S3 on (port 0 picks a free port)")(
      "event-loops", po::value<int>()->default_value(0), kEventLoopsHelp)(
      "workers", po::value<int>()->default_value(0), "blocking-I/O worker threads (0: auto)")(
      "bulk-nice", po::value<int>()->default_value(10),
      "added to the niceness of the threads that hash and erasure-code uploads (0-19), so "
      "that reads and index calls get the CPUs first when they are short (0: the same as "
      "every thread)")(
      "gc-grace", po::value<int>()->default_value(1800),
      "seconds before replaced blobs are deleted (GETs and copies of the replaced version "
      "may run that long; the default is the longest a PUT or copy may take)")(
      "gc-interval", po::value<int>()->default_value(10), "seconds between GC passes")(
      "orphan-grace", po::value<int>()->default_value(3600),
      "seconds before an unreferenced blob counts as an orphan")(
      "idle-timeout", po::value<int>()->default_value(60),
      "seconds an idle keep-alive connection or an unfinished request head may wait")(
      "io-timeout", po::value<int>()->default_value(120),
      "seconds a request body read or a response write may make no progress")(
      "access-log", po::value<std::string>()->default_value(""),
      "file for one JSON line per request ('-' = standard error; default: off)")(
      "domain", po::value<std::string>()->default_value(""),
      "S3 domain for virtual-hosted-style requests (<bucket>.DOMAIN; default: path style only)")(
      "tls-cert", po::value<std::string>()->default_value(""),
      "PEM certificate chain: serve HTTPS (with --tls-key)")(
      "tls-key", po::value<std::string>()->default_value(""), "PEM private key of --tls-cert")(
      "max-connections", po::value<int>()->default_value(4096),
      "open client connections at most; more are answered 503 SlowDown")(
      "max-connections-per-address", po::value<int>()->default_value(0),
      "open client connections from one remote address at most; more are answered 503 "
      "SlowDown (0: no such cap)")(
      "shutdown-grace", po::value<int>()->default_value(10),
      "seconds SIGTERM/SIGINT lets the requests being served finish (new connections are "
      "refused at once)")(
      "buffer-memory", po::value<int>()->default_value(256),
      "MiB of object data all GET streams and uploads may hold at once (more wait their "
      "turn)")(
      "buffer-wait", po::value<int>()->default_value(30),
      "seconds an upload, or a GET once twice the buffer memory is lent, waits for buffer "
      "memory before it is answered 503")(
      "lifecycle-interval", po::value<int>()->default_value(3600),
      "seconds between passes of the lifecycle job (bucket expiration rules)")(
      "lifecycle-day", po::value<int>()->default_value(86400),
      "seconds in a lifecycle rule's day (shorten only to test rules)")(
      "multipart-max-age", po::value<int>()->default_value(7 * 86400),
      "seconds after which an incomplete multipart upload is aborted (0: never)")(
      "repair-interval", po::value<int>()->default_value(3600),
      "seconds between background repair passes (0: only 'granary admin repair')")(
      "repair-verify", "repair passes read every fragment whole (CRC-checked), not only stat it")(
      "leader-lease", po::value<int>()->default_value(30),
      "seconds a gateway holds the lease to run the background passes (GC, sweep, lifecycle, "
      "repair) after its last renewal; it renews every third of it")(
      "keepalive-ms", po::value<int>()->default_value(10000),
      "a copy or a CompleteMultipartUpload still working after this many milliseconds "
      "answers 200 at once and sends spaces until its result (S3's keep-alive; -1: never)")(
      "hedge-ms", po::value<int>()->default_value(500),
      "decode a stripe from parity when its data fragments have not all answered after this "
      "many ms (0: never)")(
      "no-sendfile", "send every GET body through a stripe buffer, never with sendfile from "
      "the page cache")(
      "log-level", po::value<std::string>()->default_value("info"), "debug|info|warn|error");
  addMetricsOptions(opts);
}

// What a gateway serves: the map, the drives and the index, local or remote.
struct GatewayParts {
  const placement::ClusterMap& map;
  chunkstore::ChunkClient& chunks;
  index_kv::Index& index;
  const gateway::RootUser& root;
  prometheus::Registry& registry;
  std::string description;  // the second line of the banner
};

// The gateway's options, checked: called before anything is opened or created, so that
// a mistyped option costs a message, not a drive recovery first.
gateway::GatewayOptions gatewayOptions(const po::variables_map& vm) {
  const int loops = vm["event-loops"].as<int>();
  const int workers = vm["workers"].as<int>();
  if (loops < 0 || workers < 0 || loops > kMaxThreads || workers > kMaxThreads) {
    die("--event-loops and --workers must be 0-" + std::to_string(kMaxThreads));
  }
  const int bulk_nice = vm["bulk-nice"].as<int>();
  if (bulk_nice < 0 || bulk_nice > 19) die("--bulk-nice must be 0..19");
  gateway::GatewayOptions gopts;
  std::tie(gopts.listen_host, gopts.listen_port) = parseListen(vm["listen"].as<std::string>());
  gopts.event_loops = static_cast<size_t>(loops);
  gopts.access_log = vm["access-log"].as<std::string>();
  gopts.virtual_host_domain = vm["domain"].as<std::string>();
  gopts.metrics_token = metricsToken(vm);
  gopts.idle_timeout_seconds = std::max(1, vm["idle-timeout"].as<int>());
  gopts.io_timeout_seconds = std::max(1, vm["io-timeout"].as<int>());
  // Orphan sweeping must never race a PUT that may still commit (see GatewayOptions): a PUT
  // may take half the grace, so a blob younger than twice that is never swept.
  if (vm["orphan-grace"].as<int>() < 60) die("--orphan-grace must be >= 60 (seconds)");
  // The index forgets the sweep's dead-version marks a week after a version's creation
  // (kDeadVersionRetention): no PUT may still be able to commit by then.
  if (vm["orphan-grace"].as<int>() > 7 * 86400) {
    die("--orphan-grace must be <= 604800 (seconds: 7 days)");
  }
  if (vm["gc-grace"].as<int>() < 0) die("--gc-grace must be >= 0 (seconds)");
  gopts.max_put_seconds = vm["orphan-grace"].as<int>() / 2;
  if (vm["gc-grace"].as<int>() < gopts.max_put_seconds) {
    // Allowed (space back sooner), but a copy may read its source that long.
    log::warn("--gc-grace {} is shorter than the longest a copy may take ({} s, half of "
              "--orphan-grace): a copy of an object replaced meanwhile can fail",
              vm["gc-grace"].as<int>(), gopts.max_put_seconds);
  }
  if (vm["max-connections"].as<int>() < 1) die("--max-connections must be >= 1");
  gopts.max_connections = static_cast<size_t>(vm["max-connections"].as<int>());
  if (vm["max-connections-per-address"].as<int>() < 0) {
    die("--max-connections-per-address must be >= 0");
  }
  gopts.max_connections_per_address =
      static_cast<size_t>(vm["max-connections-per-address"].as<int>());
  if (vm["shutdown-grace"].as<int>() < 0) die("--shutdown-grace must be >= 0");
  gopts.shutdown_grace_seconds = vm["shutdown-grace"].as<int>();
  if (vm["buffer-memory"].as<int>() < 16) die("--buffer-memory must be >= 16 (MiB)");
  gopts.buffer_memory = uint64_t(vm["buffer-memory"].as<int>()) << 20;
  if (vm["buffer-wait"].as<int>() < 1) die("--buffer-wait must be >= 1 (seconds)");
  gopts.buffer_wait_seconds = vm["buffer-wait"].as<int>();
  gopts.tls_cert = vm["tls-cert"].as<std::string>();
  gopts.tls_key = vm["tls-key"].as<std::string>();
  gopts.repair_interval_seconds = std::max(0, vm["repair-interval"].as<int>());
  gopts.repair_verify = vm.count("repair-verify") > 0;
  gopts.hedge_after_ms = vm["hedge-ms"].as<int>();
  gopts.keepalive_after_ms = vm["keepalive-ms"].as<int>();
  if (gopts.hedge_after_ms < 0) die("--hedge-ms must be >= 0");
  gopts.sendfile = vm.count("no-sendfile") == 0;
  // One gateway of a cluster runs the background passes (BackgroundLeader).
  if (vm["leader-lease"].as<int>() < 3 || vm["leader-lease"].as<int>() > 3600) {
    die("--leader-lease must be 3..3600 (seconds)");
  }
  return gopts;
}

// Serves S3 with the background jobs (GC, orphan sweep, lifecycle) until SIGINT/SIGTERM.
// `gopts`: gatewayOptions(vm).
int runGateway(const po::variables_map& vm, const gateway::GatewayOptions& gopts,
               const sigset_t& sigs, std::unique_ptr<SignalWatch>& signals, GatewayParts parts,
               const Clock& clock, Random& random) {
  const int workers = vm["workers"].as<int>();
  auto pool = std::make_unique<WorkerPool>(workerThreads(workers), "granary-io");
  // As many threads as the pool: a remote chunk client's fragment writes block theirs.
  auto bulk_pool = std::make_unique<WorkerPool>(workerThreads(workers), "granary-bulk",
                                                vm["bulk-nice"].as<int>());
  gateway::BackgroundLeader leader(
      parts.index,
      fmt::format("{}/{}/{}", boost::asio::ip::host_name(), getpid(),
                  randomAlphanumeric(random, 8)),
      std::chrono::seconds(vm["leader-lease"].as<int>()), parts.registry);
  leader.start();
  const auto leading = [&leader] { return leader.leading(); };
  auto server = gateway::GatewayServer::create(
      gopts, gateway::GatewayDeps{parts.map, parts.chunks, parts.index, clock, random, *pool,
                                  *bulk_pool, parts.registry, parts.root, leading});
  if (!server) die(server.error().toString());

  gateway::ReclaimerOptions ropts;
  ropts.gc_grace = std::chrono::seconds(vm["gc-grace"].as<int>());
  ropts.gc_interval = std::chrono::seconds(std::max(1, vm["gc-interval"].as<int>()));
  ropts.orphan_grace = std::chrono::seconds(vm["orphan-grace"].as<int>());
  ropts.leading = leading;
  gateway::Reclaimer reclaimer(parts.index, parts.chunks, parts.map, clock, parts.registry, ropts);
  reclaimer.start();
  gateway::LifecycleOptions lopts;
  lopts.interval = std::chrono::seconds(std::max(1, vm["lifecycle-interval"].as<int>()));
  lopts.day_seconds = std::max(1, vm["lifecycle-day"].as<int>());
  lopts.multipart_max_age = std::chrono::seconds(std::max(0, vm["multipart-max-age"].as<int>()));
  lopts.leading = leading;
  gateway::LifecycleJob lifecycle(parts.index, clock, lopts);
  lifecycle.start();

  std::string endpoint =
      fmt::format("{}://{}:{}", gopts.tls_cert.empty() ? "http" : "https",
                  urlHost(gopts.listen_host), (*server)->port());
  const auto& root = parts.root;
  std::printf(
      "Granary is serving S3 at %s\n"
      "  %s\n"
      "  access key:  %s\n"
      "  secret key:  %s\n"
      "Try: AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url %s s3 ls\n",
      endpoint.c_str(), parts.description.c_str(), root.access_key.c_str(),
      root.secret_key.c_str(), root.access_key.c_str(), root.secret_key.c_str(),
      endpoint.c_str());
  std::fflush(stdout);

  runUntilSignal(signals, sigs, **server);
  lifecycle.stop();
  reclaimer.stop();
  pool.reset();  // finish blocking work before the coroutines that wait for it go away
  parts.chunks.drain();  // and the fragment writes that complete on the stores' threads
  server->reset();
  leader.stop();  // after the repairer: another gateway takes over at its next renewal
  return 0;
}

int serve(int argc, char** argv) {
  po::options_description opts("granary serve options");
  std::string data_dir;
  int drives = 6, k = 4, m = 2;
  opts.add_options()("help,h", "show this help")(
      "data", po::value(&data_dir)->default_value("./granary-data"), "data directory")(
      "drives", po::value(&drives)->default_value(6), "drive directories (first start only)")(
      "ec-k", po::value(&k)->default_value(4), "data fragments per stripe (first start only)")(
      "ec-m", po::value(&m)->default_value(2), "parity fragments per stripe (first start only)");
  addGatewayOptions(opts);
  addDriveOptions(opts);
  po::variables_map vm;
  if (!parseOptions(opts, argc, argv, vm)) return 0;
  const gateway::GatewayOptions gopts = gatewayOptions(vm);
  const DriveOptions drive_options = driveOptions(vm);

  sigset_t sigs = blockStopSignals();
  std::unique_ptr<SignalWatch> signals;  // destroyed last (runUntilSignal)

  fs::path data(data_dir);
  if (Status st = createDirectoriesDurably(data); !st) die(st.toString());

  SystemClock clock;
  SecureRandom random;
  auto map = loadOrCreateMap(data, drives, k, m);
  auto root = rootUser(data, random);
  RocksResources rocks;
  prometheus::Registry registry;
  auto engine = chunkstore::makeMeteredEngine(chunkstore::makeUringEngine(), registry);

  std::vector<std::pair<std::string, fs::path>> drive_dirs;
  for (const auto& d : map.drives) drive_dirs.emplace_back(d.id, data / d.path);
  OpenedDrives opened = openDrives(drive_dirs, *engine, rocks, clock, drive_options);
  chunkstore::LocalChunkClient chunks(std::move(opened.stores), opened.failed);
  startScrubbing(chunks, drive_dirs.size(), drive_options);
  // One clock for the index and its gateway: no margin for gateway clocks running ahead.
  auto index = index_kv::openIndex({.dir = (data / "index").string(), .new_index_margin = {}},
                                   rocks, clock);
  if (!index) die("cannot open index: " + index.error().toString());
  *index = index_kv::makeMeteredIndex(std::move(*index), registry);

  std::string description =
      fmt::format("data:        {} ({} drives, EC {}+{}, io engine {})", data.string(),
                  map.drives.size(), map.ec.k, map.ec.m, engine->name());
  for (const auto& [id, why] : opened.failed) {
    description += fmt::format("\n  drive {} did not open: {}", id, why.message());
  }
  return runGateway(vm, gopts, sigs, signals, {map, chunks, **index, root, registry, description},
                    clock, random);
}

// --cluster-secret, or $GRANARY_CLUSTER_SECRET; a cluster process refuses to start
// without one.
void addSecretOption(po::options_description& opts) {
  opts.add_options()("cluster-secret", po::value<std::string>(),
                     "secret shared by the cluster (default: $GRANARY_CLUSTER_SECRET; required)");
}

std::string clusterSecret(const po::variables_map& vm) {
  std::string secret;
  if (vm.count("cluster-secret")) secret = vm["cluster-secret"].as<std::string>();
  if (secret.empty()) {
    const char* env = std::getenv("GRANARY_CLUSTER_SECRET");
    if (env) secret = env;
  }
  if (secret.empty()) {
    die("refusing to start without a cluster secret (--cluster-secret or "
        "GRANARY_CLUSTER_SECRET)");
  }
  return secret;
}

// Reads and checks a cluster map for cluster mode: every drive needs its chunk server's
// endpoint, and the map names the index service.
placement::ClusterMap loadClusterMap(const std::string& path) {
  if (path.empty()) die("--cluster FILE is required");
  auto map = placement::ClusterMap::fromJson(readFileOrDie(path));
  if (!map) die("invalid cluster map " + path + ": " + map.error().message());
  if (map->index_endpoint.empty()) {
    die("invalid cluster map " + path + ": cluster mode needs \"index\": \"HOST:PORT\"");
  }
  for (const auto& d : map->drives) {
    if (d.endpoint.empty()) {
      die("invalid cluster map " + path + ": drive \"" + d.id +
          "\" has no \"endpoint\" (its chunk server's HOST:PORT)");
    }
  }
  return std::move(*map);
}

// The drives of a cluster map, reached through their chunk servers.
std::unique_ptr<chunkstore::RemoteChunkClient> remoteChunks(const placement::ClusterMap& map,
                                                            const std::string& secret,
                                                            const Clock& clock) {
  std::map<std::string, std::string, std::less<>> endpoints;
  for (const auto& d : map.drives) endpoints.emplace(d.id, d.endpoint);
  return std::make_unique<chunkstore::RemoteChunkClient>(endpoints, secret,
                                                         chunkstore::RemoteChunkClientOptions{},
                                                         clock);
}

// `granary gateway`: a stateless S3 gateway of a cluster: drives on chunk servers and
// manifests in the index service, both named by the cluster map.
int gatewayCommand(int argc, char** argv) {
  po::options_description opts("granary gateway options");
  std::string cluster, credentials;
  opts.add_options()("help,h", "show this help")(
      "cluster", po::value(&cluster), "cluster map (JSON; docs/operations.md, \"Cluster mode\")")(
      "credentials", po::value(&credentials),
      "root credentials file {\"access_key\",\"secret_key\"} (default: "
      "$GRANARY_ROOT_USER and $GRANARY_ROOT_PASSWORD)");
  addSecretOption(opts);
  addGatewayOptions(opts);
  po::variables_map vm;
  if (!parseOptions(opts, argc, argv, vm)) return 0;
  const gateway::GatewayOptions gopts = gatewayOptions(vm);
  const std::string secret = clusterSecret(vm);
  auto map = loadClusterMap(cluster);
  gateway::RootUser root;
  if (!credentials.empty()) {
    root = readCredentials(credentials);
  } else {
    const char* user = std::getenv("GRANARY_ROOT_USER");
    const char* password = std::getenv("GRANARY_ROOT_PASSWORD");
    if (!user || !password || !*user || !*password) {
      die("a gateway needs the cluster's root credentials: --credentials FILE, or "
          "GRANARY_ROOT_USER and GRANARY_ROOT_PASSWORD");
    }
    root = {user, password};
  }

  sigset_t sigs = blockStopSignals();
  std::unique_ptr<SignalWatch> signals;  // destroyed last (runUntilSignal)
  SystemClock clock;
  SecureRandom random;
  prometheus::Registry registry;
  std::set<std::string> servers;
  for (const auto& d : map.drives) servers.insert(d.endpoint);
  auto chunks = remoteChunks(map, secret, clock);
  auto index = index_kv::makeMeteredIndex(
      index_kv::makeRemoteIndex(map.index_endpoint, secret, {}, clock), registry);
  std::string description = fmt::format(
      "cluster:     {} (epoch {}, {} drives on {} chunk servers, EC {}+{}, index at {})",
      cluster, map.epoch, map.drives.size(), servers.size(), map.ec.k, map.ec.m,
      map.index_endpoint);
  return runGateway(vm, gopts, sigs, signals, {map, *chunks, *index, root, registry, description},
                    clock, random);
}

// `granary index`: the index service of a cluster (buckets, manifests, record index).
int indexCommand(int argc, char** argv) {
  po::options_description opts("granary index options");
  std::string dir, listen, cluster;
  int loops = 0, workers = 0, checkpoint_interval = 0, checkpoint_keep = 0;
  opts.add_options()("help,h", "show this help")(
      "dir", po::value(&dir), "directory of the index's RocksDB (created if missing)")(
      "listen", po::value(&listen), "HOST:PORT to serve on (port 0 picks a free port)")(
      "cluster", po::value(&cluster),
      "cluster map: checkpoints of the index are copied onto its chunk servers")(
      "checkpoint-interval", po::value(&checkpoint_interval)->default_value(900),
      "seconds between index checkpoints (with --cluster; SIGUSR1 makes one at once)")(
      "checkpoint-keep", po::value(&checkpoint_keep)->default_value(3),
      "complete checkpoints kept on the chunk servers")(
      "event-loops", po::value(&loops)->default_value(0), kEventLoopsHelp)(
      "workers", po::value(&workers)->default_value(64),
      "threads that run index calls (a commit waits in its thread for its group's sync)")(
      "log-level", po::value<std::string>()->default_value("info"), "debug|info|warn|error");
  addSecretOption(opts);
  addBodyMemoryOption(opts);
  addMetricsOptions(opts);
  po::variables_map vm;
  if (!parseOptions(opts, argc, argv, vm)) return 0;
  if (dir.empty()) die("index needs --dir DIR");
  const uint64_t body_memory = bodyMemoryBytes(vm);
  if (listen.empty()) die("index needs --listen HOST:PORT");
  if (loops < 0 || workers < 1 || loops > kMaxThreads || workers > kMaxThreads) {
    die("--event-loops must be 0-" + std::to_string(kMaxThreads) + " and --workers 1-" +
        std::to_string(kMaxThreads));
  }
  if (checkpoint_interval < 0 || checkpoint_keep < 1) {
    die("--checkpoint-interval must be >= 0 and --checkpoint-keep >= 1");
  }
  const std::string secret = clusterSecret(vm);
  std::optional<placement::ClusterMap> map;
  if (!cluster.empty()) map = loadClusterMap(cluster);

  sigset_t sigs = blockStopSignals();
  sigaddset(&sigs, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::unique_ptr<SignalWatch> signals;  // destroyed last (runUntilSignal)
  SystemClock clock;
  SecureRandom random;
  RocksResources rocks;
  prometheus::Registry registry;
  auto index = index_kv::openIndex({dir}, rocks, clock);
  if (!index) die("cannot open index: " + index.error().toString());
  *index = index_kv::makeMeteredIndex(std::move(*index), registry);
  auto pool = std::make_unique<WorkerPool>(static_cast<size_t>(workers), "granary-index");

  std::unique_ptr<chunkstore::RemoteChunkClient> chunks;
  std::unique_ptr<gateway::IndexCheckpointer> checkpointer;
  if (map) {
    chunks = remoteChunks(*map, secret, clock);
    gateway::CheckpointOptions co;
    co.work_dir = (fs::path(dir) / "checkpoints").string();
    co.interval = std::chrono::seconds(checkpoint_interval);
    co.keep = static_cast<size_t>(checkpoint_keep);
    checkpointer = std::make_unique<gateway::IndexCheckpointer>(**index, *chunks, *map, clock,
                                                                random, registry, co);
    checkpointer->start();
  }

  rpc::ServerOptions so;
  std::tie(so.listen_host, so.listen_port) = parseListen(listen);
  so.event_loops = static_cast<size_t>(loops);
  so.cluster_secret = secret;
  so.metrics_token = metricsToken(vm);
  so.body_memory_bytes = body_memory;
  // Set before the server runs, which is before any scrape.
  const rpc::Server* serving = nullptr;
  so.render_metrics = [&registry, &serving] { return renderWithBodyMemory(registry, serving); };
  auto server = index_kv::serveIndex(so, **index, *pool, clock);
  if (!server) die(server.error().toString());
  serving = server->get();
  std::printf("Granary index listening at http://%s:%u\n  data: %s\n  checkpoints: %s\n",
              urlHost(so.listen_host).c_str(), static_cast<unsigned>((*server)->port()),
              dir.c_str(),
              map ? fmt::format("every {} s onto the chunk servers of {}", checkpoint_interval,
                                cluster).c_str()
                  : "none (no --cluster)");
  std::fflush(stdout);
  runUntilSignal(signals, sigs, **server, [&] {
    if (checkpointer) checkpointer->trigger();  // runs on the checkpointer's thread
  });
  if (checkpointer) checkpointer->stop();
  pool.reset();
  server->reset();
  return 0;
}

// `granary admin rebuild-index`: a new index directory from the newest checkpoint on the
// chunk servers, brought up to date from the fragment headers (docs/operations.md,
// "Index loss"). Run it while no index service runs; then start `granary index` on it.
int rebuildIndexCommand(int argc, char** argv) {
  po::options_description opts("granary admin rebuild-index options");
  std::string cluster, dir, credentials;
  opts.add_options()("help,h", "show this help")(
      "cluster", po::value(&cluster), "cluster map (its chunk servers hold the fragments)")(
      "dir", po::value(&dir), "new index directory (must not exist or be empty)")(
      "credentials", po::value(&credentials),
      "root credentials file: its access key owns the buckets the rebuild creates (default: "
      "$GRANARY_ROOT_USER)")(
      "no-checkpoint", "start from an empty index instead of the newest checkpoint")(
      "checkpoint", po::value<std::string>(),
      "restore this checkpoint (its id, from --list-checkpoints) instead of the newest")(
      "list-checkpoints", "print the checkpoints on the drives, newest first, and exit")(
      "max-put-seconds", po::value<int>()->default_value(1800),
      "the longest a PUT may have taken (half the gateways' --orphan-grace): older versions "
      "the checkpoint does not know are orphans, not rebuilt")(
      "log-level", po::value<std::string>()->default_value("info"), "debug|info|warn|error");
  addSecretOption(opts);
  po::variables_map vm;
  if (!parseOptions(opts, argc, argv, vm)) return 0;
  const bool list_only = vm.count("list-checkpoints") > 0;
  if (dir.empty() && !list_only) die("rebuild-index needs --dir DIR");
  std::optional<VersionId> chosen;
  if (vm.count("checkpoint")) {
    if (vm.count("no-checkpoint")) die("--checkpoint and --no-checkpoint exclude each other");
    auto id = VersionId::fromHex(vm["checkpoint"].as<std::string>());
    if (!id || !id->isSystem()) die("--checkpoint: not a checkpoint id");
    chosen = *id;
  }
  const std::string secret = clusterSecret(vm);
  auto map = loadClusterMap(cluster);
  if (list_only) {
    SystemClock clock;
    auto chunks = remoteChunks(map, secret, clock);
    auto listed = gateway::listCheckpoints(*chunks, map);
    if (!listed) die("cannot list the checkpoints: " + listed.error().toString());
    for (const gateway::CheckpointInfo& c : *listed) {
      nlohmann::json line = {{"id", c.id.toHex()},
                             {"created_unix", c.created_unix_nanos / 1'000'000'000},
                             {"files", c.files},
                             {"bytes", c.bytes},
                             {"copies", c.copies}};
      std::printf("%s\n", line.dump().c_str());
    }
    return 0;
  }
  gateway::RebuildOptions ro;
  ro.max_put = std::chrono::seconds(std::max(0, vm["max-put-seconds"].as<int>()));
  if (!credentials.empty()) {
    ro.owner = readCredentials(credentials).access_key;
  } else if (const char* user = std::getenv("GRANARY_ROOT_USER"); user && *user) {
    ro.owner = user;
  } else {
    die("rebuild-index needs the root user: --credentials FILE or GRANARY_ROOT_USER");
  }

  SystemClock clock;
  auto chunks = remoteChunks(map, secret, clock);
  std::error_code fec;
  if (fs::exists(dir, fec) && !fs::is_empty(dir, fec)) die(dir + " is not empty");
  if (!vm.count("no-checkpoint")) {
    auto restored = gateway::restoreLatestCheckpoint(*chunks, map, dir, chosen);
    if (!restored) {
      // --no-checkpoint loses what only a checkpoint holds (multipart completions, inline
      // objects, metadata, users): offered only when there is no checkpoint to restore.
      die("no checkpoint restored (" + restored.error().toString() + "); " +
          (restored.error().isNotFound()
               ? std::string(chosen ? "name another with --checkpoint, or " : "") +
                     "run with --no-checkpoint to rebuild from the fragments alone"
               : "mend its cause (a drive that does not answer, this host's disk) and try "
                 "again"));
    }
    std::printf("restored checkpoint %s (made at Unix time %lld, %llu files, %llu bytes, "
                "%zu copies)\n",
                restored->id.toHex().c_str(),
                static_cast<long long>(restored->created_unix_nanos / 1'000'000'000),
                static_cast<unsigned long long>(restored->files),
                static_cast<unsigned long long>(restored->bytes), restored->copies);
    ro.checkpoint_unix_nanos = restored->created_unix_nanos;
  }
  RocksResources rocks;  // openIndex makes `dir`, durably, if the restore did not
  if (!vm.count("no-checkpoint")) {
    // The checkpoint's own guard: what the index it was made from could not know.
    auto restored = index_kv::openIndex(index_kv::IndexOptions{.dir = dir}, rocks, clock);
    if (!restored) die("cannot open the restored checkpoint: " + restored.error().toString());
    auto guard = (*restored)->createdUnixNanos();
    if (!guard) die("cannot read the restored checkpoint's guard: " + guard.error().toString());
    ro.checkpoint_guard_unix_nanos = *guard;
    if (*guard > 0) {
      std::printf("the checkpoint's index did not know the blobs created before Unix time "
                  "%lld (it started empty, or was rebuilt with errors): those are rebuilt "
                  "from their fragments\n",
                  static_cast<long long>(*guard / 1'000'000'000));
    }
  }
  // Rebuilt from every blob on the drives, it will know them all, and what it leaves out
  // is the orphan sweep's: its creation time becomes 0 once the rebuild is done (while
  // it runs, a new index's guard stays recorded, should it not finish).
  index_kv::IndexOptions index_options{.dir = dir,
                                       .creation = index_kv::IndexOptions::Creation::kRebuilding};
  auto index = index_kv::openIndex(index_options, rocks, clock);
  if (!index) die("cannot open the index in " + dir + ": " + index.error().toString());
  auto stats = gateway::rebuildIndex(**index, *chunks, map, ro);
  if (!stats) die("rebuild failed: " + stats.error().toString());
  nlohmann::json out = {{"drives", stats->drives},
                        {"blobs_scanned", stats->blobs_scanned},
                        {"objects_checked", stats->objects_checked},
                        {"objects_relocated", stats->objects_relocated},
                        {"objects_dropped", stats->objects_dropped},
                        {"uploads_checked", stats->uploads_checked},
                        {"uploads_aborted", stats->uploads_aborted},
                        {"parts_relocated", stats->parts_relocated},
                        {"objects_rebuilt", stats->objects_rebuilt},
                        {"versions_superseded", stats->versions_superseded},
                        {"versions_stale", stats->versions_stale},
                        {"versions_incomplete", stats->versions_incomplete},
                        {"part_versions_skipped", stats->part_versions_skipped},
                        {"buckets_created", stats->buckets_created},
                        {"errors", stats->errors}};
  std::printf("%s\n", out.dump(2).c_str());
  if (stats->errors != 0) {
    std::printf("index rebuilt with errors in %s: it keeps a new index's guard (the orphan "
                "sweep spares blobs older than it)\n", dir.c_str());
    return 1;
  }
  index->reset();  // closed, then marked as knowing every blob on the drives
  index_options.creation = index_kv::IndexOptions::Creation::kRebuilt;
  if (auto marked = index_kv::openIndex(index_options, rocks, clock); !marked) {
    die("cannot mark the rebuilt index in " + dir + ": " + marked.error().toString());
  }
  std::printf("index rebuilt in %s: start `granary index --dir %s` on it\n", dir.c_str(),
              dir.c_str());
  return 0;
}

// `--dir [ID=]PATH`: the drive id is ID when given, else the directory's last component.
std::pair<std::string, fs::path> parseDriveArg(const std::string& arg) {
  size_t eq = arg.find('=');
  if (eq != std::string::npos && eq > 0 && arg.substr(0, eq).find('/') == std::string::npos) {
    return {arg.substr(0, eq), fs::path(arg.substr(eq + 1))};
  }
  fs::path p = fs::path(arg).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "dir/" -> "dir"
  std::string id = p.filename().string();
  if (id.empty() || id == "." || id == "..") die("cannot name a drive after '" + arg + "': use ID=PATH");
  return {id, fs::path(arg)};
}

// `granary chunkserver`: serves local drive directories to remote gateways over the
// internal API (docs/internal-api.md).
int chunkserver(int argc, char** argv) {
  po::options_description opts("granary chunkserver options");
  std::vector<std::string> dirs;
  std::string listen;
  int loops = 0, workers = 0;
  opts.add_options()("help,h", "show this help")(
      "dir", po::value(&dirs)->composing(),
      "drive directory as [ID=]PATH, repeatable; ID defaults to the directory's name")(
      "listen", po::value(&listen), "HOST:PORT to serve on (port 0 picks a free port)")(
      "event-loops", po::value(&loops)->default_value(0), kEventLoopsHelp)(
      "workers", po::value(&workers)->default_value(0), "blocking-I/O worker threads (0: auto)")(
      "idle-timeout", po::value<int>()->default_value(60),
      "seconds an idle keep-alive connection or an unfinished request head may wait")(
      "io-timeout", po::value<int>()->default_value(30),
      "seconds a request body read or a response write may make no progress")(
      "log-level", po::value<std::string>()->default_value("info"), "debug|info|warn|error");
  addSecretOption(opts);
  addBodyMemoryOption(opts);
  addDriveOptions(opts);
  addMetricsOptions(opts);
  po::variables_map vm;
  if (!parseOptions(opts, argc, argv, vm)) return 0;
  const DriveOptions drive_options = driveOptions(vm);
  if (dirs.empty()) die("chunkserver needs at least one --dir");
  const uint64_t body_memory = bodyMemoryBytes(vm);
  if (listen.empty()) die("chunkserver needs --listen HOST:PORT");
  const std::string secret = clusterSecret(vm);
  std::vector<std::pair<std::string, fs::path>> drive_dirs;
  chunkstore::ChunkServerOptions copts;
  copts.body_memory_bytes = body_memory;
  std::tie(copts.listen_host, copts.listen_port) = parseListen(listen);
  if (loops < 0 || workers < 0 || loops > kMaxThreads || workers > kMaxThreads) {
    die("--event-loops and --workers must be 0-" + std::to_string(kMaxThreads));
  }
  for (const auto& arg : dirs) {
    auto drive = parseDriveArg(arg);
    for (const auto& [id, dir] : drive_dirs) {
      if (id == drive.first) die("two --dir options name drive '" + id + "'");
    }
    copts.drives.push_back(drive.first);
    drive_dirs.push_back(std::move(drive));
  }

  sigset_t sigs = blockStopSignals();
  std::unique_ptr<SignalWatch> signals;  // destroyed last (runUntilSignal)
  SystemClock clock;
  RocksResources rocks;
  prometheus::Registry registry;
  auto engine = chunkstore::makeMeteredEngine(chunkstore::makeUringEngine(), registry);
  OpenedDrives opened = openDrives(drive_dirs, *engine, rocks, clock, drive_options);
  chunkstore::LocalChunkClient chunks(std::move(opened.stores), opened.failed);
  startScrubbing(chunks, drive_dirs.size(), drive_options);
  auto pool = std::make_unique<WorkerPool>(workerThreads(workers), "granary-cs");

  copts.event_loops = static_cast<size_t>(loops);
  copts.cluster_secret = secret;
  copts.idle_timeout_seconds = std::max(1, vm["idle-timeout"].as<int>());
  copts.io_timeout_seconds = std::max(1, vm["io-timeout"].as<int>());
  copts.metrics_token = metricsToken(vm);
  // Set before the server runs, which is before any scrape.
  const chunkstore::ChunkServer* serving = nullptr;
  copts.render_metrics = [&registry, &serving] {
    return renderWithBodyMemory(registry, serving);
  };
  auto server = chunkstore::ChunkServer::create(copts, chunks, *pool, clock);
  if (!server) die(server.error().toString());
  serving = server->get();

  std::string drives_text;
  for (const auto& [id, dir] : drive_dirs) {
    drives_text += fmt::format("{}{}={}{}", drives_text.empty() ? "" : ", ", id, dir.string(),
                               opened.failed.contains(id) ? " (did not open)" : "");
  }
  std::printf("Granary chunkserver listening at http://%s:%u\n  drives: %s (io engine %s)\n",
              urlHost(copts.listen_host).c_str(), static_cast<unsigned>((*server)->port()),
              drives_text.c_str(), std::string(engine->name()).c_str());
  std::fflush(stdout);

  runUntilSignal(signals, sigs, **server);
  pool.reset();  // finish blocking work before the server that waits for it goes away
  server->reset();
  return 0;
}

void usage() {
  std::cout << "usage: granary <command> [options]\n\n"
               "commands:\n"
               "  serve        all-in-one S3 store (gateway, index, chunk-store drives)\n"
               "  gateway      cluster mode: a stateless S3 gateway (--cluster map)\n"
               "  index        cluster mode: the index service\n"
               "  chunkserver  cluster mode: serve drive directories (internal API)\n"
               "  records      get, list and batch-get indexed records; upload containers\n"
               "  admin        cluster status, repair, rebalance, rebuild-index, users, stats\n"
               "\nRun 'granary <command> --help' for the options of a command.\n";
}

}  // namespace

int main(int argc, char** argv) {
  // A drive keeps a descriptor open per extent file it has written or read (two for one
  // both), up to --extent-descriptors (by default half of this limit): the usual soft limit
  // of 1024 would have them reopened once the drives hold more than about 256 GiB of 1 GiB
  // extents. The hard limit is the one that means anything.
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (argc < 2) {
    usage();
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "serve") return serve(argc - 1, argv + 1);
  if (cmd == "chunkserver") return chunkserver(argc - 1, argv + 1);
  if (cmd == "gateway") return gatewayCommand(argc - 1, argv + 1);
  if (cmd == "index") return indexCommand(argc - 1, argv + 1);
  if (cmd == "records") return cli::records(argc - 1, argv + 1);
  if (cmd == "admin" && argc >= 3 && std::string_view(argv[2]) == "rebuild-index") {
    return rebuildIndexCommand(argc - 2, argv + 2);
  }
  if (cmd == "admin") return cli::admin(argc - 1, argv + 1);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage();
    return 0;
  }
  std::cerr << "granary: unknown command '" << cmd << "'\n";
  usage();
  return 2;
}

// granary_chunk_load: load and verify a chunk server for kill -9 crash tests
// (tests/integration/test_chunkserver_crash.py).
//
//   granary_chunk_load load --endpoint H:P --drives d0,d1 [--threads N] [--max-size B]
//     PUTs blobs whose size and bytes derive from their id, until SIGTERM/SIGINT (or
//     SIGKILL). Prints "attempt DRIVE ID" before each PUT is sent and "ack DRIVE ID" once
//     the server acknowledged it, one line per write(2), so a kill never tears a line.
//   granary_chunk_load verify --endpoint H:P --drives d0,d1 [--log FILE]... [--read-log FILE]...
//     Given the load logs: every acked blob is listed; every listed blob was attempted, on
//     that drive, with that length; each drive's blob count matches its listing; and the
//     blobs of --read-log files that are listed (acked or not) read back byte for byte.
//     (--log files are earlier rounds whose bytes were read back before.) Prints one
//     summary line; exit 0 only if all holds.
// The cluster secret comes from GRANARY_CLUSTER_SECRET.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "granary/chunkstore/remote_chunk_client.h"
#include "granary/common/clock.h"
#include "granary/common/hex.h"

using namespace granary;
using namespace granary::chunkstore;

namespace {

std::atomic<bool> g_stop{false};  // set by the signal handler: must be a lock-free global

void onSignal(int) { g_stop = true; }

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t idHash(const BlobId& id) {
  uint64_t h = 0;
  for (uint8_t b : id.encode()) h = mix(h ^ b);
  return h;
}

// The blob's whole content, a function of its id alone (the stripe field holds the
// run's maximum size).
std::vector<uint8_t> contentOf(const BlobId& id) {
  uint64_t h = idHash(id);
  std::vector<uint8_t> data(1 + h % std::max<uint32_t>(1, id.stripe));
  uint64_t state = h;
  for (size_t i = 0; i < data.size(); i += 8) {
    state = mix(state);
    for (size_t j = 0; j < 8 && i + j < data.size(); ++j) {
      data[i + j] = static_cast<uint8_t>(state >> (8 * j));
    }
  }
  return data;
}

struct Args {
  std::string mode, endpoint;
  std::vector<std::string> drives, logs, read_logs;
  int threads = 4;
  uint64_t max_size = 64 * 1024;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "granary_chunk_load: %s\nusage: granary_chunk_load load|verify "
               "--endpoint H:P --drives d0,d1 [--threads N] [--max-size B] [--log FILE]... "
               "[--read-log FILE]...\n",
               why.c_str());
  std::exit(2);
}

Args parseArgs(int argc, char** argv) {
  if (argc < 2) usage("no mode");
  Args a;
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value for " + flag);
    std::string v = argv[++i];
    if (flag == "--endpoint") {
      a.endpoint = v;
    } else if (flag == "--drives") {
      std::stringstream ss(v);
      for (std::string d; std::getline(ss, d, ',');) a.drives.push_back(d);
    } else if (flag == "--log") {
      a.logs.push_back(v);
    } else if (flag == "--read-log") {
      a.read_logs.push_back(v);
    } else if (flag == "--threads") {
      a.threads = std::max(1, std::atoi(v.c_str()));
    } else if (flag == "--max-size") {
      a.max_size = std::clamp<uint64_t>(std::strtoull(v.c_str(), nullptr, 10), 1, 64 << 20);
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (a.endpoint.empty() || a.drives.empty()) usage("--endpoint and --drives are required");
  return a;
}

std::unique_ptr<RemoteChunkClient> makeClient(const Args& a, const Clock& clock) {
  const char* secret = std::getenv("GRANARY_CLUSTER_SECRET");
  if (!secret || !*secret) usage("GRANARY_CLUSTER_SECRET is not set");
  std::map<std::string, std::string, std::less<>> map;
  for (const auto& d : a.drives) map[d] = a.endpoint;
  RemoteChunkClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(1000);
  o.io_timeout = std::chrono::milliseconds(20000);
  return std::make_unique<RemoteChunkClient>(std::move(map), secret, o, clock);
}

int load(const Args& a) {
  signal(SIGTERM, onSignal);
  signal(SIGINT, onSignal);
  SystemClock clock;
  auto client = makeClient(a, clock);
  std::mutex out_mu;
  auto emit = [&](const std::string& line) {
    std::lock_guard lock(out_mu);
    // One write per line: a kill between writes never leaves half a line.
    if (::write(STDOUT_FILENO, line.data(), line.size()) < 0) g_stop = true;
  };
  // Ids are unique across runs: the run's start time, then thread and sequence numbers.
  uint64_t run = static_cast<uint64_t>(clock.nowUnixNanos());
  std::vector<std::thread> threads;
  for (int t = 0; t < a.threads; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t seq = 0; !g_stop; ++seq) {
        BlobId id;
        putBe64(id.version.bytes.data(), run);
        putBe32(id.version.bytes.data() + 8, static_cast<uint32_t>(t));
        putBe32(id.version.bytes.data() + 12, seq);
        id.stripe = static_cast<uint32_t>(a.max_size);
        const std::string& drive = a.drives[idHash(id) % a.drives.size()];
        BlobDescriptor desc;
        desc.id = id;
        desc.ec = {4, 2};
        auto data = contentOf(id);
        desc.stripe_data_len = data.size();
        desc.bucket = "crash-test";
        desc.key = "t" + std::to_string(t) + "/" + std::to_string(seq);
        std::string hex = toHex(id.encode());
        emit("attempt " + drive + " " + hex + "\n");
        Status st = client->put(drive, desc, data);
        if (st.isOk()) {
          emit("ack " + drive + " " + hex + "\n");
        } else {
          emit("fail " + drive + " " + hex + " " + std::string(codeName(st.code())) + "\n");
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // server down: no spin
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}

struct Expected {
  std::string drive;
  bool acked = false;
  bool deep = false;  // from a --read-log: read its bytes back, not just its listing
};

int verify(const Args& a) {
  SystemClock clock;
  auto client = makeClient(a, clock);
  std::map<BlobId, Expected> blobs;  // every attempted blob
  auto parseLog = [&](const std::string& path, bool deep) {
    std::ifstream in(path);
    if (!in) usage("cannot read " + path);
    for (std::string line; std::getline(in, line);) {
      std::istringstream ls(line);
      std::string kind, drive, hex;
      if (!(ls >> kind >> drive >> hex)) continue;
      auto raw = fromHex(hex);
      auto id = raw ? BlobId::decode(*raw) : fail(Status::invalidArgument(hex));
      if (!id) continue;
      if (kind == "attempt") blobs[*id].drive = drive;
      if (kind == "ack") blobs[*id].acked = true;
      blobs[*id].deep = deep;
    }
  };
  for (const auto& path : a.logs) parseLog(path, false);
  for (const auto& path : a.read_logs) parseLog(path, true);

  int errors = 0;
  auto problem = [&](const std::string& what) {
    if (++errors <= 20) std::fprintf(stderr, "verify: %s\n", what.c_str());
  };
  std::map<BlobId, std::pair<std::string, uint64_t>> listed;  // id -> drive, length
  for (const auto& drive : a.drives) {
    std::optional<BlobId> after;
    size_t on_drive = 0;
    for (;;) {
      auto page = client->list(drive, after, 1000);
      if (!page) {
        problem("list " + drive + ": " + page.error().toString());
        break;
      }
      for (const auto& info : *page) listed[info.id] = {drive, info.length};
      on_drive += page->size();
      if (page->size() < 1000) break;
      after = page->back().id;
    }
    auto stats = client->stats(drive);
    if (!stats) {
      problem("stats " + drive + ": " + stats.error().toString());
    } else if (stats->blobs != on_drive) {
      problem("drive " + drive + " counts " + std::to_string(stats->blobs) + " blobs, lists " +
              std::to_string(on_drive));
    }
  }

  size_t acked = 0, unacked_present = 0, read = 0;
  for (const auto& [id, e] : blobs) {
    acked += e.acked;
    auto it = listed.find(id);
    if (it == listed.end()) {
      if (e.acked) problem("acked blob " + id.toString() + " is not listed on " + e.drive);
      continue;
    }
    unacked_present += !e.acked;
    auto want = contentOf(id);
    if (it->second.first != e.drive || it->second.second != want.size()) {
      problem("blob " + id.toString() + " listed on " + it->second.first + " with length " +
              std::to_string(it->second.second) + ", attempted on " + e.drive + " with " +
              std::to_string(want.size()));
      continue;
    }
    if (!e.deep) continue;
    ++read;
    std::vector<uint8_t> got(want.size());
    Status st = client->read(e.drive, id, 0, got);
    if (!st.isOk()) {
      problem("listed blob " + id.toString() + " is unreadable: " + st.toString());
    } else if (got != want) {
      problem("blob " + id.toString() + " reads back wrong bytes");
    }
  }
  for (const auto& [id, where] : listed) {
    if (!blobs.contains(id) || blobs[id].drive.empty()) {
      problem("drive " + where.first + " lists " + id.toString() + ", which was never attempted");
    }
  }
  std::printf(
      "verify %s: attempted=%zu acked=%zu listed=%zu unacked_present=%zu read_back=%zu "
      "errors=%d\n",
      errors ? "FAILED" : "ok", blobs.size(), acked, listed.size(), unacked_present, read, errors);
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parseArgs(argc, argv);
  if (a.mode == "load") return load(a);
  if (a.mode == "verify") return verify(a);
  usage("unknown mode " + a.mode);
}

// ChunkServer + RemoteChunkClient over real loopback sockets, on real ChunkStores.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <stdexcept>
#include <thread>

#include "granary/chunkstore/chunk_client.h"
#include "granary/chunkstore/chunk_server.h"
#include "granary/chunkstore/remote_chunk_client.h"
#include "granary/common/worker_pool.h"
#include "granary/ec/erasure_code.h"
#include "internal_http.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;
using Code = Status::Code;
using namespace std::chrono_literals;

namespace {

constexpr char kSecret[] = "test-cluster-secret";

// Forwards to the real drives; a test can make the next call fail with a chosen Status,
// make reads hang, mark drives unwritable, and see the last descriptor put.
class ScriptedClient final : public ChunkClient {
 public:
  explicit ScriptedClient(ChunkClient& target) : target_(target) {}

  Status put(std::string_view drive, const BlobDescriptor& desc,
             std::span<const uint8_t> payload) override {
    {
      std::lock_guard lock(mu_);
      last_put_ = desc;
    }
    if (auto e = takeError()) return *e;
    {
      // Held while a test holds puts (bounded, so that a failing test cannot hang).
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(20), [&] { return !puts_held_; });
    }
    return target_.put(drive, desc, payload);
  }
  Status read(std::string_view drive, const BlobId& id, uint64_t offset,
              std::span<uint8_t> out) override {
    if (auto e = takeError()) return *e;
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(read_delay_ms.load()), [&] { return released_; });
    lock.unlock();
    return target_.read(drive, id, offset, out);
  }
  // The real asynchronous path, unless a test scripted an error or a delay.
  void readAsync(std::string_view drive, const BlobId& id, uint64_t offset,
                 std::span<uint8_t> out, IoDone done) override {
    if (auto e = takeError()) return done(*e);
    if (read_delay_ms > 0) return done(read(drive, id, offset, out));
    async_reads++;
    target_.readAsync(drive, id, offset, out, std::move(done));
  }
  Status remove(std::string_view drive, const BlobId& id) override {
    if (auto e = takeError()) return *e;
    return target_.remove(drive, id);
  }
  Result<BlobInfo> stat(std::string_view drive, const BlobId& id) override {
    if (auto e = takeError()) return fail(*e);
    return target_.stat(drive, id);
  }
  Result<BlobDescriptor> describe(std::string_view drive, const BlobId& id) override {
    if (auto e = takeError()) return fail(*e);
    return target_.describe(drive, id);
  }
  Result<std::vector<BlobInfo>> list(std::string_view drive, std::optional<BlobId> after,
                                     size_t limit) override {
    if (auto e = takeError()) return fail(*e);
    return target_.list(drive, after, limit);
  }
  Result<DriveStats> stats(std::string_view drive) override {
    if (auto e = takeError()) return fail(*e);
    return target_.stats(drive);
  }
  bool writable(std::string_view drive) const override {
    std::lock_guard lock(mu_);
    return drive != unwritable_ && target_.writable(drive);
  }

  void failNext(Status st) {
    std::lock_guard lock(mu_);
    next_error_ = std::move(st);
  }
  void throwNext() {
    std::lock_guard lock(mu_);
    throw_next_ = true;
  }
  void releaseReads() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  void holdPuts(bool held) {
    std::lock_guard lock(mu_);
    puts_held_ = held;
    cv_.notify_all();
  }

  void setUnwritable(std::string drive) {
    std::lock_guard lock(mu_);
    unwritable_ = std::move(drive);
  }
  BlobDescriptor lastPut() const {
    std::lock_guard lock(mu_);
    return last_put_;
  }

  std::atomic<int> read_delay_ms{0};
  std::atomic<int> async_reads{0};

 private:
  std::optional<Status> takeError() {
    std::lock_guard lock(mu_);
    if (std::exchange(throw_next_, false)) throw std::runtime_error("backend exploded");
    return std::exchange(next_error_, std::nullopt);
  }
  ChunkClient& target_;
  mutable std::mutex mu_;
  std::string unwritable_;
  bool throw_next_ = false;
  BlobDescriptor last_put_;
  std::condition_variable cv_;
  bool released_ = false;
  bool puts_held_ = false;
  std::optional<Status> next_error_;
};

// Flips a bit of every block read while armed, as a failing disk would.
class BitRotEngine final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    Status st = target_->pread(fd, out, offset);
    if (st.isOk() && armed && out.size() > 100) out[out.size() - 1] ^= 0x40;
    return st;
  }
  void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) override {
    target_->readAsync(fd, out, offset, [this, out, done = std::move(done)](Status st) mutable {
      if (st.isOk() && armed && out.size() > 100) out[out.size() - 1] ^= 0x40;
      done(std::move(st));
    });
  }
  std::atomic<bool> armed{false};
};

// Two drives (d0, d1) behind a ScriptedClient, served by a ChunkServer on 127.0.0.1:0.
struct Cluster {
  explicit Cluster(ChunkServerOptions opts = {}) : engine(makeUringEngine()), faults(engine.get()) {
    std::map<std::string, std::unique_ptr<ChunkStore>, std::less<>> drives;
    for (std::string name : {"d0", "d1"}) {
      ChunkStoreOptions so;
      so.dir = dir.path() + "/" + name;
      so.direct_io = false;  // the bit-rot wrapper must see every read hit the engine
      auto s = openChunkStore(so, faults, resources, store_clock);
      if (!s) throw std::runtime_error(s.error().toString());
      drives.emplace(name, std::move(*s));
    }
    local = std::make_unique<LocalChunkClient>(std::move(drives));
    scripted = std::make_unique<ScriptedClient>(*local);
    opts.cluster_secret = kSecret;
    opts.drives = {"d0", "d1"};
    options = opts;
    start();
  }
  ~Cluster() { stop(); }

  void start() {
    auto s = ChunkServer::create(options, *scripted, pool, clock);
    if (!s) throw std::runtime_error(s.error().toString());
    server = std::move(*s);
    options.listen_port = server->port();  // a restart reuses it
    thread = std::thread([this] { server->run(); });
  }
  void stop() {
    if (!server) return;
    scripted->releaseReads();
    scripted->holdPuts(false);
    server->stop();
    thread.join();
    server.reset();
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(options.listen_port); }

  std::unique_ptr<RemoteChunkClient> client(RemoteChunkClientOptions o = {},
                                            std::string secret = kSecret,
                                            const Clock* c = nullptr) {
    std::map<std::string, std::string, std::less<>> map = {
        {"d0", endpoint()}, {"d1", endpoint()}, {"d9", endpoint()}};
    return std::make_unique<RemoteChunkClient>(std::move(map), std::move(secret), o,
                                               c ? *c : clock);
  }

  TempDir dir;
  std::unique_ptr<IoEngine> engine;
  BitRotEngine faults;
  RocksResources resources{RocksBudget{8 << 20, 8 << 20}};
  ManualClock store_clock{1'700'000'000'000'000'000};
  SystemClock clock;
  std::unique_ptr<LocalChunkClient> local;
  std::unique_ptr<ScriptedClient> scripted;
  WorkerPool pool{4, "cs-test"};
  ChunkServerOptions options;
  std::unique_ptr<ChunkServer> server;
  std::thread thread;
};

// Sends raw bytes to the server and reads until it closes; returns the status code (0 if
// none) and the whole response text.
// A loopback socket that accepts connections (in the kernel) but never reads or answers:
// its descriptor and "127.0.0.1:PORT".
std::pair<int, std::string> silentListener() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  return {fd, "127.0.0.1:" + std::to_string(ntohs(addr.sin_port))};
}

// An open, idle TCP connection to the server on loopback.
int openConnection(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

std::pair<int, std::string> rawExchange(uint16_t port, const std::string& request) {
  int fd = openConnection(port);
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    // EINTR happens here: a thread that used io_uring gets task-work notifications, and a
    // socket with SO_RCVTIMEO does not restart an interrupted recv.
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  int status = response.size() > 12 ? std::atoi(response.substr(9, 3).c_str()) : 0;
  return {status, response};
}

// A signed PUT of `sent` whose signature and CRC header were made for `signed_body`
// (and whose CRC header may claim `claimed_crc_of`).
std::string rawPut(const BlobId& id, std::string_view signed_body, std::string_view sent,
                   std::string_view claimed_crc_of) {
  std::string path = internal::blobPath("d0", id);
  auto bytes = [](std::string_view s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  const auto descriptor_headers = internal::descriptorHeaders(descriptor(id));
  internal::SigningInput in{"PUT", path, "", now, signed_body.size(),
                            ec::crc32c(bytes(signed_body)), {}};
  std::string req = "PUT " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  for (const auto& [n, v] : descriptor_headers) {
    in.headers.emplace_back(n, v);
    req += n + ": " + v + "\r\n";
  }
  req += "x-granary-date: " + std::to_string(now) + "\r\n";
  req += "x-granary-content-crc32c: " + internal::crcHex(ec::crc32c(bytes(claimed_crc_of))) +
         "\r\n";
  req += "x-granary-signature: " + internal::signRequest(kSecret, in) + "\r\n";
  req += "Content-Length: " + std::to_string(sent.size()) + "\r\n\r\n";
  req += sent;
  return req;
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("Blobs round-trip through a chunk server: put, ranged reads, stat, list, stats, remove") {
  Cluster c;
  auto client = c.client();
  REQUIRE(client->health(c.endpoint()).isOk());

  std::vector<std::pair<BlobId, std::vector<uint8_t>>> blobs;
  for (uint64_t i = 0; i < 3; ++i) {
    blobs.emplace_back(makeId(i + 1), randomBytes(i == 0 ? 1 : 5000 + i * 150'000, i));
  }
  for (auto& [id, data] : blobs) REQUIRE(client->put("d0", descriptor(id), data).isOk());
  BlobDescriptor odd = descriptor(makeId(99));
  odd.bucket = "b\xff%2F with space";
  static constexpr char kOddKey[] = "dir/\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87+&?=\n\r\0end";
  odd.key = std::string(kOddKey, sizeof kOddKey - 1);  // with its NUL byte
  odd.ec = {10, 4};
  odd.stripe_data_len = 123456789012ull;
  odd.flags = kBlobFlagPart | kBlobFlagLastStripe;
  REQUIRE(client->put("d1", odd, std::vector<uint8_t>(10, 7)).isOk());
  BlobDescriptor got = c.scripted->lastPut();
  CHECK(got.id == odd.id);
  CHECK(got.bucket == odd.bucket);
  CHECK(got.key == odd.key);
  CHECK(got.ec.k == 10);
  CHECK(got.ec.m == 4);
  CHECK(got.stripe_data_len == odd.stripe_data_len);
  CHECK(got.flags == odd.flags);
  // The header as stored on the drive, read back over the wire.
  auto described = client->describe("d1", odd.id);
  REQUIRE(described.has_value());
  CHECK(*described == odd);
  CHECK(client->describe("d1", makeId(12345)).error().code() == Code::kNotFound);

  for (auto& [id, data] : blobs) {
    std::vector<uint8_t> all(data.size());
    REQUIRE(client->read("d0", id, 0, all).isOk());
    CHECK(all == data);
    size_t off = data.size() / 3, len = data.size() - off - data.size() / 5;
    std::vector<uint8_t> part(len);
    REQUIRE(client->read("d0", id, off, part).isOk());
    CHECK(std::equal(part.begin(), part.end(), data.begin() + static_cast<ptrdiff_t>(off)));
    std::vector<uint8_t> last(1);
    REQUIRE(client->read("d0", id, data.size() - 1, last).isOk());
    // The server took the backend's asynchronous path (that it reaches the shared ring is
    // chunk_store_test's "readAsync on the io_uring engine ...").
    CHECK(c.scripted->async_reads >= 3);
    CHECK(last[0] == data.back());
    auto info = client->stat("d0", id);
    REQUIRE(info.has_value());
    CHECK(info->id == id);
    CHECK(info->length == data.size());
  }

  auto local_list = c.local->list("d0", std::nullopt, 100);
  auto remote_list = client->list("d0", std::nullopt, 100);
  REQUIRE(remote_list.has_value());
  REQUIRE(remote_list->size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK((*remote_list)[i].id == (*local_list)[i].id);
    CHECK((*remote_list)[i].length == (*local_list)[i].length);
    CHECK((*remote_list)[i].created_unix_nanos == (*local_list)[i].created_unix_nanos);
  }
  auto page = client->list("d0", (*remote_list)[0].id, 1);
  REQUIRE(page.has_value());
  REQUIRE(page->size() == 1);
  CHECK((*page)[0].id == (*remote_list)[1].id);

  auto stats = client->stats("d0");
  REQUIRE(stats.has_value());
  CHECK(stats->blobs == 3);
  CHECK(stats->payload_bytes == blobs[0].second.size() + blobs[1].second.size() +
                                    blobs[2].second.size());
  auto local_stats = c.local->stats("d0");
  CHECK(stats->disk_bytes == local_stats->disk_bytes);
  CHECK(stats->committed_puts == local_stats->committed_puts);
  CHECK(stats->committed_puts >= 3);
  CHECK(stats->commit_batches == local_stats->commit_batches);
  CHECK(stats->opened_unix_nanos == local_stats->opened_unix_nanos);
  CHECK(stats->opened_unix_nanos > 0);
  CHECK(stats->disk_bytes > stats->payload_bytes);
  CHECK(stats->capacity_bytes == local_stats->capacity_bytes);
  CHECK(stats->capacity_bytes > 0);

  auto drives = client->drives(c.endpoint());
  REQUIRE(drives.has_value());
  REQUIRE(drives->size() == 2);
  CHECK((*drives)[0].id == "d0");
  CHECK((*drives)[1].writable);

  const auto& [id0, data0] = blobs[1];
  std::vector<uint8_t> past(10);
  CHECK(client->read("d0", id0, data0.size() - 5, past).code() == Code::kInvalidArgument);
  CHECK(client->read("d1", id0, 0, past).code() == Code::kNotFound);
  CHECK(client->stat("d1", id0).error().code() == Code::kNotFound);
  CHECK(client->put("d0", descriptor(id0), data0).code() == Code::kAlreadyExists);
  REQUIRE(client->remove("d0", id0).isOk());
  CHECK(client->read("d0", id0, 0, past).code() == Code::kNotFound);
  CHECK(client->stat("d0", id0).error().code() == Code::kNotFound);
  CHECK(client->remove("d0", id0).code() == Code::kNotFound);
  CHECK(client->stats("d0")->blobs == 2);

  // d9 is in the client's map but not served: out of reach, not lost. "nope" is in
  // neither.
  CHECK(client->read("d9", id0, 0, past).code() == Code::kUnavailable);
  CHECK(client->remove("d9", id0).code() == Code::kUnavailable);
  CHECK(client->stats("d9").error().code() == Code::kUnavailable);
  CHECK(client->read("nope", id0, 0, past).code() == Code::kNotFound);
  CHECK_FALSE(client->writable("nope"));
  // Keep-alive: all of the above went over one pooled connection.
  CHECK(client->connectionsOpened() == 1);
}

TEST_CASE("writable() follows the server's drive list, refreshed at most every interval") {
  Cluster c;
  RemoteChunkClientOptions o;
  o.drive_list_refresh = 0ms;
  auto fresh = c.client(o);
  // writable() never waits for the network: the lists arrive in the background, and
  // until one has, every drive counts as writable.
  CHECK(fresh->writable("d1"));
  auto eventually = [](auto&& condition) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!condition() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    return condition();
  };
  c.scripted->setUnwritable("d1");
  CHECK(eventually([&] { return !fresh->writable("d1"); }));
  o.drive_list_refresh = 1h;
  auto cached = c.client(o);
  CHECK(eventually([&] { return !cached->writable("d1"); }));  // its first list came
  c.scripted->setUnwritable("d0");  // and d1 writable again
  CHECK(eventually([&] { return !fresh->writable("d0") && fresh->writable("d1"); }));
  std::this_thread::sleep_for(100ms);
  CHECK(cached->writable("d0"));   // still the list fetched an hour "ago"
  CHECK_FALSE(cached->writable("d1"));
  // Not in the server's list (the map names a drive the server was not started with):
  // every put there would fail, so it takes none.
  CHECK_FALSE(fresh->writable("d9"));

  // A server that accepts but never answers does not stall writable().
  auto [listener, hung_endpoint] = silentListener();
  RemoteChunkClientOptions hung_opts;
  hung_opts.io_timeout = 10s;
  RemoteChunkClient hung({{"h0", hung_endpoint}}, kSecret, hung_opts, c.clock);
  const auto start = std::chrono::steady_clock::now();
  CHECK(hung.writable("h0"));
  CHECK(std::chrono::steady_clock::now() - start < 5s);  // not the I/O timeout
  ::close(listener);
}

TEST_CASE("A hung chunk server does not hold up the other servers' drive lists") {
  Cluster c;
  auto [listener, hung_endpoint] = silentListener();
  RemoteChunkClientOptions o;
  o.io_timeout = 20s;
  o.drive_list_refresh = 0ms;
  RemoteChunkClient client({{"h0", hung_endpoint}, {"d1", c.endpoint()}}, kSecret, o, c.clock);
  CHECK(client.writable("h0"));  // its list is asked for first, and never comes
  std::this_thread::sleep_for(100ms);
  c.scripted->setUnwritable("d1");
  const auto deadline = std::chrono::steady_clock::now() + 5s;  // well under io_timeout
  while (client.writable("d1") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK_FALSE(client.writable("d1"));
  ::close(listener);  // the hung refresh fails now, so the client's destructor is quick
}

TEST_CASE("Every Status code crosses the wire unchanged, for every operation") {
  Cluster c;
  auto client = c.client();
  BlobId id = makeId(7);
  auto data = randomBytes(3000, 7);
  REQUIRE(client->put("d0", descriptor(id), data).isOk());
  std::vector<uint8_t> out(100);
  for (int code = 1; code <= static_cast<int>(Code::kInternal); ++code) {
    auto want = static_cast<Code>(code);
    std::string message = "injected " + std::string(codeName(want)) + " \"quoted\" \xd0\xba\n";
    INFO(codeName(want));
    auto check = [&](const Status& got, bool has_message = true) {
      CHECK(got.code() == want);
      // Also over HEAD: a retryable refusal read as final makes a copy that did not
      // answer count as lost (rebuild-index's describe).
      CHECK(got.retryable() == (want == Code::kUnavailable || want == Code::kTimeout));
      if (has_message) CHECK(got.message() == message);
    };
    auto inject = [&] {
      c.scripted->failNext(Status(want, message, want == Code::kUnavailable ||
                                                     want == Code::kTimeout));
    };
    inject();
    check(client->put("d0", descriptor(makeId(1000 + static_cast<uint64_t>(code))), data));
    inject();
    check(client->read("d0", id, 0, out));
    inject();
    check(client->remove("d0", id));
    inject();
    check(client->list("d0", std::nullopt, 10).error());
    inject();
    check(client->stats("d0").error());
    inject();  // HEAD answers carry no body: the code comes from the header
    check(client->stat("d0", id).error(), /*has_message=*/false);
  }
  std::vector<uint8_t> back(data.size());
  REQUIRE(client->read("d0", id, 0, back).isOk());  // nothing above got through
  CHECK(back == data);
}

TEST_CASE("Connections beyond max_connections are closed at accept, freed slots are reused") {
  ChunkServerOptions opts;
  opts.max_connections = 2;
  Cluster c(opts);
  int a = openConnection(c.options.listen_port);
  int b = openConnection(c.options.listen_port);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both accepted
  int over = openConnection(c.options.listen_port);
  char byte = 0;
  ssize_t got;
  do {
    got = ::recv(over, &byte, 1, 0);
  } while (got < 0 && errno == EINTR);
  CHECK(got == 0);  // closed by the server, without an answer
  ::close(over);
  ::close(a);
  ::close(b);
  // Once the server has seen both ends (at once here, later on a loaded machine), a new
  // connection gets a slot; a slot that leaked would refuse it for good.
  auto client = c.client();
  bool served = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(served = client->stats("d0").has_value()) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(served);
}

// Waits up to 10 s for the server's body memory to satisfy `what`.
template <typename Pred>
bool bodyMemoryReaches(const ChunkServer& server, Pred what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!what(server.bodyMemory())) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST_CASE("PUT bodies beyond the body memory wait in line, and get 503 once the wait is up") {
  ChunkServerOptions opts;
  opts.body_memory_bytes = 96 << 10;
  opts.body_memory_wait = std::chrono::milliseconds(1500);
  Cluster c(opts);
  auto client = c.client();
  const auto data = randomBytes(64 << 10, 7);
  CHECK(c.server->bodyMemory().capacity == (96u << 10));
  using Stats = rpc::BodyMemoryStats;

  // A body larger than the whole allowance is charged all of it and goes alone.
  // A lease is given back once the answer is written, on the server's loop: maybe just
  // after the client has it.
  auto drained = [&c] {
    return bodyMemoryReaches(*c.server, [](const Stats& s) { return s.held == 0; });
  };
  const auto big = randomBytes(128 << 10, 8);
  REQUIRE(client->put("d0", descriptor(makeId(1)), big).isOk());
  CHECK(c.server->bodyMemory().peak == (96u << 10));
  REQUIRE(drained());

  c.scripted->holdPuts(true);
  Status first, second;
  std::thread a([&] { first = client->put("d0", descriptor(makeId(2)), data); });
  REQUIRE(bodyMemoryReaches(*c.server, [](const Stats& s) { return s.held == (64u << 10); }));
  std::thread b([&] { second = client->put("d0", descriptor(makeId(3)), data); });
  // The second does not fit beside the first: it waits, and is let in once the first
  // answered.
  REQUIRE(bodyMemoryReaches(*c.server, [](const Stats& s) { return s.waiting == 1; }));
  CHECK(c.server->bodyMemory().held == (64u << 10));
  c.scripted->holdPuts(false);
  a.join();
  b.join();
  CHECK(first.isOk());
  CHECK(second.isOk());
  CHECK(c.server->bodyMemory().waits == 1);
  CHECK(c.server->bodyMemory().refusals == 0);

  // One that waits longer than body_memory_wait is refused, retryable, and stores nothing.
  REQUIRE(drained());
  c.scripted->holdPuts(true);
  std::thread a2([&] { first = client->put("d0", descriptor(makeId(4)), data); });
  REQUIRE(bodyMemoryReaches(*c.server, [](const Stats& s) { return s.held == (64u << 10); }));
  const auto start = std::chrono::steady_clock::now();
  second = client->put("d0", descriptor(makeId(5)), data);
  CHECK(secondsSince(start) >= 1.4);
  CHECK(second.code() == Code::kUnavailable);
  CHECK(second.retryable());
  CHECK(c.server->bodyMemory().refusals == 1);
  CHECK(c.server->bodyMemory().waiting == 0);
  c.scripted->holdPuts(false);
  a2.join();
  CHECK(first.isOk());
  CHECK(client->stat("d0", makeId(4)).has_value());
  CHECK(client->stat("d0", makeId(5)).error().code() == Code::kNotFound);
  // Every lease came back; the server still serves.
  CHECK(drained());
  REQUIRE(client->put("d0", descriptor(makeId(6)), data).isOk());
}

TEST_CASE("list() pages up to its limit, a limit over the server's cap is refused") {
  ChunkServerOptions opts;
  opts.max_list_limit = 8;
  Cluster c(opts);
  for (uint64_t n = 0; n < 12; ++n) {
    REQUIRE(c.local->put("d0", descriptor(makeId(n)), randomBytes(100, n)).isOk());
  }
  auto local = c.local->list("d0", std::nullopt, 100);
  REQUIRE(local);
  RemoteChunkClientOptions o;
  o.list_page = 5;
  auto client = c.client(o);
  auto eleven = client->list("d0", std::nullopt, 11);  // pages of 5, 5 and 1
  REQUIRE(eleven);
  REQUIRE(eleven->size() == 11);
  for (size_t i = 0; i < eleven->size(); ++i) CHECK((*eleven)[i].id == (*local)[i].id);
  auto all = client->list("d0", (*local)[3].id, 100);  // a short last page ends it
  REQUIRE(all);
  CHECK(all->size() == 8);
  o.list_page = 9;  // over the server's cap of 8
  auto over = c.client(o)->list("d0", std::nullopt, 100);
  REQUIRE_FALSE(over);
  CHECK(over.error().code() == Code::kInvalidArgument);
}

TEST_CASE("Short reads of every small size come back exactly (reply buffer sizing)") {
  // Sizes around std::string's small-buffer capacity, where a reply sized by capacity
  // instead of the request would ask the store for too many bytes.
  Cluster c;
  auto client = c.client();
  for (uint64_t n = 1; n <= 40; ++n) {
    auto data = randomBytes(n, 500 + n);
    REQUIRE(client->put("d0", descriptor(makeId(500 + n)), data).isOk());
    std::vector<uint8_t> out(n);
    Status st = client->read("d0", makeId(500 + n), 0, out);
    INFO("size " << n << ": " << st.toString());
    REQUIRE(st.isOk());
    CHECK(out == data);
  }
}

TEST_CASE("A read past a blob's end, or of no blob, is refused before any buffer or read") {
  // The range is checked against the blob's length first: 64 MiB asked of a 3,000-byte
  // blob (or of a missing one) allocates nothing and reads nothing.
  Cluster c;
  auto client = c.client();
  BlobId id = makeId(9);
  auto data = randomBytes(3000, 9);
  REQUIRE(client->put("d0", descriptor(id), data).isOk());
  std::vector<uint8_t> big(64u << 20);
  CHECK(client->read("d0", id, 0, big).code() == Code::kInvalidArgument);
  std::vector<uint8_t> two(2);
  CHECK(client->read("d0", id, 2999, two).code() == Code::kInvalidArgument);
  CHECK(client->read("d0", makeId(10), 0, two).code() == Code::kNotFound);
  CHECK(c.scripted->async_reads == 0);
  std::vector<uint8_t> last(1);
  REQUIRE(client->read("d0", id, 2999, last).isOk());
  CHECK(last[0] == data[2999]);
  CHECK(c.scripted->async_reads == 1);
}

TEST_CASE("A backend that throws gives kInternal, and the server keeps serving") {
  Cluster c;
  auto client = c.client();
  BlobId id = makeId(8);
  auto data = randomBytes(3000, 8);
  REQUIRE(client->put("d0", descriptor(id), data).isOk());
  std::vector<uint8_t> out(data.size());
  c.scripted->throwNext();
  Status st = client->read("d0", id, 0, out);
  CHECK(st.code() == Code::kInternal);
  CHECK(st.message().find("backend exploded") != std::string::npos);
  REQUIRE(client->read("d0", id, 0, out).isOk());
  CHECK(out == data);
}

TEST_CASE("An error answer not from a chunk server is never kNotFound") {
  // A bare 404 (a proxy, another service on the port) must not make a gateway believe a
  // fragment is gone; with the chunk server's own code header it is kNotFound.
  CHECK(internal::statusFromError(404, std::nullopt, "").code() == Code::kUnavailable);
  CHECK(internal::statusFromError(404, std::nullopt, "<html>Not Found</html>").code() ==
        Code::kUnavailable);
  CHECK(internal::statusFromError(404, "NotFound", "").code() == Code::kNotFound);
  // Nor, for any other 4xx, a refusal: a commit behind a proxy may have happened.
  CHECK(internal::statusFromError(400, std::nullopt, "<html>Bad Request</html>").code() ==
        Code::kUnavailable);
  CHECK_FALSE(internal::statusFromError(409, std::nullopt, "").retryable());
  CHECK_FALSE(internal::statusFromError(429, std::nullopt,
                                        R"({"code":"Throttled","message":"m","retryable":true})")
                  .retryable());
  CHECK(internal::statusFromError(400, "InvalidArgument", "").code() ==
        Code::kInvalidArgument);
  CHECK(internal::statusFromError(404, std::nullopt,
                                  R"({"code":"NotFound","message":"m"})").code() ==
        Code::kNotFound);
}

TEST_CASE("Whether an error is retryable crosses without a body, from old servers too") {
  // A HEAD answer: the retryable header says it (an EAGAIN I/O error is retryable too).
  CHECK(internal::statusFromError(500, "IOError", "", "true").retryable());
  CHECK_FALSE(internal::statusFromError(503, "Unavailable", "", "false").retryable());
  // The body wins over the header.
  CHECK_FALSE(internal::statusFromError(
                  503, "Unavailable", R"({"code":"Unavailable","message":"m","retryable":false})",
                  "true")
                  .retryable());
  // A server older than the header: as Status makes the code.
  CHECK(internal::statusFromError(503, "Unavailable", "").retryable());
  CHECK(internal::statusFromError(504, "Timeout", "").retryable());
  CHECK_FALSE(internal::statusFromError(500, "IOError", "").retryable());
  CHECK_FALSE(internal::statusFromError(404, "NotFound", "").retryable());
}

TEST_CASE("A block that rots on disk reads as kCorruption through the server") {
  Cluster c;
  auto client = c.client();
  BlobId id = makeId(3);
  auto data = randomBytes(5 * 4096, 3);
  REQUIRE(client->put("d0", descriptor(id), data).isOk());
  std::vector<uint8_t> out(data.size());
  REQUIRE(client->read("d0", id, 0, out).isOk());
  c.faults.armed = true;
  Status st = client->read("d0", id, 0, out);
  CHECK(st.code() == Code::kCorruption);
  c.faults.armed = false;
  REQUIRE(client->read("d0", id, 0, out).isOk());
  CHECK(out == data);
}

TEST_CASE("Requests without a valid signature are refused with 403 and change nothing") {
  Cluster c;
  BlobId id = makeId(11);
  auto data = randomBytes(6000, 11);

  auto wrong = c.client({}, "not-the-secret");
  CHECK(wrong->put("d0", descriptor(id), data).code() == Code::kPermissionDenied);
  std::vector<uint8_t> out(10);
  CHECK(wrong->read("d0", id, 0, out).code() == Code::kPermissionDenied);
  CHECK(wrong->stat("d0", id).error().code() == Code::kPermissionDenied);
  CHECK(wrong->health(c.endpoint()).code() == Code::kPermissionDenied);
  // A body far past the socket buffers: the server answers, then reads and drops the
  // rest, so the client reads the refusal, not a reset (a server gone, kUnavailable).
  const auto big = randomBytes(16 << 20, 12);
  for (int i = 0; i < 3; ++i) {
    CHECK(wrong->put("d0", descriptor(makeId(12 + i)), big).code() == Code::kPermissionDenied);
  }
  CHECK(c.local->stats("d0")->blobs == 0);

  ManualClock late(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch() - 16min)
                       .count());
  CHECK(c.client({}, kSecret, &late)->health(c.endpoint()).code() == Code::kPermissionDenied);
  late.advance(std::chrono::nanoseconds(2min).count());  // 14 minutes behind: tolerated
  CHECK(c.client({}, kSecret, &late)->health(c.endpoint()).isOk());

  auto [status, text] = rawExchange(
      c.options.listen_port,
      "GET /internal/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(status == 403);
  CHECK(text.find("\"code\":\"PermissionDenied\"") != std::string::npos);

  std::string unsigned_put = "PUT " + internal::blobPath("d0", id) +
                             " HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd";
  CHECK(rawExchange(c.options.listen_port, unsigned_put).first == 403);
  CHECK(c.local->stats("d0")->blobs == 0);
}

TEST_CASE("A body that does not match its signed CRC32C is refused and not stored") {
  Cluster c;
  BlobId id = makeId(12);
  std::string good(5000, 'g');
  std::string evil = good;
  evil[1234] = 'e';
  // Signed for `good`, body swapped: the CRC check fails.
  CHECK(rawExchange(c.options.listen_port, rawPut(id, good, evil, good)).first == 400);
  // CRC header rewritten to match the swapped body: the signature check fails.
  CHECK(rawExchange(c.options.listen_port, rawPut(id, good, evil, evil)).first == 403);
  CHECK(c.local->stats("d0")->blobs == 0);
  // The well-formed request is accepted, so the two refusals were for the tampering.
  CHECK(rawExchange(c.options.listen_port, rawPut(id, good, good, good)).first == 200);
  CHECK(c.local->stats("d0")->blobs == 1);
}

TEST_CASE("A stopped server is kUnavailable, quickly") {
  Cluster c;
  auto client = c.client();
  BlobId id = makeId(5);
  auto data = randomBytes(100, 5);
  REQUIRE(client->put("d0", descriptor(id), data).isOk());
  c.stop();
  auto started = std::chrono::steady_clock::now();
  std::vector<uint8_t> out(data.size());
  CHECK(client->read("d0", id, 0, out).code() == Code::kUnavailable);
  CHECK(client->put("d0", descriptor(makeId(6)), data).code() == Code::kUnavailable);
  CHECK(client->stats("d0").error().code() == Code::kUnavailable);
  CHECK(secondsSince(started) < 3.0);  // refused at once: no I/O timeout waited for
  // And back when it is.
  c.start();
  REQUIRE(client->read("d0", id, 0, out).isOk());
  CHECK(out == data);
}

TEST_CASE("A pooled connection the server closed while idle is replaced transparently") {
  ChunkServerOptions o;
  o.idle_timeout_seconds = 1;
  Cluster c(o);
  RemoteChunkClientOptions co;
  co.retries = 0;  // the dead connection must be noticed before use, not retried after
  auto client = c.client(co);
  auto data = randomBytes(2000, 1);
  REQUIRE(client->put("d0", descriptor(makeId(1)), data).isOk());
  CHECK(client->connectionsOpened() == 1);
  std::this_thread::sleep_for(3s);  // the server's idle timeout (1 s) closes it
  REQUIRE(client->put("d0", descriptor(makeId(2)), data).isOk());
  std::vector<uint8_t> out(data.size());
  REQUIRE(client->read("d0", makeId(2), 0, out).isOk());
  CHECK(client->connectionsOpened() == 2);
}

TEST_CASE("A server that stops answering hits the client's I/O timeout") {
  RemoteChunkClientOptions co;
  co.io_timeout = 300ms;

  SECTION("a chunk server whose disk hangs") {
    Cluster c;
    auto client = c.client(co);
    BlobId id = makeId(8);
    auto data = randomBytes(100, 8);
    REQUIRE(client->put("d0", descriptor(id), data).isOk());
    c.scripted->read_delay_ms = 10'000;
    auto started = std::chrono::steady_clock::now();
    std::vector<uint8_t> out(data.size());
    CHECK(client->read("d0", id, 0, out).code() == Code::kTimeout);
    double took = secondsSince(started);
    CHECK(took >= 0.29);
    CHECK(took < 1.5);  // timeouts are not retried
  }
  SECTION("a socket that listens but never reads or answers") {
    auto [fd, endpoint] = silentListener();
    SystemClock clock;
    RemoteChunkClient client({{"d0", endpoint}}, kSecret, co, clock);
    auto started = std::chrono::steady_clock::now();
    CHECK(client.put("d0", descriptor(makeId(1)), randomBytes(100, 1)).code() ==
          Code::kTimeout);
    CHECK(client.stats("d0").error().code() == Code::kTimeout);
    CHECK(secondsSince(started) < 2.0);
    ::close(fd);
  }
}

TEST_CASE("Many threads share one client and its connection pool") {
  Cluster c;
  RemoteChunkClientOptions co;
  constexpr int kThreads = 8, kPerThread = 40;
  // Room for every thread's connection while idle: then none is ever closed and opened
  // again, whatever the scheduling, and each thread needs at most one at a time.
  co.max_idle_per_endpoint = kThreads;
  auto client = c.client(co);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        uint64_t n = static_cast<uint64_t>(t * 1000 + i);
        auto data = randomBytes(100 + n % 9000, n);
        std::string drive = n % 2 ? "d1" : "d0";
        std::vector<uint8_t> out(data.size());
        if (!client->put(drive, descriptor(makeId(n)), data).isOk() ||
            !client->read(drive, makeId(n), 0, out).isOk() || out != data) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(c.local->stats("d0")->blobs + c.local->stats("d1")->blobs == kThreads * kPerThread);
  CHECK(client->connectionsOpened() <= kThreads);  // reused, not one per request
}

TEST_CASE("The internal API's wire helpers round-trip what they encode") {
  DriveStats s;
  s.blobs = 1;
  s.payload_bytes = 2;
  s.disk_bytes = 3;
  s.commit_batches = 4;
  s.committed_puts = 5;
  s.scrub_passes = 6;
  s.scrubbed_bytes = 7;
  s.corrupt_blobs = 8;
  s.capacity_bytes = 9;
  s.available_bytes = UINT64_MAX;
  s.opened_unix_nanos = 10;
  auto back = internal::decodeStats(internal::encodeStats(s));
  REQUIRE(back.has_value());
  CHECK(std::memcmp(&*back, &s, sizeof s) == 0);
  CHECK(internal::decodeStats("{\"blobs\": 5}")->blobs == 5);  // an older server's answer
  CHECK(internal::decodeStats("not json").error().code() == Code::kIoError);

  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string encoded = internal::percentEncode(all);
  CHECK(encoded.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789-._~%") == std::string::npos);
  CHECK(internal::percentDecode(encoded) == all);
  CHECK_FALSE(internal::percentDecode("%4").has_value());
  CHECK_FALSE(internal::percentDecode("%zz").has_value());

  BlobId id = makeId(42, 7, 0);
  CHECK(internal::parseBlobIdHex(internal::blobIdHex(id)) == id);

  CHECK(internal::canonicalQuery("offset=5&length=2&&after=x") == "after=x&length=2&offset=5");
  CHECK(internal::parseRoute("/internal/v1/drives/d%2F0/blobs/" + internal::blobIdHex(id))
            ->drive == "d/0");
  CHECK(internal::parseRoute("/internal/v2/health").error().code() == Code::kInvalidArgument);
  CHECK(internal::parseRoute("/internal/v1/drives/d0/blobs/abc").error().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("Drive stats carry the ids of corrupt blobs over the wire") {
  DriveStats s;
  s.blobs = 7;
  s.corrupt_ids = {makeId(3), makeId(9)};
  auto back = internal::decodeStats(internal::encodeStats(s));
  REQUIRE(back.has_value());
  CHECK(back->blobs == 7);
  CHECK(back->corrupt_ids == s.corrupt_ids);
  // An older server sends none; a malformed id is a transport error, not a crash.
  CHECK(internal::decodeStats(R"({"blobs":1})")->corrupt_ids.empty());
  CHECK(internal::decodeStats(R"({"corrupt_ids":["zz"]})").error().code() == Code::kIoError);
}

// RemoteChunkClient: synchronous HTTP/1.1 over pooled keep-alive TCP connections. Beast
// parses and serializes; the socket is http_connection.h's deadline-bounded fd.
#include <utility>  // before Asio: Boost 1.74's headers miss it under g++ 12

#include <boost/beast/http.hpp>

#include "granary/chunkstore/remote_chunk_client.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "granary/common/clock.h"
#include "granary/ec/erasure_code.h"
#include "http_connection.h"
#include "internal_http.h"

namespace granary::chunkstore {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace internal;
using Millis = std::chrono::milliseconds;

namespace {

struct Call {
  http::verb verb = http::verb::get;
  std::string path;   // encoded
  std::string query;  // raw, "" for none
  Headers headers;
  std::span<const uint8_t> body;
  std::span<uint8_t> read_into;  // a 200 answer's body goes here and must fill it exactly
  bool idempotent = true;
};

struct Answer {
  int status = 0;
  Headers headers;  // the x-granary-* ones, names in lower case
  std::string body;

  bool ok() const { return status >= 200 && status < 300; }
  Status error() const {
    return statusFromError(status, findHeader(headers, kErrorCodeHeader), body);
  }
};

beast::string_view bsv(std::string_view s) { return {s.data(), s.size()}; }

Status transportFailure(const beast::error_code& ec, std::string_view what) {
  if (ec == beast::error::timeout) {
    return Status::timeout("chunk server did not answer in time (" + std::string(what) + ")");
  }
  return connectionFailure(std::string(what) + ": " + ec.message());
}

}  // namespace

struct RemoteChunkClient::Impl {
  // Per endpoint: idle keep-alive connections and the cached drive list.
  struct Endpoint {
    std::mutex mu;
    std::vector<std::unique_ptr<Connection>> idle;
    std::map<std::string, bool, std::less<>> writable;
    int64_t next_refresh_nanos = 0;
    bool refreshing = false;
  };

  Impl(std::map<std::string, std::string, std::less<>> d, std::string s,
       RemoteChunkClientOptions o, const Clock& c)
      : drives(std::move(d)), secret(std::move(s)), options(o), clock(c) {}

  ~Impl() {
    {
      std::lock_guard lock(refresh_mu);
      refresh_stop = true;
    }
    refresh_cv.notify_all();
    if (refresher.joinable()) refresher.join();
  }

  Endpoint& endpointState(std::string_view endpoint) {
    std::lock_guard lock(endpoints_mu);
    auto it = endpoints.find(endpoint);
    if (it == endpoints.end()) {
      it = endpoints.emplace(std::string(endpoint), std::make_unique<Endpoint>()).first;
    }
    return *it->second;
  }

  // A pooled connection still open, or a new one.
  Result<std::unique_ptr<Connection>> acquire(std::string_view endpoint) {
    Endpoint& p = endpointState(endpoint);
    {
      std::lock_guard lock(p.mu);
      const auto now = std::chrono::steady_clock::now();
      while (!p.idle.empty()) {
        auto conn = std::move(p.idle.back());
        p.idle.pop_back();
        // Well before the server's idle timeout (60 s by default) could close it under us
        // mid-request, which would make a PUT's outcome unknown.
        if (now - conn->idle_since < options.max_idle_age) {
          if (conn->reusable()) return conn;
        }
      }
    }
    auto conn = Connection::open(endpoint, options.connect_timeout, options.io_timeout);
    if (conn) ++connections_opened;
    return conn;
  }

  void release(std::string_view endpoint, std::unique_ptr<Connection> conn) {
    Endpoint& p = endpointState(endpoint);
    std::lock_guard lock(p.mu);
    conn->idle_since = std::chrono::steady_clock::now();
    if (p.idle.size() < options.max_idle_per_endpoint) p.idle.push_back(std::move(conn));
  }

  // Sends `call` on `conn` and reads the answer. kUnavailable and kTimeout are connection
  // failures; `keep` says whether the connection may be pooled again.
  Status exchange(Connection& conn, std::string_view endpoint, const Call& call,
                  Answer& answer, bool& keep) {
    keep = false;
    conn.bytes_sent = 0;
    std::string target = call.path;
    if (!call.query.empty()) target += "?" + call.query;
    uint32_t crc = ec::crc32c(call.body);
    int64_t date = clock.nowUnixNanos() / 1'000'000'000;
    std::string method(http::to_string(call.verb));
    SigningInput in{method, call.path, call.query, date, call.body.size(), crc, {}};
    for (const auto& [name, value] : call.headers) {
      if (isSignedHeader(name)) in.headers.emplace_back(name, value);
    }

    http::request<http::buffer_body> req{call.verb, target, 11};
    req.set(http::field::host, bsv(endpoint));
    req.set(bsv(kDateHeader), std::to_string(date));
    req.set(bsv(kCrcHeader), crcHex(crc));
    req.set(bsv(kSignatureHeader), signRequest(secret, in));
    for (const auto& [name, value] : call.headers) req.set(name, value);
    req.body().data = const_cast<uint8_t*>(call.body.data());
    req.body().size = call.body.size();
    req.body().more = false;
    req.content_length(call.body.size());
    req.keep_alive(true);
    beast::error_code ec;
    http::write(conn, req, ec);
    if (ec) return transportFailure(ec, "send");

    http::response_parser<http::empty_body> head;
    head.body_limit(options.max_response_bytes);
    head.skip(call.verb == http::verb::head);
    http::read_header(conn, conn.buffer, head, ec);
    if (ec) return transportFailure(ec, "receive");
    answer.status = static_cast<int>(head.get().result_int());
    for (const auto& f : head.get()) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (name.starts_with("x-granary-")) answer.headers.emplace_back(name, std::string(f.value().data(), f.value().size()));
    }
    bool keep_alive = head.get().keep_alive();
    if (call.verb == http::verb::head) {
      keep = keep_alive;
      return Status::ok();
    }
    if (answer.ok() && !call.read_into.empty()) {
      if (head.content_length() != call.read_into.size()) {
        return Status::ioError("chunk server sent a body of unexpected length");
      }
      http::response_parser<http::buffer_body> parser{std::move(head)};
      auto& body = parser.get().body();
      body.data = call.read_into.data();
      body.size = call.read_into.size();
      while (!parser.is_done()) {
        http::read(conn, conn.buffer, parser, ec);
        if (ec == http::error::need_buffer && body.size > 0) continue;
        if (ec) return transportFailure(ec, "receive body");
      }
      auto sent_crc = findHeader(answer.headers, kCrcHeader);
      if (!sent_crc || parseCrcHex(*sent_crc) != ec::crc32c(call.read_into)) {
        return connectionFailure(sent_crc ? "response body failed its CRC32C"
                                          : "response body without x-granary-content-crc32c");
      }
    } else {
      http::response_parser<http::string_body> parser{std::move(head)};
      http::read(conn, conn.buffer, parser, ec);
      if (ec) return transportFailure(ec, "receive body");
      answer.body = std::move(parser.get().body());
    }
    keep = keep_alive;
    return Status::ok();
  }

  // One call with retries; a non-2xx answer is returned as an Answer, not a Status.
  Result<Answer> execute(std::string_view endpoint, const Call& call) {
    Status last;
    for (int attempt = 0; attempt <= options.retries; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(options.retry_backoff * (1 << (attempt - 1)));
      auto conn = acquire(endpoint);
      if (!conn) {
        last = conn.error();
        if (!last.retryable()) break;
        continue;
      }
      Answer answer;
      bool keep = false;
      Status st = exchange(**conn, endpoint, call, answer, keep);
      if (st.isOk()) {
        if (keep) release(endpoint, std::move(*conn));
        return answer;
      }
      bool nothing_sent = (*conn)->bytes_sent == 0;
      if (st.code() != Status::Code::kUnavailable) return fail(st);  // timeout, protocol
      last = st;
      if (!call.idempotent && !nothing_sent) {
        return fail(connectionFailure("connection to " + std::string(endpoint) +
                                          " failed after the request was sent (outcome "
                                          "unknown): " + st.message(),
                                      false));
      }
    }
    return fail(last);
  }

  Result<std::string_view> endpointOf(std::string_view drive) const {
    auto it = drives.find(drive);
    if (it == drives.end()) {
      return fail(Status::notFound("unknown drive '" + std::string(drive) + "'"));
    }
    return std::string_view(it->second);
  }

  // execute() on the drive's endpoint, with a non-2xx answer turned into its Status.
  Result<Answer> call(std::string_view drive, const Call& c) {
    auto endpoint = endpointOf(drive);
    if (!endpoint) return fail(endpoint.error());
    auto answer = execute(*endpoint, c);
    if (answer && !answer->ok()) return fail(answer->error());
    return answer;
  }

  Result<std::vector<DriveState>> fetchDrives(std::string_view endpoint) {
    Call c;
    c.path = drivesPath();
    auto answer = execute(endpoint, c);
    if (!answer) return fail(answer.error());
    if (!answer->ok()) return fail(answer->error());
    return decodeDrives(answer->body);
  }

  // Asks the background refresher for the endpoint's drive list unless a refresh is
  // pending or the list is fresh. Never waits on the network: writable() is called from
  // placement on event-loop threads, and a hung server must not stall them.
  void refreshDrives(std::string_view endpoint, Endpoint& cache) {
    int64_t now = clock.monotonicNanos();
    {
      std::lock_guard lock(cache.mu);
      if (cache.refreshing || now < cache.next_refresh_nanos) return;
      cache.refreshing = true;
      cache.next_refresh_nanos =
          now + std::chrono::duration_cast<std::chrono::nanoseconds>(options.drive_list_refresh)
                    .count();
    }
    std::lock_guard lock(refresh_mu);
    refresh_wanted.emplace(endpoint);
    if (!refresher.joinable()) refresher = std::thread([this] { refreshLoop(); });
    refresh_cv.notify_one();
  }

  void refreshLoop() {
    std::unique_lock lock(refresh_mu);
    for (;;) {
      refresh_cv.wait(lock, [&] { return refresh_stop || !refresh_wanted.empty(); });
      if (refresh_stop) return;
      std::string endpoint = std::move(refresh_wanted.extract(refresh_wanted.begin()).value());
      lock.unlock();
      auto list = fetchDrives(endpoint);
      Endpoint& cache = endpointState(endpoint);
      {
        std::lock_guard cache_lock(cache.mu);
        cache.refreshing = false;
        if (list) {  // on failure keep what we knew
          cache.writable.clear();
          for (const auto& d : *list) cache.writable[d.id] = d.writable;
        }
      }
      lock.lock();
    }
  }

  const std::map<std::string, std::string, std::less<>> drives;
  const std::string secret;
  const RemoteChunkClientOptions options;
  const Clock& clock;
  std::mutex endpoints_mu;  // guards the map, not the Endpoints
  std::map<std::string, std::unique_ptr<Endpoint>, std::less<>> endpoints;
  std::atomic<uint64_t> connections_opened{0};

  std::mutex refresh_mu;
  std::condition_variable refresh_cv;
  std::set<std::string> refresh_wanted;  // endpoints whose drive list is wanted
  bool refresh_stop = false;
  std::thread refresher;  // started on the first refresh; last member: joined first
};

RemoteChunkClient::RemoteChunkClient(std::map<std::string, std::string, std::less<>> drives,
                                     std::string cluster_secret,
                                     RemoteChunkClientOptions options, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(drives), std::move(cluster_secret), options,
                                   clock)) {}

RemoteChunkClient::~RemoteChunkClient() = default;

Status RemoteChunkClient::put(std::string_view drive, const BlobDescriptor& desc,
                              std::span<const uint8_t> payload) {
  Call c;
  c.verb = http::verb::put;
  c.path = blobPath(drive, desc.id);
  c.headers = descriptorHeaders(desc);
  c.body = payload;
  c.idempotent = false;
  auto answer = impl_->call(drive, c);
  return answer ? Status::ok() : answer.error();
}

Status RemoteChunkClient::read(std::string_view drive, const BlobId& id, uint64_t offset,
                               std::span<uint8_t> out) {
  Call c;
  c.path = blobPath(drive, id);
  c.query = "length=" + std::to_string(out.size()) + "&offset=" + std::to_string(offset);
  c.read_into = out;
  auto answer = impl_->call(drive, c);
  return answer ? Status::ok() : answer.error();
}

Status RemoteChunkClient::remove(std::string_view drive, const BlobId& id) {
  Call c;
  c.verb = http::verb::delete_;
  c.path = blobPath(drive, id);
  auto answer = impl_->call(drive, c);
  return answer ? Status::ok() : answer.error();
}

Result<std::vector<BlobInfo>> RemoteChunkClient::list(std::string_view drive,
                                                      std::optional<BlobId> after,
                                                      size_t limit) {
  // Larger requests go out as several pages, each well under any server's cap, so the
  // result holds `limit` blobs unless the drive has no more.
  std::vector<BlobInfo> out;
  while (out.size() < limit) {
    const size_t want = std::min(limit - out.size(), std::max<size_t>(1, impl_->options.list_page));
    Call c;
    c.path = blobListPath(drive);
    if (after) c.query = "after=" + blobIdHex(*after) + "&";
    c.query += "limit=" + std::to_string(want);
    auto answer = impl_->call(drive, c);
    if (!answer) return fail(answer.error());
    auto page = decodeBlobList(answer->body);
    if (!page) return page;
    out.insert(out.end(), page->begin(), page->end());
    if (page->size() < want) break;
    after = out.back().id;
  }
  return out;
}

Result<DriveStats> RemoteChunkClient::stats(std::string_view drive) {
  Call c;
  c.path = statsPath(drive);
  auto answer = impl_->call(drive, c);
  if (!answer) return fail(answer.error());
  return decodeStats(answer->body);
}

Result<BlobInfo> RemoteChunkClient::stat(std::string_view drive, const BlobId& id) {
  Call c;
  c.verb = http::verb::head;
  c.path = blobPath(drive, id);
  auto answer = impl_->call(drive, c);
  if (!answer) return fail(answer.error());
  auto length = findHeader(answer->headers, kBlobLengthHeader);
  auto created = findHeader(answer->headers, kCreatedHeader);
  auto l = length ? parseU64(*length) : std::nullopt;
  auto t = created ? parseU64(*created) : std::nullopt;
  if (!l || !t) return fail(Status::ioError("chunk server sent a malformed stat answer"));
  return BlobInfo{id, *l, static_cast<int64_t>(*t)};
}

bool RemoteChunkClient::writable(std::string_view drive) const {
  auto endpoint = impl_->endpointOf(drive);
  if (!endpoint) return false;
  auto& cache = impl_->endpointState(*endpoint);
  impl_->refreshDrives(*endpoint, cache);
  std::lock_guard lock(cache.mu);
  auto it = cache.writable.find(drive);
  return it == cache.writable.end() || it->second;
}

Result<std::vector<DriveState>> RemoteChunkClient::drives(std::string_view endpoint) {
  return impl_->fetchDrives(endpoint);
}

Status RemoteChunkClient::health(std::string_view endpoint) {
  Call c;
  c.path = healthPath();
  auto answer = impl_->execute(endpoint, c);
  if (!answer) return answer.error();
  return answer->ok() ? Status::ok() : answer->error();
}

uint64_t RemoteChunkClient::connectionsOpened() const { return impl_->connections_opened; }

}  // namespace granary::chunkstore

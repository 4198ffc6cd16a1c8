// rpc::Client: synchronous HTTP/1.1 over pooled keep-alive TCP connections. Beast parses
// and serializes; the socket is connection.h's deadline-bounded fd.
#include <utility>  // before Asio: Boost 1.74's headers miss it under g++ 12

#include <boost/beast/http.hpp>

#include "granary/rpc/client.h"
#include "granary/common/strings.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "connection.h"
#include "granary/common/clock.h"
#include "granary/ec/erasure_code.h"

namespace granary::rpc {

namespace beast = boost::beast;
namespace http = beast::http;
using detail::Connection;
using detail::connectionFailure;

namespace {

beast::string_view bsv(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

struct Client::Impl {
  struct Endpoint {
    std::mutex mu;
    std::vector<std::unique_ptr<Connection>> idle;
  };

  Impl(std::string s, ClientOptions o, const Clock& c)
      : secret(std::move(s)), options(std::move(o)), clock(c) {}

  Status transportFailure(const beast::error_code& ec, std::string_view what) const {
    if (ec == beast::error::timeout) {
      return Status::timeout(options.peer_name + " did not answer in time (" + std::string(what) +
                             ")");
    }
    return connectionFailure(std::string(what) + ": " + ec.message());
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
    const http::verb verb = http::string_to_verb(call.method);
    if (verb == http::verb::unknown) {
      return Status::invalidArgument("unknown HTTP method " + call.method);
    }
    std::string target = call.path;
    if (!call.query.empty()) target += "?" + call.query;
    uint32_t crc = ec::crc32c(call.body);
    int64_t date = clock.nowUnixNanos() / 1'000'000'000;
    SigningInput in{call.method, call.path, call.query, date, call.body.size(), crc, {}};
    for (const auto& [name, value] : call.headers) {
      if (isSignedHeader(name)) in.headers.emplace_back(name, value);
    }

    http::request<http::buffer_body> req{verb, target, 11};
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
    head.skip(verb == http::verb::head);
    http::read_header(conn, conn.buffer, head, ec);
    if (ec) return transportFailure(ec, "receive");
    answer.status = static_cast<int>(head.get().result_int());
    for (const auto& f : head.get()) {
      const std::string name =
          asciiLower(std::string_view(f.name_string().data(), f.name_string().size()));
      if (name.starts_with("x-granary-")) {
        answer.headers.emplace_back(name, std::string(f.value().data(), f.value().size()));
      }
    }
    bool keep_alive = head.get().keep_alive();
    if (verb == http::verb::head) {
      keep = keep_alive;
      return Status::ok();
    }
    if (answer.ok() && !call.read_into.empty()) {
      if (head.content_length() != call.read_into.size()) {
        return Status::ioError(options.peer_name + " sent a body of unexpected length");
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

  Result<Answer> execute(std::string_view endpoint, const Call& call) {
    Status last;
    for (int attempt = 0; attempt <= options.retries; ++attempt) {
      if (attempt > 0) {
        constexpr std::chrono::milliseconds kLongestBackoff{30'000};
        std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
            options.retry_backoff * (1 << std::min(attempt - 1, 16)), kLongestBackoff));
      }
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

  const std::string secret;
  const ClientOptions options;
  const Clock& clock;
  std::mutex endpoints_mu;  // guards the map, not the Endpoints
  std::map<std::string, std::unique_ptr<Endpoint>, std::less<>> endpoints;
  std::atomic<uint64_t> connections_opened{0};
};

Client::Client(std::string cluster_secret, ClientOptions options, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(cluster_secret), std::move(options), clock)) {}

Client::~Client() = default;

Result<Answer> Client::execute(std::string_view endpoint, const Call& call) {
  return impl_->execute(endpoint, call);
}

Result<Answer> Client::call(std::string_view endpoint, const Call& call) {
  auto answer = impl_->execute(endpoint, call);
  if (answer && !answer->ok()) return fail(answer->error());
  return answer;
}

const ClientOptions& Client::options() const { return impl_->options; }

uint64_t Client::connectionsOpened() const { return impl_->connections_opened; }

}  // namespace granary::rpc

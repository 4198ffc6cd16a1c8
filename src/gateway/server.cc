// The HTTP/1.1 transport: Beast sessions as C++20 coroutines, one io_context per thread,
// each with its own SO_REUSEPORT acceptor so a connection stays on one thread. Everything
// S3 lives behind handleRequest(); this file only moves bytes and enforces timeouts.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/asio/ssl.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/sendfile.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asio.h"
#include "granary/common/strings.h"
#include "granary/common/clock.h"
#include "granary/common/cpus.h"
#include "granary/common/hex.h"
#include "granary/common/log.h"
#include "granary/common/random.h"
#include "granary/placement/cluster_map.h"
#include "handlers.h"
#include "http_text.h"
#include "s3_xml.h"
#include "time_format.h"

namespace granary::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;

namespace {

constexpr auto kRedirect = [](beast::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable, ec);
};

// The stream's TCP layer, for timeouts (Stream: beast::tcp_stream, or its TLS wrapper).
template <class Stream>
beast::tcp_stream& tcpLayer(Stream& stream) {
  return beast::get_lowest_layer(stream);
}

// A request body. One with a Content-Length (every S3 PUT but HTTP-chunked ones) is read
// from the socket straight into the caller's buffer, after what the header read already
// buffered; only the bytes of the body are taken, so a pipelined next request stays in
// `buffer`. Going through Beast's parser instead copies every byte once more, from its
// buffer into the caller's (3.6% of the server's CPU at 1 MiB PUTs). Other bodies (HTTP
// chunked transfer coding) go through the parser.
template <class Stream>
class BeastBodySource final : public BodySource {
 public:
  // `expect_continue`: the client sent `Expect: 100-continue` and holds its body back
  // until invited (invite(), or the first read), so a request refused for its signature is
  // answered without the client sending a byte of its body, as S3 does.
  BeastBodySource(Stream& stream, beast::flat_buffer& buffer,
                  http::request_parser<http::buffer_body>& parser, std::chrono::seconds timeout,
                  bool expect_continue)
      : stream_(stream), buffer_(buffer), parser_(parser), timeout_(timeout),
        continue_pending_(expect_continue) {
    if (!parser_.chunked() && parser_.content_length()) remaining_ = *parser_.content_length();
  }

  Task<void> invite() override {
    // An empty body too: the client waits for a 100 or a final answer either way.
    if (!continue_pending_) co_return;
    continue_pending_ = false;
    http::response<http::empty_body> cont{http::status::continue_, 11};
    tcpLayer(stream_).expires_after(timeout_);
    beast::error_code ec;
    co_await http::async_write(stream_, cont, kRedirect(ec));
    if (ec) failed_ = true;
  }

  void setDeadline(std::chrono::steady_clock::time_point deadline) override {
    deadline_ = deadline;
  }

  Task<S3Result<size_t>> read(std::span<uint8_t> out) override {
    if (done() || out.empty()) co_return 0;
    if (continue_pending_) co_await invite();
    if (failed_) {
      co_return s3fail(S3ErrorCode::kIncompleteBody, "The request body terminated unexpectedly");
    }
    beast::error_code ec;
    // Each socket read waits for progress at most `timeout_`, and none past the deadline
    // (then `ec` is a timeout).
    auto arm = [&] {
      std::chrono::steady_clock::duration wait = timeout_;
      if (deadline_) {
        const auto left = *deadline_ - std::chrono::steady_clock::now();
        if (left <= std::chrono::steady_clock::duration::zero()) {
          ec = beast::error::timeout;
          return false;
        }
        wait = std::min(wait, left);
      }
      tcpLayer(stream_).expires_after(wait);
      return true;
    };
    size_t n = 0;
    if (remaining_) {
      out = out.first(std::min<uint64_t>(out.size(), *remaining_));
      if (buffer_.size() > 0) {
        n = std::min(buffer_.size(), out.size());
        std::memcpy(out.data(), buffer_.data().data(), n);
        buffer_.consume(n);
      } else if (arm()) {
        n = co_await stream_.async_read_some(asio::buffer(out.data(), out.size()),
                                             kRedirect(ec));
      }
      *remaining_ -= n;
    } else {
      auto& body = parser_.get().body();
      body.data = out.data();
      body.size = out.size();
      // What has come, not a full buffer: a slow but steady chunked stream makes progress
      // under the no-progress timeout, as a Content-Length body does. A read may bring a
      // chunk header and no data: then read on.
      while (body.size == out.size() && !parser_.is_done() && arm()) {
        co_await http::async_read_some(stream_, buffer_, parser_, kRedirect(ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) break;
      }
      n = out.size() - body.size;
    }
    if (ec) {
      failed_ = true;
      if (ec == beast::error::timeout) {
        co_return s3fail(S3ErrorCode::kRequestTimeout,
                         "Your socket connection to the server was not read from or written "
                         "to within the timeout period.");
      }
      if (ec == http::error::buffer_overflow) {
        co_return s3fail(S3ErrorCode::kInvalidRequest,
                         "A chunk-size line or the trailer section of the chunked request "
                         "body is too long.");
      }
      co_return s3fail(S3ErrorCode::kIncompleteBody,
                       "The request body terminated unexpectedly");
    }
    bytes_ += n;
    co_return n;
  }

  bool done() const override { return remaining_ ? *remaining_ == 0 : parser_.is_done(); }
  bool failed() const { return failed_; }
  // The client asked for a 100 Continue that was never sent: its body may never come, and
  // botocore keeps the final answer's status for every later Expect request on the
  // connection (it would read the next status line as a header), so the connection closes.
  bool uninvited() const { return continue_pending_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Stream& stream_;
  beast::flat_buffer& buffer_;
  http::request_parser<http::buffer_body>& parser_;
  std::chrono::seconds timeout_;
  bool continue_pending_;
  std::optional<uint64_t> remaining_;  // body bytes not read yet, when read directly
  bool failed_ = false;
  uint64_t bytes_ = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

// The one way response headers are set from a HeaderList. Values can carry stored text
// (record types, CORS settings, object keys in x-granary-record-container) and request
// parameters (response-*), each checked where it comes in; this is the last line: a
// control character (CR or LF would split the response) is percent-encoded, and a value
// too long for one header line (Beast throws past 64 KiB, ending the connection without
// an answer) is left out.
void setHeaders(http::fields& f, const HeaderList& headers) {
  constexpr size_t kMaxValue = 16 * 1024;
  for (const auto& [name, value] : headers) {
    if (!headerToken(name)) {  // a stored metadata name: checked on the way in
      log::warn("response header left out: its name is not an HTTP token");
      continue;
    }
    const bool control = !headerValueText(value);
    std::string encoded;
    if (control) {  // '%' too: "%0A" must not read as a key's LF when it was "%0A"
      for (char c : value) {
        if (!headerValueChar(c) || c == '%') {
          encoded += fmt::format("%{:02X}", static_cast<unsigned char>(c));
        } else {
          encoded += c;
        }
      }
    }
    const std::string& v = control ? encoded : value;
    if (v.size() > kMaxValue) {
      log::warn("response header {} left out: {} bytes", name, v.size());
      continue;
    }
    f.set(name, v);
  }
}

// Connection: an HTTP/1.1 connection is kept unless it says close; an HTTP/1.0 one closes
// unless it says keep-alive (RFC 9112 9.3).
template <class Message>
void keepAlive(Message& m, const S3Request& req, bool keep) {
  m.keep_alive(keep);
  if (keep && req.http10) m.set(http::field::connection, "keep-alive");
}

void commonHeaders(http::fields& f, const S3Request& req, const Clock& clock) {
  f.set(http::field::server, "Granary");
  f.set("x-amz-request-id", req.request_id);
  f.set("x-amz-id-2", hostId());
  f.set(http::field::date, httpDate(clock.nowUnixNanos()));
  setHeaders(f, req.response_headers);
}

// A completion condition for asio::async_write that offers the socket everything left in
// each call. asio's own (transfer_all and the like) offer 64 KiB a call, and each call's
// completion is posted through the event loop, where it waits its turn behind other
// connections' work: a 4 MiB body took 64 turns. Beside connections that send a whole
// page-cache range per turn with sendfile, such bodies fell behind by 100 ms and more
// (docs/benchmarks.md, "Body writes in one call").
inline size_t allAtOnce(const beast::error_code& ec, size_t /*transferred*/) {
  return ec ? 0 : std::numeric_limits<size_t>::max();
}

template <class Stream>
class BeastBodySink final : public BodySink {
 public:
  BeastBodySink(Stream& stream, const S3Request& req, const Clock& clock,
                std::chrono::seconds timeout, bool keep_alive)
      : stream_(stream), req_(req), clock_(clock), timeout_(timeout), keep_alive_(keep_alive) {}

  Task<Status> writeHead(const S3Response& head, uint64_t content_length) override {
    http::response<http::empty_body> res{static_cast<http::status>(head.status), 11};
    commonHeaders(res, req_, clock_);
    setHeaders(res, head.headers);
    chunked_ = content_length == kUnknownLength && !req_.http10;
    // An HTTP/1.0 client must not get Transfer-Encoding (RFC 9112 6.1): a body of unknown
    // length goes to it as it is, ended by closing the connection.
    closes_ = content_length == kUnknownLength && req_.http10;
    if (closes_) {
      // Until the body is all sent, a close is a reset: a write that times out is closed
      // by Beast, and in order that would look like the body's end. serveRequests makes
      // the close orderly again once the body is whole.
      beast::error_code ec;
      tcpLayer(stream_).socket().set_option(asio::socket_base::linger(true, 0), ec);
    }
    if (chunked_) {
      res.chunked(true);
    } else if (!closes_) {
      res.content_length(content_length);
    }
    keepAlive(res, req_, keep_alive_ && !closes_);
    // Serialised now, sent with the first body bytes (or by flush()).
    http::response_serializer<http::empty_body> sr{res};
    sr.split(true);
    beast::error_code ec;
    head_.clear();
    while (!ec && !sr.is_header_done()) {
      sr.next(ec, [&](beast::error_code&, const auto& buffers) {
        for (auto b : beast::buffers_range_ref(buffers)) {
          head_.append(static_cast<const char*>(b.data()), b.size());
        }
        sr.consume(beast::buffer_bytes(buffers));
      });
    }
    if (ec) co_return Status::internal("serialising the response head: " + ec.message());
    head_written_ = true;
    co_return Status::ok();
  }

  // Whether a head was written (held back or sent) and not withdrawn.
  bool headWritten() const { return head_written_; }

  // A body write may be a whole stripe slice (MiBs): it goes in pieces, each with the
  // timeout, which is for a client making no progress: one reading slowly but steadily
  // (under ~35 KB/s, 4 MiB in 120 s) is not cut off.
  Task<Status> write(std::span<const uint8_t> data) override {
    constexpr size_t kPiece = 256 << 10;
    while (!data.empty()) {
      const auto piece = data.first(std::min(data.size(), kPiece));
      if (Status st = co_await writePiece(piece); !st.isOk()) co_return st;
      data = data.subspan(piece.size());
    }
    co_return Status::ok();  // nothing for an empty one: an empty chunk would end the body
  }

  // One piece of write()'s, not empty.
  Task<Status> writePiece(std::span<const uint8_t> data) {
    beast::error_code ec;
    if (chunked_) {
      tcpLayer(stream_).expires_after(timeout_);
      // A named chunk: g++ 12 may destroy temporaries of a co_await expression twice.
      auto chunk = http::make_chunk(asio::buffer(data.data(), data.size()));
      // The held head (empty after the first write) goes out with the first chunk.
      auto buffers = beast::buffers_cat(asio::buffer(head_), chunk);
      co_await asio::async_write(stream_, buffers, allAtOnce, kRedirect(ec));
      head_.clear();
    } else {
      tcpLayer(stream_).expires_after(timeout_);
      std::array<asio::const_buffer, 2> buffers{asio::buffer(head_),
                                                asio::buffer(data.data(), data.size())};
      co_await asio::async_write(stream_, buffers, allAtOnce, kRedirect(ec));
      head_.clear();
    }
    if (ec) co_return Status::ioError("write body: " + ec.message());
    bytes_ += data.size();
    co_return Status::ok();
  }

  bool sendsFiles() const override {
    return std::is_same_v<Stream, beast::tcp_stream> && !chunked_;
  }

  Task<Status> sendFile(int fd, uint64_t offset, uint64_t length) override {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      if (!chunked_) co_return co_await sendFileTcp(fd, offset, length);
    }
    co_return co_await BodySink::sendFile(fd, offset, length);
  }

  Task<Status> finish() override {
    if (Status st = co_await flush(); !st.isOk()) co_return st;
    if (!chunked_) co_return Status::ok();
    tcpLayer(stream_).expires_after(timeout_);
    beast::error_code ec;
    auto last = http::make_chunk_last();
    co_await asio::async_write(stream_, last, kRedirect(ec));
    if (ec) co_return Status::ioError("write body: " + ec.message());
    co_return Status::ok();
  }

  Task<Status> flush() override {
    if (head_.empty()) co_return Status::ok();
    tcpLayer(stream_).expires_after(timeout_);
    beast::error_code ec;
    co_await asio::async_write(stream_, asio::buffer(head_), kRedirect(ec));
    head_.clear();
    if (ec) co_return Status::ioError("write header: " + ec.message());
    co_return Status::ok();
  }

  bool withdrawHead() override {
    // head_ is emptied by every attempt to send it, sent or not.
    if (head_.empty() || bytes_ > 0) return false;
    head_.clear();
    head_written_ = false;
    chunked_ = false;
    if (closes_) {  // the answer that replaces it ends as any other
      beast::error_code ec;
      tcpLayer(stream_).socket().set_option(asio::socket_base::linger(false, 0), ec);
    }
    closes_ = false;
    return true;
  }

  uint64_t bytes() const { return bytes_; }
  // The head sent says the body ends when the connection closes.
  bool closes() const { return closes_; }

 private:
  // sendFile() on a plain-TCP stream.
  Task<Status> sendFileTcp(int fd, uint64_t offset, uint64_t length) {
    tcp::socket& socket = stream_.socket();
    beast::error_code ec;
    if (!socket.native_non_blocking()) socket.native_non_blocking(true, ec);
    if (ec) co_return Status::ioError("write body: " + ec.message());
    // A held head goes first, corked (MSG_MORE) to leave with the body's first bytes.
    if (!head_.empty()) {
      const ssize_t n = ::send(socket.native_handle(), head_.data(), head_.size(),
                               MSG_MORE | MSG_NOSIGNAL);
      if (n > 0) head_.erase(0, static_cast<size_t>(n));
      if (Status st = co_await flush(); !st.isOk()) co_return st;  // what is left of it
    }
    // No byte sent for `timeout_` ends the range, as for write(): one timer, armed at the
    // first full buffer and moved on by each byte sent since, cancels the wait in
    // progress at the deadline. Its handler may run after a wait ended (both ready in one
    // poll), even after this response or after bytes moved the deadline on: it leaves the
    // socket alone unless a wait is in progress and the deadline (as it is now) passed.
    struct Waiting {
      bool now = false;
      std::chrono::steady_clock::time_point deadline;
    };
    auto waiting = std::make_shared<Waiting>();
    waiting->deadline = std::chrono::steady_clock::now() + timeout_;
    auto& deadline = waiting->deadline;
    auto armed = deadline;
    std::optional<asio::steady_timer> timer;
    auto at = static_cast<off_t>(offset);
    const auto end = static_cast<off_t>(offset + length);
    while (at < end) {
      // SIGPIPE cannot be turned off per call here as MSG_NOSIGNAL does for send():
      // run() ignores it.
      const ssize_t n =
          ::sendfile(socket.native_handle(), fd, &at, static_cast<size_t>(end - at));
      if (n > 0) {
        bytes_ += static_cast<uint64_t>(n);
        deadline = std::chrono::steady_clock::now() + timeout_;
        continue;  // `at` moved on
      }
      if (n == 0) co_return Status::ioError("write body: the file ended early");
      if (errno == EINTR) continue;
      if (errno != EAGAIN) co_return Status::fromErrno(errno, "write body (sendfile)");
      // The socket's buffer is full: wait until it drains.
      if (!timer || armed != deadline) {
        if (!timer) timer.emplace(socket.get_executor());
        timer->expires_at(deadline);
        armed = deadline;
        timer->async_wait([&socket, waiting](beast::error_code timer_ec) {
          if (!timer_ec && waiting->now &&
              std::chrono::steady_clock::now() >= waiting->deadline) {
            socket.cancel();
          }
        });
      }
      if (std::chrono::steady_clock::now() >= deadline) ec = asio::error::operation_aborted;
      if (!ec) {
        waiting->now = true;
        co_await socket.async_wait(tcp::socket::wait_write, kRedirect(ec));
        waiting->now = false;
      }
      if (ec == asio::error::operation_aborted) {
        co_return Status::timeout("write body: the client stopped reading");
      }
      if (ec) co_return Status::ioError("write body: " + ec.message());
    }
    co_return Status::ok();
  }

  Stream& stream_;
  const S3Request& req_;
  const Clock& clock_;
  std::chrono::seconds timeout_;
  bool keep_alive_;
  bool chunked_ = false;
  bool closes_ = false;
  std::string head_;  // a serialised head not sent yet
  bool head_written_ = false;
  uint64_t bytes_ = 0;
};

// The access log: one JSON object per line. The event loops only queue their lines; a
// thread of its own writes them out, a batch at a time, so that a slow disk or a stalled
// reader (a FIFO never read) never holds up a request. While kMaxPending bytes wait (beyond the
// batch being written), further lines are dropped and counted (a warning in the server
// log says how many, once the writer gets on). On exit, what is queued is written
// before the file closes. With --access-log -, the server's own log shares the stream:
// a stalled reader holds up whatever logs a line, as it would without an access log.
class AccessLog {
 public:
  explicit AccessLog(const std::string& path) {
    if (path.empty()) return;
    if (path == "-") {
      file_ = stderr;
    } else {
      file_ = std::fopen(path.c_str(), "a");
      owned_ = file_ != nullptr;
      if (!file_) {
        opened_ = Status::fromErrno(errno, "opening the access log " + path);
        return;
      }
    }
    writer_ = std::thread([this] { writeLoop(); });
  }
  ~AccessLog() {
    if (writer_.joinable()) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      cv_.notify_one();
      writer_.join();
    }
    if (owned_) std::fclose(file_);
  }
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Why the log asked for could not be opened: the server does not start without it.
  const Status& opened() const { return opened_; }

  void write(const S3Request& req, std::string_view op, int status, uint64_t bytes_in,
             uint64_t bytes_out, double seconds, int64_t unix_nanos) {
    if (!file_) return;
    nlohmann::json j = {{"time", isoTimestamp(unix_nanos)},
                        {"request_id", req.request_id},
                        {"user", req.principal},
                        {"op", op},
                        {"method", req.method},
                        {"bucket", req.bucket},
                        {"key", req.key},
                        {"status", status},
                        {"bytes_in", bytes_in},
                        {"bytes_out", bytes_out},
                        {"latency_ms", seconds * 1000.0}};
    // Keys are client input: replace invalid UTF-8 rather than throw.
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    {
      std::lock_guard lock(mu_);
      if (pending_bytes_ + line.size() > kMaxPending) {
        ++dropped_;
        return;
      }
      pending_bytes_ += line.size();
      pending_.push_back(std::move(line));
    }
    cv_.notify_one();
  }

 private:
  static constexpr size_t kMaxPending = 64 << 20;

  void writeLoop() {
    std::vector<std::string> batch;
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty() || dropped_ > 0; });
      batch.swap(pending_);
      pending_bytes_ = 0;
      const uint64_t dropped = std::exchange(dropped_, 0);
      const bool stopping = stop_;
      lock.unlock();
      for (const std::string& line : batch) std::fwrite(line.data(), 1, line.size(), file_);
      std::fflush(file_);
      batch.clear();
      if (dropped > 0) {
        log::warn("access log: {} lines dropped, the log could not keep up", dropped);
      }
      lock.lock();
      if (stopping && pending_.empty()) return;
    }
  }

  std::FILE* file_ = nullptr;
  bool owned_ = false;
  Status opened_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> pending_;  // guarded by mu_
  size_t pending_bytes_ = 0;          // guarded by mu_
  uint64_t dropped_ = 0;              // guarded by mu_
  bool stop_ = false;                 // guarded by mu_
  std::thread writer_;                // last: started once the rest is set up
};

template <class Stream>
Task<bool> writeResponse(Stream& stream, const S3Request& req, S3Response& r,
                         const Clock& clock, bool keep_alive, std::chrono::seconds timeout) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  commonHeaders(res, req, clock);
  setHeaders(res, r.headers);
  if (req.method == "HEAD") {
    // HEAD: headers as for GET, no body; a 304 has no Content-Length (RFC 9110 8.6: it
    // would have to be the object's size).
    if (r.status != 304) res.content_length(r.body.size());
  } else {
    res.body() = std::move(r.body);
    res.prepare_payload();
  }
  keepAlive(res, req, keep_alive);
  tcpLayer(stream).expires_after(timeout);
  beast::error_code ec;
  if (req.method == "HEAD") {
    http::response_serializer<http::string_body> sr{res};
    co_await http::async_write_header(stream, sr, kRedirect(ec));
  } else {
    co_await http::async_write(stream, res, kRedirect(ec));
  }
  co_return !ec;
}

// 16 hex digits: x-amz-request-id and the error body's RequestId.
std::string newRequestId(Random& random) {
  uint8_t id[8];
  random.fill(id);
  return toHex(id);
}

S3Request makeRequest(const http::request<http::empty_body>& h, Random& random) {
  S3Request req;
  req.method = std::string(h.method_string());
  req.target = std::string(h.target());
  for (const auto& f : h) {
    req.headers.emplace_back(
        asciiLower(std::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value()));
  }
  req.request_id = newRequestId(random);
  req.http10 = h.version() < 11;
  return req;
}

// Reads and discards what is left of a request body, up to `limit` bytes, and no more
// reads once `time` has passed (a client trickling the rest must not hold the connection;
// one that stalls meets the reads' I/O timeout); true if the body ended (so the connection
// can be kept). When it did not, the answer goes out with Connection: close.
template <class Stream>
Task<bool> drain(BeastBodySource<Stream>& body, size_t limit, std::chrono::seconds time) {
  const auto deadline = std::chrono::steady_clock::now() + time;
  std::vector<uint8_t> scratch(64 * 1024);
  size_t total = 0;
  while (!body.done() && total < limit && std::chrono::steady_clock::now() < deadline) {
    auto n = co_await body.read(scratch);
    if (!n || *n == 0) co_return body.done();
    total += *n;
  }
  co_return body.done();
}

// Closes a connection whose client may still be sending a request it will read our answer
// after (most clients do not read while they send): closing with unread bytes would send
// a reset, which can destroy the answer before the client reads it. So, as web servers'
// lingering close does: stop sending, then read and drop until the client closes, for
// `limit` at most.
Task<void> lingeringClose(beast::tcp_stream& stream, std::chrono::milliseconds limit) {
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::vector<char> scratch(64 * 1024);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ec) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= decltype(left)::zero()) break;
    stream.expires_after(
        std::min<std::chrono::steady_clock::duration>(left, std::chrono::seconds(2)));
    co_await stream.async_read_some(asio::buffer(scratch), kRedirect(ec));
  }
  stream.socket().close(ec);
}

// Answers a connection over the cap with 503 SlowDown, then closes it gently: the
// request is read and dropped (up to a second), so the client gets the answer, not a
// reset.
Task<void> refuseConnection(tcp::socket socket, std::string request_id, const Clock& clock) {
  const std::string body = errorXml(
      {S3ErrorCode::kSlowDown, "Too many connections; reduce your request rate."}, "/",
      request_id);
  const std::string response = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nServer: Granary\r\nDate: {}\r\n"
      "Content-Type: application/xml\r\nRetry-After: 1\r\nx-amz-request-id: {}\r\n"
      "x-amz-id-2: {}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
      httpDate(clock.nowUnixNanos()), request_id, hostId(), body.size(), body);
  beast::tcp_stream stream(std::move(socket));
  beast::error_code ec;
  stream.expires_after(std::chrono::seconds(1));
  co_await asio::async_write(stream, asio::buffer(response), kRedirect(ec));
  if (!ec) co_await lingeringClose(stream, std::chrono::seconds(1));
  stream.socket().close(ec);  // lingeringClose closed it too, unless the write failed
}

// Serves HTTP/1.1 requests on one connection until it closes, fails or times out. True if
// it ended answering a request whose body the client may still be sending (an upload
// refused before its body was read).
template <class Stream>
Task<bool> serveRequests(Stream& stream, GatewayContext& ctx, AccessLog& access_log) {
  // Bounded: Beast 1.74 applies no limit of its own to a chunked body's chunk-size lines
  // (their extensions) or its trailer section, which it keeps reading into this buffer
  // until their end arrives; at the bound the read fails (buffer_overflow).
  beast::flat_buffer buffer(std::max<size_t>(256 * 1024, ctx.options.max_header_bytes + 65536));
  buffer.reserve(128 * 1024);  // large reads: a small buffer means 512-byte recv calls
  const auto idle = std::chrono::seconds(ctx.options.idle_timeout_seconds);
  const auto io = std::chrono::seconds(ctx.options.io_timeout_seconds);
  const Clock& clock = ctx.deps.clock;
  // Request ids must be unique, not secret: one CSPRNG draw per connection seeds them
  // (RAND_bytes per request cost 3% of a small GET).
  SeededRandom request_ids(ctx.deps.random.next64());
  // Where the connection comes from (bucket policies' aws:SourceIp: the TCP peer, not an
  // X-Forwarded-For header): an IPv4 client of a dual-stack socket as its IPv4 address, an
  // IPv6 one without its scope (fe80::1%eth0 is fe80::1).
  std::string source_ip;
  {
    beast::error_code peer_ec;
    auto peer = tcpLayer(stream).socket().remote_endpoint(peer_ec).address();
    if (peer.is_v6() && peer.to_v6().is_v4_mapped()) {
      peer = asio::ip::make_address_v4(asio::ip::v4_mapped, peer.to_v6());
    } else if (peer.is_v6()) {
      auto v6 = peer.to_v6();
      v6.scope_id(0);
      peer = v6;
    }
    if (!peer_ec) source_ip = peer.to_string();
  }
  constexpr bool kSecure = !std::is_same_v<Stream, beast::tcp_stream>;
  // One request's metrics and access-log line, however it ended.
  const auto account = [&](const S3Request& r, std::string_view op, int status,
                           uint64_t bytes_in, uint64_t bytes_out,
                           std::chrono::steady_clock::time_point started) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    ctx.metrics.observe(op, status, seconds);
    access_log.write(r, op, status, bytes_in, bytes_out, seconds, clock.nowUnixNanos());
  };

  for (;;) {
    http::request_parser<http::empty_body> head_parser;
    head_parser.header_limit(static_cast<uint32_t>(ctx.options.max_header_bytes));
    head_parser.body_limit(std::numeric_limits<uint64_t>::max());
    tcpLayer(stream).expires_after(idle);
    beast::error_code ec;
    co_await http::async_read_header(stream, buffer, head_parser, kRedirect(ec));
    // A Transfer-Encoding that does not end in chunked gives the body no length: Beast
    // would read none, and the body's bytes would be parsed as the next request (request
    // smuggling behind a proxy). RFC 9112 6.3: 400, and close.
    if (!ec && head_parser.get().count(http::field::transfer_encoding) > 0 &&
        !head_parser.chunked()) {
      ec = http::error::bad_transfer_encoding;
    }
    if (ec) {
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == asio::error::connection_reset || ec == asio::error::eof ||
          ec == ssl::error::stream_truncated) {  // a TLS client gone without close_notify
        break;
      }
      // Malformed or oversized request head: answer once, then close, gently: the rest of
      // the head (and a body) may still be on its way, and closing with unread bytes
      // would send a reset that can destroy the answer.
      const auto started = std::chrono::steady_clock::now();
      S3Request bad;
      bad.method = "GET";
      bad.request_id = newRequestId(request_ids);
      S3Error err = ec == http::error::header_limit
                        ? S3Error{S3ErrorCode::kRequestHeaderSectionTooLarge,
                                  "Your request header section exceeds the maximum allowed "
                                  "size."}
                        : S3Error{S3ErrorCode::kInvalidRequest,
                                  "Malformed HTTP request: " + ec.message()};
      S3Response res = errorResponse(err, bad);
      const uint64_t body_bytes = res.body.size();
      const bool written = co_await writeResponse(stream, bad, res, clock, false, io);
      account(bad, "BadRequest", res.status, 0, body_bytes, started);
      co_return written;
    }
    auto started = std::chrono::steady_clock::now();
    S3Request req = makeRequest(head_parser.get(), request_ids);
    req.source_ip = source_ip;
    req.secure = kSecure;
    if (head_parser.content_length()) req.content_length = *head_parser.content_length();
    bool keep_alive = head_parser.get().keep_alive() && !ctx.draining.load();
    const auto expect = req.header("expect");
    const bool expect_continue = expect && !req.http10 &&
                                 beast::iequals(beast::string_view(expect->data(), expect->size()),
                                                "100-continue");

    http::request_parser<http::buffer_body> parser{std::move(head_parser)};
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    BeastBodySource<Stream> body(stream, buffer, parser, io, expect_continue);
    BeastBodySink<Stream> sink(stream, req, clock, io, keep_alive);
    std::string op;
    // In flight until its answer is written (or the connection ends): the in-flight
    // gauge, and the count stop() waits for.
    struct InFlight {
      GatewayContext& ctx;
      explicit InFlight(GatewayContext& c) : ctx(c) {
        ctx.metrics.requestStarted();
        ctx.requests.fetch_add(1);
      }
      ~InFlight() {
        ctx.requests.fetch_sub(1);
        ctx.metrics.requestFinished();
      }
    } in_flight{ctx};
    S3Response res;
    std::string failure;  // what a handler threw (std::bad_alloc, a library's error)
    try {
      res = co_await handleRequest(ctx, req, body, sink, op);
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "an exception of unknown type";
    }
    if (!failure.empty()) {
      // Answered and counted as the 500 it is, in the metrics and the access log, unless
      // a head is out already: then the connection is reset, the client seeing a cut
      // transfer, never a second answer inside the first. (Work offloaded to the pool
      // throws here too: offload() rethrows it in the handler.)
      log::error("{} {} ({}) failed: {}", req.method, req.target, req.request_id, failure);
      res = errorResponse({S3ErrorCode::kInternalError,
                           "We encountered an internal error. Please try again."},
                          req);
      res.close = true;
      if (sink.headWritten() && !sink.withdrawHead()) {
        account(req, op, res.status, body.bytes(), sink.bytes(), started);
        beast::error_code ec;
        tcpLayer(stream).socket().set_option(asio::socket_base::linger(true, 0), ec);
        tcpLayer(stream).socket().close(ec);
        co_return false;
      }
    }

    // A body never invited may or may not come (a client may send it after waiting a
    // while): the connection cannot tell what follows, so it closes. One invited and not
    // read is drained (up to 1 MiB, 5 s) to keep the connection.
    bool reuse = keep_alive && !res.close && !body.failed() && !body.uninvited() &&
                 !ctx.draining.load();
    if (reuse && !body.done()) reuse = co_await drain(body, 1 << 20, std::chrono::seconds(5));
    bool written = true;
    // writeResponse moves the body out; HEAD sends none.
    const uint64_t body_bytes = req.method == "HEAD" ? 0 : res.body.size();
    if (!res.streamed) {
      written = co_await writeResponse(stream, req, res, clock, reuse, io);
    } else {
      Status flushed = co_await sink.flush();
      written = flushed.isOk();
      if (sink.closes()) {
        reuse = false;
        if (written && !res.close) {  // the body is whole: its end is an orderly close
          beast::error_code ec;
          tcpLayer(stream).socket().set_option(asio::socket_base::linger(false, 0), ec);
        }
      }
    }
    account(req, op, res.status, body.bytes(), res.streamed ? sink.bytes() : body_bytes,
            started);
    if (res.streamed && sink.closes() && res.close) {
      // A body ended by the close, cut short: a reset, not the orderly close that would
      // tell the client it has it all. (A write that timed out was closed by Beast
      // already, with the linger writeHead set: a reset too.)
      beast::error_code ec;
      tcpLayer(stream).socket().set_option(asio::socket_base::linger(true, 0), ec);
      tcpLayer(stream).socket().close(ec);
      co_return false;
    }
    if (!written) break;
    if (!reuse) co_return !body.done() && !body.failed();
  }
  co_return false;
}

Task<void> session(tcp::socket socket, ConnectionSlots::Slot slot, GatewayContext& ctx,
                   AccessLog& access_log, ssl::context* tls) {
  ctx.metrics.connectionOpened();
  struct Closed {
    GatewayContext& ctx;
    ConnectionSlots::Slot slot;  // given back when the session ends
    ~Closed() { ctx.metrics.connectionClosed(); }
  } closed{ctx, std::move(slot)};
  beast::error_code ec;
  if (tls == nullptr) {
    beast::tcp_stream stream(std::move(socket));
    if (co_await serveRequests(stream, ctx, access_log)) {
      co_await lingeringClose(stream, std::chrono::seconds(10));
      co_return;
    }
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    co_return;
  }
  // asio's stream, not beast::ssl_stream: Beast 1.74's flat_stream wrapper loses the tail
  // of multi-buffer writes (a response head plus a large body).
  ssl::stream<beast::tcp_stream> stream(beast::tcp_stream(std::move(socket)), *tls);
  // A client that never finishes its handshake is an idle connection.
  tcpLayer(stream).expires_after(std::chrono::seconds(ctx.options.idle_timeout_seconds));
  co_await stream.async_handshake(ssl::stream_base::server, kRedirect(ec));
  if (ec) co_return;
  // A TLS connection closes at once even with a body unread: reading on would mean
  // decrypting it.
  (void)co_await serveRequests(stream, ctx, access_log);
  tcpLayer(stream).expires_after(std::chrono::seconds(5));
  co_await stream.async_shutdown(kRedirect(ec));
}

class BeastGatewayServer final : public GatewayServer {
 public:
  BeastGatewayServer(const GatewayOptions& options, GatewayDeps deps,
                     std::unique_ptr<ec::ErasureCode> code)
      : code_(std::move(code)), ctx_(options, deps, *code_), access_log_(options.access_log) {
    ctx_.credentials.setRoot(deps.root.access_key, deps.root.secret_key);
    ctx_.repairer.start();
  }
  ~BeastGatewayServer() override {
    // Streams waiting for buffer budget sit in no event loop's queue: destroy them while
    // the loops their sockets belong to still exist.
    ctx_.data.budget().dropWaiters();
    ctx_.repairer.stop();
    // A fragment write still running (moved to another drive after the drain) and an
    // index commit still running post their answers to a loop: let them find one.
    ctx_.data.fragmentPuts().waitNone();
    ctx_.commits.waitNone();
  }

  Status bind() {
    size_t loops = ctx_.options.event_loops;
    if (loops == 0) loops = usableCores();
    beast::error_code ec;
    auto address = asio::ip::make_address(ctx_.options.listen_host, ec);
    if (ec) return Status::invalidArgument("bad listen address: " + ctx_.options.listen_host);
    uint16_t port = ctx_.options.listen_port;
    auto cannotListen = [&] {
      return Status::ioError("cannot listen on " + ctx_.options.listen_host + ":" +
                             std::to_string(port) + ": " + ec.message());
    };
    if (port != 0) {
      // SO_REUSEPORT lets any process of this user join the loops' acceptors on the port,
      // so a second `granary serve` on the same address would start and take a share of
      // the connections to its own data. A socket without it cannot bind where anyone
      // listens: bind one first, so that a taken port is an error. (A process that binds
      // the port in the instant between this check and the acceptors still slips by.)
      asio::io_context probe_context(1);
      tcp::acceptor probe(probe_context);
      tcp::endpoint ep(address, port);
      probe.open(ep.protocol(), ec);
      if (!ec) probe.set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) probe.bind(ep, ec);
      if (ec) return cannotListen();
    }
    for (size_t i = 0; i < loops; ++i) {
      auto& ioc = *contexts_.emplace_back(std::make_unique<asio::io_context>(1));
      auto& acc = acceptors_.emplace_back(ioc);
      tcp::endpoint ep(address, port);
      acc.open(ep.protocol(), ec);
      if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) {
        using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
        acc.set_option(reuse_port(true), ec);
      }
      if (!ec) acc.bind(ep, ec);
      if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
      if (ec) return cannotListen();
      port = acc.local_endpoint().port();  // the others share the port chosen first
    }
    port_ = port;
    return Status::ok();
  }

  uint16_t port() const override { return port_; }

  // TLS: the certificate chain and key (PEM) of GatewayOptions; nothing when unset.
  Status accessLogOpened() const { return access_log_.opened(); }

  Status loadTls() {
    const auto& o = ctx_.options;
    if (o.tls_cert.empty() && o.tls_key.empty()) return Status::ok();
    if (o.tls_cert.empty() || o.tls_key.empty()) {
      return Status::invalidArgument("TLS needs both a certificate and a key");
    }
    tls_.emplace(ssl::context::tls_server);
    tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                      ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                      ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    beast::error_code ec;
    tls_->use_certificate_chain_file(o.tls_cert, ec);
    if (ec) return Status::invalidArgument("TLS certificate " + o.tls_cert + ": " + ec.message());
    tls_->use_private_key_file(o.tls_key, ssl::context::pem, ec);
    if (ec) return Status::invalidArgument("TLS key " + o.tls_key + ": " + ec.message());
    return Status::ok();
  }

  // The named users, before the first request.
  // The named users, before serving. An index that does not answer yet (cluster mode:
  // the gateway started first) is not fatal: the periodic refresh loads them later, and
  // until then only the root user can sign in.
  Status loadUsers() {
    Status st = reloadUsers(ctx_);
    if (st.code() == Status::Code::kUnavailable || st.code() == Status::Code::kTimeout) {
      log::warn("named users not loaded yet (index: {}); retrying in the background",
                st.toString());
      return Status::ok();
    }
    return st;
  }

  void run() override {
    // A GET's body may go out with sendfile(2), which raises SIGPIPE when the client has
    // gone (there is no MSG_NOSIGNAL for it): the error is enough.
    ::signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < contexts_.size(); ++i) {
      asio::co_spawn(*contexts_[i], acceptLoop(acceptors_[i]), asio::detached);
      asio::co_spawn(*contexts_[i], lagProbeLoop(), asio::detached);
    }
    asio::co_spawn(*contexts_[0], refreshUsersLoop(), asio::detached);
    std::vector<std::thread> threads;
    for (size_t i = 1; i < contexts_.size(); ++i) {
      threads.emplace_back([this, i] { contexts_[i]->run(); });
    }
    contexts_[0]->run();
    for (auto& t : threads) t.join();
  }

  void stop() override {
    // No new connections (connects are refused once the listening sockets close); answers
    // from now on close their connections; the requests being served get the grace to
    // finish. Idle keep-alive connections are cut with the loops, as any server's are.
    ctx_.draining = true;
    for (size_t i = 0; i < contexts_.size(); ++i) {
      asio::post(*contexts_[i], [&acceptor = acceptors_[i]] {
        beast::error_code ec;
        acceptor.close(ec);
      });
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::seconds(std::max(0, ctx_.options.shutdown_grace_seconds));
    while (ctx_.requests.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (ctx_.requests.load() > 0) {
      log::warn("shutdown: {} requests still in progress after {} s are cut",
                ctx_.requests.load(), ctx_.options.shutdown_grace_seconds);
    }
    for (auto& c : contexts_) c->stop();
  }

 private:
  // Every 50 ms, how late this loop runs a timer (granary_event_loop_lag_seconds). A turn
  // that runs long (a large cached send, a slow handler) or a loop thread short of CPU
  // delays every connection on the loop; this shows it, for a few wake-ups a second.
  Task<void> lagProbeLoop() {
    constexpr auto kInterval = std::chrono::milliseconds(50);
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
      const auto due = std::chrono::steady_clock::now() + kInterval;
      timer.expires_at(due);
      beast::error_code ec;
      co_await timer.async_wait(kRedirect(ec));
      if (ec) co_return;
      ctx_.metrics.loopLag(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - due).count());
    }
  }

  Task<void> refreshUsersLoop() {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
      timer.expires_after(std::chrono::seconds(std::max(1, ctx_.options.users_refresh_seconds)));
      beast::error_code ec;
      co_await timer.async_wait(kRedirect(ec));
      if (ec) co_return;
      if (Status st = co_await refreshUsers(ctx_); !st.isOk()) {
        log::warn("reloading users: {}", st.toString());
      }
    }
  }

  Task<void> acceptLoop(tcp::acceptor& acceptor) {
    for (;;) {
      beast::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(kRedirect(ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        log::warn("accept: {}", ec.message());
        // EMFILE/ENFILE leave the connection in the backlog: retrying at once would spin.
        asio::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(100));
        co_await pause.async_wait(kRedirect(ec));
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      const tcp::endpoint peer = socket.remote_endpoint(ec);
      if (ec) continue;  // gone already (reset before it was accepted): the socket closes
      auto [slot, refused] = ctx_.connections.acquire(peer.address());
      if (!slot) {
        ctx_.metrics.connectionRefused(refused == ConnectionSlots::Refused::kAddress);
        // A plain-text 503 would only be a failed TLS handshake. Each answer holds its
        // socket up to 2 s, outside the caps: past kMaxRefusing at once (a host flooding
        // connects), the rest are closed at once, so that refusals cannot use up the
        // process's descriptors.
        if (tls_ || refusing_.load(std::memory_order_relaxed) >= kMaxRefusing) {
          socket.close(ec);
        } else {
          refusing_.fetch_add(1, std::memory_order_relaxed);
          asio::co_spawn(acceptor.get_executor(),
                         refuseConnection(std::move(socket), newRequestId(ctx_.deps.random),
                                          ctx_.deps.clock),
                         [this](std::exception_ptr) {
                           refusing_.fetch_sub(1, std::memory_order_relaxed);
                         });
        }
        continue;
      }
      asio::co_spawn(acceptor.get_executor(),
                     session(std::move(socket), std::move(slot), ctx_, access_log_,
                             tls_ ? &*tls_ : nullptr),
                     [](std::exception_ptr e) {
                       if (!e) return;
                       try {
                         std::rethrow_exception(e);
                       } catch (const std::exception& ex) {
                         log::error("session ended by exception: {}", ex.what());
                       }
                     });
    }
  }

  // Connections over a cap being answered 503 now, at most kMaxRefusing (acceptLoop).
  static constexpr size_t kMaxRefusing = 64;
  std::atomic<size_t> refusing_{0};
  std::unique_ptr<ec::ErasureCode> code_;
  std::optional<ssl::context> tls_;  // set when a certificate is configured
  GatewayContext ctx_;
  AccessLog access_log_;
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<tcp::acceptor> acceptors_;
  uint16_t port_ = 0;
};

}  // namespace

Result<std::unique_ptr<GatewayServer>> GatewayServer::create(const GatewayOptions& options,
                                                             GatewayDeps deps) {
  auto code = ec::ErasureCode::create(deps.map.ec);
  if (!code) return fail(code.error());
  // Stripe buffers are k * fragment_len, and a short stripe's fragments are rounded up to
  // 4 KiB: a fragment length that is not a multiple of it would overrun them.
  if (options.fragment_len == 0 || options.fragment_len % 4096 != 0 ||
      options.fragment_len > (64u << 20)) {
    return fail(Status::invalidArgument(
        fmt::format("fragment length {} is not a multiple of 4 KiB from 4 KiB to 64 MiB",
                    options.fragment_len)));
  }
  auto server = std::make_unique<BeastGatewayServer>(options, deps, std::move(*code));
  Status st = server->accessLogOpened();
  if (st.isOk()) st = server->loadTls();
  if (st.isOk()) st = server->loadUsers();
  if (st.isOk()) st = server->bind();
  if (!st.isOk()) return fail(st);
  return std::unique_ptr<GatewayServer>(std::move(server));
}

}  // namespace granary::gateway

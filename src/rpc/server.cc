// rpc::Server: the transport and authentication of every internal service.
// Beast sessions as C++20 coroutines, one io_context per event-loop thread; one acceptor
// hands connections round-robin to the loops, and a connection stays on its loop.
// Requests are authenticated on the loop from their headers alone (an HMAC of ~200 bytes);
// everything that touches the body (the CRC32C check, the service's handler) runs on the
// WorkerPool as one task per request, so a loop never blocks on a disk.
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp misses it under g++ 12

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "granary/rpc/server.h"
#include "granary/common/strings.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "granary/common/bearer_token.h"
#include "granary/common/clock.h"
#include "granary/common/cpus.h"
#include "granary/common/log.h"
#include "granary/common/worker_pool.h"
#include "granary/ec/erasure_code.h"

namespace granary::rpc {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Reply errorReply(const Status& st) {
  Reply r;
  r.status = httpStatusFor(st.code());
  r.headers = {{std::string(kErrorCodeHeader), std::string(codeName(st.code()))},
               {std::string(kErrorRetryableHeader), st.retryable() ? "true" : "false"},
               {"content-type", "application/json"}};
  r.body = errorBody(st);
  return r;
}

Reply jsonReply(std::string body) {
  Reply r;
  r.headers = {{"content-type", "application/json"}};
  r.body = std::move(body);
  return r;
}

Reply methodNotAllowed(std::string_view method) {
  Reply r = errorReply(
      Status::invalidArgument("method " + std::string(method) + " not allowed here"));
  r.status = 405;
  return r;
}

namespace {

template <typename T>
using Task = asio::awaitable<T>;

constexpr auto kRedirect = [](beast::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable, ec);
};

// How long the body of a refused request is read and dropped after the answer.
constexpr std::chrono::seconds kRefusedDrain{5};
constexpr size_t kSessionBufferBytes = 256 << 10;

// ServerOptions::body_memory_bytes: an allowance of bytes for request bodies, taken in
// arrival order. A waiter is a coroutine parked on its own event loop; release() and the
// waiter's timer resume it there. Thread safe.
class BodyMemory {
 public:
  explicit BodyMemory(uint64_t capacity) : capacity_(capacity) {}

  class Lease {
   public:
    Lease() = default;
    Lease(BodyMemory* owner, uint64_t bytes) : owner_(owner), bytes_(bytes) {}
    Lease(Lease&& o) noexcept
        : owner_(std::exchange(o.owner_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        reset();
        owner_ = std::exchange(o.owner_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
      }
      return *this;
    }
    ~Lease() { reset(); }
    void reset() {
      if (owner_ != nullptr && bytes_ > 0) owner_->release(bytes_);
      owner_ = nullptr;
      bytes_ = 0;
    }

   private:
    BodyMemory* owner_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // A lease of `bytes` (at most the capacity), after waiting in line for up to `wait`; an
  // empty optional if the wait ran out. With no limit, an empty lease at once.
  Task<std::optional<Lease>> acquire(uint64_t bytes, std::chrono::milliseconds wait) {
    if (capacity_ == 0 || bytes == 0) co_return Lease();
    bytes = std::min(bytes, capacity_);
    {
      std::lock_guard lock(mu_);
      if (queue_.empty() && fits(bytes)) {
        take(bytes);
        co_return Lease(this, bytes);
      }
    }
    auto waiter = std::make_shared<Waiter>();
    waiter->bytes = bytes;
    asio::any_io_executor ex = co_await asio::this_coro::executor;
    asio::steady_timer timer(ex);
    // Only raw pointers in the co_await expression (the g++ 12 note in
    // gateway/task_group.h).
    BodyMemory* self = this;
    auto* waiterp = &waiter;
    auto* timerp = &timer;
    auto* exp = &ex;
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [self, waiterp, timerp, exp, wait](auto handler) {
          std::shared_ptr<Waiter> w = *waiterp;
          auto resume = [ex = *exp, h = std::move(handler)]() mutable {
            asio::post(ex, std::move(h));
          };
          std::unique_lock lock(self->mu_);
          if (self->queue_.empty() && self->fits(w->bytes)) {  // room since the first look
            self->take(w->bytes);
            w->granted = true;
            lock.unlock();
            resume();
            return;
          }
          ++self->waits_;
          w->resume = std::move(resume);
          w->queued = true;
          self->queue_.push_back(w);
          lock.unlock();
          // Runs on this coroutine's loop, and acts only if the waiter is still queued.
          timerp->expires_after(wait);
          timerp->async_wait([self, w](const beast::error_code&) { self->giveUp(w); });
        },
        asio::use_awaitable);
    timer.cancel();
    if (!waiter->granted) co_return std::nullopt;
    co_return Lease(this, bytes);
  }

  // Destroys the waiting coroutines without resuming them. For shutdown only, after the
  // loops stopped and before they are destroyed.
  void dropWaiters() {
    std::vector<std::move_only_function<void()>> dropped;
    std::lock_guard lock(mu_);
    for (auto& w : queue_) {
      w->queued = false;
      dropped.push_back(std::move(w->resume));
    }
    queue_.clear();
  }

  BodyMemoryStats stats() const {
    std::lock_guard lock(mu_);
    return {capacity_, used_, peak_, queue_.size(), waits_, refusals_};
  }

 private:
  struct Waiter {
    uint64_t bytes = 0;
    bool queued = false;   // under mu_
    bool granted = false;  // set under mu_ before `resume` is called
    std::move_only_function<void()> resume;
  };
  using Resumes = std::vector<std::move_only_function<void()>>;

  bool fits(uint64_t bytes) const { return used_ + bytes <= capacity_; }
  void take(uint64_t bytes) {
    used_ += bytes;
    peak_ = std::max(peak_, used_);
  }

  // Grants the waiters at the head of the line that now fit; their resumes are called by
  // the caller, after it let go of the lock.
  Resumes grantLocked() {
    Resumes out;
    while (!queue_.empty() && fits(queue_.front()->bytes)) {
      std::shared_ptr<Waiter> w = std::move(queue_.front());
      queue_.pop_front();
      take(w->bytes);
      w->granted = true;
      w->queued = false;
      out.push_back(std::move(w->resume));
    }
    return out;
  }

  void release(uint64_t bytes) {
    Resumes resumes;
    {
      std::lock_guard lock(mu_);
      used_ -= bytes;
      resumes = grantLocked();
    }
    for (auto& r : resumes) r();
  }

  // The waiter's time is up: out of the line (a refusal), and those behind it that fit go.
  void giveUp(const std::shared_ptr<Waiter>& w) {
    Resumes resumes;
    {
      std::lock_guard lock(mu_);
      if (!w->queued) return;
      w->queued = false;
      std::erase(queue_, w);
      ++refusals_;
      resumes.push_back(std::move(w->resume));
      for (auto& r : grantLocked()) resumes.push_back(std::move(r));
    }
    for (auto& r : resumes) r();
  }

  const uint64_t capacity_;
  mutable std::mutex mu_;
  uint64_t used_ = 0, peak_ = 0, waits_ = 0, refusals_ = 0;
  std::deque<std::shared_ptr<Waiter>> queue_;
};

bool isQuietClose(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == beast::error::timeout ||
         ec == asio::error::connection_reset || ec == asio::error::eof ||
         ec == asio::error::operation_aborted;
}

class ServerImpl final : public Server {
 public:
  ServerImpl(const ServerOptions& options, Handler handler, WorkerPool& pool,
             const Clock& clock)
      : options_(options),
        handler_(std::move(handler)),
        pool_(pool),
        clock_(clock),
        idle_(std::max(1, options.idle_timeout_seconds)),
        io_(std::max(1, options.io_timeout_seconds)),
        body_memory_(options.body_memory_bytes) {}

  ~ServerImpl() override {
    stop();
    // Pool tasks hold a handler that will be posted to a loop: wait for them before the
    // loops go away.
    std::unique_lock lock(inflight_mu_);
    inflight_cv_.wait(lock, [this] { return inflight_ == 0; });
    body_memory_.dropWaiters();
  }

  Status bind() {
    size_t loops = options_.event_loops;
    if (loops == 0) loops = usableCores();
    for (size_t i = 0; i < loops; ++i) {
      auto& ioc = *contexts_.emplace_back(std::make_unique<asio::io_context>(1));
      guards_.emplace_back(ioc.get_executor());
    }
    beast::error_code ec;
    auto address = asio::ip::make_address(options_.listen_host, ec);
    if (ec) return Status::invalidArgument("bad listen address: " + options_.listen_host);
    tcp::endpoint ep(address, options_.listen_port);
    acceptor_ = std::make_unique<tcp::acceptor>(*contexts_[0]);
    acceptor_->open(ep.protocol(), ec);
    if (!ec) acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(ep, ec);
    if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Status::ioError("cannot listen on " + options_.listen_host + ":" +
                             std::to_string(options_.listen_port) + ": " + ec.message());
    }
    port_ = acceptor_->local_endpoint().port();
    return Status::ok();
  }

  uint16_t port() const override { return port_; }

  void run() override {
    spawnAcceptLoop();
    std::vector<std::jthread> loops;
    for (auto& ctx : contexts_) loops.emplace_back([&ctx] { ctx->run(); });
  }  // the jthreads join here, once stop() ends every loop

  void stop() override {
    for (auto& c : contexts_) c->stop();
  }

  BodyMemoryStats bodyMemory() const override { return body_memory_.stats(); }

 private:
  // The accept loop ends only when the acceptor closes; one that an exception ended (out
  // of memory, say) is logged and started again, or the server would go on running
  // without taking a connection.
  void spawnAcceptLoop(std::chrono::milliseconds delay = {}) {
    asio::co_spawn(*contexts_[0], acceptLoopAfter(delay), [this](std::exception_ptr e) {
      if (!e) return;
      logException(e, "accept loop");
      spawnAcceptLoop(std::chrono::milliseconds(100));  // not a spin, if it fails again
    });
  }

  Task<void> acceptLoopAfter(std::chrono::milliseconds delay) {
    if (delay.count() > 0) {
      beast::error_code ec;
      asio::steady_timer pause(acceptor_->get_executor(), delay);
      co_await pause.async_wait(kRedirect(ec));
    }
    co_await acceptLoop();
  }

  void logException(std::exception_ptr e, std::string_view what) const {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::error("{} {} ended by exception: {}", options_.name, what, ex.what());
    } catch (...) {
      log::error("{} {} ended by an exception of unknown type", options_.name, what);
    }
  }

  Task<void> acceptLoop() {
    size_t next = 0;
    for (;;) {
      asio::io_context& loop = *contexts_[next++ % contexts_.size()];
      beast::error_code ec;
      tcp::socket socket = co_await acceptor_->async_accept(loop, kRedirect(ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        log::warn("{} accept: {}", options_.name, ec.message());
        // EMFILE/ENFILE leave the connection in the backlog: retrying at once would spin.
        asio::steady_timer pause(acceptor_->get_executor(), std::chrono::milliseconds(100));
        co_await pause.async_wait(kRedirect(ec));
        continue;
      }
      if (connections_.load() >= options_.max_connections) {
        // Over the cap: close at once rather than let memory grow with connections.
        log::warn("{}: {} connections open, refusing another", options_.name,
                  connections_.load());
        socket.close(ec);
        continue;
      }
      ++connections_;
      socket.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(loop, session(std::move(socket)), [this](std::exception_ptr e) {
        if (e) logException(e, "session");
      });
    }
  }

  Task<void> session(tcp::socket socket) {
    // Counted from accept (acceptLoop) to the end of the session.
    struct Slot {
      std::atomic<size_t>& n;
      ~Slot() { --n; }
    } slot{connections_};
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::empty_body> head;
      head.header_limit(static_cast<uint32_t>(options_.max_header_bytes));
      head.body_limit(options_.max_body_bytes);
      stream.expires_after(idle_);
      beast::error_code ec;
      co_await http::async_read_header(stream, buffer, head, kRedirect(ec));
      if (ec) {
        if (isQuietClose(ec)) break;
        // Malformed, oversized head or body: answer once, then close.
        Reply bad = errorReply(Status::invalidArgument("bad request: " + ec.message()));
        co_await writeReply(stream, false, bad, false);
        break;
      }
      Request req;
      req.method = std::string(head.get().method_string());
      req.target = std::string(head.get().target());
      for (const auto& f : head.get()) {
        req.headers.emplace_back(
            asciiLower(std::string_view(f.name_string().data(), f.name_string().size())),
            std::string(f.value()));
      }
      bool keep_alive = head.get().keep_alive();
      bool expect_continue = beast::iequals(head.get()[http::field::expect], "100-continue");
      uint64_t length = head.content_length().value_or(0);
      bool head_request = req.method == "HEAD";
      if (options_.render_metrics && req.method == "GET" &&
          splitTarget(req.target).first == "/_granary/metrics" && length == 0 &&
          !head.chunked()) {  // a chunked body would be read as the next request
        Reply metrics = metricsReply(req);
        if (!co_await writeReply(stream, false, metrics, keep_alive) || !keep_alive) break;
        continue;
      }

      Status auth = head.chunked()
                        ? Status::invalidArgument("chunked request bodies are not supported")
                        : authenticate(req, length);
      if (!auth.isOk()) {
        Reply refused = errorReply(auth);
        if (co_await writeReply(stream, head_request, refused, false) && !expect_continue &&
            length > buffer.size()) {
          co_await dropRefusedBody(stream, length - buffer.size());
        }
        break;
      }
      // Its place in the body memory (ServerOptions::body_memory_bytes), held until the
      // reply is written.
      auto body_lease = co_await body_memory_.acquire(length, options_.body_memory_wait);
      if (!body_lease) {
        Reply busy = errorReply(Status::unavailable(
            options_.name + ": request bodies fill the server's body memory; try again"));
        if (co_await writeReply(stream, head_request, busy, false) && !expect_continue &&
            length > buffer.size()) {
          co_await dropRefusedBody(stream, length - buffer.size());
        }
        break;
      }
      // Memory for fast body reads only once a request proved it knows the secret (a
      // small buffer means 512-byte recv calls).
      if (buffer.capacity() < kSessionBufferBytes) buffer.reserve(kSessionBufferBytes);
      if (expect_continue) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        stream.expires_after(io_);
        co_await http::async_write(stream, cont, kRedirect(ec));
        if (ec) break;
      }
      req.body_storage = AlignedBytes(length);
      req.body = req.body_storage.span();
      bool body_ok = co_await readBody(stream, buffer, head, req.body);
      if (!body_ok) break;  // the client went away or stalled; nobody to answer

      std::move_only_function<void(ReplyDone)> work = [this, &req](ReplyDone done) {
        handle(req, std::move(done));
      };
      Reply reply = co_await runOnPool(work);
      bool written = co_await writeReply(stream, head_request, reply, keep_alive);
      if (!written || !keep_alive) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  // The rest of a refused request's body, read and dropped (the answer sent, the send side
  // shut) for up to kRefusedDrain: closing with it unread would reset the connection,
  // and a client still sending would see a failed exchange (a server gone) instead of the
  // refusal. An unauthenticated peer holds the connection no longer than that.
  Task<void> dropRefusedBody(beast::tcp_stream& stream, uint64_t length) {
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    std::vector<uint8_t> scratch(64 << 10);
    const auto deadline = std::chrono::steady_clock::now() + kRefusedDrain;
    for (uint64_t dropped = 0; dropped < length;) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) break;
      stream.expires_after(left);
      dropped += co_await stream.async_read_some(asio::buffer(scratch), kRedirect(ec));
      if (ec) break;
    }
  }

  // Reads exactly out.size() body bytes (the Content-Length) into `out`. The I/O timeout
  // bounds each read_some, i.e. a stall, not the whole transfer.
  Task<bool> readBody(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                      http::request_parser<http::empty_body>& head, std::span<uint8_t> out) {
    http::request_parser<http::buffer_body> parser{std::move(head)};
    auto& body = parser.get().body();
    body.data = out.data();
    body.size = out.size();
    while (!parser.is_done()) {
      stream.expires_after(io_);
      beast::error_code ec;
      co_await http::async_read_some(stream, buffer, parser, kRedirect(ec));
      if (ec == http::error::need_buffer && body.size > 0) continue;
      if (ec) co_return false;
    }
    co_return true;
  }

  Task<bool> writeReply(beast::tcp_stream& stream, bool head_request, Reply& r,
                        bool keep_alive) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::server, options_.name);
    for (const auto& [name, value] : r.headers) res.set(name, value);
    res.keep_alive(keep_alive);
    beast::error_code ec;
    if (head_request) {
      res.content_length(r.status == 200 ? r.head_length : r.body.size());
      http::response_serializer<http::string_body> sr{res};
      stream.expires_after(io_);
      co_await http::async_write_header(stream, sr, kRedirect(ec));
      co_return !ec;
    }
    res.body() = std::move(r.body);
    res.prepare_payload();
    // The I/O timeout bounds each write_some (a stalled reader), not the whole body.
    http::response_serializer<http::string_body> sr{res};
    while (!ec && !sr.is_done()) {
      stream.expires_after(io_);
      co_await http::async_write_some(stream, sr, kRedirect(ec));
    }
    co_return !ec;
  }

  // Runs `work` on the pool; it answers through the ReplyDone it is given, there or later
  // (a blob read completes on the I/O engine's thread), and the coroutine resumes on its
  // own loop. Only raw pointers are captured in the co_await expression (see the g++ 12
  // note in gateway/task_group.h).
  Task<Reply> runOnPool(std::move_only_function<void(ReplyDone)>& work) {
    Reply reply;
    asio::any_io_executor executor = co_await asio::this_coro::executor;
    ServerImpl* self = this;
    auto* workp = &work;
    auto* out = &reply;
    auto* exp = &executor;
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [self, workp, out, exp](auto handler) {
          {
            std::lock_guard lock(self->inflight_mu_);
            ++self->inflight_;
          }
          // The first answer wins (an exception after the work handed its ReplyDone on must
          // not answer twice).
          auto answer = std::make_shared<std::atomic<bool>>(false);
          auto finish = [self, out, ex = *exp, answer,
                         h = std::make_shared<decltype(handler)>(std::move(handler))](
                            Reply r) mutable {
            if (answer->exchange(true)) return;
            *out = std::move(r);
            asio::post(ex, std::move(*h));
            std::lock_guard lock(self->inflight_mu_);
            if (--self->inflight_ == 0) self->inflight_cv_.notify_all();
          };
          self->pool_.submit([self, workp, finish]() mutable {
            // An exception must neither kill the pool thread (std::terminate) nor leave the
            // session waiting forever: it becomes a 500.
            try {
              (*workp)(finish);
            } catch (const std::exception& e) {
              finish(errorReply(Status::internal(self->options_.name + ": " + e.what())));
            } catch (...) {
              finish(errorReply(Status::internal(self->options_.name +
                                                 ": an exception of unknown type")));
            }
          });
        },
        asio::use_awaitable);
    co_return reply;
  }

  Status authenticate(Request& req, uint64_t content_length) const {
    auto date = findHeader(req.headers, kDateHeader);
    auto sig = findHeader(req.headers, kSignatureHeader);
    auto crc_hex = findHeader(req.headers, kCrcHeader);
    if (!date || !sig || !crc_hex) {
      return Status::permissionDenied("unsigned request: x-granary-date, x-granary-signature "
                                      "and x-granary-content-crc32c are required");
    }
    auto date_seconds = parseU64(*date);
    auto crc = parseCrcHex(*crc_hex);
    if (!date_seconds || *date_seconds > static_cast<uint64_t>(INT64_MAX) || !crc) {
      return Status::permissionDenied("malformed x-granary-date or x-granary-content-crc32c");
    }
    req.declared_crc = *crc;
    auto [path, query] = splitTarget(req.target);
    SigningInput in{req.method, path, query, static_cast<int64_t>(*date_seconds),
                    content_length, *crc, {}};
    for (const auto& [name, value] : req.headers) {
      if (isSignedHeader(name)) in.headers.emplace_back(name, value);
    }
    return verifyRequest(options_.cluster_secret, in, *sig,
                         clock_.nowUnixNanos() / 1'000'000'000);
  }

  Reply metricsReply(const Request& req) {
    if (!bearerTokenAccepted(findHeader(req.headers, "authorization"), options_.metrics_token)) {
      return errorReply(Status::permissionDenied("metrics need Authorization: Bearer <token>"));
    }
    Reply r;
    r.status = 200;
    r.headers.emplace_back("Content-Type", "text/plain; version=0.0.4");
    r.body = options_.render_metrics();
    return r;
  }

  // Runs on the pool: the body's CRC check, then the service's handler.
  void handle(Request& req, ReplyDone done) {
    if (ec::crc32c(req.body) != req.declared_crc) {
      return done(errorReply(Status::invalidArgument(
          "request body does not match its x-granary-content-crc32c")));
    }
    handler_(req, std::move(done));
  }

  ServerOptions options_;
  Handler handler_;
  WorkerPool& pool_;
  const Clock& clock_;
  const std::chrono::seconds idle_;
  const std::chrono::seconds io_;
  // Declared before the loops: a session's slot, destroyed with its coroutine frame when
  // the loops are, counts down in it.
  std::atomic<size_t> connections_{0};  // sessions open now (max_connections)
  BodyMemory body_memory_;  // likewise: sessions' leases give their bytes back into it
  // Declared before the acceptor: the acceptor must close before its loop is destroyed.
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  uint16_t port_ = 0;
  std::mutex inflight_mu_;
  std::condition_variable inflight_cv_;
  int inflight_ = 0;
};

}  // namespace

void appendBodyMemoryMetrics(const BodyMemoryStats& stats,
                             std::vector<prometheus::MetricFamily>& out) {
  using prometheus::ClientMetric;
  using prometheus::MetricType;
  auto family = [&](std::string name, std::string help, MetricType type) -> auto& {
    out.push_back({std::move(name), std::move(help), type, {}});
    return out.back().metric;
  };
  auto value = [](MetricType type, uint64_t v, std::vector<ClientMetric::Label> labels = {}) {
    ClientMetric m;
    m.label = std::move(labels);
    (type == MetricType::Counter ? m.counter.value : m.gauge.value) = static_cast<double>(v);
    return m;
  };
  auto& bytes = family("granary_rpc_body_memory_bytes",
                       "Request-body memory of the internal API: its capacity (0: no limit), "
                       "the bytes held now and the most ever held",
                       MetricType::Gauge);
  bytes.push_back(value(MetricType::Gauge, stats.capacity, {{"what", "capacity"}}));
  bytes.push_back(value(MetricType::Gauge, stats.held, {{"what", "held"}}));
  bytes.push_back(value(MetricType::Gauge, stats.peak, {{"what", "peak"}}));
  family("granary_rpc_body_memory_waiting",
         "Internal-API requests waiting for request-body memory now", MetricType::Gauge)
      .push_back(value(MetricType::Gauge, stats.waiting));
  family("granary_rpc_body_memory_waits_total",
         "Internal-API requests that had to wait for request-body memory",
         MetricType::Counter)
      .push_back(value(MetricType::Counter, stats.waits));
  family("granary_rpc_body_memory_refusals_total",
         "Internal-API requests answered 503 because request-body memory stayed full",
         MetricType::Counter)
      .push_back(value(MetricType::Counter, stats.refusals));
}

Result<std::unique_ptr<Server>> Server::create(const ServerOptions& options, Handler handler,
                                               WorkerPool& pool, const Clock& clock) {
  if (options.cluster_secret.empty()) {
    return fail(Status::invalidArgument(options.name + " needs a cluster secret"));
  }
  auto server = std::make_unique<ServerImpl>(options, std::move(handler), pool, clock);
  Status st = server->bind();
  if (!st.isOk()) return fail(st);
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace granary::rpc

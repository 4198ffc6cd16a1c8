// rpc::Server: the HTTP/1.1 server of every internal service (the chunk API of `granary
// chunkserver`, the index API of `granary index`; docs/internal-api.md). It owns the
// transport and the authentication; a service supplies one Handler.
//
// What the server does before the handler sees a request: it reads the head, refuses it
// unless it carries a valid signature made with the cluster secret (403), reads the body
// (at most max_body_bytes; no chunked bodies), and checks the body against its declared
// CRC32C (400). The handler then runs on `pool` (it may block on disk), and answers
// exactly once through its ReplyDone, there or later from any thread; the reply is
// written on the connection's own event loop. GET /_granary/metrics is answered from
// `render_metrics` when set, without the cluster HMAC (a bearer token when metrics_token
// is set).
//
// Transport: Beast sessions as C++20 coroutines, one io_context per event-loop thread; one
// acceptor hands connections round-robin to the loops. HTTP/1.1 keep-alive; idle
// connections close after idle_timeout_seconds; a body read or a response write making no
// progress for io_timeout_seconds ends the connection.
//
// Contract: create() binds the listening socket (so port() is known before run()); run()
// serves until stop() is called from any thread. The destructor waits for the handler
// calls it started. `pool` and `clock` must outlive the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "granary/common/aligned_bytes.h"
#include "granary/common/status.h"
#include "granary/rpc/wire.h"

namespace granary {
class Clock;
class WorkerPool;
}  // namespace granary

namespace granary::rpc {

struct Request {
  std::string method;
  std::string target;
  Headers headers;  // names in lower case
  // The body, read straight into storage that is not zero-filled first, 4 KiB aligned: a
  // blob PUT's payload is written to the drive from here (ChunkStore::putAsync).
  AlignedBytes body_storage;
  std::span<uint8_t> body;
  uint32_t declared_crc = 0;
};

struct Reply {
  int status = 200;
  Headers headers;
  std::string body;
  uint64_t head_length = 0;  // Content-Length of a HEAD answer
};
using ReplyDone = std::move_only_function<void(Reply)>;

// An error answer: its HTTP status, the x-granary-error-code header and the JSON body.
Reply errorReply(const Status& status);
Reply jsonReply(std::string body);
// 405 for a method the path does not take.
Reply methodNotAllowed(std::string_view method);

// Runs on the pool; must call `done` exactly once (an exception it throws becomes a 500).
using Handler = std::function<void(Request& request, ReplyDone done)>;

struct ServerOptions {
  std::string name = "granary-internal";  // the Server header and log lines
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0 picks a free port
  size_t event_loops = 1;    // 0: one per core
  std::string cluster_secret;        // required
  int idle_timeout_seconds = 60;     // keep-alive idle and request-head timeout
  int io_timeout_seconds = 30;       // a body read or a response write making no progress
  size_t max_header_bytes = 16 * 1024;
  uint64_t max_body_bytes = 64ull << 20;  // largest request body
  size_t max_connections = 1024;          // more are closed at accept
  // Request bodies held at once, from the read of the first byte until the reply is
  // written; 0: no limit. A request whose body does not fit waits, in arrival order and
  // without reading its body (TCP pushes back on the sender), for up to body_memory_wait,
  // then is answered 503 kUnavailable (retryable) and its connection closed. A body larger
  // than the whole allowance is charged the whole of it: it runs alone. Reply bodies are
  // not counted (the clients' own read budgets bound them).
  uint64_t body_memory_bytes = 0;
  std::chrono::milliseconds body_memory_wait{10000};
  std::function<std::string()> render_metrics;
  std::string metrics_token;
};

// What ServerOptions::body_memory_bytes has done so far.
struct BodyMemoryStats {
  uint64_t capacity = 0;  // 0: no limit
  uint64_t held = 0;      // bytes charged to request bodies now
  uint64_t peak = 0;      // the most ever held at once
  uint64_t waiting = 0;   // requests waiting now
  uint64_t waits = 0;     // requests that had to wait (total)
  uint64_t refusals = 0;  // requests answered 503 after body_memory_wait (total)
};

// Appends the stats as Prometheus families: granary_rpc_body_memory_bytes{what=capacity|
// held|peak}, granary_rpc_body_memory_waiting, granary_rpc_body_memory_waits_total and
// granary_rpc_body_memory_refusals_total.
void appendBodyMemoryMetrics(const BodyMemoryStats& stats,
                             std::vector<prometheus::MetricFamily>& out);

class Server {
 public:
  static Result<std::unique_ptr<Server>> create(const ServerOptions& options, Handler handler,
                                                WorkerPool& pool, const Clock& clock);
  virtual ~Server() = default;
  virtual uint16_t port() const = 0;
  virtual void run() = 0;   // blocks until stop()
  virtual void stop() = 0;  // thread safe
  virtual BodyMemoryStats bodyMemory() const = 0;  // thread safe
};

}  // namespace granary::rpc

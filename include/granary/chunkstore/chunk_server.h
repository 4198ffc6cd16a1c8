// ChunkServer: serves a set of drives over the internal HTTP API (docs/internal-api.md), so
// that gateways on other machines reach them through RemoteChunkClient. `granary
// chunkserver` runs one over a LocalChunkClient.
//
// Contract: create() binds the listening socket (so port() is known before run()); run()
// serves until stop() is called from any thread. Every request must carry a valid
// signature made with the cluster secret (403 otherwise); errors from the backend go back
// with their exact Status::Code. Backend calls block, so they run on `pool`, never on the
// event-loop threads. HTTP/1.1 keep-alive; idle connections are closed after
// idle_timeout_seconds; a request body or response that makes no progress for
// io_timeout_seconds ends the connection.
//
// Ownership: `backend`, `pool` and `clock` must outlive the server. The destructor waits
// for the backend calls it started to finish. Thread safety: stop() and port() may be
// called from any thread; run() from one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "granary/common/status.h"
#include "granary/rpc/server.h"

namespace granary {
class Clock;
class WorkerPool;
}  // namespace granary

namespace granary::chunkstore {

class ChunkClient;

struct ChunkServerOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0 picks a free port
  size_t event_loops = 1;    // 0: one per core
  std::string cluster_secret;        // required
  std::vector<std::string> drives;   // the drive ids `backend` serves (GET /drives)
  int idle_timeout_seconds = 60;     // keep-alive idle and request-head timeout
  int io_timeout_seconds = 30;       // a body read or a response write making no progress
  size_t max_header_bytes = 16 * 1024;
  uint64_t max_blob_bytes = 64ull << 20;  // largest PUT body and GET range
  size_t max_list_limit = 10000;          // blobs per list response
  size_t max_connections = 1024;          // more are closed at accept
  // PUT bodies held at once (rpc::ServerOptions::body_memory_bytes; 0: no limit) and how
  // long a PUT waits for room before it is answered 503 (retryable).
  uint64_t body_memory_bytes = 0;
  std::chrono::milliseconds body_memory_wait{10000};
  // When set, GET /_granary/metrics answers with its text (Prometheus exposition format),
  // without the cluster HMAC; with `metrics_token` set it needs "Authorization: Bearer
  // <token>" instead.
  std::function<std::string()> render_metrics;
  std::string metrics_token;
};

class ChunkServer {
 public:
  static Result<std::unique_ptr<ChunkServer>> create(const ChunkServerOptions& options,
                                                     ChunkClient& backend, WorkerPool& pool,
                                                     const Clock& clock);
  virtual ~ChunkServer() = default;
  virtual uint16_t port() const = 0;
  virtual void run() = 0;   // blocks until stop()
  virtual void stop() = 0;  // thread safe
  virtual rpc::BodyMemoryStats bodyMemory() const = 0;  // thread safe
};

}  // namespace granary::chunkstore

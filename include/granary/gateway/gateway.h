// The S3 gateway server: HTTP/1.1 (Boost.Beast, C++20 coroutines), one event loop per
// thread with SO_REUSEPORT acceptors, blocking component calls offloaded to a worker pool.
//
// Contract: create() binds the listening sockets (so port() is known before run());
// run() serves until stop() is called (from any thread or a signal handler thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "granary/common/status.h"

namespace prometheus {
class Registry;
}
namespace granary {
class Clock;
class Random;
class WorkerPool;
}  // namespace granary
namespace granary::chunkstore {
class ChunkClient;
}
namespace granary::index_kv {
class Index;
}
namespace granary::placement {
struct ClusterMap;
}

namespace granary::gateway {

struct GatewayOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 9000;       // 0 picks a free port
  size_t event_loops = 0;            // 0: one per core
  std::string region = "us-east-1";
  uint64_t inline_threshold = 128 * 1024;  // objects up to this size live in the manifest
  uint32_t fragment_len = 1 << 20;         // bytes per data fragment of a full stripe
  size_t max_header_bytes = 16 * 1024;     // request line + headers
  uint64_t max_object_size = 5ull << 30;   // single PUT limit (AWS: 5 GiB)
  int idle_timeout_seconds = 60;           // keep-alive idle and header-read timeout
  int io_timeout_seconds = 120;            // a body read or write making no progress
  // A PUT that has not committed after this long fails with RequestTimeout. The orphan
  // sweep only deletes unreferenced blobs older than twice this, so it can never delete
  // the fragments of a PUT that may still commit.
  int max_put_seconds = 1800;
  // One JSON line per request (docs/operations.md); "" = off, "-" = standard error.
  std::string access_log;
  // Virtual-hosted-style addressing: a request whose Host (port stripped, any case) is
  // "<bucket>.<virtual_host_domain>" names its bucket in the host and its key in the whole
  // path. "" = path style only; Host == the domain itself stays path style.
  std::string virtual_host_domain;
  // When set, /_granary/metrics needs "Authorization: Bearer <metrics_token>"
  // (AccessDenied without it); empty: open, as Prometheus scrapes usually are on a
  // private network.
  std::string metrics_token;
  // TLS: PEM certificate chain and private key files; both empty: plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  // Open client connections at most; one more is answered 503 SlowDown and closed.
  size_t max_connections = 4096;
  // Open connections from one remote address at most (0: no such cap); one more is
  // answered as over max_connections.
  size_t max_connections_per_address = 0;
  // On stop(): new connections are refused at once, requests being served get this long
  // to finish (their answers say Connection: close), then the rest are cut.
  int shutdown_grace_seconds = 10;
  // Bytes of object data (stripe buffers) all GET streams and uploads may hold at once; a
  // request that finds them spent waits for its turn (backpressure), so memory does not
  // grow with the number of requests.
  uint64_t buffer_memory = 256ull << 20;
  // How long an upload waits for its first stripe buffer before it is answered 503
  // ServiceUnavailable (S3 clients retry that with backoff).
  int buffer_wait_seconds = 30;
  // How often the named users are reloaded from the index (users added through another
  // gateway become usable here within this time; changes made here, at once).
  int users_refresh_seconds = 2;
  // Background repair passes (docs/operations.md, "Repair"): seconds between them, 0 =
  // none (POST /_granary/admin/repair runs one on demand either way); `repair_verify`
  // reads every fragment whole (CRC-checked) instead of asking its drive for it.
  int repair_interval_seconds = 0;
  bool repair_verify = false;
  // Hedged reads: a stripe whose data fragment reads have not all answered after this many
  // milliseconds is decoded from the other fragments instead; 0 = never.
  int hedge_after_ms = 500;
  // CopyObject, UploadPartCopy and CompleteMultipartUpload still working after this many
  // milliseconds send a 200 head and then whitespace to keep the client waiting
  // (keep_alive.h); the answer follows in that body. Negative: never.
  int keepalive_after_ms = 10000;
  // GET bodies whose fragments are in the page cache (and verified there) go out with
  // sendfile(2), on plain-TCP connections; false = always through a stripe buffer.
  bool sendfile = true;
};

struct RootUser {
  std::string access_key;
  std::string secret_key;
};

struct GatewayDeps {
  const placement::ClusterMap& map;
  chunkstore::ChunkClient& chunks;
  index_kv::Index& index;
  const Clock& clock;
  Random& random;
  WorkerPool& pool;
  // Uploads' per-byte CPU work (their hashes, erasure coding, the fragment writes'
  // submission), run at a lower priority than `pool`'s, so that reads, index calls and
  // everything a waiting client needs next go first when the CPUs are short.
  WorkerPool& bulk_pool;
  prometheus::Registry& registry;
  RootUser root;
  // Whether this gateway runs background repair passes now (BackgroundLeader::leading);
  // unset: always.
  std::function<bool()> background_leading = {};
};

class GatewayServer {
 public:
  static Result<std::unique_ptr<GatewayServer>> create(const GatewayOptions& options,
                                                       GatewayDeps deps);
  virtual ~GatewayServer() = default;
  virtual uint16_t port() const = 0;
  virtual void run() = 0;   // blocks until stop()
  // Thread safe. Stops accepting, lets the requests being served finish (at most
  // shutdown_grace_seconds), then ends run().
  virtual void stop() = 0;
};

}  // namespace granary::gateway

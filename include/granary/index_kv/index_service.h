// The index as a service (cluster mode, `granary index`): serveIndex() puts an Index behind
// the internal HTTP API (docs/internal-api.md, "Index API"), and makeRemoteIndex() is the
// Index a gateway uses to reach it. Every Index method is one signed POST
// /internal/v1/index/<method> whose body and answer are CBOR.
//
// Contract of the remote Index: the Index contract, with the server's Status codes passed
// through unchanged (kNotFound, kPreconditionFailed, ...). In addition, an index service
// that cannot be reached is kUnavailable and one that does not answer in time is kTimeout;
// a mutation is retried only when no byte of it was sent, so a lost answer surfaces as an
// error (the gateway's 503), never as a second, different commit. getObjectFromMemory
// never answers (every lookup is a request). Thread safety: all methods are thread safe;
// calls block (worker threads only).
#pragma once

#include <memory>
#include <string>

#include "granary/common/status.h"
#include "granary/index_kv/index.h"
#include "granary/rpc/client.h"
#include "granary/rpc/server.h"

namespace granary {
class Clock;
class WorkerPool;
}  // namespace granary

namespace granary::index_kv {

// The largest index request body, unless `options` set another: a Complete's manifest of
// the largest object (5 TiB: ~1.3 M stripes of 4 MiB, ~76 MB of CBOR) and a relocation
// (two manifests) fit, as they did not in rpc's 64 MiB default. The remote index reads
// answers up to the same (rpc::ClientOptions::max_response_bytes). Only signed requests
// get their body read.
inline constexpr uint64_t kMaxIndexRequestBytes = 256ull << 20;

// Serves `index` (which must outlive the server) on an rpc::Server.
Result<std::unique_ptr<rpc::Server>> serveIndex(rpc::ServerOptions options, Index& index,
                                                WorkerPool& pool, const Clock& clock);

struct RemoteIndexOptions : rpc::ClientOptions {
  RemoteIndexOptions() {
    peer_name = "index service";
    io_timeout = std::chrono::milliseconds(20000);
    max_idle_per_endpoint = 64;
  }
};

// `endpoint` is the index service's "HOST:PORT"; `clock` must outlive the index.
std::unique_ptr<Index> makeRemoteIndex(std::string endpoint, std::string cluster_secret,
                                       RemoteIndexOptions options, const Clock& clock);

}  // namespace granary::index_kv

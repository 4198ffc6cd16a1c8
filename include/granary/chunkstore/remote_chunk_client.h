// RemoteChunkClient: the ChunkClient that reaches drives served by `granary chunkserver`
// processes on other machines, over the internal HTTP API (docs/internal-api.md).
//
// Contract: the ChunkClient contract. Every error the server's ChunkStore returns comes
// back with the same Status::Code (kNotFound, kCorruption, ...). In addition:
//  - a server that cannot be reached (refused, reset, connect timeout) is kUnavailable;
//  - a request that makes no progress for io_timeout is kTimeout (never retried, so that
//    a degraded read can go to parity at once);
//  - a request the server refuses to authenticate is kPermissionDenied;
//  - an unknown drive id (absent from the map) is kNotFound.
// Retries: idempotent calls (read, stat, list, stats, remove) are retried on connection
// failures with a small exponential backoff; put is retried only when no byte of it was
// sent (for example on a stale pooled connection), since a put that reached the server may
// have committed.
//
// Calls are synchronous and block the calling thread (callers are worker threads).
// Connections are kept alive and pooled per endpoint. Thread safety: all methods are
// thread safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "granary/chunkstore/chunk_client.h"
#include "granary/rpc/client.h"

namespace granary {
class Clock;
}

namespace granary::chunkstore {

// One drive as a chunk server reports it (GET /internal/v1/drives).
struct DriveState {
  std::string id;
  bool writable = true;
};

// The transport's options (timeouts, retries, pooling: rpc::ClientOptions) and the chunk
// client's own.
struct RemoteChunkClientOptions : rpc::ClientOptions {
  RemoteChunkClientOptions() { peer_name = "chunk server"; }
  // writable() answers from a cached drive list refreshed at most this often.
  std::chrono::milliseconds drive_list_refresh{3000};
  size_t list_page = 1000;  // blobs per list request; list() pages up to its limit
};

class RemoteChunkClient final : public ChunkClient {
 public:
  // `drive_endpoints` maps drive id -> "host:port" of the chunk server serving it.
  // `clock` (wall time, for request dates) must outlive the client.
  RemoteChunkClient(std::map<std::string, std::string, std::less<>> drive_endpoints,
                    std::string cluster_secret, RemoteChunkClientOptions options,
                    const Clock& clock);
  ~RemoteChunkClient() override;
  RemoteChunkClient(const RemoteChunkClient&) = delete;
  RemoteChunkClient& operator=(const RemoteChunkClient&) = delete;

  Status put(std::string_view drive, const BlobDescriptor& desc,
             std::span<const uint8_t> payload) override;
  Status read(std::string_view drive, const BlobId& id, uint64_t offset,
              std::span<uint8_t> out) override;
  Status remove(std::string_view drive, const BlobId& id) override;
  Result<BlobInfo> stat(std::string_view drive, const BlobId& id) override;
  Result<BlobDescriptor> describe(std::string_view drive, const BlobId& id) override;
  Result<std::vector<BlobInfo>> list(std::string_view drive, std::optional<BlobId> after,
                                     size_t limit) override;
  Result<DriveStats> stats(std::string_view drive) override;
  // From the cached drive list of the drive's server; true when not known (yet). False
  // while the server is unreachable: from a request that could not reach it until its
  // drive list (refreshed every drive_list_refresh) comes back.
  bool writable(std::string_view drive) const override;
  bool reachable(std::string_view drive) const override;

  // The drives a server serves, and whether it answers at all.
  Result<std::vector<DriveState>> drives(std::string_view endpoint);
  Status health(std::string_view endpoint);

  // TCP connections opened so far (for tests and metrics).
  uint64_t connectionsOpened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace granary::chunkstore

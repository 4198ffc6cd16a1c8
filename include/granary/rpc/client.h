// rpc::Client: the client side of every internal service (docs/internal-api.md): signed
// HTTP/1.1 requests over pooled keep-alive connections, with deadlines and retries.
//
// Contract:
//  - execute() returns the server's answer, whatever its HTTP status (Answer::error()
//    turns a non-2xx one into the server's Status); a failed exchange is a Status:
//    a server that cannot be reached (refused, reset, connect timeout) is kUnavailable; a
//    request that makes no progress for io_timeout is kTimeout (never retried).
//  - Retries: an idempotent call is retried on connection failures with a small
//    exponential backoff; a non-idempotent one only when no byte of it was sent (a stale
//    pooled connection), since one that reached the server may have taken effect.
//  - A 200 answer read into Call::read_into must fill it exactly and match the
//    x-granary-content-crc32c the server sent.
// Calls are synchronous and block the calling thread. Thread safety: all methods are
// thread safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "granary/common/status.h"
#include "granary/rpc/wire.h"

namespace granary {
class Clock;
}

namespace granary::rpc {

struct ClientOptions {
  std::string peer_name = "server";  // in error messages ("chunk server did not answer")
  std::chrono::milliseconds connect_timeout{2000};
  // Longest wait for any progress (a byte sent or received) within one request.
  std::chrono::milliseconds io_timeout{30000};
  int retries = 2;                              // extra attempts after the first
  std::chrono::milliseconds retry_backoff{10};  // doubled for each further attempt
  size_t max_idle_per_endpoint = 16;            // pooled keep-alive connections
  // A pooled connection idle longer is closed, not reused: keep it well under the
  // server's idle timeout so the server never closes one as a request goes out.
  std::chrono::milliseconds max_idle_age{20000};
  uint64_t max_response_bytes = 256ull << 20;  // bodies not read into Call::read_into
};

struct Call {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string path;            // encoded
  std::string query;           // raw, "" for none
  Headers headers;             // x-granary-* ones are signed
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
    return statusFromError(status, findHeader(headers, kErrorCodeHeader), body,
                           findHeader(headers, kErrorRetryableHeader));
  }
};

class Client {
 public:
  // `clock` (wall time, for request dates) must outlive the client.
  Client(std::string cluster_secret, ClientOptions options, const Clock& clock);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One call to "HOST:PORT" with retries; a non-2xx answer is an Answer, not a Status.
  Result<Answer> execute(std::string_view endpoint, const Call& call);
  // execute(), with a non-2xx answer turned into its Status.
  Result<Answer> call(std::string_view endpoint, const Call& call);

  const ClientOptions& options() const;
  // TCP connections opened so far (for tests and metrics).
  uint64_t connectionsOpened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace granary::rpc

// A small blocking S3 client for the command-line tools: one HTTP/1.1 request at a time
// over a fresh connection, signed with AWS Signature Version 4 (header form, service "s3").
//
// Signing reuses the gateway's SigV4 code (src/gateway/sigv4.h): the canonical request and
// string to sign are built by the same functions that verify requests on the server, so the
// client and the gateway cannot disagree on canonicalisation.
//
// Contract: send() returns the response whatever its status; an error Status means the
// exchange itself failed (DNS, connect, timeout, a broken or cut response). Every network
// operation has an inactivity deadline. Not thread safe: one S3Client per thread.
// No Beast in this header, so that its users compile fast.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "granary/common/status.h"

namespace granary::gateway {
class SigningKeyCache;
}

namespace granary::cli {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string region = "us-east-1";
};

// "http://host[:port]" (path, if any, ignored). https is not supported.
struct Endpoint {
  std::string host;         // without brackets for IPv6
  std::string port;         // "80" when absent
  std::string host_header;  // as sent in Host: "host[:port]"
};
Result<Endpoint> parseEndpoint(std::string_view url);

struct S3Request {
  std::string method = "GET";
  std::string bucket;  // decoded
  std::string key;     // decoded; empty: a bucket request
  // Decoded names and values; a nullopt value is sent as a bare name ("?records").
  std::vector<std::pair<std::string, std::optional<std::string>>> query;
  HeaderList headers;  // extra headers; lower-case names
  std::string body;    // in-memory body (signed with its SHA-256)
  // When set, the body is streamed from this file instead of `body`, and sent as
  // UNSIGNED-PAYLOAD (the gateway accepts it for PUT, as S3 does).
  std::optional<std::string> body_file;
};

struct S3Response {
  unsigned status = 0;
  std::string reason;
  HeaderList headers;  // names lower-cased
  std::string body;    // empty when the body went to a sink
  std::optional<std::string_view> header(std::string_view lower_name) const;
};

// Receives a successful (2xx) response body as it arrives; a non-ok Status aborts the
// exchange and is returned by send().
using BodySink = std::function<Status(std::string_view)>;

// The request-target for `req`: "/" + UriEncode(bucket) ["/" + UriEncode(key, keep '/')]
// ["?" query with names and values UriEncoded].
std::string requestTarget(const S3Request& req);

// The Authorization header value for a request whose headers (lower-case names) already
// include host, x-amz-date and x-amz-content-sha256. Every header in `headers` is signed.
// `keys`: a cache of derived signing keys for callers that sign many requests (a load
// generator); nullptr derives the key each time.
std::string authorization(std::string_view method, std::string_view target,
                          const HeaderList& headers, std::string_view payload_hash,
                          std::string_view amz_date, const S3Credentials& creds,
                          gateway::SigningKeyCache* keys = nullptr);

// Every header a SigV4 request sends: host, `extra` (lower-case names), x-amz-content-sha256,
// x-amz-date (now) and, last, "Authorization" (signing all the others).
HeaderList signedHeaders(std::string_view method, std::string_view target,
                         std::string_view host_header, const HeaderList& extra,
                         std::string_view payload_hash, const S3Credentials& creds,
                         gateway::SigningKeyCache* keys = nullptr);

// "yyyymmddThhmmssZ" for a point in time (UTC).
std::string amzDate(std::chrono::system_clock::time_point t);

// An S3 <Error> body's Code and Message; empty strings when the body is not one.
struct S3ErrorBody {
  std::string code;
  std::string message;
};
S3ErrorBody parseErrorBody(std::string_view body);

// "<status> <Code>: <Message>" for a failed response (reason phrase when there is no XML,
// e.g. for HEAD).
std::string describeError(const S3Response& res);

class S3Client {
 public:
  S3Client(Endpoint endpoint, S3Credentials creds, std::chrono::seconds timeout);

  // `sink`: where a 2xx response body goes (else it is buffered in S3Response::body).
  // `body_limit`: the largest response body accepted.
  Result<S3Response> send(const S3Request& req, const BodySink& sink = nullptr,
                          uint64_t body_limit = uint64_t{16} << 30);

 private:
  Endpoint endpoint_;
  S3Credentials creds_;
  std::chrono::seconds timeout_;
};

}  // namespace granary::cli

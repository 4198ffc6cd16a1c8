// The gateway's transport-independent view of one S3 request and response, and the body
// streams between handlers and the connection. Handlers (put_object.cc, get_object.cc,
// bucket_ops.cc) see only these types, never Beast, so they compile fast and can be
// driven without sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "asio.h"
#include "granary/common/status.h"
#include "s3_error.h"

namespace granary::gateway {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct S3Request {
  std::string method;  // upper case
  std::string target;  // raw request-target
  std::string path;    // raw path (percent-encoded as sent)
  std::string bucket;  // decoded; empty for service-level requests
  std::string key;     // decoded; empty for bucket-level requests
  HeaderList query;    // decoded query parameters, in order
  HeaderList headers;  // lower-case names
  std::optional<uint64_t> content_length;
  std::string request_id;
  // The client's address (bucket policies' aws:SourceIp; empty when unknown), and whether
  // the request came over TLS (aws:SecureTransport).
  std::string source_ip;
  bool secure = false;
  // Sent as HTTP/1.0: no chunked answers, and a kept connection is said so.
  bool http10 = false;
  // Who sent it: the owner identity of the authenticated user (UserCredentials::name),
  // "" for an anonymous request; `root` for the root user.
  std::string principal;
  bool root = false;
  // When authorization judged the request against its bucket: that bucket's creation
  // time, so that its changes and object commits go to that bucket only, not to one of the
  // same name deleted and created again meanwhile (0: not judged: the root user, anonymous
  // refusals, requests without a bucket).
  int64_t bucket_created_unix_nanos = 0;
  // The x-amz-content-sha256 the signature covers when it is a hash (64 hex digits, as
  // sent); empty for unsigned payloads and anonymous requests. readSmallBody checks it.
  std::string signed_payload_hash;
  // Headers every response to this request carries, streamed or not (CORS: the router
  // sets them from the bucket's rules, addCorsHeaders in cors.cc).
  HeaderList response_headers;

  // First value of a header (lower-case name), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
  bool hasQuery(std::string_view name) const;
  std::optional<std::string_view> queryValue(std::string_view name) const;
};

struct S3Response {
  int status = 200;
  HeaderList headers;
  std::string body;
  // True when the handler already wrote the whole response through the BodySink.
  bool streamed = false;
  // Close the connection after this response (e.g. the request body was not consumed).
  bool close = false;

  void set(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

// The request body after HTTP framing (Content-Length or chunked) is removed; aws-chunked
// decoding is the handler's job.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // Reads up to out.size() bytes; 0 means the body is complete. Errors: truncated body,
  // timeout, oversize.
  virtual Task<S3Result<size_t>> read(std::span<uint8_t> out) = 0;
  virtual bool done() const = 0;
  // The request will be served: a client that sent `Expect: 100-continue` is asked for
  // its body now, an empty one too (read() asks, if this was not called). Called once the
  // request is authenticated, authorized and routed (uploads: once their headers, bucket
  // and upload are checked), before anything slow the request waits for (botocore sends
  // its body anyway after waiting 1 s).
  virtual Task<void> invite() { co_return; }
  // Reads after `deadline` fail with RequestTimeout, however steadily bytes trickle in
  // (each read also has its own no-progress timeout): a body may not hold its connection
  // and buffers longer than its request may take.
  virtual void setDeadline(std::chrono::steady_clock::time_point deadline) { (void)deadline; }
  // A body that learns while it streams that it ends short of the length it was declared
  // with (a POST form's file: by the optional CRLF of its ending), once it knows: before
  // it hands out its last bytes. nullopt: the declared length holds.
  virtual std::optional<uint64_t> finalLength() const { return std::nullopt; }
};

class BodySink {
 public:
  virtual ~BodySink() = default;
  // Length unknown when the head goes out: the body is sent with chunked transfer coding
  // and must end with finish().
  static constexpr uint64_t kUnknownLength = UINT64_MAX;
  // Sends status and headers with a Content-Length of `content_length` (or chunked). A sink
  // may hold the head back and send it with the first body bytes (one write, one TCP
  // segment for a small object); flush() sends a head still held.
  virtual Task<Status> writeHead(const S3Response& head, uint64_t content_length) = 0;
  virtual Task<Status> write(std::span<const uint8_t> data) = 0;
  // Whether sendFile() may be called now: the body goes to a plain TCP socket with a
  // Content-Length (not TLS, not chunked).
  virtual bool sendsFiles() const { return false; }
  // write() of `length` bytes of the open file `fd` at `offset`, with sendfile(2): from
  // the page cache to the socket without a copy through user space. The bytes must stay
  // unchanged until it returns. Only when sendsFiles().
  virtual Task<Status> sendFile(int /*fd*/, uint64_t /*offset*/, uint64_t /*length*/) {
    co_return Status::internal("this response cannot send files");
  }
  // Ends a chunked body (a no-op for a body with a Content-Length).
  virtual Task<Status> finish() { co_return Status::ok(); }
  // Sends whatever is held back; the server calls it after every streamed response.
  virtual Task<Status> flush() { co_return Status::ok(); }
  // Takes back a head that has not gone out (nothing of the response sent yet): true, and
  // the handler may answer something else (an error the client can retry), false once
  // any byte is on its way.
  virtual bool withdrawHead() { return false; }
};

S3Response errorResponse(const S3Error& error, const S3Request& req);
// The same for a request whose body may be partly unread: the connection closes after it.
S3Response errorResponse(const S3Error& error, const S3Request& req, const BodySource& body);

}  // namespace granary::gateway

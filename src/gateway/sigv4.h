// AWS Signature Version 4 for S3: parsing the Authorization header and presigned query
// parameters, computing canonical requests and signatures, and verifying them. Signature
// Version 2 (HMAC-SHA1, sigv2.cc) is accepted too, in both forms: boto3's and aws-cli v1's
// presigned URLs still use it by default, as do clients configured for it (s3cmd
// `signature_v2`, boto3 `signature_version="s3"`).
//
// S3 specifics (unlike the generic SigV4 suite): the canonical URI is the path exactly as
// sent (already URI-encoded by the client; not normalised, not re-encoded), and the payload
// hash is the x-amz-content-sha256 header (or UNSIGNED-PAYLOAD for presigned URLs).
// Pure functions, no I/O; thread safe (SigningKeyCache is internally locked).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "s3_error.h"

namespace granary::gateway {

// The parts of an HTTP request SigV4 looks at, independent of Beast.
struct HttpRequestView {
  std::string_view method;  // "GET", "PUT", ...
  std::string_view target;  // request-target exactly as received: path [ "?" query ]
  // Header names lower-case; values as received (the verifier trims and folds spaces).
  std::vector<std::pair<std::string, std::string>> headers;
  // The bucket named by the Host header (virtual-hosted-style addressing), empty for
  // path-style: SigV2's canonical resource starts with the bucket either way.
  std::string_view host_bucket;

  // The first value of a header (lower-case name), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
};

struct AuthInfo {
  // 4: AWS4-HMAC-SHA256, every field below. 2: Signature Version 2, which sets only
  // `presigned`, `access_key`, `signature` (base64), `expires_seconds` (presigned: the
  // Expires instant, Unix seconds) and `payload_hash` (UNSIGNED-PAYLOAD: V2 signs no body).
  int version = 4;
  bool presigned = false;
  std::string access_key;
  std::string date;      // yyyymmdd from the credential scope
  std::string region;
  std::string service;   // "s3"
  std::vector<std::string> signed_headers;  // lower-case, as listed
  std::string signature;  // 64 hex digits
  std::string amz_date;   // yyyymmddThhmmssZ (x-amz-date header or X-Amz-Date)
  int64_t expires_seconds = 0;  // presigned only (X-Amz-Expires)
  std::string payload_hash;     // x-amz-content-sha256, or "UNSIGNED-PAYLOAD" if presigned
  std::string scope() const;    // date/region/service/aws4_request
};

// nullopt: the request carries no credentials (anonymous). Errors:
// AuthorizationHeaderMalformed / AuthorizationQueryParametersError / InvalidArgument /
// AccessDenied (e.g. an unsupported algorithm).
S3Result<std::optional<AuthInfo>> parseAuth(const HttpRequestView& req);

// Signature Version 2 (sigv2.cc; "Signing and authenticating REST requests" in the S3
// developer guide, whose examples tests/unit/gateway/sigv4_test.cc reproduces).
// `value`: the Authorization header, "AWS <access key>:<signature>".
S3Result<std::optional<AuthInfo>> parseAuthV2Header(std::string_view value);
// The query's AWSAccessKeyId, Signature and Expires (percent-decoded).
S3Result<std::optional<AuthInfo>> parseAuthV2Query(
    const std::vector<std::pair<std::string, std::string>>& params);
// Method, Content-MD5, Content-Type, Date (presigned: Expires), the x-amz-* headers and
// the canonical resource (bucket, path as sent, and the sub-resources botocore signs).
// `path`: the request path to sign (the path as sent, or its AWS-canonical encoding).
// `date_line`: the Date header's value, or (kEmpty) nothing, as S3 signs a request that
// has x-amz-date. A presigned URL's Content-MD5, Content-Type and x-amz-* values are taken
// from its query where it names them there.
enum class V2DateLine { kDateHeader, kEmpty };
std::string stringToSignV2(const HttpRequestView& req, const AuthInfo& auth,
                           std::string_view path, V2DateLine date_line = V2DateLine::kDateHeader);
// base64(HMAC-SHA1(secret, string_to_sign)).
std::string signV2(std::string_view secret, std::string_view string_to_sign);
// Whether `sign(path)` equals `provided` (compared in constant time) for `path` as sent or,
// when it differs, its AWS-canonical encoding: S3 signs the path as the client encoded it,
// but some clients send characters UriEncode would escape ('$', '!', '(', ...) unescaped,
// or escape unreserved ones, having signed the canonical form. SignatureDoesNotMatch when
// neither matches. Both signature versions verify through it.
S3Result<void> matchSignature(std::string_view path, std::string_view provided,
                              const std::function<std::string(std::string_view)>& sign);
// A query parameter that carries a presigned URL's signature (SigV4's X-Amz-Algorithm,
// -Credential, -Date, -Expires, -SignedHeaders, -Signature, -Security-Token,
// -Content-Sha256; SigV2's AWSAccessKeyId, Signature and Expires), not what the request
// does. Any other X-Amz-* parameter is a header in a presigned URL
// (isHoistedHeaderParameter) and unknown elsewhere.
bool isAuthParameter(std::string_view name);
// A query parameter that is a request header moved into a presigned URL (any case): an
// x-amz-* name other than the signature's own (X-Amz-Algorithm, -Credential, -Date,
// -Expires, -SignedHeaders, -Signature, -Security-Token, -Content-Sha256). The AWS SDK for
// JavaScript v3 moves every x-amz-* header there (x-amz-meta-*, x-amz-acl, x-amz-tagging,
// x-amz-checksum-*), as botocore's SigV2 presigner does (with Content-Type and
// Content-MD5); the signature covers them, and S3 reads them as headers.
bool isHoistedHeaderParameter(std::string_view name);
// verify() for a SigV2 AuthInfo.
S3Result<void> verifyV2(const HttpRequestView& req, const AuthInfo& auth,
                        std::string_view secret, int64_t now_unix_seconds);

// Credential = <access key>/<yyyymmdd>/<region>/<service>/aws4_request: fills access_key,
// date, region and service; false if malformed. The access key is everything before the
// last four parts.
bool parseCredential(std::string_view credential, AuthInfo& auth);

std::string canonicalRequest(const HttpRequestView& req, const AuthInfo& auth);
std::string stringToSign(const AuthInfo& auth, std::string_view canonical_request);
std::array<uint8_t, 32> deriveSigningKey(std::string_view secret, std::string_view date,
                                         std::string_view region, std::string_view service);
std::string hmacSha256Hex(const std::array<uint8_t, 32>& key, std::string_view data);
std::string sha256Hex(std::string_view data);

// Caches derived signing keys per (secret, date, region, service): deriving one costs four
// HMACs; a request reuses it. A key goes in only once a signature made with it verified
// (remember): requests that fail theirs, with whatever date or region a caller who knows
// an access key makes up, must not push the real keys out.
class SigningKeyCache {
 public:
  // The cached key, else one derived now (not cached).
  std::array<uint8_t, 32> get(std::string_view secret, std::string_view date,
                              std::string_view region, std::string_view service);
  void remember(std::string_view secret, std::string_view date, std::string_view region,
                std::string_view service, const std::array<uint8_t, 32>& key);
  size_t size();

 private:
  static std::string idOf(std::string_view secret, std::string_view date,
                          std::string_view region, std::string_view service);
  std::mutex mu_;
  std::map<std::string, std::array<uint8_t, 32>, std::less<>> keys_;
};

// Verifies the signature and the time rules: header-signed requests must be within 15
// minutes of `now_unix_seconds` (RequestTimeTooSkewed; SigV2: the x-amz-date or Date
// header); presigned URLs must not be expired (AccessDenied "Request has expired") and
// X-Amz-Expires <= 604800 (SigV2's Expires is an instant, with no limit, as in S3). Returns
// SignatureDoesNotMatch on a wrong signature. If the path as sent does not verify, the
// AWS-UriEncode form of the decoded path is tried as well: some clients sign "%24" but send
// '$' (or the reverse for unreserved characters).
S3Result<void> verify(const HttpRequestView& req, const AuthInfo& auth, std::string_view secret,
                      int64_t now_unix_seconds, SigningKeyCache& keys);

// Incremental decoder of `Content-Encoding: aws-chunked` bodies:
//   STREAMING-AWS4-HMAC-SHA256-PAYLOAD          (signed chunks)
//   STREAMING-UNSIGNED-PAYLOAD-TRAILER          (unsigned chunks, trailing headers)
//   STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER  (signed chunks + signed trailer)
// Chunk format: hex-size[;chunk-signature=sig]\r\n data \r\n ... 0[;chunk-signature=..]\r\n
// then optional trailer lines "name:value\r\n" (and x-amz-trailer-signature), then \r\n.
class AwsChunkedDecoder {
 public:
  struct Signing {
    std::array<uint8_t, 32> key;  // derived signing key
    std::string amz_date;
    std::string scope;
    std::string seed_signature;  // the Authorization header's signature
  };
  // `signing` absent: unsigned chunks.
  explicit AwsChunkedDecoder(std::optional<Signing> signing, bool expect_trailer);
  ~AwsChunkedDecoder();
  AwsChunkedDecoder(AwsChunkedDecoder&&) noexcept;
  AwsChunkedDecoder& operator=(AwsChunkedDecoder&&) noexcept;

  // Consumes `in` (any split of the body), appending decoded payload bytes to `out`.
  // Errors: IncompleteBody / InvalidRequest on bad framing, SignatureDoesNotMatch on a bad
  // chunk or trailer signature. Errors are sticky. A chunk's bytes are appended as they
  // arrive, before its signature (checked when the chunk ends) is known good: on any error
  // the whole upload must be discarded, and it is only valid once done() is true.
  // Limits (hostile input): lines <= 4 KiB, chunks <= 64 MiB, <= 16 trailing headers.
  S3Result<void> feed(std::string_view in, std::string& out);
  // True once the final chunk and trailer have been consumed completely. The body's end is
  // the caller's to know (Content-Length); a body that ends while !done() is IncompleteBody.
  // Lenient like S3: the closing blank line after a signed trailer's signature, or after
  // unsigned trailer lines, may be missing.
  bool done() const;
  // Trailing headers (lower-case names), e.g. x-amz-checksum-crc32.
  const std::map<std::string, std::string>& trailers() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace granary::gateway

// The wire format every internal service shares (docs/internal-api.md): request signing
// with the cluster secret, Status <-> HTTP error mapping, and the small parsing helpers of
// paths and queries. The chunk API (chunk servers) and the index API (`granary index`)
// are both built on it, through rpc::Server and rpc::Client. No Beast and no I/O here, so
// every piece is testable on its own.
//
// Change docs/internal-api.md together with this file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "granary/common/status.h"

namespace granary::rpc {

inline constexpr std::string_view kPrefix = "/internal/v1";

// Request headers every signed request carries (names are lower case).
inline constexpr std::string_view kDateHeader = "x-granary-date";
inline constexpr std::string_view kSignatureHeader = "x-granary-signature";
inline constexpr std::string_view kCrcHeader = "x-granary-content-crc32c";
// Response headers of an error: the exact Status code name, and whether it is retryable
// ("true"/"false"; HEAD answers carry no body, and a retryable refusal read as final can
// make a copy that did not answer count as lost).
inline constexpr std::string_view kErrorCodeHeader = "x-granary-error-code";
inline constexpr std::string_view kErrorRetryableHeader = "x-granary-error-retryable";

// A request older or newer than this (by the server's clock) is refused.
inline constexpr int64_t kMaxClockSkewSeconds = 15 * 60;

using Headers = std::vector<std::pair<std::string, std::string>>;
// The value of the first header named `name` (lower case), if any.
std::optional<std::string_view> findHeader(const Headers& headers, std::string_view name);

// Percent-encodes every byte but ALPHA / DIGIT / "-" / "." / "_" / "~" (RFC 3986
// unreserved), so any byte string survives a header or a path segment.
std::string percentEncode(std::string_view s);
// Strict inverse: a malformed escape is nullopt; "+" stays "+".
std::optional<std::string> percentDecode(std::string_view s);

// Splits a request target into path and raw query (without the '?').
std::pair<std::string_view, std::string_view> splitTarget(std::string_view target);
// The raw value of query parameter `name` (parameters here never need decoding).
std::optional<std::string_view> queryParam(std::string_view raw_query, std::string_view name);
// Strict decimal parse of an unsigned 64-bit number.
std::optional<uint64_t> parseU64(std::string_view s);

// What the signature covers (docs/internal-api.md, "Authentication").
struct SigningInput {
  std::string_view method;
  std::string_view path;   // as sent, percent-encoded
  std::string_view query;  // raw query as sent; canonicalised before signing
  int64_t date_seconds = 0;
  uint64_t content_length = 0;
  uint32_t body_crc32c = 0;
  // The other x-granary-* request headers (lower-case names), e.g. a PUT's descriptor.
  std::vector<std::pair<std::string_view, std::string_view>> headers;
};
// Whether a request header is one SigningInput::headers carries (x-granary-*, but not the
// date, CRC and signature headers themselves).
bool isSignedHeader(std::string_view lower_case_name);
// Query parameters ("a=b" segments) sorted bytewise and joined with '&'.
std::string canonicalQuery(std::string_view raw_query);
std::string crcHex(uint32_t crc);  // 8 lower-case hex digits
std::optional<uint32_t> parseCrcHex(std::string_view hex);
// Lower-case hex of HMAC-SHA256(secret, string to sign).
std::string signRequest(std::string_view secret, const SigningInput& in);
// kPermissionDenied unless the date is within kMaxClockSkewSeconds of now and the
// signature matches (compared in constant time).
Status verifyRequest(std::string_view secret, const SigningInput& in,
                     std::string_view signature_hex, int64_t now_seconds);

// Errors on the wire: an HTTP status per code, plus the exact code in the
// x-granary-error-code header (HEAD responses carry no body) and a JSON body
// {"code": "...", "message": "...", "retryable": bool}.
int httpStatusFor(Status::Code code);
std::string errorBody(const Status& status);
std::optional<Status::Code> codeFromName(std::string_view name);
// Rebuilds the server's Status from an error response: the header's code wins, then the
// body's, then the HTTP status. Retryable as the body says, else as the retryable header
// says, else (a server older than that header) as Status makes the code: kUnavailable
// and kTimeout retryable.
Status statusFromError(int http_status, std::optional<std::string_view> code_header,
                       std::string_view body,
                       std::optional<std::string_view> retryable_header = std::nullopt);

}  // namespace granary::rpc

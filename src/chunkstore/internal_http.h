// Private helpers of the internal chunk API (docs/internal-api.md), shared by ChunkServer
// and RemoteChunkClient: paths, request signing and verification, Status <-> HTTP error
// mapping, descriptor headers and the JSON bodies. No Beast and no I/O here, so that every
// piece of the wire format is testable on its own and compiles fast.
//
// Change docs/internal-api.md together with this file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "granary/chunkstore/chunk_store.h"
#include "granary/chunkstore/remote_chunk_client.h"
#include "granary/common/ids.h"
#include "granary/common/status.h"

namespace granary::chunkstore::internal {

inline constexpr std::string_view kPrefix = "/internal/v1";

// Request headers (names are lower case; HTTP header names are case-insensitive).
inline constexpr std::string_view kDateHeader = "x-granary-date";
inline constexpr std::string_view kSignatureHeader = "x-granary-signature";
inline constexpr std::string_view kCrcHeader = "x-granary-content-crc32c";
inline constexpr std::string_view kEcHeader = "x-granary-ec";
inline constexpr std::string_view kStripeLenHeader = "x-granary-stripe-len";
inline constexpr std::string_view kBucketHeader = "x-granary-bucket";
inline constexpr std::string_view kKeyHeader = "x-granary-key";
// Response headers.
inline constexpr std::string_view kBlobLengthHeader = "x-granary-blob-length";
inline constexpr std::string_view kCreatedHeader = "x-granary-created-ns";
inline constexpr std::string_view kErrorCodeHeader = "x-granary-error-code";

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

// A blob id on the wire: the 44 lower-case hex digits of BlobId::encode().
std::string blobIdHex(const BlobId& id);
Result<BlobId> parseBlobIdHex(std::string_view hex);

// Paths (already encoded, ready for a request target).
std::string drivesPath();
std::string healthPath();
std::string statsPath(std::string_view drive);
std::string blobListPath(std::string_view drive);
std::string blobPath(std::string_view drive, const BlobId& id);

struct Route {
  enum class Kind { kHealth, kDrives, kStats, kBlobList, kBlob };
  Kind kind = Kind::kHealth;
  std::string drive;  // decoded
  BlobId id;          // kBlob only
};
// Parses the path part of a request target; an unknown path is kInvalidArgument.
Result<Route> parseRoute(std::string_view path);
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
// body's, then the HTTP status.
Status statusFromError(int http_status, std::optional<std::string_view> code_header,
                       std::string_view body);

// Descriptor fields (all but the id, which is in the path) as request headers.
Headers descriptorHeaders(const BlobDescriptor& desc);
Result<BlobDescriptor> parseDescriptor(const BlobId& id, const Headers& headers);

// JSON bodies.
std::string encodeBlobList(const std::vector<BlobInfo>& blobs);
Result<std::vector<BlobInfo>> decodeBlobList(std::string_view json);
std::string encodeStats(const DriveStats& stats);
Result<DriveStats> decodeStats(std::string_view json);
std::string encodeDrives(const std::vector<DriveState>& drives);
Result<std::vector<DriveState>> decodeDrives(std::string_view json);


}  // namespace granary::chunkstore::internal

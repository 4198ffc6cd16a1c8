// S3 additional checksums (x-amz-checksum-crc32, -crc32c, -crc64nvme, -sha1, -sha256):
// which one a PUT asks for, where its expected value comes from (a header, or an
// aws-chunked trailer named by x-amz-trailer), and the streaming computation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "s3_error.h"
#include "s3_request.h"

namespace granary::gateway {

enum class ChecksumAlgorithm { kCrc32, kCrc32c, kCrc64Nvme, kSha1, kSha256 };

std::string_view checksumName(ChecksumAlgorithm alg);    // "CRC32"
std::string checksumHeader(ChecksumAlgorithm alg);       // "x-amz-checksum-crc32"
bool isCrc(ChecksumAlgorithm alg);                       // CRC32, CRC32C, CRC64NVME
// "CRC32" (any case) -> kCrc32; nullopt for anything else.
std::optional<ChecksumAlgorithm> checksumFromName(std::string_view name);

// The algorithm x-amz-checksum-algorithm names (CreateMultipartUpload, CopyObject): nullopt
// without the header; InvalidRequest for an unknown name.
S3Result<std::optional<ChecksumAlgorithm>> checksumAlgorithmHeader(const S3Request& req);

// The algorithm named by x-amz-sdk-checksum-algorithm, when the request carries no value
// (the server then computes it). InvalidRequest for an unknown name.
S3Result<std::optional<ChecksumAlgorithm>> sdkChecksumAlgorithm(const S3Request& req);

// One part's stored checksum (base64) and size, for combining into an object checksum.
struct PartChecksum {
  std::string value;
  uint64_t size = 0;
};
// S3's COMPOSITE checksum of a multipart object: base64(alg(concatenated binary part
// checksums)) + "-" + part count. nullopt if a part value is not valid base64 of the size.
std::optional<std::string> compositeChecksum(ChecksumAlgorithm alg,
                                             const std::vector<PartChecksum>& parts);
// FULL_OBJECT checksum of the concatenated parts from their CRCs (CRC algorithms only).
std::optional<std::string> combinedCrc(ChecksumAlgorithm alg,
                                       const std::vector<PartChecksum>& parts);

struct ChecksumRequest {
  ChecksumAlgorithm algorithm;
  std::optional<std::string> expected;  // base64, from the header; nullopt: from the trailer
};

// The checksum a request asks the server to verify, if any. Errors: InvalidRequest for
// more than one checksum header, an unknown algorithm, or a malformed value.
S3Result<std::optional<ChecksumRequest>> requestedChecksum(const S3Request& req);

// The verdict on a body's additional checksum (`computed`, base64): nullopt when it matches
// or none was asked for; BadDigest when it differs; InvalidRequest when the expected value
// was to come in a trailer that `trailers` lacks.
std::optional<S3Error> checkChecksum(const std::optional<ChecksumRequest>& want,
                                     const std::string& computed,
                                     const std::map<std::string, std::string>& trailers);

// Content-MD5: the 16 bytes it names, nullopt without the header; InvalidDigest when it is
// not base64 of 16 bytes.
S3Result<std::optional<std::vector<uint8_t>>> requestedContentMd5(const S3Request& req);

// Streaming computation of one algorithm; value() is the base64 of the big-endian
// checksum (as S3 sends it).
class Checksummer {
 public:
  explicit Checksummer(ChecksumAlgorithm alg);
  ~Checksummer();
  void update(std::span<const uint8_t> data);
  std::string value();  // once
  ChecksumAlgorithm algorithm() const { return alg_; }

 private:
  struct Impl;
  ChecksumAlgorithm alg_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace granary::gateway

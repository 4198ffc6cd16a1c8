// S3 additional checksums (x-amz-checksum-crc32, -crc32c, -crc64nvme, -sha1, -sha256):
// which one a PUT asks for, where its expected value comes from (a header, or an
// aws-chunked trailer named by x-amz-trailer), and the streaming computation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "s3_error.h"
#include "s3_request.h"

namespace granary::gateway {

enum class ChecksumAlgorithm { kCrc32, kCrc32c, kCrc64Nvme, kSha1, kSha256 };

std::string_view checksumName(ChecksumAlgorithm alg);    // "CRC32"
std::string checksumHeader(ChecksumAlgorithm alg);       // "x-amz-checksum-crc32"

struct ChecksumRequest {
  ChecksumAlgorithm algorithm;
  std::optional<std::string> expected;  // base64, from the header; nullopt: from the trailer
};

// The checksum a request asks the server to verify, if any. Errors: InvalidRequest for
// more than one checksum header, an unknown algorithm, or a malformed value.
S3Result<std::optional<ChecksumRequest>> requestedChecksum(const S3Request& req);

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

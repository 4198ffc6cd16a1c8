// Shared by CopyObject and UploadPartCopy: the x-amz-copy-source header and the sink that
// turns a source's bytes (from readObjectRange, or an inline source's data) into new
// stripes of the destination, hashing them as they pass.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checksum.h"
#include "digest.h"
#include "handlers.h"
#include "keep_alive.h"

namespace granary::gateway {

// AWS: CopyObject copies, and UploadPartCopy copies ranges of, up to 5 GiB.
inline constexpr uint64_t kMaxCopySource = 5ull << 30;

struct CopySource {
  std::string bucket;
  std::string key;
  bool version = false;  // "?versionId=null": reading it is s3:GetObjectVersion
};

// "/bucket/key" or "bucket/key", percent-encoded, optionally "?versionId=null".
S3Result<CopySource> parseCopySource(std::string_view header);

// The source object's manifest, after the x-amz-copy-source-if-* conditions: NoSuchKey /
// NoSuchBucket for a missing source, PreconditionFailed (412) for a failed condition.
Task<S3Result<index_kv::Manifest>> loadCopySource(GatewayContext& ctx, const S3Request& req,
                                                  const CopySource& source);

// What vouches for a copy of a whole source end to end: the source's MD5 ETag (a
// single-part object's), and its full-object checksum computed again from the bytes copied.
// A multipart ETag, a composite checksum, or a copy of a range vouch for nothing.
class CopyCheck {
 public:
  // `whole`: the copy reads every byte of `src`.
  CopyCheck(const index_kv::Manifest& src, bool whole);
  // The algorithm whose value the copied bytes must give, if any.
  std::optional<ChecksumAlgorithm> algorithm() const { return algorithm_; }
  // Empty if the copy's MD5 (hex) and its checksum of algorithm() match the source's (or
  // nothing vouches); else what differs, for the log.
  std::string mismatch(std::string_view md5_hex, std::string_view checksum) const;

 private:
  std::string etag_;  // the source's MD5, hex; empty if its ETag is not one
  std::optional<ChecksumAlgorithm> algorithm_;
  std::string value_;  // the source's full-object checksum of algorithm_
};

// The answer to a copy whose bytes do not match its source (CopyCheck): logged, and
// InternalError, with nothing written.
S3Response copyMismatchResponse(const S3Request& req, const CopySource& source,
                                std::string_view what);

// Receives the source's bytes and cuts them into the destination's stripes, hashing each
// stripe (off the event loop) before it is written: MD5, the additional checksum asked
// for, and the checksum a CopyCheck wants (when another). After the last write: flush(),
// then the writer's finish().
class CopySink final : public BodySink {
 public:
  // `keep_alive`: ticked after each stripe is written (the copy's steps).
  CopySink(GatewayContext& ctx, ObjectWriter& writer, KeepAlive* keep_alive = nullptr,
           std::optional<ChecksumAlgorithm> checksum = std::nullopt,
           std::optional<ChecksumAlgorithm> check = std::nullopt)
      : ctx_(ctx), writer_(writer), keep_alive_(keep_alive) {
    if (checksum) checksum_.emplace(*checksum);
    if (check && check != checksum) check_.emplace(*check);
  }

  Task<Status> writeHead(const S3Response&, uint64_t) override { co_return Status::ok(); }
  Task<Status> write(std::span<const uint8_t> data) override;
  // Starts writing the partly filled last stripe, if any.
  Task<Status> flush();

  std::vector<uint8_t> md5() { return md5_.finish(); }
  // The additional checksum of the bytes (FULL_OBJECT); empty if none was asked for. After
  // the last write (the bytes' checksum is final once asked for).
  index_kv::ObjectChecksum checksum();
  // The bytes' checksum of the `check` algorithm (base64); empty if none was asked for.
  std::string checkValue();

 private:
  GatewayContext& ctx_;
  ObjectWriter& writer_;
  KeepAlive* keep_alive_;
  size_t used_ = 0;
  Digest md5_{Digest::Kind::kMd5};
  std::optional<Checksummer> checksum_;
  std::optional<Checksummer> check_;  // only when another algorithm than checksum_'s
  std::optional<std::string> check_value_;
  std::optional<index_kv::ObjectChecksum> checksum_value_;  // once checksum() made it
};

}  // namespace granary::gateway

// Body ingestion shared by PutObject and UploadPart: payload mode (plain or aws-chunked),
// size checks, MD5 / signed SHA-256 / additional checksum computed as the body streams,
// inline or striped storage through ObjectWriter, verification, and removal of what was
// written when anything fails. The caller commits the result (or, if its commit fails,
// removes the blobs with removeBlobs).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checksum.h"
#include "handlers.h"

namespace granary::gateway {

struct IngestOptions {
  bool allow_inline = true;  // bodies up to options.inline_threshold stay in memory
  bool part = false;         // an UploadPart body (its fragments are marked as a part's)
  uint64_t max_size = 0;     // EntityTooLarge above
  // Runs after the header checks of the payload (mode, size, checksum) and before
  // Content-MD5's, so a caller's own header validation keeps its place in that order.
  std::function<std::optional<S3Error>()> check_headers;
  // The additional checksum every body must carry (UploadPart: the upload's algorithm):
  // computed when the request names none, InvalidRequest when it names another, by value
  // or by x-amz-sdk-checksum-algorithm.
  std::optional<ChecksumAlgorithm> required_checksum;
  // Sees every body byte once, in order, on the worker pool (it may block): the record
  // indexer of a PUT that asked for one. Not called for bytes after a failure.
  std::function<void(std::span<const uint8_t>)> observe;
};

struct IngestResult {
  VersionId version;  // blob version of the stripes (minted at the start of the ingest)
  uint64_t size = 0;
  std::vector<uint8_t> md5;  // 16 bytes
  // The verified additional checksum, or the one computed for x-amz-sdk-checksum-algorithm
  // sent without a value (or options.required_checksum).
  std::optional<ChecksumAlgorithm> checksum_algorithm;
  std::string checksum;  // base64, when checksum_algorithm is set
  bool is_inline = false;
  std::string inline_data;
  std::vector<std::string> drives;
  std::vector<index_kv::StripeLayout> stripes;
};

struct IngestFailure {
  S3Error error;
  bool close = false;  // the body was partly read: the connection cannot be reused
};

// Nothing of the body is left stored when this fails.
Task<std::expected<IngestResult, IngestFailure>> ingestBody(GatewayContext& ctx,
                                                            const S3Request& req,
                                                            const RequestAuth& auth,
                                                            BodySource& body,
                                                            const IngestOptions& options);

// RequestTimeout once the write of blob version `version` (minted when it began) has taken
// longer than options.max_put_seconds: the orphan sweep removes unreferenced blobs older
// than twice that, so such a write may have lost fragments and must not commit. Every
// writer of blobs (a PUT's body, a copy) asks just before its commit.
std::optional<S3Error> writeOverdue(const GatewayContext& ctx, const VersionId& version);

// Whether a failed index commit certainly did not take effect, so that what it would have
// published (blobs, record rows) may be removed at once. A commit whose answer was lost
// (a timeout, a connection that failed after the request went out: the remote index of
// cluster mode) may have happened: what it wrote is left to the orphan sweeps, which
// remove it only if no manifest references it.
bool commitRefused(const Status& st);

// Best-effort removal of the blobs of `stripes`, after a commit refused (commitRefused):
// after any other failure it does nothing.
Task<void> removeBlobs(GatewayContext& ctx, const Status& commit_error,
                       const std::vector<std::string>& drives,
                       const std::vector<index_kv::StripeLayout>& stripes);

// Stored system headers, x-amz-meta-* and Content-Type of a PUT or CreateMultipartUpload;
// Content-Encoding minus the transfer-only "aws-chunked". MetadataTooLarge over 2 KB.
S3Result<void> collectMetadata(const S3Request& req, index_kv::Manifest& m);
// The x-amz-tagging header into m.tags (none when absent); parseTaggingHeader's errors.
S3Result<void> collectTags(const S3Request& req, index_kv::Manifest& m);

}  // namespace granary::gateway

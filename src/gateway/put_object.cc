// PutObject: streams the body (plain or aws-chunked) into stripes, or into the manifest
// when it is small (ingest.h), and commits the manifest only after every fragment is
// durable and the payload hashes are verified.
#include "granary/common/clock.h"
#include "granary/common/hex.h"
#include "handlers.h"
#include "ingest.h"
#include "records.h"

namespace granary::gateway {

Task<std::optional<S3Error>> missingBucketOfRoot(GatewayContext& ctx, const S3Request& req) {
  if (req.bucket_created_unix_nanos != 0) co_return std::nullopt;
  auto bucket = co_await lookupBucket(ctx, req.bucket);
  if (bucket) co_return std::nullopt;
  co_return fromStatus(bucket.error(), S3ErrorCode::kNoSuchBucket);
}

Task<S3Response> putObject(GatewayContext& ctx, const S3Request& req, const RequestAuth& auth,
                           BodySource& body) {
  // A PUT to a missing bucket is answered before its body is asked for, not after storing it.
  if (auto missing = co_await missingBucketOfRoot(ctx, req)) {
    co_return errorResponse(*missing, req, body);
  }
  auto precondition = co_await writePrecondition(ctx, req);
  if (!precondition) {
    co_return errorResponse(precondition.error(), req, body);
  }
  auto index_request = co_await resolveIndexRequest(ctx, req);
  if (!index_request) {
    co_return errorResponse(index_request.error(), req, body);
  }
  std::unique_ptr<RecordIndexer> indexer;
  if (*index_request && !(*index_request)->format_name.empty()) {
    indexer = std::make_unique<RecordIndexer>(
        ctx.index(), req.bucket, req.key, VersionId::generate(ctx.deps.clock, ctx.deps.random),
        **index_request, std::chrono::seconds(ctx.options.max_put_seconds));
  }
  index_kv::Manifest m;
  IngestOptions options;
  if (indexer) options.observe = [&](std::span<const uint8_t> data) { indexer->feed(data); };
  options.max_size = ctx.options.max_object_size;
  options.check_headers = [&]() -> std::optional<S3Error> {
    if (auto st = collectMetadata(req, m); !st) return st.error();
    if (auto st = collectTags(req, m); !st) return st.error();
    return std::nullopt;
  };
  auto ingested = co_await ingestBody(ctx, req, auth, body, options);
  if (!ingested) {
    if (indexer) co_await offload(ctx.pool(), [&] {
      indexer->abandon();
      return 0;
    });
    S3Response res = errorResponse(ingested.error().error, req);
    res.close = ingested.error().close;
    co_return res;
  }
  IngestResult& in = *ingested;

  m.version = in.version;
  m.ec = ctx.data.code().profile();
  m.size = in.size;
  m.etag = toHex(in.md5);
  m.mtime_unix_nanos = ctx.deps.clock.nowUnixNanos();
  m.is_inline = in.is_inline;
  m.inline_data = std::move(in.inline_data);
  m.drives = in.drives;
  m.stripes = in.stripes;
  if (in.checksum_algorithm) {
    m.checksum = index_kv::ObjectChecksum{std::string(checksumName(*in.checksum_algorithm)),
                                          in.checksum, "FULL_OBJECT"};
  }
  if (indexer) m.records = co_await offload(ctx.pool(), [&] { return indexer->finish(); });
  // Checked again just before each commit: once a version is older than the longest a PUT
  // may take, the orphan sweep may be taking its fragments (indexing a large container,
  // or a retry, can take that long after the body ended). Refused: our blobs go.
  std::optional<S3Error> overdue;
  auto commit = [&]() -> Task<Result<std::optional<VersionId>>> {
    overdue = writeOverdue(ctx, m.version);
    if (overdue) co_return fail(Status::preconditionFailed(overdue->message));
    co_return co_await commitObject(ctx, req.bucket, req.key, m, *precondition);
  };
  auto committed = co_await commit();
  if (!committed && !overdue) {
    if (auto plain = retryWithoutRecords(m.records, committed.error())) {
      // A swept record set is refused, not the upload: store the object unindexed (if
      // the request's own precondition failed, it fails again, as it should).
      m.records = *plain;
      committed = co_await commit();
    }
  }
  // Rows no commit published (and none that may have): the record sweep gets the others.
  if (indexer && (committed ? m.records.set.isZero() : commitRefused(committed.error()))) {
    co_await offload(ctx.pool(), [&] {
      indexer->abandon();
      return 0;
    });
  }
  if (!committed) {
    // A commit's kNotFound is the bucket's: gone, or deleted and created again since
    // authorization (the precondition names its creation time).
    S3Error err = overdue ? *overdue : writeCommitError(committed.error(), *precondition);
    co_await removeBlobs(ctx, committed.error(), in.drives, in.stripes);
    S3Response res = errorResponse(err, req);
    res.close = !body.done();
    co_return res;
  }
  S3Response res;
  res.set("ETag", "\"" + m.etag + "\"");
  setRecordIndexHeaders(res, m.records);
  ctx.metrics.containerIndexed(m.records);
  if (in.checksum_algorithm) {
    res.set(checksumHeader(*in.checksum_algorithm), in.checksum);
    res.set("x-amz-checksum-type", "FULL_OBJECT");
  }
  co_return res;
}

}  // namespace granary::gateway

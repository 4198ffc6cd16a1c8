// DeleteObjects: POST /bucket?delete with up to 1000 keys. Every delete is queued at once
// (index_commit.cc), so the index's commit queue merges them into a few synced batches.
#include "handlers.h"
#include "s3_xml.h"

namespace granary::gateway {

Task<S3Response> deleteObjects(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  // 1000 keys of up to 1024 bytes, plus markup; a digest required, so that a replay of a
  // request whose signature does not cover the body cannot delete other keys.
  auto xml =
      co_await readSmallBody(req, body, 2 * 1024 * 1024, ChecksumHeaderOf::kBodyRequired);
  if (!xml) co_return errorResponse(xml.error(), req);
  auto parsed = parseDeleteObjects(*xml);
  if (!parsed) co_return errorResponse(parsed.error(), req);

  auto bucket = co_await lookupBucket(ctx, req.bucket);
  if (!bucket) co_return errorResponse(fromStatus(bucket.error(), S3ErrorCode::kNoSuchBucket), req);
  // The body came after authorization: a bucket of this name made since by another is not
  // the one judged (nor is one made after this lookup: each removal's commit checks too).
  if (!isJudgedBucket(req, *bucket)) {
    co_return errorResponse(noSuchBucket(), req);
  }

  // Every key's removal is queued at once: the index commits them in a few synced batches.
  std::vector<DeleteOutcome> outcomes(parsed->objects.size());
  std::vector<Result<std::optional<VersionId>>> removed(parsed->objects.size());
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  TaskGroup group(ctx.pool(), ex);
  // If this frame unwinds (an exception) with removals queued, their answers must not
  // land in freed `removed`.
  IdleBeforeFreed removed_before_freed(group);
  std::vector<int8_t> conditions_held;  // the policy's conditions, judged once per request
  for (size_t i = 0; i < parsed->objects.size(); ++i) {
    outcomes[i].key = parsed->objects[i].key;
    outcomes[i].version_id = parsed->objects[i].version_id;
    // The same key rules as every other request's (length, NUL, UTF-8).
    if (outcomes[i].key.empty()) {
      outcomes[i].error = S3Error{S3ErrorCode::kInvalidArgument, "Invalid key"};
      continue;
    }
    if (auto bad = checkObjectKey(outcomes[i].key); !bad) {
      outcomes[i].error = std::move(bad.error());
      continue;
    }
    // Every object has the one version "null" (no versioning); another id names nothing,
    // and must not delete the object (as DeleteObject?versionId= answers).
    if (outcomes[i].version_id && *outcomes[i].version_id != "null") {
      outcomes[i].error = invalidVersionId();
      continue;
    }
    // The bucket policy may allow deleting some keys and not others.
    if (auto denied = authorizeDelete(req, *bucket, outcomes[i].key,
                                      outcomes[i].version_id.has_value(), &conditions_held)) {
      outcomes[i].error = std::move(*denied);
      continue;
    }
    // <ETag>: a conditional delete of this key (its current object must have that ETag).
    auto pre = index_kv::Precondition::none();
    if (parsed->objects[i].etag) {
      auto matched =
          co_await matchCondition(ctx, req.bucket, outcomes[i].key, *parsed->objects[i].etag);
      if (!matched) {
        outcomes[i].error = std::move(matched.error());
        continue;
      }
      pre = std::move(*matched);
    }
    pre.bucket_created_unix_nanos = req.bucket_created_unix_nanos;
    removeObjectIn(group, ctx, req.bucket, outcomes[i].key, std::move(pre), removed[i]);
  }
  (void)co_await group.wait();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (!removed[i]) outcomes[i].error = fromStatus(removed[i].error(), S3ErrorCode::kNoSuchBucket);
  }
  co_return xmlResponse(deleteResultXml(outcomes, parsed->quiet));
}

}  // namespace granary::gateway

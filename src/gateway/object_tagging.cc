// GetObjectTagging, PutObjectTagging and DeleteObjectTagging. Tags live in the object's
// manifest; changing them rewrites the manifest of the same version (the ETag and
// Last-Modified stay, as in S3) with a compare-and-swap on the manifest read
// (Index::updateObjectTags), retried when a concurrent repair or tag change won.
#include "handlers.h"
#include "s3_xml.h"

namespace granary::gateway {
namespace {

constexpr int kTagAttempts = 8;
constexpr size_t kMaxTaggingBody = 64 << 10;

Task<S3Result<void>> setTags(GatewayContext& ctx, const S3Request& req, const TagSet& tags) {
  for (int attempt = 0; attempt < kTagAttempts; ++attempt) {
    auto current = co_await loadObject(ctx, req.bucket, req.key);
    if (!current) co_return std::unexpected(current.error());
    if (current->tags == tags) co_return S3Result<void>();
    // The body came after authorization: the bucket may have been re-made by another since.
    // Asked after the read: a bucket re-made later cannot hold `current`'s version, which
    // updateObjectTags requires.
    if (auto gone = co_await bucketStillJudged(ctx, req)) co_return std::unexpected(*gone);
    index_kv::Manifest updated = *current;
    updated.tags = tags;
    const Status st = co_await offload(ctx.pool(), [&] {
      return ctx.index().updateObjectTags(req.bucket, req.key, *current, updated);
    });
    if (st.isOk()) co_return S3Result<void>();
    // Overwritten, repaired or re-tagged since it was read: read it again. Deleted: the
    // next read says NoSuchKey.
    if (st.code() != Status::Code::kPreconditionFailed && !st.isNotFound()) {
      co_return std::unexpected(fromStatus(st));
    }
  }
  co_return s3fail(S3ErrorCode::kSlowDown,
                   "The object changed under every attempt to change its tags; retry.");
}

}  // namespace

Task<S3Response> getObjectTagging(GatewayContext& ctx, const S3Request& req) {
  auto manifest = co_await loadObject(ctx, req.bucket, req.key);
  if (!manifest) co_return errorResponse(manifest.error(), req);
  co_return xmlResponse(taggingXml(manifest->tags));
}

Task<S3Response> putObjectTagging(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  auto xml =
      co_await readSmallBody(req, body, kMaxTaggingBody, ChecksumHeaderOf::kBodyUnlessSigned);
  if (!xml) co_return errorResponse(xml.error(), req, body);
  auto tags = parseTagging(*xml);
  if (!tags) co_return errorResponse(tags.error(), req);
  auto set = co_await setTags(ctx, req, *tags);
  if (!set) co_return errorResponse(set.error(), req);
  co_return S3Response{};
}

Task<S3Response> deleteObjectTagging(GatewayContext& ctx, const S3Request& req) {
  auto set = co_await setTags(ctx, req, TagSet{});
  if (!set) co_return errorResponse(set.error(), req);
  S3Response res;
  res.status = 204;
  co_return res;
}

}  // namespace granary::gateway

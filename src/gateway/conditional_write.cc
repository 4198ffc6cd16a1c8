// Conditional writes (PutObject, CompleteMultipartUpload, CopyObject): If-None-Match: *
// and If-Match: <etag>; conditional deletes (DeleteObject's If-Match, DeleteObjects'
// <ETag>). Checked against the current object before any body is read, so a doomed upload
// fails fast, and enforced again atomically by the index's compare-and-swap at commit, so
// two racing conditional writers (or a writer and a conditional delete) cannot both win.
#include "handlers.h"

namespace granary::gateway {

namespace {
std::string_view unquote(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

S3Error preconditionFailed() {
  return {S3ErrorCode::kPreconditionFailed,
          "At least one of the pre-conditions you specified did not hold"};
}

Task<S3Result<index_kv::Precondition>> objectCondition(GatewayContext& ctx,
                                                       const S3Request& req) {
  auto if_none_match = req.header("if-none-match");
  auto if_match = req.header("if-match");
  if (!if_none_match && !if_match) co_return index_kv::Precondition::none();
  if (if_none_match && *if_none_match != "*") {
    co_return s3fail(S3ErrorCode::kNotImplemented,
                     "Conditional writes support only If-None-Match: *");
  }
  if (if_match) {
    auto matched = co_await matchCondition(ctx, req.bucket, req.key, *if_match);
    // With If-None-Match: * too, the pair can never hold (RFC 9110: the key must exist for
    // the one and not for the other): a key that matched fails the second.
    if (matched && if_none_match) co_return std::unexpected(preconditionFailed());
    co_return matched;
  }
  auto current = co_await lookupObject(ctx, req.bucket, req.key);
  if (!current && !current.error().isNotFound()) co_return std::unexpected(fromStatus(current.error()));
  if (current) {
    co_return std::unexpected(preconditionFailed());
  }
  co_return index_kv::Precondition::mustNotExist();
}

}  // namespace

Task<S3Result<index_kv::Precondition>> matchCondition(GatewayContext& ctx,
                                                      std::string_view bucket,
                                                      std::string_view key,
                                                      std::string_view etag) {
  auto current = co_await lookupObject(ctx, bucket, key);
  if (!current) {
    if (!current.error().isNotFound()) co_return std::unexpected(fromStatus(current.error()));
    S3Error err = co_await objectNotFound(ctx, bucket, current.error());
    co_return std::unexpected(err);
  }
  if (unquote(etag) != "*" && unquote(etag) != current->etag) {
    co_return std::unexpected(preconditionFailed());
  }
  co_return index_kv::Precondition::mustMatch(current->version);
}

S3Error writeCommitError(const Status& st, const index_kv::Precondition& pre) {
  if (st.code() == Status::Code::kPreconditionFailed &&
      pre.kind != index_kv::Precondition::Kind::kNone) {
    return {S3ErrorCode::kConditionalRequestConflict,
            "A conflicting operation occurred. If using PutObject you can retry the request. "
            "If using multipart upload you should initiate another CreateMultipartUpload "
            "request and re-upload each part."};
  }
  return fromStatus(st, S3ErrorCode::kNoSuchBucket);
}

Task<S3Result<index_kv::Precondition>> deletePrecondition(GatewayContext& ctx,
                                                          const S3Request& req) {
  auto pre = index_kv::Precondition::none();
  if (auto if_match = req.header("if-match")) {
    auto matched = co_await matchCondition(ctx, req.bucket, req.key, *if_match);
    if (!matched) co_return matched;
    pre = std::move(*matched);
  }
  pre.bucket_created_unix_nanos = req.bucket_created_unix_nanos;
  co_return pre;
}

Task<S3Result<index_kv::Precondition>> writePrecondition(GatewayContext& ctx,
                                                         const S3Request& req) {
  auto pre = co_await objectCondition(ctx, req);
  // The object goes into the bucket authorization judged, or nowhere.
  if (pre) pre->bucket_created_unix_nanos = req.bucket_created_unix_nanos;
  co_return pre;
}

}  // namespace granary::gateway

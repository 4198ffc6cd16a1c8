// Who may do what (docs/operations.md, "Users and access"):
//  - the root user: everything;
//  - a named user: create buckets, list its own, and every operation on the buckets it
//    owns;
//  - anyone, anonymous requests included: reads (GET/HEAD of objects and records, listing)
//    of a bucket whose ACL is public-read;
//  - nothing else (AccessDenied).
#include <algorithm>
#include <array>

#include "handlers.h"

namespace granary::gateway {
namespace {

// Query parameters a public read may carry: listing (objects and their versions, as S3's
// READ on a bucket allows), record reads, and
// the x-id that the AWS SDKs add to every request. Anything else (acl, lifecycle,
// uploads, location, ...) is the owner's.
constexpr std::array kPublicReadParams = {
    "list-type", "prefix",   "delimiter", "max-keys", "continuation-token", "start-after",
    "encoding-type", "fetch-owner", "marker", "x-id",  "record",  "records", "key",
    "after",     "container", "format",   "max-records", "raw", "versions", "key-marker",
    "version-id-marker", "partNumber"};

bool isPublicRead(const S3Request& req) {
  if (req.method != "GET" && req.method != "HEAD") return false;
  return std::all_of(req.query.begin(), req.query.end(), [&](const auto& param) {
    const std::string& name = param.first;
    // response-* overrides: a signed reader's only (AWS refuses them on anonymous GETs:
    // anyone could have a public object served as text/html).
    if (name.starts_with("response-")) return !req.principal.empty();
    return std::find_if(kPublicReadParams.begin(), kPublicReadParams.end(),
                        [&](const char* p) { return name == p; }) != kPublicReadParams.end();
  });
}

S3Error accessDenied() { return {S3ErrorCode::kAccessDenied, "Access Denied"}; }

// May `req`'s sender use `bucket`? With `read_only`, only reading is asked for (the
// source of a copy), otherwise what `req` itself does.
Task<std::optional<S3Error>> bucketAccess(GatewayContext& ctx, const S3Request& req,
                                          std::string_view bucket, bool read_only) {
  if (req.root) co_return std::nullopt;
  const bool anonymous = req.principal.empty();
  auto info = co_await lookupBucket(ctx, bucket);
  if (!info) {
    // A bucket that does not exist: the handler answers NoSuchBucket to a user; an
    // anonymous request learns nothing.
    if (info.error().isNotFound() && !anonymous) co_return std::nullopt;
    if (info.error().isNotFound()) co_return accessDenied();
    co_return fromStatus(info.error());
  }
  if (!anonymous && info->owner == req.principal) co_return std::nullopt;
  if (info->public_read && (read_only || isPublicRead(req))) co_return std::nullopt;
  co_return accessDenied();
}

}  // namespace

Task<std::optional<S3Error>> authorizeRequest(GatewayContext& ctx, const S3Request& req) {
  if (req.root) co_return std::nullopt;
  const bool anonymous = req.principal.empty();
  if (req.bucket.empty()) {
    // ListBuckets: a user sees its own buckets.
    if (anonymous) co_return accessDenied();
    co_return std::nullopt;
  }
  if (!anonymous && req.key.empty() && req.method == "PUT" && req.query.empty()) {
    co_return std::nullopt;  // CreateBucket: the handler answers if the name is taken
  }
  co_return co_await bucketAccess(ctx, req, req.bucket, /*read_only=*/false);
}

Task<std::optional<S3Error>> authorizeRead(GatewayContext& ctx, const S3Request& req,
                                           std::string_view bucket) {
  co_return co_await bucketAccess(ctx, req, bucket, /*read_only=*/true);
}

}  // namespace granary::gateway

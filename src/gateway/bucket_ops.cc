// ListBuckets, CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation, and the bucket
// settings: ACL (canned private / public-read), lifecycle and CORS configuration, tags.
#include <fmt/core.h>
#include <nlohmann/json.hpp>


#include "granary/common/clock.h"
#include "granary/common/strings.h"
#include "granary/index_kv/index.h"
#include "handlers.h"
#include "bucket_policy.h"
#include "checksum.h"
#include "digest.h"
#include "s3_xml.h"
#include "xml_writer.h"

namespace granary::gateway {

S3Response xmlResponse(std::string body) {
  S3Response res;
  res.set("Content-Type", "application/xml");
  res.body = std::move(body);
  return res;
}

S3Response jsonResponse(const nlohmann::json& j, int indent) {
  S3Response res;
  res.set("Content-Type", "application/json");
  // Keys are client input: replace invalid UTF-8 rather than throw.
  res.body = j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
  res.body.push_back('\n');
  return res;
}

namespace {

// Bucket naming rules (general purpose buckets): 3-63 characters of lower-case letters,
// digits, '.', '-'; begins and ends with a letter or digit; no "..", not an IP address.
bool validBucketName(std::string_view name) {
  if (name.size() < 3 || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  bool all_digits_dots = true;
  size_t dots = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!alnum(c) && c != '.' && c != '-') return false;
    if (c == '.' && i + 1 < name.size() && (name[i + 1] == '.' || name[i + 1] == '-')) {
      return false;
    }
    if (c == '-' && i + 1 < name.size() && name[i + 1] == '.') return false;
    if (c == '.') ++dots;
    if (!(c == '.' || (c >= '0' && c <= '9'))) all_digits_dots = false;
  }
  // IP-address shaped (192.168.5.4): four groups of digits. "20240101" and "2024.01.01"
  // are names (as S3 and MinIO take them).
  return !(all_digits_dots && dots == 3);
}

}  // namespace

std::chrono::seconds smallBodyDeadline(size_t limit) {
  // A minute, and a second for each 16 KiB the body may hold (8 MiB: about 10 minutes),
  // at most the half hour a PUT has by default.
  return std::min(std::chrono::seconds(60 + limit / (16 * 1024)), std::chrono::seconds(1800));
}

Task<S3Result<std::string>> readSmallBody(const S3Request& req, BodySource& body, size_t limit,
                                          ChecksumHeaderOf checksum_of) {
  // The headers are checked before the body is read: a malformed one needs no body.
  auto md5 = requestedContentMd5(req);
  if (!md5) co_return std::unexpected(md5.error());
  std::optional<ChecksumRequest> checksum;
  if (checksum_of != ChecksumHeaderOf::kObject) {
    auto requested = requestedChecksum(req);
    if (!requested) co_return std::unexpected(requested.error());
    checksum = *requested;
  }
  const bool undigested = !*md5 && !(checksum && checksum->expected);
  const auto missingDigest = [] {
    return s3fail(S3ErrorCode::kInvalidRequest,
                  "Missing required header for this request: Content-MD5 OR x-amz-checksum-*");
  };
  if (checksum_of == ChecksumHeaderOf::kBodyRequired && undigested) co_return missingDigest();
  body.setDeadline(std::chrono::steady_clock::now() + smallBodyDeadline(limit));
  std::string out;
  uint8_t buf[16 * 1024];
  for (;;) {
    auto n = co_await body.read(buf);
    if (!n) co_return std::unexpected(n.error());
    if (*n == 0) break;
    if (out.size() + *n > limit) {
      co_return s3fail(S3ErrorCode::kMaxMessageLengthExceeded,
                       "Your request was too big.");
    }
    out.append(reinterpret_cast<const char*>(buf), *n);
  }
  // An empty body needs no digest: a canned ACL (x-amz-acl alone), which a replay could
  // not give a body (an ACL in both is refused).
  if (checksum_of == ChecksumHeaderOf::kBodyUnlessSigned && undigested && !out.empty() &&
      req.signed_payload_hash.empty()) {
    co_return missingDigest();
  }
  if (!req.signed_payload_hash.empty()) {
    if (!asciiIEquals(sha256Hex(out), req.signed_payload_hash)) {
      co_return s3fail(S3ErrorCode::kXAmzContentSHA256Mismatch,
                       "The provided 'x-amz-content-sha256' header does not match what was "
                       "computed.");
    }
  }
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(out.data()), out.size());
  if (*md5) {
    Digest digest(Digest::Kind::kMd5);
    digest.update(bytes);
    if (digest.finish() != **md5) {
      co_return s3fail(S3ErrorCode::kBadDigest,
                       "The Content-MD5 you specified did not match what we received.");
    }
  }
  if (checksum) {
    Checksummer computed(checksum->algorithm);
    computed.update(bytes);
    // A small body is never aws-chunked here, so a checksum promised in a trailer is
    // missing (InvalidRequest).
    if (auto err = checkChecksum(checksum, computed.value(), {})) co_return std::unexpected(*err);
  }
  co_return out;
}

Task<S3Response> listBuckets(GatewayContext& ctx, const S3Request& req) {
  ListBucketsPage page;
  page.owner_id = ctx.credentials.ownerId(req.principal);
  page.region = ctx.options.region;
  page.prefix = std::string(req.queryValue("prefix").value_or(""));
  size_t max_buckets = SIZE_MAX;  // without max-buckets, every bucket, as S3 answers
  if (auto v = req.queryValue("max-buckets")) {
    const auto n = parseDecimalU64(*v);
    if (!n || *n < 1 || *n > 10'000) {
      co_return errorResponse({S3ErrorCode::kInvalidArgument,
                               "max-buckets must be an integer between 1 and 10000"},
                              req);
    }
    max_buckets = *n;
  }
  std::string after;
  if (auto token = req.queryValue("continuation-token")) {
    auto decoded = decodeToken(*token);
    if (!decoded || decoded->empty()) {
      co_return errorResponse(
          {S3ErrorCode::kInvalidArgument, "The continuation token provided is incorrect"}, req);
    }
    after = std::move(*decoded);
  }
  // One region: asking for another lists nothing.
  const auto region = req.queryValue("bucket-region");
  if (region && *region != ctx.options.region) co_return xmlResponse(listBucketsXml(page));
  auto buckets = co_await offload(ctx.pool(), [&] { return ctx.index().listBuckets(); });
  if (!buckets) co_return errorResponse(fromStatus(buckets.error()), req);
  for (auto& b : *buckets) {  // in name order
    if (!(req.root || b.owner == req.principal) || !b.name.starts_with(page.prefix) ||
        (!after.empty() && b.name <= after)) {
      continue;
    }
    if (page.buckets.size() == max_buckets) {
      page.continuation_token = encodeToken(page.buckets.back().name);
      break;
    }
    page.buckets.push_back(std::move(b));
  }
  co_return xmlResponse(listBucketsXml(page));
}

Task<S3Response> createBucket(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  if (!validBucketName(req.bucket)) {
    co_return errorResponse({S3ErrorCode::kInvalidBucketName,
                             "The specified bucket is not valid."},
                            req);
  }
  auto xml = co_await readSmallBody(req, body, 64 * 1024);
  if (!xml) co_return errorResponse(xml.error(), req);
  auto location = parseCreateBucketConfiguration(*xml);
  if (!location) co_return errorResponse(location.error(), req);
  auto public_read = cannedAclPublicRead(req);
  if (!public_read) co_return errorResponse(public_read.error(), req);

  index_kv::BucketInfo info;
  info.name = req.bucket;
  info.owner = req.principal;
  info.created_unix_nanos = ctx.deps.clock.nowUnixNanos();
  info.public_read = *public_read;
  Status st = co_await offload(ctx.pool(), [&] { return ctx.index().createBucket(info); });
  if (st.code() == Status::Code::kAlreadyExists) {
    auto existing = co_await lookupBucket(ctx, req.bucket);
    if (existing && existing->owner == req.principal) {
      co_return errorResponse({S3ErrorCode::kBucketAlreadyOwnedByYou,
                               "Your previous request to create the named bucket succeeded and "
                               "you already own it."},
                              req);
    }
    co_return errorResponse({S3ErrorCode::kBucketAlreadyExists,
                             "The requested bucket name is not available."},
                            req);
  }
  if (!st.isOk()) co_return errorResponse(fromStatus(st), req);
  S3Response res;
  res.set("Location", "/" + req.bucket);
  co_return res;
}

Task<S3Response> headBucket(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  S3Response res;
  res.set("x-amz-bucket-region", ctx.options.region);
  co_return res;
}

Task<S3Response> deleteBucket(GatewayContext& ctx, const S3Request& req) {
  // Only the bucket authorization judged: not one of its name made since by another.
  Status st = co_await offload(ctx.pool(), [&] {
    return ctx.index().deleteBucket(req.bucket, req.bucket_created_unix_nanos);
  });
  if (st.code() == Status::Code::kNotEmpty) {
    co_return errorResponse({S3ErrorCode::kBucketNotEmpty,
                             "The bucket you tried to delete is not empty"},
                            req);
  }
  if (!st.isOk()) co_return errorResponse(fromStatus(st, S3ErrorCode::kNoSuchBucket), req);
  S3Response res;
  res.status = 204;
  co_return res;
}

Task<S3Response> getBucketLocation(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  co_return xmlResponse(locationXml(ctx.options.region));
}

namespace {

constexpr AbsentSetting kAbsentSettings[] = {
    {.param = "logging", .op = "GetBucketLogging", .root = "BucketLoggingStatus"},
    {.param = "accelerate", .op = "GetBucketAccelerateConfiguration",
     .root = "AccelerateConfiguration"},
    {.param = "requestPayment", .op = "GetBucketRequestPayment",
     .root = "RequestPaymentConfiguration", .child = "Payer", .child_value = "BucketOwner"},
    {.param = "notification", .op = "GetBucketNotificationConfiguration",
     .root = "NotificationConfiguration"},
    {.param = "encryption", .op = "GetBucketEncryption", .delete_op = "DeleteBucketEncryption",
     .error = S3ErrorCode::kServerSideEncryptionConfigurationNotFoundError,
     .message = "The server side encryption configuration was not found"},
    {.param = "website", .op = "GetBucketWebsite", .delete_op = "DeleteBucketWebsite",
     .error = S3ErrorCode::kNoSuchWebsiteConfiguration,
     .message = "The specified bucket does not have a website configuration"},
    {.param = "replication", .op = "GetBucketReplication", .delete_op = "DeleteBucketReplication",
     .error = S3ErrorCode::kReplicationConfigurationNotFoundError,
     .message = "The replication configuration was not found"},
    // No DeleteObjectLockConfiguration in S3: once enabled, object lock stays.
    {.param = "object-lock", .op = "GetObjectLockConfiguration",
     .error = S3ErrorCode::kObjectLockConfigurationNotFoundError,
     .message = "Object Lock configuration does not exist for this bucket"},
    {.param = "ownershipControls", .op = "GetBucketOwnershipControls",
     .delete_op = "DeleteBucketOwnershipControls",
     .error = S3ErrorCode::kOwnershipControlsNotFoundError,
     .message = "The bucket ownership controls were not found"},
    {.param = "publicAccessBlock", .op = "GetPublicAccessBlock",
     .delete_op = "DeletePublicAccessBlock",
     .error = S3ErrorCode::kNoSuchPublicAccessBlockConfiguration,
     .message = "The public access block configuration was not found"},
};

}  // namespace

const AbsentSetting* findAbsentBucketSetting(const S3Request& req) {
  for (const AbsentSetting& s : kAbsentSettings) {
    if (req.hasQuery(s.param)) return &s;
  }
  return nullptr;
}

Task<S3Response> getAbsentBucketSetting(GatewayContext& ctx, const S3Request& req,
                                        const AbsentSetting& setting) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  if (setting.root.empty()) {
    co_return errorResponse({setting.error, std::string(setting.message)}, req);
  }
  XmlWriter xml(setting.root);
  if (!setting.child.empty()) xml.element(setting.child, setting.child_value);
  co_return xmlResponse(std::move(xml).finish());
}

Task<S3Response> deleteAbsentBucketSetting(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  S3Response res;
  res.status = 204;
  co_return res;
}

Task<Result<index_kv::BucketInfo>> lookupBucket(GatewayContext& ctx, std::string_view name) {
  if (auto hit = ctx.index().getBucketFromMemory(name)) co_return std::move(*hit);
  co_return co_await offload(ctx.pool(), [&] { return ctx.index().getBucket(name); });
}

Task<Result<index_kv::Manifest>> lookupObject(GatewayContext& ctx, std::string_view bucket,
                                              std::string_view key) {
  if (auto hit = ctx.index().getObjectFromMemory(bucket, key)) co_return std::move(*hit);
  co_return co_await offload(ctx.pool(), [&] { return ctx.index().getObject(bucket, key); });
}

Task<S3Error> objectNotFound(GatewayContext& ctx, std::string_view bucket, const Status& st) {
  if (!st.isNotFound()) co_return fromStatus(st);
  auto b = co_await lookupBucket(ctx, bucket);
  if (!b && b.error().isNotFound()) {
    co_return noSuchBucket();
  }
  co_return S3Error{S3ErrorCode::kNoSuchKey, "The specified key does not exist."};
}

Task<S3Result<index_kv::Manifest>> loadObject(GatewayContext& ctx, std::string_view bucket,
                                              std::string_view key) {
  auto manifest = co_await lookupObject(ctx, bucket, key);
  if (!manifest) {
    S3Error err = co_await objectNotFound(ctx, bucket, manifest.error());
    co_return std::unexpected(std::move(err));
  }
  co_return std::move(*manifest);
}

// ---- bucket settings -----------------------------------------------------------------

Task<S3Result<index_kv::BucketInfo>> changeBucket(
    GatewayContext& ctx, const S3Request& req,
    std::function<void(index_kv::BucketInfo&)> change) {
  // The first read may come from memory; after a conflict, from the index itself.
  auto read = co_await lookupBucket(ctx, req.bucket);
  for (int attempt = 0; attempt < kBucketChangeAttempts; ++attempt) {
    if (attempt > 0) {
      read = co_await offload(ctx.pool(), [&] { return ctx.index().getBucket(req.bucket); });
    }
    if (!read) co_return std::unexpected(fromStatus(read.error(), S3ErrorCode::kNoSuchBucket));
    if (!isJudgedBucket(req, *read)) {
      // Deleted and created again since authorization judged the request: not this one's.
      co_return std::unexpected(noSuchBucket());
    }
    index_kv::BucketInfo changed = *read;
    change(changed);
    if (changed == *read) co_return changed;  // nothing to write (a delete of what is absent)
    Status st =
        co_await offload(ctx.pool(), [&] { return ctx.index().updateBucket(changed, *read); });
    if (st.isOk()) co_return changed;
    if (st.code() != Status::Code::kPreconditionFailed) {
      co_return std::unexpected(fromStatus(st, S3ErrorCode::kNoSuchBucket));
    }
  }
  co_return std::unexpected(S3Error{S3ErrorCode::kOperationAborted,
                                    "A conflicting conditional operation is currently in "
                                    "progress against this resource. Please try again."});
}

namespace {

// A change answered 204 (PutBucketTagging; DeleteBucketLifecycle, -Cors, -Tagging, also
// when the setting was not set, as S3 answers).
Task<S3Response> changeSetting(GatewayContext& ctx, const S3Request& req,
                               std::function<void(index_kv::BucketInfo&)> change) {
  auto changed = co_await changeBucket(ctx, req, std::move(change));
  if (!changed) co_return errorResponse(changed.error(), req);
  S3Response res;
  res.status = 204;
  co_return res;
}

}  // namespace

S3Result<bool> cannedAclPublicRead(const S3Request& req) {
  auto acl = req.header("x-amz-acl");
  if (!acl || *acl == "private") return false;
  if (*acl == "public-read") return true;
  return s3fail(S3ErrorCode::kNotImplemented,
                fmt::format("Canned ACL '{}' is not implemented (private and public-read are)",
                            *acl));
}

Task<S3Response> getBucketAcl(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  co_return xmlResponse(bucketAclXml(ctx.credentials.ownerId(b->owner), b->public_read));
}

namespace {

// The ACL a PutBucketAcl or PutObjectAcl asks for, as x-amz-acl or an
// AccessControlPolicy body (not both): public-read or not.
S3Result<bool> requestedAcl(const S3Request& req, std::string_view xml) {
  if (!req.header("x-amz-acl")) return parseAccessControlPolicy(xml);
  if (xml.find_first_not_of(" \t\r\n") != std::string::npos) {
    return s3fail(S3ErrorCode::kInvalidRequest,
                  "Specify either x-amz-acl or an AccessControlPolicy body, not both");
  }
  return cannedAclPublicRead(req);
}

}  // namespace

Task<S3Response> putBucketAcl(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  auto xml = co_await readSmallBody(req, body, 64 * 1024, ChecksumHeaderOf::kBodyUnlessSigned);
  if (!xml) co_return errorResponse(xml.error(), req, body);
  S3Result<bool> public_read = requestedAcl(req, *xml);
  if (!public_read) co_return errorResponse(public_read.error(), req);
  auto changed = co_await changeBucket(
      ctx, req, [&](index_kv::BucketInfo& b) { b.public_read = *public_read; });
  if (!changed) co_return errorResponse(changed.error(), req);
  co_return S3Response{};
}

// Access is per bucket: an object's ACL is its bucket's (the owner's FULL_CONTROL, and
// READ for everyone on a public-read bucket).
Task<S3Response> getObjectAcl(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  auto object = co_await loadObject(ctx, req.bucket, req.key);
  if (!object) co_return errorResponse(object.error(), req);
  co_return xmlResponse(bucketAclXml(ctx.credentials.ownerId(b->owner), b->public_read));
}

// Setting the ACL an object already has through its bucket succeeds and changes nothing
// (pipelines set `bucket-owner-full-control` on every upload); an ACL of its own is
// NotImplemented.
Task<S3Response> putObjectAcl(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  auto xml = co_await readSmallBody(req, body, 64 * 1024, ChecksumHeaderOf::kBodyUnlessSigned);
  if (!xml) co_return errorResponse(xml.error(), req, body);
  // The bucket's owner is every object's owner: these two are the private ACL.
  const auto canned = req.header("x-amz-acl");
  const bool no_body = xml->find_first_not_of(" \t\r\n") == std::string::npos;
  const bool owner_only = canned && no_body &&
                          (*canned == "bucket-owner-full-control" || *canned == "bucket-owner-read");
  S3Result<bool> public_read = owner_only ? S3Result<bool>(false) : requestedAcl(req, *xml);
  if (!public_read) co_return errorResponse(public_read.error(), req);
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  auto object = co_await loadObject(ctx, req.bucket, req.key);
  if (!object) co_return errorResponse(object.error(), req);
  if (*public_read != b->public_read) {
    co_return errorResponse(
        {S3ErrorCode::kNotImplemented,
         fmt::format("An object ACL apart from its bucket's is not implemented: access is "
                     "per bucket, and this bucket is {}",
                     b->public_read ? "public-read" : "private")},
        req);
  }
  co_return S3Response{};
}

Task<S3Response> getBucketLifecycle(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  if (b->lifecycle.empty()) {
    co_return errorResponse({S3ErrorCode::kNoSuchLifecycleConfiguration,
                             "The lifecycle configuration does not exist"},
                            req);
  }
  co_return xmlResponse(lifecycleConfigurationXml(b->lifecycle));
}

Task<S3Response> putBucketLifecycle(GatewayContext& ctx, const S3Request& req,
                                    BodySource& body) {
  auto xml = co_await readSmallBody(req, body, 1 << 20, ChecksumHeaderOf::kBodyUnlessSigned);
  if (!xml) co_return errorResponse(xml.error(), req, body);
  auto rules = parseLifecycleConfiguration(*xml);
  if (!rules) co_return errorResponse(rules.error(), req);
  auto changed = co_await changeBucket(
      ctx, req, [&](index_kv::BucketInfo& b) { b.lifecycle = *rules; });
  if (!changed) co_return errorResponse(changed.error(), req);
  co_return S3Response{};
}

Task<S3Response> deleteBucketLifecycle(GatewayContext& ctx, const S3Request& req) {
  co_return co_await changeSetting(ctx, req, [](index_kv::BucketInfo& b) { b.lifecycle.clear(); });
}

Task<S3Response> getBucketTagging(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  if (b->tags.empty()) {
    co_return errorResponse({S3ErrorCode::kNoSuchTagSet, "The TagSet does not exist"}, req);
  }
  co_return xmlResponse(taggingXml(b->tags));
}

Task<S3Response> putBucketTagging(GatewayContext& ctx, const S3Request& req,
                                  BodySource& body) {
  auto xml = co_await readSmallBody(req, body, 64 * 1024, ChecksumHeaderOf::kBodyUnlessSigned);
  if (!xml) co_return errorResponse(xml.error(), req, body);
  auto tags = parseTagging(*xml, kMaxBucketTags);
  if (!tags) co_return errorResponse(tags.error(), req);
  // An empty TagSet leaves the bucket without tags, as DeleteBucketTagging does.
  co_return co_await changeSetting(ctx, req, [&](index_kv::BucketInfo& b) { b.tags = *tags; });
}

Task<S3Response> deleteBucketTagging(GatewayContext& ctx, const S3Request& req) {
  co_return co_await changeSetting(ctx, req, [](index_kv::BucketInfo& b) { b.tags.clear(); });
}

Task<S3Response> getBucketVersioning(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  co_return xmlResponse(versioningXml(b->versioning_suspended));
}

Task<S3Response> putBucketVersioning(GatewayContext& ctx, const S3Request& req,
                                     BodySource& body) {
  auto xml = co_await readSmallBody(req, body, 64 * 1024);
  if (!xml) co_return errorResponse(xml.error(), req, body);
  if (req.header("x-amz-mfa")) {
    co_return errorResponse({S3ErrorCode::kNotImplemented, "MFA delete is not implemented"},
                            req);
  }
  auto suspended = parseVersioningSuspended(*xml);
  if (!suspended) co_return errorResponse(suspended.error(), req);
  auto changed = co_await changeBucket(
      ctx, req, [](index_kv::BucketInfo& b) { b.versioning_suspended = true; });
  if (!changed) co_return errorResponse(changed.error(), req);
  co_return S3Response{};  // 200, as S3 answers it
}

Task<S3Response> getBucketCors(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  if (b->cors.empty()) {
    co_return errorResponse({S3ErrorCode::kNoSuchCORSConfiguration,
                             "The CORS configuration does not exist"},
                            req);
  }
  co_return xmlResponse(corsConfigurationXml(b->cors));
}

Task<S3Response> putBucketCors(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  // S3's limit on a CORS configuration.
  auto xml = co_await readSmallBody(req, body, 64 * 1024, ChecksumHeaderOf::kBodyUnlessSigned);
  if (!xml) co_return errorResponse(xml.error(), req, body);
  auto rules = parseCorsConfiguration(*xml);
  if (!rules) co_return errorResponse(rules.error(), req);
  auto changed =
      co_await changeBucket(ctx, req, [&](index_kv::BucketInfo& b) { b.cors = *rules; });
  if (!changed) co_return errorResponse(changed.error(), req);
  co_return S3Response{};
}

Task<S3Response> deleteBucketCors(GatewayContext& ctx, const S3Request& req) {
  co_return co_await changeSetting(ctx, req, [](index_kv::BucketInfo& b) { b.cors.clear(); });
}

namespace {

S3Response noSuchBucketPolicy(const S3Request& req) {
  return errorResponse({S3ErrorCode::kNoSuchBucketPolicy, "The bucket policy does not exist"},
                       req);
}

}  // namespace

Task<S3Response> getBucketPolicy(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  if (b->policy.empty()) co_return noSuchBucketPolicy(req);
  S3Response res;
  res.set("Content-Type", "application/json");
  res.body = b->policy;
  co_return res;
}

Task<S3Response> putBucketPolicy(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  // Read past S3's 20 KB so that a larger policy is refused as one (MalformedPolicy).
  auto text = co_await readSmallBody(req, body, 64 * 1024, ChecksumHeaderOf::kBodyUnlessSigned);
  if (!text) co_return errorResponse(text.error(), req, body);
  if (auto parsed = BucketPolicy::parse(*text, req.bucket, /*being_set=*/true); !parsed) {
    co_return errorResponse(parsed.error(), req);
  }
  co_return co_await changeSetting(ctx, req,
                                   [&](index_kv::BucketInfo& b) { b.policy = *text; });
}

Task<S3Response> deleteBucketPolicy(GatewayContext& ctx, const S3Request& req) {
  co_return co_await changeSetting(ctx, req, [](index_kv::BucketInfo& b) { b.policy.clear(); });
}

Task<S3Response> getBucketPolicyStatus(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return errorResponse(fromStatus(b.error(), S3ErrorCode::kNoSuchBucket), req);
  if (b->policy.empty()) co_return noSuchBucketPolicy(req);
  auto policy = BucketPolicy::parse(b->policy, req.bucket);
  if (!policy) co_return errorResponse(policy.error(), req);
  XmlWriter xml("PolicyStatus");
  xml.element("IsPublic", policy->isPublic() ? "true" : "false");
  co_return xmlResponse(std::move(xml).finish());
}

}  // namespace granary::gateway

// Who may do what (docs/operations.md, "Users and access"):
//  - the root user: everything;
//  - a named user: create buckets, list its own, and every operation on the buckets it
//    owns, but for what their bucket policy denies it (its policy itself excepted: the
//    owner can always read, change and delete it, so it cannot lock itself out);
//  - anyone, anonymous requests included: what a bucket's policy allows them, and reads
//    (GET/HEAD of objects and records, listing) of a bucket whose ACL is public-read,
//    unless its policy denies them;
//  - nothing else (AccessDenied).
#include <algorithm>
#include <array>
#include <memory>
#include <unordered_map>

#include "bucket_policy.h"
#include "handlers.h"
#include "policy_actions.h"
#include "sigv4.h"

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
    "version-id-marker", "partNumber", "type", "offset"};

bool isPublicRead(const S3Request& req) {
  if (req.method != "GET" && req.method != "HEAD") return false;
  return std::all_of(req.query.begin(), req.query.end(), [&](const auto& param) {
    const std::string& name = param.first;
    if (name.starts_with("response-")) return true;  // anonymous: see authorizeRequest
    // A presigned URL's own parameters (another user's signature, verified by now) are
    // not the request's: its reads of a public bucket are anyone's.
    if (isAuthParameter(name)) return true;
    return std::find_if(kPublicReadParams.begin(), kPublicReadParams.end(),
                        [&](const char* p) { return name == p; }) != kPublicReadParams.end();
  });
}

const OperationAction* actionOf(std::string_view op) {
  for (const OperationAction& a : kActions) {
    if (a.op == op) return &a;
  }
  return nullptr;
}

bool isPolicyAction(std::string_view action) {
  return action == "s3:GetBucketPolicy" || action == "s3:PutBucketPolicy" ||
         action == "s3:DeleteBucketPolicy";
}

S3Error accessDenied() { return {S3ErrorCode::kAccessDenied, "Access Denied"}; }

// A bucket's parsed policy, kept per event loop thread for as long as its text is the
// same (parsing costs microseconds; a policy is read on every request to its bucket).
std::shared_ptr<const BucketPolicy> policyOf(const index_kv::BucketInfo& info) {
  if (info.policy.empty()) return nullptr;
  struct Cached {
    std::string text;
    std::shared_ptr<const BucketPolicy> policy;
  };
  thread_local std::unordered_map<std::string, Cached> cache;
  auto it = cache.find(info.name);
  if (it != cache.end() && it->second.text == info.policy) return it->second.policy;
  // A stored policy was checked when it was set; one that no longer parses (a newer
  // gateway's) denies everything but the owner's policy requests.
  auto parsed = BucketPolicy::parse(info.policy, info.name);
  auto policy = parsed ? std::make_shared<const BucketPolicy>(std::move(*parsed)) : nullptr;
  if (cache.size() >= 1024) cache.clear();
  cache[info.name] = Cached{info.policy, policy};
  return policy;
}

// What one request asks of a bucket.
struct Ask {
  std::string_view action = {};    // empty: only the owner may
  std::string_view also = {};      // a second action needed as well, or empty
  std::string_view resource = {};  // bucketArn or objectArn
  std::string_view also_resource = {};  // `also` is asked of this (the bucket), not `resource`
  bool every_object = false;  // PolicyQuery::every_object
  bool read_only = false;     // a public-read ACL allows it whatever the query (copy source)
  bool any_key = false;       // asked again per key (DeleteObjects): pass if it may be allowed
  std::vector<int8_t>* conditions_held = nullptr;  // PolicyQuery::conditions_held
};

PolicyQuery policyQuery(const S3Request& req, std::string_view action, const Ask& ask) {
  PolicyQuery q;
  q.action = action;
  q.resource = ask.resource;
  q.every_object = ask.every_object;
  q.conditions_held = ask.conditions_held;
  q.principal = req.principal;
  q.secure = req.secure;
  q.source_ip = req.source_ip;
  q.user_agent = req.header("user-agent");
  q.referer = req.header("referer");
  if (action == "s3:ListBucket" || action == "s3:ListBucketVersions") {
    q.prefix = req.queryValue("prefix");
    q.delimiter = req.queryValue("delimiter");
    q.max_keys = req.queryValue("max-keys");
  }
  return q;
}

// May `req`'s sender (not the root user) do `ask` in the bucket `info`?
std::optional<S3Error> decide(const S3Request& req, const index_kv::BucketInfo& info,
                              const Ask& ask) {
  const bool anonymous = req.principal.empty();
  const bool owner = !anonymous && info.owner == req.principal;
  // The policy's own operations are the owner's alone: whoever a policy let change it
  // could give itself anything (S3 keeps them to the owner's account).
  if (isPolicyAction(ask.action)) {
    if (owner) return std::nullopt;
    return accessDenied();
  }
  PolicyEffect effect = PolicyEffect::kNone;
  if (!info.policy.empty()) {
    auto policy = policyOf(info);
    if (!policy) return accessDenied();
    if (ask.any_key) {
      if (owner || policy->mayAllow(ask.action, req.principal)) return std::nullopt;
      return accessDenied();
    }
    if (!ask.action.empty()) {
      effect = policy->evaluate(policyQuery(req, ask.action, ask));
      if (!ask.also.empty() && effect != PolicyEffect::kDeny) {
        PolicyQuery also = policyQuery(req, ask.also, ask);
        also.conditions_held = nullptr;  // its listing keys are not the first query's
        if (!ask.also_resource.empty()) {
          also.resource = ask.also_resource;
          also.every_object = false;
          // Its own query's prefix is not an object key prefix.
          also.prefix = also.delimiter = also.max_keys = std::nullopt;
        }
        const PolicyEffect second = policy->evaluate(also);
        if (second != PolicyEffect::kAllow) effect = second;  // both must allow
      }
    }
  }
  if (effect == PolicyEffect::kDeny) return accessDenied();
  if (owner || effect == PolicyEffect::kAllow) return std::nullopt;
  if (info.public_read && (ask.read_only || isPublicRead(req))) return std::nullopt;
  return accessDenied();
}

// `created`, when given, receives the creation time of the bucket judged.
Task<std::optional<S3Error>> bucketAccess(GatewayContext& ctx, const S3Request& req,
                                          std::string_view bucket, const Ask& ask,
                                          int64_t* created = nullptr) {
  if (req.root) co_return std::nullopt;
  auto info = co_await lookupBucket(ctx, bucket);
  if (!info) {
    // A bucket that does not exist: NoSuchBucket to a user, now. Not left to the handler:
    // a bucket of that name created by someone else meanwhile would then be used without
    // this check. An anonymous request learns nothing.
    if (info.error().isNotFound() && !req.principal.empty()) {
      co_return noSuchBucket();
    }
    if (info.error().isNotFound()) co_return accessDenied();
    co_return fromStatus(info.error());
  }
  if (created != nullptr) *created = info->created_unix_nanos;
  co_return decide(req, *info, ask);
}


// The action AWS asks for: reads and deletes naming a version are the *Version actions,
// and writes that set tags need s3:PutObjectTagging too.
Ask askOf(const S3Request& req, const OperationAction& a) {
  Ask ask{.action = a.action, .also = a.also};
  if (req.hasQuery("versionId") && a.on == On::kObject) {
    ask.action = versionAction(a.action);
    ask.also = versionAction(a.also);
  }
  if (a.action == "s3:PutObject" && a.on == On::kObject && req.header("x-amz-tagging")) {
    ask.also = "s3:PutObjectTagging";
  }
  if (a.on == On::kAllObjects) ask.every_object = true;
  return ask;
}

// x-amz-expected-bucket-owner (and x-amz-source-expected-bucket-owner for a copy's
// source): a request that names another owner than the bucket's is refused, whoever sends
// it, so that a client never writes to or reads from a bucket it did not mean. The owner's
// ID is what ListBuckets and GetBucketAcl show (CredentialStore::ownerId): the user's
// name, or for the root user an HMAC of its access key keyed by its secret (the key
// itself, which it showed before, is still taken). A bucket that does not exist is the
// handler's to answer.
Task<std::optional<S3Error>> expectedOwner(GatewayContext& ctx, const S3Request& req,
                                           std::string_view bucket, std::string_view header) {
  auto expected = req.header(header);
  if (!expected || bucket.empty()) co_return std::nullopt;
  auto info = co_await lookupBucket(ctx, bucket);
  if (info && info->owner != *expected && ctx.credentials.ownerId(info->owner) != *expected) {
    co_return accessDenied();
  }
  co_return std::nullopt;
}

}  // namespace

Task<std::optional<S3Error>> authorizeRequest(GatewayContext& ctx, S3Request& req,
                                              std::string_view op) {
  if (op != "CreateBucket") {
    if (auto denied = co_await expectedOwner(ctx, req, req.bucket,
                                             "x-amz-expected-bucket-owner")) {
      co_return denied;
    }
  }
  if (req.root) co_return std::nullopt;
  const bool anonymous = req.principal.empty();
  // response-* overrides: a signed reader's only, however the read would be allowed (AWS
  // refuses them on anonymous GETs: anyone could have a public object served as HTML).
  // Before the bucket is looked up: the answer must not tell whether it exists.
  if (anonymous && std::any_of(req.query.begin(), req.query.end(), [](const auto& p) {
        return p.first.starts_with("response-");
      })) {
    co_return S3Error{S3ErrorCode::kInvalidRequest,
                      "Request specific response headers cannot be used for anonymous GET "
                      "requests."};
  }
  if (req.bucket.empty()) {
    // ListBuckets: a user sees its own buckets.
    if (anonymous) co_return accessDenied();
    co_return std::nullopt;
  }
  if (op == "CreateBucket") {
    if (anonymous) co_return accessDenied();
    co_return std::nullopt;  // the handler answers if the name is taken
  }
  if (op == "DeleteObjects") {  // each key is asked about by the handler
    int64_t* created = &req.bucket_created_unix_nanos;
    auto denied = co_await bucketAccess(ctx, req, req.bucket,
                                        Ask{.action = "s3:DeleteObject", .any_key = true}, created);
    if (denied && denied->code == S3ErrorCode::kAccessDenied) {
      // Keys naming their version ask for s3:DeleteObjectVersion instead.
      denied = co_await bucketAccess(
          ctx, req, req.bucket, Ask{.action = "s3:DeleteObjectVersion", .any_key = true}, created);
    }
    co_return denied;
  }
  const OperationAction* a = actionOf(op);
  if (a == nullptr) {
    co_return co_await bucketAccess(ctx, req, req.bucket, Ask{}, &req.bucket_created_unix_nanos);
  }
  Ask ask = askOf(req, *a);
  const std::string bucket = bucketArn(req.bucket);
  const std::string resource = a->on == On::kObject ? objectArn(req.bucket, req.key) : bucket;
  ask.resource = resource;
  if (a->also_of_bucket) ask.also_resource = bucket;
  co_return co_await bucketAccess(ctx, req, req.bucket, ask, &req.bucket_created_unix_nanos);
}

bool isJudgedBucket(const S3Request& req, const index_kv::BucketInfo& bucket) {
  return req.bucket_created_unix_nanos == 0 ||
         bucket.created_unix_nanos == req.bucket_created_unix_nanos;
}

Task<std::optional<S3Error>> bucketStillJudged(GatewayContext& ctx, const S3Request& req) {
  if (req.bucket_created_unix_nanos == 0) co_return std::nullopt;
  auto info = co_await lookupBucket(ctx, req.bucket);
  if (!info) co_return fromStatus(info.error(), S3ErrorCode::kNoSuchBucket);
  if (!isJudgedBucket(req, *info)) {
    co_return noSuchBucket();
  }
  co_return std::nullopt;
}

Task<std::optional<S3Error>> authorizeRead(GatewayContext& ctx, const S3Request& req,
                                           std::string_view bucket, std::string_view key,
                                           bool version) {
  if (auto denied =
          co_await expectedOwner(ctx, req, bucket, "x-amz-source-expected-bucket-owner")) {
    co_return denied;
  }
  const std::string resource = objectArn(bucket, key);
  co_return co_await bucketAccess(
      ctx, req, bucket,
      Ask{.action = version ? versionAction("s3:GetObject") : "s3:GetObject",
          .resource = resource,
          .read_only = true});
}

std::optional<S3Error> authorizeDelete(const S3Request& req, const index_kv::BucketInfo& bucket,
                                       std::string_view key, bool version,
                                       std::vector<int8_t>* conditions_held) {
  if (req.root) return std::nullopt;
  const std::string resource = objectArn(bucket.name, key);
  return decide(req, bucket,
                Ask{.action = version ? versionAction("s3:DeleteObject") : "s3:DeleteObject",
                    .resource = resource,
                    .conditions_held = conditions_held});
}

}  // namespace granary::gateway

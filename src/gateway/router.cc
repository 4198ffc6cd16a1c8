// Routing and authentication: turns a parsed request into the handler call. Reserved
// paths under /_granary/ (health, metrics) are ours; everything else is S3 path-style,
// /bucket/key?subresource, or virtual-hosted-style when the Host header is
// <bucket>.<GatewayOptions::virtual_host_domain>: /key?subresource.
#include <fmt/core.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <set>

#include "granary/chunkstore/chunk_client.h"
#include "granary/common/clock.h"
#include "granary/common/log.h"
#include "granary/common/strings.h"
#include "granary/placement/cluster_map.h"
#include "granary/common/bearer_token.h"
#include "handlers.h"
#include "http_text.h"
#include "s3_xml.h"
#include "uri.h"

namespace granary::gateway {

std::optional<std::string_view> S3Request::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return std::string_view(v);
  }
  return std::nullopt;
}

bool S3Request::hasQuery(std::string_view name) const { return queryValue(name).has_value(); }

std::optional<std::string_view> S3Request::queryValue(std::string_view name) const {
  for (const auto& [n, v] : query) {
    if (n == name) return std::string_view(v);
  }
  return std::nullopt;
}

S3Response errorResponse(const S3Error& error, const S3Request& req, const BodySource& body) {
  S3Response res = errorResponse(error, req);
  res.close = !body.done();
  return res;
}

S3Response errorResponse(const S3Error& error, const S3Request& req) {
  S3Response res;
  res.status = httpStatus(error.code);
  if (res.status >= 500) {
    // Server-side failures are ours to explain: keep the cause in the server log.
    log::warn("{} {} -> {} {}: {} (request {})", req.method, req.path, res.status,
              errorName(error.code), error.message, req.request_id);
  }
  if (error.code == S3ErrorCode::kNotModified) return res;
  res.set("Content-Type", "application/xml");
  std::string resource = req.path.empty() ? "/" : req.path;
  res.body = errorXml(error, resource, req.request_id);
  return res;
}

namespace {

// Every query parameter some handler reads (or may ignore safely: ListBuckets' paging). A
// name outside this list (?session, ?renameObject, ?metadataTable=1...) is an S3
// subresource or option this gateway does not know: it is NotImplemented, never taken for
// the plain operation (a DELETE ?metadataTable must not delete the bucket).
constexpr std::array kKnownParameters = {
    "after", "bucket-region", "container", "continuation-token", "delete", "delimiter",
    "encoding-type", "fetch-owner", "format", "key", "key-marker", "list-type", "location",
    "marker", "max-buckets", "max-keys", "max-parts", "max-records", "max-uploads", "offset",
    "part-number-marker", "partNumber", "prefix", "raw", "record", "record-index", "records",
    "records-batch", "start-after", "type", "upload-id-marker", "uploadId", "uploads",
    "version-id-marker", "versionId", "versions", "x-granary-index", "x-granary-index-key",
    "x-id"};

// A bucket setting Granary stores: its sub-resource, and the operations that read, set
// and delete it (ACLs and versioning cannot be deleted).
struct SettingRoute {
  std::string_view param;
  std::string_view get_op;
  std::string_view put_op;
  std::string_view delete_op;
  Task<S3Response> (*get)(GatewayContext&, const S3Request&);
  Task<S3Response> (*put)(GatewayContext&, const S3Request&, BodySource&);
  Task<S3Response> (*remove)(GatewayContext&, const S3Request&);
};
constexpr SettingRoute kSettingRoutes[] = {
    {"acl", "GetBucketAcl", "PutBucketAcl", "", getBucketAcl, putBucketAcl, nullptr},
    {"lifecycle", "GetBucketLifecycleConfiguration", "PutBucketLifecycleConfiguration",
     "DeleteBucketLifecycle", getBucketLifecycle, putBucketLifecycle, deleteBucketLifecycle},
    {"cors", "GetBucketCors", "PutBucketCors", "DeleteBucketCors", getBucketCors,
     putBucketCors, deleteBucketCors},
    {"tagging", "GetBucketTagging", "PutBucketTagging", "DeleteBucketTagging",
     getBucketTagging, putBucketTagging, deleteBucketTagging},
    {"versioning", "GetBucketVersioning", "PutBucketVersioning", "", getBucketVersioning,
     putBucketVersioning, nullptr},
    {"policy", "GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy", getBucketPolicy,
     putBucketPolicy, deleteBucketPolicy},
};

// The query parameters that name what a request does: all but a presigned URL's signature
// (isAuthParameter). A sub-resource routed only when alone (?acl, ?tagging...) may come
// presigned.
size_t operationParameters(const S3Request& req) {
  return static_cast<size_t>(std::count_if(
      req.query.begin(), req.query.end(), [](const auto& p) { return !isAuthParameter(p.first); }));
}

// (A presigned request's x-amz-* parameters, and a SigV2 one's Content-Type and
// Content-MD5, are its headers, moved out of the query before it is routed:
// hoistQueryHeaders. Another request's count as unknown.)
bool knownParameter(std::string_view name) {
  if (name.starts_with("response-") || isAuthParameter(name)) return true;
  return std::find(kKnownParameters.begin(), kKnownParameters.end(), name) !=
         kKnownParameters.end();
}

// The bucket named by a virtual-hosted-style Host header ("<bucket>.<domain>", port
// stripped, any case), or nullopt for a path-style request.
std::optional<std::string> virtualHostBucket(const S3Request& req, std::string_view domain) {
  if (domain.empty()) return std::nullopt;
  auto host_header = req.header("host");
  if (!host_header) return std::nullopt;
  std::string_view host = *host_header;
  if (size_t colon = host.rfind(':');
      colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos) {
    host = host.substr(0, colon);  // not inside an IPv6 literal
  }
  std::string h = asciiLower(host);
  // Built by appending: g++ 12 warns falsely (-Wrestrict) on "." + string here.
  std::string suffix(1, '.');
  suffix += asciiLower(domain);
  if (h.size() <= suffix.size() || !h.ends_with(suffix)) return std::nullopt;
  return h.substr(0, h.size() - suffix.size());
}

// Splits the target into bucket, key and query. Errors are S3 errors. `virtual_host` is
// set when the bucket came from the Host header (the whole path is then the key).
S3Result<void> parseTarget(S3Request& req, std::string_view domain, bool& virtual_host) {
  // Absolute-form targets ("http://host/bucket/key", RFC 9112 3.2.2) are taken as the
  // signature code takes them (splitTarget).
  auto [path, query] = splitTarget(req.target);
  req.path = std::string(path);
  if (req.target.find('?') != std::string::npos) req.query = parseQuery(query);
  if (req.path.empty() || req.path[0] != '/') {
    return s3fail(S3ErrorCode::kInvalidRequest, "Invalid request target");
  }
  std::string_view rest = std::string_view(req.path).substr(1);
  auto host_bucket = virtualHostBucket(req, domain);
  virtual_host = host_bucket.has_value();
  size_t slash = virtual_host ? std::string_view::npos : rest.find('/');
  if (virtual_host) {
    req.bucket = std::move(*host_bucket);
    auto key = percentDecode(rest, false);
    if (!key) return s3fail(S3ErrorCode::kInvalidArgument, "Invalid URI encoding");
    req.key = *key;
  } else {
    auto bucket = percentDecode(rest.substr(0, slash), false);
    if (!bucket) return s3fail(S3ErrorCode::kInvalidArgument, "Invalid URI encoding");
    req.bucket = *bucket;
    if (slash != std::string_view::npos) {
      auto key = percentDecode(rest.substr(slash + 1), false);
      if (!key) return s3fail(S3ErrorCode::kInvalidArgument, "Invalid URI encoding");
      req.key = *key;
    }
  }
  if ((req.bucket.empty() && slash != std::string_view::npos) ||
      (!req.bucket.empty() && !plausibleBucketName(req.bucket))) {
    return s3fail(S3ErrorCode::kInvalidBucketName, "The specified bucket is not valid.");
  }
  return checkObjectKey(req.key);
}

// `virtual_host`: the Host header named the bucket (SigV2 signs the bucket either way).
S3Result<RequestAuth> authenticate(GatewayContext& ctx, S3Request& req, bool virtual_host) {
  HttpRequestView view{req.method, req.target, req.headers,
                       virtual_host ? std::string_view(req.bucket) : std::string_view()};
  auto parsed = parseAuth(view);
  if (!parsed) return std::unexpected(parsed.error());
  req.principal.clear();
  req.root = false;
  req.signed_payload_hash.clear();
  if (!*parsed) return RequestAuth{};  // anonymous: authorizeRequest decides
  AuthInfo& info = **parsed;
  // The signature covers a repeated header's values joined by commas, but handlers read one
  // of them: "a,b" signed, then replayed as "a" and "b", would run as "a". A repeated
  // signed or x-amz-* header is refused, so that what runs is what was signed.
  std::set<std::string_view> seen;
  for (const auto& [name, value] : req.headers) {
    const bool covered =
        name.starts_with("x-amz-") || name.starts_with("x-granary-") ||
        std::find(info.signed_headers.begin(), info.signed_headers.end(), name) !=
            info.signed_headers.end();
    if (covered && !seen.insert(name).second) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    fmt::format("The header {} was sent more than once.", name));
    }
  }
  auto user = ctx.credentials.find(info.access_key);
  if (!user) {
    return s3fail(S3ErrorCode::kInvalidAccessKeyId,
                  "The AWS Access Key Id you provided does not exist in our records.");
  }
  int64_t now = ctx.deps.clock.nowUnixNanos() / 1'000'000'000;
  auto ok = verify(view, info, user->secret_key, now, ctx.signing_keys);
  if (!ok) return std::unexpected(ok.error());
  RequestAuth auth;
  if (info.version == 4) {  // aws-chunked bodies are signed with it
    auth.signing_key =
        ctx.signing_keys.get(user->secret_key, info.date, info.region, info.service);
  }
  if (info.payload_hash.size() == 64) req.signed_payload_hash = info.payload_hash;
  auth.info = std::move(info);
  req.principal = user->name;
  req.root = user->is_root;
  return auth;
}

// The gauges read from other components when Prometheus scrapes: every drive's
// statistics and the index's, read in parallel, so that a host that does not answer costs
// its timeout once, not once per drive (one after another, they outlasted Prometheus's
// 10 s scrape timeout and every gauge went missing).
Task<void> refreshScrapedGauges(GatewayContext& ctx) {
  struct Scraped {
    std::vector<Result<chunkstore::DriveStats>> drives;
    Result<index_kv::RecordIndexStats> records;
    Result<index_kv::IndexStorageStats> storage;
    Result<index_kv::IndexCommitStats> commits;
  };
  const uint64_t scrape = ctx.metrics.beginScrape();  // before any read is made
  const auto& drives = ctx.deps.map.drives;
  // Shared with the tasks: they own what they write, whatever happens to this frame.
  auto scraped = std::make_shared<Scraped>();
  scraped->drives.resize(drives.size());
  TaskGroup group(ctx.pool(), co_await asio::this_coro::executor);
  for (size_t i = 0; i < drives.size(); ++i) {
    // A server known to be down costs no call (and no worker held for its timeout): the
    // client's own probe notices when it is back.
    if (!ctx.deps.chunks.reachable(drives[i].id)) {
      scraped->drives[i] = fail(Status::unavailable("not reachable"));
      continue;
    }
    group.spawn([&chunks = ctx.deps.chunks, scraped, i, id = drives[i].id] {
      scraped->drives[i] = chunks.stats(id);
      return Status::ok();
    });
  }
  group.spawn([&index = ctx.index(), scraped] {
    scraped->records = index.recordIndexStats();
    // Not answering now (unavailable, timed out): one wait, not three.
    if (!scraped->records && scraped->records.error().retryable()) {
      scraped->storage = fail(scraped->records.error());
      scraped->commits = fail(scraped->records.error());
      return Status::ok();
    }
    scraped->storage = index.storageStats();
    scraped->commits = index.commitStats();
    return Status::ok();
  });
  (void)co_await group.wait();
  // A file system is known by its server and id: drives that share one (serve's six
  // under one data directory) each report its size. Without an id (0), by the drive.
  std::map<std::pair<std::string_view, std::string>, std::pair<uint64_t, uint64_t>> filesystems;
  for (size_t i = 0; i < drives.size(); ++i) {
    ctx.metrics.setDrive(drives[i].id, scraped->drives[i], scrape);
    if (!scraped->drives[i]) continue;
    const chunkstore::DriveStats& s = *scraped->drives[i];
    std::string fs = s.filesystem_id != 0 ? fmt::format("{:x}", s.filesystem_id)
                                          : fmt::format("drive {}", drives[i].id);
    filesystems[{drives[i].server, std::move(fs)}] = {s.capacity_bytes, s.available_bytes};
  }
  uint64_t capacity = 0;
  uint64_t available = 0;
  for (const auto& [fs, sizes] : filesystems) {
    capacity += sizes.first;
    available += sizes.second;
  }
  ctx.metrics.setStorage(capacity, available, scrape);
  ctx.metrics.setIndex(scraped->records, scraped->storage, scraped->commits, scrape);
  ctx.metrics.setBufferBudget(ctx.data.budget().stats(), scrape);
}

Task<S3Response> serveInternal(GatewayContext& ctx, const S3Request& req, std::string& op) {
  S3Response res;
  if (req.path == "/_granary/health") {
    op = "Health";
    res.set("Content-Type", "text/plain");
    res.body = "ok\n";
  } else if (req.path == "/_granary/metrics") {
    op = "Metrics";
    if (!bearerTokenAccepted(req.header("authorization"), ctx.options.metrics_token)) {
      co_return errorResponse({S3ErrorCode::kAccessDenied,
                               "Metrics need Authorization: Bearer <token>"}, req);
    }
    // One refresh at a time: scrapes that come while one reads the drives (several
    // Prometheus servers, or anyone: the endpoint is open by default) show the figures it
    // and the one before it read, instead of each asking every drive again.
    if (!ctx.scrape_in_flight.exchange(true)) {
      struct Done {
        std::atomic<bool>& flag;
        ~Done() { flag = false; }
      } done{ctx.scrape_in_flight};
      co_await refreshScrapedGauges(ctx);
    }
    res.set("Content-Type", "text/plain; version=0.0.4");
    res.body = prometheus::TextSerializer().Serialize(ctx.metrics.registry().Collect());
  } else {
    op = "Internal";
    res = errorResponse({S3ErrorCode::kInvalidRequest, "Unknown reserved path"}, req);
    res.status = 404;
  }
  co_return res;
}

// What the router chose for a request: the operation's name (metrics, the access log,
// authorization) and its handler, or the error that answers it.
struct Route;
struct Call {
  GatewayContext& ctx;
  S3Request& req;
  BodySource& body;
  BodySink& sink;
  const RequestAuth& auth;
  const Route& route;
};
struct Route {
  std::string_view op = {};
  Task<S3Response> (*handler)(Call&) = nullptr;  // null: answered with `error`
  S3Error error = {};
  const SettingRoute* setting = nullptr;
  const AbsentSetting* absent = nullptr;
  // The handler takes its body through ingestBody (PutObject, UploadPart), which decodes
  // an aws-chunked body, checking its chunk signatures, and asks for the body itself once
  // the request's headers, bucket and upload are known good. Every other handler reads
  // its body as sent, and is invited to before it runs.
  bool ingests_body = false;
  // The handler creates the key it names (PutObject, CopyObject, CreateMultipartUpload):
  // the key is held to RFC 3629 (checkNewObjectKey).
  bool creates_key = false;
};

Route notImplemented(std::string message) {
  return Route{.op = "Unsupported", .error = {S3ErrorCode::kNotImplemented, std::move(message)}};
}

Route methodNotAllowed() {
  return Route{.op = "MethodNotAllowed",
               .error = {S3ErrorCode::kMethodNotAllowed,
                         "The specified method is not allowed against this resource."}};
}

// The operation a request asks for, from its method, bucket, key and query alone.
Route routeOf(const S3Request& req) {
  const std::string& m = req.method;
  // Bucket settings: ACL, policy, lifecycle, CORS, tags and versioning.
  if (!req.bucket.empty() && req.key.empty() && operationParameters(req) == 1) {
    for (const SettingRoute& route : kSettingRoutes) {
      if (!req.hasQuery(route.param)) continue;
      if (m == "GET") {
        return {.op = route.get_op,
                .handler = [](Call& c) { return c.route.setting->get(c.ctx, c.req); },
                .setting = &route};
      }
      if (m == "PUT") {
        return {.op = route.put_op,
                .handler = [](Call& c) { return c.route.setting->put(c.ctx, c.req, c.body); },
                .setting = &route};
      }
      if (m == "DELETE" && route.remove != nullptr) {
        return {.op = route.delete_op,
                .handler = [](Call& c) { return c.route.setting->remove(c.ctx, c.req); },
                .setting = &route};
      }
      // DELETE ?versioning, POST ?acl...: as S3 answers.
      if (m == "DELETE" || m == "POST") return methodNotAllowed();
    }
    if (m == "GET" && req.hasQuery("policyStatus")) {
      return {.op = "GetBucketPolicyStatus",
              .handler = [](Call& c) { return getBucketPolicyStatus(c.ctx, c.req); }};
    }
    if (const AbsentSetting* setting = findAbsentBucketSetting(req)) {
      if (m == "GET") {
        return {.op = setting->op,
                .handler =
                    [](Call& c) { return getAbsentBucketSetting(c.ctx, c.req, *c.route.absent); },
                .absent = setting};
      }
      if (m == "DELETE" && !setting->delete_op.empty()) {
        return {.op = setting->delete_op,
                .handler = [](Call& c) { return deleteAbsentBucketSetting(c.ctx, c.req); }};
      }
    }
  }
  // Object ACLs: the bucket's (access is per bucket).
  if (!req.key.empty() && req.hasQuery("acl") && operationParameters(req) == 1) {
    if (m == "GET") {
      return {.op = "GetObjectAcl",
              .handler = [](Call& c) { return getObjectAcl(c.ctx, c.req); }};
    }
    if (m == "PUT") {
      return {.op = "PutObjectAcl",
              .handler = [](Call& c) { return putObjectAcl(c.ctx, c.req, c.body); }};
    }
  }
  // Object tags (aws-cli asks for them before every S3-to-S3 copy). Object tags of a
  // version stay NotImplemented below.
  if (!req.key.empty() && req.hasQuery("tagging") && operationParameters(req) == 1) {
    if (m == "GET") {
      return {.op = "GetObjectTagging",
              .handler = [](Call& c) { return getObjectTagging(c.ctx, c.req); }};
    }
    if (m == "PUT") {
      return {.op = "PutObjectTagging",
              .handler = [](Call& c) { return putObjectTagging(c.ctx, c.req, c.body); }};
    }
    if (m == "DELETE") {
      return {.op = "DeleteObjectTagging",
              .handler = [](Call& c) { return deleteObjectTagging(c.ctx, c.req); }};
    }
  }
  if (!req.key.empty() && m == "GET" && req.hasQuery("attributes") &&
      operationParameters(req) == 1) {
    return {.op = "GetObjectAttributes",
            .handler = [](Call& c) { return getObjectAttributes(c.ctx, c.req); }};
  }
  for (const auto& param : req.query) {
    if (!knownParameter(param.first)) {
      return notImplemented(fmt::format("The '{}' subresource is not implemented", param.first));
    }
  }
  // Without versioning every object has the one version "null" (as in an S3 bucket that
  // never had versioning enabled); any other id names nothing.
  if (auto version = req.queryValue("versionId"); version && *version != "null") {
    return Route{.op = "InvalidVersion", .error = invalidVersionId()};
  }

  // ListObjectVersions; ?versions on anything else is not a plain request.
  if (req.hasQuery("versions")) {
    if (!req.bucket.empty() && req.key.empty() && m == "GET") {
      return {.op = "ListObjectVersions",
              .handler = [](Call& c) { return listObjects(c.ctx, c.req); }};
    }
    return notImplemented("This versions request is not implemented");
  }

  // Multipart uploads (uploads, uploadId, partNumber), and GET/HEAD of an object's part
  // by number; any other use of those subresources is NotImplemented.
  if (req.hasQuery("uploads") || req.hasQuery("uploadId") || req.hasQuery("partNumber")) {
    const bool uploads = req.hasQuery("uploads");
    const bool upload_id = req.hasQuery("uploadId");
    const bool part_number = req.hasQuery("partNumber");
    if (!req.bucket.empty() && req.key.empty() && m == "GET" && uploads && !upload_id &&
        !part_number) {
      return {.op = "ListMultipartUploads",
              .handler = [](Call& c) { return listMultipartUploads(c.ctx, c.req); }};
    }
    if (!req.key.empty() && !uploads) {
      if (m == "PUT" && upload_id && req.header("x-amz-copy-source")) {
        return {.op = "UploadPartCopy",
                .handler = [](Call& c) { return uploadPartCopy(c.ctx, c.req, c.sink); }};
      }
      if (m == "PUT" && upload_id) {
        return {.op = "UploadPart",
                .handler = [](Call& c) { return uploadPart(c.ctx, c.req, c.auth, c.body); },
                .ingests_body = true};
      }
      if (!part_number && upload_id) {
        if (m == "POST") {
          return {.op = "CompleteMultipartUpload", .handler = [](Call& c) {
                    return completeMultipartUpload(c.ctx, c.req, c.body, c.sink);
                  }};
        }
        if (m == "DELETE") {
          return {.op = "AbortMultipartUpload",
                  .handler = [](Call& c) { return abortMultipartUpload(c.ctx, c.req); }};
        }
        if (m == "GET") {
          return {.op = "ListParts", .handler = [](Call& c) { return listParts(c.ctx, c.req); }};
        }
      }
    }
    if (!req.key.empty() && m == "GET" && part_number && !uploads && !upload_id) {
      return {.op = "GetObject",
              .handler = [](Call& c) { return getObject(c.ctx, c.req, c.sink, false); }};
    }
    if (!req.key.empty() && m == "HEAD" && part_number && !uploads && !upload_id) {
      return {.op = "HeadObject",
              .handler = [](Call& c) { return getObject(c.ctx, c.req, c.sink, true); }};
    }
    if (!req.key.empty() && m == "POST" && uploads && !upload_id && !part_number) {
      return {.op = "CreateMultipartUpload",
              .handler = [](Call& c) { return createMultipartUpload(c.ctx, c.req); },
              .creates_key = true};
    }
    return notImplemented("This multipart request is not implemented");
  }
  if (!req.bucket.empty() &&
      (req.hasQuery("record") || req.hasQuery("records") || req.hasQuery("records-batch") ||
       req.hasQuery("record-index"))) {
    // The record index (docs/record-index.md).
    if (req.key.empty() && req.hasQuery("record-index") &&
        (m == "GET" || m == "PUT" || m == "DELETE")) {
      return {.op = m == "GET"   ? "GetBucketRecordIndex"
                    : m == "PUT" ? "PutBucketRecordIndex"
                                 : "DeleteBucketRecordIndex",
              .handler = [](Call& c) { return bucketRecordIndex(c.ctx, c.req, c.body); }};
    }
    if (req.key.empty() && req.hasQuery("record") && m == "GET") {
      return {.op = "GetRecord",
              .handler = [](Call& c) { return getRecord(c.ctx, c.req, c.sink, false); }};
    }
    if (req.key.empty() && req.hasQuery("record") && m == "HEAD") {
      return {.op = "HeadRecord",
              .handler = [](Call& c) { return getRecord(c.ctx, c.req, c.sink, true); }};
    }
    if (req.key.empty() && req.hasQuery("records") && m == "GET") {
      return {.op = "ListRecords", .handler = [](Call& c) { return listRecords(c.ctx, c.req); }};
    }
    if (req.key.empty() && req.hasQuery("records-batch") && m == "POST") {
      return {.op = "BatchGetRecords", .handler = [](Call& c) {
                return batchGetRecords(c.ctx, c.req, c.body, c.sink);
              }};
    }
    if (!req.key.empty() && req.hasQuery("records") && m == "POST") {
      return {.op = "PutRecordRows",
              .handler = [](Call& c) { return putRecordRows(c.ctx, c.req, c.body); }};
    }
    if (!req.key.empty() && req.hasQuery("records") && m == "GET") {
      return {.op = "ListContainerRecords",
              .handler = [](Call& c) { return listContainerRecords(c.ctx, c.req); }};
    }
    return notImplemented("This record index request is not implemented");
  }
  if (req.bucket.empty()) {
    if (m == "GET") {
      return {.op = "ListBuckets", .handler = [](Call& c) { return listBuckets(c.ctx, c.req); }};
    }
  } else if (req.key.empty()) {
    if (m == "GET" && req.hasQuery("location")) {
      return {.op = "GetBucketLocation",
              .handler = [](Call& c) { return getBucketLocation(c.ctx, c.req); }};
    }
    if (m == "GET") {
      const bool v2 = req.queryValue("list-type") == std::optional<std::string_view>("2");
      return {.op = v2 ? "ListObjectsV2" : "ListObjects",
              .handler = [](Call& c) { return listObjects(c.ctx, c.req); }};
    }
    if (m == "PUT") {
      return {.op = "CreateBucket",
              .handler = [](Call& c) { return createBucket(c.ctx, c.req, c.body); }};
    }
    if (m == "HEAD") {
      return {.op = "HeadBucket", .handler = [](Call& c) { return headBucket(c.ctx, c.req); }};
    }
    if (m == "DELETE") {
      return {.op = "DeleteBucket",
              .handler = [](Call& c) { return deleteBucket(c.ctx, c.req); }};
    }
    if (m == "POST" && req.hasQuery("delete")) {
      return {.op = "DeleteObjects",
              .handler = [](Call& c) { return deleteObjects(c.ctx, c.req, c.body); }};
    }
  } else {
    if (m == "GET") {
      return {.op = "GetObject",
              .handler = [](Call& c) { return getObject(c.ctx, c.req, c.sink, false); }};
    }
    if (m == "HEAD") {
      return {.op = "HeadObject",
              .handler = [](Call& c) { return getObject(c.ctx, c.req, c.sink, true); }};
    }
    if (m == "PUT" && req.header("x-amz-copy-source")) {
      return {.op = "CopyObject",
              .handler = [](Call& c) { return copyObject(c.ctx, c.req, c.sink); },
              .creates_key = true};
    }
    if (m == "PUT") {
      return {.op = "PutObject",
              .handler = [](Call& c) { return putObject(c.ctx, c.req, c.auth, c.body); },
              .ingests_body = true,
              .creates_key = true};
    }
    if (m == "DELETE") {
      return {.op = "DeleteObject",
              .handler = [](Call& c) { return deleteObject(c.ctx, c.req); }};
    }
  }
  if (m == "POST") return notImplemented("This POST operation is not implemented");
  return methodNotAllowed();
}

// A presigned URL's x-amz-* parameters, once its signature holds, become the request's
// headers (as S3 reads them), before it is routed and authorised: x-amz-meta-*, x-amz-acl,
// x-amz-tagging, x-amz-copy-source... A SigV2 URL's Content-Type and Content-MD5 too
// (botocore puts them there; the signature covers them). A header given twice, or both
// ways with different values, is refused: which one would count is not for the server to
// guess (the same value both ways is the uploader repeating what was signed). So is a name
// or value an HTTP parser would have refused (decoded from the query, "%0D%0A" is CR LF:
// stored as metadata, it would split every later answer with it).
S3Result<void> hoistQueryHeaders(S3Request& req, int version) {
  HeaderList query;
  HeaderList hoisted;
  for (const auto& [name, value] : req.query) {
    std::string header = asciiLower(name);
    const bool v2_header = version == 2 && (header == "content-type" || header == "content-md5");
    if (!v2_header && !isHoistedHeaderParameter(name)) {
      query.emplace_back(name, value);
      continue;
    }
    if (!headerToken(header) || !headerValue(value)) {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "The query parameter " + header + " is not a valid HTTP header.");
    }
    const bool twice = std::any_of(hoisted.begin(), hoisted.end(),
                                   [&](const auto& h) { return h.first == header; });
    const auto sent = req.header(header);
    if (twice || (sent && trimSpaces(*sent) != trimSpaces(value))) {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    fmt::format("{} is given more than once (in the headers or the query).",
                                header));
    }
    if (!sent) hoisted.emplace_back(std::move(header), value);
  }
  // Nothing changes until every parameter has passed.
  req.query = std::move(query);
  req.headers.insert(req.headers.end(), std::make_move_iterator(hoisted.begin()),
                     std::make_move_iterator(hoisted.end()));
  return {};
}

}  // namespace

// A name some bucket could have: S3's rules at their widest (the legacy ones: 1-255
// letters, digits, '.', '-', '_'); creation asks for more (bucket_ops.cc). Anything else
// is refused before it is looked up: a '/' in it (path-style "%2F", or a Host header)
// would name another bucket's keys in the index, whose object keys are "bucket/key".
bool plausibleBucketName(std::string_view name) {
  return name.size() <= 255 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_';
         });
}

S3Result<void> checkObjectKey(std::string_view key) {
  if (key.size() > 1024) {
    return s3fail(S3ErrorCode::kKeyTooLongError, "Your key is too long");
  }
  if (key.find('\0') != std::string_view::npos || !validUtf8(key)) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "Object key must be valid UTF-8 without NUL characters");
  }
  return {};
}

S3Result<void> checkNewObjectKey(std::string_view key) {
  if (auto bad = checkObjectKey(key); !bad) return bad;
  if (!strictUtf8(key)) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "Object key must be valid UTF-8: no surrogates, over-long forms or code "
                  "points past U+10FFFF");
  }
  return {};
}

Task<S3Response> handleRequest(GatewayContext& ctx, S3Request& req, BodySource& body,
                               BodySink& sink, std::string& op) {
  op = "Unknown";
  bool virtual_host = false;
  if (auto parsed = parseTarget(req, ctx.options.virtual_host_domain, virtual_host); !parsed) {
    // A key refused for its form (too long, not UTF-8) is still an answer the page must be
    // allowed to read, as every other error is.
    if (!req.bucket.empty() && plausibleBucketName(req.bucket)) {
      co_await addCorsHeaders(ctx, req);
    }
    co_return errorResponse(parsed.error(), req);
  }
  if (!virtual_host && req.path.starts_with("/_granary/admin/")) {
    auto admin_auth = authenticate(ctx, req, false);
    if (!admin_auth) {
      op = "Auth";
      co_return errorResponse(admin_auth.error(), req);
    }
    if (!req.root) {
      op = "Admin";
      co_return errorResponse({S3ErrorCode::kAccessDenied, "Access Denied"}, req);
    }
    // SigV2 signs neither the query (?dry-run) nor the body (a user's secret key), and an
    // unsigned payload is a body anyone on the path may swap: the admin API takes neither.
    if (admin_auth->info && admin_auth->info->version != 4) {
      op = "Admin";
      co_return errorResponse({S3ErrorCode::kAccessDenied,
                               "The admin API takes Signature Version 4 requests only."},
                              req);
    }
    if (!body.done() && req.signed_payload_hash.empty()) {
      op = "Admin";
      co_return errorResponse({S3ErrorCode::kAccessDenied,
                               "The admin API takes only bodies whose SHA-256 is signed "
                               "(x-amz-content-sha256)."},
                              req);
    }
    co_await body.invite();
    co_return co_await adminRequest(ctx, req, body, op);
  }
  if (!virtual_host && req.path.starts_with("/_granary/")) {
    co_return co_await serveInternal(ctx, req, op);
  }

  // A browser's preflight carries no credentials; the bucket's CORS rules answer it.
  if (req.method == "OPTIONS" && !req.bucket.empty()) {
    op = "PreflightRequest";
    co_return co_await corsPreflight(ctx, req);
  }
  // A browser form upload: the form's policy and signature (in its body) authenticate it.
  const bool form =
      req.method == "POST" && !req.bucket.empty() && req.key.empty() && req.query.empty();
  // The signature is checked first, without waiting for anything. A client that sent
  // `Expect: 100-continue` is asked for its body only once the request will be served
  // (BodySource::invite): a request refused for its signature, its authorization, its
  // route or (uploads) its headers is answered without the client sending a byte of it.
  auto auth = form ? S3Result<RequestAuth>() : authenticate(ctx, req, virtual_host);
  // Every answer to a browser, errors included, says what the CORS rules allow, so that
  // the page can read it. (Tested here: a coroutine's frame is an allocation, 0.28% of a
  // 4 KiB GET's server time when every request entered it.)
  if (!req.bucket.empty() && req.header("origin")) co_await addCorsHeaders(ctx, req);

  if (form) {
    op = "PostObject";
    co_return co_await postObject(ctx, req, body);
  }
  if (!auth) {
    op = "Auth";
    co_return errorResponse(auth.error(), req);
  }
  if (auth->info && auth->info->presigned) {
    if (auto hoisted = hoistQueryHeaders(req, auth->info->version); !hoisted) {
      op = "Auth";
      co_return errorResponse(hoisted.error(), req);
    }
  }
  Route route = routeOf(req);
  // (The root user may do anything, unless it names another bucket owner than the one it
  // finds: only then is its request looked at.)
  if (!req.root || req.header("x-amz-expected-bucket-owner")) {
    // A request Granary does not serve is still the owner's to be told so.
    std::string_view asked = route.handler != nullptr ? route.op : std::string_view();
    if (auto denied = co_await authorizeRequest(ctx, req, asked)) {
      op = "Auth";
      co_return errorResponse(*denied, req);
    }
  }
  op = route.op;
  if (route.handler == nullptr) co_return errorResponse(route.error, req);
  // A key a request creates is held to RFC 3629 (a listing's XML must carry it); one
  // stored before that rule stays readable, as every request's key is checked loosely.
  if (route.creates_key) {
    if (auto bad = checkNewObjectKey(req.key); !bad) co_return errorResponse(bad.error(), req);
  }
  // A handler that reads its body as sent would leave an aws-chunked body's chunk
  // signatures unchecked (a body swapped under the request's signature).
  if (auth->info && auth->info->payload_hash.starts_with("STREAMING-") && !body.done() &&
      !route.ingests_body) {
    co_return errorResponse({S3ErrorCode::kInvalidRequest,
                             "An aws-chunked (STREAMING-*) body is accepted by PutObject and "
                             "UploadPart only: sign this request's payload SHA-256."},
                            req);
  }
  if (!route.ingests_body) co_await body.invite();
  Call call{ctx, req, body, sink, *auth, route};
  co_return co_await route.handler(call);
}

}  // namespace granary::gateway

// S3 operation handlers, one operation family per file. Each takes the shared context and
// a parsed, authenticated request, and returns the response (or streams it itself).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "calls_in_flight.h"
#include "connection_slots.h"
#include "credentials.h"
#include "granary/gateway/gateway.h"
#include "granary/gateway/repairer.h"
#include "md5_lanes.h"
#include "metrics.h"
#include "object_io.h"
#include "s3_request.h"
#include "sigv4.h"
#include "task_group.h"

namespace granary::gateway {

// How long an upload's chunk may wait for others to share the MD5 lanes with: less than
// writing the chunk takes, which its hash overlaps. With no wait, 1 MiB PUTs at 16
// connections spent 9.6% of the machine's CPU samples hashing one stream at a time (and
// 10.7% in the lanes); with this one, 2.8% (and 12.0%) (docs/benchmarks.md, "PUTs: MD5
// in lanes").
inline constexpr std::chrono::milliseconds kMd5Linger{5};


struct GatewayContext {
  GatewayContext(const GatewayOptions& o, GatewayDeps d, const ec::ErasureCode& code)
      : options(o),
        deps(d),
        metrics(d.registry),
        data(d.map, d.chunks, code, d.pool, d.bulk_pool, o.fragment_len,
             metrics.dataPathCounters(), o.buffer_memory,
             std::chrono::seconds(o.buffer_wait_seconds)),
        repairer(d.index, d.chunks, d.map, d.clock, d.registry,
                 RepairOptions{std::chrono::seconds(o.repair_interval_seconds),
                               o.repair_verify, d.background_leading}) {
    data.setHedgeAfter(std::chrono::milliseconds(std::max(0, o.hedge_after_ms)));
    data.setSendfile(o.sendfile);
    if (auto kernel = Md5Lanes::best()) {
      // The hasher waits on a pool thread, and other uploads hand their chunks in from pool
      // threads: with a pool this small, waiting could hold up the company it waits for.
      const bool linger = d.bulk_pool.threads() >= 4;
      md5_lanes = std::make_unique<Md5Lanes>(
          *kernel, linger ? kMd5Linger : std::chrono::milliseconds::zero());
    }
  }

  // An index commit's answer holds a token on `commits` until its callback is gone, which
  // is after the answer reached the loop: wait for the last before `commits` goes.
  ~GatewayContext() { commits.waitNone(); }
  GatewayContext(const GatewayContext&) = delete;
  GatewayContext& operator=(const GatewayContext&) = delete;

  GatewayOptions options;
  GatewayDeps deps;
  GatewayMetrics metrics;  // before data: the data path holds references to its counters
  DataPath data;
  Repairer repairer;
  CredentialStore credentials;
  SigningKeyCache signing_keys;
  ConnectionSlots connections{options.max_connections, options.max_connections_per_address};
  std::atomic<size_t> requests{0};     // requests being served (between head and answer)
  std::atomic<bool> draining{false};   // stopping: answers close their connections
  // A metrics scrape is reading every drive's and the index's figures: scrapes meanwhile
  // show the figures as they are instead of reading them all again.
  std::atomic<bool> scrape_in_flight{false};
  // Uploads' ETag MD5s, 16 at a time; null where the CPU has no multi-lane kernel (each
  // upload's MD5 then runs on its own).
  std::unique_ptr<Md5Lanes> md5_lanes;

  // Index commits whose answer an event loop still awaits (commitObject, removeObject,
  // removeObjectIn): the server waits for none before its loops go away.
  CallsInFlight commits;

  index_kv::Index& index() { return deps.index; }
  WorkerPool& pool() { return deps.pool; }
  WorkerPool& bulkPool() { return deps.bulk_pool; }
};

// Authenticated request: what the router learnt from SigV4, for handlers that need it
// (aws-chunked bodies are signed with the request's signing key).
struct RequestAuth {
  std::optional<AuthInfo> info;
  std::array<uint8_t, 32> signing_key{};
};

// Routes, authenticates and runs one request.
Task<S3Response> handleRequest(GatewayContext& ctx, S3Request& req, BodySource& body,
                               BodySink& sink, std::string& op_name);

// access.cc: nullopt if the request's sender may do `op` (the S3 operation's name, as the
// router names it: "GetObject") with it (AccessDenied otherwise): ownership, the bucket's
// policy and its ACL decide. DeleteObjects passes when some key may be deleted;
// authorizeDelete then asks for each, with the bucket already read. authorizeRead: may it
// read object `key` of `bucket` (a copy's source)? `version`: the request names the
// object's version (versionId), which asks for the *Version action.
// Whether the request's bucket is still the one authorization judged (its creation time):
// nullopt if so, or when none was judged (the root user); NoSuchBucket once it has been
// deleted and created again. Writes that cannot carry the time into the index's commit
// ask it after reading the object they change and before writing: their commit requires
// that object's version, which no bucket made since can hold (versions are unique), so
// a re-made bucket is caught either here or there.
Task<std::optional<S3Error>> bucketStillJudged(GatewayContext& ctx, const S3Request& req);
// The comparison itself, for a caller that has just read the bucket (changeBucket).
bool isJudgedBucket(const S3Request& req, const index_kv::BucketInfo& bucket);
// Sets req.bucket_created_unix_nanos when it judged the request against its bucket.
Task<std::optional<S3Error>> authorizeRequest(GatewayContext& ctx, S3Request& req,
                                              std::string_view op);
Task<std::optional<S3Error>> authorizeRead(GatewayContext& ctx, const S3Request& req,
                                           std::string_view bucket, std::string_view key,
                                           bool version);
// `conditions_held`: one vector for all of a request's keys (PolicyQuery::conditions_held).
std::optional<S3Error> authorizeDelete(const S3Request& req, const index_kv::BucketInfo& bucket,
                                       std::string_view key, bool version,
                                       std::vector<int8_t>* conditions_held);

// bucket_ops.cc
Task<S3Response> listBuckets(GatewayContext& ctx, const S3Request& req);
Task<S3Response> createBucket(GatewayContext& ctx, const S3Request& req, BodySource& body);
Task<S3Response> headBucket(GatewayContext& ctx, const S3Request& req);
Task<S3Response> deleteBucket(GatewayContext& ctx, const S3Request& req);
Task<S3Response> getBucketLocation(GatewayContext& ctx, const S3Request& req);
// bucket_ops.cc: reads the bucket, applies `change` to its settings and writes them back
// unless another change came first; then it reads again and applies `change` again (it
// must copy what it sets), at most kBucketChangeAttempts times (then OperationAborted,
// 409, as S3 answers concurrent configuration changes). Changes of different settings
// never undo each other.
inline constexpr int kBucketChangeAttempts = 8;
Task<S3Result<index_kv::BucketInfo>> changeBucket(
    GatewayContext& ctx, const S3Request& req,
    std::function<void(index_kv::BucketInfo&)> change);
// bucket_ops.cc: ?acl (canned private / public-read) and ?lifecycle.
Task<S3Response> getBucketAcl(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putBucketAcl(GatewayContext& ctx, const S3Request& req, BodySource& body);
// bucket_ops.cc: ?acl on an object: its bucket's ACL (access is per bucket); setting the
// ACL it already has through its bucket succeeds, any other is NotImplemented.
Task<S3Response> getObjectAcl(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putObjectAcl(GatewayContext& ctx, const S3Request& req, BodySource& body);
Task<S3Response> getBucketLifecycle(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putBucketLifecycle(GatewayContext& ctx, const S3Request& req,
                                    BodySource& body);
Task<S3Response> deleteBucketLifecycle(GatewayContext& ctx, const S3Request& req);
// bucket_ops.cc: ?tagging on a bucket (at most 50 tags, the object tags' rules).
Task<S3Response> getBucketTagging(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putBucketTagging(GatewayContext& ctx, const S3Request& req, BodySource& body);
Task<S3Response> deleteBucketTagging(GatewayContext& ctx, const S3Request& req);
// bucket_ops.cc: ?policy (bucket_policy.h) and ?policyStatus.
Task<S3Response> getBucketPolicy(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putBucketPolicy(GatewayContext& ctx, const S3Request& req, BodySource& body);
Task<S3Response> deleteBucketPolicy(GatewayContext& ctx, const S3Request& req);
Task<S3Response> getBucketPolicyStatus(GatewayContext& ctx, const S3Request& req);
// Get/PutBucketVersioning: Suspended or never set (objects keep the one version "null").
Task<S3Response> getBucketVersioning(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putBucketVersioning(GatewayContext& ctx, const S3Request& req,
                                     BodySource& body);
// bucket_ops.cc: ?cors, the rules cors.cc applies.
Task<S3Response> getBucketCors(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putBucketCors(GatewayContext& ctx, const S3Request& req, BodySource& body);
Task<S3Response> deleteBucketCors(GatewayContext& ctx, const S3Request& req);
// cors.cc: a browser's preflight (OPTIONS on a bucket or an object; no authentication),
// answered from the bucket's CORS rules.
Task<S3Response> corsPreflight(GatewayContext& ctx, const S3Request& req);
// cors.cc: for a request with an Origin header to a bucket (req.bucket not empty) with
// CORS rules, the headers every response to it carries (S3Request::response_headers):
// Vary (for every bucket, with rules or not), and the Access-Control-* headers of the
// rule that allows the origin and method, if one does.
Task<void> addCorsHeaders(GatewayContext& ctx, S3Request& req);
// bucket_ops.cc: a bucket setting Granary has no way to set (?versioning, ?policy,
// ?encryption, ...). Its GET answers as S3 answers for a bucket where it was never set: a
// document (`root`, holding `child` when it has one) or a 404 `error`. Tools that read
// every setting of a bucket (Terraform's aws_s3_bucket, s3cmd info, rclone) need these
// answers; a 501 fails them. Deleting one that has a Delete operation (`delete_op`) is a
// 204, as S3 answers a delete of a setting that is not there (Terraform's destroy).
struct AbsentSetting {
  std::string_view param = {};  // the sub-resource
  std::string_view op = {};     // the S3 operation's name, for metrics and the access log
  std::string_view delete_op = {};  // its Delete operation's name; empty: S3 has none
  std::string_view root = {};   // empty: answered with `error`
  std::string_view child = {};  // <child>child_value</child> inside `root`
  std::string_view child_value = {};
  S3ErrorCode error = S3ErrorCode::kInternalError;
  std::string_view message = {};
};
// The setting `req`'s query names, or nullptr.
const AbsentSetting* findAbsentBucketSetting(const S3Request& req);
Task<S3Response> getAbsentBucketSetting(GatewayContext& ctx, const S3Request& req,
                                        const AbsentSetting& setting);
// A 204 once the bucket is found: there was nothing to delete.
Task<S3Response> deleteAbsentBucketSetting(GatewayContext& ctx, const S3Request& req);
// The x-amz-acl header of CreateBucket / PutBucketAcl: public-read or not; NotImplemented
// for canned ACLs other than private and public-read.
S3Result<bool> cannedAclPublicRead(const S3Request& req);
// list_objects.cc
Task<S3Response> listObjects(GatewayContext& ctx, const S3Request& req);
// Continuation tokens (ListObjectsV2, ListBuckets) are opaque to clients: the hex of the
// last name returned. decodeToken: nullopt if not hex.
std::string encodeToken(std::string_view last);
std::optional<std::string> decodeToken(std::string_view token);
// put_object.cc
Task<S3Response> putObject(GatewayContext& ctx, const S3Request& req, const RequestAuth& auth,
                           BodySource& body);
// post_object.cc: a browser form upload (POST /bucket, multipart/form-data), authenticated
// by the form's policy and signature rather than the request's (it sets req.principal).
Task<S3Response> postObject(GatewayContext& ctx, S3Request& req, BodySource& body);
// router.cc: KeyTooLongError over 1024 bytes, InvalidArgument for a NUL or invalid UTF-8.
S3Result<void> checkObjectKey(std::string_view key);
// router.cc: a name some bucket could have (S3's legacy rules, the widest).
bool plausibleBucketName(std::string_view name);
// checkObjectKey, and UTF-8 as RFC 3629 has it: for a key a request creates.
S3Result<void> checkNewObjectKey(std::string_view key);
// The parameters a listing echoes in its XML (prefix, delimiter, the markers): UTF-8 as a
// request's key, no NUL; InvalidArgument otherwise (an answer no XML parser would read).
S3Result<void> checkListingParameters(const S3Request& req);
// A max-keys style parameter (max-keys, max-uploads, max-parts): absent = 1000, above
// 1000 = 1000; InvalidArgument unless an integer 0..2^31-1 (S3's "integer range").
S3Result<size_t> maxParam(const S3Request& req, std::string_view name);
// An S3 integer parameter: a decimal in 0..2^31-1, else nullopt.
std::optional<uint32_t> s3Integer(std::string_view text);
// get_object.cc
Task<S3Response> getObject(GatewayContext& ctx, const S3Request& req, BodySink& sink,
                           bool head_only);
Task<S3Response> deleteObject(GatewayContext& ctx, const S3Request& req);
// GET ?attributes (x-amz-object-attributes).
Task<S3Response> getObjectAttributes(GatewayContext& ctx, const S3Request& req);
// object_tagging.cc: GetObjectTagging, PutObjectTagging, DeleteObjectTagging.
Task<S3Response> getObjectTagging(GatewayContext& ctx, const S3Request& req);
Task<S3Response> putObjectTagging(GatewayContext& ctx, const S3Request& req, BodySource& body);
Task<S3Response> deleteObjectTagging(GatewayContext& ctx, const S3Request& req);
// delete_objects.cc
Task<S3Response> deleteObjects(GatewayContext& ctx, const S3Request& req, BodySource& body);

// multipart.cc
Task<S3Response> createMultipartUpload(GatewayContext& ctx, const S3Request& req);
Task<S3Response> uploadPart(GatewayContext& ctx, const S3Request& req, const RequestAuth& auth,
                            BodySource& body);
// UploadPart with x-amz-copy-source (and optional x-amz-copy-source-range).
Task<S3Response> uploadPartCopy(GatewayContext& ctx, const S3Request& req, BodySink& sink);
Task<S3Response> completeMultipartUpload(GatewayContext& ctx, const S3Request& req,
                                         BodySource& body, BodySink& sink);
Task<S3Response> abortMultipartUpload(GatewayContext& ctx, const S3Request& req);
Task<S3Response> listParts(GatewayContext& ctx, const S3Request& req);
Task<S3Response> listMultipartUploads(GatewayContext& ctx, const S3Request& req);

// conditional_write.cc: the Precondition a PutObject / Complete / CopyObject must commit
// under (If-None-Match: *, If-Match), already checked against the current object.
Task<S3Result<index_kv::Precondition>> writePrecondition(GatewayContext& ctx,
                                                         const S3Request& req);
// What a write that committed under `pre` answers when its commit failed with `st`: a
// condition the client set (If-None-Match, If-Match) that held when checked but not at the
// commit lost a race with another write: 409 ConditionalRequestConflict, as S3 answers
// ("you can retry the request"); otherwise fromStatus (NoSuchBucket for kNotFound).
S3Error writeCommitError(const Status& st, const index_kv::Precondition& pre);
// The Precondition a DeleteObject commits under: If-Match (an ETag or *: PreconditionFailed
// on another object, NoSuchKey without one; If-None-Match is not a delete condition), and
// the bucket authorization judged.
Task<S3Result<index_kv::Precondition>> deletePrecondition(GatewayContext& ctx,
                                                          const S3Request& req);
// mustMatch the current version of `key` if its ETag is `etag` (quoted or not) or `etag` is
// "*"; PreconditionFailed, or NoSuchKey (NoSuchBucket) without an object.
Task<S3Result<index_kv::Precondition>> matchCondition(GatewayContext& ctx,
                                                      std::string_view bucket,
                                                      std::string_view key,
                                                      std::string_view etag);
// get_object.cc: If-Match / If-None-Match / If-Modified-Since / If-Unmodified-Since
// (header names after `prefix`, e.g. "x-amz-copy-source-") against `m`, with S3's
// precedence: 412, 304, or nullopt when the request may proceed.
std::optional<int> evaluateConditions(const S3Request& req, const index_kv::Manifest& m,
                                      std::string_view prefix);
// copy_object.cc
Task<S3Response> copyObject(GatewayContext& ctx, const S3Request& req, BodySink& sink);

// record_handlers.cc: the record index API (docs/record-index.md).
Task<S3Response> getRecord(GatewayContext& ctx, const S3Request& req, BodySink& sink,
                           bool head_only);
Task<S3Response> listRecords(GatewayContext& ctx, const S3Request& req);
Task<S3Response> batchGetRecords(GatewayContext& ctx, const S3Request& req, BodySource& body,
                                 BodySink& sink);
Task<S3Response> putRecordRows(GatewayContext& ctx, const S3Request& req, BodySource& body);
Task<S3Response> listContainerRecords(GatewayContext& ctx, const S3Request& req);
// GET / PUT / DELETE ?record-index: the bucket's default indexing of uploads.
Task<S3Response> bucketRecordIndex(GatewayContext& ctx, const S3Request& req, BodySource& body);

// admin.cc: /_granary/admin/ requests of an authenticated root user.
Task<S3Response> adminRequest(GatewayContext& ctx, const S3Request& req, BodySource& body,
                              std::string& op);
// Reloads the named users from the index into ctx.credentials: blocking (start-up), or on
// the worker pool.
Status reloadUsers(GatewayContext& ctx);
Task<Status> refreshUsers(GatewayContext& ctx);

// A 200 answer with an XML body / a JSON body (`indent` as nlohmann::json::dump: -1 is
// compact).
S3Response xmlResponse(std::string body);
S3Response jsonResponse(const nlohmann::json& j, int indent = -1);

// What an x-amz-checksum-* header on a request with a small body is the checksum of: the
// body (bucket settings, tagging...), or the object the request makes
// (CompleteMultipartUpload). kBodyRequired: the body's, and the request must carry it or
// Content-MD5 (DeleteObjects, as S3: where the signature does not cover the body, SigV2,
// a presigned URL or UNSIGNED-PAYLOAD, the digest is what ties the body to the request).
// kBodyUnlessSigned: the same, except that a signed payload hash ties it already, and an
// empty body needs none (the settings that grant access or delete objects: policy, ACLs,
// CORS, lifecycle, tags; a replayed request must not carry another body).
enum class ChecksumHeaderOf { kBody, kBodyRequired, kBodyUnlessSigned, kObject };
// Reads the whole (small) request body, refusing more than `limit` bytes, and checks it
// against what the request says of it: the signed payload hash (XAmzContentSHA256Mismatch),
// Content-MD5 (InvalidDigest, BadDigest) and an x-amz-checksum-* header of the body
// (InvalidRequest, BadDigest), each if the request has one (one of the last two required
// with kBodyRequired, and kBodyUnlessSigned without a signed payload hash: InvalidRequest).
// The body must come within smallBodyDeadline(limit): a client that trickles a byte just
// inside the I/O timeout would otherwise hold its connection and buffer for ever.
std::chrono::seconds smallBodyDeadline(size_t limit);
Task<S3Result<std::string>> readSmallBody(const S3Request& req, BodySource& body, size_t limit,
                                          ChecksumHeaderOf checksum = ChecksumHeaderOf::kBody);
// The bucket's settings: from memory on the event loop when the index can answer without
// I/O (access checks of named users ask on every request), else on a worker thread.
Task<Result<index_kv::BucketInfo>> lookupBucket(GatewayContext& ctx, std::string_view name);
// NoSuchBucket (or the lookup's error) if the request's bucket is missing and the request
// skipped authorization, which looks it up (the root user's: bucket_created_unix_nanos 0).
// Writes ask it before reading a body or a copy source they would store for nothing.
Task<std::optional<S3Error>> missingBucketOfRoot(GatewayContext& ctx, const S3Request& req);
// The current manifest of bucket/key: from memory on the event loop when the index can
// answer without I/O, else on a worker thread.
Task<Result<index_kv::Manifest>> lookupObject(GatewayContext& ctx, std::string_view bucket,
                                              std::string_view key);
// index_commit.cc: Index::putObject and Index::deleteObject for an event loop: with no
// thread waiting for the group commit where the index commits asynchronously (the
// embedded one), else on a worker thread. Each returns the version it replaced or removed.
Task<Result<std::optional<VersionId>>> commitObject(GatewayContext& ctx,
                                                    std::string_view bucket,
                                                    std::string_view key,
                                                    const index_kv::Manifest& m,
                                                    index_kv::Precondition pre);
// removeObject deletes under `pre`: its bucket_created_unix_nanos names the bucket (0: any
// bucket of that name; S3Request::bucket_created_unix_nanos: the one authorization judged),
// a kMustMatch the version (a conditional delete).
Task<Result<std::optional<VersionId>>> removeObject(GatewayContext& ctx,
                                                    std::string_view bucket,
                                                    std::string_view key,
                                                    index_kv::Precondition pre);
// Adds removeObject(bucket, key, pre) to `group`; `out` gets its answer. The group's
// coroutine awaits it with the group's other tasks.
void removeObjectIn(TaskGroup& group, GatewayContext& ctx, std::string_view bucket,
                    std::string_view key, index_kv::Precondition pre,
                    Result<std::optional<VersionId>>& out);
// NoSuchBucket vs NoSuchKey for an index kNotFound on an object operation in `bucket`.
Task<S3Error> objectNotFound(GatewayContext& ctx, std::string_view bucket, const Status& st);
// lookupObject, with a missing object (or bucket) turned into its S3 error.
Task<S3Result<index_kv::Manifest>> loadObject(GatewayContext& ctx, std::string_view bucket,
                                              std::string_view key);

}  // namespace granary::gateway

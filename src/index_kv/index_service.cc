// The index over the internal API (index_service.h): one signed POST per Index method,
// arguments and answers as CBOR maps. Values that have a storage encoding (buckets, users,
// manifests, uploads, parts: codec.h) travel as that encoding in a CBOR byte string, so
// the wire and the disk cannot disagree on them; the rest are small maps written here.
// Strings go as CBOR text strings holding the raw bytes (nlohmann's CBOR reader and
// writer do not check UTF-8), so any key survives.
#include "granary/index_kv/index_service.h"

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "granary/common/clock.h"
#include "index_kv/cbor_map_reader.h"
#include "index_kv/codec.h"

namespace granary::index_kv {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kIndexPrefix = "/internal/v1/index/";

// A malformed argument or answer: caught at the boundary (kInvalidArgument on the server,
// kIoError on the client).
struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T must(Result<T> r) {
  if (!r) throw WireError(r.error().message());
  return std::move(*r);
}

// ---- value <-> CBOR ------------------------------------------------------------------

Json bytes(std::string_view s) { return Json::binary(std::vector<uint8_t>(s.begin(), s.end())); }
std::string unbytes(const Json& j) {
  const auto& b = j.get_binary();
  return std::string(b.begin(), b.end());
}

Json ver(const VersionId& v) {
  return Json::binary(std::vector<uint8_t>(v.bytes.begin(), v.bytes.end()));
}
VersionId unver(const Json& j) { return must(VersionId::fromBytes(j.get_binary())); }
Json optVer(const std::optional<VersionId>& v) { return v ? ver(*v) : Json(nullptr); }
std::optional<VersionId> unoptVer(const Json& j) {
  if (j.is_null()) return std::nullopt;
  return unver(j);
}

// Values with a storage encoding.
template <typename T, std::string (*Encode)(const T&), Result<T> (*Decode)(std::string_view)>
struct Stored {
  static Json to(const T& v) { return bytes(Encode(v)); }
  static T from(const Json& j) { return must(Decode(unbytes(j))); }
};
using BucketCodec = Stored<BucketInfo, encodeBucket, decodeBucket>;
using UserCodec = Stored<UserInfo, encodeUser, decodeUser>;
using ManifestCodec = Stored<Manifest, encodeManifest, decodeManifest>;
using UploadCodec = Stored<MultipartUpload, encodeUpload, decodeUpload>;
using PartCodec = Stored<PartInfo, encodePart, decodePart>;

template <typename Codec, typename T>
Json list(const std::vector<T>& items) {
  Json a = Json::array();
  for (const auto& item : items) a.push_back(Codec::to(item));
  return a;
}
template <typename Codec>
auto unlist(const Json& j) {
  std::vector<decltype(Codec::from(j))> out;
  for (const auto& item : j) out.push_back(Codec::from(item));
  return out;
}

// Tags as [[name, value], ...] of byte strings, and the bucket's creation time, each sent
// only when set: an index service older than the field ignores it (then only the version,
// or only the bucket's name, is checked).
Json toJson(const Precondition& p) {
  Json j = {{"kind", static_cast<int>(p.kind)}, {"version", ver(p.version)}};
  if (p.bucket_created_unix_nanos != 0) j["bucket_created"] = p.bucket_created_unix_nanos;
  if (!p.tags.empty()) {
    Json tags = Json::array();
    for (const auto& [name, value] : p.tags) {
      tags.push_back(Json::array({bytes(name), bytes(value)}));
    }
    j["tags"] = std::move(tags);
  }
  return j;
}
// A precondition's, delete_bucket's and create_upload's "bucket_created" (0 when absent).
int64_t bucketCreated(const Json& a) {
  auto it = a.find("bucket_created");
  return it == a.end() ? 0 : it->get<int64_t>();
}
Precondition preconditionFrom(const Json& j) {
  int kind = j.at("kind").get<int>();
  if (kind < 0 || kind > static_cast<int>(Precondition::Kind::kMustMatch)) {
    throw WireError("bad precondition kind");
  }
  Precondition p{static_cast<Precondition::Kind>(kind), unver(j.at("version"))};
  if (auto it = j.find("tags"); it != j.end()) {
    for (const Json& tag : *it) p.tags.emplace(unbytes(tag.at(0)), unbytes(tag.at(1)));
  }
  p.bucket_created_unix_nanos = bucketCreated(j);
  return p;
}

struct SummaryCodec {
  static Json to(const ObjectSummary& s) {
    return {{"key", s.key}, {"value", bytes(encodeSummary(s))}};
  }
  static ObjectSummary from(const Json& j) {
    return must(decodeSummary(j.at("key").get<std::string>(), unbytes(j.at("value"))));
  }
};

struct GcEntryCodec {
  static Json to(const GcEntry& e) {
    return {{"queue_key", bytes(e.queue_key)},
            {"version", ver(e.version)},
            {"enqueued", e.enqueued_unix_nanos},
            {"blobs", bytes(encodeGcBlobs(e.blobs))}};
  }
  static GcEntry from(const Json& j) {
    return {unbytes(j.at("queue_key")), unver(j.at("version")),
            j.at("enqueued").get<int64_t>(), must(decodeGcBlobs(unbytes(j.at("blobs"))))};
  }
};

Json toJson(const RecordIndexInfo& r) {
  return {{"format", r.format}, {"status", r.status}, {"message", r.message},
          {"set", ver(r.set)},  {"rows", r.rows},     {"row_bytes", r.row_bytes}};
}
RecordIndexInfo recordInfoFrom(const Json& j) {
  return {j.at("format").get<std::string>(), j.at("status").get<std::string>(),
          j.at("message").get<std::string>(), unver(j.at("set")),
          j.at("rows").get<uint64_t>(), j.at("row_bytes").get<uint64_t>()};
}

struct RowCodec {
  static Json to(const RecordRow& r) {
    return {{"key", r.key},       {"container", r.container}, {"set", ver(r.set)},
            {"offset", r.offset}, {"length", r.length},       {"crc32c", r.crc32c},
            {"type", r.type}};
  }
  static RecordRow from(const Json& j) {
    return {j.at("key").get<std::string>(), j.at("container").get<std::string>(),
            unver(j.at("set")),             j.at("offset").get<uint64_t>(),
            j.at("length").get<uint64_t>(), j.at("crc32c").get<uint32_t>(),
            j.at("type").get<std::string>()};
  }
};

struct LocationCodec {
  static Json to(const RecordLocation& l) {
    return {{"row", RowCodec::to(l.row)},
            {"container_version", ver(l.container_version)},
            {"container_mtime", l.container_mtime_unix_nanos}};
  }
  static RecordLocation from(const Json& j) {
    return {RowCodec::from(j.at("row")), unver(j.at("container_version")),
            j.at("container_mtime").get<int64_t>()};
  }
};

// ---- the operations ------------------------------------------------------------------
// Each method has one name on the wire; its arguments are the keys of the request map.

Result<Json> answer(const Status& st) {
  if (!st.isOk()) return fail(st);
  return Json(nullptr);
}
template <typename T, typename F>
Result<Json> answer(const Result<T>& r, F toJsonFn) {
  if (!r) return fail(r.error());
  return toJsonFn(*r);
}

using Op = std::function<Result<Json>(Index&, const Json&)>;

std::string str(const Json& args, const char* name) { return args.at(name).get<std::string>(); }

const std::map<std::string, Op, std::less<>>& operations() {
  static const std::map<std::string, Op, std::less<>> ops = {
      {"create_bucket",
       [](Index& x, const Json& a) {
         return answer(x.createBucket(BucketCodec::from(a.at("bucket"))));
       }},
      {"get_bucket",
       [](Index& x, const Json& a) {
         return answer(x.getBucket(str(a, "name")), BucketCodec::to);
       }},
      {"list_buckets",
       [](Index& x, const Json&) {
         return answer(x.listBuckets(), list<BucketCodec, BucketInfo>);
       }},
      {"update_bucket",
       [](Index& x, const Json& a) {
         return answer(x.updateBucket(BucketCodec::from(a.at("bucket")),
                                      BucketCodec::from(a.at("expected"))));
       }},
      {"delete_bucket",
       [](Index& x, const Json& a) {
         return answer(x.deleteBucket(str(a, "name"), bucketCreated(a)));
       }},
      {"create_user",
       [](Index& x, const Json& a) { return answer(x.createUser(UserCodec::from(a.at("user")))); }},
      {"list_users",
       [](Index& x, const Json&) { return answer(x.listUsers(), list<UserCodec, UserInfo>); }},
      {"delete_user",
       [](Index& x, const Json& a) { return answer(x.deleteUser(str(a, "name"))); }},
      {"put_object",
       [](Index& x, const Json& a) {
         return answer(x.putObject(str(a, "bucket"), str(a, "key"),
                                   ManifestCodec::from(a.at("manifest")),
                                   preconditionFrom(a.at("pre"))),
                       optVer);
       }},
      {"blobs_in_use",
       [](Index& x, const Json& a) {
         return answer(x.blobsInUse(unver(a.at("version")),
                                    must(decodeGcBlobs(unbytes(a.at("among"))))),
                       [](const std::vector<BlobRef>& b) { return bytes(encodeGcBlobs(b)); });
       }},
      {"relocate_fragments",
       [](Index& x, const Json& a) {
         return answer(x.relocateFragments(str(a, "bucket"), str(a, "key"),
                                           ManifestCodec::from(a.at("expected")),
                                           ManifestCodec::from(a.at("updated"))));
       }},
      {"update_object_tags",
       [](Index& x, const Json& a) {
         return answer(x.updateObjectTags(str(a, "bucket"), str(a, "key"),
                                          ManifestCodec::from(a.at("expected")),
                                          ManifestCodec::from(a.at("updated"))));
       }},
      {"get_object",
       [](Index& x, const Json& a) {
         return answer(x.getObject(str(a, "bucket"), str(a, "key")), ManifestCodec::to);
       }},
      {"delete_object",
       [](Index& x, const Json& a) {
         return answer(
             x.deleteObject(str(a, "bucket"), str(a, "key"), preconditionFrom(a.at("pre"))),
             optVer);
       }},
      {"list_objects",
       [](Index& x, const Json& a) {
         ListRequest req{str(a, "prefix"), str(a, "delimiter"), str(a, "start_after"),
                         a.at("max_keys").get<size_t>()};
         return answer(x.listObjects(str(a, "bucket"), req), [](const ListResult& r) {
           return Json{{"objects", list<SummaryCodec>(r.objects)},
                       {"common_prefixes", r.common_prefixes},
                       {"truncated", r.truncated},
                       {"next_start_after", r.next_start_after},
                       {"keys_examined", r.keys_examined}};
         });
       }},
      {"gc_due",
       [](Index& x, const Json& a) {
         // "after" (optional): a gateway older than it asks for the first page only.
         const std::string after = a.contains("after") ? unbytes(a.at("after")) : "";
         return answer(x.gcDue(a.at("before").get<int64_t>(), a.at("limit").get<size_t>(),
                               after),
                       list<GcEntryCodec, GcEntry>);
       }},
      {"gc_done",
       [](Index& x, const Json& a) {
         return answer(x.gcDone(unlist<GcEntryCodec>(a.at("entries"))));
       }},
      {"blob_referenced",
       [](Index& x, const Json& a) {
         return answer(x.isBlobVersionReferenced(unver(a.at("version"))),
                       [](bool b) { return Json(b); });
       }},
      {"mark_version_dead",
       [](Index& x, const Json& a) {
         return answer(x.markVersionDead(unver(a.at("version"))),
                       [](bool b) { return Json(b); });
       }},
      {"hold_lease",
       [](Index& x, const Json& a) {
         return answer(x.holdLease(str(a, "name"), str(a, "holder"),
                                   std::chrono::milliseconds(a.at("ttl_ms").get<int64_t>())),
                       [](bool b) { return Json(b); });
       }},
      {"index_created",
       [](Index& x, const Json&) {
         return answer(x.createdUnixNanos(), [](int64_t t) { return Json(t); });
       }},
      {"create_upload",
       [](Index& x, const Json& a) {
         return answer(x.createUpload(UploadCodec::from(a.at("upload")), bucketCreated(a)));
       }},
      {"get_upload",
       [](Index& x, const Json& a) {
         return answer(x.getUpload(str(a, "bucket"), str(a, "key"), str(a, "upload_id")),
                       UploadCodec::to);
       }},
      {"put_part",
       [](Index& x, const Json& a) {
         return answer(x.putPart(str(a, "bucket"), str(a, "key"), str(a, "upload_id"),
                                 PartCodec::from(a.at("part"))),
                       optVer);
       }},
      {"relocate_part_fragments",
       [](Index& x, const Json& a) {
         return answer(x.relocatePartFragments(str(a, "bucket"), str(a, "key"),
                                               str(a, "upload_id"),
                                               PartCodec::from(a.at("expected")),
                                               PartCodec::from(a.at("updated"))));
       }},
      {"list_parts",
       [](Index& x, const Json& a) {
         return answer(x.listParts(str(a, "bucket"), str(a, "key"), str(a, "upload_id"),
                                   a.at("after_part").get<uint32_t>(),
                                   a.at("max_parts").get<size_t>()),
                       list<PartCodec, PartInfo>);
       }},
      {"list_uploads",
       [](Index& x, const Json& a) {
         ListUploadsRequest req{str(a, "prefix"), str(a, "key_marker"),
                                str(a, "upload_id_marker"), a.at("max_uploads").get<size_t>()};
         return answer(x.listUploads(str(a, "bucket"), req), [](const ListUploadsResult& r) {
           return Json{{"uploads", list<UploadCodec>(r.uploads)}, {"truncated", r.truncated}};
         });
       }},
      {"complete_upload",
       [](Index& x, const Json& a) {
         return answer(x.completeUpload(str(a, "bucket"), str(a, "key"), str(a, "upload_id"),
                                        ManifestCodec::from(a.at("manifest")),
                                        preconditionFrom(a.at("pre"))),
                       optVer);
       }},
      {"abort_upload",
       [](Index& x, const Json& a) {
         return answer(x.abortUpload(str(a, "bucket"), str(a, "key"), str(a, "upload_id")));
       }},
      {"create_record_set",
       [](Index& x, const Json& a) {
         return answer(
             x.createRecordSet(str(a, "bucket"), str(a, "container"), unver(a.at("set"))));
       }},
      {"put_record_rows",
       [](Index& x, const Json& a) {
         return answer(x.putRecordRows(str(a, "bucket"), str(a, "container"),
                                       unver(a.at("set")), unlist<RowCodec>(a.at("rows"))));
       }},
      {"attach_records",
       [](Index& x, const Json& a) {
         return answer(x.attachRecords(str(a, "bucket"), str(a, "container"),
                                       unver(a.at("version")), recordInfoFrom(a.at("info"))),
                       [](const RecordIndexInfo& r) { return toJson(r); });
       }},
      {"abandon_records",
       [](Index& x, const Json& a) { return answer(x.abandonRecords(unver(a.at("set")))); }},
      {"list_records",
       [](Index& x, const Json& a) {
         RecordQuery q;
         if (!a.at("key").is_null()) q.key = str(a, "key");
         q.prefix = str(a, "prefix");
         q.container = str(a, "container");
         q.type = str(a, "type");
         q.start_after = str(a, "start_after");
         // (Absent from older gateways, which filter by offset themselves.)
         if (a.contains("offset")) q.offset = a.at("offset").get<uint64_t>();
         q.limit = a.at("limit").get<size_t>();
         q.max_examined = a.at("max_examined").get<size_t>();
         return answer(x.listRecords(str(a, "bucket"), q), [](const RecordPage& p) {
           return Json{{"records", list<LocationCodec>(p.records)},
                       {"truncated", p.truncated},
                       {"next", p.next}};
         });
       }},
      {"set_records",
       [](Index& x, const Json& a) {
         std::optional<RecordCursor> after;
         if (!a.at("after").is_null()) {
           after = RecordCursor{a.at("after").get<uint64_t>(), {}};
           // (Absent from older gateways: rows after the whole offset, as they asked.)
           if (a.contains("after_key")) after->key = a.at("after_key").get<std::string>();
         }
         return answer(x.setRecords(unver(a.at("set")), after, a.at("limit").get<size_t>()),
                       list<RowCodec, RecordRow>);
       }},
      {"record_gc",
       [](Index& x, const Json& a) {
         return answer(x.collectRecordGarbage(a.at("max_rows").get<size_t>(),
                                              a.at("orphan_before").get<int64_t>()),
                       [](const RecordGcStats& s) {
                         return Json{{"rows_removed", s.rows_removed},
                                     {"sets_removed", s.sets_removed}};
                       });
       }},
      {"record_stats",
       [](Index& x, const Json&) -> Result<Json> {
         auto stats = x.recordIndexStats();
         if (!stats) return fail(stats.error());
         const RecordIndexStats& s = *stats;
         return Json{{"rows", s.rows}, {"bytes", s.bytes}, {"sets", s.sets},
                     {"dead_sets", s.dead_sets}};
       }},
      {"storage_stats",
       [](Index& x, const Json&) -> Result<Json> {
         auto stats = x.storageStats();
         if (!stats) return fail(stats.error());
         const IndexStorageStats& s = *stats;
         return Json{{"sst_bytes", s.sst_bytes},
                     {"memtable_bytes", s.memtable_bytes},
                     {"live_data_bytes", s.live_data_bytes}};
       }},
      {"commit_stats",
       [](Index& x, const Json&) -> Result<Json> {
         auto stats = x.commitStats();
         if (!stats) return fail(stats.error());
         const IndexCommitStats& s = *stats;
         return Json{{"batches", s.batches},
                     {"requests", s.requests},
                     {"opened_unix_nanos", s.opened_unix_nanos},
                     {"failed_writes", s.failed_writes},
                     {"failing", s.failing}};
       }},
  };
  return ops;
}

std::string toCbor(const Json& j) {
  std::string out;
  Json::to_cbor(j, out);
  return out;
}

Json fromCbor(std::string_view s) {
  Json j = parseCborDom(s);
  if (j.is_discarded()) throw WireError("body is not CBOR (or nested too deep)");
  return j;
}

rpc::Reply cborReply(const Json& j) {
  rpc::Reply r;
  r.headers = {{"content-type", "application/cbor"}};
  r.body = toCbor(j);
  return r;
}

rpc::Reply handle(Index& index, const rpc::Request& req) {
  auto [path, query] = rpc::splitTarget(req.target);
  if (!path.starts_with(kIndexPrefix)) {
    if (path == "/internal/v1/health" && req.method == "GET") {
      return rpc::jsonReply(R"({"status":"ok"})");
    }
    return rpc::errorReply(
        Status::invalidArgument("no such internal API path '" + std::string(path) + "'"));
  }
  auto it = operations().find(path.substr(kIndexPrefix.size()));
  if (it == operations().end()) {
    return rpc::errorReply(
        Status::invalidArgument("no such index method '" + std::string(path) + "'"));
  }
  if (req.method != "POST") return rpc::methodNotAllowed(req.method);
  Result<Json> out = [&]() -> Result<Json> {
    try {
      std::string_view body(reinterpret_cast<const char*>(req.body.data()), req.body.size());
      return it->second(index, fromCbor(body));
    } catch (const WireError& e) {
      return fail(Status::invalidArgument(std::string("malformed index request: ") + e.what()));
    } catch (const Json::exception& e) {  // a missing or mistyped field
      return fail(Status::invalidArgument(std::string("malformed index request: ") + e.what()));
    } catch (const std::exception& e) {
      // Anything else (bad_alloc) may come after the index committed: not a refusal, which
      // would make a gateway remove the blobs of what is now a committed object.
      return fail(Status::internal(std::string("index request failed: ") + e.what()));
    }
  }();
  return out ? cborReply(*out) : rpc::errorReply(out.error());
}

// ---- the client ----------------------------------------------------------------------

class RemoteIndex final : public Index {
 public:
  RemoteIndex(std::string endpoint, std::string secret, RemoteIndexOptions options,
              const Clock& clock)
      : endpoint_(std::move(endpoint)), client_(std::move(secret), options, clock) {}

  Status createBucket(const BucketInfo& bucket) override {
    return mutate("create_bucket", {{"bucket", BucketCodec::to(bucket)}});
  }
  Result<BucketInfo> getBucket(std::string_view name) override {
    return query("get_bucket", {{"name", name}}, BucketCodec::from);
  }
  Result<std::vector<BucketInfo>> listBuckets() override {
    return query("list_buckets", Json::object(), unlist<BucketCodec>);
  }
  Status updateBucket(const BucketInfo& bucket, const BucketInfo& expected) override {
    return mutate("update_bucket",
                  {{"bucket", BucketCodec::to(bucket)}, {"expected", BucketCodec::to(expected)}});
  }
  Status deleteBucket(std::string_view name, int64_t created_unix_nanos) override {
    Json args = {{"name", name}};
    if (created_unix_nanos != 0) args["bucket_created"] = created_unix_nanos;
    return mutate("delete_bucket", std::move(args));
  }
  Status createUser(const UserInfo& user) override {
    return mutate("create_user", {{"user", UserCodec::to(user)}});
  }
  Result<std::vector<UserInfo>> listUsers() override {
    return query("list_users", Json::object(), unlist<UserCodec>);
  }
  Status deleteUser(std::string_view name) override {
    return mutate("delete_user", {{"name", name}});
  }
  Result<std::optional<VersionId>> putObject(std::string_view bucket, std::string_view key,
                                             const Manifest& manifest,
                                             Precondition pre) override {
    return call("put_object",
                {{"bucket", bucket}, {"key", key}, {"manifest", ManifestCodec::to(manifest)},
                 {"pre", toJson(pre)}},
                false, unoptVer);
  }
  Result<std::vector<BlobRef>> blobsInUse(const VersionId& version,
                                          const std::vector<BlobRef>& among) override {
    return query("blobs_in_use",
                 {{"version", ver(version)}, {"among", bytes(encodeGcBlobs(among))}},
                 [](const Json& j) { return must(decodeGcBlobs(unbytes(j))); });
  }
  Status relocateFragments(std::string_view bucket, std::string_view key,
                           const Manifest& expected, const Manifest& updated) override {
    return mutate("relocate_fragments",
                  {{"bucket", bucket}, {"key", key}, {"expected", ManifestCodec::to(expected)},
                   {"updated", ManifestCodec::to(updated)}});
  }
  Status updateObjectTags(std::string_view bucket, std::string_view key,
                          const Manifest& expected, const Manifest& updated) override {
    return mutate("update_object_tags",
                  {{"bucket", bucket}, {"key", key}, {"expected", ManifestCodec::to(expected)},
                   {"updated", ManifestCodec::to(updated)}});
  }
  Result<Manifest> getObject(std::string_view bucket, std::string_view key) override {
    return query("get_object", {{"bucket", bucket}, {"key", key}}, ManifestCodec::from);
  }
  Result<std::optional<VersionId>> deleteObject(std::string_view bucket, std::string_view key,
                                                Precondition pre) override {
    return call("delete_object", {{"bucket", bucket}, {"key", key}, {"pre", toJson(pre)}},
                false, unoptVer);
  }
  Result<ListResult> listObjects(std::string_view bucket, const ListRequest& req) override {
    Json args = {{"bucket", bucket},           {"prefix", req.prefix},
                 {"delimiter", req.delimiter}, {"start_after", req.start_after},
                 {"max_keys", req.max_keys}};
    return query("list_objects", args, [](const Json& j) {
      return ListResult{unlist<SummaryCodec>(j.at("objects")),
                        j.at("common_prefixes").get<std::vector<std::string>>(),
                        j.at("truncated").get<bool>(), j.at("next_start_after").get<std::string>(),
                        j.at("keys_examined").get<uint64_t>()};
    });
  }
  Result<std::vector<GcEntry>> gcDue(int64_t before, size_t limit,
                                     std::string_view after = {}) override {
    Json args = {{"before", before}, {"limit", limit}};
    if (!after.empty()) args["after"] = bytes(after);
    return query("gc_due", args, unlist<GcEntryCodec>);
  }
  Status gcDone(const std::vector<GcEntry>& entries) override {
    // Idempotent: removing queue entries twice removes nothing the second time. The index
    // needs only the queue keys: the blob lists stay behind (an entry of a multi-TiB
    // object's would not fit in a request).
    std::vector<GcEntry> keys;
    keys.reserve(entries.size());
    for (const GcEntry& e : entries) {
      keys.push_back(GcEntry{e.queue_key, e.version, e.enqueued_unix_nanos, {}});
    }
    return status(call("gc_done", {{"entries", list<GcEntryCodec>(keys)}}, true, ignore));
  }
  Result<bool> isBlobVersionReferenced(const VersionId& version) override {
    return query("blob_referenced", {{"version", ver(version)}},
                 [](const Json& j) { return j.get<bool>(); });
  }
  // Idempotent: a version already dead answers true again. An index service older than
  // this call refuses it, and the sweep then removes nothing (upgrade the index first).
  Result<bool> markVersionDead(const VersionId& version) override {
    return call("mark_version_dead", {{"version", ver(version)}}, true,
                [](const Json& j) { return j.get<bool>(); });
  }
  // Idempotent (a renewal). An index service older than the call refuses it: then every
  // gateway leads, as they all did before leases.
  Result<bool> holdLease(std::string_view name, std::string_view holder,
                         std::chrono::milliseconds ttl) override {
    auto held = query("hold_lease", {{"name", name}, {"holder", holder}, {"ttl_ms", ttl.count()}},
                      [](const Json& j) { return j.get<bool>(); });
    if (!held && held.error().code() == Status::Code::kInvalidArgument &&
        held.error().message().find("no such index method") != std::string::npos) {
      return true;
    }
    return held;
  }
  Result<int64_t> createdUnixNanos() override {
    return query("index_created", Json::object(), [](const Json& j) { return j.get<int64_t>(); });
  }
  Status createUpload(const MultipartUpload& upload, int64_t bucket_created_unix_nanos) override {
    Json args = {{"upload", UploadCodec::to(upload)}};
    if (bucket_created_unix_nanos != 0) args["bucket_created"] = bucket_created_unix_nanos;
    return mutate("create_upload", std::move(args));
  }
  Result<MultipartUpload> getUpload(std::string_view bucket, std::string_view key,
                                    std::string_view upload_id) override {
    return query("get_upload", {{"bucket", bucket}, {"key", key}, {"upload_id", upload_id}},
                 UploadCodec::from);
  }
  Result<std::optional<VersionId>> putPart(std::string_view bucket, std::string_view key,
                                           std::string_view upload_id,
                                           const PartInfo& part) override {
    return call("put_part",
                {{"bucket", bucket}, {"key", key}, {"upload_id", upload_id},
                 {"part", PartCodec::to(part)}},
                false, unoptVer);
  }
  Status relocatePartFragments(std::string_view bucket, std::string_view key,
                               std::string_view upload_id, const PartInfo& expected,
                               const PartInfo& updated) override {
    return mutate("relocate_part_fragments",
                  {{"bucket", bucket}, {"key", key}, {"upload_id", upload_id},
                   {"expected", PartCodec::to(expected)}, {"updated", PartCodec::to(updated)}});
  }
  Result<std::vector<PartInfo>> listParts(std::string_view bucket, std::string_view key,
                                          std::string_view upload_id, uint32_t after_part,
                                          size_t max_parts) override {
    return query("list_parts",
                 {{"bucket", bucket}, {"key", key}, {"upload_id", upload_id},
                  {"after_part", after_part}, {"max_parts", max_parts}},
                 unlist<PartCodec>);
  }
  Result<ListUploadsResult> listUploads(std::string_view bucket,
                                        const ListUploadsRequest& req) override {
    Json args = {{"bucket", bucket},
                 {"prefix", req.prefix},
                 {"key_marker", req.key_marker},
                 {"upload_id_marker", req.upload_id_marker},
                 {"max_uploads", req.max_uploads}};
    return query("list_uploads", args, [](const Json& j) {
      return ListUploadsResult{unlist<UploadCodec>(j.at("uploads")),
                               j.at("truncated").get<bool>()};
    });
  }
  Result<std::optional<VersionId>> completeUpload(std::string_view bucket, std::string_view key,
                                                  std::string_view upload_id,
                                                  const Manifest& manifest,
                                                  Precondition pre) override {
    return call("complete_upload",
                {{"bucket", bucket}, {"key", key}, {"upload_id", upload_id},
                 {"manifest", ManifestCodec::to(manifest)}, {"pre", toJson(pre)}},
                false, unoptVer);
  }
  Status abortUpload(std::string_view bucket, std::string_view key,
                     std::string_view upload_id) override {
    return mutate("abort_upload", {{"bucket", bucket}, {"key", key}, {"upload_id", upload_id}});
  }
  Status createRecordSet(std::string_view bucket, std::string_view container,
                         const VersionId& set) override {
    return mutate("create_record_set",
                  {{"bucket", bucket}, {"container", container}, {"set", ver(set)}});
  }
  Status putRecordRows(std::string_view bucket, std::string_view container, const VersionId& set,
                       const std::vector<RecordRow>& rows) override {
    // Idempotent: the same rows written twice are the same rows.
    return status(call("put_record_rows",
                       {{"bucket", bucket}, {"container", container}, {"set", ver(set)},
                        {"rows", list<RowCodec>(rows)}},
                       true, ignore));
  }
  Result<RecordIndexInfo> attachRecords(std::string_view bucket, std::string_view container,
                                        const VersionId& version,
                                        const RecordIndexInfo& info) override {
    return call("attach_records",
                {{"bucket", bucket}, {"container", container}, {"version", ver(version)},
                 {"info", toJson(info)}},
                false, recordInfoFrom);
  }
  Status abandonRecords(const VersionId& set) override {
    return status(call("abandon_records", {{"set", ver(set)}}, true, ignore));
  }
  Result<RecordPage> listRecords(std::string_view bucket, const RecordQuery& q) override {
    Json args = {{"bucket", bucket},
                 {"key", q.key ? Json(*q.key) : Json(nullptr)},
                 {"prefix", q.prefix},
                 {"container", q.container},
                 {"type", q.type},
                 {"start_after", q.start_after},
                 {"limit", q.limit},
                 {"max_examined", q.max_examined}};
    // An older service ignores it and lists every location: readers still filter.
    if (q.offset) args["offset"] = *q.offset;
    return query("list_records", args, [](const Json& j) {
      return RecordPage{unlist<LocationCodec>(j.at("records")), j.at("truncated").get<bool>(),
                        j.at("next").get<std::string>()};
    });
  }
  Result<std::vector<RecordRow>> setRecords(const VersionId& set,
                                            const std::optional<RecordCursor>& after,
                                            size_t limit) override {
    // An older service reads "after" alone: rows past the whole offset.
    Json args = {{"set", ver(set)},
                 {"after", after ? Json(after->offset) : Json(nullptr)},
                 {"limit", limit}};
    if (after && !after->key.empty()) args["after_key"] = after->key;
    return query("set_records", std::move(args), unlist<RowCodec>);
  }
  Result<RecordGcStats> collectRecordGarbage(size_t max_rows,
                                             int64_t orphan_before_unix_nanos) override {
    return call("record_gc", {{"max_rows", max_rows}, {"orphan_before", orphan_before_unix_nanos}},
                true, [](const Json& j) {
                  return RecordGcStats{j.at("rows_removed").get<uint64_t>(),
                                       j.at("sets_removed").get<uint64_t>()};
                });
  }
  // An unreachable service is an error, not zeros (a metric would show an empty index).
  Result<RecordIndexStats> recordIndexStats() override {
    return query("record_stats", Json::object(), [](const Json& j) {
      return RecordIndexStats{j.at("rows").get<uint64_t>(), j.at("bytes").get<uint64_t>(),
                              j.at("sets").get<uint64_t>(), j.at("dead_sets").get<uint64_t>()};
    });
  }
  Result<IndexStorageStats> storageStats() override {
    return query("storage_stats", Json::object(), [](const Json& j) {
      return IndexStorageStats{j.at("sst_bytes").get<uint64_t>(),
                               j.at("memtable_bytes").get<uint64_t>(),
                               j.at("live_data_bytes").get<uint64_t>()};
    });
  }
  Result<IndexCommitStats> commitStats() override {
    return query("commit_stats", Json::object(), [](const Json& j) {
      // Fields an older index service does not send read as "no failure".
      return IndexCommitStats{j.at("batches").get<uint64_t>(), j.at("requests").get<uint64_t>(),
                              j.value("opened_unix_nanos", uint64_t{0}),
                              j.value("failed_writes", uint64_t{0}), j.value("failing", false)};
    });
  }

 private:
  static std::nullptr_t ignore(const Json&) { return nullptr; }
  template <typename T>
  static Status status(const Result<T>& r) {
    return r ? Status::ok() : r.error();
  }

  // One request; `decode` turns the answer into the method's result (kIoError if the
  // answer is malformed).
  template <typename F>
  auto call(std::string_view op, const Json& args, bool idempotent, F decode)
      -> Result<decltype(decode(std::declval<const Json&>()))> {
    const std::string body = toCbor(args);
    rpc::Call c;
    c.method = "POST";
    c.path = std::string(kIndexPrefix) + std::string(op);
    c.body = {reinterpret_cast<const uint8_t*>(body.data()), body.size()};
    c.idempotent = idempotent;
    auto answer = client_.call(endpoint_, c);
    if (!answer) return fail(answer.error());
    try {
      return decode(fromCbor(answer->body));
    } catch (const std::exception& e) {
      return fail(Status::ioError("malformed answer from the index service (" +
                                  std::string(op) + "): " + e.what()));
    }
  }
  template <typename F>
  auto query(std::string_view op, const Json& args, F decode)
      -> Result<decltype(decode(std::declval<const Json&>()))> {
    return call(op, args, true, decode);
  }
  Status mutate(std::string_view op, const Json& args) {
    return status(call(op, args, false, ignore));
  }

  const std::string endpoint_;
  rpc::Client client_;
};

}  // namespace

Result<std::unique_ptr<rpc::Server>> serveIndex(rpc::ServerOptions options, Index& index,
                                                WorkerPool& pool, const Clock& clock) {
  if (options.name == rpc::ServerOptions{}.name) options.name = "granary-index";
  if (options.max_body_bytes == rpc::ServerOptions{}.max_body_bytes) {
    options.max_body_bytes = kMaxIndexRequestBytes;
  }
  return rpc::Server::create(
      options, [&index](rpc::Request& req, rpc::ReplyDone done) { done(handle(index, req)); },
      pool, clock);
}

std::unique_ptr<Index> makeRemoteIndex(std::string endpoint, std::string cluster_secret,
                                       RemoteIndexOptions options, const Clock& clock) {
  return std::make_unique<RemoteIndex>(std::move(endpoint), std::move(cluster_secret),
                                       std::move(options), clock);
}

}  // namespace granary::index_kv

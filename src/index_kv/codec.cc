// Encodings: see docs/index-format.md.
#include "index_kv/codec.h"
#include "index_kv/cbor_map_reader.h"
#include "index_kv/record_codec.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "granary/common/hex.h"

namespace granary::index_kv {
namespace {

using Json = nlohmann::json;

// Thrown by the field readers below and caught at the decode boundary; never escapes.
struct DecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An inline manifest value: tag, be32 body length, body, CBOR map. A CBOR map's first byte
// is 0xA0-0xBF, so the tag's 0x00 tells the two layouts apart.
constexpr char kInlineFrameTag[2] = {'\0', 'I'};
constexpr size_t kInlineFrameHeader = 6;

Json toBinary(const VersionId& v) {
  return Json::binary(std::vector<uint8_t>(v.bytes.begin(), v.bytes.end()));
}

std::string toCbor(const Json& j) {
  std::string out;
  Json::to_cbor(j, out);
  return out;
}

Json parseCbor(std::string_view value) {
  Json j = parseCborDom(value);
  if (j.is_discarded()) throw DecodeError("not CBOR (or nested too deep)");
  if (!j.is_object()) throw DecodeError("not a CBOR map");
  return j;
}

const Json* findField(const Json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

const Json& field(const Json& j, const char* name) {
  const Json* f = findField(j, name);
  if (f == nullptr) throw DecodeError(std::string("missing field ") + name);
  return *f;
}

uint64_t asU64(const Json& j, uint64_t max = std::numeric_limits<uint64_t>::max()) {
  if (!j.is_number_unsigned()) throw DecodeError("expected an unsigned integer");
  uint64_t v = j.get<uint64_t>();
  if (v > max) throw DecodeError("integer out of range");
  return v;
}

int64_t asI64(const Json& j) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw DecodeError("integer out of range");
    }
    return static_cast<int64_t>(v);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  throw DecodeError("expected an integer");
}

std::string asString(const Json& j) {
  if (!j.is_string()) throw DecodeError("expected a text string");
  return j.get<std::string>();
}

std::string asBytes(const Json& j) {
  if (!j.is_binary()) throw DecodeError("expected a byte string");
  const auto& b = j.get_binary();
  return std::string(b.begin(), b.end());
}

VersionId asVersion(const Json& j) {
  if (!j.is_binary() || j.get_binary().size() != 16) throw DecodeError("bad version id");
  VersionId v;
  std::copy(j.get_binary().begin(), j.get_binary().end(), v.bytes.begin());
  return v;
}

std::map<std::string, std::string> asStringMap(const Json& j) {
  if (!j.is_object()) throw DecodeError("expected a map");
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.emplace(it.key(), asString(it.value()));
  return out;
}

bool asBool(const Json& j) {
  if (!j.is_boolean()) throw DecodeError("expected a boolean");
  return j.get<bool>();
}

const Json& asArray(const Json& j) {
  if (!j.is_array()) throw DecodeError("expected an array");
  return j;
}

Json recordInfoToJson(const RecordIndexInfo& r) {
  Json j = Json::object();
  j["st"] = r.status;
  if (!r.format.empty()) j["f"] = r.format;
  if (!r.message.empty()) j["msg"] = r.message;
  if (!r.set.isZero()) j["set"] = toBinary(r.set);
  j["n"] = r.rows;
  j["nb"] = r.row_bytes;
  return j;
}

Json stripesToJson(const std::vector<StripeLayout>& stripes) {
  Json out = Json::array();
  for (const StripeLayout& s : stripes) {
    Json js = Json::object();
    js["bv"] = toBinary(s.blob_version);
    js["bs"] = s.blob_stripe;
    js["dl"] = s.data_len;
    js["fl"] = s.fragment_len;
    js["di"] = s.drives;
    out.push_back(std::move(js));
  }
  return out;
}

std::vector<StripeLayout> asStripes(const Json& j) {
  std::vector<StripeLayout> out;
  for (const Json& js : asArray(j)) {
    if (!js.is_object()) throw DecodeError("stripe is not a map");
    StripeLayout s;
    s.blob_version = asVersion(field(js, "bv"));
    s.blob_stripe = static_cast<uint32_t>(asU64(field(js, "bs"), 0xFFFFFFFFu));
    s.data_len = asU64(field(js, "dl"));
    s.fragment_len = static_cast<uint32_t>(asU64(field(js, "fl"), 0xFFFFFFFFu));
    for (const Json& d : asArray(field(js, "di"))) {
      s.drives.push_back(static_cast<uint16_t>(asU64(d, 0xFFFF)));
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Optional "ck" field: {"a": algorithm, "v": value, "ty": type}. Absent when empty.
Json checksumToJson(const ObjectChecksum& c) {
  Json j = Json::object();
  j["a"] = c.algorithm;
  j["v"] = c.value;
  if (!c.type.empty()) j["ty"] = c.type;
  return j;
}

ObjectChecksum asChecksum(const Json& j) {
  if (!j.is_object()) throw DecodeError("checksum is not a map");
  ObjectChecksum c;
  c.algorithm = asString(field(j, "a"));
  c.value = asString(field(j, "v"));
  if (const Json* f = findField(j, "ty")) c.type = asString(*f);
  if (c.algorithm.empty()) throw DecodeError("checksum without an algorithm");
  return c;
}

std::vector<BlobRef> stripeBlobs(const std::vector<std::string>& drives,
                                 const std::vector<StripeLayout>& stripes) {
  std::vector<BlobRef> out;
  for (const StripeLayout& s : stripes) {
    for (size_t i = 0; i < s.drives.size(); ++i) {
      if (s.drives[i] >= drives.size()) continue;
      out.push_back(BlobRef{drives[s.drives[i]],
                            BlobId{s.blob_version, s.blob_stripe, static_cast<uint16_t>(i)}});
    }
  }
  return out;
}

// Runs `decode` and turns any exception into kCorruption naming `what`.
template <typename T, typename F>
Result<T> guarded(const char* what, F&& decode) {
  try {
    return decode();
  } catch (const std::exception& e) {
    return fail(Status::corruption(std::string("index: bad ") + what + " value: " + e.what()));
  } catch (...) {
    return fail(Status::corruption(std::string("index: bad ") + what + " value"));
  }
}

}  // namespace

// ---- keys ----------------------------------------------------------------------------

std::string objectKey(std::string_view bucket, std::string_view key) {
  std::string out;
  out.reserve(bucket.size() + 1 + key.size());
  out.append(bucket).push_back('/');
  out.append(key);
  return out;
}

std::string bucketBegin(std::string_view bucket) { return std::string(bucket) + "/"; }
std::string bucketEnd(std::string_view bucket) { return std::string(bucket) + "0"; }

std::string versionKey(const VersionId& version) {
  return std::string(reinterpret_cast<const char*>(version.bytes.data()), version.bytes.size());
}

Result<VersionId> parseVersionKey(std::string_view key) {
  if (key.size() != 16) return fail(Status::corruption("index: version key must be 16 bytes"));
  VersionId v;
  std::copy(key.begin(), key.end(), v.bytes.begin());
  return v;
}

std::string gcKey(int64_t enqueued_unix_nanos, const VersionId& version) {
  std::string out(kGcKeySize, '\0');
  putBe64(reinterpret_cast<uint8_t*>(out.data()), static_cast<uint64_t>(enqueued_unix_nanos));
  std::copy(version.bytes.begin(), version.bytes.end(), out.begin() + 8);
  return out;
}

Result<GcKeyParts> parseGcKey(std::string_view key) {
  if (key.size() != kGcKeySize) {
    return fail(Status::invalidArgument("index: gc queue key must be 24 bytes"));
  }
  GcKeyParts parts;
  parts.enqueued_unix_nanos =
      static_cast<int64_t>(getBe64(reinterpret_cast<const uint8_t*>(key.data())));
  std::copy(key.begin() + 8, key.end(), parts.version.bytes.begin());
  return parts;
}

std::string blobRefManifestKey(const VersionId& blob_version, const VersionId& owner) {
  std::string out = versionKey(blob_version);
  out.push_back(kBlobRefManifestTag);
  out.append(versionKey(owner));
  return out;
}

std::string blobRefGcKey(const VersionId& blob_version, std::string_view gc_key) {
  std::string out = versionKey(blob_version);
  out.push_back(kBlobRefGcTag);
  out.append(gc_key);
  return out;
}

std::string blobRefPartKey(const VersionId& blob_version, std::string_view part_key) {
  std::string out = versionKey(blob_version);
  out.push_back(kBlobRefPartTag);
  out.append(part_key);
  return out;
}

std::string uploadKey(std::string_view bucket, std::string_view key,
                      std::string_view upload_id) {
  std::string out = objectKey(bucket, key);
  out.push_back('\0');
  out.append(upload_id);
  return out;
}

Result<UploadKeyParts> parseUploadKey(std::string_view row_key) {
  size_t slash = row_key.find('/');
  size_t nul = row_key.rfind('\0');
  if (slash == std::string_view::npos || nul == std::string_view::npos || nul < slash ||
      nul + 1 == row_key.size()) {
    return fail(Status::corruption("index: bad uploads key"));
  }
  return UploadKeyParts{std::string(row_key.substr(0, slash)),
                        std::string(row_key.substr(slash + 1, nul - slash - 1)),
                        std::string(row_key.substr(nul + 1))};
}

Status checkUploadId(std::string_view upload_id) {
  if (upload_id.empty() || upload_id.find('/') != std::string_view::npos ||
      upload_id.find('\0') != std::string_view::npos) {
    return Status::invalidArgument("index: bad upload id");
  }
  return Status::ok();
}

std::string partKey(std::string_view upload_id, uint32_t part_number) {
  std::string out = partsBegin(upload_id);
  uint8_t be[4];
  putBe32(be, part_number);
  out.append(reinterpret_cast<const char*>(be), 4);
  return out;
}

std::string partsBegin(std::string_view upload_id) { return std::string(upload_id) + "/"; }
std::string partsEnd(std::string_view upload_id) { return std::string(upload_id) + "0"; }

std::string prefixSuccessor(std::string_view prefix) {
  std::string out(prefix);
  while (!out.empty()) {
    auto last = static_cast<unsigned char>(out.back());
    if (last != 0xFF) {
      out.back() = static_cast<char>(last + 1);
      return out;
    }
    out.pop_back();
  }
  return out;
}

// ---- values --------------------------------------------------------------------------

std::string encodeBucket(const BucketInfo& bucket) {
  Json j = Json::object();
  j["n"] = bucket.name;
  j["o"] = bucket.owner;
  j["c"] = bucket.created_unix_nanos;
  if (!bucket.index_format.empty()) j["ix"] = bucket.index_format;
  if (!bucket.index_key.empty()) j["ik"] = bucket.index_key;
  if (bucket.public_read) j["pr"] = true;
  if (!bucket.lifecycle.empty()) {
    Json rules = Json::array();
    for (const LifecycleRule& r : bucket.lifecycle) {
      Json rule = Json::object();
      rule["id"] = r.id;
      // A rule filtered by tags or sizes says it is on in "fe" and off in "on": a gateway
      // older than those filters reads it as disabled, never as a wider prefix-only rule
      // whose lifecycle job would expire objects the filters spare.
      const bool filtered = !r.tags.empty() || r.size_greater_than || r.size_less_than;
      rule["on"] = r.enabled && !filtered;
      if (filtered) rule["fe"] = r.enabled;
      rule["p"] = r.prefix;
      if (r.expiration_days) rule["ed"] = *r.expiration_days;
      if (r.expiration_date_unix) rule["et"] = *r.expiration_date_unix;
      if (r.abort_incomplete_days) rule["ad"] = *r.abort_incomplete_days;
      if (r.noncurrent_days) rule["nd"] = *r.noncurrent_days;
      if (r.newer_noncurrent_versions) rule["nn"] = *r.newer_noncurrent_versions;
      if (r.expired_object_delete_marker) rule["dm"] = *r.expired_object_delete_marker;
      if (!r.tags.empty()) rule["tg"] = r.tags;
      if (r.size_greater_than) rule["sg"] = *r.size_greater_than;
      if (r.size_less_than) rule["sl"] = *r.size_less_than;
      rules.push_back(std::move(rule));
    }
    j["lc"] = std::move(rules);
  }
  if (!bucket.cors.empty()) {
    Json rules = Json::array();
    for (const CorsRule& r : bucket.cors) {
      Json rule = Json::object();
      rule["id"] = r.id;
      rule["o"] = r.allowed_origins;
      rule["m"] = r.allowed_methods;
      if (!r.allowed_headers.empty()) rule["h"] = r.allowed_headers;
      if (!r.expose_headers.empty()) rule["e"] = r.expose_headers;
      if (r.max_age_seconds) rule["ma"] = *r.max_age_seconds;
      rules.push_back(std::move(rule));
    }
    j["cr"] = std::move(rules);
  }
  if (!bucket.tags.empty()) j["tg"] = bucket.tags;
  if (bucket.versioning_suspended) j["vs"] = true;
  if (!bucket.policy.empty()) j["bp"] = bucket.policy;
  return toCbor(j);
}

Result<BucketInfo> decodeBucket(std::string_view value) {
  return guarded<BucketInfo>("bucket", [&] {
    Json j = parseCbor(value);
    BucketInfo b;
    b.name = asString(field(j, "n"));
    b.owner = asString(field(j, "o"));
    b.created_unix_nanos = asI64(field(j, "c"));
    if (const Json* f = findField(j, "ix")) b.index_format = asString(*f);
    if (const Json* f = findField(j, "ik")) b.index_key = asString(*f);
    if (const Json* f = findField(j, "pr")) b.public_read = asBool(*f);
    if (const Json* f = findField(j, "lc")) {
      for (const Json& rule : asArray(*f)) {
        LifecycleRule r;
        r.id = asString(field(rule, "id"));
        r.enabled = asBool(field(rule, "on"));
        if (const Json* v = findField(rule, "fe")) r.enabled = asBool(*v);
        r.prefix = asString(field(rule, "p"));
        if (const Json* v = findField(rule, "ed")) r.expiration_days = asI64(*v);
        if (const Json* v = findField(rule, "et")) r.expiration_date_unix = asI64(*v);
        if (const Json* v = findField(rule, "ad")) r.abort_incomplete_days = asI64(*v);
        if (const Json* v = findField(rule, "nd")) r.noncurrent_days = asI64(*v);
        if (const Json* v = findField(rule, "nn")) r.newer_noncurrent_versions = asI64(*v);
        if (const Json* v = findField(rule, "dm")) r.expired_object_delete_marker = asBool(*v);
        if (const Json* v = findField(rule, "tg")) r.tags = asStringMap(*v);
        if (const Json* v = findField(rule, "sg")) r.size_greater_than = asU64(*v);
        if (const Json* v = findField(rule, "sl")) r.size_less_than = asU64(*v);
        b.lifecycle.push_back(std::move(r));
      }
    }
    if (const Json* f = findField(j, "cr")) {
      const auto strings = [](const Json* list) {
        std::vector<std::string> out;
        if (list != nullptr) {
          for (const Json& v : asArray(*list)) out.push_back(asString(v));
        }
        return out;
      };
      for (const Json& rule : asArray(*f)) {
        CorsRule r;
        r.id = asString(field(rule, "id"));
        r.allowed_origins = strings(&field(rule, "o"));
        r.allowed_methods = strings(&field(rule, "m"));
        r.allowed_headers = strings(findField(rule, "h"));
        r.expose_headers = strings(findField(rule, "e"));
        if (const Json* v = findField(rule, "ma")) r.max_age_seconds = asI64(*v);
        b.cors.push_back(std::move(r));
      }
    }
    if (const Json* f = findField(j, "tg")) b.tags = asStringMap(*f);
    if (const Json* f = findField(j, "vs")) b.versioning_suspended = asBool(*f);
    if (const Json* f = findField(j, "bp")) b.policy = asString(*f);
    return b;
  });
}

std::string encodeUser(const UserInfo& user) {
  Json j = Json::object();
  j["n"] = user.name;
  j["a"] = user.access_key;
  j["s"] = user.secret_key;
  j["c"] = user.created_unix_nanos;
  return toCbor(j);
}

Result<UserInfo> decodeUser(std::string_view value) {
  return guarded<UserInfo>("user", [&] {
    Json j = parseCbor(value);
    UserInfo u;
    u.name = asString(field(j, "n"));
    u.access_key = asString(field(j, "a"));
    u.secret_key = asString(field(j, "s"));
    u.created_unix_nanos = asI64(field(j, "c"));
    return u;
  });
}

namespace {

// A summary value (docs/index-format.md, "ObjectSummary"): tag, be64 size, be64 mtime,
// version (16 B), flags, record set (16 B, when flag 1 is set), ETag (the rest); flag 2:
// the manifest names no blobs. LIST
// decodes one per key, and reading the CBOR map these were before was a quarter of a
// listing's server time; this layout is read with a few loads. A CBOR map's first byte is
// 0xA0-0xBF, so the tag's 0x00 tells the summaries written before it apart.
constexpr char kSummaryTag[2] = {'\0', 'S'};
constexpr size_t kSumAtSize = 2, kSumAtMtime = 10, kSumAtVersion = 18, kSumAtFlags = 34,
                 kSumAtRecordSet = 35;
constexpr size_t kSummaryFixed = kSumAtRecordSet;  // without the optional record set
constexpr uint8_t kSummaryHasRecordSet = 1;
constexpr uint8_t kSummaryNoBlobs = 2;

}  // namespace

std::string encodeSummary(const ObjectSummary& summary) {
  const bool has_set = !summary.record_set.isZero();
  std::string out(kSummaryFixed + (has_set ? 16 : 0), '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  p[0] = kSummaryTag[0];
  p[1] = kSummaryTag[1];
  putBe64(p + kSumAtSize, summary.size);
  putBe64(p + kSumAtMtime, static_cast<uint64_t>(summary.mtime_unix_nanos));
  std::copy(summary.version.bytes.begin(), summary.version.bytes.end(), p + kSumAtVersion);
  p[kSumAtFlags] = static_cast<uint8_t>((has_set ? kSummaryHasRecordSet : 0) |
                                        (summary.names_blobs ? 0 : kSummaryNoBlobs));
  if (has_set) {
    std::copy(summary.record_set.bytes.begin(), summary.record_set.bytes.end(),
              p + kSumAtRecordSet);
  }
  out += summary.etag;
  return out;
}

namespace {

// Summaries written before the fixed layout: a CBOR map.
enum SummaryField { kSumSize, kSumEtag, kSumMtime, kSumVersion, kSumRecordSet };
constexpr CborField kSummaryFields[] = {
    {"s", CborKind::kUint, kSumSize, true},
    {"e", CborKind::kText, kSumEtag, true},
    {"t", CborKind::kInt, kSumMtime, true},
    {"v", CborKind::kVersion, kSumVersion, true},
    {"rs", CborKind::kVersion, kSumRecordSet},
};
constexpr CborSchema kSummarySchema{kSummaryFields};

void copyVersion(std::span<const uint8_t> bytes, VersionId& out) {
  std::copy(bytes.begin(), bytes.end(), out.bytes.begin());  // 16 bytes: the reader checked
}

class SummaryReceiver final : public CborReceiver {
 public:
  explicit SummaryReceiver(ObjectSummary& out) : out_(out) {}
  void onUint(int, uint64_t v) override { out_.size = v; }
  void onInt(int, int64_t v) override { out_.mtime_unix_nanos = v; }
  void onText(int, std::string&& v) override { out_.etag = std::move(v); }
  void onBytes(int id, std::span<const uint8_t> v) override {
    copyVersion(v, id == kSumVersion ? out_.version : out_.record_set);
  }

 private:
  ObjectSummary& out_;
};

Result<ObjectSummary> decodeFixedSummary(std::string_view key, std::string_view value) {
  auto bad = [](const char* why) {
    return fail(Status::corruption(std::string("index: bad object summary value: ") + why));
  };
  if (value.size() < kSummaryFixed || value[1] != kSummaryTag[1]) return bad("bad header");
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  const uint8_t flags = p[kSumAtFlags];
  if (flags & ~(kSummaryHasRecordSet | kSummaryNoBlobs)) return bad("unknown flags");
  const bool has_set = flags & kSummaryHasRecordSet;
  const size_t fixed = kSummaryFixed + (has_set ? 16 : 0);
  if (value.size() < fixed) return bad("record set past the end");
  ObjectSummary s;
  s.key = std::string(key);
  s.size = getBe64(p + kSumAtSize);
  s.mtime_unix_nanos = static_cast<int64_t>(getBe64(p + kSumAtMtime));
  copyVersion({p + kSumAtVersion, 16}, s.version);
  if (has_set) copyVersion({p + kSumAtRecordSet, 16}, s.record_set);
  s.names_blobs = !(flags & kSummaryNoBlobs);
  s.etag = std::string(value.substr(fixed));
  return s;
}

}  // namespace

Result<ObjectSummary> decodeSummary(std::string_view key, std::string_view value) {
  if (!value.empty() && value[0] == kSummaryTag[0]) return decodeFixedSummary(key, value);
  return guarded<ObjectSummary>("object summary", [&] {
    ObjectSummary s;
    SummaryReceiver receiver(s);
    if (auto why = readCborMap(value, kSummarySchema, receiver)) throw DecodeError(*why);
    s.key = std::string(key);
    return s;
  });
}

std::string encodeManifest(const Manifest& m) {
  Json j = Json::object();
  j["f"] = 1;  // format version
  j["v"] = toBinary(m.version);
  j["s"] = m.size;
  j["e"] = m.etag;
  j["t"] = m.mtime_unix_nanos;
  if (!m.content_type.empty()) j["ct"] = m.content_type;
  if (!m.metadata.empty()) j["md"] = m.metadata;
  if (!m.headers.empty()) j["h"] = m.headers;
  if (!m.tags.empty()) j["tg"] = m.tags;
  j["k"] = m.ec.k;
  j["m"] = m.ec.m;
  if (m.is_inline) j["in"] = true;
  if (!m.drives.empty()) j["dr"] = m.drives;
  if (!m.stripes.empty()) j["st"] = stripesToJson(m.stripes);
  if (!m.checksum.empty()) j["ck"] = checksumToJson(m.checksum);
  if (!m.records.status.empty()) j["ri"] = recordInfoToJson(m.records);
  if (!m.upload_id.empty()) j["u"] = m.upload_id;
  if (!m.is_inline) return toCbor(j);
  // An inline body goes before the map as raw bytes, not as a CBOR byte string: the CBOR
  // reader copies byte strings one byte at a time, which made decoding a 4 KiB object's
  // manifest cost more than reading it (docs/index-format.md, "Manifests").
  if (m.inline_data.size() > std::numeric_limits<uint32_t>::max()) {
    throw std::length_error("inline body too large");
  }
  std::string out;
  out.reserve(kInlineFrameHeader + m.inline_data.size() + 256);
  out.push_back(kInlineFrameTag[0]);
  out.push_back(kInlineFrameTag[1]);
  uint8_t len[4];
  putBe32(len, static_cast<uint32_t>(m.inline_data.size()));
  out.append(reinterpret_cast<const char*>(len), sizeof len);
  out += m.inline_data;
  Json::to_cbor(j, out);
  return out;
}

namespace {

// A manifest's fields (docs/index-format.md, "Manifests"); ids across the nested maps.
enum ManifestField {
  kMfFormat, kMfVersion, kMfSize, kMfEtag, kMfMtime, kMfContentType, kMfMetadata, kMfHeaders,
  kMfTags, kMfK, kMfM, kMfInline, kMfInlineData, kMfDrives, kMfStripes, kMfChecksum, kMfRecords,
  kMfUploadId,
  kStBlobVersion, kStBlobStripe, kStDataLen, kStFragmentLen, kStDrives,
  kCkAlgorithm, kCkValue, kCkType,
  kRiStatus, kRiFormat, kRiMessage, kRiSet, kRiRows, kRiRowBytes,
};
constexpr CborField kStripeFields[] = {
    {"bv", CborKind::kVersion, kStBlobVersion, true},
    {"bs", CborKind::kUint, kStBlobStripe, true, 0xFFFFFFFFu},
    {"dl", CborKind::kUint, kStDataLen, true},
    {"fl", CborKind::kUint, kStFragmentLen, true, 0xFFFFFFFFu},
    {"di", CborKind::kUintArray, kStDrives, true, 0xFFFF},
};
constexpr CborSchema kStripeSchema{kStripeFields};
constexpr CborField kChecksumFields[] = {
    {"a", CborKind::kText, kCkAlgorithm, true},
    {"v", CborKind::kText, kCkValue, true},
    {"ty", CborKind::kText, kCkType},
};
constexpr CborSchema kChecksumSchema{kChecksumFields};
constexpr CborField kRecordInfoFields[] = {
    {"st", CborKind::kText, kRiStatus, true},
    {"f", CborKind::kText, kRiFormat},
    {"msg", CborKind::kText, kRiMessage},
    {"set", CborKind::kVersion, kRiSet},
    {"n", CborKind::kUint, kRiRows, true},
    {"nb", CborKind::kUint, kRiRowBytes, true},
};
constexpr CborSchema kRecordInfoSchema{kRecordInfoFields};
constexpr CborField kManifestFields[] = {
    {"f", CborKind::kUint, kMfFormat, true},
    {"v", CborKind::kVersion, kMfVersion, true},
    {"s", CborKind::kUint, kMfSize, true},
    {"e", CborKind::kText, kMfEtag, true},
    {"t", CborKind::kInt, kMfMtime, true},
    {"ct", CborKind::kText, kMfContentType},
    {"md", CborKind::kTextMap, kMfMetadata},
    {"h", CborKind::kTextMap, kMfHeaders},
    {"tg", CborKind::kTextMap, kMfTags},
    {"k", CborKind::kUint, kMfK, true, 255},
    {"m", CborKind::kUint, kMfM, true, 255},
    {"in", CborKind::kBool, kMfInline},
    {"d", CborKind::kBytes, kMfInlineData},  // written before the inline frame existed
    {"dr", CborKind::kTextArray, kMfDrives},
    {"st", CborKind::kMapArray, kMfStripes, false, 0, &kStripeSchema},
    {"ck", CborKind::kMap, kMfChecksum, false, 0, &kChecksumSchema},
    {"ri", CborKind::kMap, kMfRecords, false, 0, &kRecordInfoSchema},
    {"u", CborKind::kText, kMfUploadId},
};
constexpr CborSchema kManifestSchema{kManifestFields};

class ManifestReceiver final : public CborReceiver {
 public:
  explicit ManifestReceiver(Manifest& out) : m_(out) {}
  uint64_t format() const { return format_; }
  bool hasChecksum() const { return has_checksum_; }

  void onUint(int id, uint64_t v) override {
    switch (id) {
      case kMfFormat: format_ = v; break;
      case kMfSize: m_.size = v; break;
      case kMfK: m_.ec.k = static_cast<uint8_t>(v); break;
      case kMfM: m_.ec.m = static_cast<uint8_t>(v); break;
      case kStBlobStripe: m_.stripes.back().blob_stripe = static_cast<uint32_t>(v); break;
      case kStDataLen: m_.stripes.back().data_len = v; break;
      case kStFragmentLen: m_.stripes.back().fragment_len = static_cast<uint32_t>(v); break;
      case kStDrives: m_.stripes.back().drives.push_back(static_cast<uint16_t>(v)); break;
      case kRiRows: m_.records.rows = v; break;
      case kRiRowBytes: m_.records.row_bytes = v; break;
    }
  }
  void onInt(int, int64_t v) override { m_.mtime_unix_nanos = v; }
  void onText(int id, std::string&& v) override {
    switch (id) {
      case kMfEtag: m_.etag = std::move(v); break;
      case kMfContentType: m_.content_type = std::move(v); break;
      case kMfUploadId: m_.upload_id = std::move(v); break;
      case kMfDrives: m_.drives.push_back(std::move(v)); break;
      case kCkAlgorithm: m_.checksum.algorithm = std::move(v); break;
      case kCkValue: m_.checksum.value = std::move(v); break;
      case kCkType: m_.checksum.type = std::move(v); break;
      case kRiStatus: m_.records.status = std::move(v); break;
      case kRiFormat: m_.records.format = std::move(v); break;
      case kRiMessage: m_.records.message = std::move(v); break;
    }
  }
  void onBool(int, bool v) override { m_.is_inline = v; }
  void onBytes(int id, std::span<const uint8_t> v) override {
    switch (id) {
      case kMfVersion: copyVersion(v, m_.version); break;
      case kMfInlineData: m_.inline_data.assign(v.begin(), v.end()); break;
      case kStBlobVersion: copyVersion(v, m_.stripes.back().blob_version); break;
      case kRiSet: copyVersion(v, m_.records.set); break;
    }
  }
  void onTextMapEntry(int id, std::string&& key, std::string&& v) override {
    std::map<std::string, std::string>& map = id == kMfMetadata ? m_.metadata
                                              : id == kMfTags   ? m_.tags
                                                                : m_.headers;
    map.insert_or_assign(std::move(key), std::move(v));
  }
  void onBegin(int id) override {
    switch (id) {
      case kMfMetadata: m_.metadata.clear(); break;
      case kMfHeaders: m_.headers.clear(); break;
      case kMfTags: m_.tags.clear(); break;
      case kMfDrives: m_.drives.clear(); break;
      case kMfStripes: m_.stripes.clear(); break;
      case kStDrives: m_.stripes.back().drives.clear(); break;
      case kMfChecksum:
        m_.checksum = {};
        has_checksum_ = true;
        break;
      case kMfRecords: m_.records = {}; break;
    }
  }
  void onBeginElement(int) override { m_.stripes.emplace_back(); }

 private:
  Manifest& m_;
  uint64_t format_ = 0;
  bool has_checksum_ = false;
};

}  // namespace

Result<Manifest> decodeManifest(std::string_view value) {
  std::optional<std::string_view> framed_inline;
  if (value.size() >= 2 && value[0] == kInlineFrameTag[0]) {
    if (value[1] != kInlineFrameTag[1] || value.size() < kInlineFrameHeader) {
      return fail(Status::corruption("index: bad manifest value: bad inline frame"));
    }
    const uint32_t n = getBe32(reinterpret_cast<const uint8_t*>(value.data()) + 2);
    if (value.size() - kInlineFrameHeader < n) {
      return fail(Status::corruption("index: bad manifest value: inline frame past the end"));
    }
    framed_inline = value.substr(kInlineFrameHeader, n);
    value.remove_prefix(kInlineFrameHeader + n);
  }
  auto decoded = guarded<Manifest>("manifest", [&] {
    Manifest m;
    ManifestReceiver receiver(m);
    if (auto why = readCborMap(value, kManifestSchema, receiver)) throw DecodeError(*why);
    if (receiver.format() != 1) throw DecodeError("unknown manifest format version");
    if (receiver.hasChecksum() && m.checksum.algorithm.empty()) {
      throw DecodeError("checksum without an algorithm");
    }
    if (framed_inline) {
      if (!m.is_inline) throw DecodeError("an inline frame on a manifest that is not inline");
      m.inline_data = std::string(*framed_inline);
    }
    return m;
  });
  if (!decoded) return decoded;
  if (Status st = validateManifest(*decoded); !st.isOk()) {
    return fail(Status::corruption("index: bad manifest value: " + st.message()));
  }
  return decoded;
}

std::string encodeUpload(const MultipartUpload& u) {
  Json j = Json::object();
  j["f"] = 1;  // format version
  j["u"] = u.upload_id;
  j["b"] = u.bucket;
  j["k"] = u.key;
  j["o"] = u.owner;
  j["t"] = u.initiated_unix_nanos;
  if (!u.content_type.empty()) j["ct"] = u.content_type;
  if (!u.metadata.empty()) j["md"] = u.metadata;
  if (!u.headers.empty()) j["h"] = u.headers;
  if (!u.tags.empty()) j["tg"] = u.tags;
  if (!u.checksum_algorithm.empty()) j["ca"] = u.checksum_algorithm;
  if (!u.checksum_type.empty()) j["cty"] = u.checksum_type;
  if (!u.index_format.empty()) j["ix"] = u.index_format;
  if (!u.index_key.empty()) j["ik"] = u.index_key;
  return toCbor(j);
}

Result<MultipartUpload> decodeUpload(std::string_view value) {
  return guarded<MultipartUpload>("upload", [&] {
    Json j = parseCbor(value);
    if (asU64(field(j, "f")) != 1) throw DecodeError("unknown upload format version");
    MultipartUpload u;
    u.upload_id = asString(field(j, "u"));
    u.bucket = asString(field(j, "b"));
    u.key = asString(field(j, "k"));
    u.owner = asString(field(j, "o"));
    u.initiated_unix_nanos = asI64(field(j, "t"));
    if (const Json* f = findField(j, "ct")) u.content_type = asString(*f);
    if (const Json* f = findField(j, "md")) u.metadata = asStringMap(*f);
    if (const Json* f = findField(j, "h")) u.headers = asStringMap(*f);
    if (const Json* f = findField(j, "tg")) u.tags = asStringMap(*f);
    if (const Json* f = findField(j, "ca")) u.checksum_algorithm = asString(*f);
    if (const Json* f = findField(j, "cty")) u.checksum_type = asString(*f);
    if (const Json* f = findField(j, "ix")) u.index_format = asString(*f);
    if (const Json* f = findField(j, "ik")) u.index_key = asString(*f);
    return u;
  });
}

std::string encodePart(const PartInfo& p) {
  Json j = Json::object();
  j["f"] = 1;  // format version
  j["n"] = p.part_number;
  j["s"] = p.size;
  j["e"] = p.etag;
  j["t"] = p.mtime_unix_nanos;
  j["v"] = toBinary(p.version);
  if (!p.drives.empty()) j["dr"] = p.drives;
  if (!p.stripes.empty()) j["st"] = stripesToJson(p.stripes);
  if (!p.checksum.empty()) j["ck"] = checksumToJson(p.checksum);
  if (p.ec.k > 0) {
    j["k"] = p.ec.k;
    j["m"] = p.ec.m;
  }
  return toCbor(j);
}

Result<PartInfo> decodePart(std::string_view value) {
  auto decoded = guarded<PartInfo>("part", [&] {
    Json j = parseCbor(value);
    if (asU64(field(j, "f")) != 1) throw DecodeError("unknown part format version");
    PartInfo p;
    p.part_number = static_cast<uint32_t>(asU64(field(j, "n"), 0xFFFFFFFFu));
    p.size = asU64(field(j, "s"));
    p.etag = asString(field(j, "e"));
    p.mtime_unix_nanos = asI64(field(j, "t"));
    p.version = asVersion(field(j, "v"));
    if (const Json* f = findField(j, "dr")) {
      for (const Json& d : asArray(*f)) p.drives.push_back(asString(d));
    }
    if (const Json* f = findField(j, "st")) p.stripes = asStripes(*f);
    if (const Json* f = findField(j, "ck")) p.checksum = asChecksum(*f);
    if (const Json* f = findField(j, "k")) {
      p.ec.k = static_cast<uint8_t>(asU64(*f, 0xFF));
      p.ec.m = static_cast<uint8_t>(asU64(field(j, "m"), 0xFF));
    }
    return p;
  });
  if (!decoded) return decoded;
  if (Status st = validatePart(*decoded); !st.isOk()) {
    return fail(Status::corruption("index: bad part value: " + st.message()));
  }
  return decoded;
}

std::string encodeGcBlobs(std::span<const BlobRef> blobs) {
  Json list = Json::array();
  for (const BlobRef& b : blobs) {
    auto id = b.id.encode();
    list.push_back(Json::array(
        {b.drive, Json::binary(std::vector<uint8_t>(id.begin(), id.end()))}));
  }
  Json j = Json::object();
  j["b"] = std::move(list);
  return toCbor(j);
}

Result<std::vector<BlobRef>> decodeGcBlobs(std::string_view value) {
  return guarded<std::vector<BlobRef>>("gc", [&] {
    Json j = parseCbor(value);
    std::vector<BlobRef> out;
    for (const Json& e : asArray(field(j, "b"))) {
      if (!e.is_array() || e.size() != 2) throw DecodeError("blob ref is not a pair");
      BlobRef ref;
      ref.drive = asString(e[0]);
      std::string raw = asBytes(e[1]);
      auto id = BlobId::decode(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
      if (!id) throw DecodeError("bad blob id");
      ref.id = *id;
      out.push_back(std::move(ref));
    }
    return out;
  });
}

// ---- manifest helpers ----------------------------------------------------------------

Status validateManifest(const Manifest& m) {
  if (m.stripes.empty()) return Status::ok();
  if (m.ec.k < 1 || m.ec.total() > ec::kMaxFragments) {
    return Status::invalidArgument("manifest: bad EC profile");
  }
  uint64_t total = 0;
  for (const StripeLayout& s : m.stripes) {
    if (s.drives.size() != static_cast<size_t>(m.ec.total())) {
      return Status::invalidArgument("manifest: stripe does not name k + m drives");
    }
    for (uint16_t d : s.drives) {
      if (d >= m.drives.size()) return Status::invalidArgument("manifest: bad drive index");
    }
    // Readers divide by fragment_len and size their buffers by k * fragment_len.
    if (s.data_len == 0 || s.fragment_len == 0 ||
        s.data_len > static_cast<uint64_t>(m.ec.k) * s.fragment_len) {
      return Status::invalidArgument("manifest: stripe length does not fit its fragments");
    }
    if (__builtin_add_overflow(total, s.data_len, &total)) {
      return Status::invalidArgument("manifest: stripes do not add up to size");
    }
  }
  if (total != m.size) return Status::invalidArgument("manifest: stripes do not add up to size");
  return Status::ok();
}

std::vector<BlobRef> manifestBlobs(const Manifest& m) { return stripeBlobs(m.drives, m.stripes); }

ObjectSummary summaryOf(const Manifest& m) {
  ObjectSummary s;
  s.size = m.size;
  s.etag = m.etag;
  s.mtime_unix_nanos = m.mtime_unix_nanos;
  s.version = m.version;
  s.record_set = m.records.set;
  s.names_blobs = !m.stripes.empty();  // every blob is a stripe's (foreign ones too)
  return s;
}

Status validatePart(const PartInfo& p) {
  if (p.part_number < 1 || p.part_number > 10000) {
    return Status::invalidArgument("part: number out of range 1..10000");
  }
  const bool profiled = p.ec.k > 0 || p.ec.m > 0;
  if (profiled && (p.ec.k < 1 || p.ec.total() > ec::kMaxFragments)) {
    return Status::invalidArgument("part: bad EC profile");
  }
  for (const StripeLayout& s : p.stripes) {
    if (profiled && s.drives.size() != static_cast<size_t>(p.ec.total())) {
      return Status::invalidArgument("part: stripe does not name k + m drives");
    }
    if (s.blob_version != p.version) {
      return Status::invalidArgument("part: stripe blob version is not the part's version");
    }
    if (s.drives.empty() || s.drives.size() > static_cast<size_t>(ec::kMaxFragments)) {
      return Status::invalidArgument("part: bad stripe drive count");
    }
    for (uint16_t d : s.drives) {
      if (d >= p.drives.size()) return Status::invalidArgument("part: bad drive index");
    }
  }
  return Status::ok();
}

std::vector<BlobRef> partBlobs(const PartInfo& p) { return stripeBlobs(p.drives, p.stripes); }

std::vector<BlobRef> blobsNotIn(std::vector<BlobRef> blobs, std::vector<BlobRef> kept) {
  const auto before = [](const BlobRef& a, const BlobRef& b) {
    return std::tie(a.id, a.drive) < std::tie(b.id, b.drive);
  };
  std::sort(kept.begin(), kept.end(), before);
  std::erase_if(blobs, [&](const BlobRef& b) {
    return std::binary_search(kept.begin(), kept.end(), b, before);
  });
  return blobs;
}

std::vector<VersionId> foreignBlobVersions(const Manifest& m) {
  std::vector<VersionId> out;
  for (const StripeLayout& s : m.stripes) {
    if (s.blob_version != m.version) out.push_back(s.blob_version);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string encodeRecordSetMeta(const RecordSetMeta& meta) {
  Json j = Json::object();
  j["b"] = meta.bucket;
  j["c"] = meta.container;
  j["t"] = meta.touched_unix_nanos;
  return toCbor(j);
}

Result<RecordSetMeta> decodeRecordSetMeta(std::string_view value) {
  return guarded<RecordSetMeta>("record set", [&] {
    Json j = parseCbor(value);
    return RecordSetMeta{asString(field(j, "b")), asString(field(j, "c")), asI64(field(j, "t"))};
  });
}

}  // namespace granary::index_kv

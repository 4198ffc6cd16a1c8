// Encodings: see docs/index-format.md.
#include "index_kv/codec.h"
#include "index_kv/record_codec.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>

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
  Json j = Json::from_cbor(value.begin(), value.end(), /*strict=*/true,
                           /*allow_exceptions=*/false);
  if (j.is_discarded()) throw DecodeError("not CBOR");
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

RecordIndexInfo asRecordInfo(const Json& j) {
  if (!j.is_object()) throw DecodeError("expected a map");
  RecordIndexInfo r;
  r.status = asString(field(j, "st"));
  if (const Json* f = findField(j, "f")) r.format = asString(*f);
  if (const Json* f = findField(j, "msg")) r.message = asString(*f);
  if (const Json* f = findField(j, "set")) r.set = asVersion(*f);
  r.rows = asU64(field(j, "n"));
  r.row_bytes = asU64(field(j, "nb"));
  return r;
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
      rule["on"] = r.enabled;
      rule["p"] = r.prefix;
      if (r.expiration_days) rule["ed"] = *r.expiration_days;
      if (r.expiration_date_unix) rule["et"] = *r.expiration_date_unix;
      if (r.abort_incomplete_days) rule["ad"] = *r.abort_incomplete_days;
      rules.push_back(std::move(rule));
    }
    j["lc"] = std::move(rules);
  }
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
        r.prefix = asString(field(rule, "p"));
        if (const Json* v = findField(rule, "ed")) r.expiration_days = asI64(*v);
        if (const Json* v = findField(rule, "et")) r.expiration_date_unix = asI64(*v);
        if (const Json* v = findField(rule, "ad")) r.abort_incomplete_days = asI64(*v);
        b.lifecycle.push_back(std::move(r));
      }
    }
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

std::string encodeSummary(const ObjectSummary& summary) {
  Json j = Json::object();
  j["s"] = summary.size;
  j["e"] = summary.etag;
  j["t"] = summary.mtime_unix_nanos;
  j["v"] = toBinary(summary.version);
  if (!summary.record_set.isZero()) j["rs"] = toBinary(summary.record_set);
  return toCbor(j);
}

namespace {

// Decodes a summary with nlohmann's SAX interface, straight into the struct: a listing
// decodes one per key, and a JSON DOM per key (a map and its nodes) was ~12% of a LIST's
// CPU. Same rules as the DOM readers above: s, e, t and v required, fields it does not
// know (at any depth) ignored, a wrong type is corruption.
class SummarySax final : public nlohmann::json_sax<Json> {
 public:
  explicit SummarySax(ObjectSummary& out) : out_(out) {}

  // Why the value is bad, when a callback refused it; else null.
  const char* failure() const { return error_; }
  // Whether every required field was there.
  bool complete() const { return seen_s_ && seen_e_ && seen_t_ && seen_v_; }

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool number_integer(number_integer_t v) override {
    if (!atTop() || field_ != "t") return scalar();
    out_.mtime_unix_nanos = v;
    seen_t_ = true;
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (!atTop()) return scalar();
    if (field_ == "s") {
      out_.size = v;
      seen_s_ = true;
      return true;
    }
    if (field_ != "t") return scalar();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fail("integer out of range");
    }
    out_.mtime_unix_nanos = static_cast<int64_t>(v);
    seen_t_ = true;
    return true;
  }
  bool string(string_t& v) override {
    if (!atTop() || field_ != "e") return scalar();
    out_.etag = std::move(v);
    seen_e_ = true;
    return true;
  }
  bool binary(binary_t& v) override {
    if (!atTop()) return scalar();
    if (field_ == "v") {
      if (!version(v, out_.version)) return false;
      seen_v_ = true;
      return true;
    }
    if (field_ == "rs") return version(v, out_.record_set);
    return scalar();
  }
  bool start_object(std::size_t) override {
    if (depth_ >= 1 && !scalar()) return false;  // depth 0: the summary's own map
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    if (atTop()) field_ = std::move(k);
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (!scalar()) return false;
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return fail("not CBOR");
  }

 private:
  bool atTop() const { return depth_ == 1; }
  bool fail(const char* why) {
    if (error_ == nullptr) error_ = why;
    return false;
  }
  // A value at the top level: wrong type for a known field, or an unknown field (kept
  // going past). Also the only value a bare non-map document has.
  bool scalar() {
    if (depth_ == 0) return fail("not a CBOR map");
    if (depth_ > 1) return true;
    if (field_ == "s" || field_ == "e" || field_ == "t" || field_ == "v" || field_ == "rs") {
      return fail("a field has the wrong type");
    }
    return true;
  }
  bool version(const binary_t& v, VersionId& out) {
    if (v.size() != out.bytes.size()) return fail("bad version id");
    std::copy(v.begin(), v.end(), out.bytes.begin());
    return true;
  }

  ObjectSummary& out_;
  int depth_ = 0;
  std::string field_;
  const char* error_ = nullptr;
  bool seen_s_ = false, seen_e_ = false, seen_t_ = false, seen_v_ = false;
};

}  // namespace

Result<ObjectSummary> decodeSummary(std::string_view key, std::string_view value) {
  return guarded<ObjectSummary>("object summary", [&] {
    ObjectSummary s;
    SummarySax sax(s);
    const bool parsed = Json::sax_parse(value.begin(), value.end(), &sax,
                                        Json::input_format_t::cbor, /*strict=*/true);
    if (const char* why = sax.failure()) throw DecodeError(why);
    if (!parsed) throw DecodeError("not CBOR");
    if (!sax.complete()) throw DecodeError("missing field");
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
  j["k"] = m.ec.k;
  j["m"] = m.ec.m;
  if (m.is_inline) j["in"] = true;
  if (!m.drives.empty()) j["dr"] = m.drives;
  if (!m.stripes.empty()) j["st"] = stripesToJson(m.stripes);
  if (!m.checksum.empty()) j["ck"] = checksumToJson(m.checksum);
  if (!m.records.status.empty()) j["ri"] = recordInfoToJson(m.records);
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
    Json j = parseCbor(value);
    if (asU64(field(j, "f")) != 1) throw DecodeError("unknown manifest format version");
    Manifest m;
    m.version = asVersion(field(j, "v"));
    m.size = asU64(field(j, "s"));
    m.etag = asString(field(j, "e"));
    m.mtime_unix_nanos = asI64(field(j, "t"));
    if (const Json* f = findField(j, "ct")) m.content_type = asString(*f);
    if (const Json* f = findField(j, "md")) m.metadata = asStringMap(*f);
    if (const Json* f = findField(j, "h")) m.headers = asStringMap(*f);
    m.ec.k = static_cast<uint8_t>(asU64(field(j, "k"), 255));
    m.ec.m = static_cast<uint8_t>(asU64(field(j, "m"), 255));
    if (const Json* f = findField(j, "in")) m.is_inline = asBool(*f);
    if (const Json* f = findField(j, "d")) m.inline_data = asBytes(*f);  // written before the frame
    if (framed_inline) {
      if (!m.is_inline) throw DecodeError("an inline frame on a manifest that is not inline");
      m.inline_data = std::string(*framed_inline);
    }
    if (const Json* f = findField(j, "dr")) {
      for (const Json& d : asArray(*f)) m.drives.push_back(asString(d));
    }
    if (const Json* f = findField(j, "st")) m.stripes = asStripes(*f);
    if (const Json* f = findField(j, "ck")) m.checksum = asChecksum(*f);
    if (const Json* f = findField(j, "ri")) m.records = asRecordInfo(*f);
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
    return p;
  });
  if (!decoded) return decoded;
  if (Status st = validatePart(*decoded); !st.isOk()) {
    return fail(Status::corruption("index: bad part value: " + st.message()));
  }
  return decoded;
}

std::string encodeGcBlobs(const std::vector<BlobRef>& blobs) {
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
  for (const StripeLayout& s : m.stripes) {
    if (s.drives.size() != static_cast<size_t>(m.ec.total())) {
      return Status::invalidArgument("manifest: stripe does not name k + m drives");
    }
    for (uint16_t d : s.drives) {
      if (d >= m.drives.size()) return Status::invalidArgument("manifest: bad drive index");
    }
  }
  return Status::ok();
}

std::vector<BlobRef> manifestBlobs(const Manifest& m) { return stripeBlobs(m.drives, m.stripes); }

Status validatePart(const PartInfo& p) {
  if (p.part_number < 1 || p.part_number > 10000) {
    return Status::invalidArgument("part: number out of range 1..10000");
  }
  for (const StripeLayout& s : p.stripes) {
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

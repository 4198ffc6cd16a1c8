#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <limits>
#include <random>

#include "index_kv/cbor_map_reader.h"
#include "index_kv/codec.h"
#include "index_kv/record_codec.h"
#include "test_util.h"

using namespace granary;
using namespace granary::index_kv;
using granary::index_kv::testing::IndexFixture;

namespace {

std::string cbor(const nlohmann::json& j) {
  std::string out;
  nlohmann::json::to_cbor(j, out);
  return out;
}

Manifest sampleManifest() {
  ManualClock clock(testing::kStartNanos);
  SeededRandom random(9);
  Manifest m;
  m.version = VersionId::generate(clock, random);
  m.size = 12345;
  m.etag = "d41d8cd98f00b204e9800998ecf8427e-2";
  m.mtime_unix_nanos = testing::kStartNanos;
  m.content_type = "application/x-tar";
  m.metadata = {{"a", "1"}, {"utf8", "h\xC3\xA9llo"}};
  m.headers = {{"Content-Encoding", "zstd"}};
  m.tags = {{"project", "granary"}, {"stage", "raw data"}};
  m.ec = ec::EcProfile{2, 1};
  m.drives = {"n1/d0", "n2/d0", "n3/d0"};
  m.stripes.push_back(StripeLayout{m.version, 0, 8000, 4096, {0, 1, 2}});
  m.stripes.push_back(StripeLayout{VersionId::generate(clock, random), 7, 4345, 4096, {2, 0, 1}});
  m.upload_id = "0123456789abcdef0123456789abcdef";
  return m;
}

}  // namespace

TEST_CASE("Manifest encoding round-trips every field") {
  Manifest m = sampleManifest();
  auto back = decodeManifest(encodeManifest(m));
  REQUIRE(back.has_value());
  CHECK(*back == m);

  Manifest inl;
  inl.is_inline = true;
  inl.inline_data = std::string("\0\x01\xFFz", 4);
  auto inl_back = decodeManifest(encodeManifest(inl));
  REQUIRE(inl_back.has_value());
  CHECK(*inl_back == inl);

  // The upload id is written only when there is one: other manifests are as before it.
  Manifest plain = sampleManifest();
  plain.upload_id.clear();
  const std::string bytes = encodeManifest(plain);
  CHECK(nlohmann::json::from_cbor(bytes).count("u") == 0);
  CHECK(nlohmann::json::from_cbor(encodeManifest(m))["u"] == m.upload_id);
  auto plain_back = decodeManifest(bytes);
  REQUIRE(plain_back.has_value());
  CHECK(plain_back->upload_id.empty());
}

TEST_CASE("A manifest whose stripes cannot hold its bytes is refused, stored or read back") {
  REQUIRE(validateManifest(sampleManifest()).isOk());
  const auto refused = [](void (*damage)(Manifest&)) {
    Manifest m = sampleManifest();
    damage(m);
    const bool invalid = validateManifest(m).code() == Status::Code::kInvalidArgument;
    auto decoded = decodeManifest(encodeManifest(m));  // as if a bad value were on disk
    return invalid && !decoded && decoded.error().isCorruption();
  };
  // A reader divides by fragment_len, slices k * fragment_len, and sums the stripes.
  CHECK(refused([](Manifest& m) { m.stripes[1].fragment_len = 0; }));
  CHECK(refused([](Manifest& m) {
    m.stripes.insert(m.stripes.begin() + 1, StripeLayout{m.version, 1, 0, 0, {0, 1, 2}});
  }));
  CHECK(refused([](Manifest& m) { m.stripes[0].data_len = 8193; m.size += 193; }));
  CHECK(refused([](Manifest& m) { m.size += 1; }));
  CHECK(refused([](Manifest& m) { m.size -= 1; }));
  CHECK(refused([](Manifest& m) {
    m.stripes[0].data_len = std::numeric_limits<uint64_t>::max();
    m.stripes[0].fragment_len = std::numeric_limits<uint32_t>::max();
  }));
}

TEST_CASE("Inline bodies sit before the CBOR map, and the older layout still decodes") {
  Manifest m = sampleManifest();
  m.stripes.clear();
  m.drives.clear();
  m.is_inline = true;
  m.inline_data = std::string(4096, 'x') + std::string("\0\xA5", 2);
  const std::string value = encodeManifest(m);
  REQUIRE(value.size() > 6 + m.inline_data.size());
  CHECK(value.substr(0, 2) == std::string("\0I", 2));
  CHECK(value.substr(6, m.inline_data.size()) == m.inline_data);
  CHECK(decodeManifest(value).value() == m);

  // Values written before the frame existed: the body as the CBOR byte string "d".
  nlohmann::json j = nlohmann::json::from_cbor(value.substr(6 + m.inline_data.size()));
  j["d"] = nlohmann::json::binary(std::vector<uint8_t>(m.inline_data.begin(), m.inline_data.end()));
  CHECK(decodeManifest(cbor(j)).value() == m);

  // A frame cut short, a wrong tag, a frame on a manifest that is not inline: corruption.
  for (size_t cut : {1ul, 3ul, 6ul, 100ul, 4102ul}) {
    INFO(cut);
    CHECK(decodeManifest(value.substr(0, cut)).error().isCorruption());
  }
  std::string bad_tag = value;
  bad_tag[1] = 'J';
  CHECK(decodeManifest(bad_tag).error().isCorruption());
  Manifest plain = sampleManifest();
  std::string framed_plain = value.substr(0, 6 + m.inline_data.size()) + encodeManifest(plain);
  CHECK(decodeManifest(framed_plain).error().isCorruption());
}

TEST_CASE("Manifest checksums round-trip and are optional") {
  Manifest m = sampleManifest();
  m.checksum = ObjectChecksum{"CRC32", "AAAAAA==-2", "COMPOSITE"};
  auto back = decodeManifest(encodeManifest(m));
  REQUIRE(back.has_value());
  CHECK(*back == m);
  CHECK(back->checksum.type == "COMPOSITE");

  // A manifest without a checksum writes no "ck" field: the bytes stay the old format.
  Manifest plain = sampleManifest();
  auto plain_json = nlohmann::json::from_cbor(encodeManifest(plain));
  CHECK_FALSE(plain_json.contains("ck"));

  // A record written before checksums existed (hand-built, format 1) still decodes.
  auto v = nlohmann::json::binary(std::vector<uint8_t>(plain.version.bytes.begin(),
                                                       plain.version.bytes.end()));
  nlohmann::json old = {{"f", 1}, {"v", v}, {"s", 3}, {"e", "abc"}, {"t", 7},
                        {"k", 2}, {"m", 1}, {"in", true},
                        {"d", nlohmann::json::binary(std::vector<uint8_t>{1, 2, 3})}};
  auto old_back = decodeManifest(cbor(old));
  REQUIRE(old_back.has_value());
  CHECK(old_back->checksum.empty());
  CHECK(old_back->size == 3);

  // A malformed checksum field is corruption, not a crash.
  old["ck"] = {{"v", "x"}};
  CHECK(decodeManifest(cbor(old)).error().code() == Status::Code::kCorruption);
  old["ck"] = "CRC32";
  CHECK(decodeManifest(cbor(old)).error().code() == Status::Code::kCorruption);
  old["ck"] = {{"a", "SHA256"}, {"v", "q83vEjRWeJA="}};
  auto no_type = decodeManifest(cbor(old));
  REQUIRE(no_type.has_value());
  CHECK(no_type->checksum == ObjectChecksum{"SHA256", "q83vEjRWeJA=", ""});
}

TEST_CASE("Manifest decoding skips unknown fields at any depth and refuses wrong types") {
  const Manifest m = sampleManifest();
  const nlohmann::json good = nlohmann::json::from_cbor(encodeManifest(m));
  const nlohmann::json nested = {{"x", {1, {{"y", nullptr}}, 2.5}}, {"z", "w"}};
  {
    // Fields this version does not know, of every type, at the top, in a stripe, in the
    // checksum and in the record info: skipped, and the rest decodes as before.
    Manifest with = m;
    with.checksum = ObjectChecksum{"CRC32C", "AAAAAA==", ""};
    with.records = RecordIndexInfo{"tar", "indexed", "", m.version, 3, 99};
    nlohmann::json j = nlohmann::json::from_cbor(encodeManifest(with));
    j["zz"] = nested;
    j["zf"] = 1.5;
    j["zn"] = -3;
    j["zb"] = nlohmann::json::binary({1, 2});
    j["st"][1]["new"] = nested;
    j["ck"]["later"] = {1, 2, 3};
    j["ri"]["more"] = nested;
    auto back = decodeManifest(cbor(j));
    REQUIRE(back.has_value());
    CHECK(*back == with);
  }
  {
    nlohmann::json j = good;
    j["t"] = -5;  // before 1970: a negative integer
    auto back = decodeManifest(cbor(j));
    REQUIRE(back.has_value());
    CHECK(back->mtime_unix_nanos == -5);
  }
  const std::vector<std::pair<nlohmann::json::json_pointer, nlohmann::json>> bad = {
      {nlohmann::json::json_pointer("/s"), "12"},
      {nlohmann::json::json_pointer("/s"), -1},
      {nlohmann::json::json_pointer("/e"), 5},
      {nlohmann::json::json_pointer("/t"), uint64_t{1} << 63},
      {nlohmann::json::json_pointer("/t"), 1.5},
      {nlohmann::json::json_pointer("/v"), nlohmann::json::binary({1, 2, 3})},
      {nlohmann::json::json_pointer("/k"), 256},
      {nlohmann::json::json_pointer("/f"), 2},
      {nlohmann::json::json_pointer("/in"), 1},
      {nlohmann::json::json_pointer("/md"), {{"a", 1}}},
      {nlohmann::json::json_pointer("/md"), {"a", "b"}},
      {nlohmann::json::json_pointer("/h"), "text"},
      {nlohmann::json::json_pointer("/dr/1"), 7},
      {nlohmann::json::json_pointer("/dr"), {{"a", "b"}}},
      {nlohmann::json::json_pointer("/st/0"), "not a map"},
      {nlohmann::json::json_pointer("/st/0/di/2"), 65536},
      {nlohmann::json::json_pointer("/st/0/di/2"), "2"},
      {nlohmann::json::json_pointer("/st/1/bs"), uint64_t{1} << 32},
      {nlohmann::json::json_pointer("/st/1/bv"), "version"},
      {nlohmann::json::json_pointer("/st"), {{"bv", 1}}},
      {nlohmann::json::json_pointer("/ck"), {{"a", ""}, {"v", "x"}}},
      {nlohmann::json::json_pointer("/ck"), {{"a", "CRC32"}, {"v", nullptr}}},
      {nlohmann::json::json_pointer("/ri"), {{"st", "indexed"}, {"n", 1}}},
      {nlohmann::json::json_pointer("/ri"), {1, 2}},
  };
  for (const auto& [where, value] : bad) {
    nlohmann::json j = good;
    j[where] = value;
    INFO(where.to_string() << " = " << value.dump());
    auto back = decodeManifest(cbor(j));
    REQUIRE_FALSE(back.has_value());
    CHECK(back.error().isCorruption());
  }
  for (const char* required : {"f", "v", "s", "e", "t", "k", "m"}) {
    nlohmann::json j = good;
    j.erase(required);
    INFO(required);
    CHECK(decodeManifest(cbor(j)).error().isCorruption());
  }
  for (const char* required : {"bv", "bs", "dl", "fl", "di"}) {
    nlohmann::json j = good;
    j["st"][1].erase(required);
    INFO(required);
    CHECK(decodeManifest(cbor(j)).error().isCorruption());
  }
  // Not a map at all.
  CHECK(decodeManifest(cbor(nlohmann::json::array({1, 2}))).error().isCorruption());
  CHECK(decodeManifest(cbor(nlohmann::json(7))).error().isCorruption());
}

TEST_CASE("CBOR nested past the depth limit is refused, not a stack overflow") {
  // 0x81: an array of one element; 0xA1 0x61 'x': a map of one entry "x".
  auto nestedArrays = [](size_t depth) { return std::string(depth, '\x81') + '\x00'; };
  CHECK(parseCborDom(nestedArrays(kMaxCborDepth)).is_array());
  CHECK(parseCborDom(nestedArrays(kMaxCborDepth + 1)).is_discarded());
  CHECK(parseCborDom(nestedArrays(1'000'000)).is_discarded());
  std::string maps;
  for (int i = 0; i < 1'000'000; ++i) maps += "\xA1\x61x";
  CHECK(parseCborDom(maps + '\x00').is_discarded());
  // Indefinite-length strings nested in each other: nlohmann recurses on each without a
  // SAX event (0x7F text, 0x5F bytes; 0xFF ends one).
  CHECK(parseCborDom(std::string(1'000'000, '\x7F')).is_discarded());
  CHECK(parseCborDom(std::string(1'000'000, '\x5F')).is_discarded());
  CHECK(decodeBucket("\xA1\x62zz" + std::string(1'000'000, '\x7F')).error().isCorruption());
  CHECK(decodeManifest("\xA1\x62zz" + std::string(1'000'000, '\x5F')).error().isCorruption());
  // Well-formed values of every kind still parse, as from_cbor reads them.
  const nlohmann::json kinds = {{"u", 1}, {"n", -7}, {"f", 1.5}, {"s", "text"},
                                {"b", nlohmann::json::binary({1, 2, 3})}, {"t", true},
                                {"z", nullptr}, {"a", {1, {{"m", {2, 3}}}}},
                                {"big", uint64_t{1} << 40}};
  std::string kinds_cbor;
  nlohmann::json::to_cbor(kinds, kinds_cbor);
  CHECK(parseCborDom(kinds_cbor) == kinds);
  CHECK(parseCborDom(kinds_cbor + "x").is_discarded());  // trailing bytes (strict)
  CHECK(parseCborDom(kinds_cbor.substr(0, kinds_cbor.size() - 1)).is_discarded());
  // Both readers of stored values: the DOM one (a bucket) and the schema one (a
  // manifest), with the nesting in a field they do not know.
  const std::string deep_field = "\xA1\x62zz" + nestedArrays(1'000'000);
  CHECK(decodeBucket(deep_field).error().isCorruption());
  auto manifest = decodeManifest(deep_field);
  REQUIRE_FALSE(manifest.has_value());
  CHECK(manifest.error().message().find("too deep") != std::string::npos);
  // What the index's values hold still decodes.
  const nlohmann::json back = parseCborDom(encodeManifest(sampleManifest()));
  CHECK(back == nlohmann::json::from_cbor(encodeManifest(sampleManifest())));
}

TEST_CASE("When a key repeats in a stored value, its last value wins") {
  // nlohmann's DOM cannot hold a repeated key, so the maps are written by hand: a CBOR map
  // header, then each key and value in CBOR.
  const auto map = [](std::initializer_list<std::pair<const char*, nlohmann::json>> entries) {
    std::string out(1, static_cast<char>(0xA0 + entries.size()));
    for (const auto& [k, v] : entries) out += cbor(k) + cbor(v);
    return out;
  };
  const VersionId v = sampleManifest().version;
  const auto bin = nlohmann::json::binary(std::vector<uint8_t>(v.bytes.begin(), v.bytes.end()));
  auto s = decodeSummary("k", map({{"s", 1}, {"e", "a"}, {"t", 2}, {"v", bin}, {"s", 9}}));
  REQUIRE(s.has_value());
  CHECK(s->size == 9);
  auto m = decodeManifest(map({{"f", 1}, {"v", bin}, {"s", 0}, {"e", "x"}, {"t", 0}, {"k", 2},
                               {"m", 1}, {"dr", {"a", "b"}}, {"dr", {"c"}},
                               {"md", {{"p", "1"}}}, {"md", {{"q", "2"}}}}));
  REQUIRE(m.has_value());
  CHECK(m->drives == std::vector<std::string>{"c"});
  CHECK(m->metadata == std::map<std::string, std::string>{{"q", "2"}});
}

TEST_CASE("Bucket, summary and GC values round-trip") {
  BucketInfo b{"bucket", "AKIA", -5, "warc.gz", "record-id", false, {}, {}, {}, false, {}};
  CHECK(decodeBucket(encodeBucket(b)).value() == b);
  // The settings: public-read and lifecycle rules (every optional action, and none).
  b.public_read = true;
  b.lifecycle = {LifecycleRule{"logs", true, "logs/", 30, std::nullopt, 7},
                 LifecycleRule{"old", false, "", std::nullopt, 1767225600, std::nullopt},
                 LifecycleRule{"tagged", true, "tmp/", 1, std::nullopt, std::nullopt,
                               {{"temp", "yes"}, {"stage", "raw"}}, 0, 1 << 20},
                 LifecycleRule{"versions", true, "", std::nullopt, std::nullopt, std::nullopt,
                               {}, std::nullopt, std::nullopt, 7, 3, true}};
  auto settings = decodeBucket(encodeBucket(b));
  REQUIRE(settings.has_value());
  CHECK(*settings == b);
  CHECK(settings->lifecycle[1].expiration_date_unix == 1767225600);
  CHECK(settings->lifecycle[1].tags.empty());
  CHECK(settings->lifecycle[2].size_greater_than == 0u);
  CHECK(settings->lifecycle[2].tags.at("stage") == "raw");
  CHECK(settings->lifecycle[2].enabled);
  CHECK(settings->lifecycle[3].noncurrent_days == 7);
  CHECK(settings->lifecycle[3].newer_noncurrent_versions == 3);
  CHECK(settings->lifecycle[3].expired_object_delete_marker == true);
  CHECK_FALSE(settings->lifecycle[0].noncurrent_days);
  // What a gateway older than the filters sees of that rule: disabled, not prefix-only.
  {
    const nlohmann::json stored = nlohmann::json::from_cbor(encodeBucket(b));
    CHECK(stored["lc"][2]["on"] == false);
    CHECK(stored["lc"][2]["fe"] == true);
    CHECK(stored["lc"][0]["on"] == true);
    CHECK_FALSE(stored["lc"][0].contains("fe"));
    b.lifecycle[2].enabled = false;
    CHECK(decodeBucket(encodeBucket(b)).value().lifecycle[2].enabled == false);
    b.lifecycle[2].enabled = true;
  }
  // CORS rules: every list and the maximum age, and the fewest fields a rule can have.
  b.cors = {CorsRule{"web", {"https://*.example.com", "http://localhost:3000"},
                     {"GET", "PUT"}, {"*"}, {"ETag", "x-amz-request-id"}, 3000},
            CorsRule{"", {"*"}, {"HEAD"}, {}, {}, std::nullopt}};
  auto cors = decodeBucket(encodeBucket(b));
  REQUIRE(cors.has_value());
  CHECK(*cors == b);
  CHECK(cors->cors[0].max_age_seconds == 3000);
  CHECK(cors->cors[1].allowed_headers.empty());
  b.tags = {{"team", "data"}, {"cost centre", "42"}};
  auto tagged = decodeBucket(encodeBucket(b));
  REQUIRE(tagged.has_value());
  CHECK(tagged->tags == b.tags);
  CHECK_FALSE(tagged->versioning_suspended);
  b.versioning_suspended = true;
  auto suspended = decodeBucket(encodeBucket(b));
  REQUIRE(suspended.has_value());
  CHECK(*suspended == b);
  CHECK(suspended->policy.empty());
  b.policy = R"({"Statement": [{"Effect": "Allow", "Principal": "*"}]})";
  auto with_policy = decodeBucket(encodeBucket(b));
  REQUIRE(with_policy.has_value());
  CHECK(*with_policy == b);

  UserInfo u{"alice", "GKALICE0000000000001", "s3cr3t/+=", 123};
  CHECK(decodeUser(encodeUser(u)).value() == u);
  CHECK(decodeUser(encodeBucket(b)).error().code() == Status::Code::kCorruption);

  Manifest m = sampleManifest();
  ObjectSummary s{"", 99, "etag", 42, m.version, VersionId{}, true};
  auto sb = decodeSummary("some/key", encodeSummary(s));
  REQUIRE(sb.has_value());
  CHECK(sb->key == "some/key");
  CHECK(sb->size == 99);
  CHECK(sb->etag == "etag");
  CHECK(sb->mtime_unix_nanos == 42);
  CHECK(sb->version == m.version);

  std::vector<BlobRef> blobs = manifestBlobs(m);
  CHECK(blobs.size() == 6);
  CHECK(blobs[3] == BlobRef{"n3/d0", BlobId{m.stripes[1].blob_version, 7, 0}});
  CHECK(decodeGcBlobs(encodeGcBlobs(blobs)).value() == blobs);
}

TEST_CASE("A summary is the fixed layout of docs/index-format.md, and refuses what is cut short") {
  ObjectSummary s{"", 0x0102030405060708, "d41d8cd98f00b204e9800998ecf8427e-3", -2,
                  sampleManifest().version, VersionId{}, true};
  const std::string plain = encodeSummary(s);
  REQUIRE(plain.size() == 35 + s.etag.size());
  CHECK(plain.substr(0, 2) == std::string("\0S", 2));
  CHECK(plain.substr(2, 8) == "\x01\x02\x03\x04\x05\x06\x07\x08");
  CHECK(plain.substr(10, 8) == std::string(7, '\xff') + "\xfe");  // -2, two's complement
  CHECK(plain.substr(18, 16) ==
        std::string(reinterpret_cast<const char*>(s.version.bytes.data()), 16));
  CHECK(plain[34] == '\0');
  CHECK(plain.substr(35) == s.etag);

  s.record_set = sampleManifest().stripes[1].blob_version;
  const std::string with_set = encodeSummary(s);
  REQUIRE(with_set.size() == 51 + s.etag.size());
  CHECK(with_set[34] == '\x01');
  auto back = decodeSummary("a/b", with_set);
  REQUIRE(back);
  CHECK(back->key == "a/b");
  CHECK(back->size == s.size);
  CHECK(back->etag == s.etag);
  CHECK(back->mtime_unix_nanos == -2);
  CHECK(back->version == s.version);
  CHECK(back->record_set == s.record_set);
  CHECK(back->names_blobs);

  // Flag 2: the manifest names no blobs.
  s.names_blobs = false;
  const std::string blobless = encodeSummary(s);
  CHECK(blobless[34] == '\x03');
  CHECK_FALSE(decodeSummary("k", blobless)->names_blobs);
  CHECK(decodeSummary("k", blobless)->record_set == s.record_set);
  s.names_blobs = true;

  // An empty ETag is the whole value's end: still a summary.
  s.etag.clear();
  CHECK(decodeSummary("k", encodeSummary(s))->etag.empty());
  // Every cut into the fixed part, an unknown flag, or another tag is corruption.
  for (size_t n = 1; n < 51; ++n) {
    auto cut = decodeSummary("k", with_set.substr(0, n));
    REQUIRE_FALSE(cut);
    CHECK(cut.error().isCorruption());
  }
  std::string flagged = with_set;
  flagged[34] = '\x05';
  CHECK(decodeSummary("k", flagged).error().isCorruption());
  std::string retagged = with_set;
  retagged[1] = 'I';
  CHECK(decodeSummary("k", retagged).error().isCorruption());
}

TEST_CASE("Record index fields and keys round-trip") {
  Manifest m = sampleManifest();
  m.records = RecordIndexInfo{"warc.gz", "indexed", "", m.version, 12, 3456};
  CHECK(decodeManifest(encodeManifest(m)).value() == m);
  m.records = RecordIndexInfo{"tar", "malformed", "truncated at byte 1024", VersionId{}, 0, 0};
  CHECK(decodeManifest(encodeManifest(m)).value() == m);

  ObjectSummary s{"", 1, "e", 2, m.version, m.stripes[1].blob_version, true};
  CHECK(decodeSummary("k", encodeSummary(s))->record_set == s.record_set);

  // A manifest's summary: flag 2 exactly when it has no stripes (inline or empty objects).
  m.records.set = m.version;
  CHECK(summaryOf(m).names_blobs);
  CHECK(summaryOf(m).record_set == m.version);
  Manifest small;
  small.version = m.version;
  small.is_inline = true;
  small.inline_data = "body";
  small.size = 4;
  CHECK_FALSE(summaryOf(small).names_blobs);
  CHECK_FALSE(decodeSummary("k", encodeSummary(summaryOf(small)))->names_blobs);

  MultipartUpload u;
  u.upload_id = "u1";
  u.bucket = "b";
  u.key = "k";
  u.index_format = "tar";
  u.index_key = "record-id";
  CHECK(decodeUpload(encodeUpload(u)).value() == u);
  u.tags = {{"a", "1"}, {"b", ""}};
  CHECK(decodeUpload(encodeUpload(u)).value() == u);

  const std::string row_key =
      recordRowKey("bucket", "http://a/b?c", "crawl/x.warc.gz", m.version, 0x0102030405ull);
  CHECK(row_key.starts_with(recordKeyPrefix("bucket", "http://a/b?c")));
  CHECK(row_key.starts_with(recordContainerPrefix("bucket", "http://a/b?c", "crawl/x.warc.gz")));
  auto parts = parseRecordRowKey(row_key, 6);
  REQUIRE(parts.has_value());
  CHECK(parts->record_key == "http://a/b?c");
  CHECK(parts->container == "crawl/x.warc.gz");
  CHECK(parts->set == m.version);
  CHECK(parts->offset == 0x0102030405ull);
  // Keys sort by record key first: "a" and all its rows before "a!" (NUL < '!').
  CHECK(recordRowKey("b", "a", "zzz", m.version, 99) < recordRowKey("b", "a!", "a", m.version, 0));
  CHECK_FALSE(parseRecordRowKey("bucket/short", 6).has_value());

  RecordRow row{"k", "c", m.version, 5, 77, 0xDEADBEEF, "response"};
  RecordRow back;
  REQUIRE(decodeRecordValue(encodeRecordValue(row), back).isOk());
  CHECK(back.length == 77);
  CHECK(back.crc32c == 0xDEADBEEF);
  CHECK(back.type == "response");
  CHECK(decodeRecordValue("short", back).code() == Status::Code::kCorruption);

  RecordSetMeta meta{"b", "c.tar", 123};
  auto mb = decodeRecordSetMeta(encodeRecordSetMeta(meta));
  REQUIRE(mb.has_value());
  CHECK(mb->container == "c.tar");
  CHECK(mb->touched_unix_nanos == 123);
  CHECK_FALSE(decodeRecordSetMeta("\xff").has_value());
  // A touch time past INT64_MAX is refused, not wrapped to a negative time.
  nlohmann::json huge = {{"b", "b"}, {"c", "c.tar"}, {"t", uint64_t{1} << 63}};
  CHECK(decodeRecordSetMeta(cbor(huge)).error().isCorruption());
}

TEST_CASE("Decoding garbage or truncated bytes returns kCorruption and never crashes") {
  std::mt19937_64 rng(2024);
  const std::string good = encodeManifest(sampleManifest());
  for (int i = 0; i < 3000; ++i) {
    std::string bytes;
    if (i % 3 == 0) {
      bytes.resize(rng() % 64);
      for (char& c : bytes) c = static_cast<char>(rng());
    } else if (i % 3 == 1) {
      bytes = good.substr(0, rng() % good.size());  // truncated
    } else {
      bytes = good;  // one flipped byte: may still decode, must not crash
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    auto m = decodeManifest(bytes);
    if (!m) CHECK(m.error().code() == Status::Code::kCorruption);
    auto b = decodeBucket(bytes);
    if (!b) CHECK(b.error().code() == Status::Code::kCorruption);
    auto s = decodeSummary("k", bytes);
    if (!s) CHECK(s.error().code() == Status::Code::kCorruption);
    auto g = decodeGcBlobs(bytes);
    if (!g) CHECK(g.error().code() == Status::Code::kCorruption);
  }
  CHECK(decodeManifest("").error().code() == Status::Code::kCorruption);
  Manifest inl = sampleManifest();
  inl.stripes.clear();
  inl.is_inline = true;
  inl.inline_data = std::string(300, 'q');
  const std::string framed = encodeManifest(inl);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = framed;
    if (i % 2) {
      // Every truncation is refused: the frame or the strict CBOR map comes up short.
      bytes = bytes.substr(0, rng() % bytes.size());
      auto m = decodeManifest(bytes);
      REQUIRE_FALSE(m);
      CHECK(m.error().code() == Status::Code::kCorruption);
      continue;
    }
    const size_t at = rng() % bytes.size();
    bytes[at] ^= static_cast<char>(1 + rng() % 255);
    auto m = decodeManifest(bytes);
    if (at >= 6 && at < 6 + inl.inline_data.size()) {
      // A flip inside the body is not the codec's to catch (the body's checksums are):
      // it decodes, with exactly that byte changed.
      REQUIRE(m);
      CHECK(m->inline_data == bytes.substr(6, inl.inline_data.size()));
    } else if (!m) {
      CHECK(m.error().code() == Status::Code::kCorruption);
    }
  }
  CHECK(decodeManifest(good.substr(0, good.size() - 1)).error().code() ==
        Status::Code::kCorruption);
}

TEST_CASE("Well-formed CBOR with wrong field types or bounds is kCorruption") {
  using nlohmann::json;
  CHECK(decodeBucket(cbor(json::array({1, 2}))).error().isCorruption());
  CHECK(decodeBucket(cbor({{"n", 5}, {"o", "x"}, {"c", 1}})).error().isCorruption());
  CHECK(decodeSummary("k", cbor({{"s", -1}, {"e", ""}, {"t", 0}, {"v", "x"}}))
            .error()
            .isCorruption());
  // A version that is not 16 bytes.
  json summary = {{"s", 1}, {"e", ""}, {"t", 0}};
  summary["v"] = json::binary({1, 2, 3});
  CHECK(decodeSummary("k", cbor(summary)).error().isCorruption());
  // Summaries are decoded without a DOM (SAX): the same rules hold. Fields it does not
  // know are skipped at any depth; a missing or mistyped known field, or a document that
  // is not a map, is corruption.
  summary["v"] = json::binary(std::vector<uint8_t>(16, 7));
  summary["future"] = {{"nested", json::array({1, "two", json::object({{"s", "x"}})})}};
  summary["list"] = json::array({json::array({-5})});
  auto decoded = decodeSummary("k", cbor(summary));
  INFO((decoded ? std::string() : decoded.error().toString()));
  REQUIRE(decoded);
  CHECK(decoded->size == 1);
  CHECK(decoded->version.bytes[15] == 7);
  CHECK(decoded->names_blobs);  // from before the flag: not known, so the manifest is read
  CHECK(decoded->record_set.isZero());
  summary["t"] = -12;
  CHECK(decodeSummary("k", cbor(summary))->mtime_unix_nanos == -12);
  for (const char* f : {"s", "e", "t", "v"}) {
    json missing = summary;
    missing.erase(f);
    CHECK(decodeSummary("k", cbor(missing)).error().isCorruption());
    json mistyped = summary;
    mistyped[f] = json::array({1});
    CHECK(decodeSummary("k", cbor(mistyped)).error().isCorruption());
  }
  json bad_e = summary;
  bad_e["e"] = 5;
  CHECK(decodeSummary("k", cbor(bad_e)).error().isCorruption());
  json huge_t = summary;
  huge_t["t"] = std::numeric_limits<uint64_t>::max();
  CHECK(decodeSummary("k", cbor(huge_t)).error().isCorruption());
  CHECK(decodeSummary("k", cbor(json(5))).error().isCorruption());
  CHECK(decodeSummary("k", cbor(json::array({summary}))).error().isCorruption());
  // A stripe naming a drive the table lacks.
  Manifest m = sampleManifest();
  json j = json::from_cbor(encodeManifest(m));
  j["st"][0]["di"][1] = 200;
  CHECK(decodeManifest(cbor(j)).error().isCorruption());
  // An EC parameter out of range for uint8_t.
  j = json::from_cbor(encodeManifest(m));
  j["k"] = 300;
  CHECK(decodeManifest(cbor(j)).error().isCorruption());
  // An unknown format version.
  j = json::from_cbor(encodeManifest(m));
  j["f"] = 2;
  CHECK(decodeManifest(cbor(j)).error().isCorruption());
  // A gc blob id of the wrong length.
  json gc = {{"b", json::array({json::array({"d", json::binary({1, 2})})})}};
  CHECK(decodeGcBlobs(cbor(gc)).error().isCorruption());
}

TEST_CASE("prefixSuccessor increments the last byte with carry and drops trailing 0xFF") {
  CHECK(prefixSuccessor("a/") == "a0");
  CHECK(prefixSuccessor("abc") == "abd");
  CHECK(prefixSuccessor("a\xFF") == "b");
  CHECK(prefixSuccessor("a\xFF\xFF") == "b");
  CHECK(prefixSuccessor("\xFF\xFF").empty());
  CHECK(prefixSuccessor("").empty());
  CHECK(prefixSuccessor(std::string("a\0", 2)) == std::string("a\x01", 2));
}

TEST_CASE("GC queue keys sort by enqueue time, then version") {
  ManualClock clock(1);
  SeededRandom random(3);
  VersionId v = VersionId::generate(clock, random);
  VersionId w = VersionId::generate(clock, random);
  CHECK(gcKey(1000, w) < gcKey(1001, v));
  CHECK(gcKey(255, v) < gcKey(256, v));
  auto parts = parseGcKey(gcKey(123456789, v));
  REQUIRE(parts.has_value());
  CHECK(parts->enqueued_unix_nanos == 123456789);
  CHECK(parts->version == v);
  CHECK_FALSE(parseGcKey("short").has_value());
}

TEST_CASE("Object keys of one bucket sort between bucket/ and bucket0") {
  CHECK(objectKey("a", "x") >= bucketBegin("a"));
  CHECK(objectKey("a", "\xFF\xFF") < bucketEnd("a"));
  CHECK(objectKey("ab", "x") >= bucketEnd("a"));
  CHECK(objectKey("a-", "x") < bucketBegin("a"));
}

TEST_CASE("blobsNotIn keeps a blob's order and drops only what is kept at the same place") {
  VersionId v;
  v.bytes[0] = 7;
  const std::vector<BlobRef> blobs = {
      {"d1", BlobId{v, 0, 0}}, {"d2", BlobId{v, 0, 1}}, {"d3", BlobId{v, 1, 0}},
      {"d4", BlobId{v, 1, 1}}, {"d2", BlobId{v, 0, 1}}};
  // Kept in another order; BlobId{v, 1, 0} moved from d3 to d9 (its old place goes).
  const std::vector<BlobRef> kept = {
      {"d4", BlobId{v, 1, 1}}, {"d9", BlobId{v, 1, 0}}, {"d2", BlobId{v, 0, 1}}};
  CHECK(blobsNotIn(blobs, kept) ==
        std::vector<BlobRef>{{"d1", BlobId{v, 0, 0}}, {"d3", BlobId{v, 1, 0}}});
  CHECK(blobsNotIn(blobs, {}) == blobs);
  CHECK(blobsNotIn({}, kept).empty());
}

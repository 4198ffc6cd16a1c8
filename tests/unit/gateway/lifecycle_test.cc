// LifecycleJob over a real index in a temp dir, with a ManualClock: which objects a pass
// expires, and that the objects a client changes while the pass decides are kept.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>

#include <set>
#include <string>
#include <thread>

#include "forwarding_index.h"
#include "gateway_test_util.h"
#include "granary/common/random.h"
#include "granary/gateway/lifecycle.h"
#include "s3_xml.h"

using namespace granary;
using namespace granary::gateway;
using granary::gateway::testing::kSecond;
using granary::gateway::testing::kStartUnixNanos;

namespace {

constexpr int64_t kDay = 10;  // a lifecycle "day" of 10 s: the clock moves by hand

struct LifecycleFixture {
  LifecycleFixture() {
    index_kv::IndexOptions opts;
    opts.dir = dir.path() + "/index";
    auto idx = index_kv::openIndex(opts, resources, clock);
    if (!idx) throw std::runtime_error("openIndex: " + idx.error().toString());
    index = std::move(*idx);
    index_kv::BucketInfo b;
    b.name = "b";
    b.owner = "owner";
    b.created_unix_nanos = clock.nowUnixNanos();
    REQUIRE(index->createBucket(b).isOk());
  }

  void setRules(std::vector<index_kv::LifecycleRule> rules) {
    auto b = index->getBucket("b");
    REQUIRE(b.has_value());
    index_kv::BucketInfo updated = *b;
    updated.lifecycle = std::move(rules);
    REQUIRE(index->updateBucket(updated, *b).isOk());
  }

  void makeBucket(const std::string& name, std::vector<index_kv::LifecycleRule> rules = {}) {
    clock.advance(1000);
    index_kv::BucketInfo b;
    b.name = name;
    b.owner = "owner";
    b.created_unix_nanos = clock.nowUnixNanos();
    b.lifecycle = std::move(rules);
    REQUIRE(index->createBucket(b).isOk());
  }

  index_kv::Manifest put(const std::string& key, size_t size,
                         std::map<std::string, std::string> tags = {},
                         const std::string& bucket = "b") {
    clock.advance(1000);
    index_kv::Manifest m;
    m.version = VersionId::generate(clock, random);
    m.size = size;
    m.etag = "etag";
    m.mtime_unix_nanos = clock.nowUnixNanos();
    m.is_inline = true;
    m.inline_data = std::string(size, 'x');
    m.tags = std::move(tags);
    REQUIRE(index->putObject(bucket, key, m, index_kv::Precondition::none()).has_value());
    return m;
  }

  // A multipart upload of bucket/key initiated now.
  void createUpload(const std::string& bucket, const std::string& key) {
    REQUIRE(index->createUpload(testing::newUpload(clock, random, bucket, key, "owner"), 0)
                .isOk());
  }

  std::set<std::string> keys(const std::string& bucket = "b") {
    auto page = index->listObjects(bucket, index_kv::ListRequest{});
    REQUIRE(page.has_value());
    std::set<std::string> out;
    for (const auto& o : page->objects) out.insert(o.key);
    return out;
  }

  LifecycleStats pass(LifecycleOptions options = {}, index_kv::Index* through = nullptr) {
    options.day_seconds = kDay;
    options.multipart_max_age = std::chrono::seconds(0);
    LifecycleJob job(through ? *through : *index, clock, std::move(options));
    auto stats = job.runOnce();
    REQUIRE(stats.has_value());
    return *stats;
  }

  test_support::TempDir dir;
  ManualClock clock{kStartUnixNanos};
  SeededRandom random{7};
  RocksResources resources{RocksBudget{16 << 20, 16 << 20}};
  std::unique_ptr<index_kv::Index> index;
};

index_kv::LifecycleRule expireAfter(int64_t days, const char* prefix = "") {
  index_kv::LifecycleRule r;
  r.id = prefix;
  r.id += "rule";
  r.prefix = prefix;
  r.expiration_days = days;
  return r;
}

}  // namespace

TEST_CASE("A lifecycle pass expires by age, prefix, tags and sizes, and keeps the rest") {
  LifecycleFixture f;
  auto by_prefix = expireAfter(1, "logs/");
  auto by_tags = expireAfter(2);
  by_tags.tags = {{"stage", "raw"}, {"team", "a"}};
  auto by_size = expireAfter(1, "sized/");
  by_size.size_greater_than = 10;
  by_size.size_less_than = 20;
  f.setRules({by_prefix, by_tags, by_size});

  f.put("logs/old", 1);
  f.put("keep/raw-a", 1, {{"stage", "raw"}, {"team", "a"}, {"extra", "x"}});
  f.put("keep/raw-b", 1, {{"stage", "raw"}, {"team", "b"}});
  f.put("keep/raw", 1, {{"stage", "raw"}});
  for (size_t size : {10, 11, 19, 20}) {
    std::string key = "sized/";  // not `"sized/" + ...`: g++ 12 -O3 false -Wrestrict
    key += std::to_string(size);
    f.put(key, size);
  }
  f.clock.advance(kDay * kSecond);
  f.put("logs/young", 1);

  // One day on: the prefix and size rules are due, the tag rule (two days) is not.
  CHECK(f.pass().objects_expired == 3);
  CHECK(f.keys() == std::set<std::string>{"keep/raw", "keep/raw-a", "keep/raw-b", "logs/young",
                                          "sized/10", "sized/20"});
  f.clock.advance(kDay * kSecond);
  // Two days: the tag rule takes the object with both tags; a day for logs/young.
  CHECK(f.pass().objects_expired == 2);
  CHECK(f.keys() == std::set<std::string>{"keep/raw", "keep/raw-b", "sized/10", "sized/20"});
  CHECK(f.pass().objects_expired == 0);
}

TEST_CASE("Lifecycle days end at the next day boundary after the object's time, as S3's") {
  // S3: created 10:30 UTC with Days 3, an object expires at midnight starting day 4. Here a
  // day is 10 s and the clock starts on a day boundary: 3 s into a day, one day ends 17 s
  // later, at the boundary after the next, not 10 s later.
  LifecycleFixture f;
  auto rule = expireAfter(1);
  rule.abort_incomplete_days = 1;
  f.setRules({rule});
  f.clock.advance(3 * kSecond);
  f.put("k", 1);
  f.createUpload("b", "upload");
  f.clock.advance(kDay * kSecond);  // a whole day of age, 3 s short of the boundary
  LifecycleStats early = f.pass();
  CHECK(early.objects_expired == 0);
  CHECK(early.uploads_aborted == 0);
  // kStartUnixNanos is a day boundary (a multiple of 10 s): the object is due two on.
  const int64_t boundary = testing::kStartUnixNanos + 2 * kDay * kSecond;
  REQUIRE(f.clock.nowUnixNanos() < boundary - kSecond);
  f.clock.advance(boundary - 1 - f.clock.nowUnixNanos());  // a nanosecond short
  CHECK(f.pass().objects_expired == 0);
  f.clock.advance(1);
  LifecycleStats due = f.pass();
  CHECK(due.objects_expired == 1);
  CHECK(due.uploads_aborted == 1);
  CHECK(f.keys().empty());
}

TEST_CASE("An object untagged or overwritten while the lifecycle pass decides is kept") {
  LifecycleFixture f;
  auto rule = expireAfter(1);
  rule.tags = {{"stage", "raw"}};
  f.setRules({rule});
  const auto untagged = f.put("untagged", 1, {{"stage", "raw"}});
  const auto retagged = f.put("retagged", 1, {{"stage", "raw"}});
  f.put("overwritten", 1, {{"stage", "raw"}});
  f.put("expired", 1, {{"stage", "raw"}});
  f.clock.advance(kDay * kSecond);

  // Between the job's read of each object's tags and its delete, a client changes three
  // of them: PutObjectTagging / DeleteObjectTagging keep the version, a PUT does not.
  LifecycleOptions options;
  std::set<std::string> seen;
  options.before_expire = [&](const std::string& bucket, const std::string& key) {
    CHECK(bucket == "b");
    seen.insert(key);
    if (key == "untagged") {
      auto without = untagged;
      without.tags.clear();
      REQUIRE(f.index->updateObjectTags("b", key, untagged, without).isOk());
    } else if (key == "retagged") {
      auto cooked = retagged;
      cooked.tags["stage"] = "cooked";
      REQUIRE(f.index->updateObjectTags("b", key, retagged, cooked).isOk());
    } else if (key == "overwritten") {
      f.put(key, 1, {{"stage", "raw"}});
    }
  };
  CHECK(f.pass(options).objects_expired == 1);
  CHECK(seen == std::set<std::string>{"expired", "overwritten", "retagged", "untagged"});
  CHECK(f.keys() == std::set<std::string>{"overwritten", "retagged", "untagged"});
  CHECK(f.index->getObject("b", "untagged")->tags.empty());
}

TEST_CASE("A lifecycle pass applies the rules a bucket has now, not a bucket made again") {
  LifecycleFixture f;
  auto by_date = expireAfter(1000);
  by_date.expiration_days.reset();
  by_date.expiration_date_unix = 1577836800;  // 2020-01-01: every object, from the start
  f.makeBucket("a", {expireAfter(1)});
  f.put("old", 1, {}, "a");
  f.setRules({by_date});
  f.clock.advance(kDay * kSecond);

  SECTION("b deleted and made again, without rules, while the pass was at a") {
    LifecycleOptions options;
    options.before_expire = [&](const std::string& bucket, const std::string&) {
      if (bucket != "a") return;
      REQUIRE(f.index->deleteBucket("b", 0).isOk());
      f.makeBucket("b");
      f.put("fresh", 1);
    };
    CHECK(f.pass(options).objects_expired == 1);  // a's "old"
    CHECK(f.keys() == std::set<std::string>{"fresh"});
  }
  SECTION("b's rules removed while the pass was in them: the next page is kept") {
    for (const char* key : {"k1", "k2", "k3"}) f.put(key, 1);
    LifecycleOptions options;
    options.page_keys = 1;
    options.before_expire = [&](const std::string& bucket, const std::string&) {
      if (bucket == "b") f.setRules({});
    };
    CHECK(f.pass(options).objects_expired == 2);  // a's "old" and b's first
    CHECK(f.keys() == std::set<std::string>{"k2", "k3"});
  }
}

TEST_CASE("An object that cannot be deleted, or a bucket that cannot be listed, stops no other") {
  struct FailingIndex final : index_kv::ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Result<std::optional<VersionId>> deleteObject(std::string_view bucket, std::string_view key,
                                                  index_kv::Precondition pre) override {
      if (bucket == "a" && key == "bad") return fail(Status::corruption("unreadable manifest"));
      return target_.deleteObject(bucket, key, pre);
    }
    Result<index_kv::ListResult> listObjects(std::string_view bucket,
                                             const index_kv::ListRequest& req) override {
      if (bucket == "c") return fail(Status::corruption("unreadable summary"));
      return target_.listObjects(bucket, req);
    }
  };
  LifecycleFixture f;
  auto abort_after = expireAfter(1);
  abort_after.abort_incomplete_days = 1;
  f.makeBucket("a", {expireAfter(1)});
  f.makeBucket("c", {abort_after});
  f.makeBucket("z", {abort_after});
  f.put("bad", 1, {}, "a");
  f.put("ok", 1, {}, "a");
  f.put("c-old", 1, {}, "c");
  f.put("z-old", 1, {}, "z");
  f.createUpload("z", "z-upload");
  f.createUpload("c", "z-upload");  // c's objects cannot be listed: its uploads still go
  f.clock.advance(kDay * kSecond);

  FailingIndex failing(*f.index);
  auto stats = f.pass({}, &failing);
  CHECK(stats.objects_failed == 1);
  CHECK(stats.buckets_failed == 1);
  CHECK(stats.objects_expired == 2);  // a's "ok", z's "z-old"
  CHECK(stats.uploads_aborted == 2);
  CHECK(f.keys("a") == std::set<std::string>{"bad"});
  CHECK(f.keys("c") == std::set<std::string>{"c-old"});
  CHECK(f.keys("z").empty());
}

TEST_CASE("Background lifecycle passes run only while this gateway leads them") {
  LifecycleFixture f;
  f.setRules({expireAfter(1)});
  f.put("old", 1);
  f.clock.advance(2 * kDay * kSecond);
  std::atomic<bool> leads{false};
  LifecycleOptions options;
  options.interval = std::chrono::seconds(1);
  options.day_seconds = kDay;
  options.multipart_max_age = std::chrono::seconds(0);
  options.leading = [&leads] { return leads.load(); };
  LifecycleJob job(*f.index, f.clock, options);
  job.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a pass is due at 1 s
  CHECK(f.keys() == std::set<std::string>{"old"});  // skipped: another gateway leads
  leads = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!f.keys().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  job.stop();
  CHECK(f.keys().empty());
}

TEST_CASE("Lifecycle rules without an ID get one that no explicit ID took") {
  // A configuration of rules with these IDs ("": none), each expiring prefix p after a day.
  auto configuration = [](const std::vector<std::string>& ids) {
    std::string xml = "<LifecycleConfiguration>";
    for (const std::string& id : ids) {
      xml.append("<Rule>");
      if (!id.empty()) xml.append("<ID>").append(id).append("</ID>");
      xml.append("<Status>Enabled</Status><Filter><Prefix>p</Prefix></Filter>"
                 "<Expiration><Days>1</Days></Expiration></Rule>");
    }
    return xml.append("</LifecycleConfiguration>");
  };
  auto rules = parseLifecycleConfiguration(configuration({"rule-1", "", "", "rule-3"}));
  REQUIRE(rules.has_value());
  REQUIRE(rules->size() == 4);
  CHECK((*rules)[0].id == "rule-1");
  CHECK((*rules)[1].id == "rule-2");
  CHECK((*rules)[2].id == "rule-4");
  CHECK((*rules)[3].id == "rule-3");
  // Two explicit IDs alike are still refused.
  CHECK_FALSE(parseLifecycleConfiguration(configuration({"a", "a"})).has_value());
}

TEST_CASE("A value in pieces, beside elements or holding a NUL is MalformedXML") {
  // Each parser reads a value as its element's first piece of text: a comment, CDATA or
  // an element inside it, or a NUL, would have read a prefix shorter than written (a rule
  // over more objects, even the whole bucket), or another key to delete.
  auto rule = [](const std::string& prefix) {
    return "<LifecycleConfiguration><Rule><ID>r</ID><Status>Enabled</Status><Filter><Prefix>" +
           prefix + "</Prefix></Filter><Expiration><Days>1</Days></Expiration></Rule>" +
           "</LifecycleConfiguration>";
  };
  for (const std::string& prefix :
       std::vector<std::string>{"logs<!-- x -->/old/", "logs<?pi x?>/old/", "logs<![CDATA[/old/]]>",
                                "<Value>tmp/</Value>", "tmp/<Value>x</Value>", "&#0;tmp/",
                                "&#x00;tmp/", "&#x100000000;tmp/", "&#4294967296;tmp/",
                                "&#x110000;tmp/", std::string("tmp/\0x", 6)}) {
    INFO(prefix);
    auto parsed = parseLifecycleConfiguration(rule(prefix));
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().code == S3ErrorCode::kMalformedXML);
  }
  auto days = parseLifecycleConfiguration(
      "<LifecycleConfiguration><Rule><ID>r</ID><Status>Enabled</Status><Filter><Prefix>p"
      "</Prefix></Filter><Expiration><Days>3<!---->65</Days></Expiration></Rule>"
      "</LifecycleConfiguration>");
  CHECK_FALSE(days.has_value());
  auto del = parseDeleteObjects("<Delete><Object><Key>a<!---->b</Key></Object></Delete>");
  REQUIRE_FALSE(del.has_value());
  CHECK(del.error().code == S3ErrorCode::kMalformedXML);
  // A value that is all CDATA, character references other than NUL, and whitespace
  // between elements are still read whole.
  for (const auto& [written, read] : std::vector<std::pair<std::string, std::string>>{
           {"<![CDATA[a<b>/]]>", "a<b>/"}, {"a&#60;b&#x3E;/", "a<b>/"}, {"&#10;a", "\na"}}) {
    INFO(written);
    auto parsed = parseLifecycleConfiguration(rule(written));
    REQUIRE(parsed.has_value());
    CHECK((*parsed)[0].prefix == read);
  }
  auto spaced =
      parseDeleteObjects("<Delete>\n  <Object>\n    <Key>a b</Key>\n  </Object>\n</Delete>");
  REQUIRE(spaced.has_value());
  REQUIRE(spaced->objects.size() == 1);
  CHECK(spaced->objects[0].key == "a b");
}

TEST_CASE("Lifecycle rules: no Filter nor Prefix, IDs counted in characters, a Tag's Key twice") {
  auto parse = [](const std::string& id, const std::string& filter) {
    return parseLifecycleConfiguration("<LifecycleConfiguration><Rule><ID>" + id +
                                       "</ID><Status>Enabled</Status>" + filter +
                                       "<Expiration><Days>1</Days></Expiration></Rule>"
                                       "</LifecycleConfiguration>");
  };
  // Neither Filter nor Prefix: S3 answers MalformedXML, and the rule must not cover every
  // object unasked. An empty Filter or Prefix does.
  auto none = parse("r", "");
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code == S3ErrorCode::kMalformedXML);
  for (const char* everything : {"<Filter></Filter>", "<Prefix></Prefix>"}) {
    auto all = parse("r", everything);
    REQUIRE(all.has_value());
    CHECK((*all)[0].prefix.empty());
  }
  std::string id;
  for (int i = 0; i < 255; ++i) id += "\xc3\xa9";  // 255 characters, 510 bytes
  CHECK(parse(id, "<Filter/>").has_value());
  auto longer = parse(id + "e", "<Filter/>");
  REQUIRE_FALSE(longer.has_value());
  CHECK(longer.error().code == S3ErrorCode::kInvalidArgument);
  auto two_keys =
      parse("r", "<Filter><Tag><Key>a</Key><Key>b</Key><Value>v</Value></Tag></Filter>");
  REQUIRE_FALSE(two_keys.has_value());
  CHECK(two_keys.error().code == S3ErrorCode::kMalformedXML);
  auto tagging = parseTagging(
      "<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value><Value>2</Value></Tag></TagSet>"
      "</Tagging>");
  REQUIRE_FALSE(tagging.has_value());
  CHECK(tagging.error().code == S3ErrorCode::kMalformedXML);
}

TEST_CASE("A bucket's lifecycle rules share one listing of the prefixes they cover") {
  // A thousand rules over one prefix used to list it a thousand times each pass.
  struct CountingIndex final : index_kv::ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Result<index_kv::ListResult> listObjects(std::string_view bucket,
                                             const index_kv::ListRequest& req) override {
      prefixes_listed.push_back(req.prefix);
      return target_.listObjects(bucket, req);
    }
    std::vector<std::string> prefixes_listed;
  };
  LifecycleFixture f;
  std::vector<index_kv::LifecycleRule> rules;
  for (int i = 0; i < 300; ++i) {
    auto rule = expireAfter(100000, i % 2 ? "logs/" : "");
    rule.id = "never-" + std::to_string(i);
    rules.push_back(rule);
  }
  auto tagged = expireAfter(1, "logs/");
  tagged.id = "tagged";
  tagged.tags = {{"t", "1"}};
  rules.push_back(tagged);
  auto other = expireAfter(1, "tmp/");
  other.id = "tmp";
  rules.push_back(other);
  f.setRules(rules);
  f.put("logs/a", 1, {{"t", "1"}});
  f.put("logs/b", 1);
  f.put("tmp/c", 1);
  f.put("keep", 1);
  f.clock.advance(kDay * kSecond);
  CountingIndex counting(*f.index);
  CHECK(f.pass({}, &counting).objects_expired == 2);
  CHECK(f.keys() == std::set<std::string>{"keep", "logs/b"});
  CHECK(counting.prefixes_listed == std::vector<std::string>{""});  // "" holds the others
  // Without the rules over the whole bucket: one listing per prefix.
  f.setRules({tagged, other});
  f.put("logs/d", 1, {{"t", "1"}});
  f.put("tmp/e", 1);
  f.clock.advance(kDay * kSecond);
  counting.prefixes_listed.clear();
  CHECK(f.pass({}, &counting).objects_expired == 2);
  CHECK(counting.prefixes_listed == std::vector<std::string>{"logs/", "tmp/"});
}

TEST_CASE("An object two rules expire goes by the rule without tags, its tags unread") {
  // A tag rule listed first used to decide: a manifest read per object, and a tag changed
  // meanwhile kept an object the other rule expires.
  struct CountingIndex final : index_kv::ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Result<index_kv::Manifest> getObject(std::string_view bucket, std::string_view key) override {
      ++manifests_read;
      return target_.getObject(bucket, key);
    }
    int manifests_read = 0;
  };
  LifecycleFixture f;
  auto tagged = expireAfter(1);
  tagged.id = "tagged";
  tagged.tags = {{"t", "1"}};
  auto plain = expireAfter(1);
  plain.id = "plain";
  f.setRules({tagged, plain});
  const auto m = f.put("k", 1, {{"t", "1"}});
  f.clock.advance(kDay * kSecond);
  CountingIndex counting(*f.index);
  LifecycleOptions options;
  options.before_expire = [&](const std::string&, const std::string& key) {
    auto untagged = m;
    untagged.tags.clear();
    REQUIRE(f.index->updateObjectTags("b", key, m, untagged).isOk());
  };
  CHECK(f.pass(options, &counting).objects_expired == 1);
  CHECK(counting.manifests_read == 0);
  CHECK(f.keys().empty());
}

TEST_CASE("XML bodies: a value element twice, a DOCTYPE and a flood of elements are malformed") {
  const auto malformed = [](const auto& parsed) {
    return !parsed.has_value() && parsed.error().code == S3ErrorCode::kMalformedXML;
  };
  // Which of two would count is not for the server to guess.
  CHECK(malformed(parseDeleteObjects(
      "<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>")));
  CHECK(malformed(parseDeleteObjects(
      "<Delete><Object><Key>a</Key><ETag>x</ETag><ETag>y</ETag></Object></Delete>")));
  CHECK(malformed(parseDeleteObjects(
      "<Delete><Quiet>true</Quiet><Quiet>false</Quiet><Object><Key>a</Key></Object></Delete>")));
  CHECK(malformed(parseCompleteMultipartUpload(
      "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><PartNumber>2</PartNumber>"
      "<ETag>e</ETag></Part></CompleteMultipartUpload>")));
  CHECK(malformed(parseCorsConfiguration(
      "<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET"
      "</AllowedMethod><MaxAgeSeconds>1</MaxAgeSeconds><MaxAgeSeconds>2</MaxAgeSeconds>"
      "</CORSRule></CORSConfiguration>")));
  CHECK(malformed(parseAccessControlPolicy(
      "<AccessControlPolicy><AccessControlList><Grant><Grantee><ID>o</ID></Grantee><Grantee>"
      "<URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>"
      "FULL_CONTROL</Permission></Grant></AccessControlList></AccessControlPolicy>")));
  // Repeatable ones still are: Objects, and a CORS rule's origins and methods.
  auto two = parseDeleteObjects(
      "<Delete><Object><Key>a</Key></Object><Object><Key>b</Key></Object></Delete>");
  REQUIRE(two.has_value());
  CHECK(two->objects.size() == 2);
  auto cors = parseCorsConfiguration(
      "<CORSConfiguration><CORSRule><AllowedOrigin>a</AllowedOrigin><AllowedOrigin>b"
      "</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod>"
      "</CORSRule></CORSConfiguration>");
  REQUIRE(cors.has_value());
  CHECK((*cors)[0].allowed_origins.size() == 2);

  // Quiet is an xs:boolean, pretty-printed or not.
  for (const char* yes : {"true", "True", "1", "\n  true\n"}) {
    INFO(yes);
    auto parsed = parseDeleteObjects(std::string("<Delete><Quiet>") + yes +
                                     "</Quiet><Object><Key>a</Key></Object></Delete>");
    REQUIRE(parsed.has_value());
    CHECK(parsed->quiet);
  }
  for (const char* no : {"false", "0", ""}) {
    INFO(no);
    auto parsed = parseDeleteObjects(std::string("<Delete><Quiet>") + no +
                                     "</Quiet><Object><Key>a</Key></Object></Delete>");
    REQUIRE(parsed.has_value());
    CHECK_FALSE(parsed->quiet);
  }
  CHECK(malformed(parseDeleteObjects(
      "<Delete><Quiet>yes</Quiet><Object><Key>a</Key></Object></Delete>")));

  // A document type declaration (and the entities it could declare) is refused.
  CHECK(malformed(parseDeleteObjects(
      "<!DOCTYPE Delete [<!ENTITY e \"x\">]><Delete><Object><Key>a</Key></Object></Delete>")));

  // 1,000 Objects with every field they may carry parse; a body of empty elements past
  // what 1,000 Objects could hold is refused before pugixml builds its tree.
  std::string full = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>";
  for (int i = 0; i < 1000; ++i) {
    full += "<Object><Key>k" + std::to_string(i) + "</Key><VersionId>null</VersionId><ETag>e"
            "</ETag><LastModifiedTime>2026-01-01T00:00:00Z</LastModifiedTime><Size>1</Size>"
            "</Object>";
  }
  full += "</Delete>";
  auto parsed = parseDeleteObjects(full);
  REQUIRE(parsed.has_value());
  CHECK(parsed->objects.size() == 1000);
  std::string flood = "<Delete><Object><Key>a</Key></Object>";
  for (int i = 0; i < 20'000; ++i) flood += "<a/>";
  flood += "</Delete>";
  CHECK(malformed(parseDeleteObjects(flood)));
}

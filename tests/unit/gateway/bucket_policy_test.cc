// Bucket policies: what PutBucketPolicy accepts, and how a policy answers requests.
#include "bucket_policy.h"

#include <catch2/catch.hpp>

namespace granary::gateway {
namespace {

std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

// As PutBucketPolicy judges a policy being set.
S3ErrorCode codeOf(std::string_view json) {
  auto p = BucketPolicy::parse(json, "data", /*being_set=*/true);
  REQUIRE_FALSE(p.has_value());
  return p.error().code;
}

BucketPolicy parsed(std::string_view json) {
  auto p = BucketPolicy::parse(json, "data", /*being_set=*/true);
  INFO(json);
  REQUIRE(p.has_value());
  return std::move(*p);
}

PolicyQuery query(std::string_view action, std::string_view resource,
                  std::string_view principal = "") {
  PolicyQuery q;
  q.action = action;
  q.resource = resource;
  q.principal = principal;
  q.source_ip = "192.0.2.7";
  return q;
}

// What `mc anonymous set download` writes.
constexpr std::string_view kDownload = R"({
  "Version": "2012-10-17",
  "Statement": [
    {"Effect": "Allow", "Principal": {"AWS": ["*"]},
     "Action": ["s3:GetBucketLocation", "s3:ListBucket"],
     "Resource": ["arn:aws:s3:::data"]},
    {"Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
     "Resource": ["arn:aws:s3:::data/*"]}
  ]
})";

}  // namespace

TEST_CASE("Policy wildcards: * any run, ? one character, nothing else special") {
  CHECK(policyWildcardMatch("*", ""));
  CHECK(policyWildcardMatch("*", "anything/at/all"));
  CHECK(policyWildcardMatch("arn:aws:s3:::data/*", "arn:aws:s3:::data/a/b"));
  CHECK(policyWildcardMatch("arn:aws:s3:::data/*", "arn:aws:s3:::data/"));
  CHECK_FALSE(policyWildcardMatch("arn:aws:s3:::data/*", "arn:aws:s3:::data"));
  CHECK(policyWildcardMatch("s3:get*", "s3:getobject"));
  CHECK(policyWildcardMatch("a?c", "abc"));
  CHECK_FALSE(policyWildcardMatch("a?c", "ac"));
  CHECK(policyWildcardMatch("*.jpg", "x.jpg.jpg"));
  CHECK_FALSE(policyWildcardMatch("*.jpg", "x.jpg.png"));
  CHECK(policyWildcardMatch("a*b*c", "aXbYbZc"));
  CHECK_FALSE(policyWildcardMatch("a*b*c", "aXbYbZ"));
  CHECK(policyWildcardMatch("[ab]", "[ab]"));  // not a character class
  CHECK_FALSE(policyWildcardMatch("[ab]", "a"));
  CHECK(policyWildcardMatch("**", "x"));
  // A '*' in the text is a character like any other (found by fuzz.bucket_policy).
  CHECK(policyWildcardMatch("a*b?c*", "aXbb?c*zz"));
  CHECK(policyWildcardMatch("a*", "a*b"));
  CHECK_FALSE(policyWildcardMatch("a*c", "a*b"));
  CHECK_FALSE(policyWildcardMatch("", "x"));
  // Middle pieces longer than one 64-bit word, with '?' in them, found where they first
  // can be; and the inputs that make a backtracking matcher quadratic (a long User-Agent
  // against "*aaa...ab").
  // (Joined by cat(): g++ 12 -O3 reports a false -Wrestrict on `"x" + std::string(...)`.)
  const std::string a70(70, 'a');
  const std::string a100(100, 'a');
  const std::string long_piece = cat({a70, "?", std::string(30, 'b')});
  CHECK(policyWildcardMatch(cat({"x*", long_piece, "*y"}),
                            cat({"xz", a70, "Q", std::string(30, 'b'), "zzy"})));
  CHECK_FALSE(policyWildcardMatch(cat({"x*", long_piece, "*y"}),
                                  cat({"x", a70, "Q", std::string(29, 'b'), "y"})));
  const std::string agent(16000, 'a');
  CHECK_FALSE(policyWildcardMatch(cat({"*", a100, "b*"}), agent));
  CHECK_FALSE(policyWildcardMatch(cat({"*", a100, "b"}), agent));
  CHECK(policyWildcardMatch(cat({"*", a100, "*"}), agent));
}

TEST_CASE("Policy wildcards: pieces of ? alone, and long ones against a long text") {
  const std::string agent(16000, 'a');
  // Pieces of '?' alone, and characters the piece names beside '?' that match anything.
  CHECK(policyWildcardMatch("x*???*y", "xabcy"));
  CHECK_FALSE(policyWildcardMatch("x*???*y", "xaby"));
  CHECK(policyWildcardMatch("x*a?a*y", "x-aaa-y"));
  CHECK(policyWildcardMatch("x*a?a*y", "x-aba-y"));
  CHECK_FALSE(policyWildcardMatch("x*a?a*y", "x-abb-y"));
  CHECK(policyWildcardMatch(cat({"*", std::string(15000, '?'), "*"}), agent));
  CHECK_FALSE(policyWildcardMatch(cat({"*", std::string(16001, '?'), "*"}), agent));
}

TEST_CASE("A request asked about many resources judges the conditions once") {
  const BucketPolicy p = parsed(R"({"Statement": [
    {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject",
     "Resource": "arn:aws:s3:::data/keep/*",
     "Condition": {"StringLike": {"aws:UserAgent": "*robot*"}}},
    {"Effect": "Allow", "Principal": "*", "Action": "s3:DeleteObject",
     "Resource": "arn:aws:s3:::data/*"}]})");
  std::vector<int8_t> held;
  PolicyQuery q = query("s3:DeleteObject", "arn:aws:s3:::data/keep/a");
  q.user_agent = "a robot";
  q.conditions_held = &held;
  CHECK(p.evaluate(q) == PolicyEffect::kDeny);
  REQUIRE(held.size() == 2);
  CHECK(held[0] == 1);
  q.resource = "arn:aws:s3:::data/other";  // the Deny's resource does not match
  CHECK(p.evaluate(q) == PolicyEffect::kAllow);
  // What was judged stands for the rest of the request: the same answers as judging
  // again, without reading the User-Agent again.
  q.resource = "arn:aws:s3:::data/keep/b";
  q.user_agent = "a browser";
  CHECK(p.evaluate(q) == PolicyEffect::kDeny);
  q.conditions_held = nullptr;
  CHECK(p.evaluate(q) == PolicyEffect::kAllow);
}

TEST_CASE("A download policy lets anyone read and list, nothing more") {
  BucketPolicy p = parsed(kDownload);
  CHECK(p.isPublic());
  CHECK(p.evaluate(query("s3:GetObject", objectArn("data", "a/b.tar"))) == PolicyEffect::kAllow);
  CHECK(p.evaluate(query("s3:ListBucket", bucketArn("data"))) == PolicyEffect::kAllow);
  // Actions are not case-sensitive.
  CHECK(p.evaluate(query("S3:GETOBJECT", objectArn("data", "k"))) == PolicyEffect::kAllow);
  CHECK(p.evaluate(query("s3:PutObject", objectArn("data", "k"))) == PolicyEffect::kNone);
  CHECK(p.evaluate(query("s3:DeleteObject", objectArn("data", "k"))) == PolicyEffect::kNone);
  // The object resource does not name the bucket, nor the bucket its objects.
  CHECK(p.evaluate(query("s3:GetObject", bucketArn("data"))) == PolicyEffect::kNone);
  CHECK(p.evaluate(query("s3:ListBucket", objectArn("data", "k"))) == PolicyEffect::kNone);
  CHECK(p.mayAllow("s3:GetObject", ""));
  CHECK_FALSE(p.mayAllow("s3:DeleteObject", "alice"));
}

TEST_CASE("Named users, prefixes of keys, and Deny over Allow") {
  BucketPolicy p = parsed(R"({
    "Statement": [
      {"Sid": "team", "Effect": "Allow",
       "Principal": {"AWS": ["arn:aws:iam::123456789012:user/alice",
                             "arn:aws:iam::granary:user/bob"]},
       "Action": "s3:*", "Resource": "arn:aws:s3:::data/shared/*"},
      {"Effect": "Deny", "Principal": "*", "Action": ["s3:DeleteObject"],
       "Resource": "arn:aws:s3:::data/shared/keep/*"}
    ]})");
  CHECK_FALSE(p.isPublic());
  auto put = [&](std::string_view key, std::string_view who) {
    return p.evaluate(query("s3:PutObject", objectArn("data", key), who));
  };
  CHECK(put("shared/x", "alice") == PolicyEffect::kAllow);
  CHECK(put("shared/x", "bob") == PolicyEffect::kAllow);
  CHECK(put("shared/x", "carol") == PolicyEffect::kNone);
  CHECK(put("shared/x", "") == PolicyEffect::kNone);  // anonymous is nobody's name
  CHECK(put("private/x", "alice") == PolicyEffect::kNone);
  auto del = [&](std::string_view key, std::string_view who) {
    return p.evaluate(query("s3:DeleteObject", objectArn("data", key), who));
  };
  CHECK(del("shared/x", "alice") == PolicyEffect::kAllow);
  CHECK(del("shared/keep/x", "alice") == PolicyEffect::kDeny);
  CHECK(del("shared/keep/x", "") == PolicyEffect::kDeny);
  CHECK(p.mayAllow("s3:DeleteObject", "alice"));
  CHECK_FALSE(p.mayAllow("s3:DeleteObject", "carol"));
}

TEST_CASE("NotAction and NotResource match what they do not name") {
  BucketPolicy p = parsed(R"({"Statement": {
      "Effect": "Deny", "Principal": "*", "NotAction": ["s3:Get*", "s3:List*"],
      "NotResource": "arn:aws:s3:::data/uploads/*"}})");
  CHECK(p.evaluate(query("s3:PutObject", objectArn("data", "a"))) == PolicyEffect::kDeny);
  CHECK(p.evaluate(query("s3:PutObject", objectArn("data", "uploads/a"))) ==
        PolicyEffect::kNone);
  CHECK(p.evaluate(query("s3:GetObject", objectArn("data", "a"))) == PolicyEffect::kNone);
}

TEST_CASE("Conditions: TLS, source addresses, listing prefixes, absent keys") {
  // PolicyQuery holds views: the resources outlive the queries.
  const std::string object = objectArn("data", "k");
  const std::string bucket = bucketArn("data");
  SECTION("Deny requests without TLS, the common guard") {
    BucketPolicy p = parsed(R"({"Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:*",
         "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"],
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]})");
    PolicyQuery q = query("s3:GetObject", object, "alice");
    CHECK(p.evaluate(q) == PolicyEffect::kDeny);
    q.secure = true;
    CHECK(p.evaluate(q) == PolicyEffect::kNone);
    CHECK_FALSE(p.isPublic());  // a Deny grants nothing
  }
  SECTION("IpAddress and NotIpAddress, v4 and v6, networks and single addresses") {
    BucketPolicy p = parsed(R"({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::data/*",
         "Condition": {"IpAddress": {"aws:SourceIp": ["192.0.2.0/25", "2001:db8::/32",
                                                      "198.51.100.9"]}}},
        {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
         "Resource": "arn:aws:s3:::data/*",
         "Condition": {"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}]})");
    CHECK_FALSE(p.isPublic());
    PolicyQuery q = query("s3:GetObject", object);
    for (auto [ip, allowed] : {std::pair{"192.0.2.7", true}, {"192.0.2.127", true},
                               {"192.0.2.128", false}, {"198.51.100.9", true},
                               {"198.51.100.10", false}, {"2001:db8:1::5", true},
                               {"2001:db9::5", false}, {"", false}}) {
      q.source_ip = ip;
      INFO(ip);
      CHECK((p.evaluate(q) == PolicyEffect::kAllow) == allowed);
    }
    PolicyQuery put = query("s3:PutObject", object);
    put.source_ip = "10.1.2.3";
    CHECK(p.evaluate(put) == PolicyEffect::kNone);
    put.source_ip = "192.0.2.7";
    CHECK(p.evaluate(put) == PolicyEffect::kDeny);
    put.source_ip = "";  // unknown: a negated operator holds for an absent key (AWS)
    CHECK(p.evaluate(put) == PolicyEffect::kDeny);
  }
  SECTION("An IPv4-mapped network is the IPv4 network it maps") {
    BucketPolicy p = parsed(R"({"Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::data/*",
         "Condition": {"IpAddress": {"aws:SourceIp": "::ffff:203.0.113.0/120"}}},
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::data/*"}]})");
    PolicyQuery q = query("s3:GetObject", object);
    for (auto [ip, denied] : {std::pair{"203.0.113.5", true}, {"203.0.114.5", false},
                              {"2001:db8::1", false}}) {
      q.source_ip = ip;
      INFO(ip);
      CHECK((p.evaluate(q) == PolicyEffect::kDeny) == denied);
    }
  }
  SECTION("s3:prefix on listings; StringLike; IfExists; Null") {
    BucketPolicy p = parsed(R"({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket",
         "Resource": "arn:aws:s3:::data",
         "Condition": {"StringLike": {"s3:prefix": ["public/*", ""]}}},
        {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucketVersions",
         "Resource": "arn:aws:s3:::data",
         "Condition": {"StringEqualsIfExists": {"s3:delimiter": "/"},
                       "Null": {"aws:username": "false"}}}]})");
    PolicyQuery q = query("s3:ListBucket", bucket);
    CHECK(p.evaluate(q) == PolicyEffect::kNone);  // no prefix: the key is absent
    q.prefix = "public/2024/";
    CHECK(p.evaluate(q) == PolicyEffect::kAllow);
    q.prefix = "";
    CHECK(p.evaluate(q) == PolicyEffect::kAllow);
    q.prefix = "private/";
    CHECK(p.evaluate(q) == PolicyEffect::kNone);
    PolicyQuery v = query("s3:ListBucketVersions", bucket, "alice");
    CHECK(p.evaluate(v) == PolicyEffect::kAllow);  // no delimiter: IfExists holds
    v.delimiter = "|";
    CHECK(p.evaluate(v) == PolicyEffect::kNone);
    v.delimiter = "/";
    CHECK(p.evaluate(v) == PolicyEffect::kAllow);
    v.principal = "";  // anonymous: aws:username is absent
    CHECK(p.evaluate(v) == PolicyEffect::kNone);
  }
  SECTION("String operators: case, negation, several values") {
    BucketPolicy p = parsed(R"({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::data/*",
         "Condition": {"StringEqualsIgnoreCase": {"aws:UserAgent": ["Loader/1", "Loader/2"]},
                       "StringNotLike": {"aws:Referer": "*.evil.example/*"}}}]})");
    PolicyQuery q = query("s3:GetObject", object);
    CHECK(p.evaluate(q) == PolicyEffect::kNone);  // no User-Agent
    q.user_agent = "loader/2";
    CHECK(p.evaluate(q) == PolicyEffect::kAllow);  // no Referer: NotLike holds
    q.referer = "https://www.evil.example/page";
    CHECK(p.evaluate(q) == PolicyEffect::kNone);
    q.referer = "https://good.example/";
    CHECK(p.evaluate(q) == PolicyEffect::kAllow);
  }
}

TEST_CASE("The documents the refusals below change one thing of are accepted") {
  parsed(R"({"Version": "2008-10-17", "Id": "x", "Statement": {"Effect": "Allow",
      "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::data"}})");
  parsed(R"({"Statement": [{"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/b"},
      "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})");
  // Actions that apply to some resource of their statement (a bucket action to the bucket,
  // an object action to its objects), or that are not judged: wildcards, actions Granary
  // does not evaluate, NotAction and NotResource.
  for (std::string_view ok : {
           R"({"Statement": [{"Effect": "Deny", "Principal": "*",
               "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::data/*"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*",
               "Action": ["s3:ListBucket", "s3:GetObject"],
               "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"]}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*",
               "Action": ["s3:ListBucket", "s3:GetObject"], "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*",
               "Action": "s3:GetObjectVersion", "Resource": "arn:aws:s3:::data/k"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*",
               "Action": "s3:Get*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Deny", "Principal": "*",
               "Action": "s3:PutObjectRetention", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Deny", "Principal": "*",
               "NotAction": "s3:GetObject", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Deny", "Principal": "*",
               "Action": "s3:GetObject", "NotResource": "arn:aws:s3:::data"}]})"}) {
    INFO(ok);
    parsed(ok);
  }
}

TEST_CASE("Reads of every object: any Deny for the action refuses, only b/* allows") {
  BucketPolicy p = parsed(R"({"Statement": [
      {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
       "Resource": "arn:aws:s3:::data/*"},
      {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/bob"},
       "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/bob/*"},
      {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/eve"},
       "Action": "s3:GetObject", "NotResource": "arn:aws:s3:::data/private/*"},
      {"Effect": "Deny", "Principal": {"AWS": "arn:aws:iam::1:user/carol"},
       "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/private/*"}]})");
  PolicyQuery q = query("s3:GetObject", "");
  q.every_object = true;
  CHECK(p.evaluate(q) == PolicyEffect::kAllow);  // anonymous: data/*
  q.principal = "carol";
  CHECK(p.evaluate(q) == PolicyEffect::kDeny);  // denied some objects: denied all
  BucketPolicy narrow = parsed(R"({"Statement": [
      {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/bob"},
       "Action": "s3:GetObject", "Resource": ["arn:aws:s3:::data/bob/*", "arn:aws:s3:::data/?"]},
      {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/eve"},
       "Action": "s3:GetObject", "NotResource": "arn:aws:s3:::data/private/*"},
      {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/dan"},
       "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/**"}]})");
  for (const char* who : {"bob", "eve"}) {
    q.principal = who;
    CHECK(narrow.evaluate(q) == PolicyEffect::kNone);  // only some objects
  }
  q.principal = "dan";
  CHECK(narrow.evaluate(q) == PolicyEffect::kAllow);
}

TEST_CASE("Null is true when any of its values holds, an unknown address never grants") {
  BucketPolicy p = parsed(R"({"Statement": [
      {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
       "Resource": "arn:aws:s3:::data/*",
       "Condition": {"Null": {"aws:username": ["false", "true"]}}},
      {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
       "Resource": "arn:aws:s3:::data/*",
       "Condition": {"NotIpAddress": {"aws:SourceIp": "203.0.113.0/24"}}}]})");
  const std::string object = objectArn("data", "k");
  PolicyQuery put = query("s3:PutObject", object, "alice");
  CHECK(p.evaluate(put) == PolicyEffect::kDeny);
  put.principal = "";
  CHECK(p.evaluate(put) == PolicyEffect::kDeny);
  PolicyQuery get = query("s3:GetObject", object);
  CHECK(p.evaluate(get) == PolicyEffect::kAllow);
  get.source_ip = "203.0.113.9";
  CHECK(p.evaluate(get) == PolicyEffect::kNone);
  get.source_ip = "";  // unknown: AWS would take NotIpAddress as true; Granary grants nothing
  CHECK(p.evaluate(get) == PolicyEffect::kNone);
}

TEST_CASE("Policies S3 refuses are MalformedPolicy") {
  for (std::string_view bad : {
           "", "not json", "[]", R"({"Statement": []})", R"({"Version": "2012-10-17"})",
           R"({"Version": "2020-01-01", "Statement": {"Effect": "Allow", "Principal": "*",
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}})",
           R"({"Statement": [{"Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Maybe", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*",
               "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "iam:*",
               "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::other/*"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::database"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "*"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": {"AWS": "alice"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "NotAction": "s3:Get*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": [],
               "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data", "Extra": 1}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data",
               "Condition": {"IpAddress": {"aws:SourceIp": "not-an-address"}}}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data",
               "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/33"}}}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data",
               "Condition": {"StringEquals": {"aws:SourceIp": "10.0.0.1"}}}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data",
               "Condition": {"Bool": {"aws:SecureTransport": "maybe"}}}]})",
           R"({"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data"}, "Unknown": 1})",
           R"({"Statement": [{"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/*"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Deny", "Principal": {"AWS": "arn:aws:iam::*:user/bob"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           // No action applies to a resource of its statement (S3: "Action does not
           // apply to any resource(s) in statement"): the "/*" forgotten, or added.
           R"({"Statement": [{"Effect": "Deny", "Principal": "*",
               "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*",
               "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::data/*"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*",
               "Action": ["s3:GetObject", "s3:PutObject"],
               "Resource": "arn:aws:s3:::data"}]})"}) {
    INFO(bad);
    CHECK(codeOf(bad) == S3ErrorCode::kMalformedPolicy);
  }
  std::string huge = R"({"Statement": [{"Effect": "Allow", "Principal": "*",
      "Action": "s3:GetObject", "Resource": [)";
  for (int i = 0; i < 1000; ++i) huge += "\"arn:aws:s3:::data/k" + std::to_string(i) + "\",";
  huge += R"("arn:aws:s3:::data/z"]}]})";
  CHECK(codeOf(huge) == S3ErrorCode::kMalformedPolicy);
}

TEST_CASE("A stored policy with a statement that applies to nothing still reads") {
  // Stored before PutBucketPolicy refused such statements: refusing it now would lock
  // every user but the root out of the bucket. Its statement matches no request.
  constexpr std::string_view kStored = R"({"Statement": [
      {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
       "Resource": "arn:aws:s3:::data/*"},
      {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
       "Resource": "arn:aws:s3:::data"}]})";
  CHECK(codeOf(kStored) == S3ErrorCode::kMalformedPolicy);
  auto stored = BucketPolicy::parse(kStored, "data");
  REQUIRE(stored.has_value());
  CHECK(stored->evaluate(query("s3:GetObject", "arn:aws:s3:::data/k")) == PolicyEffect::kAllow);
}

TEST_CASE("What Granary cannot evaluate is NotImplemented, never ignored") {
  for (std::string_view unsupported : {
           R"({"Statement": [{"Effect": "Deny", "NotPrincipal": {"AWS": "*"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": {"Service": "x.amazonaws.com"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data/${aws:username}/*"}]})",
           R"({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data",
               "Condition": {"DateGreaterThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}}]})",
           R"({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data",
               "Condition": {"StringEquals": {"aws:PrincipalOrgID": "o-123"}}}]})",
           R"({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*",
               "Resource": "arn:aws:s3:::data",
               "Condition": {"ForAnyValue:StringLike": {"s3:prefix": "a*"}}}]})",
           // Accounts and roles: valid principals for AWS, none of Granary's users.
           R"({"Statement": [{"Effect": "Allow", "Principal": {"AWS": "123456789012"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow",
               "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           R"({"Statement": [{"Effect": "Allow",
               "Principal": {"AWS": "arn:aws:iam::123456789012:role/loader"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})",
           // A user with an IAM path: no Granary user's name holds a '/'.
           R"({"Statement": [{"Effect": "Deny",
               "Principal": {"AWS": "arn:aws:iam::123456789012:user/ops/alice"},
               "Action": "s3:*", "Resource": "arn:aws:s3:::data"}]})"}) {
    INFO(unsupported);
    CHECK(codeOf(unsupported) == S3ErrorCode::kNotImplemented);
  }
  // A user with an IAM path in a policy stored before that rule: read, matching no one
  // (refused, the whole bucket would be denied to all but its owner's policy requests).
  auto stored = BucketPolicy::parse(R"({"Statement": [
      {"Effect": "Deny", "Principal": {"AWS": "arn:aws:iam::1:user/ops/alice"},
       "Action": "s3:*", "Resource": "arn:aws:s3:::data/*"},
      {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
       "Resource": "arn:aws:s3:::data/*"}]})", "data");
  REQUIRE(stored.has_value());
  CHECK(stored->evaluate(query("s3:GetObject", "arn:aws:s3:::data/k", "alice")) ==
        PolicyEffect::kAllow);
}

}  // namespace granary::gateway

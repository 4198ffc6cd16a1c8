// CORS rules on their own: the configuration's parser and writer (s3_xml.h) and how a
// browser's request is matched against the rules (cors.h). The HTTP side (PutBucketCors,
// the OPTIONS preflight, headers on other responses) is in handler_test.cc.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cors.h"
#include "s3_xml.h"

using namespace granary::gateway;
using granary::index_kv::CorsRule;

namespace {

std::string configuration(const std::string& rules) {
  return R"(<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)" + rules +
         "</CORSConfiguration>";
}

}  // namespace

TEST_CASE("CORS wildcards: one star stands for any run of characters") {
  CHECK(corsWildcardMatch("*", "", false));
  CHECK(corsWildcardMatch("*", "https://anything.example", false));
  CHECK(corsWildcardMatch("https://*.example.com", "https://app.example.com", false));
  CHECK(corsWildcardMatch("https://*.example.com", "https://a.b.example.com", false));
  CHECK_FALSE(corsWildcardMatch("https://*.example.com", "https://example.com", false));
  CHECK_FALSE(corsWildcardMatch("https://*.example.com", "http://app.example.com", false));
  // The head and tail may not overlap: "ab*ba" needs at least four characters.
  CHECK_FALSE(corsWildcardMatch("ab*ba", "aba", false));
  CHECK(corsWildcardMatch("ab*ba", "abba", false));
  CHECK(corsWildcardMatch("http://localhost:3000", "http://localhost:3000", false));
  CHECK_FALSE(corsWildcardMatch("http://localhost:3000", "http://localhost:30001", false));
  // Origins compare exactly; header names ignore ASCII case.
  CHECK_FALSE(corsWildcardMatch("https://App.example.com", "https://app.example.com", false));
  CHECK(corsWildcardMatch("X-Amz-*", "x-amz-date", true));
  CHECK(corsWildcardMatch("Content-Type", "content-type", true));
  CHECK_FALSE(corsWildcardMatch("x-amz-*", "content-type", true));
}

TEST_CASE("CORS: a preflight's requested headers are trimmed, lower-cased names") {
  CHECK(corsRequestHeaders("") == std::vector<std::string>{});
  CHECK(corsRequestHeaders("Content-Type") == std::vector<std::string>{"content-type"});
  CHECK(corsRequestHeaders(" X-Amz-Date ,authorization,, x-amz-content-sha256 ") ==
        std::vector<std::string>{"x-amz-date", "authorization", "x-amz-content-sha256"});
}

TEST_CASE("CORS: the first rule that allows origin, method and every header wins") {
  const std::vector<CorsRule> rules = {
      CorsRule{"uploads", {"https://*.example.com"}, {"PUT", "POST"}, {"x-amz-*", "content-type"},
               {}, std::nullopt},
      CorsRule{"reads", {"*"}, {"GET", "HEAD"}, {}, {"ETag"}, 600},
  };
  const std::vector<std::string> none;
  CHECK(matchCorsRule(rules, "https://app.example.com", "PUT", none) == &rules[0]);
  CHECK(matchCorsRule(rules, "https://app.example.com", "PUT",
                      {"x-amz-date", "content-type"}) == &rules[0]);
  // A header no pattern allows: the rule does not match, and the second has no PUT.
  CHECK(matchCorsRule(rules, "https://app.example.com", "PUT", {"authorization"}) == nullptr);
  CHECK(matchCorsRule(rules, "https://evil.example.org", "PUT", none) == nullptr);
  CHECK(matchCorsRule(rules, "https://evil.example.org", "GET", none) == &rules[1]);
  // A rule without AllowedHeader allows a request that asks for none, only.
  CHECK(matchCorsRule(rules, "https://evil.example.org", "GET", {"range"}) == nullptr);
  CHECK(matchCorsRule(rules, "https://app.example.com", "DELETE", none) == nullptr);
  // Methods compare exactly (browsers send them upper-case).
  CHECK(matchCorsRule(rules, "https://app.example.com", "put", none) == nullptr);
  CHECK(matchCorsRule({}, "https://app.example.com", "GET", none) == nullptr);
}

TEST_CASE("CORS: the headers of an allowed request") {
  const CorsRule named{"", {"https://app.example.com"}, {"GET", "PUT"}, {"*"},
                       {"ETag", "x-amz-request-id"}, 3000};
  const HeaderList h = corsAllowHeaders(named, "https://app.example.com",
                                        {"content-type", "x-amz-date"});
  CHECK(h == HeaderList{{"Access-Control-Allow-Origin", "https://app.example.com"},
                        {"Access-Control-Allow-Credentials", "true"},
                        {"Access-Control-Allow-Methods", "GET, PUT"},
                        {"Access-Control-Allow-Headers", "content-type, x-amz-date"},
                        {"Access-Control-Expose-Headers", "ETag, x-amz-request-id"},
                        {"Access-Control-Max-Age", "3000"}});
  // Any origin: "*", and no credentials (browsers refuse "*" with credentials).
  const CorsRule any{"", {"*"}, {"GET"}, {}, {}, std::nullopt};
  CHECK(corsAllowHeaders(any, "https://x.test", {}) ==
        HeaderList{{"Access-Control-Allow-Origin", "*"},
                   {"Access-Control-Allow-Methods", "GET"}});
}

TEST_CASE("CORS configuration: parsed, written back, and refused as S3 refuses it") {
  const std::string body = configuration(
      "<CORSRule><ID>web</ID><AllowedHeader>*</AllowedHeader>"
      "<AllowedMethod>PUT</AllowedMethod><AllowedMethod>GET</AllowedMethod>"
      "<AllowedOrigin>https://*.example.com</AllowedOrigin>"
      "<AllowedOrigin>http://localhost:3000</AllowedOrigin>"
      "<ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>3000</MaxAgeSeconds></CORSRule>"
      "<CORSRule><AllowedMethod>HEAD</AllowedMethod><AllowedOrigin>*</AllowedOrigin>"
      "</CORSRule>");
  auto rules = parseCorsConfiguration(body);
  REQUIRE(rules.has_value());
  REQUIRE(rules->size() == 2);
  CHECK((*rules)[0] == CorsRule{"web", {"https://*.example.com", "http://localhost:3000"},
                                {"PUT", "GET"}, {"*"}, {"ETag"}, 3000});
  CHECK((*rules)[1] == CorsRule{"", {"*"}, {"HEAD"}, {}, {}, std::nullopt});
  // What GetBucketCors answers parses back to the same rules.
  auto again = parseCorsConfiguration(corsConfigurationXml(*rules));
  REQUIRE(again.has_value());
  CHECK(*again == *rules);
  // Pretty-printed XML: the whitespace around each value is not part of it.
  auto pretty = parseCorsConfiguration(configuration(
      "<CORSRule>\n  <AllowedOrigin>\n    https://a.test\n  </AllowedOrigin>\n"
      "  <AllowedMethod> GET </AllowedMethod>\n  <AllowedHeader>\tx-amz-date </AllowedHeader>\n"
      "  <ExposeHeader> ETag\n</ExposeHeader>\n</CORSRule>"));
  REQUIRE(pretty.has_value());
  CHECK((*pretty)[0] ==
        CorsRule{"", {"https://a.test"}, {"GET"}, {"x-amz-date"}, {"ETag"}, std::nullopt});

  struct Bad {
    std::string body;
    S3ErrorCode code;
  };
  const std::string ok_rule =
      "<CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*</AllowedOrigin></CORSRule>";
  std::string too_many;
  for (size_t i = 0; i <= kMaxCorsRules; ++i) too_many += ok_rule;
  const Bad bad[] = {
      {"<CORSConfiguration>", S3ErrorCode::kMalformedXML},
      {configuration(""), S3ErrorCode::kMalformedXML},
      {"<Other>" + ok_rule + "</Other>", S3ErrorCode::kMalformedXML},
      {configuration("<Rule/>"), S3ErrorCode::kMalformedXML},
      {configuration("<CORSRule><AllowedOrigin>*</AllowedOrigin></CORSRule>"),
       S3ErrorCode::kMalformedXML},
      {configuration("<CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule>"),
       S3ErrorCode::kMalformedXML},
      {configuration("<CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*"
                     "</AllowedOrigin><Color>red</Color></CORSRule>"),
       S3ErrorCode::kMalformedXML},
      {configuration("<CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*"
                     "</AllowedOrigin><MaxAgeSeconds>-1</MaxAgeSeconds></CORSRule>"),
       S3ErrorCode::kMalformedXML},
      {configuration("<CORSRule><AllowedMethod>PATCH</AllowedMethod><AllowedOrigin>*"
                     "</AllowedOrigin></CORSRule>"),
       S3ErrorCode::kInvalidRequest},
      {configuration("<CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>https://*.*.com"
                     "</AllowedOrigin></CORSRule>"),
       S3ErrorCode::kInvalidRequest},
      {configuration("<CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*"
                     "</AllowedOrigin><AllowedHeader>x-*-*</AllowedHeader></CORSRule>"),
       S3ErrorCode::kInvalidRequest},
      {configuration("<CORSRule><ID>" + std::string(256, 'i') +
                     "</ID><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*</AllowedOrigin>"
                     "</CORSRule>"),
       S3ErrorCode::kInvalidRequest},
      {configuration(too_many), S3ErrorCode::kInvalidRequest},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.body.substr(0, 200));
    auto r = parseCorsConfiguration(b.body);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == b.code);
  }
  // 100 rules are allowed.
  std::string hundred;
  for (size_t i = 0; i < kMaxCorsRules; ++i) hundred += ok_rule;
  CHECK(parseCorsConfiguration(configuration(hundred)).value().size() == kMaxCorsRules);
}

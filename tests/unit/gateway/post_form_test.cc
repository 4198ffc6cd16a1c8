// POST Object forms (src/gateway/post_form.h): the multipart framing up to the file, the
// form's signature fields and the POST policy.
#include "post_form.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "sigv4.h"

using namespace granary::gateway;

namespace {

const std::string kForm =
    "ignored preamble\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"Key\"\r\n"
    "\r\n"
    "uploads/${filename}\r\n"
    "--XyZ   \r\n"  // transport padding after a delimiter
    "content-disposition: form-data; name=\"x-amz-meta-Note\"\r\n"
    "Content-Type: text/plain\r\n"
    "\r\n"
    "two\r\nlines\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"C:\\Users\\me\\pic.jpg\"\r\n"
    "Content-Type: image/jpeg\r\n"
    "\r\n"
    "JPEG BYTES\r\n"
    "--XyZ--\r\n";

S3ErrorCode codeOf(const S3Result<std::optional<FormHead>>& r) {
  REQUIRE_FALSE(r.has_value());
  return r.error().code;
}

}  // namespace

TEST_CASE("formBoundary reads multipart/form-data's boundary, quoted or not") {
  CHECK(formBoundary("multipart/form-data; boundary=XyZ") == "XyZ");
  CHECK(formBoundary("Multipart/Form-Data;boundary=\"a b;c\"") == "a b;c");
  CHECK(formBoundary("multipart/form-data; charset=utf-8; boundary=----x") == "----x");
  CHECK_FALSE(formBoundary("multipart/form-data"));
  CHECK_FALSE(formBoundary("multipart/mixed; boundary=x"));
  CHECK_FALSE(formBoundary("application/octet-stream"));
  CHECK_FALSE(formBoundary("multipart/form-data; boundary="));
  CHECK_FALSE(formBoundary("multipart/form-data; boundary=" + std::string(71, 'b')));
  CHECK_FALSE(formBoundary("multipart/form-data; boundary=\"unclosed"));
}

TEST_CASE("parseFormHead stops at the file's first byte, whatever the input's split") {
  const size_t data_at = kForm.find("JPEG BYTES");
  const auto check = [&](const FormHead& head) {
    CHECK(head.data_offset == data_at);
    CHECK(head.filename == "pic.jpg");  // the last component of a Windows path, sent raw
    REQUIRE(head.fields.size() == 2);
    CHECK(head.field("key") == "uploads/${filename}");  // names lower-cased
    CHECK(head.field("x-amz-meta-note") == "two\r\nlines");
    CHECK_FALSE(head.field("file"));
  };
  // Any prefix that ends before the file's headers are complete asks for more; from there
  // on the answer is the same: from a fresh parser, and from one parser fed a byte more
  // each time (as a slow client sends it).
  FormHeadParser fed("XyZ");
  for (size_t n = 0; n <= kForm.size(); ++n) {
    CAPTURE(n);
    auto r = parseFormHead(std::string_view(kForm).substr(0, n), "XyZ", false);
    auto resumed = fed.parse(std::string_view(kForm).substr(0, n), false);
    REQUIRE(r.has_value());
    REQUIRE(resumed.has_value());
    if (n < data_at) {
      CHECK_FALSE(r->has_value());
      CHECK_FALSE(resumed->has_value());
      continue;
    }
    REQUIRE(r->has_value());
    REQUIRE(resumed->has_value());
    check(**r);
    check(**resumed);
  }
}

TEST_CASE("parseFormHead refuses forms S3 refuses") {
  const auto parse = [](const std::string& body) {
    return parseFormHead(body, "b", /*complete=*/true);
  };
  const std::string file = "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx";
  CHECK(parse(file).has_value());
  // The form ends without a file.
  CHECK(codeOf(parse("--b\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\nv\r\n--b--\r\n")) ==
        S3ErrorCode::kIncorrectNumberOfFilesInPostRequest);
  // A field twice (names compared without case).
  CHECK(codeOf(parse("--b\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\n1\r\n"
                     "--b\r\nContent-Disposition: form-data; name=\"K\"\r\n\r\n2\r\n" +
                     file)) == S3ErrorCode::kInvalidArgument);
  // Framing: no name, no disposition, another disposition, a header without a colon,
  // text after a delimiter, an unclosed quote, the body ending early, no delimiter at all.
  for (const std::string& bad : std::vector<std::string>{
           "--b\r\nContent-Disposition: form-data\r\n\r\nv\r\n" + file,
           "--b\r\nContent-Type: text/plain\r\n\r\nv\r\n" + file,
           "--b\r\nContent-Disposition: attachment; name=\"k\"\r\n\r\nv\r\n" + file,
           "--b\r\nContent-Disposition form-data; name=\"k\"\r\n\r\nv\r\n" + file,
           "--bX\r\n" + file.substr(5),
           "--b\r\nContent-Disposition: form-data; name=\"k\r\n\r\nv\r\n" + file,
           "--b\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\nv",
           std::string("no form here"),
           std::string()}) {
    CAPTURE(bad);
    CHECK(codeOf(parse(bad)) == S3ErrorCode::kMalformedPOSTRequest);
  }
}

TEST_CASE("parsePostAuth reads SigV4 and SigV2 form signatures") {
  FormHead v4;
  v4.fields = {{"x-amz-algorithm", "AWS4-HMAC-SHA256"},
               {"x-amz-credential", "AKID/20240501/eu-west-1/s3/aws4_request"},
               {"x-amz-date", "20240501T101010Z"},
               {"x-amz-signature", std::string(64, 'A')},
               {"policy", "e30="}};
  auto auth = parsePostAuth(v4);
  REQUIRE(auth.has_value());
  REQUIRE(auth->has_value());
  CHECK((*auth)->version == 4);
  CHECK((*auth)->access_key == "AKID");
  CHECK((*auth)->region == "eu-west-1");
  CHECK((*auth)->signature == std::string(64, 'a'));
  const auto refused = [](FormHead form, std::string_view name, std::string value) {
    bool found = false;
    for (auto& [n, v] : form.fields) {
      if (n == name) {
        v = std::move(value);
        found = true;
      }
    }
    if (!found) form.fields.emplace_back(name, std::move(value));
    auto r = parsePostAuth(form);
    return !r.has_value() && r.error().code == S3ErrorCode::kInvalidArgument;
  };
  CHECK(refused(v4, "x-amz-algorithm", "AWS4-ECDSA-P256-SHA256"));
  CHECK(refused(v4, "x-amz-credential", "AKID/20240501/eu-west-1/sts/aws4_request"));
  CHECK(refused(v4, "x-amz-credential", "AKID/2024051/eu-west-1/s3/aws4_request"));
  CHECK(refused(v4, "x-amz-date", "20240502T101010Z"));  // not the credential's day
  CHECK(refused(v4, "x-amz-date", "2024-05-01T10:10:10Z"));
  FormHead no_signature = v4;
  no_signature.fields.erase(no_signature.fields.begin() + 3);
  CHECK(!parsePostAuth(no_signature).has_value());

  FormHead v2;
  v2.fields = {{"awsaccesskeyid", "AKID"}, {"signature", "c2ln"}, {"policy", "e30="}};
  auth = parsePostAuth(v2);
  REQUIRE(auth.has_value());
  REQUIRE(auth->has_value());
  CHECK((*auth)->version == 2);
  CHECK((*auth)->signature == "c2ln");
  // Anonymous: no policy, no signature.
  FormHead anonymous;
  anonymous.fields = {{"key", "k"}};
  auth = parsePostAuth(anonymous);
  REQUIRE(auth.has_value());
  CHECK_FALSE(auth->has_value());
  // A policy nobody signed, a signature without its key id.
  anonymous.fields.emplace_back("policy", "e30=");
  CHECK_FALSE(parsePostAuth(anonymous).has_value());
  CHECK_FALSE(parsePostAuth(FormHead{{{"signature", "x"}}, "", 0}).has_value());
}

TEST_CASE("verifyPostSignature: the policy's HMAC with the scope's signing key, or SigV2's") {
  SigningKeyCache keys;
  const std::string policy = "eyJleHBpcmF0aW9uIjogIjIwMjQtMDUtMDJUMDA6MDA6MDBaIn0=";
  AuthInfo v4;
  v4.version = 4;
  v4.date = "20240501";
  v4.region = "us-east-1";
  v4.service = "s3";
  v4.signature = hmacSha256Hex(deriveSigningKey("secret", "20240501", "us-east-1", "s3"), policy);
  CHECK(verifyPostSignature(v4, policy, "secret", keys).has_value());
  auto wrong = verifyPostSignature(v4, policy, "other", keys);
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().code == S3ErrorCode::kSignatureDoesNotMatch);
  CHECK_FALSE(verifyPostSignature(v4, policy + "x", "secret", keys).has_value());
  v4.region = "eu-west-1";  // the scope is signed too
  CHECK_FALSE(verifyPostSignature(v4, policy, "secret", keys).has_value());
  AuthInfo v2;
  v2.version = 2;
  v2.signature = signV2("secret", policy);
  CHECK(verifyPostSignature(v2, policy, "secret", keys).has_value());
  CHECK_FALSE(verifyPostSignature(v2, policy, "other", keys).has_value());
  v2.signature.clear();  // an empty field matches nothing (were signing to fail: "" too)
  CHECK_FALSE(verifyPostSignature(v2, policy, "secret", keys).has_value());
}

TEST_CASE("parsePostPolicy reads S3's condition forms and refuses others") {
  auto policy = parsePostPolicy(R"({"expiration": "2024-05-02T00:00:00.000Z", "conditions": [
      {"bucket": "photos"}, ["starts-with", "$Key", "user/"], ["eq", "$acl", "private"],
      ["content-length-range", 1, "1048576"], ["EQ", "$x-amz-meta-a", ""]]})");
  REQUIRE(policy.has_value());
  CHECK(policy->expiration == 1714608000);
  REQUIRE(policy->conditions.size() == 5);
  CHECK(policy->conditions[0].field == "bucket");
  CHECK(policy->conditions[1].kind == PostPolicyCondition::Kind::kStartsWith);
  CHECK(policy->conditions[1].field == "key");
  CHECK(policy->conditions[1].value == "user/");
  CHECK(policy->conditions[3].kind == PostPolicyCondition::Kind::kLengthRange);
  CHECK(policy->conditions[3].max == 1048576);
  CHECK(policy->conditions[4].kind == PostPolicyCondition::Kind::kEq);
  for (const char* bad : {
           "", "[]", "not json", R"({"conditions": []})",
           R"({"expiration": "tomorrow", "conditions": []})",
           R"({"expiration": "2024-05-02T00:00:00Z"})",
           R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [{"a": "1", "b": "2"}]})",
           R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [{"a": 1}]})",
           R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [["eq", "key", "a"]]})",
           R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [["ends-with", "$k", "a"]]})",
           R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [["eq", "$k"]]})",
           R"({"expiration": "2024-05-02T00:00:00Z",
               "conditions": [["content-length-range", 10, 1]]})",
           R"({"expiration": "2024-05-02T00:00:00Z",
               "conditions": [["content-length-range", -1, 1]]})",
           R"({"expiration": "2024-05-02T00:00:00Z", "conditions": ["eq"]})"}) {
    CAPTURE(bad);
    auto r = parsePostPolicy(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == S3ErrorCode::kInvalidPolicyDocument);
  }
  // A condition nested 200,000 deep: refused, never written out level by level (a
  // recursion that deep overflows a thread's stack).
  const std::string deep = R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [["eq", )" +
                           std::string(200'000, '[') + std::string(200'000, ']') + "]]}";
  auto nested = parsePostPolicy(deep);
  REQUIRE_FALSE(nested.has_value());
  CHECK(nested.error().code == S3ErrorCode::kInvalidPolicyDocument);
}

TEST_CASE("checkPostPolicy: expiry, every condition, and no field left unnamed") {
  auto policy = parsePostPolicy(R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [
      {"bucket": "photos"}, ["starts-with", "$key", "user/"], {"x-amz-date": "d"},
      ["content-length-range", 10, 100], ["content-length-range", 0, 50],
      ["starts-with", "$x-amz-meta-tag", ""]]})");
  REQUIRE(policy.has_value());
  const FormFields fields = {{"key", "user/a.jpg"}, {"x-amz-date", "d"},
                             {"policy", "p"}, {"x-amz-signature", "s"},
                             {"x-ignore-me", "1"}};
  const int64_t before = 1714607999;
  auto range = checkPostPolicy(*policy, fields, "photos", before);
  REQUIRE(range.has_value());
  CHECK(range->min == 10);  // the ranges' intersection
  CHECK(range->max == 50);
  const auto denied = [&](const FormFields& f, std::string_view bucket, int64_t now) {
    auto r = checkPostPolicy(*policy, f, bucket, now);
    if (r.has_value()) return std::string();
    CHECK(r.error().code == S3ErrorCode::kAccessDenied);
    return r.error().message;
  };
  CHECK(denied(fields, "photos", 1714608000) == "Invalid according to Policy: Policy expired.");
  CHECK(denied(fields, "other", before).find("Policy Condition failed") != std::string::npos);
  // starts-with on Content-Type holds for every type of a list, or not at all.
  auto images = parsePostPolicy(R"({"expiration": "2024-05-02T00:00:00Z", "conditions": [
      ["starts-with", "$Content-Type", "image/"]]})");
  REQUIRE(images.has_value());
  for (const auto& [type, ok] : std::vector<std::pair<std::string, bool>>{
           {"image/png", true}, {"image/png, image/jpeg", true}, {"image/png,text/html", false},
           {"image/png, text/html", false}, {"text/html", false}, {"", false}}) {
    CAPTURE(type);
    CHECK(checkPostPolicy(*images, {{"content-type", type}}, "photos", before).has_value() ==
          ok);
  }
  FormFields f = fields;
  f[0].second = "admin/a.jpg";
  CHECK(denied(f, "photos", before).find("\"$key\"") != std::string::npos);
  f = fields;
  f.emplace_back("acl", "public-read");
  CHECK(denied(f, "photos", before) == "Invalid according to Policy: Extra input fields: acl");
  f = fields;
  f.erase(f.begin() + 1);  // a condition on a field not sent: its value is ""
  CHECK_FALSE(denied(f, "photos", before).empty());
  f = fields;
  // A bucket field is what the conditions see (postObject refuses one that is not the
  // bucket posted to).
  f.emplace_back("bucket", "photos");
  CHECK(denied(f, "elsewhere", before).empty());
}

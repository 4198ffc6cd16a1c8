// SigV4 against the examples AWS publishes in the S3 API reference:
//  - "Examples: Signature Calculations in AWS Signature Version 4" (sig-v4-header-based-auth):
//    GET Object with Range, PUT Object, GET Bucket Lifecycle, GET Bucket (List Objects);
//  - "Authenticating Requests: Using Query Parameters" (sigv4-query-string-auth): presigned GET;
//  - the seed requests of "Transferring Payload in Multiple Chunks" (sigv4-streaming) and
//    "Including Trailing Headers" (sigv4-streaming-trailers).
#include "sigv4.h"

#include <catch2/catch.hpp>

#include "granary/common/hex.h"
#include "uri.h"

namespace granary::gateway {
namespace {

constexpr std::string_view kAccessKey = "AKIAIOSFODNN7EXAMPLE";
constexpr std::string_view kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr int64_t kExampleTime = 1369353600;  // 2013-05-24T00:00:00Z
constexpr std::string_view kEmptyHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr std::string_view kCredentialPrefix =
    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,";

struct Request {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;

  HttpRequestView view() const { return HttpRequestView{method, target, headers, {}}; }
  void set(const std::string& name, const std::string& value) {
    for (auto& [n, v] : headers) {
      if (n == name) {
        v = value;
        return;
      }
    }
    headers.emplace_back(name, value);
  }
};

AuthInfo parsed(const Request& r) {
  auto auth = parseAuth(r.view());
  REQUIRE(auth.has_value());
  REQUIRE(auth->has_value());
  return **auth;
}

S3ErrorCode parseError(const Request& r) {
  auto auth = parseAuth(r.view());
  REQUIRE_FALSE(auth.has_value());
  return auth.error().code;
}

std::string signatureOf(const Request& r, std::string_view secret = kSecret) {
  AuthInfo auth = parsed(r);
  return hmacSha256Hex(deriveSigningKey(secret, auth.date, auth.region, auth.service),
                       stringToSign(auth, canonicalRequest(r.view(), auth)));
}

S3Result<void> verifyAt(const Request& r, int64_t now, std::string_view secret = kSecret) {
  SigningKeyCache keys;
  AuthInfo auth = parsed(r);
  return verify(r.view(), auth, secret, now, keys);
}

Request getObjectExample() {
  return {
      "GET",
      "/test.txt",
      {{"host", "examplebucket.s3.amazonaws.com"},
       {"range", "bytes=0-9"},
       {"x-amz-content-sha256", std::string(kEmptyHash)},
       {"x-amz-date", "20130524T000000Z"},
       {"authorization", std::string(kCredentialPrefix) +
                             "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature="
                             "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"}}};
}

Request putObjectExample(std::string target = "/test%24file.text") {
  return {
      "PUT",
      std::move(target),
      {{"host", "examplebucket.s3.amazonaws.com"},
       {"date", "Fri, 24 May 2013 00:00:00 GMT"},
       {"x-amz-date", "20130524T000000Z"},
       {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
       {"x-amz-content-sha256", "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"},
       {"authorization",
        std::string(kCredentialPrefix) +
            "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
            "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"}}};
}

Request bucketGetExample(std::string target, std::string signature) {
  return {"GET",
          std::move(target),
          {{"host", "examplebucket.s3.amazonaws.com"},
           {"x-amz-date", "20130524T000000Z"},
           {"x-amz-content-sha256", std::string(kEmptyHash)},
           {"authorization", std::string(kCredentialPrefix) +
                                 "SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
                                 "Signature=" +
                                 signature}}};
}

constexpr std::string_view kPresignedQuery =
    "X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

Request presignedExample() {
  return {"GET",
          "/test.txt?" + std::string(kPresignedQuery),
          {{"host", "examplebucket.s3.amazonaws.com"}}};
}

}  // namespace

TEST_CASE("SigV4 derives the signing key of AWS's published key-derivation example") {
  // AWS General Reference, "Examples of how to derive a signing key for Signature Version 4".
  auto key =
      deriveSigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
  CHECK(toHex(key) == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
  CHECK(sha256Hex("") == kEmptyHash);
  CHECK(sha256Hex("Welcome to Amazon S3.") ==
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

TEST_CASE("SigV4 reproduces AWS's GET Object example with a Range header") {
  Request r = getObjectExample();
  AuthInfo auth = parsed(r);
  CHECK_FALSE(auth.presigned);
  CHECK(auth.access_key == kAccessKey);
  CHECK(auth.date == "20130524");
  CHECK(auth.region == "us-east-1");
  CHECK(auth.service == "s3");
  CHECK(auth.scope() == "20130524/us-east-1/s3/aws4_request");
  CHECK(auth.signed_headers ==
        std::vector<std::string>{"host", "range", "x-amz-content-sha256", "x-amz-date"});
  CHECK(auth.amz_date == "20130524T000000Z");
  CHECK(auth.payload_hash == kEmptyHash);

  std::string canonical = canonicalRequest(r.view(), auth);
  CHECK(canonical ==
        "GET\n/test.txt\n\n"
        "host:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\n"
        "host;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(stringToSign(auth, canonical) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  CHECK(signatureOf(r) == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK(verifyAt(r, kExampleTime).has_value());
}

TEST_CASE("SigV4 reproduces AWS's PUT Object example with a '$' in the key") {
  Request r = putObjectExample();
  AuthInfo auth = parsed(r);
  std::string canonical = canonicalRequest(r.view(), auth);
  CHECK(canonical ==
        "PUT\n/test%24file.text\n\n"
        "date:Fri, 24 May 2013 00:00:00 GMT\nhost:examplebucket.s3.amazonaws.com\n"
        "x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
        "x-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  CHECK(stringToSign(auth, canonical) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  CHECK(signatureOf(r) == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  CHECK(verifyAt(r, kExampleTime).has_value());
}

TEST_CASE("SigV4 verifies a path sent with an unescaped '$' against the AWS-encoded form") {
  // The client signed "/test%24file.text" but put "/test$file.text" on the wire.
  CHECK(verifyAt(putObjectExample("/test$file.text"), kExampleTime).has_value());
}

TEST_CASE("SigV4 reproduces AWS's GET Bucket Lifecycle example (a value-less parameter)") {
  Request r = bucketGetExample("/?lifecycle",
                               "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  AuthInfo auth = parsed(r);
  std::string canonical = canonicalRequest(r.view(), auth);
  CHECK(canonical ==
        "GET\n/\nlifecycle=\n"
        "host:examplebucket.s3.amazonaws.com\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\n"
        "host;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(stringToSign(auth, canonical) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  CHECK(signatureOf(r) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  CHECK(verifyAt(r, kExampleTime).has_value());
  // The example's request line is "GET ?lifecycle": an empty path canonicalises to "/".
  r.target = "?lifecycle";
  CHECK(verifyAt(r, kExampleTime).has_value());
  r.target = "/?lifecycle=";
  CHECK(verifyAt(r, kExampleTime).has_value());
}

TEST_CASE("SigV4 reproduces AWS's GET Bucket (List Objects) example in any parameter order") {
  const std::string sig = "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7";
  Request r = bucketGetExample("/?max-keys=2&prefix=J", sig);
  AuthInfo auth = parsed(r);
  std::string canonical = canonicalRequest(r.view(), auth);
  CHECK(canonical ==
        "GET\n/\nmax-keys=2&prefix=J\n"
        "host:examplebucket.s3.amazonaws.com\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\n"
        "host;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(stringToSign(auth, canonical) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  CHECK(signatureOf(r) == sig);
  CHECK(verifyAt(r, kExampleTime).has_value());
  CHECK(verifyAt(bucketGetExample("/?prefix=J&max-keys=2", sig), kExampleTime).has_value());
  CHECK(verifyAt(bucketGetExample("/?prefix=%4A&max-keys=2", sig), kExampleTime).has_value());
}

TEST_CASE("SigV4 reads '+' in the query as the router does: a space, never a signed '+'") {
  // Signed as "a%2Bb" ('+'), sent as "a+b": the handler would read "a b", so the
  // signature must not match; "a+b" signs as "a%20b" does.
  auto canonical = [](const char* target) {
    Request r = bucketGetExample(target, std::string(64, '0'));
    return canonicalRequest(r.view(), parsed(r));
  };
  CHECK(canonical("/?prefix=a+b") != canonical("/?prefix=a%2Bb"));
  CHECK(canonical("/?prefix=a+b") == canonical("/?prefix=a%20b"));
  CHECK(canonical("/?pre+fix=a") == canonical("/?pre%20fix=a"));
}

TEST_CASE("SigV4 reproduces AWS's presigned GET example and enforces its expiry") {
  Request r = presignedExample();
  AuthInfo auth = parsed(r);
  CHECK(auth.presigned);
  CHECK(auth.access_key == kAccessKey);
  CHECK(auth.scope() == "20130524/us-east-1/s3/aws4_request");
  CHECK(auth.expires_seconds == 86400);
  CHECK(auth.payload_hash == "UNSIGNED-PAYLOAD");
  CHECK(auth.signed_headers == std::vector<std::string>{"host"});
  std::string canonical = canonicalRequest(r.view(), auth);
  CHECK(canonical ==
        "GET\n/test.txt\n"
        "X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\n"
        "host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD");
  CHECK(stringToSign(auth, canonical) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04");
  CHECK(signatureOf(r) == "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  CHECK(verifyAt(r, kExampleTime).has_value());
  CHECK(verifyAt(r, kExampleTime + 86400).has_value());

  auto expired = verifyAt(r, kExampleTime + 86401);
  REQUIRE_FALSE(expired.has_value());
  CHECK(expired.error().code == S3ErrorCode::kAccessDenied);
  CHECK(expired.error().message == "Request has expired");

  auto early = verifyAt(r, kExampleTime - 3600);
  REQUIRE_FALSE(early.has_value());
  CHECK(early.error().code == S3ErrorCode::kAccessDenied);
}

TEST_CASE("SigV4 reproduces the seed signatures of AWS's chunked-upload examples") {
  Request r{"PUT",
            "/examplebucket/chunkObject.txt",
            {{"host", "s3.amazonaws.com"},
             {"x-amz-date", "20130524T000000Z"},
             {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
             {"x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"},
             {"content-encoding", "aws-chunked"},
             {"x-amz-decoded-content-length", "66560"},
             {"content-length", "66824"},
             {"authorization",
              std::string(kCredentialPrefix) +
                  "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;"
                  "x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature="
                  "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"}}};
  AuthInfo auth = parsed(r);
  CHECK(auth.payload_hash == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD");
  std::string canonical = canonicalRequest(r.view(), auth);
  CHECK(canonical ==
        "PUT\n/examplebucket/chunkObject.txt\n\n"
        "content-encoding:aws-chunked\ncontent-length:66824\nhost:s3.amazonaws.com\n"
        "x-amz-content-sha256:STREAMING-AWS4-HMAC-SHA256-PAYLOAD\n"
        "x-amz-date:20130524T000000Z\nx-amz-decoded-content-length:66560\n"
        "x-amz-storage-class:REDUCED_REDUNDANCY\n\n"
        "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class\n"
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD");
  CHECK(stringToSign(auth, canonical) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "cee3fed04b70f867d036f722359b0b1f2f0e5dc0efadbc082b76c4c60e316455");
  CHECK(signatureOf(r) == "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
  CHECK(verifyAt(r, kExampleTime).has_value());

  // The trailing-header variant signs x-amz-trailer and not content-length.
  Request t{"PUT",
            "/examplebucket/chunkObject.txt",
            {{"host", "s3.amazonaws.com"},
             {"x-amz-date", "20130524T000000Z"},
             {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
             {"x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"},
             {"content-encoding", "aws-chunked"},
             {"x-amz-decoded-content-length", "66560"},
             {"x-amz-trailer", "x-amz-checksum-crc32c"},
             {"content-length", "66824"},
             {"authorization",
              std::string(kCredentialPrefix) +
                  "SignedHeaders=content-encoding;host;x-amz-content-sha256;x-amz-date;"
                  "x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer,Signature="
                  "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"}}};
  AuthInfo tauth = parsed(t);
  CHECK(stringToSign(tauth, canonicalRequest(t.view(), tauth)) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "44d48b8c2f70eae815a0198cc73d7a546a73a93359c070abbaa5e6c7de112559");
  CHECK(signatureOf(t) == "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e");
  CHECK(verifyAt(t, kExampleTime).has_value());
}

TEST_CASE("SigV4 rejects a modified header, query, method or secret with SignatureDoesNotMatch") {
  auto expectMismatch = [](const Request& r, std::string_view secret = kSecret) {
    auto v = verifyAt(r, kExampleTime, secret);
    REQUIRE_FALSE(v.has_value());
    CHECK(v.error().code == S3ErrorCode::kSignatureDoesNotMatch);
  };
  Request r = getObjectExample();
  r.set("range", "bytes=0-10");
  expectMismatch(r);
  r = getObjectExample();
  r.method = "HEAD";
  expectMismatch(r);
  r = getObjectExample();
  r.target = "/test.txt?versionId=1";
  expectMismatch(r);
  r = getObjectExample();
  r.target = "/Test.txt";
  expectMismatch(r);
  expectMismatch(getObjectExample(), "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ");
  Request p = presignedExample();
  p.target += "&extra=1";
  expectMismatch(p);
  // Folding spaces and trimming does not change the canonical value.
  r = getObjectExample();
  r.set("range", "  bytes=0-9 ");
  CHECK(verifyAt(r, kExampleTime).has_value());
  r.set("range", "\tbytes=0-9\t");
  CHECK(verifyAt(r, kExampleTime).has_value());
  // Inside a value, a run of tabs and spaces is one space, as the SDKs sign it.
  Request tabbed = getObjectExample();
  AuthInfo auth = parsed(tabbed);
  auth.signed_headers.push_back("x-amz-meta-a");
  tabbed.set("x-amz-meta-a", "x y");
  const std::string canonical = canonicalRequest(tabbed.view(), auth);
  CHECK(canonical.find("\nx-amz-meta-a:x y\n") != std::string::npos);
  tabbed.set("x-amz-meta-a", "x\t \ty");
  CHECK(canonicalRequest(tabbed.view(), auth) == canonical);
}

TEST_CASE("SigV4 verifies a tab inside a signed value folded (botocore, JS) or kept (Go)") {
  // The GET Object example with a signed x-amz-meta-a holding a tab, signed both ways.
  for (const bool folded : {true, false}) {
    CAPTURE(folded);
    Request r = getObjectExample();
    r.set("x-amz-meta-a", "x\ty");
    std::string& authorization = r.headers[4].second;
    REQUIRE(r.headers[4].first == "authorization");
    const size_t at = authorization.find("x-amz-date");
    REQUIRE(at != std::string::npos);
    authorization.insert(at + std::string_view("x-amz-date").size(), ";x-amz-meta-a");
    AuthInfo auth = parsed(r);
    // What such a signer puts in its canonical request: the tab folded, or kept.
    std::string canonical = canonicalRequest(r.view(), auth);
    if (!folded) {
      const size_t line = canonical.find("x-amz-meta-a:x y\n");
      REQUIRE(line != std::string::npos);
      canonical[line + std::string_view("x-amz-meta-a:x").size()] = '\t';
    }
    const std::string signature = hmacSha256Hex(
        deriveSigningKey(kSecret, auth.date, auth.region, auth.service),
        stringToSign(auth, canonical));
    authorization.replace(authorization.size() - 64, 64, signature);
    CHECK(verifyAt(r, kExampleTime).has_value());
    // Neither form lets another value through.
    r.set("x-amz-meta-a", "x\tz");
    CHECK_FALSE(verifyAt(r, kExampleTime).has_value());
  }
}

TEST_CASE("SigV4 refuses header-signed requests more than 15 minutes from the server clock") {
  Request r = getObjectExample();
  CHECK(verifyAt(r, kExampleTime + 900).has_value());
  CHECK(verifyAt(r, kExampleTime - 900).has_value());
  for (int64_t now : {kExampleTime + 901, kExampleTime - 901, int64_t{1700000000}}) {
    auto v = verifyAt(r, now);
    REQUIRE_FALSE(v.has_value());
    CHECK(v.error().code == S3ErrorCode::kRequestTimeTooSkewed);
  }
}

TEST_CASE("SigV4 parses Authorization headers with the spacing variants clients send") {
  Request r = getObjectExample();
  const std::string sig = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
  for (std::string value : std::vector<std::string>{
           "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
           "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=" +
               sig,
           "AWS4-HMAC-SHA256  Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request ,"
           "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date ,Signature=" +
               sig + " ",
           "AWS4-HMAC-SHA256 Signature=" + sig +
               ",SignedHeaders=host;range;x-amz-content-sha256;"
               "x-amz-date,Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"}) {
    r.set("authorization", value);
    CHECK(verifyAt(r, kExampleTime).has_value());
  }
}

TEST_CASE("SigV4 takes the signing time from the Date header when x-amz-date is absent") {
  Request r = getObjectExample();
  r.headers.erase(r.headers.begin() + 3);  // x-amz-date
  r.set("date", "Fri, 24 May 2013 00:00:00 GMT");
  CHECK(parsed(r).amz_date == "20130524T000000Z");
  // The ISO 8601 basic form S3 documents for a Date header that signs alone.
  r.set("date", "20130524T000102Z");
  CHECK(parsed(r).amz_date == "20130524T000102Z");
  r.set("date", "2013-05-24");
  CHECK(parseError(r) == S3ErrorCode::kAccessDenied);
}

TEST_CASE("SigV4 parse errors name the S3 error AWS answers with") {
  Request r = getObjectExample();
  SECTION("no credentials at all is anonymous") {
    r.headers.pop_back();
    auto auth = parseAuth(r.view());
    REQUIRE(auth.has_value());
    CHECK_FALSE(auth->has_value());
  }
  SECTION("Signature Version 2 credentials that are incomplete are refused") {
    r.set("authorization", "AWS AKIAIOSFODNN7EXAMPLE");
    CHECK(parseError(r) == S3ErrorCode::kInvalidArgument);
    r.set("authorization", "AWS :sig");
    CHECK(parseError(r) == S3ErrorCode::kInvalidArgument);
    Request q{"GET", "/k?AWSAccessKeyId=AKIA&Signature=abc", {{"host", "h"}}};
    CHECK(parseError(q) == S3ErrorCode::kAccessDenied);  // no Expires
    q.target = "/k?Signature=abc&Expires=1";
    CHECK(parseError(q) == S3ErrorCode::kAccessDenied);  // no access key
    q.target = "/k?AWSAccessKeyId=AKIA&Expires=soon&Signature=abc";
    CHECK(parseError(q) == S3ErrorCode::kAccessDenied);
  }
  SECTION("an unknown scheme is refused") {
    r.set("authorization", "Bearer token");
    CHECK(parseError(r) == S3ErrorCode::kInvalidArgument);  // 400, as S3 answers
  }
  SECTION("a request without x-amz-date or Date is refused") {
    r.headers.erase(r.headers.begin() + 3);
    CHECK(parseError(r) == S3ErrorCode::kAccessDenied);
  }
  SECTION("x-amz-content-sha256 is required with header auth") {
    r.headers.erase(r.headers.begin() + 2);
    auto auth = parseAuth(r.view());
    REQUIRE_FALSE(auth.has_value());
    CHECK(auth.error().code == S3ErrorCode::kInvalidRequest);
    CHECK(auth.error().message == "Missing required header for this request: x-amz-content-sha256");
  }
  SECTION("a bad x-amz-content-sha256 value is refused") {
    r.set("x-amz-content-sha256", "abc");
    CHECK(parseError(r) == S3ErrorCode::kInvalidArgument);
  }
  SECTION("host must be signed") {
    r.set("authorization", std::string(kCredentialPrefix) +
                               "SignedHeaders=range;x-amz-date,Signature=" + std::string(64, 'a'));
    CHECK(parseError(r) == S3ErrorCode::kAuthorizationHeaderMalformed);
  }
  SECTION("malformed components") {
    for (std::string value : std::vector<std::string>{
             "AWS4-HMAC-SHA256", "AWS4-HMAC-SHA256 Credential=AKIA/20130524/us-east-1/s3",
             "AWS4-HMAC-SHA256 Credential=AKIA/2013052/us-east-1/s3/aws4_request,"
             "SignedHeaders=host,Signature=" +
                 std::string(64, 'a'),
             "AWS4-HMAC-SHA256 Credential=AKIA/20130524/us-east-1/ec2/aws4_request,"
             "SignedHeaders=host,Signature=" +
                 std::string(64, 'a'),
             "AWS4-HMAC-SHA256 Credential=AKIA/20130523/us-east-1/s3/aws4_request,"
             "SignedHeaders=host,Signature=" +
                 std::string(64, 'a'),
             "AWS4-HMAC-SHA256 Credential=AKIA/20130524/us-east-1/s3/aws4_request,"
             "SignedHeaders=host,Signature=xyz",
             "AWS4-HMAC-SHA256 Credential=AKIA/20130524/us-east-1/s3/aws4_request,"
             "SignedHeaders=host,Signature=" +
                 std::string(64, 'a') + ",Signature=x",
             "AWS4-HMAC-SHA256 garbage"}) {
      r.set("authorization", value);
      CHECK(parseError(r) == S3ErrorCode::kAuthorizationHeaderMalformed);
    }
  }
  SECTION("header and query authentication together are refused") {
    r.target = "/test.txt?" + std::string(kPresignedQuery);
    CHECK(parseError(r) == S3ErrorCode::kInvalidArgument);
  }
}

TEST_CASE("SigV4 presigned parameters are validated") {
  auto withQuery = [](std::string query) {
    return Request{"GET", "/test.txt?" + query, {{"host", "examplebucket.s3.amazonaws.com"}}};
  };
  std::string q(kPresignedQuery);
  auto replace = [&](std::string_view from, std::string_view to) {
    std::string s = q;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  CHECK(parseError(withQuery(replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256"))) ==
        S3ErrorCode::kAuthorizationQueryParametersError);
  CHECK(parseError(withQuery(replace("&X-Amz-Expires=86400", ""))) ==
        S3ErrorCode::kAuthorizationQueryParametersError);
  CHECK(parseError(withQuery(replace("X-Amz-Expires=86400", "X-Amz-Expires=-1"))) ==
        S3ErrorCode::kAuthorizationQueryParametersError);
  CHECK(parseError(withQuery(replace("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=range"))) ==
        S3ErrorCode::kAuthorizationQueryParametersError);
  CHECK(parseError(withQuery(replace("X-Amz-Date=20130524T000000Z", "X-Amz-Date=2013"))) ==
        S3ErrorCode::kAuthorizationQueryParametersError);
  CHECK(parseError(withQuery(q + "&X-Amz-Content-Sha256=abc")) ==
        S3ErrorCode::kAuthorizationQueryParametersError);
  CHECK(parseAuth(withQuery(q + "&X-Amz-Content-Sha256=" + std::string(64, 'a')).view())
            .has_value());
  // A week is the longest validity S3 grants.
  Request week = withQuery(replace("X-Amz-Expires=86400", "X-Amz-Expires=604801"));
  auto v = verifyAt(week, kExampleTime);
  REQUIRE_FALSE(v.has_value());
  CHECK(v.error().code == S3ErrorCode::kAuthorizationQueryParametersError);
}

TEST_CASE("SigningKeyCache returns the derived key and reuses it") {
  SigningKeyCache cache;
  auto expected = deriveSigningKey(kSecret, "20130524", "us-east-1", "s3");
  CHECK(cache.get(kSecret, "20130524", "us-east-1", "s3") == expected);
  CHECK(cache.get(kSecret, "20130524", "us-east-1", "s3") == expected);
  CHECK(cache.get(kSecret, "20130525", "us-east-1", "s3") != expected);
  CHECK(cache.get("other", "20130524", "us-east-1", "s3") != expected);
  CHECK(cache.size() == 0);  // derived, not kept: none was remembered
  cache.remember(kSecret, "20130524", "us-east-1", "s3", expected);
  CHECK(cache.size() == 1);
  CHECK(cache.get(kSecret, "20130524", "us-east-1", "s3") == expected);
}

TEST_CASE("SigningKeyCache keeps the keys of verified requests only") {
  // A caller who knows an access key but not its secret, making up a region per request,
  // must not fill the cache (and have it cleared) with keys no request was signed with.
  SigningKeyCache cache;
  Request good = getObjectExample();
  AuthInfo auth = parsed(good);
  for (int i = 0; i < 100; ++i) {
    Request forged = good;
    auth.region = "region-" + std::to_string(i);
    CHECK_FALSE(verify(forged.view(), auth, kSecret, kExampleTime, cache).has_value());
  }
  CHECK(cache.size() == 0);
  CHECK(verify(good.view(), parsed(good), kSecret, kExampleTime, cache).has_value());
  CHECK(cache.size() == 1);
}

TEST_CASE("SigV4 parsing survives hostile Authorization headers and targets") {
  std::vector<std::string> values = {"",
                                     "AWS4-HMAC-SHA256 ",
                                     "AWS4-HMAC-SHA256 =",
                                     "AWS4-HMAC-SHA256 ,,,,",
                                     "AWS4-HMAC-SHA256x",
                                     "AWS4-HMAC-SHA256 Credential=////",
                                     "AWS4-HMAC-SHA256 Credential=/20130524/r/s3/aws4_request",
                                     std::string(10000, 'A'),
                                     "AWS4-HMAC-SHA256 SignedHeaders=;;;;"};
  for (const std::string& v : values) {
    Request r = getObjectExample();
    r.set("authorization", v);
    auto a = parseAuth(r.view());
    if (a.has_value() && a->has_value()) {
      SigningKeyCache keys;
      (void)verify(r.view(), **a, kSecret, kExampleTime, keys);
    }
  }
  for (std::string target : {"", "?", "?&&=&=", "/%", "/%zz?%=%", "http://h", "http://h?x",
                             "/a?X-Amz-Credential=%ZZ&X-Amz-Algorithm"}) {
    Request r = getObjectExample();
    r.target = target;
    auto a = parseAuth(r.view());
    if (a.has_value() && a->has_value()) {
      (void)canonicalRequest(r.view(), **a);
      SigningKeyCache keys;
      (void)verify(r.view(), **a, kSecret, kExampleTime, keys);
    }
  }
}

}  // namespace granary::gateway

namespace granary::gateway {
namespace {

// SigV2 against the examples of "Signing and authenticating REST requests" (S3 developer
// guide, 2007 dates, bucket johnsmith or awsexamplebucket1, the guide's example key).
struct V2Request {
  Request r;
  std::string host_bucket;
  HttpRequestView view() const {
    HttpRequestView v = r.view();
    v.host_bucket = host_bucket;
    return v;
  }
};

AuthInfo parsedV2(const V2Request& q) {
  auto auth = parseAuth(q.view());
  REQUIRE(auth.has_value());
  REQUIRE(auth->has_value());
  CHECK((*auth)->version == 2);
  CHECK((*auth)->access_key == kAccessKey);
  CHECK((*auth)->payload_hash == "UNSIGNED-PAYLOAD");
  return **auth;
}

S3Result<void> verifyV2At(const V2Request& q, int64_t now, std::string_view secret = kSecret) {
  SigningKeyCache keys;
  return verify(q.view(), parsedV2(q), secret, now, keys);
}

std::string signedStringV2(const V2Request& q) {
  return stringToSignV2(q.view(), parsedV2(q), splitTarget(q.r.target).first);
}

}  // namespace

TEST_CASE("SigV2 verifies the S3 developer guide's header-signed examples") {
  SECTION("Object GET, virtual-hosted: the bucket comes from the Host header") {
    V2Request q{{"GET", "/photos/puppy.jpg",
                 {{"host", "awsexamplebucket1.us-west-1.s3.amazonaws.com"},
                  {"date", "Tue, 27 Mar 2007 19:36:42 +0000"},
                  {"authorization", "AWS AKIAIOSFODNN7EXAMPLE:qgk2+6Sv9/oM7G3qLEjTH1a1l1g="}}},
                "awsexamplebucket1"};
    CHECK(signedStringV2(q) ==
          "GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/awsexamplebucket1/photos/puppy.jpg");
    CHECK(verifyV2At(q, 1175024202).has_value());
    CHECK(verifyV2At(q, 1175024202 + 14 * 60).has_value());
    CHECK(verifyV2At(q, 1175024202 + 16 * 60).error().code ==
          S3ErrorCode::kRequestTimeTooSkewed);
    CHECK(verifyV2At(q, 1175024202, "another secret").error().code ==
          S3ErrorCode::kSignatureDoesNotMatch);
    q.host_bucket.clear();  // the same request path-style names no bucket: not this one
    CHECK(verifyV2At(q, 1175024202).error().code == S3ErrorCode::kSignatureDoesNotMatch);
  }
  SECTION("Object PUT: Content-Type is signed") {
    V2Request q{{"PUT", "/johnsmith/photos/puppy.jpg",
                 {{"host", "s3.amazonaws.com"},
                  {"content-type", "image/jpeg"},
                  {"content-length", "94328"},
                  {"date", "Tue, 27 Mar 2007 21:15:45 +0000"},
                  {"authorization", "AWS AKIAIOSFODNN7EXAMPLE:MyyxeRY7whkBe+bq8fHCL/2kKUg="}}},
                ""};
    CHECK(verifyV2At(q, 1175030145).has_value());
    q.r.set("content-type", "image/png");
    CHECK(verifyV2At(q, 1175030145).error().code == S3ErrorCode::kSignatureDoesNotMatch);
  }
  SECTION("List: listing parameters are not signed, sub-resources are") {
    V2Request q{{"GET", "/?prefix=photos&max-keys=50&marker=puppy",
                 {{"host", "johnsmith.s3.amazonaws.com"},
                  {"date", "Tue, 27 Mar 2007 19:42:41 +0000"},
                  {"authorization", "AWS AKIAIOSFODNN7EXAMPLE:htDYFYduRNen8P9ZfE/s9SuKy0U="}}},
                "johnsmith"};
    CHECK(signedStringV2(q) == "GET\n\n\nTue, 27 Mar 2007 19:42:41 +0000\n/johnsmith/");
    CHECK(verifyV2At(q, 1175024561).has_value());
    V2Request acl{{"GET", "/?acl",
                   {{"host", "johnsmith.s3.amazonaws.com"},
                    {"date", "Tue, 27 Mar 2007 19:44:46 +0000"},
                    {"authorization", "AWS AKIAIOSFODNN7EXAMPLE:c2WLPFtWHVgbEmeEG93a4cG37dM="}}},
                  "johnsmith"};
    CHECK(signedStringV2(acl) == "GET\n\n\nTue, 27 Mar 2007 19:44:46 +0000\n/johnsmith/?acl");
    CHECK(verifyV2At(acl, 1175024686).has_value());
  }
}

TEST_CASE("SigV2 presigned URLs verify until Expires") {
  // The guide's query-string example: the Date line is the Expires instant.
  V2Request q{{"GET",
               "/johnsmith/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620&"
               "Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D",
               {{"host", "s3.amazonaws.com"}}},
              ""};
  CHECK(parsedV2(q).presigned);
  CHECK(signedStringV2(q) == "GET\n\n\n1175139620\n/johnsmith/photos/puppy.jpg");
  CHECK(verifyV2At(q, 1175139620 - 86400).has_value());
  CHECK(verifyV2At(q, 1175139620).has_value());
  auto expired = verifyV2At(q, 1175139621);
  REQUIRE_FALSE(expired.has_value());
  CHECK(expired.error().code == S3ErrorCode::kAccessDenied);
  CHECK(expired.error().message == "Request has expired");
  // Another expiry than the one signed.
  q.r.target = "/johnsmith/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&"
               "Expires=1175139621&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D";
  CHECK(verifyV2At(q, 1175139000).error().code == S3ErrorCode::kSignatureDoesNotMatch);
  // Header and query credentials together.
  q.r.set("authorization", "AWS AKIAIOSFODNN7EXAMPLE:NpgCjnDzrM+WFzoENXmpNDUsSn8=");
  CHECK(parseError(q.r) == S3ErrorCode::kInvalidArgument);
}

TEST_CASE("SigV2 signs x-amz headers and sub-resources in canonical order") {
  V2Request q{{"PUT", "/b/k?uploadId=u%2F1&partNumber=2&x-id=UploadPart",
               {{"host", "h"},
                {"date", "Tue, 27 Mar 2007 21:06:08 +0000"},
                {"content-md5", "4gJE4saaMU4BqNR0kLY+lw=="},
                {"x-amz-meta-reviewedby", "joe@example.com"},
                {"x-amz-acl", " public-read "},
                {"x-amz-meta-reviewedby", "jane@example.com"},
                {"authorization", "AWS AKIAIOSFODNN7EXAMPLE:x"}}},
              ""};
  CHECK(signedStringV2(q) ==
        "PUT\n4gJE4saaMU4BqNR0kLY+lw==\n\nTue, 27 Mar 2007 21:06:08 +0000\n"
        "x-amz-acl:public-read\nx-amz-meta-reviewedby:joe@example.com,jane@example.com\n"
        "/b/k?partNumber=2&uploadId=u/1");
  // "uploads" alone and "uploads=" sign as sent.
  q.r.target = "/b/k?uploads";
  CHECK(signedStringV2(q).ends_with("\n/b/k?uploads"));
  q.r.target = "/b/k?uploads=";
  CHECK(signedStringV2(q).ends_with("\n/b/k?uploads="));
  // Signed with the library's own signer, it verifies.
  AuthInfo v2;
  v2.version = 2;
  q.r.set("authorization",
          "AWS AKIAIOSFODNN7EXAMPLE:" + signV2(kSecret, stringToSignV2(q.view(), v2, "/b/k")));
  CHECK(verifyV2At(q, 1175029568).has_value());
  // x-amz-date instead of Date: the Date line is empty and x-amz-date is signed as an
  // x-amz header (botocore, s3cmd, MinIO).
  V2Request d{{"PUT", "/b/k", {{"host", "h"}, {"x-amz-date", "Tue, 27 Mar 2007 21:06:08 GMT"}}},
              ""};
  CHECK(stringToSignV2(d.view(), v2, "/b/k") ==
        "PUT\n\n\n\nx-amz-date:Tue, 27 Mar 2007 21:06:08 GMT\n/b/k");
  d.r.set("authorization",
          "AWS AKIAIOSFODNN7EXAMPLE:" + signV2(kSecret, stringToSignV2(d.view(), v2, "/b/k")));
  CHECK(verifyV2At(d, 1175029568).has_value());
  CHECK(verifyV2At(d, 1175029568 + 3600).error().code == S3ErrorCode::kRequestTimeTooSkewed);
  // With a Date header as well: S3 signs an empty Date line, botocore the Date header.
  d.r.set("date", "Tue, 27 Mar 2007 21:06:09 GMT");
  CHECK(verifyV2At(d, 1175029568).has_value());
  d.r.set("authorization",
          "AWS AKIAIOSFODNN7EXAMPLE:" + signV2(kSecret, stringToSignV2(d.view(), v2, "/b/k")));
  CHECK(verifyV2At(d, 1175029568).has_value());
  d.r.set("date", "Tue, 27 Mar 2007 21:06:10 GMT");  // another Date than the one signed
  CHECK(verifyV2At(d, 1175029568).error().code == S3ErrorCode::kSignatureDoesNotMatch);
  q = d;
  q.r.headers.erase(q.r.headers.begin() + 1);  // x-amz-date
  q.r.headers.pop_back();                       // date
  CHECK(verifyV2At(q, 1175029568).error().code == S3ErrorCode::kAccessDenied);  // no date
}

TEST_CASE("SigV2 presigned URLs sign the headers botocore puts in their query") {
  // HmacV1QueryAuth moves Content-Type, Content-MD5 and x-amz-* headers into the query.
  V2Request q{{"PUT",
               "/b/k?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620&"
               "content-type=text%2Fplain&x-amz-meta-colour=blue&X-Amz-Acl=private&Signature=",
               {{"host", "h"}}},
              ""};
  q.r.target += "x";
  const std::string to_sign = signedStringV2(q);
  CHECK(to_sign ==
        "PUT\n\ntext/plain\n1175139620\nx-amz-acl:private\nx-amz-meta-colour:blue\n/b/k");
  q.r.target.pop_back();
  q.r.target += uriEncode(signV2(kSecret, to_sign), true);
  CHECK(verifyV2At(q, 1175139000).has_value());
  // A header of the same name does not change what the query signed.
  q.r.set("content-type", "image/png");
  q.r.set("x-amz-meta-colour", "red");
  CHECK(verifyV2At(q, 1175139000).has_value());
  // Nor is a parameter added after signing taken.
  q.r.target += "&x-amz-meta-size=big";
  CHECK(verifyV2At(q, 1175139000).error().code == S3ErrorCode::kSignatureDoesNotMatch);
}

TEST_CASE("SigV2 refuses parameters that choose an operation but that it cannot sign") {
  // The guide's presigned GET of an object; the record index's and GetObjectAttributes'
  // parameters are outside a V2 signature, so appending one would make it another
  // operation under the same signature.
  const std::string url =
      "/johnsmith/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620&"
      "Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D";
  V2Request q{{"GET", url, {{"host", "s3.amazonaws.com"}}}, ""};
  REQUIRE(verifyV2At(q, 1175139000).has_value());
  for (const char* extra : {"&attributes", "&records", "&record&key=k", "&records-batch",
                            "&record-index", "&policyStatus", "&rec%6Frds", "&encryption",
                            "&ownershipControls", "&publicAccessBlock",
                            "&x-granary-index=tar", "&%61cl", "&%70olicy", "&%75ploadId=x",
                            "&%6Cifecycle", "&tag+ging"}) {
    INFO(extra);
    q.r.target = url + extra;
    auto refused = verifyV2At(q, 1175139000);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == S3ErrorCode::kAccessDenied);
  }
  // A parameter V2 leaves out that only filters (prefix) is no new operation.
  q.r.target = url + "&prefix=x";
  CHECK(verifyV2At(q, 1175139000).has_value());
  // Nor may an x-granary-* header ride along (it would index an upload).
  q.r.target = url;
  q.r.headers.emplace_back("x-granary-index", "tar");
  CHECK(verifyV2At(q, 1175139000).error().code == S3ErrorCode::kAccessDenied);
}

}  // namespace granary::gateway

namespace granary::gateway {

TEST_CASE("matchSignature: a signing failure (empty) never matches, even an empty signature") {
  auto failed = [](std::string_view) { return std::string(); };
  CHECK_FALSE(matchSignature("/b/k", "", failed).has_value());
  CHECK_FALSE(matchSignature("/b/k$", "", failed).has_value());
  auto fixed = [](std::string_view p) { return std::string(p == "/b/k%24" ? "sig" : "other"); };
  CHECK(matchSignature("/b/k%24", "sig", fixed).has_value());
  CHECK(matchSignature("/b/k$", "sig", fixed).has_value());  // signed the canonical form
  CHECK(matchSignature("/b/k$", "bad", fixed).error().code == S3ErrorCode::kSignatureDoesNotMatch);
}

}  // namespace granary::gateway

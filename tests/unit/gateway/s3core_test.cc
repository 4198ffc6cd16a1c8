// S3 error mapping, URI helpers and Range parsing (granary_s3core). SigV4 and aws-chunked
// have their own files: sigv4_test.cc, aws_chunked_test.cc.
#include <catch2/catch.hpp>

#include <limits>

#include "http_range.h"
#include "s3_error.h"
#include "time_format.h"
#include "uri.h"

namespace granary::gateway {

TEST_CASE("S3 errors carry AWS's names and HTTP statuses") {
  struct Row {
    S3ErrorCode code;
    std::string_view name;
    int status;
  };
  const Row rows[] = {
      {S3ErrorCode::kAccessDenied, "AccessDenied", 403},
      {S3ErrorCode::kSignatureDoesNotMatch, "SignatureDoesNotMatch", 403},
      {S3ErrorCode::kInvalidAccessKeyId, "InvalidAccessKeyId", 403},
      {S3ErrorCode::kRequestTimeTooSkewed, "RequestTimeTooSkewed", 403},
      {S3ErrorCode::kNoSuchBucket, "NoSuchBucket", 404},
      {S3ErrorCode::kNoSuchKey, "NoSuchKey", 404},
      {S3ErrorCode::kBucketNotEmpty, "BucketNotEmpty", 409},
      {S3ErrorCode::kBucketAlreadyOwnedByYou, "BucketAlreadyOwnedByYou", 409},
      {S3ErrorCode::kBucketAlreadyExists, "BucketAlreadyExists", 409},
      {S3ErrorCode::kInvalidRange, "InvalidRange", 416},
      {S3ErrorCode::kInvalidPartNumber, "InvalidPartNumber", 416},
      {S3ErrorCode::kPreconditionFailed, "PreconditionFailed", 412},
      {S3ErrorCode::kConditionalRequestConflict, "ConditionalRequestConflict", 409},
      {S3ErrorCode::kNotModified, "NotModified", 304},
      {S3ErrorCode::kMethodNotAllowed, "MethodNotAllowed", 405},
      {S3ErrorCode::kNotImplemented, "NotImplemented", 501},
      {S3ErrorCode::kInternalError, "InternalError", 500},
      {S3ErrorCode::kServiceUnavailable, "ServiceUnavailable", 503},
      {S3ErrorCode::kSlowDown, "SlowDown", 503},
      {S3ErrorCode::kRequestTimeout, "RequestTimeout", 400},
      {S3ErrorCode::kIncompleteBody, "IncompleteBody", 400},
      {S3ErrorCode::kEntityTooLarge, "EntityTooLarge", 400},
      {S3ErrorCode::kKeyTooLongError, "KeyTooLongError", 400},
      {S3ErrorCode::kMissingContentLength, "MissingContentLength", 411},
      {S3ErrorCode::kRequestHeaderSectionTooLarge, "RequestHeaderSectionTooLarge", 400},
      {S3ErrorCode::kInvalidDigest, "InvalidDigest", 400},
      {S3ErrorCode::kBadDigest, "BadDigest", 400},
      {S3ErrorCode::kXAmzContentSHA256Mismatch, "XAmzContentSHA256Mismatch", 400},
      {S3ErrorCode::kMalformedXML, "MalformedXML", 400},
      {S3ErrorCode::kMalformedPOSTRequest, "MalformedPOSTRequest", 400},
      {S3ErrorCode::kMalformedPolicy, "MalformedPolicy", 400},
      {S3ErrorCode::kInvalidPolicyDocument, "InvalidPolicyDocument", 400},
      {S3ErrorCode::kMaxPostPreDataLengthExceededError, "MaxPostPreDataLengthExceededError", 400},
      {S3ErrorCode::kIncorrectNumberOfFilesInPostRequest, "IncorrectNumberOfFilesInPostRequest",
       400},
      {S3ErrorCode::kInvalidArgument, "InvalidArgument", 400},
      {S3ErrorCode::kInvalidRequest, "InvalidRequest", 400},
      {S3ErrorCode::kInvalidBucketName, "InvalidBucketName", 400},
      {S3ErrorCode::kAuthorizationHeaderMalformed, "AuthorizationHeaderMalformed", 400},
      {S3ErrorCode::kAuthorizationQueryParametersError, "AuthorizationQueryParametersError", 400},
      {S3ErrorCode::kMissingSecurityHeader, "MissingSecurityHeader", 400},
  };
  for (const Row& row : rows) {
    CHECK(errorName(row.code) == row.name);
    CHECK(httpStatus(row.code) == row.status);
  }
}

TEST_CASE("fromStatus maps every internal failure to one S3 error") {
  CHECK(fromStatus(Status::notFound("k")).code == S3ErrorCode::kNoSuchKey);
  CHECK(fromStatus(Status::notFound("b"), S3ErrorCode::kNoSuchBucket).code ==
        S3ErrorCode::kNoSuchBucket);
  CHECK(fromStatus(Status::alreadyExists("x")).code == S3ErrorCode::kInvalidRequest);
  CHECK(fromStatus(Status::invalidArgument("x")).code == S3ErrorCode::kInvalidArgument);
  CHECK(fromStatus(Status::preconditionFailed("x")).code == S3ErrorCode::kPreconditionFailed);
  CHECK(fromStatus(Status::notEmpty("x")).code == S3ErrorCode::kBucketNotEmpty);
  CHECK(fromStatus(Status::permissionDenied("x")).code == S3ErrorCode::kAccessDenied);
  CHECK(fromStatus(Status::unavailable("x")).code == S3ErrorCode::kServiceUnavailable);
  CHECK(fromStatus(Status::timeout("x")).code == S3ErrorCode::kServiceUnavailable);
  S3Error full = fromStatus(Status::noSpace("disk 3"));
  CHECK(full.code == S3ErrorCode::kStorageFull);
  CHECK(httpStatus(full.code) == 507);
  CHECK(full.message.find("disk 3") != std::string::npos);
  CHECK(fromStatus(Status::corruption("crc")).code == S3ErrorCode::kInternalError);
  CHECK(fromStatus(Status::ioError("eio")).code == S3ErrorCode::kInternalError);
  CHECK(fromStatus(Status::internal("bug")).code == S3ErrorCode::kInternalError);
  CHECK(fromStatus(Status::ok()).code == S3ErrorCode::kInternalError);
}

TEST_CASE("uriEncode follows AWS UriEncode") {
  CHECK(uriEncode("AZaz09-_.~", true) == "AZaz09-_.~");
  CHECK(uriEncode("a/b c", false) == "a/b%20c");
  CHECK(uriEncode("a/b c", true) == "a%2Fb%20c");
  CHECK(uriEncode("test$file.text", true) == "test%24file.text");
  CHECK(uriEncode("1+1=2%", true) == "1%2B1%3D2%25");
  CHECK(uriEncode("caf\xc3\xa9", true) == "caf%C3%A9");
  CHECK(uriEncode(std::string_view("\0\xff", 2), true) == "%00%FF");
}

TEST_CASE("percentDecode inverts uriEncode for keys with '+', '%', spaces and UTF-8") {
  for (std::string key : std::vector<std::string>{
           "photos/2024/a b+c%d.jpg", "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.txt", "~tilde_-.",
           "100% + 100%", std::string("nul\0byte", 8), ""}) {
    for (bool slash : {false, true}) {
      auto back = percentDecode(uriEncode(key, slash), false);
      REQUIRE(back);
      CHECK(*back == key);
      auto back_plus = percentDecode(uriEncode(key, slash), true);
      REQUIRE(back_plus);
      CHECK(*back_plus == key);  // '+' is always encoded, so plus_is_space changes nothing
    }
  }
  CHECK(percentDecode("a+b", true) == "a b");
  CHECK(percentDecode("a+b", false) == "a+b");
  CHECK(percentDecode("%2b%2F", false) == "+/");
  CHECK_FALSE(percentDecode("%", false));
  CHECK_FALSE(percentDecode("%4", false));
  CHECK_FALSE(percentDecode("ab%4", false));
  CHECK_FALSE(percentDecode("%zz", false));
  CHECK_FALSE(percentDecode("%g0", false));
}

TEST_CASE("parseQuery splits, decodes and keeps value-less parameters") {
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  CHECK(parseQuery("") == Pairs{});
  CHECK(parseQuery("lifecycle") == Pairs{{"lifecycle", ""}});
  CHECK(parseQuery("uploads&prefix=a%2Fb+c&&max-keys=2&e=") ==
        Pairs{{"uploads", ""}, {"prefix", "a/b c"}, {"max-keys", "2"}, {"e", ""}});
  CHECK(parseQuery("a=b=c") == Pairs{{"a", "b=c"}});
  CHECK(parseQuery("bad=%zz") == Pairs{{"bad", "%zz"}});
  CHECK(parseQueryRaw("prefix=a%2Fb+c&x") == Pairs{{"prefix", "a%2Fb+c"}, {"x", ""}});
}

TEST_CASE("splitTarget separates path and query, also for absolute-form targets") {
  using Split = std::pair<std::string_view, std::string_view>;
  CHECK(splitTarget("/b/k?acl") == Split{"/b/k", "acl"});
  CHECK(splitTarget("/b/k") == Split{"/b/k", ""});
  CHECK(splitTarget("?lifecycle") == Split{"", "lifecycle"});
  CHECK(splitTarget("http://host:9000/b/k?x=1") == Split{"/b/k", "x=1"});
  CHECK(splitTarget("http://host") == Split{"", ""});
  CHECK(splitTarget("/a?u=http://x/y") == Split{"/a", "u=http://x/y"});
}

TEST_CASE("Range headers S3 serves as 206") {
  using Kind = RangeResult::Kind;
  auto sat = [](std::string_view h, uint64_t size, uint64_t first, uint64_t length) {
    RangeResult r = parseRange(h, size);
    CHECK(r.kind == Kind::kSatisfiable);
    CHECK(r.range.first == first);
    CHECK(r.range.length == length);
  };
  sat("bytes=0-0", 10, 0, 1);
  sat("bytes=0-9", 10, 0, 10);
  sat("bytes=5-", 10, 5, 5);
  sat("bytes=-3", 10, 7, 3);
  sat("bytes=-30", 10, 0, 10);   // suffix longer than the object: all of it
  sat("bytes=2-100", 10, 2, 8);  // last beyond the end clamps
  sat("bytes=9-18446744073709551615", 10, 9, 1);
  sat("bytes=3-99999999999999999999999", 10, 3, 7);  // saturates instead of wrapping
  sat("bytes=9-9", 10, 9, 1);
  sat("Bytes = 1 - 2", 10, 1, 2);
}

TEST_CASE("Range headers S3 answers with 416 InvalidRange") {
  using Kind = RangeResult::Kind;
  CHECK(parseRange("bytes=-0", 10).kind == Kind::kUnsatisfiable);
  CHECK(parseRange("bytes=10-", 10).kind == Kind::kUnsatisfiable);
  CHECK(parseRange("bytes=10-20", 10).kind == Kind::kUnsatisfiable);
  CHECK(parseRange("bytes=99999999999999999999-", 10).kind == Kind::kUnsatisfiable);
  // An empty object has no satisfiable byte range; a non-zero suffix reads it whole (200,
  // empty), as S3 answers tail readers.
  CHECK(parseRange("bytes=0-0", 0).kind == Kind::kUnsatisfiable);
  CHECK(parseRange("bytes=0-", 0).kind == Kind::kUnsatisfiable);
  CHECK(parseRange("bytes=-0", 0).kind == Kind::kUnsatisfiable);
  CHECK(parseRange("bytes=-5", 0).kind == Kind::kNone);
}

TEST_CASE("Range headers S3 ignores, serving the whole object") {
  using Kind = RangeResult::Kind;
  for (std::string_view h : {"", "bytes", "bytes=", "bytes=-", "bytes=5-2", "bytes=a-b",
                             "bytes=1-2,4-5", "bytes=0-0,-1", "items=0-1", "bytes 0-1", "bytes=--1",
                             "bytes=1", "bytes=0x1-2", "bytes=-1-2", "bytes=+1-2"}) {
    CHECK(parseRange(h, 10).kind == Kind::kNone);
  }
}

TEST_CASE("isoTimestamp and httpDate format UTC with S3's precision") {
  // 2026-11-22T15:22:24.123456789Z
  const int64_t t = 1'795'360'944'123'456'789;
  CHECK(isoTimestamp(t) == "2026-11-22T15:22:24.123Z");
  CHECK(httpDate(t) == "Sun, 22 Nov 2026 15:22:24 GMT");
  CHECK(isoTimestamp(0) == "1970-01-01T00:00:00.000Z");
  CHECK(isoTimestamp(951'782'400'000'000'000) == "2000-02-29T00:00:00.000Z");  // leap day
  CHECK(isoTimestamp(7'258'118'399'999'000'000) == "2199-12-31T23:59:59.999Z");
  // Before 1970, and the ends of int64_t nanoseconds: four-digit years throughout.
  CHECK(isoTimestamp(-1) == "1969-12-31T23:59:59.999Z");
  CHECK(isoTimestamp(std::numeric_limits<int64_t>::min()) == "1677-09-21T00:12:43.145Z");
  CHECK(isoTimestamp(std::numeric_limits<int64_t>::max()) == "2262-04-11T23:47:16.854Z");
  CHECK(IsoTimestamp(t).view() == isoTimestamp(t));
  CHECK(parseHttpDate(httpDate(t)) == t / 1'000'000'000);
}

TEST_CASE("SigV4 dates: yyyymmddThhmmssZ parses strictly and formats back") {
  CHECK(parseAmzDate("20130524T000000Z") == 1'369'353'600);
  CHECK(parseAmzDate("19700101T000000Z") == 0);
  CHECK(parseAmzDate("20000229T235960Z") == 951'868'800);  // leap day, leap second
  CHECK(amzDate(1'369'353'600) == "20130524T000000Z");
  CHECK(amzDate(0) == "19700101T000000Z");
  CHECK(amzDate(-1) == "19691231T235959Z");
  for (int64_t s : {int64_t{0}, int64_t{951'782'399}, int64_t{1'795'000'000}, int64_t{-86'401}}) {
    CHECK(parseAmzDate(amzDate(s)) == s);
  }
  for (const char* bad : {"20130230T000000Z", "20131301T000000Z", "20130524T240000Z",
                          "20130524T006000Z", "20130524T000061Z", "2013052T0000000Z",
                          "20130524 000000Z", "20130524T000000", "2013-5-24T00000Z",
                          "20130524T00000+Z", ""}) {
    CAPTURE(bad);
    CHECK_FALSE(parseAmzDate(bad));
  }
}

}  // namespace granary::gateway

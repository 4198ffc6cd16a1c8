// aws-chunked decoding against AWS's published examples ("Transferring Payload in Multiple
// Chunks" and "Including Trailing Headers", S3 API reference): 66560 bytes of 'a' sent as
// 64 KiB + 1 KiB + 0 chunks, signed with the example credentials at 20130524T000000Z.
#include <catch2/catch.hpp>
#include <random>

#include "sigv4.h"

namespace granary::gateway {
namespace {

constexpr std::string_view kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr std::string_view kAmzDate = "20130524T000000Z";
constexpr std::string_view kScope = "20130524/us-east-1/s3/aws4_request";
constexpr std::string_view kEmptyHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

AwsChunkedDecoder::Signing signing(std::string seed) {
  return {deriveSigningKey(kSecret, "20130524", "us-east-1", "s3"), std::string(kAmzDate),
          std::string(kScope), std::move(seed)};
}

std::string signedChunk(size_t size, std::string_view signature) {
  char head[32];
  std::snprintf(head, sizeof(head), "%zx", size);
  std::string out = head;
  out.append(";chunk-signature=").append(signature).append("\r\n");
  out.append(size, 'a').append("\r\n");
  return out;
}

// The documented body: chunk-signature chain seeded by 4f232c43...
std::string docBody() {
  return signedChunk(65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648") +
         signedChunk(1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497") +
         signedChunk(0, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9");
}
constexpr std::string_view kDocSeed =
    "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";

// The documented trailer body (STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER), seeded by
// 106e2a8a..., with a CRC32C trailer.
std::string docTrailerBody(std::string_view trailer_signature =
                               "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435") {
  std::string out =
      signedChunk(65536, "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2") +
      signedChunk(1024, "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7");
  out += "0;chunk-signature=2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992\r\n";
  out += "x-amz-checksum-crc32c:sOO8/Q==\r\n";
  out += "x-amz-trailer-signature:" + std::string(trailer_signature) + "\r\n";
  return out;
}
constexpr std::string_view kDocTrailerSeed =
    "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";

struct Decoded {
  bool ok = false;
  S3ErrorCode code = S3ErrorCode::kInternalError;
  bool done = false;
  std::string payload;
  std::map<std::string, std::string> trailers;
};

// Feeds `body` in pieces of the given sizes (cycled), then the rest.
Decoded decode(std::string_view body, std::optional<AwsChunkedDecoder::Signing> sig, bool trailer,
               std::vector<size_t> pieces = {}) {
  AwsChunkedDecoder decoder(std::move(sig), trailer);
  Decoded d;
  size_t i = 0;
  size_t k = 0;
  while (i < body.size()) {
    size_t n =
        pieces.empty() ? body.size() - i : std::min(pieces[k++ % pieces.size()], body.size() - i);
    auto r = decoder.feed(body.substr(i, n), d.payload);
    if (!r) {
      d.code = r.error().code;
      return d;
    }
    i += n;
  }
  d.ok = true;
  d.done = decoder.done();
  d.trailers = decoder.trailers();
  return d;
}

// Builds a signed body for `chunks` the way a client does, for tests beyond the documented one.
std::string signBody(const std::vector<std::string>& chunks, std::string_view seed,
                     const std::string& trailer_lines = "", bool with_trailer = false) {
  auto key = deriveSigningKey(kSecret, "20130524", "us-east-1", "s3");
  std::string prev(seed);
  std::string out;
  std::vector<std::string> all = chunks;
  all.push_back("");
  for (const std::string& c : all) {
    std::string sts = "AWS4-HMAC-SHA256-PAYLOAD\n" + std::string(kAmzDate) + "\n" +
                      std::string(kScope) + "\n" + prev + "\n" + std::string(kEmptyHash) + "\n" +
                      sha256Hex(c);
    prev = hmacSha256Hex(key, sts);
    char head[32];
    std::snprintf(head, sizeof(head), "%zx", c.size());
    out += std::string(head) + ";chunk-signature=" + prev + "\r\n" + c;
    if (!c.empty() || !with_trailer) {
      out += "\r\n";
    }
  }
  if (with_trailer) {
    std::string canonical;  // trailer lines as "name:value\n"
    for (size_t p = 0; p < trailer_lines.size();) {
      size_t e = trailer_lines.find("\r\n", p);
      canonical += trailer_lines.substr(p, e - p) + "\n";
      p = e + 2;
    }
    std::string sts = "AWS4-HMAC-SHA256-TRAILER\n" + std::string(kAmzDate) + "\n" +
                      std::string(kScope) + "\n" + prev + "\n" + sha256Hex(canonical);
    out += trailer_lines + "x-amz-trailer-signature:" + hmacSha256Hex(key, sts) + "\r\n\r\n";
  }
  return out;
}

}  // namespace

TEST_CASE("aws-chunked decodes AWS's signed chunked-upload example to 66560 bytes of 'a'") {
  std::string body = docBody();
  CHECK(body.size() == 66824);  // the example's Content-Length
  for (std::vector<size_t> pieces :
       std::vector<std::vector<size_t>>{{}, {1}, {7}, {4096}, {65536}, {70000}, {3, 100, 9000}}) {
    Decoded d = decode(body, signing(std::string(kDocSeed)), false, pieces);
    REQUIRE(d.ok);
    CHECK(d.done);
    CHECK(d.payload == std::string(66560, 'a'));
    CHECK(d.trailers.empty());
  }
}

TEST_CASE("aws-chunked rejects a tampered chunk signature, chunk data or seed") {
  std::string body = docBody();
  SECTION("second chunk's signature") {
    body[body.find("0055627c") + 3] = '6';
    CHECK(decode(body, signing(std::string(kDocSeed)), false).code ==
          S3ErrorCode::kSignatureDoesNotMatch);
  }
  SECTION("final chunk's signature") {
    body[body.find("b6c6ea8a")] = 'c';
    CHECK(decode(body, signing(std::string(kDocSeed)), false).code ==
          S3ErrorCode::kSignatureDoesNotMatch);
  }
  SECTION("one data byte") {
    body[1000] = 'b';
    CHECK(decode(body, signing(std::string(kDocSeed)), false).code ==
          S3ErrorCode::kSignatureDoesNotMatch);
  }
  SECTION("seed") {
    std::string seed(kDocSeed);
    seed[0] = '5';
    CHECK(decode(body, signing(seed), false).code == S3ErrorCode::kSignatureDoesNotMatch);
  }
  SECTION("chunks swapped") {
    std::string a =
        signedChunk(65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648");
    std::string b =
        signedChunk(1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497");
    std::string swapped = b + a + body.substr(a.size() + b.size());
    CHECK(decode(swapped, signing(std::string(kDocSeed)), false).code ==
          S3ErrorCode::kSignatureDoesNotMatch);
  }
  SECTION("signature missing") {
    std::string unsigned_body = "400\r\n" + std::string(1024, 'a') + "\r\n0\r\n\r\n";
    CHECK(decode(unsigned_body, signing(std::string(kDocSeed)), false).code ==
          S3ErrorCode::kSignatureDoesNotMatch);
  }
}

TEST_CASE("aws-chunked decodes AWS's signed trailer example and checks the trailer signature") {
  Decoded d = decode(docTrailerBody(), signing(std::string(kDocTrailerSeed)), true);
  REQUIRE(d.ok);
  CHECK(d.done);
  CHECK(d.payload == std::string(66560, 'a'));
  CHECK(d.trailers == std::map<std::string, std::string>{{"x-amz-checksum-crc32c", "sOO8/Q=="}});

  // With the closing blank line, byte by byte.
  d = decode(docTrailerBody() + "\r\n", signing(std::string(kDocTrailerSeed)), true, {1});
  REQUIRE(d.ok);
  CHECK(d.done);
  CHECK(d.payload.size() == 66560);

  // A blank line between the final chunk and the trailer (seen from some clients).
  std::string variant = docTrailerBody();
  variant.insert(variant.find("x-amz-checksum-crc32c"), "\r\n");
  d = decode(variant, signing(std::string(kDocTrailerSeed)), true);
  REQUIRE(d.ok);
  CHECK(d.done);

  // Without the signature line the body is not complete.
  std::string cut = docTrailerBody();
  cut.resize(cut.find("x-amz-trailer-signature"));
  d = decode(cut, signing(std::string(kDocTrailerSeed)), true);
  REQUIRE(d.ok);
  CHECK_FALSE(d.done);

  std::string bad_sig(64, '0');
  CHECK(decode(docTrailerBody(bad_sig), signing(std::string(kDocTrailerSeed)), true).code ==
        S3ErrorCode::kSignatureDoesNotMatch);
  std::string bad_value = docTrailerBody();
  bad_value.replace(bad_value.find("sOO8/Q=="), 8, "AAAAAA==");
  CHECK(decode(bad_value, signing(std::string(kDocTrailerSeed)), true).code ==
        S3ErrorCode::kSignatureDoesNotMatch);
  CHECK(decode(docTrailerBody() + "\r\nxx", signing(std::string(kDocTrailerSeed)), true).code ==
        S3ErrorCode::kInvalidRequest);
}

TEST_CASE("aws-chunked decodes an unsigned body with a CRC32 trailer from every split point") {
  const std::string body =
      "9\r\n123456789\r\n3;ext=1\r\nabc\r\n0\r\nx-amz-checksum-crc32:y/Q5Jg==\r\n\r\n";
  for (size_t split = 0; split <= body.size(); ++split) {
    AwsChunkedDecoder decoder(std::nullopt, true);
    std::string out;
    REQUIRE(decoder.feed(std::string_view(body).substr(0, split), out));
    // Complete once the trailer line is in, even before the closing blank line.
    CHECK(decoder.done() == (split == body.size() || split == body.size() - 2));
    REQUIRE(decoder.feed(std::string_view(body).substr(split), out));
    CHECK(decoder.done());
    CHECK(out == "123456789abc");
    CHECK(decoder.trailers().at("x-amz-checksum-crc32") == "y/Q5Jg==");
  }
  Decoded d = decode(body, std::nullopt, true, {1});
  REQUIRE(d.ok);
  CHECK(d.done);
  CHECK(d.payload == "123456789abc");

  // A client that ends right after its trailer line, without the blank line, is complete.
  d = decode(body.substr(0, body.size() - 2), std::nullopt, true);
  REQUIRE(d.ok);
  CHECK(d.done);
  // minio-go ends its trailer with two blank lines (its Content-Length counts both), the
  // trailer line with LF alone: whole, in any split; anything but blank lines after one
  // is not.
  const std::string minio = "9\r\n123456789\r\n3;ext=1\r\nabc\r\n0\r\n"
                            "x-amz-checksum-crc32:y/Q5Jg==\n\r\n\r\n";
  for (const std::vector<size_t>& pieces : {std::vector<size_t>{}, std::vector<size_t>{1}}) {
    d = decode(minio, std::nullopt, true, pieces);
    REQUIRE(d.ok);
    CHECK(d.done);
    CHECK(d.payload == "123456789abc");
    CHECK(d.trailers.at("x-amz-checksum-crc32") == "y/Q5Jg==");
    CHECK(decode(minio + "x", std::nullopt, true, pieces).code == S3ErrorCode::kInvalidRequest);
  }
  // No trailers at all.
  d = decode("3\r\nabc\r\n0\r\n\r\n", std::nullopt, true);
  REQUIRE(d.ok);
  CHECK(d.done);
  CHECK(d.trailers.empty());
  // Truncated inside a trailer line or a chunk.
  CHECK_FALSE(decode(body.substr(0, body.size() - 5), std::nullopt, true).done);
  CHECK_FALSE(decode(body.substr(0, 10), std::nullopt, true).done);
}

TEST_CASE("aws-chunked signed bodies decode from every split point") {
  std::vector<std::string> chunks = {"hello ", "world", std::string(300, 'x')};
  const std::string seed(64, 'c');
  const std::string plain = signBody(chunks, seed);
  const std::string trailed =
      signBody(chunks, seed, "x-amz-checksum-crc32:AAAAAA==\r\n", /*with_trailer=*/true);
  const std::string expected = "hello world" + std::string(300, 'x');
  for (bool trailer : {false, true}) {
    const std::string& body = trailer ? trailed : plain;
    for (size_t split = 0; split <= body.size(); ++split) {
      AwsChunkedDecoder decoder(signing(seed), trailer);
      std::string out;
      REQUIRE(decoder.feed(std::string_view(body).substr(0, split), out));
      REQUIRE(decoder.feed(std::string_view(body).substr(split), out));
      CHECK(decoder.done());
      CHECK(out == expected);
      if (trailer) {
        CHECK(decoder.trailers().at("x-amz-checksum-crc32") == "AAAAAA==");
      }
    }
    Decoded d = decode(body, signing(seed), trailer, {1});
    REQUIRE(d.ok);
    CHECK(d.done);
    CHECK(d.payload == expected);
  }
}

TEST_CASE("aws-chunked reports malformed framing as errors, never crashes") {
  const std::vector<std::string> bad = {
      "zz\r\n",                                    // not hex
      "\r\n",                                      // empty size
      "11111111111111111\r\n",                     // 17 hex digits
      "4000001\r\n",                               // > 64 MiB
      "3\r\nabcX\r\n",                             // data not followed by CRLF
      "3\r\nabc\r\r\n",                            // stray CR
      "0\r\nx-amz-checksum-crc32\r\n\r\n",         // trailer without ':'
      "0\r\n:v\r\n\r\n",                           // trailer without a name
      "0\r\na:1\r\na:2\r\n\r\n",                   // repeated trailer
      "0\r\nx-amz-trailer-signature:abc\r\n\r\n",  // signature in an unsigned body
      "0\r\n\r\nmore",                             // data after the end
      std::string(5000, 'a'),                      // over-long size line, no newline
      "0\r\n" + std::string(5000, 'b'),            // over-long trailer line
  };
  for (const std::string& body : bad) {
    for (bool trailer : {false, true}) {
      Decoded d = decode(body, std::nullopt, trailer);
      Decoded d1 = decode(body, std::nullopt, trailer, {1});
      CHECK(d.ok == d1.ok);
      CHECK_FALSE((d.ok && d.done));
    }
  }
  // Too many trailers.
  std::string many = "0\r\n";
  for (int i = 0; i < 20; ++i) {
    many += "x-t" + std::to_string(i) + ":v\r\n";
  }
  CHECK(decode(many + "\r\n", std::nullopt, true).code == S3ErrorCode::kInvalidRequest);
  // An error is sticky.
  AwsChunkedDecoder decoder(std::nullopt, false);
  std::string out;
  CHECK_FALSE(decoder.feed("zz\r\n", out));
  CHECK_FALSE(decoder.feed("0\r\n\r\n", out));
  CHECK_FALSE(decoder.done());
}

TEST_CASE("aws-chunked survives random input in every mode") {
  std::mt19937_64 rng(20240601);
  const std::string alphabet = "0123456789abcdefABCDEF;=:\r\n \t-xzchunk-signature";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string body;
    size_t len = rng() % 200;
    for (size_t i = 0; i < len; ++i) {
      body.push_back(rng() % 4 == 0 ? static_cast<char>(rng() & 0xFF)
                                    : alphabet[rng() % alphabet.size()]);
    }
    bool trailer = rng() % 2;
    bool sign = rng() % 2;
    std::optional<AwsChunkedDecoder::Signing> s;
    if (sign) {
      s = signing(std::string(64, 'a'));
    }
    Decoded d = decode(body, s, trailer, {1 + rng() % 17});
    (void)d;
  }
  // Mutations of the documented body.
  const std::string base = docTrailerBody();
  for (int iter = 0; iter < 200; ++iter) {
    std::string body = base;
    size_t pos = rng() % body.size();
    body[pos] = static_cast<char>(rng() & 0xFF);
    Decoded d = decode(body, signing(std::string(kDocTrailerSeed)), true, {4096});
    if (d.ok && d.done) {
      CHECK(d.payload.size() == 66560);
    }
  }
}

}  // namespace granary::gateway

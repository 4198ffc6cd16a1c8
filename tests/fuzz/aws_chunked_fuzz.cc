// Fuzz target: AwsChunkedDecoder (src/gateway/sigv4.h, aws_chunked.cc), the decoder of
// `Content-Encoding: aws-chunked` request bodies, in its four modes: unsigned chunks, with
// and without trailing headers, and signed chunks (AWS's example signing key and seed
// signatures, "Transferring Payload in Multiple Chunks" and "... Including Trailing
// Headers"), with and without a signed trailer.
// Every input is used twice.
//  1. As a body, decoded in each mode whole, split in two where the first bytes say, and in
//     small pieces. Properties:
//     - the outcome (error code, decoded bytes, done(), trailers) does not depend on how
//       the body is split;
//     - the decoder never returns more bytes than it was given;
//     - a refusal is InvalidRequest, IncompleteBody or SignatureDoesNotMatch, and sticks:
//       feeding a valid end of body afterwards still fails and adds no bytes;
//     - trailers appear only in trailer modes, at most 16, names lower-case and trimmed,
//       values trimmed, no x-amz-trailer-signature among them;
//     - authenticity: a signed body that decodes completely is AWS's example (the only
//       bodies signed with that key): exactly its 66560 bytes of 'a', and its trailer.
//  2. As entropy for a body encoded here the way a client does (payload and chunk sizes from
//     the input, hex sizes in either case and zero-padded, chunk extensions, trailers with
//     spaces and capitals, with and without the optional closing blank line; signatures
//     with sigv4.h's HMAC). Properties:
//     - round trip: decoding it, whole, split in two or in small pieces, gives exactly the
//       payload and trailers encoded, and done();
//     - signed modes: with one to three bytes of it changed, it either fails, stays
//       incomplete, or still decodes to exactly the same payload and trailers.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "sigv4.h"

using granary::fuzz::Reader;
using namespace granary::gateway;

namespace {

constexpr std::string_view kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr std::string_view kAmzDate = "20130524T000000Z";
constexpr std::string_view kScope = "20130524/us-east-1/s3/aws4_request";
constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
// The seed signatures (the Authorization header's) of AWS's two examples.
constexpr std::string_view kExampleSeed =
    "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
constexpr std::string_view kExampleTrailerSeed =
    "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";
constexpr size_t kExamplePayloadBytes = 66560;  // 'a' in both examples
constexpr size_t kMaxTrailers = 16;

std::string_view g_input;  // for failure reports

[[noreturn]] void fail(const char* what) { granary::fuzz::fail("aws_chunked_fuzz", what, g_input); }

struct Mode {
  const char* name;
  bool sign;
  bool trailer;
  std::string_view seed;  // signed modes
};
constexpr Mode kModes[] = {
    {"unsigned", false, false, {}},
    {"unsigned+trailer", false, true, {}},
    {"signed", true, false, kExampleSeed},
    {"signed+trailer", true, true, kExampleTrailerSeed},
};
constexpr size_t kModeCount = std::size(kModes);

// Per mode: inputs that decoded completely as given, bodies encoded here that round-tripped;
// changed signed bodies that were refused or left incomplete.
uint64_t g_raw_done[kModeCount] = {};
uint64_t g_encoded[kModeCount] = {};
uint64_t g_tamper_refused = 0;

const std::array<uint8_t, 32>& signingKey() {
  static const std::array<uint8_t, 32> key =
      deriveSigningKey(kSecret, kScope.substr(0, 8), "us-east-1", "s3");
  return key;
}

std::optional<AwsChunkedDecoder::Signing> signingFor(const Mode& mode) {
  if (!mode.sign) return std::nullopt;
  return AwsChunkedDecoder::Signing{signingKey(), std::string(kAmzDate), std::string(kScope),
                                    std::string(mode.seed)};
}

struct Decoded {
  bool ok = true;
  S3ErrorCode code = S3ErrorCode::kInternalError;  // when !ok
  bool done = false;
  std::string out;
  std::map<std::string, std::string> trailers;

  bool operator==(const Decoded&) const = default;
};

// Feeds `body` as a first piece of `first` bytes, then pieces of `piece` bytes (0: the rest
// at once), stopping at the first error; then checks the error sticks.
Decoded decode(const Mode& mode, std::string_view body, size_t first, size_t piece) {
  AwsChunkedDecoder decoder(signingFor(mode), mode.trailer);
  Decoded d;
  size_t at = 0;
  size_t end = std::min(first, body.size());
  while (true) {
    S3Result<void> r = decoder.feed(body.substr(at, end - at), d.out);
    if (!r) {
      d.ok = false;
      d.code = r.error().code;
      break;
    }
    at = end;
    if (at == body.size()) break;
    end = piece == 0 ? body.size() : std::min(body.size(), at + piece);
  }
  d.done = decoder.done();
  d.trailers = decoder.trailers();
  if (!d.ok) {
    const size_t had = d.out.size();
    S3Result<void> again = decoder.feed("0\r\n\r\n", d.out);
    if (again || again.error().code != d.code) fail("an error does not stick");
    if (d.out.size() != had) fail("a failed decoder still appends bytes");
  }
  return d;
}

bool trimmed(std::string_view s) {
  return s.empty() ||
         (s.front() != ' ' && s.front() != '\t' && s.back() != ' ' && s.back() != '\t');
}

void checkDecoded(const Mode& mode, const Decoded& d, size_t input_bytes) {
  if (d.out.size() > input_bytes) fail("decoded more bytes than were given");
  if (!d.ok && d.code != S3ErrorCode::kInvalidRequest && d.code != S3ErrorCode::kIncompleteBody &&
      d.code != S3ErrorCode::kSignatureDoesNotMatch) {
    fail("refused with an error other than InvalidRequest, IncompleteBody, SignatureDoesNotMatch");
  }
  if (!mode.trailer && !d.trailers.empty()) fail("trailers in a body without trailers");
  if (d.trailers.size() > kMaxTrailers) fail("more than 16 trailers");
  for (const auto& [name, value] : d.trailers) {
    if (name.empty() || !trimmed(name) || !trimmed(value)) fail("a trailer not trimmed");
    if (std::any_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
      fail("a trailer name not lower-case");
    }
    if (name.find('\n') != std::string::npos || value.find('\n') != std::string::npos) {
      fail("a trailer holds a newline");
    }
    if (name == "x-amz-trailer-signature") fail("the trailer signature kept as a trailer");
  }
}

// 1. The input as a body.
void rawBody(std::string_view in) {
  auto at = [&](size_t i) -> size_t { return i < in.size() ? static_cast<uint8_t>(in[i]) : 0; };
  const size_t split = in.size() > 1 ? (at(1) * 257 + at(0)) % (in.size() + 1) : 0;
  // Byte by byte for small bodies; pieces of up to 8 KiB for large ones (AWS's examples).
  const size_t piece = in.size() <= 2048 ? 1 : 1 + at(2) * 32;
  for (size_t m = 0; m < kModeCount; ++m) {
    const Mode& mode = kModes[m];
    const Decoded whole = decode(mode, in, in.size(), 0);
    checkDecoded(mode, whole, in.size());
    if (decode(mode, in, split, 0) != whole) fail("the outcome depends on a split in two");
    if (decode(mode, in, 0, piece) != whole) fail("the outcome depends on the piece size");
    if (!whole.ok || !whole.done) continue;
    ++g_raw_done[m];
    if (!mode.sign) continue;
    // Only AWS's examples are signed with this key: whatever decodes is one of them.
    if (whole.out.size() != kExamplePayloadBytes ||
        whole.out.find_first_not_of('a') != std::string::npos) {
      fail("a signed body decoded to a payload nobody signed");
    }
    const std::map<std::string, std::string> expected_trailers =
        mode.trailer ? std::map<std::string, std::string>{{"x-amz-checksum-crc32c", "sOO8/Q=="}}
                     : std::map<std::string, std::string>{};
    if (whole.trailers != expected_trailers) {
      fail("a signed body decoded to trailers nobody signed");
    }
  }
}

// 2. Bodies encoded here.

std::string hexSize(size_t n, bool upper, size_t zeros) {
  static constexpr char kLower[] = "0123456789abcdef";
  static constexpr char kUpper[] = "0123456789ABCDEF";
  std::string digits;
  do {
    digits.push_back((upper ? kUpper : kLower)[n & 0xF]);
    n >>= 4;
  } while (n != 0);
  std::reverse(digits.begin(), digits.end());
  std::string out(zeros, '0');
  out.append(digits);
  return out;
}

std::string chunkSignature(std::string_view previous, std::string_view data) {
  std::string to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n";
  to_sign.append(kAmzDate).append("\n").append(kScope).append("\n");
  to_sign.append(previous).append("\n").append(kEmptySha256).append("\n").append(sha256Hex(data));
  return hmacSha256Hex(signingKey(), to_sign);
}

std::string trailerSignature(std::string_view previous, std::string_view canonical_trailers) {
  std::string to_sign = "AWS4-HMAC-SHA256-TRAILER\n";
  to_sign.append(kAmzDate).append("\n").append(kScope).append("\n");
  to_sign.append(previous).append("\n").append(sha256Hex(canonical_trailers));
  return hmacSha256Hex(signingKey(), to_sign);
}

struct Encoded {
  std::string body;
  std::string payload;
  std::map<std::string, std::string> trailers;
};

Encoded encodeBody(const Mode& mode, Reader& r) {
  static constexpr std::string_view kTrailerNames[] = {
      "x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-checksum-crc64nvme",
      "x-amz-checksum-sha1",  "x-amz-checksum-sha256", "x-amz-meta-note"};
  static constexpr char kBase64[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  Encoded e;
  const uint8_t style = r.byte();
  const bool upper = (style & 1) != 0;
  const bool extension = (style & 2) != 0 && !mode.sign;  // ";ext=1", as some clients send
  const bool closing_blank_line = (style & 4) != 0;
  e.payload = std::string(r.take(2048));

  // Chunks: sizes from the input, then the final empty chunk.
  std::vector<std::string_view> chunks;
  for (std::string_view rest = e.payload; !rest.empty();) {
    const size_t n = std::min(rest.size(), 1 + r.below(700));
    chunks.push_back(rest.substr(0, n));
    rest.remove_prefix(n);
  }
  chunks.emplace_back();  // the final chunk
  std::string previous(mode.seed);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string_view data = chunks[i];
    const bool final_chunk = i + 1 == chunks.size();
    e.body.append(hexSize(data.size(), upper, r.byte() % 4));
    if (extension) e.body.append(";ext=1");
    if (mode.sign) {
      previous = chunkSignature(previous, data);
      e.body.append(";chunk-signature=").append(previous);
    }
    e.body.append("\r\n").append(data);
    if (!final_chunk || !mode.trailer) e.body.append("\r\n");
  }
  if (!mode.trailer) return e;

  // Trailers: distinct names, base64-looking values.
  const uint8_t mask = r.byte();
  std::string canonical;  // "name:value\n" per trailer, as signed
  for (size_t t = 0; t < std::size(kTrailerNames); ++t) {
    if (((mask >> t) & 1) == 0) continue;
    const uint8_t form = r.byte();
    std::string name(kTrailerNames[t]);
    std::string sent_name = name;
    if ((form & 1) != 0) sent_name[0] = 'X';  // names are case-insensitive
    std::string value;
    for (char c : r.take(16)) value.push_back(kBase64[static_cast<unsigned char>(c) % 64]);
    e.body.append(sent_name).append((form & 2) != 0 ? ": " : ":").append(value).append("\r\n");
    canonical.append(name).append(":").append(value).append("\n");
    e.trailers.emplace(name, value);
  }
  if (mode.sign) {
    e.body.append("x-amz-trailer-signature:").append(trailerSignature(previous, canonical));
    e.body.append("\r\n");
  }
  // The closing blank line may be left out after a signed trailer or unsigned trailer lines.
  if (closing_blank_line || (!mode.sign && e.trailers.empty())) e.body.append("\r\n");
  return e;
}

void encodedBody(Reader& r) {
  const size_t m = r.byte() % kModeCount;
  const Mode& mode = kModes[m];
  const Encoded e = encodeBody(mode, r);
  const size_t split = r.below(e.body.size() + 1);
  const size_t piece = 1 + r.byte() % 64;
  for (const Decoded& d : {decode(mode, e.body, e.body.size(), 0), decode(mode, e.body, split, 0),
                           decode(mode, e.body, 0, piece)}) {
    if (!d.ok) fail("a body encoded like a client's is refused");
    if (!d.done) fail("a body encoded like a client's is not complete");
    if (d.out != e.payload) fail("a body encoded like a client's decodes to another payload");
    if (d.trailers != e.trailers) fail("a body encoded like a client's decodes to other trailers");
  }
  ++g_encoded[m];
  if (!mode.sign || e.body.empty()) return;

  std::string changed = e.body;
  const size_t edits = 1 + r.byte() % 3;
  for (size_t i = 0; i < edits; ++i) {
    const size_t at = r.below(changed.size());
    changed[at] = static_cast<char>(changed[at] ^ (1 + r.byte() % 255));
  }
  const Decoded d = decode(mode, changed, changed.size(), 0);
  checkDecoded(mode, d, changed.size());
  if (!d.ok || !d.done) {
    ++g_tamper_refused;
    return;
  }
  if (d.out != e.payload || d.trailers != e.trailers) {
    fail("a changed signed body decoded completely to another payload or other trailers");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  g_input = in;
  rawBody(in);
  Reader r(in);
  encodedBody(r);
  return 0;
}

// Called by replay_main.cc after a replay (libFuzzer never calls it): fails unless, in every
// mode, some input decoded completely as given and some encoded body round-tripped, and
// some changed signed bodies were refused.
extern "C" int GranaryFuzzSelfCheck() {
  int failed = 0;
  for (size_t m = 0; m < kModeCount; ++m) {
    std::printf("%s: %llu inputs decoded completely, %llu encoded bodies round-tripped\n",
                kModes[m].name, static_cast<unsigned long long>(g_raw_done[m]),
                static_cast<unsigned long long>(g_encoded[m]));
    if (g_raw_done[m] == 0 || g_encoded[m] == 0) failed = 1;
  }
  std::printf("changed signed bodies refused or incomplete: %llu\n",
              static_cast<unsigned long long>(g_tamper_refused));
  if (g_tamper_refused == 0) failed = 1;
  return failed;
}

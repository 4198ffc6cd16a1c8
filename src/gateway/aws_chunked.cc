// Incremental decoder of `Content-Encoding: aws-chunked` request bodies. The wire format is
// AWS's: "Signature Calculations for the Authorization Header: Transferring Payload in
// Multiple Chunks" and "... Including Trailing Headers" (S3 API reference):
//
//   chunk    = hex-size [ ";chunk-signature=" 64HEX ] CRLF data CRLF
//   final    = "0" [ ";chunk-signature=" 64HEX ] CRLF
//   without trailer:  final CRLF
//   with trailer:     final *( name ":" value CRLF ) [ "x-amz-trailer-signature:" 64HEX CRLF ]
//                     CRLF
//
// Chunk signature = HMAC(signing key, "AWS4-HMAC-SHA256-PAYLOAD\n" amz-date "\n" scope "\n"
//   previous-signature "\n" hex(sha256("")) "\n" hex(sha256(data))), chained from the seed
//   (the Authorization header's signature).
// Trailer signature = HMAC(signing key, "AWS4-HMAC-SHA256-TRAILER\n" amz-date "\n" scope "\n"
//   final-chunk-signature "\n" hex(sha256(concat of "name:value\n"))).
//
// Hostile input is bounded: a line is at most kMaxLineBytes, a chunk at most kMaxChunkBytes,
// at most kMaxTrailers trailing headers. Nothing here asserts on input bytes.
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "granary/common/hex.h"
#include "sigv4.h"
#include "uri.h"

namespace granary::gateway {
namespace {

constexpr size_t kMaxLineBytes = 4096;
constexpr uint64_t kMaxChunkBytes = 64ull << 20;
constexpr size_t kMaxTrailers = 16;
constexpr size_t kMaxBlankTrailerLines = 4;
constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

EVP_MD* sha256Md() {
  // Fetched once per process (see sigv4.cc): immutable and thread safe afterwards.
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) {
    std::fprintf(stderr, "granary: OpenSSL failure: EVP_MD_fetch(SHA256)\n");
    std::abort();
  }
  return md;
}

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};



bool isLowerHex64(std::string_view s) {
  if (s.size() != 64) {
    return false;
  }
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

std::unexpected<S3Error> framing(std::string message) {
  return s3fail(S3ErrorCode::kInvalidRequest, "aws-chunked body: " + std::move(message));
}

std::unexpected<S3Error> badSignature(std::string message) {
  return s3fail(S3ErrorCode::kSignatureDoesNotMatch, std::move(message));
}

}  // namespace

struct AwsChunkedDecoder::State {
  enum class Phase {
    kSizeLine,      // reading "hex-size[;ext]\r\n"
    kData,          // copying chunk data
    kDataEnd,       // expecting the CRLF after chunk data
    kTrailers,      // after the final chunk of a trailer body: trailer lines, blank line
    kOptionalCrlf,  // signed trailer verified: a closing blank line may follow
    kEnd,
  };

  std::optional<Signing> signing;
  bool expect_trailer = false;
  Phase phase = Phase::kSizeLine;
  std::string line;  // the current line so far, across feeds
  bool saw_cr = false;
  uint64_t remaining = 0;
  bool final_chunk = false;
  std::string chunk_signature;     // the signature the current chunk claims
  std::string previous_signature;  // the chain: seed, then each chunk's
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> hash;
  std::map<std::string, std::string> trailers;
  std::string trailer_canonical;  // "name:value\n" per trailer, in order received
  size_t blank_trailer_lines = 0;
  std::optional<S3Error> failed;

  // Accumulates bytes up to '\n'. Returns true with the line (CR and LF stripped) once it is
  // complete; false when `in` ran out first. Sets `failed` on an over-long line.
  bool takeLine(std::string_view& in, std::string& out_line) {
    size_t nl = in.find('\n');
    size_t take = nl == std::string_view::npos ? in.size() : nl;
    if (line.size() + take > kMaxLineBytes) {
      failed = S3Error{S3ErrorCode::kInvalidRequest, "aws-chunked body: line too long"};
      return false;
    }
    line.append(in.substr(0, take));
    if (nl == std::string_view::npos) {
      in = {};
      return false;
    }
    in.remove_prefix(nl + 1);
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    out_line = std::move(line);
    line.clear();
    return true;
  }

  S3Result<void> startChunk(std::string_view header) {
    header = trimSpaces(header);
    size_t semi = header.find(';');
    std::string_view size_text = trimSpaces(header.substr(0, semi));
    if (size_text.empty() || size_text.size() > 16) {
      return framing("bad chunk size \"" + std::string(size_text.substr(0, 32)) + "\"");
    }
    uint64_t size = 0;
    for (char c : size_text) {
      int d = hexDigitValue(c);
      if (d < 0) {
        return framing("bad chunk size \"" + std::string(size_text) + "\"");
      }
      size = size * 16 + static_cast<uint64_t>(d);
    }
    if (size > kMaxChunkBytes) {
      return framing("chunk of " + std::to_string(size) + " bytes exceeds the limit");
    }
    chunk_signature.clear();
    std::string_view ext =
        semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (!ext.empty()) {
      size_t next = ext.find(';');
      std::string_view item = trimSpaces(ext.substr(0, next));
      ext = next == std::string_view::npos ? std::string_view() : ext.substr(next + 1);
      size_t eq = item.find('=');
      if (eq != std::string_view::npos && trimSpaces(item.substr(0, eq)) == "chunk-signature") {
        chunk_signature = std::string(trimSpaces(item.substr(eq + 1)));
      }
    }
    if (signing) {
      if (!isLowerHex64(chunk_signature)) {
        return badSignature("aws-chunked chunk has no valid chunk-signature");
      }
      if (!hash) {
        hash.reset(EVP_MD_CTX_new());
      }
      if (!hash || EVP_DigestInit_ex2(hash.get(), sha256Md(), nullptr) != 1) {
        return s3fail(S3ErrorCode::kInternalError, "SHA-256 initialisation failed");
      }
    }
    remaining = size;
    final_chunk = size == 0;
    phase = Phase::kData;
    return finishChunkIfComplete();
  }

  // Once all of a chunk's data is in: check its signature, then move on.
  S3Result<void> finishChunkIfComplete() {
    if (remaining > 0) {
      return {};
    }
    if (signing) {
      unsigned char digest[32];
      unsigned int len = 0;
      if (EVP_DigestFinal_ex(hash.get(), digest, &len) != 1 || len != sizeof(digest)) {
        return s3fail(S3ErrorCode::kInternalError, "SHA-256 failed");
      }
      std::string to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n";
      to_sign.append(signing->amz_date).append("\n").append(signing->scope).append("\n");
      to_sign.append(previous_signature).append("\n").append(kEmptySha256).append("\n");
      to_sign.append(toHex(std::span<const uint8_t>(digest, sizeof(digest))));
      std::string expected = hmacSha256Hex(signing->key, to_sign);
      if (CRYPTO_memcmp(expected.data(), chunk_signature.data(), expected.size()) != 0) {
        return badSignature(
            "The chunk signature we calculated does not match the signature "
            "you provided.");
      }
      previous_signature = std::move(chunk_signature);
      chunk_signature.clear();
    }
    phase = final_chunk && expect_trailer ? Phase::kTrailers : Phase::kDataEnd;
    return {};
  }

  S3Result<void> trailerLine(std::string_view text) {
    if (text.empty()) {
      if (!signing && trailers.empty()) {
        phase = Phase::kEnd;
        return {};
      }
      // Unsigned trailer lines end with a blank line, and minio-go sends two (its
      // Content-Length counts both): the body ends at its Content-Length.
      // Signed trailers end with the trailer signature; tolerate blank lines before it
      // (some clients put one after the final chunk, or before the signature line).
      if (++blank_trailer_lines > kMaxBlankTrailerLines) {
        return framing("too many blank lines in the trailer");
      }
      return {};
    }
    size_t colon = text.find(':');
    if (colon == std::string_view::npos) {
      return framing("malformed trailer line");
    }
    std::string name(trimSpaces(text.substr(0, colon)));
    for (char& c : name) {
      if (c >= 'A' && c <= 'Z') {
        c = static_cast<char>(c - 'A' + 'a');
      }
    }
    std::string_view value = trimSpaces(text.substr(colon + 1));
    if (name.empty()) {
      return framing("malformed trailer line");
    }
    if (name == "x-amz-trailer-signature") {
      if (!signing) {
        return framing("trailer signature in an unsigned body");
      }
      std::string to_sign = "AWS4-HMAC-SHA256-TRAILER\n";
      to_sign.append(signing->amz_date).append("\n").append(signing->scope).append("\n");
      to_sign.append(previous_signature).append("\n").append(sha256Hex(trailer_canonical));
      std::string expected = hmacSha256Hex(signing->key, to_sign);
      if (value.size() != expected.size() ||
          CRYPTO_memcmp(expected.data(), value.data(), expected.size()) != 0) {
        return badSignature(
            "The trailer signature we calculated does not match the "
            "signature you provided.");
      }
      phase = Phase::kOptionalCrlf;
      return {};
    }
    if (trailers.size() >= kMaxTrailers) {
      return framing("too many trailing headers");
    }
    if (!trailers.emplace(name, std::string(value)).second) {
      return framing("repeated trailing header " + name);
    }
    trailer_canonical.append(name).append(":").append(value).append("\n");
    return {};
  }

  S3Result<void> feed(std::string_view in, std::string& out) {
    while (!in.empty()) {
      switch (phase) {
        case Phase::kSizeLine: {
          std::string header;
          if (!takeLine(in, header)) {
            if (failed) {
              return std::unexpected(*failed);
            }
            break;
          }
          if (auto r = startChunk(header); !r) {
            return r;
          }
          break;
        }
        case Phase::kData: {
          size_t n = remaining < in.size() ? static_cast<size_t>(remaining) : in.size();
          out.append(in.data(), n);
          if (signing && EVP_DigestUpdate(hash.get(), in.data(), n) != 1) {
            return s3fail(S3ErrorCode::kInternalError, "SHA-256 failed");
          }
          in.remove_prefix(n);
          remaining -= n;
          if (auto r = finishChunkIfComplete(); !r) {
            return r;
          }
          break;
        }
        case Phase::kDataEnd:
        case Phase::kOptionalCrlf: {
          char c = in.front();
          if (c == '\r' && !saw_cr) {
            saw_cr = true;
            in.remove_prefix(1);
            break;
          }
          if (c != '\n') {
            if (phase == Phase::kOptionalCrlf) {
              return framing("data after the trailer signature");
            }
            return framing("chunk data is not followed by CRLF");
          }
          in.remove_prefix(1);
          saw_cr = false;
          phase = (phase == Phase::kOptionalCrlf || final_chunk) ? Phase::kEnd : Phase::kSizeLine;
          break;
        }
        case Phase::kTrailers: {
          // After an unsigned trailer's blank line only more of them may come.
          if (!signing && blank_trailer_lines > 0 && in.front() != '\r' && in.front() != '\n') {
            return framing("data after the end of the body");
          }
          std::string text;
          if (!takeLine(in, text)) {
            if (failed) {
              return std::unexpected(*failed);
            }
            break;
          }
          if (auto r = trailerLine(text); !r) {
            return r;
          }
          break;
        }
        case Phase::kEnd:
          return framing("data after the end of the body");
      }
    }
    return {};
  }

  bool done() const {
    if (failed) return false;  // whatever phase the error left behind
    switch (phase) {
      case Phase::kEnd:
        return true;
      case Phase::kOptionalCrlf:
        return true;
      case Phase::kTrailers:
        // Unsigned trailers: a client that ends right after its trailer lines, without the
        // closing blank line, has still sent everything.
        return !signing && !trailers.empty() && line.empty();
      default:
        return false;
    }
  }
};

AwsChunkedDecoder::AwsChunkedDecoder(std::optional<Signing> signing, bool expect_trailer)
    : state_(std::make_unique<State>()) {
  if (signing) {
    state_->previous_signature = signing->seed_signature;
  }
  state_->signing = std::move(signing);
  state_->expect_trailer = expect_trailer;
}

AwsChunkedDecoder::~AwsChunkedDecoder() = default;
AwsChunkedDecoder::AwsChunkedDecoder(AwsChunkedDecoder&&) noexcept = default;
AwsChunkedDecoder& AwsChunkedDecoder::operator=(AwsChunkedDecoder&&) noexcept = default;

S3Result<void> AwsChunkedDecoder::feed(std::string_view in, std::string& out) {
  State& s = *state_;
  if (s.failed) {
    return std::unexpected(*s.failed);
  }
  S3Result<void> r = s.feed(in, out);
  if (!r) {
    s.failed = r.error();
  }
  return r;
}

bool AwsChunkedDecoder::done() const { return state_->done(); }

const std::map<std::string, std::string>& AwsChunkedDecoder::trailers() const {
  return state_->trailers;
}

}  // namespace granary::gateway

#include "checksum.h"
#include "granary/common/base64.h"
#include "granary/common/strings.h"

#include <array>

#include "digest.h"
#include "granary/ec/erasure_code.h"

namespace granary::gateway {

namespace {

struct AlgorithmInfo {
  ChecksumAlgorithm alg;
  std::string_view name;
  size_t bytes;
};

constexpr std::array<AlgorithmInfo, 5> kAlgorithms = {{
    {ChecksumAlgorithm::kCrc32, "CRC32", 4},
    {ChecksumAlgorithm::kCrc32c, "CRC32C", 4},
    {ChecksumAlgorithm::kCrc64Nvme, "CRC64NVME", 8},
    {ChecksumAlgorithm::kSha1, "SHA1", 20},
    {ChecksumAlgorithm::kSha256, "SHA256", 32},
}};

const AlgorithmInfo& info(ChecksumAlgorithm alg) {
  for (const auto& a : kAlgorithms) {
    if (a.alg == alg) return a;
  }
  return kAlgorithms[0];
}

std::optional<ChecksumAlgorithm> fromHeaderName(std::string_view header) {
  for (const auto& a : kAlgorithms) {
    if (asciiLower(header) == checksumHeader(a.alg)) return a.alg;
  }
  return std::nullopt;
}

}  // namespace

std::string_view checksumName(ChecksumAlgorithm alg) { return info(alg).name; }

std::string checksumHeader(ChecksumAlgorithm alg) {
  return "x-amz-checksum-" + asciiLower(info(alg).name);
}

bool isCrc(ChecksumAlgorithm alg) {
  return alg == ChecksumAlgorithm::kCrc32 || alg == ChecksumAlgorithm::kCrc32c ||
         alg == ChecksumAlgorithm::kCrc64Nvme;
}

std::optional<ChecksumAlgorithm> checksumFromName(std::string_view name) {
  for (const auto& a : kAlgorithms) {
    if (asciiIEquals(name, a.name)) return a.alg;
  }
  return std::nullopt;
}

S3Result<std::optional<ChecksumAlgorithm>> checksumAlgorithmHeader(const S3Request& req) {
  auto name = req.header("x-amz-checksum-algorithm");
  if (!name) return std::nullopt;
  auto alg = checksumFromName(*name);
  if (!alg) {
    return s3fail(S3ErrorCode::kInvalidRequest,
                  "Checksum algorithm provided is unsupported. Please try again with any of the "
                  "valid types: [CRC32, CRC32C, CRC64NVME, SHA1, SHA256]");
  }
  return alg;
}

S3Result<std::optional<ChecksumAlgorithm>> sdkChecksumAlgorithm(const S3Request& req) {
  auto name = req.header("x-amz-sdk-checksum-algorithm");
  if (!name) return std::optional<ChecksumAlgorithm>();
  auto alg = checksumFromName(*name);
  if (!alg) {
    return s3fail(S3ErrorCode::kInvalidRequest,
                  "Value for x-amz-sdk-checksum-algorithm header is invalid.");
  }
  return alg;
}

namespace {

// A checksum value's bytes: base64 of exactly the algorithm's width, else nullopt.
std::optional<std::vector<uint8_t>> checksumBytes(ChecksumAlgorithm alg, std::string_view b64) {
  auto raw = base64Decode(b64);
  if (!raw || raw->size() != info(alg).bytes) return std::nullopt;
  return raw;
}

std::optional<uint64_t> decodeCrc(ChecksumAlgorithm alg, const std::string& b64) {
  auto raw = checksumBytes(alg, b64);
  if (!raw) return std::nullopt;
  uint64_t v = 0;
  for (uint8_t b : *raw) v = (v << 8) | b;
  return v;
}

std::string encodeCrc(ChecksumAlgorithm alg, uint64_t v) {
  size_t n = info(alg).bytes;
  std::vector<uint8_t> be(n);
  for (size_t i = 0; i < n; ++i) be[i] = static_cast<uint8_t>(v >> (8 * (n - 1 - i)));
  return base64Encode(be);
}

}  // namespace

std::optional<std::string> compositeChecksum(ChecksumAlgorithm alg,
                                             const std::vector<PartChecksum>& parts) {
  Checksummer sum(alg);
  for (const auto& p : parts) {
    auto raw = checksumBytes(alg, p.value);
    if (!raw) return std::nullopt;
    sum.update(std::span<const uint8_t>(*raw));
  }
  return sum.value() + "-" + std::to_string(parts.size());
}

std::optional<std::string> combinedCrc(ChecksumAlgorithm alg,
                                       const std::vector<PartChecksum>& parts) {
  if (!isCrc(alg)) return std::nullopt;
  uint64_t crc = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto v = decodeCrc(alg, parts[i].value);
    if (!v) return std::nullopt;
    if (i == 0) {
      crc = *v;
    } else if (alg == ChecksumAlgorithm::kCrc32) {
      crc = ec::crc32Combine(static_cast<uint32_t>(crc), static_cast<uint32_t>(*v),
                             parts[i].size);
    } else if (alg == ChecksumAlgorithm::kCrc32c) {
      crc = ec::crc32cCombine(static_cast<uint32_t>(crc), static_cast<uint32_t>(*v),
                              parts[i].size);
    } else {
      crc = ec::crc64nvmeCombine(crc, *v, parts[i].size);
    }
  }
  return encodeCrc(alg, crc);
}

S3Result<std::optional<ChecksumRequest>> requestedChecksum(const S3Request& req) {
  std::optional<ChecksumRequest> found;
  for (const auto& [name, value] : req.headers) {
    if (!name.starts_with("x-amz-checksum-") || name == "x-amz-checksum-type" ||
        name == "x-amz-checksum-mode" || name == "x-amz-checksum-algorithm") {
      continue;
    }
    auto alg = fromHeaderName(name);
    if (!alg) {
      return s3fail(S3ErrorCode::kInvalidRequest, "Unknown checksum header " + name);
    }
    if (found) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "Expecting a single x-amz-checksum- header. Multiple checksum Types are "
                    "not allowed.");
    }
    if (!checksumBytes(*alg, value)) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "Value for " + name + " header is invalid.");
    }
    found = ChecksumRequest{*alg, value};
  }
  if (auto trailer = req.header("x-amz-trailer")) {
    auto alg = fromHeaderName(*trailer);
    if (!alg) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "The value specified in the x-amz-trailer header is not supported");
    }
    if (found) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "Expecting a single x-amz-checksum- header. Multiple checksum Types are "
                    "not allowed.");
    }
    found = ChecksumRequest{*alg, std::nullopt};
  }
  return found;
}

std::optional<S3Error> checkChecksum(const std::optional<ChecksumRequest>& want,
                                     const std::string& computed,
                                     const std::map<std::string, std::string>& trailers) {
  // A trailer is the one checksum x-amz-trailer declared: another would go unchecked.
  for (const auto& [name, value] : trailers) {
    if (!want || want->expected || name != checksumHeader(want->algorithm)) {
      return S3Error{S3ErrorCode::kInvalidRequest,
                     "The trailing header " + name + " was not declared in x-amz-trailer."};
    }
  }
  if (!want) return std::nullopt;
  std::string expected;
  if (want->expected) {
    expected = *want->expected;
  } else {
    auto it = trailers.find(checksumHeader(want->algorithm));
    if (it == trailers.end()) {
      return S3Error{S3ErrorCode::kInvalidRequest,
                     "The trailing checksum named by x-amz-trailer was not sent."};
    }
    expected = it->second;
    if (!checksumBytes(want->algorithm, expected)) {
      return S3Error{S3ErrorCode::kInvalidRequest,
                     "Value for " + it->first + " trailing header is invalid."};
    }
  }
  if (expected == computed) return std::nullopt;
  return S3Error{S3ErrorCode::kBadDigest,
                 "The " + std::string(checksumName(want->algorithm)) +
                     " you specified did not match the calculated checksum."};
}

S3Result<std::optional<std::vector<uint8_t>>> requestedContentMd5(const S3Request& req) {
  auto cm = req.header("content-md5");
  if (!cm) return std::nullopt;
  auto md5 = base64Decode(*cm);
  if (!md5 || md5->size() != 16) {
    return s3fail(S3ErrorCode::kInvalidDigest, "The Content-MD5 you specified was invalid.");
  }
  return md5;
}

struct Checksummer::Impl {
  uint64_t crc = 0;
  std::optional<Digest> digest;
};

Checksummer::Checksummer(ChecksumAlgorithm alg) : alg_(alg), impl_(std::make_unique<Impl>()) {
  if (alg == ChecksumAlgorithm::kSha1) impl_->digest.emplace(Digest::Kind::kSha1);
  if (alg == ChecksumAlgorithm::kSha256) impl_->digest.emplace(Digest::Kind::kSha256);
}

Checksummer::~Checksummer() = default;

void Checksummer::update(std::span<const uint8_t> data) {
  switch (alg_) {
    case ChecksumAlgorithm::kCrc32:
      impl_->crc = ec::crc32(data, static_cast<uint32_t>(impl_->crc));
      break;
    case ChecksumAlgorithm::kCrc32c:
      impl_->crc = ec::crc32c(data, static_cast<uint32_t>(impl_->crc));
      break;
    case ChecksumAlgorithm::kCrc64Nvme:
      impl_->crc = ec::crc64nvme(data, impl_->crc);
      break;
    case ChecksumAlgorithm::kSha1:
    case ChecksumAlgorithm::kSha256:
      impl_->digest->update(data);
      break;
  }
}

std::string Checksummer::value() {
  if (impl_->digest) return base64Encode(impl_->digest->finish());
  size_t n = info(alg_).bytes;
  std::vector<uint8_t> be(n);
  for (size_t i = 0; i < n; ++i) be[i] = static_cast<uint8_t>(impl_->crc >> (8 * (n - 1 - i)));
  return base64Encode(be);
}

}  // namespace granary::gateway

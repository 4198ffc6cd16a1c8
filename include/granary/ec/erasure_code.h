// Reed-Solomon erasure coding (ISA-L, systematic Cauchy matrix) and checksums.
//
// Contract: an ErasureCode for (k, m) turns k equally sized data fragments into m parity
// fragments, and rebuilds any <= m missing fragments from any k present ones. Buffers are
// caller-owned; no alignment is required (aligned buffers are faster). Instances are
// immutable after create() and safe to use from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "granary/common/status.h"

namespace granary::ec {

struct EcProfile {
  uint8_t k = 4;  // data fragments per stripe
  uint8_t m = 2;  // parity fragments per stripe
  int total() const { return k + m; }
  bool operator==(const EcProfile&) const = default;
};

inline constexpr int kMaxFragments = 32;  // k + m <= 32 (ISA-L supports up to 255)

class ErasureCode {
 public:
  // kInvalidArgument unless 1 <= k, 0 <= m, k + m <= kMaxFragments.
  static Result<std::unique_ptr<ErasureCode>> create(EcProfile profile);
  virtual ~ErasureCode() = default;

  virtual EcProfile profile() const = 0;

  // data: k pointers to `len` readable bytes; parity: m pointers to `len` writable bytes.
  virtual void encode(size_t len, std::span<const uint8_t* const> data,
                      std::span<uint8_t* const> parity) const = 0;

  // fragments: k + m pointers to `len` bytes each, data first then parity. `present[i]`
  // says whether fragment i holds valid bytes. Missing fragments are rebuilt in place
  // (their buffers must be writable). kInvalidArgument if fewer than k are present.
  virtual Status reconstruct(size_t len, std::span<uint8_t* const> fragments,
                             std::span<const bool> present) const = 0;
  // As reconstruct, but rebuilds only the missing data fragments: a read needs no parity,
  // and each missing parity fragment rebuilt would cost as much as a data one. Missing
  // parity buffers are left as they are.
  virtual Status reconstructData(size_t len, std::span<uint8_t* const> fragments,
                                 std::span<const bool> present) const = 0;
};

// CRC32C (Castagnoli), the standard convention: crc32c("123456789") == 0xE3069283.
// `crc` continues a previous result: crc32c(b, crc32c(a)) == crc32c(a ++ b).
uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc = 0);

// CRC32 (IEEE 802.3, as zlib and gzip): crc32("123456789") == 0xCBF43926. Chains the same way.
uint32_t crc32(std::span<const uint8_t> data, uint32_t crc = 0);

// CRC-64/NVME (reflected polynomial 0x9A6C9329AC4BC9B5, init and final xor all ones), the
// algorithm of S3's x-amz-checksum-crc64nvme: crc64nvme("123456789") == 0xAE8B14860A799888.
// ISA-L 2.30 lacks it; this is a slice-by-8 table implementation. Chains the same way.
uint64_t crc64nvme(std::span<const uint8_t> data, uint64_t crc = 0);

// CRC of a concatenation from the CRCs of its pieces, as zlib's crc32_combine:
// combine(crc(a), crc(b), b.size()) == crc(a ++ b). O(log len_b) GF(2) matrix squarings.
uint32_t crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
uint32_t crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
uint64_t crc64nvmeCombine(uint64_t crc_a, uint64_t crc_b, uint64_t len_b);


}  // namespace granary::ec

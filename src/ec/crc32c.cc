// CRC32C over ISA-L's crc32_iscsi. ISA-L's function neither pre- nor post-inverts, so the
// standard convention (init 0xFFFFFFFF, final xor 0xFFFFFFFF; docs/ec-placement.md) is
// ~crc32_iscsi(buf, n, ~crc); with crc = 0 that is the usual 0xFFFFFFFF seed.
#include <isa-l.h>

#include <algorithm>
#include <cstddef>

#include "granary/ec/erasure_code.h"

namespace granary::ec {

uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc) {
  // crc32_iscsi takes an int length: feed larger buffers in pieces.
  constexpr size_t kMaxPiece = size_t{1} << 30;
  uint32_t state = ~crc;
  const uint8_t* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    size_t n = std::min(left, kMaxPiece);
    // ISA-L's prototype is not const-correct; it only reads the buffer.
    state = crc32_iscsi(const_cast<uint8_t*>(p), static_cast<int>(n), state);
    p += n;
    left -= n;
  }
  return ~state;
}

uint32_t crc32(std::span<const uint8_t> data, uint32_t crc) {
  // crc32_gzip_refl follows zlib's convention (it pre- and post-inverts internally).
  return crc32_gzip_refl(crc, data.data(), data.size());
}

namespace {

constexpr uint64_t kCrc64NvmePoly = 0x9A6C9329AC4BC9B5ull;

struct Crc64Tables {
  uint64_t t[8][256];
  constexpr Crc64Tables() : t() {
    for (uint64_t i = 0; i < 256; ++i) {
      uint64_t c = i;
      for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ kCrc64NvmePoly : c >> 1;
      t[0][i] = c;
    }
    for (int k = 1; k < 8; ++k) {
      for (int i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
  }
};

constexpr Crc64Tables kCrc64 = Crc64Tables();

}  // namespace

uint64_t crc64nvme(std::span<const uint8_t> data, uint64_t crc) {
  uint64_t c = ~crc;
  const uint8_t* p = data.data();
  size_t n = data.size();
  while (n >= 8) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];  // little-endian load
    v ^= c;
    c = kCrc64.t[7][v & 0xFF] ^ kCrc64.t[6][(v >> 8) & 0xFF] ^ kCrc64.t[5][(v >> 16) & 0xFF] ^
        kCrc64.t[4][(v >> 24) & 0xFF] ^ kCrc64.t[3][(v >> 32) & 0xFF] ^
        kCrc64.t[2][(v >> 40) & 0xFF] ^ kCrc64.t[1][(v >> 48) & 0xFF] ^ kCrc64.t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = kCrc64.t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

namespace {

// zlib's crc32_combine, generalised to any reflected CRC of `width` bits with the usual
// all-ones init and final xor (they cancel in the combination). A matrix is `width` columns,
// each the image of one bit of the CRC register; the register is a GF(2) vector.
uint64_t gf2Times(const uint64_t* mat, uint64_t vec) {
  uint64_t sum = 0;
  while (vec != 0) {
    if (vec & 1) sum ^= *mat;
    vec >>= 1;
    ++mat;
  }
  return sum;
}

void gf2Square(uint64_t* square, const uint64_t* mat, int width) {
  for (int n = 0; n < width; ++n) square[n] = gf2Times(mat, mat[n]);
}

uint64_t crcCombine(uint64_t crc_a, uint64_t crc_b, uint64_t len_b, uint64_t poly, int width) {
  if (len_b == 0) return crc_a;
  uint64_t even[64];
  uint64_t odd[64];
  odd[0] = poly;  // the operator for one zero bit
  uint64_t row = 1;
  for (int n = 1; n < width; ++n) {
    odd[n] = row;
    row <<= 1;
  }
  gf2Square(even, odd, width);  // two zero bits
  gf2Square(odd, even, width);  // four zero bits
  // Apply len_b zero bytes to crc_a: square up from one byte, multiply where len_b has a 1.
  do {
    gf2Square(even, odd, width);
    if (len_b & 1) crc_a = gf2Times(even, crc_a);
    len_b >>= 1;
    if (len_b == 0) break;
    gf2Square(odd, even, width);
    if (len_b & 1) crc_a = gf2Times(odd, crc_a);
    len_b >>= 1;
  } while (len_b != 0);
  return crc_a ^ crc_b;
}

}  // namespace

uint32_t crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return static_cast<uint32_t>(crcCombine(crc_a, crc_b, len_b, 0xEDB88320u, 32));
}

uint32_t crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return static_cast<uint32_t>(crcCombine(crc_a, crc_b, len_b, 0x82F63B78u, 32));
}

uint64_t crc64nvmeCombine(uint64_t crc_a, uint64_t crc_b, uint64_t len_b) {
  return crcCombine(crc_a, crc_b, len_b, kCrc64NvmePoly, 64);
}

}  // namespace granary::ec

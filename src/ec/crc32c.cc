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

}  // namespace granary::ec

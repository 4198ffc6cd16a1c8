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

}  // namespace granary::ec

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace granary {

std::string toHex(std::span<const uint8_t> bytes);
// 0-15 for [0-9a-fA-F], -1 otherwise.
int hexDigitValue(char c);
std::optional<std::vector<uint8_t>> fromHex(std::string_view hex);

// Fixed-width big-endian helpers for keys and wire formats.
inline void putBe64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i) { p[i] = static_cast<uint8_t>(v); v >>= 8; }
}
inline uint64_t getBe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}
inline void putBe32(uint8_t* p, uint32_t v) {
  for (int i = 3; i >= 0; --i) { p[i] = static_cast<uint8_t>(v); v >>= 8; }
}
inline uint32_t getBe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace granary

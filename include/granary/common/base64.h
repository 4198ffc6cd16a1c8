// Standard base64 (RFC 4648, with padding), by OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace granary {

std::string base64Encode(std::span<const uint8_t> data);
inline std::string base64Encode(std::string_view bytes) {
  return base64Encode({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}
// nullopt on malformed input: anything but the standard alphabet, '=' other than the
// last one or two characters, or bits after the last byte that are not zero.
std::optional<std::vector<uint8_t>> base64Decode(std::string_view text);

}  // namespace granary

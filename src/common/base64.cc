#include "granary/common/base64.h"

#include <openssl/evp.h>

namespace granary {

std::string base64Encode(std::span<const uint8_t> data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data.data(),
                          static_cast<int>(data.size()));
  out.resize(n);
  return out;
}

std::optional<std::vector<uint8_t>> base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  // EVP_DecodeBlock alone takes too much: whitespace, '=' mid-text, '-' (as zero bits or a
  // silent end). Only the standard alphabet, with '=' as the last one or two characters.
  const size_t pad = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  for (size_t i = 0; i < text.size() - pad; ++i) {
    const char c = text[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
          c == '+' || c == '/')) {
      return std::nullopt;
    }
  }
  std::vector<uint8_t> out(3 * text.size() / 4);
  int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  out.resize(n - pad);
  // The bits after the last byte must be zero ("YR==" is not "YQ==", 'a'): one text per
  // byte string, as a key must be.
  if (pad > 0 && base64Encode(out) != text) return std::nullopt;
  return out;
}

}  // namespace granary

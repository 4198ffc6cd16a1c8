#include "granary/common/random.h"

#include <openssl/rand.h>

#include <stdexcept>

namespace granary {

void SecureRandom::fill(std::span<uint8_t> out) {
  if (out.empty()) return;
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    // The OS CSPRNG failing is not recoverable and not caused by traffic.
    throw std::runtime_error("RAND_bytes failed");
  }
}

std::string randomAlphanumeric(Random& random, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string out;
  uint8_t buf[64];
  while (out.size() < n) {
    random.fill(buf);
    for (uint8_t b : buf) {
      if (b < 248 && out.size() < n) out += kAlphabet[b % 62];  // 248 = 4 * 62: no bias
    }
  }
  return out;
}

}  // namespace granary

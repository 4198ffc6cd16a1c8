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

}  // namespace granary

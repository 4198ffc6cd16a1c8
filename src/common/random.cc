#include "granary/common/random.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <array>
#include <cstring>
#include <stdexcept>

namespace granary {

namespace {

void randBytes(std::span<uint8_t> out) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    // The OS CSPRNG failing is not recoverable and not caused by traffic.
    throw std::runtime_error("RAND_bytes failed");
  }
}

}  // namespace

// Small draws (a version id's 8 bytes on every PUT, ids of uploads and requests) come from
// a per-thread block that one RAND_bytes fills: each RAND_bytes call of OpenSSL 3 costs
// a provider lookup, a lock and a getpid (its fork check), 2.6% of a 4 KiB PUT server's
// CPU when made once a PUT (docs/benchmarks.md). Bytes handed out are wiped from the
// block. The block is not fork-safe; granary never forks.
void SecureRandom::fill(std::span<uint8_t> out) {
  constexpr size_t kBlock = 256;
  constexpr size_t kSmall = 32;
  if (out.empty()) return;
  if (out.size() > kSmall) return randBytes(out);
  struct Pool {
    std::array<uint8_t, kBlock> bytes{};
    size_t used = kBlock;
    ~Pool() { OPENSSL_cleanse(bytes.data(), bytes.size()); }
  };
  thread_local Pool pool;
  if (kBlock - pool.used < out.size()) {
    randBytes(pool.bytes);
    pool.used = 0;
  }
  uint8_t* from = pool.bytes.data() + pool.used;
  std::memcpy(out.data(), from, out.size());
  OPENSSL_cleanse(from, out.size());
  pool.used += out.size();
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

// Random: injected randomness. Production uses the OS CSPRNG; tests use a seeded engine
// so every run can be replayed. Thread safety: SecureRandom is safe from any thread;
// SeededRandom is not (one per test).
#pragma once

#include <cstdint>
#include <mutex>
#include <random>
#include <span>
#include <string>

namespace granary {

class Random {
 public:
  virtual ~Random() = default;
  virtual void fill(std::span<uint8_t> out) = 0;
  uint64_t next64() {
    uint64_t v = 0;
    fill({reinterpret_cast<uint8_t*>(&v), sizeof v});
    return v;
  }
};

class SecureRandom final : public Random {
 public:
  void fill(std::span<uint8_t> out) override;  // OpenSSL RAND_bytes
};

class SeededRandom final : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : engine_(seed) {}
  void fill(std::span<uint8_t> out) override {
    for (auto& b : out) b = static_cast<uint8_t>(engine_());
  }

 private:
  std::mt19937_64 engine_;
};

// n characters from [A-Za-z0-9], uniformly (access keys, secrets).
std::string randomAlphanumeric(Random& random, size_t n);

}  // namespace granary

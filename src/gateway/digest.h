// Streaming message digests (OpenSSL EVP), for ETags (MD5), payload hashes (SHA-256).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace granary::gateway {

class Digest {
 public:
  enum class Kind { kMd5, kSha1, kSha256 };
  explicit Digest(Kind kind);
  ~Digest();
  Digest(Digest&&) noexcept;
  Digest& operator=(Digest&&) noexcept;

  void update(std::span<const uint8_t> data);
  void update(std::string_view data) {
    update({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
  }
  std::vector<uint8_t> finish();  // once

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace granary::gateway

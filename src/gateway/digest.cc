#include "digest.h"

#include <openssl/evp.h>

#include <optional>
#include <stdexcept>

namespace granary::gateway {

namespace {
// Fetched once: EVP_MD_fetch per call is measurably slow (TOOLCHAIN.md).
const EVP_MD* md(Digest::Kind kind) {
  static EVP_MD* md5 = EVP_MD_fetch(nullptr, "MD5", nullptr);
  static EVP_MD* sha1 = EVP_MD_fetch(nullptr, "SHA1", nullptr);
  static EVP_MD* sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  switch (kind) {
    case Digest::Kind::kMd5: return md5;
    case Digest::Kind::kSha1: return sha1;
    case Digest::Kind::kSha256: return sha256;
  }
  return sha256;
}
}  // namespace

struct Digest::Impl {
  EVP_MD_CTX* ctx = nullptr;
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Digest::Digest(Kind kind) : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (!impl_->ctx || EVP_DigestInit_ex2(impl_->ctx, md(kind), nullptr) != 1) {
    throw std::runtime_error("EVP_DigestInit failed");  // start-up class failure
  }
}
Digest::~Digest() = default;
Digest::Digest(Digest&&) noexcept = default;
Digest& Digest::operator=(Digest&&) noexcept = default;

void Digest::update(std::span<const uint8_t> data) {
  // Neither fails on a context Init accepted; were one to, an empty or partial digest must
  // not become an ETag or pass a Content-MD5 check, so it is an error (InternalError).
  if (!data.empty() && EVP_DigestUpdate(impl_->ctx, data.data(), data.size()) != 1) {
    throw std::runtime_error("EVP_DigestUpdate failed");
  }
}

std::vector<uint8_t> Digest::finish() {
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, out.data(), &n) != 1) {
    throw std::runtime_error("EVP_DigestFinal failed");
  }
  out.resize(n);
  return out;
}

}  // namespace granary::gateway

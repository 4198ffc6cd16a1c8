// Reed-Solomon over GF(2^8) with ISA-L. The generator is ISA-L's systematic Cauchy matrix
// (gf_gen_cauchy1_matrix): rows 0..k-1 are the identity (fragments 0..k-1 are the data
// itself), rows k..k+m-1 produce parity. Every k x k submatrix of it is invertible, so any k
// fragments rebuild the rest. The layout is written down in docs/ec-placement.md.
#include "granary/ec/erasure_code.h"

#include <isa-l.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace granary::ec {
namespace {

using PtrArray = std::array<uint8_t*, kMaxFragments>;

// ec_encode_data takes an int length: process larger buffers in pieces.
void encodeChunked(size_t len, int k, int rows, const std::vector<uint8_t>& tables,
                   const PtrArray& src, const PtrArray& dst) {
  constexpr size_t kMaxPiece = size_t{1} << 30;
  PtrArray s = src;
  PtrArray d = dst;
  size_t done = 0;
  while (done < len) {
    size_t n = std::min(len - done, kMaxPiece);
    for (int i = 0; i < k; ++i) s[i] = src[i] + done;
    for (int i = 0; i < rows; ++i) d[i] = dst[i] + done;
    // ISA-L only reads the tables and the sources; its prototype is not const-correct.
    ec_encode_data(static_cast<int>(n), k, rows, const_cast<uint8_t*>(tables.data()), s.data(),
                   d.data());
    done += n;
  }
}

// Wrong span sizes are a programming error in the caller, not bad input: crash loudly.
void checkOrDie(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "granary::ec: %s\n", what);
    std::abort();
  }
}

class IsalErasureCode final : public ErasureCode {
 public:
  explicit IsalErasureCode(EcProfile profile) : profile_(profile) {
    const int k = profile_.k;
    const int n = profile_.total();
    matrix_.resize(static_cast<size_t>(n) * k);
    gf_gen_cauchy1_matrix(matrix_.data(), n, k);
    if (profile_.m > 0) {
      encode_tables_.resize(32 * static_cast<size_t>(k) * profile_.m);
      ec_init_tables(k, profile_.m, matrix_.data() + static_cast<size_t>(k) * k,
                     encode_tables_.data());
    }
  }

  EcProfile profile() const override { return profile_; }

  void encode(size_t len, std::span<const uint8_t* const> data,
              std::span<uint8_t* const> parity) const override {
    checkOrDie(data.size() == size_t{profile_.k}, "encode: data needs k pointers");
    checkOrDie(parity.size() == size_t{profile_.m}, "encode: parity needs m pointers");
    if (profile_.m == 0 || len == 0) return;
    PtrArray src{};
    PtrArray dst{};
    for (size_t i = 0; i < data.size(); ++i) src[i] = const_cast<uint8_t*>(data[i]);
    std::copy(parity.begin(), parity.end(), dst.begin());
    encodeChunked(len, profile_.k, profile_.m, encode_tables_, src, dst);
  }

  Status reconstruct(size_t len, std::span<uint8_t* const> fragments,
                     std::span<const bool> present) const override {
    return rebuild(len, fragments, present, /*data_only=*/false);
  }
  Status reconstructData(size_t len, std::span<uint8_t* const> fragments,
                         std::span<const bool> present) const override {
    return rebuild(len, fragments, present, /*data_only=*/true);
  }

 private:
  Status rebuild(size_t len, std::span<uint8_t* const> fragments, std::span<const bool> present,
                 bool data_only) const;

  EcProfile profile_;
  std::vector<uint8_t> matrix_;         // (k + m) x k generator, row-major
  std::vector<uint8_t> encode_tables_;  // ec_init_tables of the m parity rows
};

Status IsalErasureCode::rebuild(size_t len, std::span<uint8_t* const> fragments,
                                std::span<const bool> present, bool data_only) const {
  const int k = profile_.k;
  const int n = profile_.total();
  if (fragments.size() != static_cast<size_t>(n) || present.size() != static_cast<size_t>(n)) {
    return Status::invalidArgument("reconstruct: need k + m fragments and flags, got " +
                                   std::to_string(fragments.size()) + " and " +
                                   std::to_string(present.size()));
  }
  std::vector<int> sources;
  std::vector<int> missing;
  for (int i = 0; i < n; ++i) {
    if (!present[i]) {
      if (!data_only || i < k) missing.push_back(i);
    } else if (static_cast<int>(sources.size()) < k) {
      sources.push_back(i);
    }
  }
  if (static_cast<int>(sources.size()) < k) {
    return Status::invalidArgument("reconstruct: " + std::to_string(sources.size()) +
                                   " fragments present, need " + std::to_string(k));
  }
  if (missing.empty() || len == 0) return Status::ok();

  // The k present fragments are B * data, with B the generator rows of the sources, so
  // data = B^-1 * sources. A missing data fragment i is row i of B^-1; a missing parity
  // fragment i is generator row i times B^-1.
  const size_t kk = static_cast<size_t>(k);
  std::vector<uint8_t> b(kk * kk);
  std::vector<uint8_t> inv(kk * kk);
  for (size_t r = 0; r < kk; ++r) {
    std::copy_n(matrix_.data() + sources[r] * kk, kk, b.data() + r * kk);
  }
  if (gf_invert_matrix(b.data(), inv.data(), k) != 0) {
    return Status::internal("reconstruct: decode matrix is singular");
  }
  std::vector<uint8_t> rows(missing.size() * kk);
  for (size_t e = 0; e < missing.size(); ++e) {
    uint8_t* row = rows.data() + e * kk;
    const size_t idx = static_cast<size_t>(missing[e]);
    if (idx < kk) {
      std::copy_n(inv.data() + idx * kk, kk, row);
      continue;
    }
    const uint8_t* gen = matrix_.data() + idx * kk;
    for (size_t j = 0; j < kk; ++j) {
      uint8_t acc = 0;
      for (size_t t = 0; t < kk; ++t) acc ^= gf_mul(gen[t], inv[t * kk + j]);
      row[j] = acc;
    }
  }
  const int nmissing = static_cast<int>(missing.size());
  std::vector<uint8_t> tables(32 * kk * missing.size());
  ec_init_tables(k, nmissing, rows.data(), tables.data());
  PtrArray src{};
  PtrArray dst{};
  for (int i = 0; i < k; ++i) src[i] = fragments[sources[i]];
  for (int i = 0; i < nmissing; ++i) dst[i] = fragments[missing[i]];
  encodeChunked(len, k, nmissing, tables, src, dst);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<ErasureCode>> ErasureCode::create(EcProfile profile) {
  if (profile.k < 1 || profile.total() > kMaxFragments) {
    return fail(Status::invalidArgument(
        "invalid EC profile k=" + std::to_string(profile.k) + " m=" + std::to_string(profile.m) +
        ": need 1 <= k and k + m <= " + std::to_string(kMaxFragments)));
  }
  return std::unique_ptr<ErasureCode>(new IsalErasureCode(profile));
}

}  // namespace granary::ec

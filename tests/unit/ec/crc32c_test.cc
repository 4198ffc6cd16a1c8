#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "granary/ec/erasure_code.h"

using granary::ec::crc32c;

namespace {

std::span<const uint8_t> bytes(const char* s) {
  return {reinterpret_cast<const uint8_t*>(s), std::strlen(s)};
}

}  // namespace

TEST_CASE("crc32c matches the standard check value and the RFC 3720 vectors") {
  CHECK(crc32c(bytes("123456789")) == 0xE3069283u);
  CHECK(crc32c({}) == 0u);
  std::vector<uint8_t> zeros(32, 0x00);
  std::vector<uint8_t> ones(32, 0xFF);
  std::vector<uint8_t> ascending(32);
  std::iota(ascending.begin(), ascending.end(), uint8_t{0});
  CHECK(crc32c(zeros) == 0x8A9136AAu);
  CHECK(crc32c(ones) == 0x62A8AB43u);
  CHECK(crc32c(ascending) == 0x46DD794Eu);
}

TEST_CASE("crc32c continues a previous result at every split point") {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  const uint32_t whole = crc32c(data);
  std::span<const uint8_t> all(data);
  for (size_t cut = 0; cut <= data.size(); ++cut) {
    uint32_t first = crc32c(all.first(cut));
    REQUIRE(crc32c(all.subspan(cut), first) == whole);
  }
  // Three pieces, and an empty continuation leaves the value alone.
  uint32_t c = crc32c(all.first(10));
  c = crc32c(all.subspan(10, 500), c);
  c = crc32c({}, c);
  c = crc32c(all.subspan(510), c);
  CHECK(c == whole);
}

TEST_CASE("crc32c detects a single flipped bit") {
  std::vector<uint8_t> data(4096, 0x5A);
  const uint32_t before = crc32c(data);
  data[1234] ^= 0x10;
  CHECK(crc32c(data) != before);
}

TEST_CASE("CRC32 (IEEE) matches the zlib check value and chains like one pass") {
  const std::string check = "123456789";
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(check.data()), check.size());
  CHECK(granary::ec::crc32(bytes) == 0xCBF43926u);
  uint32_t part = granary::ec::crc32(bytes.first(4));
  CHECK(granary::ec::crc32(bytes.subspan(4), part) == 0xCBF43926u);
  CHECK(granary::ec::crc32({}) == 0u);
}

TEST_CASE("CRC64-NVME matches its check value and chains at every split point") {
  const std::string check = "123456789";
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(check.data()), check.size());
  CHECK(granary::ec::crc64nvme(bytes) == 0xAE8B14860A799888ull);
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  const uint64_t whole = granary::ec::crc64nvme(data);
  for (size_t split = 0; split <= data.size(); split += 37) {
    std::span<const uint8_t> all(data);
    uint64_t a = granary::ec::crc64nvme(all.first(split));
    CHECK(granary::ec::crc64nvme(all.subspan(split), a) == whole);
  }
  data[500] ^= 1;
  CHECK(granary::ec::crc64nvme(data) != whole);
}

TEST_CASE("CRC combine equals the CRC of the concatenation at many splits") {
  using granary::ec::crc32;
  using granary::ec::crc32Combine;
  using granary::ec::crc32cCombine;
  using granary::ec::crc64nvme;
  using granary::ec::crc64nvmeCombine;
  std::vector<uint8_t> data(3000);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  std::span<const uint8_t> all(data);
  const uint64_t whole64 = crc64nvme(all);
  const uint32_t whole32 = crc32(all);
  const uint32_t whole32c = crc32c(all);
  for (size_t cut = 0; cut <= data.size(); cut += (cut < 70 ? 1 : 37)) {
    auto a = all.first(cut);
    auto b = all.subspan(cut);
    REQUIRE(crc64nvmeCombine(crc64nvme(a), crc64nvme(b), b.size()) == whole64);
    REQUIRE(crc32Combine(crc32(a), crc32(b), b.size()) == whole32);
    REQUIRE(crc32cCombine(crc32c(a), crc32c(b), b.size()) == whole32c);
  }
  // Many pieces folded left to right, as multipart completion does.
  uint64_t folded = 0;
  size_t pos = 0;
  for (size_t piece = 1; pos < data.size(); piece = piece * 3 + 1) {
    size_t n = std::min(piece, data.size() - pos);
    auto p = all.subspan(pos, n);
    folded = pos == 0 ? crc64nvme(p) : crc64nvmeCombine(folded, crc64nvme(p), n);
    pos += n;
  }
  CHECK(folded == whole64);
  // Large lengths of zeros: combine with a 5 MiB zero piece.
  std::vector<uint8_t> zeros(5 << 20, 0);
  std::vector<uint8_t> cat(data.begin(), data.end());
  cat.insert(cat.end(), zeros.begin(), zeros.end());
  CHECK(crc64nvmeCombine(whole64, crc64nvme(zeros), zeros.size()) == crc64nvme(cat));
  CHECK(crc32Combine(whole32, crc32(zeros), zeros.size()) == crc32(cat));
}

#include "granary/common/ids.h"

#include <fmt/core.h>

#include <algorithm>

#include "granary/common/clock.h"
#include "granary/common/hex.h"
#include "granary/common/random.h"

namespace granary {

VersionId VersionId::generate(const Clock& clock, Random& random) {
  VersionId id;
  putBe64(id.bytes.data(), static_cast<uint64_t>(clock.nowUnixNanos()));
  random.fill(std::span<uint8_t>(id.bytes.data() + 8, 8));
  return id;
}

Result<VersionId> VersionId::fromHex(std::string_view hex) {
  auto raw = granary::fromHex(hex);
  if (!raw || raw->size() != 16) return fail(Status::invalidArgument("bad version id"));
  return fromBytes(*raw);
}

Result<VersionId> VersionId::fromBytes(std::span<const uint8_t> b) {
  if (b.size() != 16) return fail(Status::invalidArgument("version id must be 16 bytes"));
  VersionId id;
  std::copy(b.begin(), b.end(), id.bytes.begin());
  return id;
}

std::string VersionId::toHex() const { return granary::toHex(bytes); }

int64_t VersionId::createdUnixNanos() const {
  return static_cast<int64_t>(getBe64(bytes.data()));
}

bool VersionId::isZero() const {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

std::array<uint8_t, BlobId::kEncodedSize> BlobId::encode() const {
  std::array<uint8_t, kEncodedSize> out{};
  std::copy(version.bytes.begin(), version.bytes.end(), out.begin());
  putBe32(out.data() + 16, stripe);
  out[20] = static_cast<uint8_t>(fragment >> 8);
  out[21] = static_cast<uint8_t>(fragment);
  return out;
}

Result<BlobId> BlobId::decode(std::span<const uint8_t> b) {
  if (b.size() != kEncodedSize) return fail(Status::corruption("blob id must be 22 bytes"));
  BlobId id;
  std::copy(b.begin(), b.begin() + 16, id.version.bytes.begin());
  id.stripe = getBe32(b.data() + 16);
  id.fragment = static_cast<uint16_t>(b[20] << 8 | b[21]);
  return id;
}

std::string BlobId::toString() const {
  return fmt::format("{}.{}.{}", version.toHex(), stripe, fragment);
}

}  // namespace granary

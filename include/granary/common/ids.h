// Identifiers shared by all components.
//
// VersionId: 16 bytes naming one stored version of an object (or of a multipart part).
// Bytes 0-7 are the big-endian creation time in Unix nanoseconds, bytes 8-15 are random,
// so ids sort by creation time and never collide in practice. A new version id is minted
// for every PUT; blobs (fragments) are named by (version id, stripe, fragment index).
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "granary/common/status.h"

namespace granary {

class Clock;
class Random;

struct VersionId {
  std::array<uint8_t, 16> bytes{};

  static VersionId generate(const Clock& clock, Random& random);
  static Result<VersionId> fromHex(std::string_view hex);
  static Result<VersionId> fromBytes(std::span<const uint8_t> b);
  std::string toHex() const;
  int64_t createdUnixNanos() const;
  bool isZero() const;
  // Granary's own blobs (index checkpoints) have versions whose first four bytes are all
  // 0xff. An object version starts with its creation time in big-endian Unix nanoseconds,
  // which reaches that only in the year 2554; system versions sort after every object's.
  bool isSystem() const {
    return bytes[0] == 0xff && bytes[1] == 0xff && bytes[2] == 0xff && bytes[3] == 0xff;
  }
  auto operator<=>(const VersionId&) const = default;
};

// Names one fragment of one stripe of one object version: the unit the chunk store stores.
struct BlobId {
  VersionId version;
  uint32_t stripe = 0;
  uint16_t fragment = 0;

  static constexpr size_t kEncodedSize = 22;
  // Big-endian fixed-width encoding (sorts by version, stripe, fragment).
  std::array<uint8_t, kEncodedSize> encode() const;
  static Result<BlobId> decode(std::span<const uint8_t> b);
  std::string toString() const;  // "<version hex>.<stripe>.<fragment>"
  auto operator<=>(const BlobId&) const = default;
};

}  // namespace granary

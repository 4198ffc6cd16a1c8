// The per-format scanners behind ContainerParser (private to granary_containers).
//
// A scanner sees the container from its first byte on (the parser replays the bytes it
// buffered while sniffing), tracks container offsets itself, and reports errors with
// positions. It does not need to be sticky: ContainerParser stops calling it after an error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/index_kv/container_parser.h"

namespace granary::index_kv {

// Message prefix of the "well-formed but cannot be read at offsets" errors.
inline constexpr std::string_view kNotIndexablePrefix = "not indexable: ";

inline Status notIndexable(std::string_view why) {
  return Status::invalidArgument(std::string(kNotIndexablePrefix) + std::string(why));
}

class FormatScanner {
 public:
  virtual ~FormatScanner() = default;
  virtual Status feed(std::span<const uint8_t> data, std::vector<ParsedRecord>& out) = 0;
  virtual Status finish(std::vector<ParsedRecord>& out) = 0;
  // The format as far as known (a warc.gz scanner still sniffing says kAuto).
  virtual ContainerFormat format() const = 0;
};

std::unique_ptr<FormatScanner> makeTarScanner(const ParserOptions& options);
std::unique_ptr<FormatScanner> makeWarcScanner(const ParserOptions& options);
// `sniffing`: the format was not given; a first member that does not hold WARC is then
// "not indexable" (a .tgz) rather than malformed.
std::unique_ptr<FormatScanner> makeWarcGzScanner(const ParserOptions& options, bool sniffing);

// For sniffing: a 512-byte block with a valid tar header checksum, or all zeros.
bool looksLikeTarHeader(std::span<const uint8_t, 512> block);

}  // namespace granary::index_kv

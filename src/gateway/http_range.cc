// Range header parsing. S3 follows RFC 9110 for a single byte range and ignores what it
// cannot use (serving the full object): malformed headers, other units, multiple ranges.
#include "http_range.h"

#include "uri.h"

#include <limits>
#include <optional>

namespace granary::gateway {
namespace {


// Decimal digits only; saturates at UINT64_MAX so that a huge position still compares as
// "beyond the end" instead of wrapping.
std::optional<uint64_t> parseDecimal(std::string_view s) {
  if (s.empty()) {
    return std::nullopt;
  }
  uint64_t v = 0;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (char c : s) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    auto d = static_cast<uint64_t>(c - '0');
    v = v > (kMax - d) / 10 ? kMax : v * 10 + d;
  }
  return v;
}

bool startsWithBytesUnit(std::string_view s) {
  static constexpr std::string_view kUnit = "bytes";
  if (s.size() < kUnit.size()) {
    return false;
  }
  for (size_t i = 0; i < kUnit.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    if (c != kUnit[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

RangeResult parseRange(std::string_view header, uint64_t object_size) {
  RangeResult none;
  std::string_view h = trimSpaces(header);
  if (!startsWithBytesUnit(h)) {
    return none;
  }
  h = trimSpaces(h.substr(5));
  if (h.empty() || h.front() != '=') {
    return none;
  }
  h = trimSpaces(h.substr(1));
  if (h.find(',') != std::string_view::npos) {
    return none;  // multiple ranges: S3 serves the whole object
  }
  size_t dash = h.find('-');
  if (dash == std::string_view::npos) {
    return none;
  }
  std::string_view first_text = trimSpaces(h.substr(0, dash));
  std::string_view last_text = trimSpaces(h.substr(dash + 1));

  RangeResult unsatisfiable;
  unsatisfiable.kind = RangeResult::Kind::kUnsatisfiable;

  if (first_text.empty()) {  // suffix range: the last n bytes
    std::optional<uint64_t> n = parseDecimal(last_text);
    if (!n) {
      return none;
    }
    if (*n == 0) {
      return unsatisfiable;
    }
    if (object_size == 0) {
      // RFC 9110 14.1.1: a non-zero suffix is the one range an empty representation
      // satisfies; S3 answers it 200 with the empty body (tail readers of Parquet footers
      // send it to any object).
      return none;
    }
    uint64_t length = *n < object_size ? *n : object_size;
    return {RangeResult::Kind::kSatisfiable, {object_size - length, length}};
  }

  std::optional<uint64_t> first = parseDecimal(first_text);
  if (!first) {
    return none;
  }
  uint64_t last = object_size == 0 ? 0 : object_size - 1;
  if (!last_text.empty()) {
    std::optional<uint64_t> l = parseDecimal(last_text);
    if (!l || *l < *first) {
      return none;  // RFC 9110 14.1.1: an invalid range-spec makes the header ignored
    }
    if (*l < last) {
      last = *l;
    }
  }
  if (*first >= object_size) {
    return unsatisfiable;
  }
  return {RangeResult::Kind::kSatisfiable, {*first, last - *first + 1}};
}

}  // namespace granary::gateway

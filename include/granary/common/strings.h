// Small ASCII string helpers shared by the HTTP and container-format parsers.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace granary {

// Strips leading and trailing spaces and tabs (header values, chunk extensions).
inline std::string_view trimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Strips leading and trailing ASCII whitespace, line ends included (XML text).
inline std::string_view trimWhitespace(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// ASCII case-insensitive equality (header names and values, ETags' hex digits); bytes
// outside A-Z compare exactly, whatever the locale.
inline bool asciiIEquals(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [&](char x, char y) { return lower(x) == lower(y); });
}

// A copy with A-Z lower-cased, whatever the locale (header and form field names).
inline std::string asciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return out;
}

// A decimal unsigned 64-bit number and nothing else (no sign, no blanks), else nullopt.
inline std::optional<uint64_t> parseDecimalU64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// One or more ASCII digits, nothing else.
inline bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Well-formed UTF-8: no stray continuation bytes, truncated sequences or over-long
// two-byte forms (the key of every request, tags). Surrogates, over-long three- and
// four-byte forms and code points past U+10FFFF are not checked: keys holding them were
// stored, and a stricter check on every request would leave those objects unreadable. A
// key a request creates is held to strictUtf8 (checkNewObjectKey).
inline bool validUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2
                       : (c & 0xF8) == 0xF0 ? 3 : 4;
    if (extra == 4 || (extra > 0 && (c == 0xC0 || c == 0xC1))) return false;
    if (i + extra >= s.size() && extra > 0) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

// The length of the RFC 3629 UTF-8 sequence (Unicode's table 3-7) that starts at s[i]:
// 1 to 4 bytes, or 0 where none does (a continuation byte, an over-long form, a surrogate,
// a code point past U+10FFFF, a truncated sequence). i < s.size().
inline size_t strictUtf8SequenceLength(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t extra = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    extra = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    extra = 2;
    if (c == 0xE0) lo = 0xA0;  // over-long
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    extra = 3;
    if (c == 0xF0) lo = 0x90;  // over-long
    if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;  // a continuation byte, C0/C1 (over-long) or F5..FF
  }
  if (s.size() - i <= extra) return 0;
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if (second < lo || second > hi) return 0;
  for (size_t k = 2; k <= extra; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return extra + 1;
}

// UTF-8 as RFC 3629 has it: validUtf8, and no over-long three- or four-byte forms,
// surrogates (U+D800..DFFF) or code points past U+10FFFF. What a JSON string carries
// exactly (record keys in JSON answers).
inline bool strictUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = strictUtf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace granary

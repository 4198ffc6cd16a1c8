// Small ASCII string helpers shared by the HTTP and container-format parsers.
#pragma once

#include <algorithm>
#include <cstddef>
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

// One or more ASCII digits, nothing else.
inline bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Well-formed UTF-8: no stray continuation bytes, truncated sequences or over-long
// two-byte forms (keys, tags). Surrogates and code points past U+10FFFF are not checked.
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

}  // namespace granary

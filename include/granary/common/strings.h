// Small ASCII string helpers shared by the HTTP and container-format parsers.
#pragma once

#include <algorithm>
#include <string_view>

namespace granary {

// Strips leading and trailing spaces and tabs (header values, chunk extensions).
inline std::string_view trimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// ASCII case-insensitive equality (header names and values, ETags' hex digits); bytes
// outside A-Z compare exactly, whatever the locale.
inline bool asciiIEquals(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [&](char x, char y) { return lower(x) == lower(y); });
}

}  // namespace granary

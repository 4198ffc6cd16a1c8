#include "uri.h"

#include <algorithm>
#include <cctype>

#include "granary/common/hex.h"

namespace granary::gateway {
namespace {


bool isUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

}  // namespace

std::optional<std::string> percentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) {
        return std::nullopt;
      }
      int hi = hexDigitValue(s[i + 1]);
      int lo = hexDigitValue(s[i + 2]);
      if (hi < 0 || lo < 0) {
        return std::nullopt;
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string uriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (isUnreserved(c) || (c == '/' && !encode_slash)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parseQueryRaw(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view segment = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (segment.empty()) {
      continue;
    }
    size_t eq = segment.find('=');
    if (eq == std::string_view::npos) {
      out.emplace_back(std::string(segment), std::string());
    } else {
      out.emplace_back(std::string(segment.substr(0, eq)), std::string(segment.substr(eq + 1)));
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parseQuery(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out = parseQueryRaw(query);
  for (auto& [name, value] : out) {
    if (auto n = percentDecode(name, true)) {
      name = std::move(*n);
    }
    if (auto v = percentDecode(value, true)) {
      value = std::move(*v);
    }
  }
  return out;
}

std::pair<std::string_view, std::string_view> splitTarget(std::string_view target) {
  // Absolute-form (RFC 9112 3.2.2): drop "scheme://authority".
  size_t scheme_end = target.find("://");
  if (scheme_end != std::string_view::npos && target.find('/') > scheme_end &&
      target.find('?') > scheme_end) {
    size_t path_start = target.find_first_of("/?", scheme_end + 3);
    target = path_start == std::string_view::npos ? std::string_view() : target.substr(path_start);
  }
  size_t q = target.find('?');
  if (q == std::string_view::npos) {
    return {target, std::string_view()};
  }
  return {target.substr(0, q), target.substr(q + 1)};
}

}  // namespace granary::gateway

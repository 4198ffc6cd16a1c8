// What HTTP (RFC 9110) allows in a header: checks for text that ends up in one, whether a
// response header carrying stored settings or request parameters, or a form field
// becoming an object's header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace granary::gateway {

// A field value's characters: anything but a control character, TAB excepted (CR or LF
// would split the message).
inline bool headerValueChar(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return (c >= 0x20 || ch == '\t') && c != 0x7f;
}
inline bool headerValueText(std::string_view v) { return std::ranges::all_of(v, headerValueChar); }

// A header value that did not come through the HTTP parser (a form field, a presigned
// URL's query parameter) and may become a stored object's header: text, at most 8 KiB.
constexpr size_t kMaxHeaderValue = 8 * 1024;
inline bool headerValue(std::string_view v) {
  return v.size() <= kMaxHeaderValue && headerValueText(v);
}

// RFC 9110's token: what a header name may hold.
inline bool headerToken(std::string_view name) {
  return !name.empty() && std::ranges::all_of(name, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

}  // namespace granary::gateway

// The optional bearer token of /_granary/metrics (gateway and chunk server alike).
#pragma once

#include <optional>
#include <string_view>

namespace granary {

// True when no token is configured (`token` empty), or when `authorization` is exactly
// "Bearer <token>". The comparison takes the same time wherever the first difference is.
inline bool bearerTokenAccepted(std::optional<std::string_view> authorization,
                                std::string_view token) {
  if (token.empty()) return true;
  constexpr std::string_view kScheme = "Bearer ";
  if (!authorization || !authorization->starts_with(kScheme)) return false;
  std::string_view given = authorization->substr(kScheme.size());
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(token[i] ^ (i < given.size() ? given[i] : 0));
  }
  return diff == 0;
}

}  // namespace granary

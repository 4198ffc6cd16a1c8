#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace granary::gateway {

// "Sun, 06 Nov 1994 08:49:37 GMT" (Last-Modified, Date).
std::string httpDate(int64_t unix_nanos);
// "2026-11-22T15:22:24.000Z" (XML timestamps).
std::string isoTimestamp(int64_t unix_nanos);
// Parses SigV4's "20130524T000000Z" into Unix seconds.
std::optional<int64_t> parseAmzDate(std::string_view s);

}  // namespace granary::gateway

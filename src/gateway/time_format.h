#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace granary::gateway {

// "Sun, 06 Nov 1994 08:49:37 GMT" (Last-Modified, Date).
std::string httpDate(int64_t unix_nanos);
// "2026-11-22T15:22:24.000Z" (XML timestamps).
std::string isoTimestamp(int64_t unix_nanos);
// The same, in place: a listing writes one per key without allocating.
class IsoTimestamp {
 public:
  explicit IsoTimestamp(int64_t unix_nanos);
  std::string_view view() const { return {text_.data(), text_.size()}; }

 private:
  std::array<char, 24> text_;
};
// Parses an HTTP-date (IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", also RFC 850 and
// asctime forms) into Unix seconds; nullopt if malformed.
std::optional<int64_t> parseHttpDate(std::string_view s);
// Parses SigV4's "20130524T000000Z" into Unix seconds; nullopt if malformed or not a
// calendar date (February 30th).
std::optional<int64_t> parseAmzDate(std::string_view s);
// Parses ISO 8601 UTC "2013-05-24T00:00:00Z", with or without a fraction of a second
// (".000Z", dropped), into Unix seconds; nullopt otherwise (a POST policy's expiration).
std::optional<int64_t> parseIsoTimestamp(std::string_view s);
// Unix seconds -> "20130524T000000Z".
std::string amzDate(int64_t unix_seconds);

}  // namespace granary::gateway

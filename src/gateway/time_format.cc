#include "time_format.h"

#include <chrono>
#include <ctime>
#include <string>

#include <fmt/format.h>

namespace granary::gateway {

namespace {
std::tm toTm(int64_t unix_nanos) {
  std::time_t t = static_cast<std::time_t>(unix_nanos / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}
}  // namespace

std::string httpDate(int64_t unix_nanos) {
  std::tm tm = toTm(unix_nanos);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

// Civil time from <chrono> and digits written in place rather than gmtime_r + strftime or
// fmt: a listing formats one per key, and the fmt form (even compiled) was an eighth of a
// 1,000-key page's server time (docs/benchmarks.md, LIST).
IsoTimestamp::IsoTimestamp(int64_t unix_nanos) {
  using namespace std::chrono;
  const sys_time<milliseconds> t = floor<milliseconds>(sys_time<nanoseconds>(nanoseconds(unix_nanos)));
  const sys_days day = floor<days>(t);
  const year_month_day ymd(day);
  const hh_mm_ss hms(t - day);
  // Unix nanoseconds in int64_t span the years 1677-2262: always four digits.
  auto digits = [](char* p, unsigned v, int n) {
    for (int i = n - 1; i >= 0; --i, v /= 10) p[i] = static_cast<char>('0' + v % 10);
  };
  char* p = text_.data();
  digits(p, static_cast<unsigned>(int(ymd.year())), 4);
  p[4] = '-';
  digits(p + 5, unsigned(ymd.month()), 2);
  p[7] = '-';
  digits(p + 8, unsigned(ymd.day()), 2);
  p[10] = 'T';
  digits(p + 11, static_cast<unsigned>(hms.hours().count()), 2);
  p[13] = ':';
  digits(p + 14, static_cast<unsigned>(hms.minutes().count()), 2);
  p[16] = ':';
  digits(p + 17, static_cast<unsigned>(hms.seconds().count()), 2);
  p[19] = '.';
  digits(p + 20, static_cast<unsigned>(hms.subseconds().count()), 3);
  p[23] = 'Z';
}

std::string isoTimestamp(int64_t unix_nanos) {
  return std::string(IsoTimestamp(unix_nanos).view());
}

std::optional<int64_t> parseHttpDate(std::string_view s) {
  static constexpr const char* kFormats[] = {
      "%a, %d %b %Y %H:%M:%S GMT",  // IMF-fixdate
      "%A, %d-%b-%y %H:%M:%S GMT",  // RFC 850
      "%a %b %e %H:%M:%S %Y",       // asctime
  };
  std::string text(s);
  for (const char* fmt : kFormats) {
    std::tm tm{};
    const char* end = strptime(text.c_str(), fmt, &tm);
    if (end != nullptr && *end == '\0') return static_cast<int64_t>(timegm(&tm));
  }
  return std::nullopt;
}

std::optional<int64_t> parseAmzDate(std::string_view s) {
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z') return std::nullopt;
  int fields[6];  // year, month, day, hour, minute, second
  static constexpr size_t kAt[] = {0, 4, 6, 9, 11, 13};
  for (int f = 0; f < 6; ++f) {
    int v = 0;
    for (size_t i = kAt[f]; i < kAt[f] + (f == 0 ? 4 : 2); ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    fields[f] = v;
  }
  using namespace std::chrono;
  const year_month_day ymd{year{fields[0]}, month{unsigned(fields[1])}, day{unsigned(fields[2])}};
  if (!ymd.ok() || fields[3] > 23 || fields[4] > 59 || fields[5] > 60) return std::nullopt;
  return int64_t{sys_days(ymd).time_since_epoch().count()} * 86400 + fields[3] * 3600 +
         fields[4] * 60 + fields[5];
}

std::optional<int64_t> parseIsoTimestamp(std::string_view s) {
  if (s.size() < 20 || s.back() != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  if (s.size() > 20) {  // a fraction: '.' and 1..9 digits
    const std::string_view fraction = s.substr(20, s.size() - 21);
    if (s[19] != '.' || fraction.empty() || fraction.size() > 9 ||
        fraction.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
  }
  std::string compact;  // 20130524T000000Z
  compact.append(s.substr(0, 4)).append(s.substr(5, 2)).append(s.substr(8, 2));
  compact.append(s.substr(10, 3)).append(s.substr(14, 2)).append(s.substr(17, 2));
  compact.push_back('Z');
  return parseAmzDate(compact);
}

std::string amzDate(int64_t unix_seconds) {
  using namespace std::chrono;
  const sys_seconds t{seconds(unix_seconds)};
  const sys_days day = floor<days>(t);
  const year_month_day ymd(day);
  const hh_mm_ss hms(t - day);
  return fmt::format("{:04}{:02}{:02}T{:02}{:02}{:02}Z", int(ymd.year()), unsigned(ymd.month()),
                     unsigned(ymd.day()), hms.hours().count(), hms.minutes().count(),
                     hms.seconds().count());
}

}  // namespace granary::gateway

#include "time_format.h"

#include <fmt/compile.h>
#include <fmt/core.h>

#include <chrono>
#include <ctime>
#include <string>

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

// Civil time from <chrono> rather than gmtime_r + strftime: a listing formats one per key.
std::string isoTimestamp(int64_t unix_nanos) {
  using namespace std::chrono;
  const sys_time<milliseconds> t = floor<milliseconds>(sys_time<nanoseconds>(nanoseconds(unix_nanos)));
  const sys_days day = floor<days>(t);
  const year_month_day ymd(day);
  const hh_mm_ss hms(t - day);
  // FMT_COMPILE parses the format at compile time: the runtime-parsed form was 17% of a
  // listing's server time (docs/benchmarks.md, LIST).
  return fmt::format(FMT_COMPILE("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z"), int(ymd.year()),
                     unsigned(ymd.month()), unsigned(ymd.day()), hms.hours().count(),
                     hms.minutes().count(), hms.seconds().count(), hms.subseconds().count());
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
  std::tm tm{};
  auto num = [&](size_t pos, size_t len) -> int {
    int v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return -1;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  int year = num(0, 4), mon = num(4, 2), day = num(6, 2);
  int hh = num(9, 2), mm = num(11, 2), ss = num(13, 2);
  if (year < 0 || mon < 1 || mon > 12 || day < 1 || day > 31 || hh < 0 || hh > 23 || mm < 0 ||
      mm > 59 || ss < 0 || ss > 60) {
    return std::nullopt;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hh;
  tm.tm_min = mm;
  tm.tm_sec = ss;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace granary::gateway

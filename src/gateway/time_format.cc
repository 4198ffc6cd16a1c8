#include "time_format.h"

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

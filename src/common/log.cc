#include "granary/common/log.h"

#include "granary/common/strings.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace granary::log {

namespace {
std::atomic<Level> g_level{Level::kInfo};  // trivial global: the process-wide verbosity

// The code point of the well-formed UTF-8 sequence of `n` (2 to 4) bytes at `s`.
char32_t decodeUtf8(const char* s, size_t n) {
  static constexpr unsigned char kLeadBits[] = {0, 0, 0x1F, 0x0F, 0x07};
  char32_t c = static_cast<unsigned char>(s[0]) & kLeadBits[n];
  for (size_t i = 1; i < n; ++i) c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
  return c;
}

// Well-formed text a terminal or viewer acts on: the C1 controls (U+009B is a terminal's
// CSI), the bidirectional marks, embeddings, overrides and isolates (they reorder what
// follows: "Trojan Source"), and the Unicode line and paragraph separators (a line break
// in some viewers).
bool actedOn(char32_t c) {
  return (c >= 0x80 && c < 0xA0) || c == 0x061C || c == 0x200E || c == 0x200F ||
         (c >= 0x2028 && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069);
}
}  // namespace

void setLevel(Level l) { g_level = l; }
Level level() { return g_level.load(std::memory_order_relaxed); }

void write(Level l, std::string_view message) {
  static constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::string line = fmt::format("{} {} ", ts, kNames[static_cast<int>(l)]);
  // One line per call, whatever the message holds: an object key (a client's bytes) with
  // a CR or LF would otherwise start a line of its own, a forged entry. A backslash is
  // doubled, so that an escape the log wrote and the same characters in a key differ;
  // bytes that are not well-formed UTF-8 are written as \xHH, and the code points a
  // terminal or viewer acts on (actedOn) as \uHHHH.
  line.reserve(line.size() + message.size() + 1);
  for (size_t i = 0; i < message.size();) {
    const auto u = static_cast<unsigned char>(message[i]);
    const size_t n = strictUtf8SequenceLength(message, i);
    if (n > 1) {
      const char32_t c = decodeUtf8(message.data() + i, n);
      if (actedOn(c)) {
        line += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
      } else {
        line.append(message.substr(i, n));
      }
      i += n;
      continue;
    }
    if (u == '\\') {
      line += "\\\\";
    } else if (u == '\n') {
      line += "\\n";
    } else if (u == '\r') {
      line += "\\r";
    } else if (u == '\t' || (u >= 0x20 && u < 0x7f)) {
      line.push_back(static_cast<char>(u));
    } else {
      line += fmt::format("\\x{:02x}", u);
    }
    ++i;
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace granary::log

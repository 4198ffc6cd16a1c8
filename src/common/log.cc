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
}

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
  // bytes that are not well-formed UTF-8, and the C1 controls (U+0080..U+009F, which a
  // terminal may act on), are written as \xHH.
  line.reserve(line.size() + message.size() + 1);
  for (size_t i = 0; i < message.size();) {
    const auto u = static_cast<unsigned char>(message[i]);
    const size_t n = strictUtf8SequenceLength(message, i);
    const bool c1 = n == 2 && u == 0xC2 && static_cast<unsigned char>(message[i + 1]) < 0xA0;
    if (n > 1 && !c1) {
      line.append(message.substr(i, n));
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

#include "granary/common/log.h"

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
  // a CR or LF would otherwise start a line of its own, a forged entry.
  line.reserve(line.size() + message.size() + 1);
  for (char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      line.push_back(c);
    } else if (c == '\n') {
      line += "\\n";
    } else if (c == '\r') {
      line += "\\r";
    } else if (c == '\t') {
      line.push_back(c);
    } else {
      line += fmt::format("\\x{:02x}", u);
    }
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace granary::log

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
  std::string line = fmt::format("{} {} {}\n", ts, kNames[static_cast<int>(l)], message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace granary::log

// Minimal leveled logging to stderr (one line per call, written with a single fwrite). The
// message is escaped so that a line reads one way: \n, \r, a doubled backslash, and \xHH
// for other controls (tab excepted), C1 controls and bytes that are not well-formed UTF-8.
#pragma once

#include <fmt/core.h>

#include <string_view>

namespace granary::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void setLevel(Level level);
Level level();
void write(Level level, std::string_view message);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) {
    write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
  }
}

}  // namespace granary::log

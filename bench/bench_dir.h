// The working directory of a benchmark: emptied at the start, removed at the end. One that
// holds files the bench did not make is refused, not wiped: a mistyped --dir must not
// delete data. A bench marks the directories it makes with kBenchDirMarker.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace granary::bench {

inline constexpr const char* kBenchDirMarker = ".granary-bench-dir";

// False (and why, on stderr) when `dir` holds anything but an earlier run's files.
inline bool claimBenchDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    const bool empty = fs::is_directory(dir, ec) && fs::is_empty(dir, ec);
    if (!empty && !fs::exists(fs::path(dir) / kBenchDirMarker, ec)) {
      std::fprintf(stderr,
                   "%s holds files a benchmark did not make: refusing to delete them (give "
                   "--dir a new or empty directory)\n",
                   dir.c_str());
      return false;
    }
    fs::remove_all(dir, ec);
    if (ec) {
      std::fprintf(stderr, "cannot empty %s: %s\n", dir.c_str(), ec.message().c_str());
      return false;
    }
  }
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot make %s: %s\n", dir.c_str(), ec.message().c_str());
    return false;
  }
  std::ofstream(fs::path(dir) / kBenchDirMarker) << "made by a granary benchmark\n";
  return true;
}

}  // namespace granary::bench

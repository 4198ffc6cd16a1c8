#include "granary/common/durable_dirs.h"

#include <cerrno>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace granary {

namespace fs = std::filesystem;

Status fsyncPath(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::fromErrno(errno, "opening " + path.string());
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::ok() : Status::fromErrno(err, "fsync " + path.string());
}

Status createDirectoriesDurably(const fs::path& dir,
                                const std::function<Status(const fs::path&)>& sync_directory) {
  if (dir.empty()) return Status::invalidArgument("creating a directory: empty path");
  std::error_code ec;
  // Not lexically normalised: "link/.." must mean what the kernel makes of it.
  fs::path target = fs::absolute(dir, ec);
  if (ec) return Status::fromErrno(ec.value(), "resolving " + dir.string());
  if (!target.has_filename()) target = target.parent_path();  // "a/b/" is "a/b"
  std::vector<std::pair<fs::path, bool>> chain;  // (component, exists), deepest first
  bool below_missing = false;
  for (fs::path p = target; p.has_relative_path(); p = p.parent_path()) {
    struct stat st;
    if (below_missing) {
      chain.emplace_back(p, true);
      continue;
    }
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return Status::ioError(p.string() + " is not a directory");
      below_missing = true;  // it and every ancestor exist
      chain.emplace_back(p, true);
      continue;
    }
    if (errno != ENOENT) return Status::fromErrno(errno, "stat " + p.string());
    chain.emplace_back(p, false);
  }
  // Top down: each component's entry is synced into its parent. One that existed is synced
  // too, at no risk to the start (an error is ignored): an earlier start may have crashed
  // between its mkdir and that sync, or an older version made it without one.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const auto& [path, existed] = *it;
    if (!existed && ::mkdir(path.c_str(), 0777) != 0) {
      const int err = errno;
      struct stat st;
      // Another process may have made it meanwhile: then it is synced here all the same.
      if (err != EEXIST || ::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return Status::fromErrno(err, "creating " + path.string());
      }
    }
    Status synced = sync_directory(path.parent_path());
    if (!synced.isOk() && !existed) return synced;
  }
  return Status::ok();
}

}  // namespace granary

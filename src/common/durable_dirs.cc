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
  // "a/b/" and "a/." are normalised, so that no component is the directory itself.
  fs::path target = fs::absolute(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  std::vector<fs::path> missing;  // deepest first
  for (fs::path p = target; p.has_relative_path(); p = p.parent_path()) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return Status::ioError(p.string() + " is not a directory");
      break;
    }
    if (errno != ENOENT) return Status::fromErrno(errno, "stat " + p.string());
    missing.push_back(p);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0) {
      const int err = errno;
      struct stat st;
      // Another process may have made it meanwhile; its entry is then its maker's to sync,
      // but syncing the parent again costs little and leaves no window.
      if (err != EEXIST || ::stat(it->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return Status::fromErrno(err, "creating " + it->string());
      }
    }
    if (Status st = sync_directory(it->parent_path()); !st) return st;
  }
  return Status::ok();
}

}  // namespace granary

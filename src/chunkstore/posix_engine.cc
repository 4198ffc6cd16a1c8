#include "posix_engine.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>

#include <fmt/core.h>

#include "granary/chunkstore/io_engine.h"

namespace granary::chunkstore {

namespace posix_io {

Result<int> openFile(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return fail(Status::fromErrno(errno, "open " + path));
  return fd;
}

Status closeFile(int fd) {
  // Linux releases the descriptor even when close() reports EINTR: never retry.
  if (::close(fd) != 0 && errno != EINTR) return Status::fromErrno(errno, "close");
  return Status::ok();
}

Status writeAll(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                uint64_t offset) {
  std::array<iovec, 2> iov{};
  size_t n = 0;
  for (auto part : {head, tail}) {
    if (!part.empty()) iov[n++] = {const_cast<uint8_t*>(part.data()), part.size()};
  }
  size_t first = 0;  // iov[first..n) is still to write, at offset + done
  uint64_t done = 0;
  while (first < n) {
    ssize_t wrote = ::pwritev(fd, &iov[first], static_cast<int>(n - first),
                              static_cast<off_t>(offset + done));
    if (wrote < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::fromErrno(errno, fmt::format("pwritev at {}", offset + done));
    }
    if (wrote == 0) {
      return Status::ioError(fmt::format("pwritev at {} wrote nothing", offset + done));
    }
    done += static_cast<uint64_t>(wrote);
    consumeIovecs(std::span(iov.data(), n), first, static_cast<size_t>(wrote));
  }
  return Status::ok();
}

void consumeIovecs(std::span<iovec> iov, size_t& first, size_t bytes) {
  while (bytes > 0 && first < iov.size()) {
    const size_t take = std::min(bytes, iov[first].iov_len);
    iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + take;
    iov[first].iov_len -= take;
    bytes -= take;
    if (iov[first].iov_len == 0) ++first;
  }
}

Status writeAll(int fd, std::span<const uint8_t> data, uint64_t offset) {
  return writeAll(fd, data, {}, offset);
}

Status readAll(int fd, std::span<uint8_t> out, uint64_t offset) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done,
                        static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::fromErrno(errno, fmt::format("pread at {}", offset + done));
    }
    if (n == 0) {
      return Status::corruption(fmt::format("pread at {}: unexpected end of file", offset + done));
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

bool readNoWait(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset) {
  constexpr size_t kMaxParts = 8;
  if (parts.size() > kMaxParts) return false;
  std::array<iovec, kMaxParts> iov{};
  size_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    iov[i] = {parts[i].data(), parts[i].size()};
    total += parts[i].size();
  }
  // A short count means part of it was not cached: the caller reads it all the slow way.
  const ssize_t n = ::preadv2(fd, iov.data(), static_cast<int>(parts.size()),
                              static_cast<off_t>(offset), RWF_NOWAIT);
  return n >= 0 && static_cast<size_t>(n) == total;
}

namespace {
// fdatasync(2) or fsync(2), again on EINTR.
Status syncWith(int (*call)(int), int fd, const char* what) {
  int rc;
  do {
    rc = call(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return Status::fromErrno(errno, what);
  return Status::ok();
}
}  // namespace

Status dataSync(int fd) { return syncWith(::fdatasync, fd, "fdatasync"); }
Status fullSync(int fd) { return syncWith(::fsync, fd, "fsync"); }

Status punchHole(int fd, uint64_t offset, uint64_t len) {
  if (len == 0) return Status::ok();
  int rc;
  do {
    rc = ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     static_cast<off_t>(offset), static_cast<off_t>(len));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return Status::fromErrno(errno, fmt::format("punch hole at {}+{}", offset, len));
  return Status::ok();
}

Status resize(int fd, uint64_t size) {
  int rc;
  do {
    rc = ::ftruncate(fd, static_cast<off_t>(size));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return Status::fromErrno(errno, fmt::format("ftruncate to {}", size));
  return Status::ok();
}

Status renameFile(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
    return Status::fromErrno(errno, fmt::format("rename {} to {}", from, to));
  }
  return Status::ok();
}

Status removeFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::fromErrno(errno, "unlink " + path);
  }
  return Status::ok();
}

}  // namespace posix_io

namespace {

class PosixEngine final : public IoEngine {
 public:
  std::string_view name() const override { return "posix"; }
  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    return posix_io::openFile(path, flags, mode);
  }
  Status close(int fd) override { return posix_io::closeFile(fd); }
  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    return posix_io::writeAll(fd, data, offset);
  }
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    return posix_io::readAll(fd, out, offset);
  }
  void writeAsync(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                  uint64_t offset, IoDone done) override {
    done(posix_io::writeAll(fd, head, tail, offset));
  }
  bool preadNoWait(int fd, std::span<const std::span<uint8_t>> parts,
                   uint64_t offset) override {
    return posix_io::readNoWait(fd, parts, offset);
  }
  Status fdatasync(int fd) override { return posix_io::dataSync(fd); }
  Status fsync(int fd) override { return posix_io::fullSync(fd); }
  Status punchHole(int fd, uint64_t offset, uint64_t len) override {
    return posix_io::punchHole(fd, offset, len);
  }
  Status resize(int fd, uint64_t size) override { return posix_io::resize(fd, size); }
  Status rename(const std::string& from, const std::string& to) override {
    return posix_io::renameFile(from, to);
  }
  Status remove(const std::string& path) override { return posix_io::removeFile(path); }
};

}  // namespace

std::unique_ptr<IoEngine> makePosixEngine() { return std::make_unique<PosixEngine>(); }

}  // namespace granary::chunkstore

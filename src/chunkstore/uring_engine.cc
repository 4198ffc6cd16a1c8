// The io_uring IoEngine of the walking skeleton: every call submits one SQE on the calling
// thread's ring and waits for its CQE. Short transfers and -EAGAIN/-EINTR are re-queued
// (as liburing's io_uring-cp.c does). A later version batches submissions and completes
// them asynchronously; the interface already allows it.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/core.h>

#include "granary/chunkstore/io_engine.h"
#include "granary/common/log.h"
#include "posix_engine.h"

namespace granary::chunkstore {

namespace {

constexpr unsigned kRingDepth = 64;

// One ring per thread (DESIGN: "one ring per thread"): a ring is not safe to share
// without a lock, and the synchronous skeleton never has more than one SQE in flight, so
// a per-thread ring needs no locking at all. It is created on the thread's first call and
// torn down when the thread exits. If it cannot be created (memory limits, seccomp), that
// thread falls back to plain syscalls.
struct ThreadRing {
  io_uring ring{};
  bool tried = false;
  bool ok = false;
  ~ThreadRing() {
    if (ok) io_uring_queue_exit(&ring);
  }
  io_uring* get() {
    if (!tried) {
      tried = true;
      int rc = io_uring_queue_init(kRingDepth, &ring, 0);
      ok = rc == 0;
      if (!ok) log::warn("io_uring_queue_init failed ({}); this thread uses pread/pwrite",
                         std::strerror(-rc));
    }
    return ok ? &ring : nullptr;
  }
};

thread_local ThreadRing t_ring;

// Submits the SQE prepared by `prep` and returns its CQE result (negative errno on error).
template <typename Prep>
int submitAndWait(io_uring* ring, Prep&& prep) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) return -EBUSY;  // cannot happen: one SQE in flight at a time
  prep(sqe);
  int rc;
  do {
    // A retried submit re-reads the SQ tail, so an SQE the kernel already took is not
    // submitted twice.
    rc = io_uring_submit(ring);
  } while (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
  if (rc < 0) return rc;
  io_uring_cqe* cqe = nullptr;
  do {
    rc = io_uring_wait_cqe(ring, &cqe);
  } while (rc == -EINTR);
  if (rc < 0) return rc;
  int res = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  return res;
}

class UringEngine final : public IoEngine {
 public:
  std::string_view name() const override { return "io_uring"; }

  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    return posix_io::openFile(path, flags, mode);
  }
  Status close(int fd) override { return posix_io::closeFile(fd); }

  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    io_uring* ring = t_ring.get();
    if (ring == nullptr) return posix_io::writeAll(fd, data, offset);
    size_t done = 0;
    while (done < data.size()) {
      int res = submitAndWait(ring, [&](io_uring_sqe* sqe) {
        io_uring_prep_write(sqe, fd, data.data() + done, chunk(data.size() - done),
                            offset + done);
      });
      if (res == -EAGAIN || res == -EINTR) continue;
      if (res < 0) {
        return Status::fromErrno(-res, fmt::format("io_uring write at {}", offset + done));
      }
      if (res == 0) {
        return Status::ioError(fmt::format("io_uring write at {} wrote nothing", offset + done));
      }
      done += static_cast<size_t>(res);
    }
    return Status::ok();
  }

  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    io_uring* ring = t_ring.get();
    if (ring == nullptr) return posix_io::readAll(fd, out, offset);
    size_t done = 0;
    while (done < out.size()) {
      int res = submitAndWait(ring, [&](io_uring_sqe* sqe) {
        io_uring_prep_read(sqe, fd, out.data() + done, chunk(out.size() - done), offset + done);
      });
      if (res == -EAGAIN || res == -EINTR) continue;
      if (res < 0) {
        return Status::fromErrno(-res, fmt::format("io_uring read at {}", offset + done));
      }
      if (res == 0) {
        return Status::corruption(
            fmt::format("io_uring read at {}: unexpected end of file", offset + done));
      }
      done += static_cast<size_t>(res);
    }
    return Status::ok();
  }

  Status fdatasync(int fd) override {
    io_uring* ring = t_ring.get();
    if (ring == nullptr) return posix_io::dataSync(fd);
    int res;
    do {
      res = submitAndWait(ring, [&](io_uring_sqe* sqe) {
        io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
      });
    } while (res == -EAGAIN || res == -EINTR);
    if (res < 0) return Status::fromErrno(-res, "io_uring fdatasync");
    return Status::ok();
  }

  // Hole punching is rare (deletes): a plain fallocate(2) is enough.
  Status punchHole(int fd, uint64_t offset, uint64_t len) override {
    return posix_io::punchHole(fd, offset, len);
  }

 private:
  // An SQE's length field is 32 bits; larger transfers go in 1 GiB pieces.
  static unsigned chunk(size_t left) {
    return static_cast<unsigned>(std::min<size_t>(left, size_t{1} << 30));
  }
};

}  // namespace

std::unique_ptr<IoEngine> makeUringEngine() {
  io_uring probe{};
  int rc = io_uring_queue_init(4, &probe, 0);
  if (rc != 0) {
    log::warn("io_uring unavailable ({}); using the POSIX I/O engine", std::strerror(-rc));
    return makePosixEngine();
  }
  io_uring_queue_exit(&probe);
  return std::make_unique<UringEngine>();
}

}  // namespace granary::chunkstore

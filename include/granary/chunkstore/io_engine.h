// IoEngine: the only way the chunk store touches files. Every call either completes fully
// or returns an error (short transfers are retried inside the engine). Two forms:
//  - synchronous calls (pread, pwrite, fdatasync), for callers on worker threads;
//  - asynchronous ones (readAsync, writeAsync, fdatasyncAsync), which return at once and
//    call `done` exactly once, later. The io_uring engine queues them on one shared ring
//    whose completions are signalled through an eventfd that an Asio io_context (the
//    engine's completion thread) waits on; `done` then runs on that thread and must not
//    block. An engine without asynchronous I/O runs the synchronous call and then `done`
//    on the caller's thread (the default below), so a test wrapper that overrides a
//    synchronous call injects its fault into both forms.
// Implementations: io_uring (default), plain POSIX pread/pwrite (fallback where io_uring
// is unavailable), and test wrappers that inject faults (IoEngineWrapper forwards every
// call, so a test overrides just one).
//
// Thread safety: all methods may be called concurrently from many threads; the io_uring
// engine keeps one ring per calling thread for synchronous calls, and one shared ring for
// asynchronous ones.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "granary/common/status.h"

namespace prometheus {
class Registry;
}

namespace granary::chunkstore {

// Called once when an asynchronous operation ends.
using IoDone = std::move_only_function<void(Status)>;

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual std::string_view name() const = 0;
  // open(2) semantics; returns the fd.
  virtual Result<int> open(const std::string& path, int flags, mode_t mode) = 0;
  virtual Status close(int fd) = 0;
  // Writes all of `data` at `offset` (buffers are 4 KiB aligned for O_DIRECT files).
  virtual Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) = 0;
  // Reads exactly out.size() bytes at `offset`; reading past EOF is kCorruption.
  virtual Status pread(int fd, std::span<uint8_t> out, uint64_t offset) = 0;
  virtual Status fdatasync(int fd) = 0;
  // Frees the blocks of [offset, offset+len) keeping the file size (FALLOC_FL_PUNCH_HOLE).
  virtual Status punchHole(int fd, uint64_t offset, uint64_t len) = 0;

  // Asynchronous forms. The buffer must stay valid until `done` runs. The defaults run the
  // synchronous call on the caller's thread, then `done`.
  virtual void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) {
    done(pread(fd, out, offset));
  }
  virtual void writeAsync(int fd, std::span<const uint8_t> data, uint64_t offset, IoDone done) {
    done(pwrite(fd, data, offset));
  }
  virtual void fdatasyncAsync(int fd, IoDone done) { done(fdatasync(fd)); }
};

// io_uring engine; if the kernel or a seccomp profile refuses io_uring, logs a warning
// and returns the POSIX engine instead.
std::unique_ptr<IoEngine> makeUringEngine();
std::unique_ptr<IoEngine> makePosixEngine();

// Wraps `inner` so that every read, write, fdatasync and hole punch is counted in
// `registry`: granary_io_operations_total, granary_io_bytes_total, granary_io_errors_total
// and the granary_io_duration_seconds histogram, each labelled op=read|write|fdatasync|
// punch_hole (docs/operations.md, "Metrics"). Adds one steady-clock read per call.
std::unique_ptr<IoEngine> makeMeteredEngine(std::unique_ptr<IoEngine> inner,
                                            prometheus::Registry& registry);

// Forwards every call to `target` (not owned). Subclass and override one call to inject
// a fault.
class IoEngineWrapper : public IoEngine {
 public:
  explicit IoEngineWrapper(IoEngine* target) : target_(target) {}
  std::string_view name() const override { return target_->name(); }
  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    return target_->open(path, flags, mode);
  }
  Status close(int fd) override { return target_->close(fd); }
  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    return target_->pwrite(fd, data, offset);
  }
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    return target_->pread(fd, out, offset);
  }
  Status fdatasync(int fd) override { return target_->fdatasync(fd); }
  Status punchHole(int fd, uint64_t offset, uint64_t len) override {
    return target_->punchHole(fd, offset, len);
  }

 protected:
  IoEngine* target_;
};

}  // namespace granary::chunkstore

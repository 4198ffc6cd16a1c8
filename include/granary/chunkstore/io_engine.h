// IoEngine: the only way the chunk store touches files. Every call either completes fully
// or returns an error (short transfers are retried inside the engine). Two forms:
//  - synchronous calls (pread, preadv, pwrite, fdatasync), for callers on worker threads;
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
#include <utility>

#include "granary/common/status.h"

namespace prometheus {
class Registry;
}

namespace granary::chunkstore {

// Called once when an asynchronous operation ends.
using IoDone = std::move_only_function<void(Status)>;

// Where an IoBuffer goes back to.
class IoBufferPool {
 public:
  virtual void release(uint8_t* data) = 0;

 protected:
  ~IoBufferPool() = default;
};

// A slot of an engine's registered buffers (IORING_REGISTER_BUFFERS): the kernel pinned
// its pages once, so an asynchronous read or write inside it skips pinning them per I/O.
// Empty (valid() false) when the engine has none free or none big enough. Move-only; the
// engine must outlive it.
class IoBuffer {
 public:
  IoBuffer() = default;
  IoBuffer(uint8_t* data, size_t size, IoBufferPool* pool) : data_(data), size_(size), pool_(pool) {}
  IoBuffer(IoBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        pool_(std::exchange(o.pool_, nullptr)) {}
  IoBuffer& operator=(IoBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      pool_ = std::exchange(o.pool_, nullptr);
    }
    return *this;
  }
  ~IoBuffer() { reset(); }
  bool valid() const { return data_ != nullptr; }
  uint8_t* data() { return data_; }
  std::span<uint8_t> span() { return {data_, size_}; }
  void reset() {
    if (pool_ != nullptr) pool_->release(data_);
    data_ = nullptr;
    size_ = 0;
    pool_ = nullptr;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  IoBufferPool* pool_ = nullptr;
};

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
  // Reads the consecutive bytes at `offset` into the buffers of `parts` in turn, as one
  // pread would into one buffer: one I/O (readv) where the engine can. The default reads
  // each part with pread, so a wrapper's fault on pread applies here too.
  virtual Status preadv(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset) {
    for (std::span<uint8_t> part : parts) {
      if (Status st = pread(fd, part, offset); !st) return st;
      offset += part.size();
    }
    return Status::ok();
  }
  // preadv() only if it needs no wait for the drive: every byte is in the page cache
  // (preadv2 with RWF_NOWAIT). False when it would wait, or on any error; the buffers'
  // contents are then unspecified. For an event loop's fast path; the default never can.
  virtual bool preadNoWait(int /*fd*/, std::span<const std::span<uint8_t>> /*parts*/,
                           uint64_t /*offset*/) {
    return false;
  }
  virtual Status fdatasync(int fd) = 0;
  // fsync(2), for directories: fdatasync promises nothing about a directory's entries (a
  // created or renamed file). Engines that only simulate I/O may keep the default.
  virtual Status fsync(int fd) { return fdatasync(fd); }
  // Frees the blocks of [offset, offset+len) keeping the file size (FALLOC_FL_PUNCH_HOLE).
  virtual Status punchHole(int fd, uint64_t offset, uint64_t len) = 0;
  // Sets the file's size (ftruncate(2)): growing it adds a hole and allocates nothing. Like
  // a write, the new size is durable only after the file's next fdatasync.
  virtual Status resize(int fd, uint64_t size) = 0;
  // rename(2), but never over an existing file (RENAME_NOREPLACE: kAlreadyExists). Like a
  // created file, the new name is durable only after its directory's next fsync.
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // unlink(2); a file that does not exist is not an error.
  virtual Status remove(const std::string& path) = 0;

  // Asynchronous forms. The buffer must stay valid until `done` runs. The defaults run the
  // synchronous call on the caller's thread, then `done`.
  virtual void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) {
    done(pread(fd, out, offset));
  }
  // Writes `head` and then `tail` (may be empty) right after it, at `offset`: one write
  // (pwritev) where the engine can, so that a blob's header region and its payload, each
  // written from where it is, take one I/O. The default writes each part with pwrite, so a
  // wrapper's fault on pwrite applies here too.
  virtual void writeAsync(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                          uint64_t offset, IoDone done) {
    Status st = pwrite(fd, head, offset);
    if (st && !tail.empty()) st = pwrite(fd, tail, offset + head.size());
    done(std::move(st));
  }
  virtual void fdatasyncAsync(int fd, IoDone done) { done(fdatasync(fd)); }
  // A registered buffer of at least `size` bytes (4 KiB aligned) for asynchronous I/O, or
  // an empty one: the caller then uses memory of its own.
  virtual IoBuffer registeredBuffer(size_t /*size*/) { return {}; }
  // Batched submission (use IoBatch): the asynchronous calls this thread makes between
  // beginBatch() and its endBatch() may reach the kernel together, in one system call at
  // endBatch() (or sooner, with another thread's). Batches nest; the outermost end submits.
  // A batch ends on the thread that began it, before that thread waits for any of its
  // completions. The defaults do nothing: each call is submitted as it is made.
  virtual void beginBatch() {}
  virtual void endBatch() {}
};

// One batch of asynchronous submissions on this thread (IoEngine::beginBatch), for a scope.
class IoBatch {
 public:
  explicit IoBatch(IoEngine& engine) : engine_(engine) { engine_.beginBatch(); }
  ~IoBatch() { engine_.endBatch(); }
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

 private:
  IoEngine& engine_;
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
  Status fsync(int fd) override { return target_->fsync(fd); }
  Status punchHole(int fd, uint64_t offset, uint64_t len) override {
    return target_->punchHole(fd, offset, len);
  }
  Status resize(int fd, uint64_t size) override { return target_->resize(fd, size); }
  Status rename(const std::string& from, const std::string& to) override {
    return target_->rename(from, to);
  }
  Status remove(const std::string& path) override { return target_->remove(path); }
  IoBuffer registeredBuffer(size_t size) override { return target_->registeredBuffer(size); }
  void beginBatch() override { target_->beginBatch(); }
  void endBatch() override { target_->endBatch(); }

 protected:
  IoEngine* target_;
};

}  // namespace granary::chunkstore

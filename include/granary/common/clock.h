// Clock: the one source of time. Injected everywhere so tests can control time.
// Thread safety: implementations must be safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace granary {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, nanoseconds since the Unix epoch (object mtimes, SigV4 skew checks).
  virtual int64_t nowUnixNanos() const = 0;
  // Monotonic time in nanoseconds (deadlines, latency measurements).
  virtual int64_t monotonicNanos() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t nowUnixNanos() const override;
  int64_t monotonicNanos() const override;
};

// A clock that only moves when told to; for tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t unix_nanos) : now_(unix_nanos) {}
  int64_t nowUnixNanos() const override { return now_.load(); }
  int64_t monotonicNanos() const override { return now_.load(); }
  void advance(int64_t nanos) { now_ += nanos; }
  void set(int64_t unix_nanos) { now_ = unix_nanos; }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace granary

// RateLimiter: a token bucket for background work (scrub, later repair and rebalance), so
// it takes at most a configured share of a drive. The disk scheduler cannot be relied on
// for this (virtio and many NVMe setups ignore I/O priorities), so the limit is enforced
// in the application.
//
// Thread safety: all methods are thread safe. acquire() blocks the calling thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace granary {

class RateLimiter {
 public:
  // `bytes_per_second` 0 = unlimited. `burst` caps the tokens saved up while idle.
  explicit RateLimiter(uint64_t bytes_per_second, uint64_t burst = 1 << 20);

  // Waits until `bytes` may be used. Returns false (at once) if stop() was called.
  bool acquire(uint64_t bytes);
  // As acquire(bytes), but whenever `waived()` holds (checked first, then at least every
  // 100 ms of a wait) returns true at once without charging the bytes, and drops any
  // tokens saved up: background work that may run at full speed while nothing else wants
  // the drive, and at its rate again from the first request after. `waived` runs under
  // the limiter's lock: it must be quick and take no lock of the caller's.
  bool acquire(uint64_t bytes, const std::function<bool()>& waived);
  // Wakes every waiter; later acquire() calls return false.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  const uint64_t rate_;
  const double burst_;
  std::mutex mu_;
  std::condition_variable cv_;
  double tokens_;
  Clock::time_point last_;
  bool stopped_ = false;
};

}  // namespace granary

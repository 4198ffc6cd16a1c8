#include "granary/common/rate_limiter.h"

#include <algorithm>

namespace granary {

RateLimiter::RateLimiter(uint64_t bytes_per_second, uint64_t burst)
    : rate_(bytes_per_second),
      burst_(static_cast<double>(burst)),
      tokens_(static_cast<double>(burst)),
      last_(Clock::now()) {}

bool RateLimiter::acquire(uint64_t bytes) { return acquire(bytes, {}); }

bool RateLimiter::acquire(uint64_t bytes, const std::function<bool()>& waived) {
  constexpr auto kRecheck = std::chrono::milliseconds(100);
  std::unique_lock lock(mu_);
  if (rate_ == 0) return !stopped_;
  // Debt is allowed (a request larger than the burst goes through once enough time has
  // passed to pay for it), so any request size works and the average rate holds.
  for (;;) {
    if (stopped_) return false;
    // What the time since the last request paid back of a debt, or saved up.
    const auto now = Clock::now();
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() *
                                             static_cast<double>(rate_));
    last_ = now;
    if (waived && waived()) {
      // Uncharged, and no tokens saved up meanwhile: when the waiver ends, the rate holds
      // from the next request on (a debt still unpaid is still owed).
      tokens_ = std::min(tokens_, 0.0);
      return true;
    }
    if (tokens_ >= 0) {
      tokens_ -= static_cast<double>(bytes);
      return true;
    }
    // At most an hour per wait (the loop waits again): a debt of years would overflow the
    // clock's duration.
    auto wait = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
        std::min(-tokens_ / static_cast<double>(rate_), 3600.0)));
    if (waived) wait = std::min<Clock::duration>(wait, kRecheck);
    cv_.wait_for(lock, wait);
  }
}

void RateLimiter::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

}  // namespace granary

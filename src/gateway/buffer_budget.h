// BufferBudget: one allowance of bytes for the gateway's object-data buffers (the stripe
// buffers of GET streams), so that resident memory is bounded by the budget rather than by
// the number of streams. A stream that finds the budget spent waits, without blocking a
// thread and in arrival order, and meanwhile sends nothing and reads nothing from its
// disks: backpressure reaches the client through TCP.
//
// Deadlock rule: a coroutine calls acquire() (which may wait) only while it holds no lease;
// a second buffer, such as a read-ahead, is taken with tryAcquire() or not at all. Then
// every lease holder can make progress and give its bytes back.
//
// A request for more than the whole budget is charged the whole budget (it then runs
// alone). Thread safety: all methods are thread safe; a Lease is released on any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "asio.h"

namespace granary::gateway {

class BufferBudget {
 public:
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        reset();
        budget_ = std::exchange(o.budget_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
      }
      return *this;
    }
    ~Lease() { reset(); }
    bool held() const { return budget_ != nullptr; }
    uint64_t bytes() const { return bytes_; }
    void reset() {
      if (budget_ != nullptr) budget_->release(bytes_);
      budget_ = nullptr;
      bytes_ = 0;
    }

   private:
    friend class BufferBudget;
    Lease(BufferBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    BufferBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  explicit BufferBudget(uint64_t capacity) : capacity_(std::max<uint64_t>(capacity, 1)) {}
  BufferBudget(const BufferBudget&) = delete;
  BufferBudget& operator=(const BufferBudget&) = delete;

  // Waits until `bytes` are free and nobody queued earlier is waiting, then takes them.
  Task<Lease> acquire(uint64_t bytes) {
    const uint64_t n = charge(bytes);
    asio::any_io_executor ex = co_await asio::this_coro::executor;
    // Only raw pointers and integers in the co_await expression (the g++ 12 note in
    // task_group.h).
    BufferBudget* self = this;
    auto* exp = &ex;
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [self, n, exp](auto handler) {
          std::unique_lock lock(self->mu_);
          auto resume = [ex = *exp, h = std::move(handler)]() mutable {
            asio::post(ex, std::move(h));
          };
          if (self->waiters_.empty() && self->used_ + n <= self->capacity_) {
            self->used_ += n;
            self->peak_ = std::max(self->peak_, self->used_);
            lock.unlock();
            resume();
          } else {
            ++self->waits_;
            self->waiters_.push_back({n, std::move(resume)});
          }
        },
        asio::use_awaitable);
    co_return Lease(this, n);
  }

  // Takes `bytes` only if that needs no wait; an empty lease otherwise.
  Lease tryAcquire(uint64_t bytes) {
    const uint64_t n = charge(bytes);
    std::lock_guard lock(mu_);
    if (!waiters_.empty() || used_ + n > capacity_) return {};
    used_ += n;
    peak_ = std::max(peak_, used_);
    return Lease(this, n);
  }

  // Destroys the waiting coroutines without resuming them. For shutdown only, after the
  // event loops stopped and before they are destroyed (a waiter's frame holds its socket).
  void dropWaiters() {
    std::deque<Waiter> dropped;
    {
      std::lock_guard lock(mu_);
      dropped.swap(waiters_);
    }
  }

  struct Stats {
    uint64_t capacity, used, peak, waiting, waits;
  };
  Stats stats() const {
    std::lock_guard lock(mu_);
    return {capacity_, used_, peak_, waiters_.size(), waits_};
  }

 private:
  struct Waiter {
    uint64_t bytes;
    std::move_only_function<void()> resume;
  };

  uint64_t charge(uint64_t bytes) const { return std::clamp<uint64_t>(bytes, 1, capacity_); }

  void release(uint64_t bytes) {
    std::vector<std::move_only_function<void()>> wake;
    {
      std::lock_guard lock(mu_);
      used_ -= bytes;
      while (!waiters_.empty() && used_ + waiters_.front().bytes <= capacity_) {
        used_ += waiters_.front().bytes;
        peak_ = std::max(peak_, used_);
        wake.push_back(std::move(waiters_.front().resume));
        waiters_.pop_front();
      }
    }
    for (auto& w : wake) w();
  }

  const uint64_t capacity_;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
  uint64_t waits_ = 0;
  std::deque<Waiter> waiters_;
};

}  // namespace granary::gateway

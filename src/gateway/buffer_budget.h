// BufferBudget: one allowance of bytes for the gateway's object-data buffers (the stripe
// buffers of GET streams and of uploads), so that resident memory is bounded by the budget
// rather than by the number of requests. A request that finds the budget spent waits,
// without blocking a thread and in arrival order, and meanwhile sends nothing and reads
// nothing from its client or its disks: backpressure reaches the client through TCP.
//
// Deadlock rule: a coroutine calls acquire() (which may wait) only while it holds no lease,
// or with Patience::kOverdraw (whose wait is bounded and then always succeeds); a second
// buffer, such as a read-ahead, is taken with tryAcquire() or not at all. Then every lease
// holder can make progress and give its bytes back.
//
// Two policies for a wait that lasts:
// - kOverdraw (GET streams): after `patience` (2 s by default) the stream goes ahead over
//   the budget (an overdraft, counted; its bytes are charged, so later requests wait the
//   longer). Without it a few dozen clients that stop reading, each holding a stripe until
//   the I/O timeout, would stall every other GET; with it they cost memory for a while.
// - kGiveUp (admission of uploads): after `admission_wait` (30 s by default) the request
//   gets no lease (counted as a refusal) and is answered 503 SlowDown, which S3 clients
//   retry with backoff. An upload holds its lease while its client sends a stripe's worth,
//   however slowly: overdrafts there would make memory grow with the number of uploads.
//
// A request for more than the whole budget is charged the whole budget (it then runs
// alone). Thread safety: all methods are thread safe; a Lease is released on any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "asio.h"

#include <boost/asio/steady_timer.hpp>

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

  enum class Patience { kOverdraw, kGiveUp };

  explicit BufferBudget(uint64_t capacity,
                        std::chrono::milliseconds patience = std::chrono::seconds(2),
                        std::chrono::milliseconds admission_wait = std::chrono::seconds(30))
      : capacity_(std::max<uint64_t>(capacity, 1)),
        patience_(patience),
        admission_wait_(admission_wait) {}
  BufferBudget(const BufferBudget&) = delete;
  BufferBudget& operator=(const BufferBudget&) = delete;

  // Waits until `bytes` are free and nobody queued earlier is waiting, then takes them. If
  // that lasts: with kOverdraw, after the patience, takes them anyway (an overdraft); with
  // kGiveUp, after the admission wait, returns an empty lease.
  Task<Lease> acquire(uint64_t bytes, Patience policy = Patience::kOverdraw) {
    // The common case, no wait: no waiter, timer or trip round the event loop.
    if (Lease lease = tryAcquire(bytes); lease.held()) co_return std::move(lease);
    const uint64_t n = charge(bytes);
    asio::any_io_executor ex = co_await asio::this_coro::executor;
    auto wait = std::make_shared<Waiter>();
    wait->bytes = n;
    asio::steady_timer timer(ex);
    // Only raw pointers and integers in the co_await expression (the g++ 12 note in
    // task_group.h).
    BufferBudget* self = this;
    auto* exp = &ex;
    auto* waitp = &wait;
    auto* timerp = &timer;
    const bool give_up = policy == Patience::kGiveUp;
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [self, exp, waitp, timerp, give_up](auto handler) {
          std::shared_ptr<Waiter> w = *waitp;
          auto resume = [ex = *exp, h = std::move(handler)]() mutable {
            asio::post(ex, std::move(h));
          };
          std::unique_lock lock(self->mu_);
          if (self->waiters_.empty() && self->used_ + w->bytes <= self->capacity_) {
            self->take(w->bytes);
            w->granted = true;
            lock.unlock();
            resume();
            return;
          }
          ++self->waits_;
          w->resume = std::move(resume);
          self->waiters_.push_back(w);
          lock.unlock();
          // The timer's handler runs on this coroutine's executor; it holds the waiter and
          // acts only if the waiter is still queued.
          timerp->expires_after(give_up ? self->admission_wait_ : self->patience_);
          timerp->async_wait([self, w, give_up](const boost::system::error_code& ec) {
            if (!ec) self->expire(w, give_up);
          });
        },
        asio::use_awaitable);
    timer.cancel();
    if (!wait->granted) co_return Lease();
    co_return Lease(this, n);
  }

  // Takes `bytes` only if that needs no wait; an empty lease otherwise.
  Lease tryAcquire(uint64_t bytes) {
    const uint64_t n = charge(bytes);
    std::lock_guard lock(mu_);
    if (!waiters_.empty() || used_ + n > capacity_) return {};
    take(n);
    return Lease(this, n);
  }

  // Drops the waiting coroutines without resuming them: Asio unwinds each frame through its
  // own executor, i.e. when its (stopped) event loop is destroyed. For shutdown only, after
  // the loops stopped and before they are destroyed.
  void dropWaiters() {
    std::vector<std::move_only_function<void()>> dropped;
    {
      std::lock_guard lock(mu_);
      // The resume handlers, not just the queue entries: a waiter's patience timer still
      // holds the entry.
      for (auto& w : waiters_) dropped.push_back(std::move(w->resume));
      waiters_.clear();
    }
  }

  struct Stats {
    uint64_t capacity, used, peak, waiting, waits, overdrafts, refusals;
  };
  Stats stats() const {
    std::lock_guard lock(mu_);
    return {capacity_, used_, peak_, waiters_.size(), waits_, overdrafts_, refusals_};
  }

 private:
  struct Waiter {
    uint64_t bytes = 0;
    bool granted = false;  // written under mu_ before resume is called
    std::move_only_function<void()> resume;
  };

  // Caller holds mu_.
  void take(uint64_t bytes) {
    used_ += bytes;
    peak_ = std::max(peak_, used_);
  }

  // The patience of `w` ran out: if it still waits, it goes ahead over the budget
  // (`give_up` false) or leaves the queue without bytes.
  void expire(const std::shared_ptr<Waiter>& w, bool give_up) {
    std::vector<std::move_only_function<void()>> wake;
    {
      std::lock_guard lock(mu_);
      auto it = std::find(waiters_.begin(), waiters_.end(), w);
      if (it == waiters_.end()) return;  // granted meanwhile
      wake.push_back(std::move(w->resume));
      const bool was_front = it == waiters_.begin();
      waiters_.erase(it);
      if (give_up) {
        ++refusals_;
        // The one that left may have been all that held back those behind it.
        if (was_front) grantFront(wake);
      } else {
        take(w->bytes);
        w->granted = true;
        ++overdrafts_;
        // Nobody behind it can fit now: the overdraft only raised used_.
      }
    }
    for (auto& r : wake) r();
  }

  // Grants the queue's head while it fits. Caller holds mu_.
  void grantFront(std::vector<std::move_only_function<void()>>& wake) {
    while (!waiters_.empty() && used_ + waiters_.front()->bytes <= capacity_) {
      take(waiters_.front()->bytes);
      waiters_.front()->granted = true;
      wake.push_back(std::move(waiters_.front()->resume));
      waiters_.pop_front();
    }
  }

  uint64_t charge(uint64_t bytes) const { return std::clamp<uint64_t>(bytes, 1, capacity_); }

  void release(uint64_t bytes) {
    std::vector<std::move_only_function<void()>> wake;
    {
      std::lock_guard lock(mu_);
      used_ -= bytes;
      grantFront(wake);
    }
    for (auto& w : wake) w();
  }

  const uint64_t capacity_;
  const std::chrono::milliseconds patience_;
  const std::chrono::milliseconds admission_wait_;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
  uint64_t waits_ = 0;
  uint64_t overdrafts_ = 0;
  uint64_t refusals_ = 0;
  std::deque<std::shared_ptr<Waiter>> waiters_;
};

}  // namespace granary::gateway

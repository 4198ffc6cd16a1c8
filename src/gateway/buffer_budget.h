// BufferBudget: one allowance of bytes for the gateway's object-data buffers (the stripe
// buffers of GET streams and of uploads), so that resident memory is bounded by the budget
// rather than by the number of requests. A request that finds the budget spent waits,
// without blocking a thread and in arrival order among its kind, and meanwhile sends
// nothing and reads nothing from its client or its disks: backpressure reaches the client
// through TCP.
//
// Deadlock rule: a coroutine calls acquire() (which may wait) only while it holds no lease,
// or for a read with Holds::kLease (whose wait is bounded and then always succeeds); a
// second buffer, such as a read-ahead, is taken with tryAcquire() or not at all. Then every
// lease holder can make progress and give its bytes back. (A wait that may end in a
// refusal is bounded too, but it must not be taken while holding a lease the refusal
// would waste: a copy's reads hold their writer's.)
//
// Two kinds of borrower, which wait differently:
// - Reads (GET streams) hold a stripe for milliseconds. A read that waits longer than
//   `patience` (2 s by default) goes ahead over the budget (an overdraft, counted; its bytes
//   are charged, so later requests wait the longer). Without it a few dozen clients that
//   stop reading, each holding a stripe until the I/O timeout, would stall every other
//   GET; with it they cost memory for a while. How much: a read that holds another lease
//   meanwhile (Holds::kLease: decode space under a slice) always goes ahead, or it could
//   wait on itself; one that holds nothing (Holds::kNothing: a stream's next slice) goes
//   ahead only while everything lent stays within twice the budget (and in its turn among
//   such reads), else waits on, and after the longer of the patience and
//   `admission_wait` gets no lease (a refusal, counted: 503 before the answer's head, a
//   cut stream after it). So thousands of clients that read a byte a minute cost
//   at most about twice the budget, not a stripe each.
// - Uploads hold their buffer for as long as their client takes to send a stripe. They
//   never overdraw (that would make memory grow with the number of uploads): an upload
//   that waits longer than `admission_wait` (30 s by default) gets no lease (a refusal,
//   counted) and is answered 503, which S3 clients retry with backoff.
//
// Shares: uploads have half the budget of their own, and together never hold more. Reads
// use the rest and borrow whatever of the uploads' half is idle. The two queue apart and
// neither waits for the other: an upload that needs its half back takes it while reads
// still hold the borrowed bytes, and reads take nothing more until they gave them back.
// So GET streams keep half however many uploads queue, uploads keep half however busy
// the GET streams are, and the bytes lent stay under 1.5x the budget (plus overdrafts)
// at the worst moment, under the budget once borrowed bytes come back.
//
// A request for more than its kind may hold is charged that much (it then runs alone).
// Thread safety: all methods are thread safe; a Lease is released on any thread.
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
#include "granary/common/status.h"

#include <boost/asio/steady_timer.hpp>

namespace granary::gateway {

class BufferBudget {
 public:
  enum class Kind { kRead, kUpload };
  // For a read: whether its caller holds another lease while it waits (see above).
  enum class Holds { kLease, kNothing };

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)),
          bytes_(std::exchange(o.bytes_, 0)),
          kind_(o.kind_) {}
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        reset();
        budget_ = std::exchange(o.budget_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        kind_ = o.kind_;
      }
      return *this;
    }
    ~Lease() { reset(); }
    bool held() const { return budget_ != nullptr; }
    uint64_t bytes() const { return bytes_; }
    void reset() {
      if (budget_ != nullptr) budget_->release(bytes_, kind_);
      budget_ = nullptr;
      bytes_ = 0;
    }

   private:
    friend class BufferBudget;
    Lease(BufferBudget* budget, uint64_t bytes, Kind kind)
        : budget_(budget), bytes_(bytes), kind_(kind) {}
    BufferBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
    Kind kind_ = Kind::kRead;
  };

  // What a request answers when it got an empty lease (503: clients retry later).
  static Status spent() {
    return Status::unavailable("the gateway's buffer memory stayed spent by other requests");
  }

  static constexpr std::chrono::seconds kDefaultPatience{2};
  static constexpr std::chrono::seconds kDefaultAdmissionWait{30};

  explicit BufferBudget(uint64_t capacity,
                        std::chrono::milliseconds patience = kDefaultPatience,
                        std::chrono::milliseconds admission_wait = kDefaultAdmissionWait)
      : capacity_(std::max<uint64_t>(capacity, 2)),
        upload_capacity_(capacity_ / 2),
        patience_(patience),
        admission_wait_(admission_wait) {}
  BufferBudget(const BufferBudget&) = delete;
  BufferBudget& operator=(const BufferBudget&) = delete;

  // Waits until `bytes` are free in its kind's share and nobody of its kind queued earlier
  // is waiting, then takes them. If that lasts: a read, after the patience, takes them
  // anyway (an overdraft; for Holds::kNothing only within twice the budget, and an empty
  // lease after the admission wait); an upload, after the admission wait, gets an empty
  // lease.
  Task<Lease> acquire(uint64_t bytes, Kind kind = Kind::kRead, Holds holds = Holds::kLease) {
    // The common case, no wait: no waiter, timer or trip round the event loop.
    if (Lease lease = tryAcquire(bytes, kind); lease.held()) co_return std::move(lease);
    auto wait = std::make_shared<Waiter>();
    wait->bytes = charge(bytes, kind);
    wait->kind = kind;
    wait->may_refuse = kind == Kind::kUpload || holds == Holds::kNothing;
    wait->give_up = std::chrono::steady_clock::now() + admission_wait_;
    asio::any_io_executor ex = co_await asio::this_coro::executor;
    asio::steady_timer timer(ex);
    wait->timer = &timer;
    // Only raw pointers in the co_await expression (the g++ 12 note in task_group.h).
    BufferBudget* self = this;
    auto* exp = &ex;
    auto* waitp = &wait;
    auto* timerp = &timer;
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [self, exp, waitp, timerp](auto handler) {
          std::shared_ptr<Waiter> w = *waitp;
          auto resume = [ex = *exp, h = std::move(handler)]() mutable {
            asio::post(ex, std::move(h));
          };
          std::unique_lock lock(self->mu_);
          if (self->mayTake(w->bytes, w->kind)) {  // room since tryAcquire
            self->grant(*w);
            lock.unlock();
            resume();
            return;
          }
          ++self->waits_;
          w->resume = std::move(resume);
          self->queue(w->kind).push_back(w);
          lock.unlock();
          // The timer's handler runs on this coroutine's executor; it holds the waiter and
          // acts only if the waiter is still queued.
          timerp->expires_after(w->kind == Kind::kRead ? self->patience_
                                                       : self->admission_wait_);
          self->armTimer(w);
        },
        asio::use_awaitable);
    timer.cancel();
    if (!wait->granted) co_return Lease();
    co_return Lease(this, wait->bytes, kind);
  }

  // Takes `bytes` only if that needs no wait; an empty lease otherwise.
  Lease tryAcquire(uint64_t bytes, Kind kind = Kind::kRead) {
    const uint64_t n = charge(bytes, kind);
    std::lock_guard lock(mu_);
    if (!mayTake(n, kind)) return {};
    take(n, kind);
    return Lease(this, n, kind);
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
      for (auto* q : {&reads_, &uploads_}) {
        for (auto& w : *q) dropped.push_back(std::move(w->resume));
        q->clear();
      }
    }
  }

  struct Stats {
    uint64_t capacity, used, peak, uploads, waiting, waits, overdrafts, refusals;
  };
  Stats stats() const {
    std::lock_guard lock(mu_);
    return {capacity_, used_,  peak_,      upload_used_, reads_.size() + uploads_.size(),
            waits_,    overdrafts_, refusals_};
  }

 private:
  struct Waiter {
    uint64_t bytes = 0;
    Kind kind = Kind::kRead;
    bool may_refuse = false;  // an upload, or a read holding nothing
    std::chrono::steady_clock::time_point give_up;  // then refused, if it may be
    // The waiting coroutine's, alive while it waits; used on that coroutine's executor only.
    asio::steady_timer* timer = nullptr;
    bool granted = false;  // written under mu_ before resume is called
    std::move_only_function<void()> resume;
  };

  // Waits for the waiter's timer (set to when it next runs out) and then expires it.
  void armTimer(const std::shared_ptr<Waiter>& w) {
    w->timer->async_wait([this, w](const boost::system::error_code& ec) {
      if (!ec) expire(w);
    });
  }

  std::deque<std::shared_ptr<Waiter>>& queue(Kind kind) {
    return kind == Kind::kRead ? reads_ : uploads_;
  }
  const std::deque<std::shared_ptr<Waiter>>& queue(Kind kind) const {
    return kind == Kind::kRead ? reads_ : uploads_;
  }

  uint64_t charge(uint64_t bytes, Kind kind) const {
    return std::clamp<uint64_t>(bytes, 1, kind == Kind::kRead ? capacity_ : upload_capacity_);
  }

  // Whether the head of `kind`'s queue, or a newcomer when the queue is empty, may take
  // `n` bytes now: a read within the whole budget, an upload within the uploads' half.
  // Caller holds mu_.
  bool fits(uint64_t n, Kind kind) const {
    return kind == Kind::kRead ? used_ + n <= capacity_
                               : upload_used_ + n <= upload_capacity_;
  }
  bool mayTake(uint64_t n, Kind kind) const { return queue(kind).empty() && fits(n, kind); }

  // Caller holds mu_.
  void take(uint64_t n, Kind kind) {
    used_ += n;
    if (kind == Kind::kUpload) upload_used_ += n;
    peak_ = std::max(peak_, used_);
  }
  void grant(Waiter& w) {
    take(w.bytes, w.kind);
    w.granted = true;
  }

  // Grants each queue's head while it fits. Caller holds mu_.
  void grantWaiting(std::vector<std::move_only_function<void()>>& wake) {
    for (Kind kind : {Kind::kUpload, Kind::kRead}) {
      auto& q = queue(kind);
      while (!q.empty() && fits(q.front()->bytes, kind)) {
        grant(*q.front());
        wake.push_back(std::move(q.front()->resume));
        q.pop_front();
      }
    }
  }

  // The wait of `w` ran out: if it still waits, a read goes ahead over the budget (one
  // holding nothing only within twice the budget, else it waits on until its admission
  // wait ends) and an upload, or a read past its admission wait, leaves the queue without
  // bytes. Runs on the waiter's executor (its timer's handler).
  void expire(const std::shared_ptr<Waiter>& w) {
    std::vector<std::move_only_function<void()>> wake;
    {
      std::lock_guard lock(mu_);
      auto& q = queue(w->kind);
      auto it = std::find(q.begin(), q.end(), w);
      if (it == q.end()) return;  // granted meanwhile
      const auto now = std::chrono::steady_clock::now();
      // A read holding nothing overdraws within twice the budget, and not ahead of one
      // such read queued before it (which would wait on as later, smaller ones pass).
      const bool overdraw =
          w->kind == Kind::kRead &&
          (!w->may_refuse ||
           (used_ + w->bytes <= 2 * capacity_ &&
            std::none_of(q.begin(), it, [](const auto& e) { return e->may_refuse; })));
      if (!overdraw && w->kind == Kind::kRead && now < w->give_up) {
        // No room even over the budget: look again after another patience.
        w->timer->expires_at(std::min(now + patience_, w->give_up));
        armTimer(w);
        return;
      }
      wake.push_back(std::move(w->resume));
      q.erase(it);
      if (overdraw) {
        grant(*w);
        ++overdrafts_;
      } else {
        ++refusals_;
      }
      // Whoever it held back may go now (after an overdraft, only uploads never do).
      grantWaiting(wake);
    }
    for (auto& r : wake) r();
  }

  void release(uint64_t bytes, Kind kind) {
    std::vector<std::move_only_function<void()>> wake;
    {
      std::lock_guard lock(mu_);
      used_ -= bytes;
      if (kind == Kind::kUpload) upload_used_ -= bytes;
      grantWaiting(wake);
    }
    for (auto& w : wake) w();
  }

  const uint64_t capacity_;
  const uint64_t upload_capacity_;
  const std::chrono::milliseconds patience_;
  const std::chrono::milliseconds admission_wait_;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
  uint64_t upload_used_ = 0;
  uint64_t peak_ = 0;
  uint64_t waits_ = 0;
  uint64_t overdrafts_ = 0;
  uint64_t refusals_ = 0;
  std::deque<std::shared_ptr<Waiter>> reads_;
  std::deque<std::shared_ptr<Waiter>> uploads_;
};

}  // namespace granary::gateway

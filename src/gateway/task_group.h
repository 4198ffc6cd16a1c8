// Bridges coroutines on an event loop to blocking work on a WorkerPool.
//
// TaskGroup runs functions on the pool and lets one coroutine await them all; the
// coroutine resumes on its own executor. Tasks never wait for other pool tasks, so the
// pool cannot deadlock. offload() is the one-task case that returns the task's value.
// Thread safety: a TaskGroup belongs to one coroutine; its tasks may finish on any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/steady_timer.hpp>

#include "asio.h"
#include "granary/common/status.h"
#include "granary/common/worker_pool.h"

namespace granary::gateway {

class TaskGroup {
 public:
  TaskGroup(WorkerPool& pool, asio::any_io_executor executor)
      : pool_(pool), state_(std::make_shared<State>()) {
    state_->executor = std::move(executor);
  }
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;

  // Called once, on any thread, when an asynchronous task ends.
  using Done = std::move_only_function<void(Status)>;

  // An exception out of fn ends the task with Status::internal (it would otherwise end the
  // pool's thread, and the process).
  void spawn(std::move_only_function<Status()> fn) {
    spawnAsync([fn = std::move(fn)](Done done) mutable { done(caught(fn)); });
  }

  // A task that starts on the pool and ends later: fn(done) runs on a pool thread, and the
  // task is over when `done` is called (from fn or from whatever fn started), not when fn
  // returns. For I/O that completes elsewhere without holding a pool thread meanwhile.
  void spawnAsync(std::move_only_function<void(Done)> fn) {
    {
      std::lock_guard lock(state_->mu);
      ++state_->pending;
    }
    pool_.submit([st = state_, fn = std::move(fn)]() mutable {
      fn([st](Status s) { st->finish(std::move(s)); });
    });
  }

  // A task that starts on the calling thread, which must not block, and ends when `done`
  // is called, from any thread: for calls that are asynchronous themselves.
  void startHere(std::move_only_function<void(Done)> fn) {
    {
      std::lock_guard lock(state_->mu);
      ++state_->pending;
    }
    fn([st = state_](Status s) { st->finish(std::move(s)); });
  }

  bool idle() const {
    std::lock_guard lock(state_->mu);
    return state_->pending == 0;
  }

  // Blocks the calling thread until every spawned task has finished. For destructors only:
  // a coroutine frame destroyed while its tasks still use it (an io_context destroyed at
  // shutdown with the coroutine suspended elsewhere). A coroutine awaits wait() instead.
  void blockUntilIdle() const {
    std::unique_lock lock(state_->mu);
    state_->idle_cv.wait(lock, [st = state_.get()] { return st->pending == 0; });
  }

  // Waits until every spawned task has finished; returns the first error, then resets it.
  Task<Status> wait() {
    // `st` in this frame keeps the state alive until we resume; the initiation captures
    // only a raw pointer. g++ 12 can destroy temporaries of a co_await expression twice,
    // so nothing with a destructor may be captured by value in one.
    std::shared_ptr<State> st = state_;
    State* raw = st.get();
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [raw](auto handler) {
          std::unique_lock lock(raw->mu);
          auto resume = [raw, h = std::move(handler)]() mutable {
            asio::post(raw->executor, std::move(h));
          };
          if (raw->pending == 0) {
            lock.unlock();
            resume();
          } else {
            raw->waiter = std::move(resume);
          }
        },
        asio::use_awaitable);
    co_return st->takeError();
  }

  // wait() with a deadline: true once every spawned task has finished, false when
  // `timeout` passes first (the tasks go on; wait() for them later, or let them finish on
  // their own: they hold what they use). Does not take the first error.
  Task<bool> waitFor(std::chrono::milliseconds timeout) {
    std::shared_ptr<State> st = state_;  // the g++ 12 note in wait()
    std::shared_ptr<State>* stp = &st;
    asio::steady_timer timer(st->executor, timeout);
    asio::steady_timer* tp = &timer;
    bool done = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(bool)>(
        [stp, tp](auto handler) {
          using Handler = decltype(handler);
          // Exactly one of the last task and the timer resumes the coroutine.
          struct Once {
            std::mutex mu;
            std::optional<Handler> handler;
          };
          auto once = std::make_shared<Once>();
          once->handler.emplace(std::move(handler));
          std::shared_ptr<State> state = *stp;
          // Holds the executor, not the state: the state keeps this in its waiter.
          auto resume = [once, ex = state->executor](bool finished) {
            std::optional<Handler> h;
            {
              std::lock_guard lock(once->mu);
              if (!once->handler) return;
              h.emplace(std::move(*once->handler));
              once->handler.reset();
            }
            asio::post(ex, [h = std::move(*h), finished]() mutable {
              std::move(h)(finished);
            });
          };
          std::unique_lock lock(state->mu);
          if (state->pending == 0) {
            lock.unlock();
            resume(true);
            return;
          }
          state->waiter = [resume] { resume(true); };
          lock.unlock();
          tp->async_wait([resume](const boost::system::error_code& ec) {
            if (!ec) resume(false);
          });
        },
        asio::use_awaitable);
    co_return done;
  }

 private:
  static Status caught(std::move_only_function<Status()>& fn) {
    try {
      return fn();
    } catch (const std::exception& e) {
      return Status::internal(std::string("exception in work on the pool: ") + e.what());
    } catch (...) {
      return Status::internal("exception of unknown type in work on the pool");
    }
  }

  struct State {
    mutable std::mutex mu;
    int pending = 0;
    Status first_error;
    std::move_only_function<void()> waiter;
    std::condition_variable idle_cv;  // pending reached 0 (blockUntilIdle)
    asio::any_io_executor executor;

    // One task ended with `s`.
    void finish(Status s) {
      std::move_only_function<void()> w;
      {
        std::lock_guard lock(mu);
        if (!s.isOk() && first_error.isOk()) first_error = std::move(s);
        if (--pending == 0) {
          w = std::move(waiter);
          idle_cv.notify_all();
        }
      }
      if (w) w();
    }

    Status takeError() {
      std::lock_guard lock(mu);
      return std::exchange(first_error, Status::ok());
    }
  };
  WorkerPool& pool_;
  std::shared_ptr<State> state_;
};

// Blocks, when it goes, until `group` is idle. Declared after what the group's tasks use,
// it keeps a coroutine frame destroyed with tasks in flight (an exception, or its
// io_context destroyed at shutdown) from freeing that under them.
class IdleBeforeFreed {
 public:
  explicit IdleBeforeFreed(const TaskGroup& group) : group_(group) {}
  IdleBeforeFreed(const IdleBeforeFreed&) = delete;
  IdleBeforeFreed& operator=(const IdleBeforeFreed&) = delete;
  ~IdleBeforeFreed() { group_.blockUntilIdle(); }

 private:
  const TaskGroup& group_;
};

// Runs fn() on the pool and returns its result to the awaiting coroutine; what fn throws
// is thrown there (the server answers it 500 InternalError).
template <typename F>
auto offload(WorkerPool& pool, F fn) -> Task<std::invoke_result_t<F&>> {
  using R = std::invoke_result_t<F&>;
  struct Outcome {
    std::optional<R> value;
    std::exception_ptr thrown;
  };
  auto out = std::make_shared<Outcome>();  // one allocation, as before exceptions came
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  TaskGroup group(pool, ex);
  group.spawn([out, fn = std::move(fn)]() mutable {
    try {
      out->value.emplace(fn());
    } catch (...) {
      out->thrown = std::current_exception();
    }
    return Status::ok();
  });
  (void)co_await group.wait();
  if (out->thrown) std::rethrow_exception(out->thrown);
  co_return std::move(*out->value);
}

}  // namespace granary::gateway

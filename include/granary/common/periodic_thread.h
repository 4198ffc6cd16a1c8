// PeriodicThread: runs a pass every `interval` on its own thread, from start() until
// stop() (the background jobs: reclaimer, lifecycle). stop() wakes the thread at once and
// joins it after the pass in progress, if any, ends: a long pass asks stopping() between
// its steps and returns early, so that shutting down does not wait for it.
// Thread safety: start() and stop() may be called from any thread, also at the same time
// (one waits for the other: a start() during a stop() begins after the old thread ended, so
// two never run passes side by side); not from the pass. The pass runs on the periodic
// thread only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace granary {

class PeriodicThread {
 public:
  PeriodicThread() = default;
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;
  ~PeriodicThread() { stop(); }

  // The first pass runs `first` after start() (by default one interval), the next ones
  // `interval` after the previous one ended. No-op if already started.
  void start(std::chrono::milliseconds interval, std::function<void()> pass,
             std::optional<std::chrono::milliseconds> first = std::nullopt) {
    std::lock_guard serial(lifecycle_);
    std::lock_guard lock(mu_);
    if (thread_.joinable()) return;
    stopping_ = false;
    thread_ = std::thread([this, interval, wait = first.value_or(interval),
                           pass = std::move(pass)]() mutable {
      std::unique_lock lock(mu_);
      while (!stopping_) {
        cv_.wait_for(lock, std::exchange(wait, interval),
                     [this] { return stopping_ || triggered_; });
        if (stopping_) break;
        triggered_ = false;
        lock.unlock();
        pass();
        lock.lock();
      }
    });
  }

  // Runs a pass now (after the one in progress, if any) instead of at the next interval.
  void trigger() {
    {
      std::lock_guard lock(mu_);
      triggered_ = true;
    }
    cv_.notify_all();
  }

  // True from stop() on (until the next start()).
  bool stopping() const {
    std::lock_guard lock(mu_);
    return stopping_;
  }

  void stop() {
    std::lock_guard serial(lifecycle_);  // held through the join: see the class comment
    std::thread joining;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      joining = std::move(thread_);
    }
    cv_.notify_all();
    if (joining.joinable()) joining.join();
  }

 private:
  std::mutex lifecycle_;  // serialises start() and stop(); taken before mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool triggered_ = false;
  std::thread thread_;
};

}  // namespace granary

// CallsInFlight: counts calls that end on another thread and must end before the event
// loops (and what the calls use) are destroyed.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <utility>

namespace granary::gateway {

// Counts calls that end on another thread and must end before the event loops are
// destroyed: each holds a Token until it is over. Thread safe.
class CallsInFlight {
 public:
  class Token {
   public:
    explicit Token(CallsInFlight& calls) : calls_(&calls) { calls.begin(); }
    Token(Token&& o) noexcept : calls_(std::exchange(o.calls_, nullptr)) {}
    Token& operator=(Token&&) = delete;
    ~Token() {
      if (calls_ != nullptr) calls_->end();
    }

   private:
    CallsInFlight* calls_;
  };

  void waitNone() {
    std::unique_lock lock(mu_);
    none_.wait(lock, [this] { return n_ == 0; });
  }

 private:
  void begin() {
    std::lock_guard lock(mu_);
    ++n_;
  }
  void end() {
    std::lock_guard lock(mu_);
    if (--n_ == 0) none_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable none_;
  size_t n_ = 0;
};

}  // namespace granary::gateway

#include "granary/common/worker_pool.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "granary/common/log.h"

namespace granary {

namespace {
// Adds `nice` to the calling thread's niceness, at most 19 (Linux: setpriority on a thread
// id is per thread).
void niceThisThread(int nice) {
  if (nice == 0) return;
  const auto tid = static_cast<id_t>(::gettid());
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);  // -1 is a valid niceness
  if (errno == 0 && ::setpriority(PRIO_PROCESS, tid, std::min(19, now + nice)) == 0) return;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    log::warn("worker pool: cannot add {} to its threads' niceness ({})", nice,
              std::strerror(errno));
  }
}
}  // namespace

WorkerPool::WorkerPool(size_t threads, std::string name, int nice) {
  if (threads == 0) threads = 1;
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this, nice] {
      niceThisThread(nice);
      run();
    });
    std::string tname = name.substr(0, 12) + std::to_string(i);
    pthread_setname_np(threads_.back().native_handle(), tname.c_str());
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(Task task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

size_t WorkerPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void WorkerPool::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace granary

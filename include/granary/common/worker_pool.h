// WorkerPool: a fixed set of threads for blocking work (RocksDB calls, disk I/O in the
// skeleton's synchronous chunk store, EC of large buffers) so event loops never block.
//
// Thread safety: submit() may be called from any thread. Tasks run in FIFO order on any
// worker. The destructor drains queued tasks, then joins.
//
// `nice` > 0 adds that much to the threads' niceness, up to 19 (setpriority per thread;
// raising it needs no privilege): a pool of work that may wait while others' is served
// first. Where the kernel refuses, the threads keep the process's niceness (logged once).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace granary {

class WorkerPool {
 public:
  using Task = std::move_only_function<void()>;

  WorkerPool(size_t threads, std::string name, int nice = 0);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(Task task);
  // Blocks until no task is queued or running; true if there was one to wait for. For
  // shutdown: work that completes elsewhere and comes back (a failed fragment write moved
  // to another drive) is drained by calling this and the other side's drain in turn.
  bool waitIdle();
  size_t threads() const { return threads_.size(); }
  size_t queued() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;  // the queue is empty and no task runs
  std::deque<Task> queue_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace granary

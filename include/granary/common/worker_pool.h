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
  size_t threads() const { return threads_.size(); }
  size_t queued() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace granary

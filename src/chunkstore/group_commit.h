// GroupCommit: leader/follower batching of durable commits, as in RocksDB's WriteThread
// and LevelDB's writer queue. Each caller queues its request and waits; the first caller
// that finds no flush running becomes the leader, takes every request queued so far and
// flushes them as one batch (one fdatasync, one synced index write), while later callers
// queue up behind it for the next batch. Under load a batch holds everything that arrived
// during the previous flush, so syncs per second stay bounded by the drive's sync latency
// while blobs per second scale with concurrency.
//
// Thread safety: commit() may be called from any number of threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <utility>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

namespace granary::chunkstore {

template <typename Request>
class GroupCommit {
 public:
  // Called by the leader, without the lock held, once per batch; it must set every
  // request's outcome (the caller reads it after commit() returns).
  using Flush = std::function<void(std::span<Request* const> batch)>;

  explicit GroupCommit(Flush flush) : flush_(std::move(flush)) {}

  // Returns once `request` has been flushed (by this thread or by another leader).
  // Request must have a `bool done` member, false on entry.
  void commit(Request& request) {
    std::unique_lock lock(mu_);
    queue_.push_back(&request);
    while (!request.done) {
      if (!flushing_ && !queue_.empty()) {
        flushing_ = true;
        std::vector<Request*> batch;
        batch.swap(queue_);
        lock.unlock();
        flush_(batch);
        lock.lock();
        flushing_ = false;
        ++batches_;
        for (Request* r : batch) r->done = true;
        cv_.notify_all();
      } else {
        cv_.wait(lock);
      }
    }
  }

  // Batches flushed so far (for tests and stats).
  uint64_t batches() const {
    std::lock_guard lock(mu_);
    return batches_;
  }

 private:
  Flush flush_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Request*> queue_;  // requests waiting for the next batch
  bool flushing_ = false;        // a leader is flushing a batch now
  uint64_t batches_ = 0;
};

}  // namespace granary::chunkstore

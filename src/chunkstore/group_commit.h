// GroupCommit: leader/follower batching of durable commits in two pipelined stages, as in
// RocksDB's WriteThread and LevelDB's writer queue. Each caller queues its request and
// waits; a caller that finds a stage idle with work queued becomes that stage's leader
// and runs it for everything queued:
//   stage 1 (sync):  make the data durable (one fdatasync per touched file);
//   stage 2 (index): make the index entries durable (one synced WriteBatch).
// A request enters stage 2 only after its own stage 1, so an index entry never points at
// data that is not durable; but batch N's index write overlaps batch N+1's data sync, and
// stage 2 merges every batch that finished stage 1 meanwhile. Under load a batch holds
// everything that arrived during the previous sync, so syncs per second stay bounded by
// the drive's sync latency while blobs per second scale with concurrency.
//
// Thread safety: commit() may be called from any number of threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace granary::chunkstore {

// Request needs `bool done` (false on entry) and `bool ok_after_sync`, which stage 1 sets
// to say whether the request goes on to stage 2.
template <typename Request>
class GroupCommit {
 public:
  // Called by a leader without the lock held. Stage 1 sets each request's ok_after_sync
  // (and its outcome when false); stage 2 sets the outcome of the rest.
  using Stage = std::function<void(std::span<Request* const> batch)>;

  GroupCommit(Stage sync, Stage index) : sync_(std::move(sync)), index_(std::move(index)) {}

  // Returns once `request` has been through both stages (or failed in the first).
  void commit(Request& request) {
    std::unique_lock lock(mu_);
    to_sync_.push_back(&request);
    while (!request.done) {
      if (!syncing_ && !to_sync_.empty()) {
        syncing_ = true;
        std::vector<Request*> batch;
        batch.swap(to_sync_);
        lock.unlock();
        sync_(batch);
        lock.lock();
        syncing_ = false;
        ++batches_;
        for (Request* r : batch) {
          if (r->ok_after_sync) {
            to_index_.push_back(r);
          } else {
            r->done = true;
          }
        }
        cv_.notify_all();
      } else if (!indexing_ && !to_index_.empty()) {
        indexing_ = true;
        std::vector<Request*> batch;
        batch.swap(to_index_);
        lock.unlock();
        index_(batch);
        lock.lock();
        indexing_ = false;
        for (Request* r : batch) r->done = true;
        cv_.notify_all();
      } else {
        cv_.wait(lock);
      }
    }
  }

  // Stage-1 batches (data syncs) so far.
  uint64_t batches() const {
    std::lock_guard lock(mu_);
    return batches_;
  }

 private:
  Stage sync_;
  Stage index_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Request*> to_sync_;   // waiting for stage 1
  std::vector<Request*> to_index_;  // synced, waiting for stage 2
  bool syncing_ = false;
  bool indexing_ = false;
  uint64_t batches_ = 0;
};

}  // namespace granary::chunkstore

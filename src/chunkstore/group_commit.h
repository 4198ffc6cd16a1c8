// GroupCommit: batching of durable commits in two pipelined stages, each run by a thread
// of its own (the batching of RocksDB's WriteThread and LevelDB's writer queue, without
// blocking the writers):
//   stage 1 (sync):  make the data durable (one fdatasync per touched file);
//   stage 2 (index): make the index entries durable (one synced WriteBatch).
// submit() queues a request and returns at once; each stage thread takes everything queued
// for it as one batch. A request enters stage 2 only after its own stage 1, so an index
// entry never points at data that is not durable; but batch N's index write overlaps batch
// N+1's data sync, and stage 2 merges every batch that finished stage 1 meanwhile. Under
// load a batch holds everything that arrived during the previous sync, so syncs per second
// stay bounded by the drive's sync latency while blobs per second scale with the number of
// requests in flight, which no thread pool bounds: a writer does not wait here.
//
// `finish` runs once per request, on a stage thread, after its last stage; it must not
// block for long (it delays the stage's next batch).
//
// Thread safety: submit() may be called from any number of threads. The destructor
// finishes every request queued before it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "granary/common/log.h"

namespace granary::chunkstore {

// Request needs `bool ok_after_sync` (false on entry), which stage 1 sets to say whether
// the request goes on to stage 2.
template <typename Request>
class GroupCommit {
 public:
  // Called on the stage's thread. Stage 1 sets each request's ok_after_sync (and its
  // outcome when false); stage 2 sets the outcome of the rest.
  using Stage = std::function<void(std::span<Request* const> batch)>;
  using Finish = std::function<void(Request* request)>;

  GroupCommit(Stage sync, Stage index, Finish finish)
      : sync_(std::move(sync)), index_(std::move(index)), finish_(std::move(finish)) {
    sync_thread_ = std::thread([this] { runSync(); });
    index_thread_ = std::thread([this] { runIndex(); });
  }
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  ~GroupCommit() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    sync_cv_.notify_all();
    sync_thread_.join();  // it drains stage 1 first, then lets stage 2 end
    index_thread_.join();
  }

  void submit(Request* request) {
    {
      std::lock_guard lock(mu_);
      to_sync_.push_back(request);
    }
    sync_cv_.notify_one();
  }

  // Stage-1 batches that synced at least one write, so far.
  uint64_t batches() const {
    std::lock_guard lock(mu_);
    return batches_;
  }

 private:
  // `finish` runs callers' callbacks: one that throws must not end the stage thread (and
  // the process with it).
  void finishOne(Request* r) {
    try {
      finish_(r);
    } catch (const std::exception& e) {
      log::error("group commit: a completion callback threw: {}", e.what());
    }
  }

  void runSync() {
    std::vector<Request*> batch;
    std::vector<Request*> failed;
    std::unique_lock lock(mu_);
    for (;;) {
      sync_cv_.wait(lock, [&] { return stopping_ || !to_sync_.empty(); });
      if (to_sync_.empty()) {
        sync_over_ = true;
        index_cv_.notify_all();
        return;
      }
      batch.swap(to_sync_);
      lock.unlock();
      sync_(batch);
      lock.lock();
      const size_t synced_before = to_index_.size();
      for (Request* r : batch) (r->ok_after_sync ? to_index_ : failed).push_back(r);
      if (to_index_.size() > synced_before) ++batches_;  // not one whose writes all failed
      batch.clear();
      index_cv_.notify_all();
      if (!failed.empty()) {
        lock.unlock();
        for (Request* r : failed) finishOne(r);
        failed.clear();
        lock.lock();
      }
    }
  }

  void runIndex() {
    std::vector<Request*> batch;
    std::unique_lock lock(mu_);
    for (;;) {
      index_cv_.wait(lock, [&] { return sync_over_ || !to_index_.empty(); });
      if (to_index_.empty()) return;
      batch.swap(to_index_);
      lock.unlock();
      index_(batch);
      for (Request* r : batch) finishOne(r);
      batch.clear();
      lock.lock();
    }
  }

  Stage sync_;
  Stage index_;
  Finish finish_;
  mutable std::mutex mu_;
  std::condition_variable sync_cv_;   // to_sync_ or stopping_ changed
  std::condition_variable index_cv_;  // to_index_ or sync_over_ changed
  std::vector<Request*> to_sync_;     // waiting for stage 1
  std::vector<Request*> to_index_;    // synced, waiting for stage 2
  bool stopping_ = false;
  bool sync_over_ = false;  // stage 1 ended: stage 2 ends once its queue is empty
  uint64_t batches_ = 0;
  // Last: started once everything above exists.
  std::thread sync_thread_;
  std::thread index_thread_;
};

}  // namespace granary::chunkstore

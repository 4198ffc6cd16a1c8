// The committer thread and group commit. Request evaluation is in commit_apply.cc.
#include "index_kv/commit_queue.h"

#include <rocksdb/options.h>

#include <algorithm>
#include <exception>
#include <system_error>

#include "granary/common/log.h"

namespace granary::index_kv {

CommitQueue::CommitQueue(rocksdb::DB* db, const ColumnFamilies& cfs, const Clock& clock,
                         size_t max_batch, size_t gc_entry_blobs)
    : db_(db),
      cfs_(cfs),
      clock_(clock),
      max_batch_(std::max<size_t>(max_batch, 1)),
      gc_entry_blobs_(gc_entry_blobs),
      opened_unix_nanos_(static_cast<uint64_t>(clock.nowUnixNanos())) {}

CommitQueue::~CommitQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Only reachable if start() failed or was never called: fail whatever is left.
  for (CommitRequest* req : pending_) {
    req->status = Status::unavailable("index: shutting down");
    finish(*req);
  }
}

void CommitQueue::finish(CommitRequest& req) {
  std::move_only_function<void()> done = std::move(req.on_done);
  try {
    done();  // may free `req`
  } catch (const std::exception& e) {  // e.g. bad_alloc posting the answer
    log::error("index: answering a commit failed: {}", e.what());
  }
}

Status CommitQueue::start() {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    return Status::internal(std::string("index: cannot start the committer: ") + e.what());
  }
  return Status::ok();
}

void CommitQueue::submit(CommitRequest& req) {
  std::promise<void> answered;
  std::future<void> done = answered.get_future();
  req.on_done = [&answered] { answered.set_value(); };
  submitAsync(req);
  done.wait();
}

void CommitQueue::submitAsync(CommitRequest& req) {
  Status refused = Status::unavailable("index: not accepting commits");
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && thread_.joinable()) {
      try {
        pending_.push_back(&req);
        queued = true;
      } catch (const std::exception& e) {
        refused = Status::internal(std::string("index: cannot queue a commit: ") + e.what());
      }
    }
  }
  // Once queued, `req` may already be committed and freed: touch it no more.
  if (queued) {
    cv_.notify_one();
    return;
  }
  req.status = std::move(refused);
  finish(req);
}

IndexCommitStats CommitQueue::stats() const {
  return IndexCommitStats{batches_.load(), requests_.load(), opened_unix_nanos_,
                          failed_writes_.load(), failing_.load()};
}

void CommitQueue::run() {
  std::vector<CommitRequest*> batch;
  batch.reserve(max_batch_);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, and everything drained
      size_t n = std::min(max_batch_, pending_.size());
      batch.assign(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(n));
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(n));
    }
    commitBatch(batch);
    batch.clear();
  }
}

// A bulk delete (a lifecycle expiry, `aws s3 rm --recursive`) leaves its tombstones in
// the objects' memtable, where every listing that crosses them walks them one by one
// (300,000 of them: 130 ms a page, bench/index_bench.cc) until the memtable fills up with
// other writes. Flushed into a table file, they are compacted away soon after
// (RocksResources: CompactOnDeletionCollector).
void CommitQueue::flushAfterBulkDeletes(uint64_t deletes) {
  constexpr uint64_t kFlushAfterDeletes = 16 * 1024;
  deletes_unflushed_ += deletes;
  if (deletes_unflushed_ < kFlushAfterDeletes) return;
  // Not while an earlier memtable is still being flushed: with RocksDB's two write
  // buffers, a second would stop every write until the first is done.
  uint64_t immutable = 0;
  if (db_->GetIntProperty(cfs_.objects, "rocksdb.num-immutable-mem-table", &immutable) &&
      immutable > 0) {
    return;
  }
  deletes_unflushed_ = 0;
  rocksdb::FlushOptions options;
  options.wait = false;              // the commit thread only asks for it
  options.allow_write_stall = true;  // and never waits for a stall to clear
  if (rocksdb::Status s = db_->Flush(options, cfs_.objects); !s.ok()) {
    log::warn("index: flushing the objects after bulk deletes: {}", s.ToString());
  }
}

void CommitQueue::commitBatch(const std::vector<CommitRequest*>& batch) {
  BatchBuilder builder(db_, cfs_, clock_, gc_entry_blobs_);
  for (CommitRequest* req : batch) {
    try {
      builder.apply(*req);
    } catch (...) {  // e.g. bad_alloc: fail this request alone (apply rolled it back)
      // A message short enough for the string's inline buffer: no allocation here, where
      // one may just have failed.
      static_assert(sizeof("commit threw") <= 16);
      req->status = Status::internal("commit threw");
    }
  }
  bool written = false;
  if (builder.batch().Count() > 0) {
    rocksdb::WriteOptions options;
    options.sync = true;
    rocksdb::Status s = db_->Write(options, &builder.batch());
    batches_.fetch_add(1, std::memory_order_relaxed);
    written = s.ok();
    failing_.store(!written, std::memory_order_relaxed);
    if (!written) failed_writes_.fetch_add(1, std::memory_order_relaxed);
    if (!s.ok()) {
      // Never "refused": RocksDB may have appended the batch to its log before the sync
      // (or the write) failed, and then a restart replays it. What the caller hears must
      // leave the blobs to the orphan sweep (commitRefused), whatever the code says to the
      // client: out of space is still 507, a busy or stalled database no retryable
      // "nothing sent".
      Status st = fromRocks(s, "index: commit write (its outcome is unknown until the index "
                               "restarts)");
      if (st.code() == Status::Code::kUnavailable) {
        st = Status(st.code(), st.message(), /*retryable=*/false);
      } else if (st.code() != Status::Code::kNoSpace) {
        st = Status::ioError(st.message());  // not a refusal: never kNotFound, kInvalidArgument
      }
      log::error("{}", st.toString());
      for (CommitRequest* req : batch) {
        if (req->status.isOk()) {
          req->status = st;
          req->replaced.reset();
        }
      }
    }
  }
  requests_.fetch_add(batch.size(), std::memory_order_relaxed);
  // The caller may destroy its request as soon as it is told: touch nothing after.
  for (CommitRequest* req : batch) finish(*req);
  if (written) flushAfterBulkDeletes(builder.objectDeletes());  // once they are told
}

}  // namespace granary::index_kv

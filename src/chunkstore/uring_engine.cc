// The io_uring IoEngine.
//  - Synchronous calls submit one SQE on the calling thread's own ring and wait for its CQE
//    (a ring is not safe to share without a lock; a blocked caller has nothing else to do).
//  - Asynchronous calls go to one ring shared by the whole engine (AsyncRing): many
//    requests in flight, submissions batched, and completions signalled through an eventfd
//    registered with the ring, which an Asio io_context on the engine's completion thread
//    waits on (Asio 1.74 has no io_uring backend of its own). The callbacks run there.
//    The ring's lock covers preparing SQEs, not the io_uring_enter that submits them (the
//    completion thread would wait for the whole kernel submission path), nor the CQ,
//    which only the completion thread reads.
//    The ring has 1 MiB of registered buffers, lent in 16 KiB slots (registeredBuffer) for
//    small reads: their I/O is READ_FIXED/WRITE_FIXED, with no page pinning per request.
// Short transfers and -EAGAIN/-EINTR are re-queued in both (as liburing's io_uring-cp.c;
// up to kMaxAgain -EAGAIN/-EINTR in a row),
// and in the shared ring -ECANCELED and -EFAULT too (a submitting thread that exits; see
// advance()).
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp misses it under g++ 12
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "granary/chunkstore/io_engine.h"
#include "granary/common/log.h"
#include "posix_engine.h"
#include "uring_testing.h"

namespace granary::chunkstore {

namespace {

std::atomic<int> g_refused_enters{0};  // testing::refuseSharedRingEnters

// Takes one of the `count` left, if any.
bool takeOne(std::atomic<int>& count) {
  int n = count.load(std::memory_order_relaxed);
  while (n > 0) {
    if (count.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

// -EAGAIN, taking one of the refusals a test asked for; 0 (almost always) to enter.
int refusedForTest() { return takeOne(g_refused_enters) ? -EAGAIN : 0; }

// For warnings logged at most once a second: true when the last time, `last_ms` (steady
// clock milliseconds), was a second ago or more, and then `now` becomes the last time.
bool onceASecond(std::atomic<int64_t>& last_ms) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_ms.load(std::memory_order_relaxed);
  return now - last >= 1000 &&
         last_ms.compare_exchange_strong(last, now, std::memory_order_relaxed);
}

std::atomic<int> g_refused_submits{0};  // testing::refuseThreadRingSubmits
std::atomic<int> g_failed_submits{0};   // testing::failThreadRingSubmits
std::atomic<int> g_failed_waits{0};     // testing::failThreadRingWaits

std::atomic<int> g_again_results{0};  // testing::askAgainCompletions
std::atomic<int> g_short_results{0};  // testing::shortenCompletions

// A completion's result: `res`; -EAGAIN while a test asks for such results; or, while a
// test asks for short transfers, a transfer of more than 4 KiB cut to half of it, in whole
// 4 KiB blocks (the rest, resubmitted, stays aligned for O_DIRECT).
int resultForTest(int res) {
  if (takeOne(g_again_results)) return -EAGAIN;
  if (res > 4096 && takeOne(g_short_results)) return std::max(4096, res / 2 / 4096 * 4096);
  return res;
}

// Whether a request's result asks for it again (-EAGAIN, -EINTR), counting such results
// in a row in `again`: at most kMaxAgain in a row, so that a device that keeps answering so
// fails the request with that errno instead of spinning a thread on it forever.
constexpr unsigned kMaxAgain = 1000;
bool askAgain(int res, unsigned& again) {
  if (res != -EAGAIN && res != -EINTR) {
    again = 0;
    return false;
  }
  return ++again <= kMaxAgain;
}

constexpr unsigned kRingDepth = 64;
// The shared ring: at most this many operations in the kernel at once (more wait in a
// queue of our own). Its SQ has twice as many entries: the kernel moves the SQ head only
// at the end of a batch, and an operation of that batch may complete (on an io-wq worker,
// or inline) and be reaped before then, freeing its place in kAsyncDepth but not yet its
// SQE; so the SQ holds at most one batch's taken entries plus kAsyncDepth new ones. The
// CQ (twice the SQ) holds at most one CQE per operation.
constexpr unsigned kAsyncDepth = 256;
constexpr unsigned kAsyncSqEntries = 2 * kAsyncDepth;
// The completion thread enters for what its callbacks submitted every this many operations
// within a turn (and at the turn's end).
constexpr unsigned kTurnBatch = 4;

// Registered buffers of the shared ring: kSlots slots of kSlotBytes, enough for a small
// blob read (header and payload in one I/O). Registered memory counts against
// RLIMIT_MEMLOCK, 8 MiB by default for a non-root user and shared by all of its
// processes: hence 1 MiB an engine, and plain buffers when registration is refused.
constexpr size_t kSlotBytes = 16 << 10;
constexpr size_t kSlots = 64;

// An SQE's length field is 32 bits; larger transfers go in 1 GiB pieces.
unsigned chunk(size_t left) { return static_cast<unsigned>(std::min<size_t>(left, size_t{1} << 30)); }

// One ring per thread (DESIGN: "one ring per thread"): a ring is not safe to share
// without a lock, and the synchronous skeleton never has more than one SQE in flight, so
// a per-thread ring needs no locking at all. It is created on the thread's first call and
// torn down when the thread exits. If it cannot be created (memory limits, seccomp), that
// thread falls back to plain syscalls.
struct ThreadRing {
  io_uring ring{};
  bool tried = false;
  bool ok = false;
  ~ThreadRing() { abandon(); }
  // This thread's calls use plain syscalls from now on.
  void abandon() {
    if (ok) io_uring_queue_exit(&ring);
    ok = false;
    tried = true;
  }
  io_uring* get() {
    if (!tried) {
      tried = true;
      int rc = io_uring_queue_init(kRingDepth, &ring, 0);
      ok = rc == 0;
      if (!ok) log::warn("io_uring_queue_init failed ({}); this thread uses pread/pwrite",
                         std::strerror(-rc));
    }
    return ok ? &ring : nullptr;
  }
};

thread_local ThreadRing t_ring;

// Between tries of a thread ring's call that failed `tries` times in a row: the first
// `quick` tries again at once, then after a sleep of 0.1 ms doubling up to 12.8 ms, so that
// a failure that lasts does not spin a core; the warning is logged at most once a second.
void backOff(std::atomic<int64_t>& last_log_ms, const char* call, int rc, unsigned tries,
             unsigned quick) {
  if (tries < quick) return;
  if (onceASecond(last_log_ms)) {
    log::warn("{}: {} ({} times in a row); retrying", call, std::strerror(-rc), tries + 1);
  }
  std::this_thread::sleep_for(std::chrono::microseconds(100u << std::min(tries - quick, 7u)));
}

// What submitOnceAndWait returns when the kernel refused the request itself (not "for
// now"): nothing reached the disk, and the thread's ring is given up. The caller does the
// call with plain syscalls: a refused submission says nothing about the drive, and failing
// a sync for it would retire the extent and fail a batch of puts.
constexpr int kNotSubmitted = std::numeric_limits<int>::min();

// Submits the SQE prepared by `prep` once and returns its CQE result (negative errno), or
// kNotSubmitted.
template <typename Prep>
int submitOnceAndWait(io_uring* ring, Prep& prep) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) return -EBUSY;  // cannot happen: one SQE in flight at a time
  prep(sqe);
  // A refusal for now (EAGAIN, EBUSY: the kernel is short of memory for requests) is
  // retried, the SQE still in the ring, until the kernel takes it: giving up would leave
  // it there for this thread's next call, whose wait would then reap its CQE (backOff
  // paces the tries).
  int rc;
  for (unsigned refused = 0;; ++refused) {
    // A retried submit re-reads the SQ tail, so an SQE the kernel already took is not
    // submitted twice.
    rc = takeOne(g_refused_submits)  ? -EAGAIN
         : takeOne(g_failed_submits) ? -EINVAL
                                     : io_uring_submit(ring);
    if (rc == -EINTR) continue;
    if (rc != -EAGAIN && rc != -EBUSY) break;
    static std::atomic<int64_t> last_log_ms{-1000000};
    backOff(last_log_ms, "io_uring_submit", rc, refused, 3);
  }
  if (rc < 0) {
    // Any other refusal leaves the SQE in the ring, and the next call's submit would send
    // it, naming this call's buffer long after it was given back: the ring goes.
    log::warn("io_uring_submit: {}; this thread uses pread/pwrite from now on",
              std::strerror(-rc));
    t_ring.abandon();
    return kNotSubmitted;
  }
  // The request is in the kernel and may write into the caller's buffer: this returns
  // only with its completion, whatever the wait answers meanwhile.
  io_uring_cqe* cqe = nullptr;
  for (unsigned failed = 0;; ++failed) {
    rc = takeOne(g_failed_waits) ? -EIO : io_uring_wait_cqe(ring, &cqe);
    if (rc == 0) break;
    if (rc == -EINTR) continue;
    static std::atomic<int64_t> last_log_ms{-1000000};
    backOff(last_log_ms, "io_uring_wait_cqe", rc, failed, 0);
  }
  int res = resultForTest(cqe->res);
  io_uring_cqe_seen(ring, cqe);
  return res;
}

// Submits the SQE prepared by `prep` and returns its CQE result (negative errno on error,
// or kNotSubmitted), submitting it again while the result asks for that (askAgain).
template <typename Prep>
int submitAndWait(io_uring* ring, Prep&& prep) {
  unsigned again = 0;
  int res;
  do {
    res = submitOnceAndWait(ring, prep);
  } while (askAgain(res, again));
  return res;
}


// The engine's shared ring for asynchronous calls, and its completion thread.
class AsyncRing final : public IoBufferPool {
 public:
  enum Kind { kRead, kWrite, kSync };
  struct Op {
    Kind kind;
    int fd;
    uint8_t* buf;
    size_t len;
    uint64_t offset;
    size_t done_bytes;
    IoDone done;
    unsigned orphaned = 0;  // times its submitting thread's exit failed it (see advance)
    unsigned again = 0;     // -EAGAIN/-EINTR results in a row (askAgain)
    // A write of two parts: `buf` holds the first head_len of the len bytes, `tail` the
    // rest. Written with WRITEV, resumed where a short write stopped; `iov` is its
    // vector, built when the SQE is prepared (the Op outlives the request).
    uint8_t* tail = nullptr;
    size_t head_len = 0;
    iovec iov[2]{};
  };

  // Null (with a warning) where the ring or its eventfd cannot be set up: asynchronous
  // calls then run synchronously.
  static std::unique_ptr<AsyncRing> create() {
    auto ring = std::unique_ptr<AsyncRing>(new AsyncRing());
    if (Status st = ring->init(); !st) {
      log::warn("io_uring shared ring unavailable ({}); asynchronous I/O runs synchronously",
                st.message());
      return nullptr;
    }
    ring->waitForCompletions();
    ring->thread_ = std::thread([r = ring.get()] {
      t_completion_thread = r;
      r->ctx_.run();
    });
    return ring;
  }

  // Waits for every operation in flight (their callbacks run), then stops the thread.
  ~AsyncRing() {
    if (thread_.joinable()) {
      {
        std::unique_lock lock(mu_);
        idle_cv_.wait(lock, [&] { return idle(); });
      }
      // A submitter may still be in its io_uring_enter for an operation that another
      // thread's call already submitted, and that has completed since.
      while (entering_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
      work_.reset();
      ctx_.stop();
      thread_.join();
    }
    if (event_) event_->release();  // closed below, with the ring
    if (ring_ok_) io_uring_queue_exit(&ring_);  // unregisters the buffers
    if (efd_ >= 0) ::close(efd_);
    std::free(arena_);
  }

  // A free registered slot, if `size` fits one.
  IoBuffer registeredBuffer(size_t size) {
    if (arena_ == nullptr || size > kSlotBytes) return {};
    std::lock_guard lock(slots_mu_);
    if (free_slots_.empty()) return {};
    uint8_t* slot = free_slots_.back();
    free_slots_.pop_back();
    return IoBuffer(slot, size, this);
  }
  void release(uint8_t* slot) override {
    std::lock_guard lock(slots_mu_);
    free_slots_.push_back(slot);
  }

  void submit(Op op) {
    // Nothing to transfer: the kernel would answer 0, which reads as a short transfer.
    if (op.len == 0 && op.kind != kSync) return op.done(Status::ok());
    auto owned = std::make_unique<Op>(std::move(op));
    {
      std::lock_guard lock(mu_);
      if (inflight_ >= kAsyncDepth) {
        backlog_.push_back(std::move(*owned));
        return;
      }
      ++inflight_;
      queue(owned.release());
      // Callbacks run on the completion thread; what they submit goes to the kernel in
      // batches: every kTurnBatch operations, and what is left when the thread has
      // handled every completion it found (or earlier, with another thread's submission).
      if (t_reaping == this) {
        ++turn_queued_;
        return;
      }
      // In a batch: submitted at its end (or with another thread's enter meanwhile).
      if (t_batching == this) {
        t_batched = true;
        return;
      }
      publish();
      // Counted under the lock that queued the operation: it may complete, and the ring
      // be destroyed by its owner, before this thread's enter returns (see ~AsyncRing).
      entering_.fetch_add(1, std::memory_order_relaxed);
    }
    enter();  // outside the lock: the completion thread reaps meanwhile
    entering_.fetch_sub(1, std::memory_order_release);
  }

  // IoEngine::beginBatch/endBatch, on the calling thread. An open batch counts in
  // entering_ like a submitter in its enter: its operations may complete (with another
  // thread's enter) and their owner destroy the ring before the batch's end has returned.
  void beginBatch() {
    if (t_batch_depth++ > 0) return;
    t_batching = this;
    entering_.fetch_add(1, std::memory_order_relaxed);
  }
  void endBatch() {
    if (t_batch_depth == 0 || --t_batch_depth > 0) return;
    AsyncRing* ring = std::exchange(t_batching, nullptr);  // the one that began it
    // Nothing queued, nothing to enter for. (On the completion thread submit() never marks
    // the batch: its turn's end submits what the callbacks queued.)
    if (std::exchange(t_batched, false)) ring->publishAndEnter();
    ring->entering_.fetch_sub(1, std::memory_order_release);
  }

 private:
  AsyncRing() = default;

  Status init() {
    efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd_ < 0) return Status::fromErrno(errno, "eventfd");
    int rc = io_uring_queue_init(kAsyncSqEntries, &ring_, 0);
    if (rc != 0) return Status::fromErrno(-rc, "io_uring_queue_init");
    ring_ok_ = true;
    rc = io_uring_register_eventfd(&ring_, efd_);
    if (rc != 0) return Status::fromErrno(-rc, "io_uring_register_eventfd");
    event_.emplace(ctx_, efd_);
    registerBuffers();
    // A turn's completions, one per operation in flight: no allocation on the completion
    // thread unless more complete while it drains the CQ.
    finished_.reserve(kAsyncDepth);
    retry_.reserve(kAsyncDepth);
    return Status::ok();
  }

  void registerBuffers() {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, kSlots * kSlotBytes) != 0) return;
    iovec arena{p, kSlots * kSlotBytes};
    int rc = io_uring_register_buffers(&ring_, &arena, 1);
    if (rc != 0) {
      log::info("io_uring buffer registration refused ({}); asynchronous I/O uses plain buffers",
                std::strerror(-rc));
      std::free(p);
      return;
    }
    arena_ = static_cast<uint8_t*>(p);
    for (size_t i = kSlots; i-- > 0;) free_slots_.push_back(arena_ + i * kSlotBytes);
  }

  bool registered(const uint8_t* buf) const {
    return arena_ != nullptr && buf >= arena_ && buf < arena_ + kSlots * kSlotBytes;
  }

  // Caller holds mu_. Prepares the SQE for the rest of `op` (there is room: see
  // kAsyncSqEntries).
  void queue(Op* op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // io_uring_get_sqe reads the kernel's SQ head without acquire order (liburing 2.3, no
    // SQPOLL: it assumes the submitting thread moved it), but here another thread's enter
    // may have: the fence keeps our writes to the SQE after the kernel's reads of it.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (sqe == nullptr) {  // the bound above is broken: a bug, not a condition to handle
      log::error("io_uring shared ring: no free SQE with {} operations in flight", inflight_);
      std::abort();
    }
    switch (op->kind) {
      case kRead:
        if (registered(op->buf)) {
          io_uring_prep_read_fixed(sqe, op->fd, op->buf + op->done_bytes,
                                   chunk(op->len - op->done_bytes), op->offset + op->done_bytes, 0);
        } else {
          io_uring_prep_read(sqe, op->fd, op->buf + op->done_bytes,
                             chunk(op->len - op->done_bytes), op->offset + op->done_bytes);
        }
        break;
      case kWrite:
        if (op->tail != nullptr) {  // what is left of the head (if any), then of the tail
          unsigned n = 0;
          if (op->done_bytes < op->head_len) {
            op->iov[n++] = {op->buf + op->done_bytes, op->head_len - op->done_bytes};
          }
          const size_t tail_done = std::max(op->done_bytes, op->head_len) - op->head_len;
          op->iov[n++] = {op->tail + tail_done, op->len - op->head_len - tail_done};
          // The kernel writes at most MAX_RW_COUNT (2 GiB - 4 KiB) a call: a short write.
          io_uring_prep_writev(sqe, op->fd, op->iov, n, op->offset + op->done_bytes);
        } else if (registered(op->buf)) {
          io_uring_prep_write_fixed(sqe, op->fd, op->buf + op->done_bytes,
                                    chunk(op->len - op->done_bytes), op->offset + op->done_bytes,
                                    0);
        } else {
          io_uring_prep_write(sqe, op->fd, op->buf + op->done_bytes,
                              chunk(op->len - op->done_bytes), op->offset + op->done_bytes);
        }
        break;
      case kSync:
        io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
        break;
    }
    io_uring_sqe_set_data(sqe, op);
  }

  // Caller holds mu_. Makes the prepared SQEs visible to the kernel (what liburing's
  // io_uring_submit does before it enters): the SQ tail, stored with release order, as the
  // kernel may take the entries on another thread's io_uring_enter.
  void publish() {
    io_uring_sq& sq = ring_.sq;
    if (sq.sqe_head != sq.sqe_tail) {
      sq.sqe_head = sq.sqe_tail;
      io_uring_smp_store_release(sq.ktail, sq.sqe_tail);
    }
  }

  // Without mu_: hands every published SQE to the kernel. The SQ ring's entries are taken
  // under the kernel's own lock, so concurrent calls each take what is there (to_submit is
  // an upper bound); holding mu_ through the system call would stall the completion thread.
  // When the kernel refuses them for now (EAGAIN, EBUSY, ENOMEM) they stay in the ring, and
  // a signal on the eventfd makes the completion thread try again on its next turn.
  // On the completion thread, a refusal waits 1 ms before that signal, so that one that
  // lasts does not spin the thread; the warning is logged at most once a second.
  void enter() {
    int rc = refusedForTest();
    if (rc == 0) {
      do {
        rc = io_uring_enter(static_cast<unsigned>(ring_.ring_fd), kAsyncSqEntries, 0, 0, nullptr);
      } while (rc == -EINTR);
    }
    if (rc >= 0) return;
    const uint64_t refusals = refusals_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (onceASecond(last_refusal_log_ms_)) {
      log::warn("io_uring_enter: {} ({} refusals so far); retrying", std::strerror(-rc),
                refusals);
    }
    if (t_completion_thread == this) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const uint64_t one = 1;
    (void)!::write(efd_, &one, sizeof one);
  }

  // Without mu_: publishes what is queued, then enters outside the lock (the completion
  // thread reaps meanwhile).
  void publishAndEnter() {
    {
      std::lock_guard lock(mu_);
      publish();
    }
    enter();
  }

  // Caller holds mu_. Nothing in the kernel, queued, or in a callback.
  bool idle() const { return inflight_ == 0 && backlog_.empty() && !running_callbacks_; }

  void waitForCompletions() {
    event_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       [this](const boost::system::error_code& ec) {
                         if (ec) return;  // the io_context is stopping
                         reap();
                         waitForCompletions();
                       });
  }

  // On the completion thread: handles every CQE there is, then submits what the callbacks
  // and the re-queued short transfers prepared. Only this thread touches the CQ, so it
  // reads it without mu_; the lock is taken once a turn, for the SQ and the counts.
  void reap() {
    uint64_t count;
    (void)!::read(efd_, &count, sizeof count);  // clears the signal; the CQ tells the rest
    unsigned completed = 0;
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      auto* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
      const int res = resultForTest(cqe->res);
      io_uring_cqe_seen(&ring_, cqe);
      if (std::optional<Status> st = advance(*op, res)) {
        finished_.emplace_back(std::move(op->done), std::move(*st));
        delete op;
        ++completed;
      } else {
        retry_.push_back(op);  // the rest of a short transfer, or a retry
      }
    }
    {
      std::lock_guard lock(mu_);
      running_callbacks_ = true;  // until they ran: what they submit is not lost to ~AsyncRing
      for (Op* op : retry_) queue(op);
      retry_.clear();
      for (; completed > 0 && !backlog_.empty(); --completed) {
        queue(new Op(std::move(backlog_.front())));
        backlog_.pop_front();
      }
      inflight_ -= completed;
    }
    t_reaping = this;
    turn_queued_ = 0;
    for (auto& [done, st] : finished_) {
      // A throwing callback must not take the completion thread (and every later I/O) down.
      try {
        done(std::move(st));
      } catch (const std::exception& e) {
        log::error("io_uring completion callback threw: {}", e.what());
      }
      // Not all at the turn's end: while the callbacks of a burst of completions run, the
      // drive would sit idle with the burst's follow-ups queued here (reads chained from
      // their completions ran at 0.4x fio's 4 KiB IOPS so; docs/benchmarks.md).
      if (turn_queued_ >= kTurnBatch) {
        turn_queued_ = 0;
        publishAndEnter();
      }
    }
    t_reaping = nullptr;
    finished_.clear();
    unsigned unsubmitted;
    {
      std::lock_guard lock(mu_);
      running_callbacks_ = false;
      publish();
      // What the kernel has not taken yet, including a refused submission's entries.
      unsubmitted = ring_.sq.sqe_tail - io_uring_smp_load_acquire(ring_.sq.khead);
      if (idle()) idle_cv_.notify_all();
    }
    if (unsubmitted > 0) enter();
  }

  // The outcome of one CQE for `op`: its final status, or nullopt to submit the rest.
  static std::optional<Status> advance(Op& op, int res) {
    if (askAgain(res, op.again)) return std::nullopt;
    // A request belongs to the thread whose io_uring_enter submitted it, which on a shared
    // ring need not be the one that asked for the I/O, nor still be around. When it exits,
    // the kernel cancels its requests waiting on io-wq workers (-ECANCELED), and fails a
    // buffered read that waited for its page (-EFAULT: the task work that would resume it
    // finds the thread gone). The engine never cancels a request, its buffers are the
    // callers' (valid), and every operation is positional (a retry rewrites or rereads the
    // same bytes at the same place): such a request goes again, to be submitted by a live
    // thread; a bounded number of times, in case the error has another cause.
    constexpr unsigned kMaxOrphaned = 16;
    if ((res == -ECANCELED || res == -EFAULT) && ++op.orphaned <= kMaxOrphaned) {
      return std::nullopt;
    }
    const uint64_t at = op.offset + op.done_bytes;
    switch (op.kind) {
      case kSync:
        if (res < 0) return Status::fromErrno(-res, "io_uring fdatasync");
        return Status::ok();
      case kRead:
        if (res < 0) return Status::fromErrno(-res, fmt::format("io_uring read at {}", at));
        if (res == 0) {
          return Status::corruption(fmt::format("io_uring read at {}: unexpected end of file", at));
        }
        break;
      case kWrite:
        if (res < 0) return Status::fromErrno(-res, fmt::format("io_uring write at {}", at));
        if (res == 0) return Status::ioError(fmt::format("io_uring write at {} wrote nothing", at));
        break;
    }
    op.done_bytes += static_cast<size_t>(res);
    if (op.done_bytes < op.len) return std::nullopt;
    return Status::ok();
  }

  io_uring ring_{};
  bool ring_ok_ = false;
  int efd_ = -1;
  boost::asio::io_context ctx_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      ctx_.get_executor()};
  std::optional<boost::asio::posix::stream_descriptor> event_;
  std::thread thread_;
  // Operations the completion thread's callbacks queued this turn since its last enter.
  unsigned turn_queued_ = 0;
  // Set on the completion thread while it runs callbacks.
  static thread_local const AsyncRing* t_reaping;
  // Set on the completion thread for its whole life.
  static thread_local const AsyncRing* t_completion_thread;
  // The calling thread's open batch (beginBatch): its ring, depth, and whether it queued
  // an operation that is still to be submitted.
  static thread_local AsyncRing* t_batching;
  static thread_local unsigned t_batch_depth;
  static thread_local bool t_batched;
  std::atomic<uint64_t> refusals_{0};            // io_uring_enter calls the kernel refused
  std::atomic<int64_t> last_refusal_log_ms_{-1000000};  // steady clock, of the last warning

  uint8_t* arena_ = nullptr;  // the registered buffers (null: none)
  std::mutex slots_mu_;
  std::vector<uint8_t*> free_slots_;

  std::mutex mu_;  // the SQ (not the CQ: the completion thread's alone), inflight_, backlog_
  unsigned inflight_ = 0;
  std::deque<Op> backlog_;
  bool running_callbacks_ = false;
  std::atomic<int> entering_{0};  // submitters between publish() and the end of enter()
  std::condition_variable idle_cv_;
  // The completion thread's alone (reap() is not re-entered: callbacks only submit), kept
  // between turns so that a turn allocates nothing (reserved in init()).
  std::vector<std::pair<IoDone, Status>> finished_;
  std::vector<Op*> retry_;
};

thread_local const AsyncRing* AsyncRing::t_reaping = nullptr;
thread_local const AsyncRing* AsyncRing::t_completion_thread = nullptr;
thread_local AsyncRing* AsyncRing::t_batching = nullptr;
thread_local unsigned AsyncRing::t_batch_depth = 0;
thread_local bool AsyncRing::t_batched = false;

class UringEngine final : public IoEngine {
 public:
  std::string_view name() const override { return "io_uring"; }

  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    return posix_io::openFile(path, flags, mode);
  }
  Status close(int fd) override { return posix_io::closeFile(fd); }

  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    io_uring* ring = t_ring.get();
    if (ring == nullptr) return posix_io::writeAll(fd, data, offset);
    size_t done = 0;
    while (done < data.size()) {
      int res = submitAndWait(ring, [&](io_uring_sqe* sqe) {
        io_uring_prep_write(sqe, fd, data.data() + done, chunk(data.size() - done),
                            offset + done);
      });
      if (res == kNotSubmitted) return posix_io::writeAll(fd, data.subspan(done), offset + done);
      if (res < 0) {
        return Status::fromErrno(-res, fmt::format("io_uring write at {}", offset + done));
      }
      if (res == 0) {
        return Status::ioError(fmt::format("io_uring write at {} wrote nothing", offset + done));
      }
      done += static_cast<size_t>(res);
    }
    return Status::ok();
  }

  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    io_uring* ring = t_ring.get();
    if (ring == nullptr) return posix_io::readAll(fd, out, offset);
    size_t done = 0;
    while (done < out.size()) {
      int res = submitAndWait(ring, [&](io_uring_sqe* sqe) {
        io_uring_prep_read(sqe, fd, out.data() + done, chunk(out.size() - done), offset + done);
      });
      if (res == kNotSubmitted) return posix_io::readAll(fd, out.subspan(done), offset + done);
      if (res < 0) {
        return Status::fromErrno(-res, fmt::format("io_uring read at {}", offset + done));
      }
      if (res == 0) {
        return Status::corruption(
            fmt::format("io_uring read at {}: unexpected end of file", offset + done));
      }
      done += static_cast<size_t>(res);
    }
    return Status::ok();
  }

  Status preadv(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset) override {
    constexpr size_t kMaxParts = 8;
    io_uring* ring = t_ring.get();
    size_t total = 0;
    for (std::span<uint8_t> part : parts) total += part.size();
    if (ring == nullptr || parts.size() > kMaxParts || total > (size_t{1} << 30)) {
      return IoEngine::preadv(fd, parts, offset);  // one pread per part
    }
    std::array<iovec, kMaxParts> iov{};
    size_t n = 0;
    for (std::span<uint8_t> part : parts) {
      if (!part.empty()) iov[n++] = {part.data(), part.size()};
    }
    size_t first = 0;  // iov[first..n) is still to read, at offset + done
    uint64_t done = 0;
    while (first < n) {
      int res = submitAndWait(ring, [&](io_uring_sqe* sqe) {
        io_uring_prep_readv(sqe, fd, &iov[first], static_cast<unsigned>(n - first),
                            offset + done);
      });
      if (res == kNotSubmitted) return IoEngine::preadv(fd, parts, offset);  // all again
      if (res < 0) {
        return Status::fromErrno(-res, fmt::format("io_uring readv at {}", offset + done));
      }
      if (res == 0) {
        return Status::corruption(
            fmt::format("io_uring readv at {}: unexpected end of file", offset + done));
      }
      done += static_cast<uint64_t>(res);
      // A short read: skip the buffers it filled, and the part of the next one.
      posix_io::consumeIovecs(std::span(iov.data(), n), first, static_cast<size_t>(res));
    }
    return Status::ok();
  }

  bool preadNoWait(int fd, std::span<const std::span<uint8_t>> parts,
                   uint64_t offset) override {
    return posix_io::readNoWait(fd, parts, offset);  // never waits: no ring needed
  }

  Status fdatasync(int fd) override {
    io_uring* ring = t_ring.get();
    if (ring == nullptr) return posix_io::dataSync(fd);
    const int res = submitAndWait(ring, [&](io_uring_sqe* sqe) {
      io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
    });
    if (res == kNotSubmitted) return posix_io::dataSync(fd);
    if (res < 0) return Status::fromErrno(-res, "io_uring fdatasync");
    return Status::ok();
  }
  Status fsync(int fd) override { return posix_io::fullSync(fd); }  // directories: rare

  // Hole punching is rare (deletes), and so is resizing (once per extent): plain
  // fallocate(2) and ftruncate(2) are enough.
  Status punchHole(int fd, uint64_t offset, uint64_t len) override {
    return posix_io::punchHole(fd, offset, len);
  }
  Status resize(int fd, uint64_t size) override { return posix_io::resize(fd, size); }
  Status rename(const std::string& from, const std::string& to) override {
    return posix_io::renameFile(from, to);
  }
  Status remove(const std::string& path) override { return posix_io::removeFile(path); }

  void readAsync(int fd, std::span<uint8_t> out, uint64_t offset, IoDone done) override {
    if (!async_) return IoEngine::readAsync(fd, out, offset, std::move(done));
    async_->submit({AsyncRing::kRead, fd, out.data(), out.size(), offset, 0, std::move(done)});
  }
  void writeAsync(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                  uint64_t offset, IoDone done) override {
    if (!async_) return IoEngine::writeAsync(fd, head, tail, offset, std::move(done));
    if (head.empty()) std::swap(head, tail);
    // The kernel only reads from a write's buffers.
    AsyncRing::Op op{AsyncRing::kWrite, fd, const_cast<uint8_t*>(head.data()),
                     head.size() + tail.size(), offset, 0, std::move(done)};
    if (!tail.empty()) {
      op.tail = const_cast<uint8_t*>(tail.data());
      op.head_len = head.size();
    }
    async_->submit(std::move(op));
  }
  void fdatasyncAsync(int fd, IoDone done) override {
    if (!async_) return IoEngine::fdatasyncAsync(fd, std::move(done));
    async_->submit({AsyncRing::kSync, fd, nullptr, 0, 0, 0, std::move(done)});
  }
  IoBuffer registeredBuffer(size_t size) override {
    return async_ ? async_->registeredBuffer(size) : IoBuffer();
  }
  void beginBatch() override {
    if (async_) async_->beginBatch();
  }
  void endBatch() override {
    if (async_) async_->endBatch();
  }

 private:
  std::unique_ptr<AsyncRing> async_ = AsyncRing::create();
};

}  // namespace

void testing::refuseSharedRingEnters(int n) {
  g_refused_enters.store(n, std::memory_order_relaxed);
}

int testing::sharedRingRefusalsLeft() { return g_refused_enters.load(std::memory_order_relaxed); }

void testing::refuseThreadRingSubmits(int n) {
  g_refused_submits.store(n, std::memory_order_relaxed);
}

void testing::failThreadRingSubmits(int n) {
  g_failed_submits.store(n, std::memory_order_relaxed);
}

void testing::failThreadRingWaits(int n) { g_failed_waits.store(n, std::memory_order_relaxed); }

int testing::threadRingWaitFailuresLeft() {
  return g_failed_waits.load(std::memory_order_relaxed);
}

bool testing::threadRingInUse() { return t_ring.ok; }

int testing::threadRingRefusalsLeft() {
  return g_refused_submits.load(std::memory_order_relaxed);
}

void testing::askAgainCompletions(int n) { g_again_results.store(n, std::memory_order_relaxed); }

int testing::againCompletionsLeft() { return g_again_results.load(std::memory_order_relaxed); }

void testing::shortenCompletions(int n) { g_short_results.store(n, std::memory_order_relaxed); }

int testing::shortCompletionsLeft() { return g_short_results.load(std::memory_order_relaxed); }

std::unique_ptr<IoEngine> makeUringEngine() {
  io_uring probe{};
  int rc = io_uring_queue_init(4, &probe, 0);
  if (rc != 0) {
    log::warn("io_uring unavailable ({}); using the POSIX I/O engine", std::strerror(-rc));
    return makePosixEngine();
  }
  io_uring_queue_exit(&probe);
  return std::make_unique<UringEngine>();
}

}  // namespace granary::chunkstore

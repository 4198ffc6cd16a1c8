// The drive-local ChunkStore: blobs appended to extent files, indexed in RocksDB.
// On-disk format and write order: docs/chunkstore-format.md.
#include "granary/chunkstore/chunk_store.h"

#include <fcntl.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <rocksdb/db.h>

#include "aligned_buffer.h"
#include "blob_format.h"
#include "crc_cache.h"
#include "extent_set.h"
#include "group_commit.h"
#include "io_priority.h"
#include "granary/chunkstore/io_engine.h"
#include "granary/common/clock.h"
#include "granary/common/durable_dirs.h"
#include "granary/common/log.h"
#include "granary/common/rate_limiter.h"
#include "granary/common/rocks_resources.h"
#include "granary/ec/erasure_code.h"
#include "rocks_index.h"
#include "verified_mappings.h"

namespace granary::chunkstore {

namespace {

// Reads whose first needed payload byte lies within this distance of the header are done
// as one I/O covering header and payload (saves an IOP for small blobs).
constexpr uint64_t kMergeReadGap = 64 * 1024;
// The spare zeroer's write size: a client I/O waits behind at most one such write.
constexpr uint64_t kZeroPiece = 256 * 1024;

using EncodedId = std::array<uint8_t, BlobId::kEncodedSize>;

class ChunkStoreImpl final : public ChunkStore {
 public:
  ChunkStoreImpl(const ChunkStoreOptions& options, IoEngine& engine, const Clock& clock,
                 std::unique_ptr<RocksIndex> index)
      : options_(options),
        engine_(engine),
        clock_(clock),
        index_(std::move(index)),
        extents_(engine, options.dir + "/extents", options.extent_size, options.direct_io,
                 options.extent_descriptors,
                 [this](uint32_t next) { return index_->putNextExtent(next); },
                 options.crash_point),
        crcs_(options.crc_cache_bytes),
        mappings_({options.verified_mappings, options.verified_mapping_bytes}),
        commits_([this](std::span<PendingCommit* const> b) { syncCommits(b); },
                 [this](std::span<PendingCommit* const> b) { indexCommits(b); },
                 [this](PendingCommit* p) { finishPut(p); }) {
    pins_->store = this;
  }

  ~ChunkStoreImpl() override {
    stopZeroer();
    drain();
    joinMarker();  // after drain(): no read can note another suspect
    // Pins released later find no store: their deferred punches are left to the next
    // open's orphan sweep. Waits for a deferred punch being made.
    std::unique_lock lock(pins_->store_mu);
    pins_->store = nullptr;
  }

  void drain() override {
    std::unique_lock lock(async_mu_);
    async_cv_.wait(lock, [&] { return async_ops_ == 0; });
  }

  Status init() {
    auto next = index_->nextExtent();
    if (!next) return next.error();
    uint64_t blobs = 0;
    uint64_t bytes = 0;
    uint64_t disk = 0;
    uint32_t min_next = *next;
    ExtentSet::LiveRanges live;
    Status st = index_->forEach(std::nullopt, [&](const BlobId&, const IndexRecord& r) {
      ++blobs;
      bytes += r.payload_len;
      disk += r.diskLen();
      live[r.extent].emplace_back(r.offset, r.diskLen());
      if (r.extent >= min_next) min_next = r.extent + 1;
      return true;
    });
    if (!st) return st;
    blobs_ = blobs;
    payload_bytes_ = bytes;
    disk_bytes_ = disk;
    GRANARY_RETURN_IF_ERROR(extents_.open(min_next));
    // The blob index records the next extent number (synced) before an extent is made, so
    // an extent at or above it was made under another index: this one is missing (a new,
    // empty one in its place) or another drive's. Recovery below would remove every blob
    // it does not know of, i.e. all of them.
    if (size_t stray = extents_.foundFrom(*next); stray > 0) {
      return Status::corruption(fmt::format(
          "{}: {} extent file(s) numbered {} or above that its blob index never recorded "
          "making: the blob index is missing or not this drive's. Nothing was removed; "
          "put the drive's own index back, or empty the drive and let repair rebuild its "
          "fragments (docs/operations.md, \"A drive's blob index lost\")",
          options_.dir, stray, *next));
    }
    // Recovery: whatever a crash left unindexed (written, never committed; or unindexed,
    // never punched) is freed before the first new write.
    const ExtentSet::ReclaimStats reclaimed = extents_.reclaimOrphans(live);
    unreclaimed_extents_ = reclaimed.extents_failed;
    if (reclaimed.extents_removed + reclaimed.ranges_punched + reclaimed.extents_failed > 0) {
      log::info("{}: reclaimed {} orphan bytes in {} ranges, removed {} empty extents, {} "
                "extents left as they were",
                options_.dir, reclaimed.bytes_punched, reclaimed.ranges_punched,
                reclaimed.extents_removed, reclaimed.extents_failed);
    }
    GRANARY_RETURN_IF_ERROR(loadCorruptMarks());
    if (options_.spare_zero_rate > 0) zeroer_ = std::thread([this] { zeroSpares(); });
    return Status::ok();
  }

  // The suspects noted before the last close (noteCorrupt). A mark whose blob is gone (a
  // removal that raced the note) is dropped.
  // They only guide repair: a mark that cannot be read or checked costs a warning, never
  // the drive's opening.
  Status loadCorruptMarks() {
    auto marks = index_->corruptMarks(kMaxCorruptIds);
    if (!marks) {
      log::warn("{}: corrupt marks not loaded: {}", options_.dir, marks.error().message());
      return Status::ok();
    }
    for (const BlobId& id : *marks) {
      auto rec = index_->getUncached(id);
      if (rec.has_value() || !rec.error().isNotFound()) {
        corrupt_.insert(id);  // still stored, or not known: a suspect either way
      } else if (Status st = index_->unmarkCorrupt(id); !st) {
        log::warn("{}: {}", options_.dir, st.message());
      }
    }
    suspects_ = corrupt_.size();
    if (!corrupt_.empty()) {
      log::warn("{}: {} blob(s) found corrupt before the drive was last closed await repair",
                options_.dir, corrupt_.size());
    }
    return Status::ok();
  }

  Status put(const BlobDescriptor& desc, std::span<const uint8_t> payload) override;
  void putAsync(const BlobDescriptor& desc, std::span<const uint8_t> payload,
                IoDone done) override;
  Status read(const BlobId& id, uint64_t offset, std::span<uint8_t> out) override {
    ForegroundOp op(*this);
    return readAttempts(id, index_->get(id), offset, out, firstAttempt(), /*use_crcs=*/true);
  }
  Status readFromDrive(const BlobId& id, uint64_t offset, std::span<uint8_t> out) override {
    // The scrubber's reads: every header is read and verified, never taken from crcs_,
    // and its walk over every blob leaves the in-memory index entries to client reads.
    return readAttempts(id, index_->getUncached(id), offset, out, Attempt::kDrive,
                        /*use_crcs=*/false);
  }
  void verifiedOnDrive(const BlobId& id) override { clearSuspect(id); }
  bool readIfCached(const BlobId& id, uint64_t offset, std::span<uint8_t> out) override;
  std::optional<CachedRange> pinIfCached(const BlobId& id, uint64_t offset,
                                         uint64_t len) override;
  void readAsync(const BlobId& id, uint64_t offset, std::span<uint8_t> out,
                 IoDone done) override;
  Result<BlobInfo> stat(const BlobId& id) override;
  Result<BlobDescriptor> describe(const BlobId& id) override;
  Status remove(const BlobId& id) override;
  Result<std::vector<BlobInfo>> list(std::optional<BlobId> after, size_t limit) override;
  Result<DriveStats> stats() override;
  bool writable() override;

 private:
  class IdClaim;
  // One put, from its write to its completion: the blob image stays here until then.
  struct PendingCommit {
    std::unique_ptr<IdClaim> claim;
    // The blob to write, until written: the header region, and the payload after it unless
    // `in_place` holds it (the caller's bytes, written from where they are).
    AlignedBuffer image;
    std::span<const uint8_t> in_place;
    ExtentFd file;  // held until the put ends: its fdatasync goes through it
    uint32_t extent = 0;
    BlobId id;
    IndexRecord rec;
    IoDone done;
    Status result;
    bool write_failed = false;  // the write failed (result says why): skip the stages
    bool crashed = false;  // a crash point fired: no cleanup, as if the process died
    // GroupCommit: the data reached the disk, go on to the index stage (and never reuse
    // the range: an index entry may point at it).
    bool ok_after_sync = false;
  };
  // Serializes put and remove of one id (puts of different ids run in parallel), so that
  // two puts of one id cannot both pass the existence check, and counters stay exact.
  class IdClaim {
   public:
    IdClaim(ChunkStoreImpl& store, const BlobId& id) : store_(store), id_(id.encode()) {
      std::unique_lock lock(store_.busy_mu_);
      store_.busy_cv_.wait(lock, [&] { return !store_.busy_.contains(id_); });
      store_.busy_.insert(id_);
    }
    ~IdClaim() {
      {
        std::lock_guard lock(store_.busy_mu_);
        store_.busy_.erase(id_);
      }
      store_.busy_cv_.notify_all();
    }
    IdClaim(const IdClaim&) = delete;
    IdClaim& operator=(const IdClaim&) = delete;

   private:
    ChunkStoreImpl& store_;
    EncodedId id_;
  };

  // A read of payload bytes [offset, offset + out.size()) of the blob at `rec`: the I/Os
  // it needs (the header, with the payload when it is near) and their buffers.
  struct ReadPlan {
    BlobId id;
    IndexRecord rec;
    uint64_t offset = 0;
    std::span<uint8_t> out;
    ExtentFd file;  // held until the read ends
    uint64_t first = 0, last = 0;  // payload blocks [first, last) to verify
    bool merged = true;            // header and payload in one I/O (head)
    bool direct = false;           // the payload I/O lands in `out` itself: no copy
    uint64_t head_len = 0;         // bytes of head to read at rec.offset
    AlignedBuffer head;
    IoBuffer registered_head;  // used instead of head when the engine lent one
    IoBuffer registered_body;  // used instead of body when the engine lent one
    uint64_t disk_begin = 0, disk_end = 0;  // the payload I/O when not merged (body)
    AlignedBuffer body;
    // The blob's block CRCs from crcs_: the header region is not read (head_len = 0).
    std::shared_ptr<const CachedCrcs> crcs;
    bool fill_crcs = false;  // once verified, put the header's CRCs in crcs_
    // In place (a synchronous read through the page cache, CRCs known, a range of any
    // alignment): the blocks wholly inside the range are read into `out` itself, blocks
    // [first, first + edge_first) and [last - edge_last, last) (partial ones) into
    // edge_head and edge_tail, whose asked-for bytes are copied out once verified. Saves
    // copying the rest of a ranged read twice (page cache to body, body to out).
    bool in_place = false;
    uint64_t edge_first = 0, edge_last = 0;  // 0 or 1 block each
    AlignedBuffer edge_head, edge_tail;
    uint64_t blockEnd(uint64_t b) const {  // payload offset where block b ends
      return std::min((b + 1) * rec.block_size, rec.payload_len);
    }
    // The verified bytes of block b, wherever the plan read them.
    const uint8_t* blockData(uint64_t b);

    Status corrupt(const ChunkStoreImpl& store, std::string_view what) const;
    std::span<uint8_t> headIo();
    const uint8_t* headData() { return headIo().data(); }
    std::span<uint8_t> bodyIo();

    // A run of consecutive disk bytes at `at`, scattered over up to three buffers.
    struct Run {
      uint64_t at = 0;
      std::array<std::span<uint8_t>, 3> bufs;
      size_t count = 0;
      std::span<const std::span<uint8_t>> parts() const { return {bufs.data(), count}; }
    };
    // The plan's synchronous reads: the head alone (merged); head and body in one run
    // when they are adjacent on the disk; else the head, then the body.
    struct Runs {
      std::array<Run, 2> run;
      size_t count = 0;
      std::span<const Run> all() const { return {run.data(), count}; }
    };
    Runs runs();
  };
  struct AsyncRead;

  static Status checkRange(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                           size_t len);
  // The attempts of one read, in order: through the page cache (with cached_reads); from
  // the drive (kDriveAfterCache when the page cache's copy failed its CRC: if the drive's
  // passes, the copy is dropped); from the drive again at the blob's current index entry,
  // after a corruption whose entry had moved (a race with remove()).
  enum class Attempt { kCache, kDriveAfterCache, kDrive, kRecheck };
  Attempt firstAttempt() const {
    return options_.cached_reads ? Attempt::kCache : Attempt::kDrive;
  }
  // One attempt of a read: where it reads, and whether the block CRCs may come from crcs_.
  struct Step {
    Attempt attempt;
    bool use_crcs;
  };
  // The one ladder of read() and readAsync(): after `step` ended with `st` (`used_crcs`: its
  // CRCs came from crcs_), the next step, or nothing when `st` is the read's outcome (a
  // corruption is then reported). A corruption is tried again against the header on disk
  // when the CRCs were cached, then from the drive when it came through the page cache,
  // then at the blob's current index entry (`rec` is updated) when that moved. `use_crcs`:
  // the read's own choice, for the steps after the first.
  std::optional<Step> nextStep(const BlobId& id, IndexRecord& rec, uint64_t offset,
                               size_t len, Step step, bool use_crcs, bool used_crcs,
                               Status& st);
  // read() and readFromDrive() of the blob indexed at `rec`, from `first` on.
  Status readAttempts(const BlobId& id, Result<IndexRecord> rec, uint64_t offset,
                      std::span<uint8_t> out, Attempt first, bool use_crcs);
  // `async`: for the engine's asynchronous path, which can use its registered buffers.
  // `cached`: through the extent's page-cache descriptor. `use_crcs`: the block CRCs may
  // come from crcs_ (and go there), sparing the header's I/O. `file`: the descriptor to
  // read through, when the caller has it already (null: the extent's, opened if need be).
  Result<ReadPlan> planRead(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                            std::span<uint8_t> out, bool async, bool cached, bool use_crcs,
                            ExtentFd file = nullptr);
  // Checks the header (unless the CRCs came from crcs_) and the CRC of every block read,
  // then copies the bytes to plan.out (unless they were read there).
  Status verifyRead(ReadPlan& plan) const;
  // `used_crcs`, when given: set to whether the CRCs came from crcs_.
  Status readVerified(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                      std::span<uint8_t> out, bool cached, bool use_crcs,
                      bool* used_crcs = nullptr);
  void readVerifiedAsync(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                         std::span<uint8_t> out, Step step, IoDone done);
  void finishAsyncRead(AsyncRead* op);
  // The end of one step of an asynchronous read, with status `st`: the next step
  // (nextStep), or `done`.
  void completeAsync(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                     std::span<uint8_t> out, Step step, Status st, IoDone done,
                     bool used_crcs);
  // The page cache held a copy of the blob that failed its CRC while the drive's passed
  // (memory went bad): drop the copy, so that the next read fetches the drive's.
  void dropCachedCopy(const BlobId& id, const IndexRecord& rec);
  // Verifies payload bytes [begin, end) of the blob at `rec` in the page cache (readCached),
  // whole blocks at a time through `scratch`, a buffer of whole blocks.
  bool verifyCached(const BlobId& id, const IndexRecord& rec, uint64_t begin, uint64_t end,
                    std::span<uint8_t> scratch);
  // After a read found `corruption`: the blob's current entry when it moved (read again),
  // or the final status (NotFound when it was removed meanwhile, else `corruption`).
  Result<IndexRecord> recheckAfterCorruption(const BlobId& id, const IndexRecord& rec,
                                             uint64_t offset, size_t len, Status corruption);
  void punchBestEffort(uint32_t extent, uint64_t offset, uint64_t len);
  // readIfCached() of a blob whose entry is `rec`.
  bool readCached(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                  std::span<uint8_t> out);

  // The blobs pinIfCached() pinned, each with its count of pins and, once remove()
  // deleted its index entry meanwhile, the range to punch when the last pin goes. Shared
  // with the pins, which may outlive the store.
  struct PinTable {
    struct Entry {
      uint32_t count = 0;
      std::vector<IndexRecord> punch;  // removed meanwhile (a later copy of the id too)
    };
    std::mutex mu;
    std::map<EncodedId, Entry> entries;
    // Held shared by a deferred punch, exclusively by the store's destructor.
    std::shared_mutex store_mu;
    ChunkStoreImpl* store = nullptr;  // null once the store is gone
  };
  // The punches a blob's last pin left to make: on a thread of their own, as the pin may
  // go on an event loop and a punch waits for the file's direct I/O in flight.
  static void punchDeferred(std::shared_ptr<PinTable> pins, std::vector<IndexRecord> punch);
  // A pin on `id`, taken before its index entry is looked up: a remove() that deletes the
  // entry after that sees the pin and defers its punch.
  std::shared_ptr<void> pinBlob(const BlobId& id);
  // remove()'s punch, now or, while `id` is pinned, when its last pin goes.
  void punchUnlessPinned(const BlobId& id, const IndexRecord& rec);
  // The two stages of the group commit (group_commit.h).
  void syncCommits(std::span<PendingCommit* const> batch);
  void indexCommits(std::span<PendingCommit* const> batch);
  // A put's end (on a commit stage thread): accounting, cleanup of a failed write, `done`.
  void finishPut(PendingCommit* p);
  // An asynchronous put or read (both clients' work), from its submission to its end (the
  // checks and the index lookup before it are too short to matter to the zeroer).
  void beginOp() {
    beginForeground();
    std::lock_guard lock(async_mu_);
    ++async_ops_;
  }
  void endOp() {
    endForeground();
    std::lock_guard lock(async_mu_);
    if (--async_ops_ == 0) async_cv_.notify_all();
  }
  // Ends an operation when it goes out of scope, also when a caller's callback throws
  // (the commit and completion threads catch it): else drain() and the destructor would
  // wait for that operation forever.
  struct OpEnd {
    ChunkStoreImpl* store;
    ~OpEnd() { store->endOp(); }
  };
  // The test hook (ChunkStoreOptions::crash_point): true = "the process died here".
  bool crashAt(std::string_view point) const {
    return options_.crash_point && options_.crash_point(point);
  }
  static Status crashed(std::string_view point) {
    return Status::unavailable(fmt::format("crashed at {}", point));
  }
  void noteWriteFailure(const Status& st);
  // Whether the drive's free space exceeds `bytes` beyond what writable() keeps free: the
  // reserve, and room for one large fragment (a statvfs; false if it fails).
  bool hasRoomFor(uint64_t bytes) const {
    struct statvfs vfs {};
    return ::statvfs(options_.dir.c_str(), &vfs) == 0 &&
           static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize >
               options_.reserve_bytes + (8u << 20) + bytes;
  }
  // The spare zeroer's thread (ChunkStoreOptions::spare_zero_rate): prepares a pre-zeroed
  // extent whenever the set wants one and the drive has room, rate limited (at full speed
  // while the drive is quiet()), at the lowest best-effort I/O priority, in small pieces
  // (as the scrubber reads); and punches the unused tails of the pre-zeroed extents
  // rolled off.
  void zeroSpares();
  void stopZeroer();

  const ChunkStoreOptions options_;
  IoEngine& engine_;
  const Clock& clock_;
  const uint64_t opened_unix_nanos_ = static_cast<uint64_t>(clock_.nowUnixNanos());
  uint64_t unreclaimed_extents_ = 0;  // set by open(), before any other call
  std::unique_ptr<RocksIndex> index_;
  ExtentSet extents_;
  // Verified block CRCs of recently read blobs (thread safe; filled from const verifyRead).
  mutable CrcCache crcs_;
  VerifiedMappings mappings_;

  std::mutex busy_mu_;
  std::condition_variable busy_cv_;
  std::set<EncodedId> busy_;

  const std::shared_ptr<PinTable> pins_ = std::make_shared<PinTable>();

  // Asynchronous reads and puts in flight: the destructor waits for them.
  std::mutex async_mu_;
  std::condition_variable async_cv_;
  uint64_t async_ops_ = 0;

  // A confirmed CRC failure, or an unreadable blob: remembered for stats().corrupt_ids
  // until the blob is removed, and marked in the blob index (by the marker thread: this
  // runs on completion threads, which must not wait for a synced write) so that a restart
  // before the next repair pass does not forget a suspect the scrubber may take weeks to
  // find again.
  void noteCorrupt(const BlobId& id, const Status& st) {
    log::warn("{}", st.message());
    // Reads (repair's check of a suspect above all) must see what is on disk now, header
    // included, not CRCs cached before the damage.
    crcs_.erase(id);
    mappings_.forget(id);
    std::lock_guard lock(corrupt_mu_);
    if (corrupt_.size() >= kMaxCorruptIds || !corrupt_.insert(id).second) return;
    suspects_ = corrupt_.size();
    queueMarkLocked(id, true);
  }
  // A suspect no longer: put again (a read's note that raced the removal of the copy
  // before is not this copy's), or read whole from the drive with every block's CRC
  // verified (one read, or the scrubber's pieces: verifiedOnDrive) after a read that
  // failed once (a passing EIO).
  void clearSuspect(const BlobId& id) {
    if (suspects_.load(std::memory_order_relaxed) == 0) return;  // the common case
    std::lock_guard lock(corrupt_mu_);
    if (corrupt_.erase(id) == 0) return;
    suspects_ = corrupt_.size();
    queueMarkLocked(id, false);
  }
  // Rare (one per suspect, at most kMaxCorruptIds): a thread runs while marks wait.
  void queueMarkLocked(const BlobId& id, bool mark) {
    mark_queue_.emplace_back(id, mark);
    if (marker_running_) return;
    if (marker_.joinable()) marker_.join();  // it ended: it cleared marker_running_ last
    try {
      marker_ = std::thread([this] { writeMarks(); });
      marker_running_ = true;
    } catch (const std::system_error& e) {  // out of threads: the next mark tries again
      log::warn("{}: cannot start the thread that writes corrupt marks: {}", options_.dir,
                e.what());
    }
  }
  void writeMarks() {
    for (;;) {
      std::pair<BlobId, bool> op;
      {
        std::lock_guard lock(corrupt_mu_);
        if (mark_queue_.empty()) {
          marker_running_ = false;
          return;
        }
        op = mark_queue_.front();
        mark_queue_.pop_front();
      }
      // A removal between the check and the write would leave the mark behind it.
      std::lock_guard marks(marks_mu_);
      {
        std::lock_guard lock(corrupt_mu_);
        if (corrupt_.contains(op.first) != op.second) continue;  // undone meanwhile
      }
      Status st = op.second ? index_->markCorrupt(op.first) : index_->unmarkCorrupt(op.first);
      if (!st) {
        log::warn("{}: {} (repair still sees it until the drive is reopened)", options_.dir,
                  st.message());
      }
    }
  }
  void joinMarker() {
    std::unique_lock lock(corrupt_mu_);
    std::thread marker = std::move(marker_);
    lock.unlock();
    if (marker.joinable()) marker.join();
  }
  std::mutex corrupt_mu_;
  std::set<BlobId> corrupt_;
  std::atomic<size_t> suspects_{0};  // corrupt_.size(), for reads to check without the lock
  std::deque<std::pair<BlobId, bool>> mark_queue_;  // guarded by corrupt_mu_
  bool marker_running_ = false;                      // guarded by corrupt_mu_
  std::thread marker_;                               // guarded by corrupt_mu_
  // Held by the marker thread from its check of corrupt_ to its write, and by remove()
  // from its check to its index write: a mark is never written after its blob's removal.
  std::mutex marks_mu_;

  std::atomic<uint64_t> blobs_{0};
  std::atomic<uint64_t> payload_bytes_{0};
  std::atomic<uint64_t> disk_bytes_{0};
  std::atomic<uint64_t> committed_puts_{0};
  // After an ENOSPC, or a write that failed with EIO, the drive is not writable() until
  // this time (unix nanos) (and, when full, until statvfs shows space again).
  std::atomic<int64_t> writes_paused_until_{0};
  // writable()'s cached free-space verdict and when it expires (unix nanos).
  std::atomic<bool> space_ok_{false};
  std::atomic<int64_t> space_checked_until_{0};
  // Client reads, puts and removals in flight, and when one last began or ended (the
  // scrubber's reads and readIfCached() do not count): the spare zeroer runs at full speed
  // once none has run on any drive of the activity set for kQuietNanos.
  static constexpr int64_t kQuietNanos = 250'000'000;
  const std::shared_ptr<DriveActivity> activity_ =
      options_.activity ? options_.activity : std::make_shared<DriveActivity>();
  void beginForeground() { activity_->begin(clock_.monotonicNanos()); }
  void endForeground() { activity_->end(clock_.monotonicNanos()); }
  // A synchronous client operation, for its whole length.
  class ForegroundOp {
   public:
    explicit ForegroundOp(ChunkStoreImpl& store) : store_(store) { store_.beginForeground(); }
    ~ForegroundOp() { store_.endForeground(); }
    ForegroundOp(const ForegroundOp&) = delete;
    ForegroundOp& operator=(const ForegroundOp&) = delete;

   private:
    ChunkStoreImpl& store_;
  };
  bool quiet() const { return activity_->quietFor(clock_.monotonicNanos(), kQuietNanos); }
  RateLimiter zero_limiter_{options_.spare_zero_rate,
                            std::max<uint64_t>(kZeroPiece, options_.spare_zero_rate / 10)};
  std::mutex zero_mu_;
  std::condition_variable zero_cv_;
  bool zero_stop_ = false;  // guarded by zero_mu_
  std::thread zeroer_;
  // Last: its stage threads use the members above, and it joins them when destroyed.
  GroupCommit<PendingCommit> commits_;
};

void ChunkStoreImpl::zeroSpares() {
  lowerIoPriority();
  constexpr auto kPoll = std::chrono::milliseconds(100);
  constexpr auto kBackoff = std::chrono::seconds(10);
  for (;;) {
    auto wait = kPoll;
    if (Status st = extents_.freeRolledTails(); !st) {
      log::warn("{}: freeing a pre-zeroed extent's tail: {}", options_.dir, st.toString());
      wait = kBackoff;
    }
    // Room for the spare and as much again, beyond what writable() keeps free; and no
    // ENOSPC lately (a drive that just ran out of space gives its spare back).
    if (extents_.wantsSpare() && clock_.nowUnixNanos() >= writes_paused_until_.load() &&
        hasRoomFor(2 * options_.extent_size)) {
      const auto started = std::chrono::steady_clock::now();
      Status st = extents_.prepareSpare(kZeroPiece, [this](uint64_t bytes) {
        return zero_limiter_.acquire(bytes, [this] { return quiet(); });
      });
      if (st) {
        log::info("{}: spare extent ready ({} MiB zeroed in {:.1f} s)", options_.dir,
                  options_.extent_size >> 20,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                      .count());
      } else {
        std::lock_guard lock(zero_mu_);
        if (zero_stop_) return;
        log::warn("{}: preparing a spare extent: {}", options_.dir, st.toString());
        wait = kBackoff;
      }
    }
    std::unique_lock lock(zero_mu_);
    if (zero_cv_.wait_for(lock, wait, [this] { return zero_stop_; })) return;
  }
}

void ChunkStoreImpl::stopZeroer() {
  if (!zeroer_.joinable()) return;
  {
    std::lock_guard lock(zero_mu_);
    zero_stop_ = true;
  }
  zero_limiter_.stop();
  zero_cv_.notify_all();
  zeroer_.join();
}

void ChunkStoreImpl::punchBestEffort(uint32_t extent, uint64_t offset, uint64_t len) {
  // Failing here leaves an orphan range, which the sweep reclaims; not worth failing for.
  auto fd = extents_.fd(extent);
  Status st = fd ? engine_.punchHole((*fd)->get(), offset, len) : fd.error();
  if (!st) {
    log::warn("punching {}+{} in {}: {}", offset, len, extents_.path(extent), st.toString());
  }
}

// A full drive, and one whose writes fail (EIO: a dying disk; EROFS: a file system gone
// read-only; at the data write, its sync, a new extent or the drive's blob index), take no
// new blobs for a while: placement puts stripes on other drives (a PUT that failed here
// succeeds when its client retries), and a drive that was only briefly sick takes blobs
// again after the back-off. Reads go on. A retryable error (the process short of file
// descriptors or memory: Status::fromErrno) says nothing about the disk.
void ChunkStoreImpl::noteWriteFailure(const Status& st) {
  if (st.code() == Status::Code::kNoSpace) {
    constexpr int64_t kFullBackoffNanos = 5'000'000'000;
    writes_paused_until_ = clock_.nowUnixNanos() + kFullBackoffNanos;
    log::warn("{}: out of space: {}", options_.dir, st.message());
    extents_.dropSpare();  // its space goes back to the drive
  } else if (st.code() == Status::Code::kIoError && !st.retryable()) {
    constexpr int64_t kFailingBackoffNanos = 30'000'000'000;
    writes_paused_until_ = clock_.nowUnixNanos() + kFailingBackoffNanos;
    log::error("{}: a write failed; no new blobs for 30 s: {}", options_.dir, st.message());
  }
}

Status ChunkStoreImpl::put(const BlobDescriptor& desc, std::span<const uint8_t> payload) {
  // The callback holds the promise, so it outlives set_value() whatever this thread does.
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> result = promise->get_future();
  putAsync(desc, payload, [promise](Status st) { promise->set_value(std::move(st)); });
  return result.get();
}

namespace {
Status putFailed(const BlobId& id, const Status& st) {
  return Status(st.code(), fmt::format("put {}: {}", id.toString(), st.message()),
                st.retryable());
}
}  // namespace

void ChunkStoreImpl::putAsync(const BlobDescriptor& desc, std::span<const uint8_t> payload,
                              IoDone done) {
  // Validate and build the image before claiming anything.
  const int64_t created = clock_.nowUnixNanos();
  auto blob = encodeBlob(desc, payload, options_.block_size, created, PayloadCopy::kIfUnsuited);
  if (!blob) return done(blob.error());
  auto claim = std::make_unique<IdClaim>(*this, desc.id);
  // A put that ends here releases the id before the caller hears of it, as finishPut does.
  auto early = [&](Status st) {
    claim.reset();
    done(std::move(st));
  };
  auto existing = index_->getUncached(desc.id);  // almost always absent: no cache lookup
  if (existing) return early(Status::alreadyExists("blob " + desc.id.toString() + " already stored"));
  if (!existing.error().isNotFound()) return early(existing.error());

  // Write order (docs/chunkstore-format.md): data; fdatasync; synced index entry. The
  // data goes to the engine's asynchronous path; the last two are shared with concurrent
  // puts (group commit), and `done` runs once they are over.
  auto alloc = extents_.allocate(blob->diskLen());
  if (!alloc) {
    noteWriteFailure(alloc.error());
    return early(putFailed(desc.id, alloc.error()));
  }
  auto owned = std::make_unique<PendingCommit>();
  owned->claim = std::move(claim);
  owned->image = std::move(blob->bytes);
  owned->in_place = blob->payload;
  owned->file = std::move(alloc->file);
  owned->extent = alloc->extent;
  owned->id = desc.id;
  owned->rec = IndexRecord{alloc->extent,  alloc->offset,       blob->header_region_len,
                           payload.size(), options_.block_size, created};
  owned->done = std::move(done);
  beginOp();
  PendingCommit* p = owned.release();  // finishPut deletes it
  // The completion may run on the engine's thread, which must not block: a failed write
  // goes through the commit thread too, which cleans up after it.
  auto written = [this, p](Status st) {
    p->image = AlignedBuffer();  // on disk (or failed): not needed any more
    p->in_place = {};
    if (!st) {
      p->write_failed = true;
      p->result = std::move(st);
    } else if (crashAt("put.after_write")) {
      p->write_failed = true;
      p->crashed = true;
      p->result = crashed("put.after_write");
    }
    commits_.submit(p);
  };
  // One write: the image, then a payload in place right after it (one writev; two writes
  // took twice the requests, and the drive's queue merged only some of them). The group
  // commit's fdatasync covers it.
  try {
    engine_.writeAsync(p->file->get(), p->image.span(), p->in_place, p->rec.offset, written);
  } catch (const std::exception& e) {  // the submission could not allocate
    written(Status::internal(fmt::format("submitting the write: {}", e.what())));
  }
}

void ChunkStoreImpl::finishPut(PendingCommit* p) {
  OpEnd end{this};  // last: after `done` and what it holds are gone
  std::unique_ptr<PendingCommit> owned(p);
  if (p->result) {
    clearSuspect(p->id);
    ++blobs_;
    ++committed_puts_;
    payload_bytes_ += p->rec.payload_len;
    disk_bytes_ += p->rec.diskLen();
  } else {
    // Not synced: the range holds garbage nobody points at (free it now rather than leave
    // it to recovery). Synced but not indexed: a failed synced write may still have
    // reached the WAL, so the range is left alone; if the entry did persist the blob is
    // intact, if not recovery reclaims the orphan.
    if (!p->ok_after_sync && !p->crashed) {
      punchBestEffort(p->extent, p->rec.offset, p->rec.diskLen());
    }
    noteWriteFailure(p->result);
    p->result = putFailed(p->id, p->result);
  }
  {
    IoDone done = std::move(p->done);
    Status result = std::move(p->result);
    owned.reset();  // releases the id before the caller hears of it
    done(std::move(result));
  }  // `done` and what it holds are gone before drain() can return
}

void ChunkStoreImpl::syncCommits(std::span<PendingCommit* const> batch) {
  // One fdatasync per extent the batch wrote to (almost always just the active one).
  std::vector<std::pair<uint32_t, int>> files;
  for (PendingCommit* p : batch) {
    if (p->write_failed) continue;
    if (extents_.retired(p->extent)) {
      // Written before the extent was retired, synced after its fdatasync failed: a later
      // fdatasync's success says nothing about these bytes.
      p->write_failed = true;
      p->result = Status::ioError(fmt::format("{} failed an earlier fdatasync",
                                              extents_.path(p->extent)));
      continue;
    }
    const std::pair file{p->extent, p->file->get()};
    if (std::find(files.begin(), files.end(), file) == files.end()) {
      files.push_back(file);
    }
  }
  for (const auto& [extent, fd] : files) {
    if (Status st = engine_.fdatasync(fd); !st) {
      // After a failed fdatasync the file's cached state is unknown ("fsyncgate"): never
      // append to it again, and fail every blob of the batch.
      extents_.retire(extent);
      for (PendingCommit* p : batch) {
        if (!p->write_failed) p->result = st;
      }
      return;
    }
  }
  if (files.empty()) return;
  if (crashAt("put.after_sync")) {
    for (PendingCommit* p : batch) {
      if (p->write_failed) continue;
      p->crashed = true;
      p->result = crashed("put.after_sync");
    }
    return;
  }
  for (PendingCommit* p : batch) p->ok_after_sync = !p->write_failed;
}

void ChunkStoreImpl::indexCommits(std::span<PendingCommit* const> batch) {
  std::vector<std::pair<BlobId, IndexRecord>> entries;
  entries.reserve(batch.size());
  for (const PendingCommit* p : batch) entries.emplace_back(p->id, p->rec);
  Status st = index_->putBatch(entries);
  const bool crash = st && crashAt("put.after_index");
  for (PendingCommit* p : batch) {
    p->crashed = crash;
    p->result = crash ? crashed("put.after_index") : st;
  }
}

Status ChunkStoreImpl::checkRange(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                                  size_t len) {
  if (offset > rec.payload_len || len > rec.payload_len - offset) {
    return Status::invalidArgument(fmt::format("read of {}+{} past the end of blob {} ({} bytes)",
                                               offset, len, id.toString(), rec.payload_len));
  }
  return Status::ok();
}

std::optional<ChunkStoreImpl::Step> ChunkStoreImpl::nextStep(const BlobId& id,
                                                             IndexRecord& rec,
                                                             uint64_t offset, size_t len,
                                                             Step step, bool use_crcs,
                                                             bool used_crcs, Status& st) {
  // The cached CRCs (dropped by now) may be what is wrong: the same attempt again, checked
  // against the header on disk.
  if (st.isCorruption() && used_crcs) return Step{step.attempt, false};
  if (st.isCorruption() && step.attempt == Attempt::kCache) {
    return Step{Attempt::kDriveAfterCache, use_crcs};
  }
  if (st.isOk() && step.attempt == Attempt::kDriveAfterCache) dropCachedCopy(id, rec);
  if (st.isCorruption() && step.attempt != Attempt::kRecheck) {
    // Rare (a race with remove(), or real corruption): one index get, on the calling
    // thread (a completion thread, for an asynchronous read).
    auto again = recheckAfterCorruption(id, rec, offset, len, st);
    if (again) {
      rec = *again;
      return Step{Attempt::kRecheck, use_crcs};
    }
    st = again.error();
  }
  if (st.isCorruption() || unreadableBlob(st)) noteCorrupt(id, st);
  if (st.isOk() && step.attempt != Attempt::kCache && offset == 0 && len == rec.payload_len) {
    clearSuspect(id);
  }
  return std::nullopt;
}

Status ChunkStoreImpl::readAttempts(const BlobId& id, Result<IndexRecord> rec, uint64_t offset,
                                    std::span<uint8_t> out, Attempt first, bool use_crcs) {
  if (!rec) return rec.error();
  GRANARY_RETURN_IF_ERROR(checkRange(id, *rec, offset, out.size()));
  Status st;
  for (std::optional<Step> step = Step{first, use_crcs}; step;) {
    bool used_crcs = false;
    st = readVerified(id, *rec, offset, out, step->attempt == Attempt::kCache, step->use_crcs,
                      &used_crcs);
    step = nextStep(id, *rec, offset, out.size(), *step, use_crcs, used_crcs, st);
  }
  return st;
}

bool ChunkStoreImpl::readIfCached(const BlobId& id, uint64_t offset, std::span<uint8_t> out) {
  if (!options_.cached_reads || out.empty()) return false;
  auto rec = index_->get(id, /*memory_only=*/true);
  return rec && readCached(id, *rec, offset, out);
}

bool ChunkStoreImpl::readCached(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                                std::span<uint8_t> out) {
  if (!checkRange(id, rec, offset, out.size())) return false;
  ExtentFd file = extents_.cachedFdIfOpen(rec.extent);
  if (!file) return false;  // opening it may wait
  auto plan = planRead(id, rec, offset, out, false, true, true, std::move(file));
  if (!plan) return false;
  const ReadPlan::Runs io = plan->runs();
  for (const ReadPlan::Run& run : io.all()) {
    if (!engine_.preadNoWait(plan->file->get(), run.parts(), run.at)) return false;
  }
  // A corrupt copy is left to read(), which asks the drive and reports.
  return verifyRead(*plan).isOk();
}

std::optional<CachedRange> ChunkStoreImpl::pinIfCached(const BlobId& id, uint64_t offset,
                                                       uint64_t len) {
  if (!options_.cached_reads || len == 0) return std::nullopt;
  std::shared_ptr<void> pin = pinBlob(id);
  auto rec = index_->get(id, /*memory_only=*/true);
  if (!rec || !checkRange(id, *rec, offset, len)) return std::nullopt;
  ExtentFd file = extents_.cachedFdIfOpen(rec->extent);
  if (!file) return std::nullopt;
  const int fd = file->get();
  // The descriptor is held with the blob, for as long as the caller sends from it.
  struct Held {
    std::shared_ptr<void> blob;
    ExtentFd file;
  };
  CachedRange range{fd, rec->offset + rec->header_region_len + offset, len,
                    std::make_shared<Held>(Held{std::move(pin), std::move(file)})};
  if (mappings_.verified(id, *rec, offset, len)) return range;
  // Verified whole blocks at a time, in pieces small enough to stay in the CPU's cache:
  // the bytes are read again from the page cache by sendfile, never from this buffer.
  const uint64_t bs = rec->block_size;
  constexpr uint64_t kPiece = 128 << 10;
  AlignedBuffer scratch(std::max<uint64_t>(bs, kPiece / bs * bs),
                        AlignedBuffer::Fill::kUninitialized);
  if (!scratch.valid()) return std::nullopt;
  if (!verifyCached(id, *rec, offset, offset + len, scratch.span())) return std::nullopt;
  mappings_.noteVerified(id, *rec, fd, [&] {
    return verifyCached(id, *rec, 0, rec->payload_len, scratch.span());
  });
  return range;
}

bool ChunkStoreImpl::verifyCached(const BlobId& id, const IndexRecord& rec, uint64_t begin,
                                  uint64_t end, std::span<uint8_t> scratch) {
  const uint64_t bs = rec.block_size;
  const uint64_t last = std::min(alignUp(end, bs), rec.payload_len);
  for (uint64_t at = alignDown(begin, bs); at < last; at += scratch.size()) {
    if (!readCached(id, rec, at, scratch.first(std::min<uint64_t>(scratch.size(), last - at)))) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<void> ChunkStoreImpl::pinBlob(const BlobId& id) {
  const EncodedId key = id.encode();
  {
    std::lock_guard lock(pins_->mu);
    ++pins_->entries[key].count;
  }
  return std::shared_ptr<void>(nullptr, [pins = pins_, key](void*) {
    std::vector<IndexRecord> punch;
    {
      std::lock_guard lock(pins->mu);
      auto it = pins->entries.find(key);
      if (--it->second.count > 0) return;
      punch = std::move(it->second.punch);
      pins->entries.erase(it);
    }
    if (!punch.empty()) punchDeferred(pins, std::move(punch));
  });
}

void ChunkStoreImpl::punchDeferred(std::shared_ptr<PinTable> pins,
                                   std::vector<IndexRecord> punch) {
  auto run = [](const std::shared_ptr<PinTable>& table, const std::vector<IndexRecord>& ranges) {
    std::shared_lock lock(table->store_mu);
    if (table->store == nullptr) return;  // the next open's sweep reclaims them
    for (const IndexRecord& r : ranges) {
      table->store->punchBestEffort(r.extent, r.offset, r.diskLen());
    }
  };
  // Rare (a blob removed while a GET was sending it): a thread each time is cheap enough.
  try {
    std::thread([pins, punch, run] { run(pins, punch); }).detach();
  } catch (const std::system_error&) {
    run(pins, punch);  // no thread to be had: here, then
  }
}

void ChunkStoreImpl::punchUnlessPinned(const BlobId& id, const IndexRecord& rec) {
  {
    std::lock_guard lock(pins_->mu);
    if (auto it = pins_->entries.find(id.encode()); it != pins_->entries.end()) {
      it->second.punch.push_back(rec);
      return;
    }
  }
  punchBestEffort(rec.extent, rec.offset, rec.diskLen());
}

void ChunkStoreImpl::dropCachedCopy(const BlobId& id, const IndexRecord& rec) {
  log::warn("blob {} in {}: the page cache's copy failed its CRC, the drive's passed; "
            "dropping the copy (check this machine's memory)",
            id.toString(), extents_.path(rec.extent));
  mappings_.forget(id);  // a mapped page is not dropped
  if (auto fd = extents_.cachedFd(rec.extent)) {
    (void)::posix_fadvise((*fd)->get(), static_cast<off_t>(rec.offset),
                          static_cast<off_t>(rec.diskLen()), POSIX_FADV_DONTNEED);
  }
}

Result<IndexRecord> ChunkStoreImpl::recheckAfterCorruption(
    const BlobId& id, const IndexRecord& rec, uint64_t offset, size_t len, Status corruption) {
  // A remove() may have punched the range between our index lookup and the read: that is a
  // deleted blob (or, if the id was stored again meanwhile, a stale location), not a
  // corrupt one. Only a mismatch against the current index entry is corruption.
  auto again = index_->get(id);
  if (!again && again.error().isNotFound()) return fail(again.error());
  if (!again || (again->extent == rec.extent && again->offset == rec.offset)) {
    return fail(std::move(corruption));
  }
  if (!checkRange(id, *again, offset, len)) {
    return fail(Status::notFound("blob " + id.toString() + " was replaced during the read"));
  }
  return *again;
}

Result<ChunkStoreImpl::ReadPlan> ChunkStoreImpl::planRead(const BlobId& id,
                                                          const IndexRecord& rec,
                                                          uint64_t offset,
                                                          std::span<uint8_t> out, bool async,
                                                          bool cached, bool use_crcs,
                                                          ExtentFd file) {
  ReadPlan plan;
  plan.id = id;
  plan.rec = rec;
  plan.offset = offset;
  plan.out = out;
  auto fd = file != nullptr ? Result<ExtentFd>(std::move(file))
            : cached        ? extents_.cachedFd(rec.extent)
                            : extents_.fd(rec.extent);
  if (!fd) {
    // The index names an extent that is gone: the blob's bytes are lost.
    return fail(fd.error().isNotFound() ? plan.corrupt(*this, "extent file missing")
                                        : fd.error());
  }
  plan.file = std::move(*fd);
  const uint64_t bs = rec.block_size;
  const uint64_t payload_start = rec.offset + rec.header_region_len;
  plan.disk_begin = payload_start;
  plan.disk_end = payload_start;
  if (!out.empty()) {
    plan.first = offset / bs;
    plan.last = (offset + out.size() - 1) / bs + 1;
    plan.disk_begin = payload_start + alignDown(plan.first * bs, kIoAlign);
    plan.disk_end = payload_start + alignUp(std::min(plan.last * bs, rec.payload_len), kIoAlign);
  }
  // The payload straight into `out` when it lines up with the disk: 4 KiB aligned, and the
  // blocks to verify are exactly the bytes asked for (whole fragments, read by a GET of
  // whole stripes). That saves a copy of every byte read.
  plan.direct = !out.empty() && reinterpret_cast<uintptr_t>(out.data()) % kIoAlign == 0 &&
                plan.first * bs == offset && plan.disk_begin == payload_start + offset &&
                plan.disk_end - plan.disk_begin == out.size();
  // With the blob's CRCs in crcs_, the payload bytes alone; otherwise header and payload
  // in one I/O when the payload bytes are close to the header.
  if (use_crcs && !out.empty()) {
    plan.crcs = crcs_.find(id, rec);
    plan.fill_crcs = plan.crcs == nullptr;
  }
  if (cached && !async && plan.crcs && !plan.direct) {
    const uint64_t bs = rec.block_size;
    plan.edge_first = plan.first * bs < offset || plan.blockEnd(plan.first) > offset + out.size();
    plan.edge_last = plan.last - 1 > plan.first && plan.blockEnd(plan.last - 1) > offset + out.size();
    // Worth it when some whole block lies inside the range.
    plan.in_place = plan.last - plan.first > plan.edge_first + plan.edge_last;
  }
  if (plan.in_place) {
    // Buffered reads need no alignment: the exact blocks, no 4 KiB rounding.
    plan.disk_begin = payload_start + plan.first * rec.block_size;
    plan.disk_end = payload_start + plan.blockEnd(plan.last - 1);
    if (plan.edge_first) plan.edge_head = AlignedBuffer(rec.block_size, AlignedBuffer::Fill::kUninitialized);
    if (plan.edge_last) plan.edge_tail = AlignedBuffer(rec.block_size, AlignedBuffer::Fill::kUninitialized);
    if ((plan.edge_first && !plan.edge_head.valid()) || (plan.edge_last && !plan.edge_tail.valid())) {
      return fail(Status::unavailable("out of memory for a read buffer"));
    }
    plan.merged = false;
    plan.head_len = 0;
    return plan;
  }
  plan.merged = !plan.direct && !plan.crcs &&
                (out.empty() || plan.disk_begin - payload_start <= kMergeReadGap);
  plan.head_len = plan.crcs       ? 0
                  : plan.merged ? plan.disk_end - rec.offset
                                : rec.header_region_len;
  if (plan.head_len > 0) {
    if (async) plan.registered_head = engine_.registeredBuffer(plan.head_len);
    if (!plan.registered_head.valid()) {
      plan.head = AlignedBuffer(plan.head_len, AlignedBuffer::Fill::kUninitialized);
    }
  }
  if (!plan.merged && !plan.direct) {
    // The payload alone (CRCs known) is the plan's only I/O: it takes the lent buffer.
    if (async && plan.head_len == 0) {
      plan.registered_body = engine_.registeredBuffer(plan.disk_end - plan.disk_begin);
    }
    if (!plan.registered_body.valid()) {
      plan.body = AlignedBuffer(plan.disk_end - plan.disk_begin, AlignedBuffer::Fill::kUninitialized);
    }
  }
  if ((plan.head_len > 0 && !plan.registered_head.valid() && !plan.head.valid()) ||
      (!plan.merged && !plan.direct && !plan.registered_body.valid() && !plan.body.valid())) {
    return fail(Status::unavailable("out of memory for a read buffer"));
  }
  return plan;
}

Status ChunkStoreImpl::ReadPlan::corrupt(const ChunkStoreImpl& store, std::string_view what) const {
  return Status::corruption(fmt::format("blob {} in {} at {}: {}", id.toString(),
                                        store.extents_.path(rec.extent), rec.offset, what));
}

std::span<uint8_t> ChunkStoreImpl::ReadPlan::headIo() {
  return (registered_head.valid() ? registered_head.span() : head.span()).first(head_len);
}

std::span<uint8_t> ChunkStoreImpl::ReadPlan::bodyIo() {
  if (direct) return out;
  return (registered_body.valid() ? registered_body.span() : body.span()).first(disk_end - disk_begin);
}

const uint8_t* ChunkStoreImpl::ReadPlan::blockData(uint64_t b) {
  const uint64_t bs = rec.block_size;
  if (in_place) {
    if (edge_first && b == first) return edge_head.data();
    if (edge_last && b == last - 1) return edge_tail.data();
    return out.data() + (b * bs - offset);
  }
  if (merged) return headData() + rec.header_region_len + b * bs;
  return bodyIo().data() + (rec.offset + rec.header_region_len + b * bs - disk_begin);
}

ChunkStoreImpl::ReadPlan::Runs ChunkStoreImpl::ReadPlan::runs() {
  Runs r;
  if (in_place) {
    const uint64_t bs = rec.block_size;
    Run& run = r.run[r.count++];
    run.at = disk_begin;
    if (edge_first) run.bufs[run.count++] = edge_head.span().first(blockEnd(first) - first * bs);
    const uint64_t inner_first = first + edge_first, inner_last = last - edge_last;
    run.bufs[run.count++] = out.subspan(inner_first * bs - offset,
                                        blockEnd(inner_last - 1) - inner_first * bs);
    if (edge_last) {
      run.bufs[run.count++] = edge_tail.span().first(blockEnd(last - 1) - (last - 1) * bs);
    }
  } else if (head_len == 0) {  // the CRCs are known: the payload alone
    r.run[r.count++] = {disk_begin, {bodyIo()}, 1};
  } else if (merged) {
    r.run[r.count++] = {rec.offset, {headIo()}, 1};
  } else if (disk_begin == rec.offset + head_len) {
    r.run[r.count++] = {rec.offset, {headIo(), bodyIo()}, 2};
  } else {
    r.run[r.count++] = {rec.offset, {headIo()}, 1};
    r.run[r.count++] = {disk_begin, {bodyIo()}, 1};
  }
  return r;
}

Status ChunkStoreImpl::verifyRead(ReadPlan& plan) const {
  const IndexRecord& rec = plan.rec;
  std::optional<BlobHeader> hdr;
  if (!plan.crcs) {
    auto decoded = decodeHeader(plan.headIo().first(rec.header_region_len));
    if (!decoded) return plan.corrupt(*this, decoded.error().message());
    if (decoded->id != plan.id || decoded->payload_len != rec.payload_len ||
        decoded->block_size != rec.block_size) {
      return plan.corrupt(*this, "header does not match the index entry");
    }
    hdr = std::move(*decoded);
  }
  if (plan.out.empty()) return Status::ok();
  const uint64_t bs = rec.block_size;
  for (uint64_t b = plan.first; b < plan.last; ++b) {
    uint64_t len = std::min(bs, rec.payload_len - b * bs);
    uint32_t actual = ec::crc32c({plan.blockData(b), len});
    const uint32_t stored = plan.crcs ? plan.crcs->crcs[b] : hdr->blockCrc(b);
    if (actual != stored) {
      // The next attempt reads the header again: the cached table is suspect too.
      if (plan.crcs) crcs_.erase(plan.id);
      return plan.corrupt(*this, fmt::format("block {} CRC mismatch (stored {:08x}, computed {:08x})",
                                             b, stored, actual));
    }
  }
  if (plan.fill_crcs) crcs_.insert(plan.id, rec, *hdr);
  const uint64_t end = plan.offset + plan.out.size();
  if (plan.in_place) {  // the whole blocks are in place: the partial ones' bytes
    if (plan.edge_first) {
      const uint64_t b = plan.first;
      std::memcpy(plan.out.data(), plan.blockData(b) + (plan.offset - b * bs),
                  std::min(end, plan.blockEnd(b)) - plan.offset);
    }
    if (plan.edge_last) {
      const uint64_t b = plan.last - 1;
      std::memcpy(plan.out.data() + (b * bs - plan.offset), plan.blockData(b), end - b * bs);
    }
  } else if (!plan.direct) {
    std::memcpy(plan.out.data(), plan.blockData(plan.first) + (plan.offset - plan.first * bs),
                plan.out.size());
  }
  return Status::ok();
}

Status ChunkStoreImpl::readVerified(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                                    std::span<uint8_t> out, bool cached, bool use_crcs,
                                    bool* used_crcs) {
  auto plan = planRead(id, rec, offset, out, false, cached, use_crcs);
  if (!plan) return plan.error();
  if (used_crcs != nullptr) *used_crcs = plan->crcs != nullptr;
  const ReadPlan::Runs io = plan->runs();
  for (const ReadPlan::Run& run : io.all()) {
    GRANARY_RETURN_IF_ERROR(engine_.preadv(plan->file->get(), run.parts(), run.at));
  }
  return verifyRead(*plan);
}

// One asynchronous read in flight: its plan, and the one or two I/Os it waits for.
struct ChunkStoreImpl::AsyncRead {
  ReadPlan plan;
  IoDone done;
  Step step{Attempt::kDrive, true};
  std::atomic<int> pending{0};
  std::mutex mu;  // error
  Status error;
};

void ChunkStoreImpl::readAsync(const BlobId& id, uint64_t offset, std::span<uint8_t> out,
                               IoDone done) {
  auto rec = index_->get(id);
  if (!rec) return done(rec.error());
  if (Status st = checkRange(id, *rec, offset, out.size()); !st) return done(std::move(st));
  readVerifiedAsync(id, *rec, offset, out, Step{firstAttempt(), true}, std::move(done));
}

void ChunkStoreImpl::readVerifiedAsync(const BlobId& id, const IndexRecord& rec,
                                       uint64_t offset, std::span<uint8_t> out, Step step,
                                       IoDone done) {
  auto plan =
      planRead(id, rec, offset, out, true, step.attempt == Attempt::kCache, step.use_crcs);
  if (!plan) {
    return completeAsync(id, rec, offset, out, step, plan.error(), std::move(done), false);
  }
  auto owned = std::make_unique<AsyncRead>();
  owned->plan = std::move(*plan);
  owned->done = std::move(done);
  owned->step = step;
  const int reads = (owned->plan.head_len > 0 ? 1 : 0) + (owned->plan.merged ? 0 : 1);
  // One more than the reads: the submitter's, released after both submissions, so that
  // no completion ends the read (and runs the caller's callback) while they are made.
  owned->pending = reads + 1;
  beginOp();
  AsyncRead* op = owned.release();  // finishAsyncRead deletes it
  auto finished = [this, op](Status st) {
    if (!st) {
      std::lock_guard lock(op->mu);
      if (op->error.isOk()) op->error = std::move(st);
    }
    if (op->pending.fetch_sub(1) == 1) finishAsyncRead(op);
  };
  // Everything the submissions need is taken first: the first I/O may complete, and free
  // `op`, before the second is submitted.
  const int fd = op->plan.file->get();
  const bool merged = op->plan.merged;
  const bool with_head = op->plan.head_len > 0;
  const auto head = with_head ? op->plan.headIo() : std::span<uint8_t>();
  const uint64_t head_at = op->plan.rec.offset;
  const auto body = merged ? std::span<uint8_t>() : op->plan.bodyIo();
  const uint64_t body_at = op->plan.disk_begin;
  {
    IoBatch batch(engine_);  // both reads in one system call
    int submitted = 0;
    try {
      if (with_head) {
        engine_.readAsync(fd, head, head_at, finished);
        ++submitted;
      }
      if (!merged) {
        engine_.readAsync(fd, body, body_at, finished);
        ++submitted;
      }
    } catch (const std::exception&) {  // a submission could not allocate
      // (No formatting here: it could fail to allocate as well.)
      for (int i = submitted; i < reads; ++i) finished(Status::internal("submitting a read"));
    }
    // The submitter's count, released with both reads handed over but (in a batch the
    // engine holds to its end) not yet submitted: the last completion, on the engine's
    // thread, ends the read, not this thread after a fast completion.
    finished(Status::ok());
  }
}

void ChunkStoreImpl::finishAsyncRead(AsyncRead* op) {
  OpEnd end{this};
  std::unique_ptr<AsyncRead> owned(op);
  Status st = op->error.isOk() ? verifyRead(op->plan) : std::move(op->error);
  completeAsync(op->plan.id, op->plan.rec, op->plan.offset, op->plan.out, op->step,
                std::move(st), std::move(op->done), op->plan.crcs != nullptr);
  owned.reset();
}

void ChunkStoreImpl::completeAsync(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                                   std::span<uint8_t> out, Step step, Status st, IoDone done,
                                   bool used_crcs) {
  IndexRecord current = rec;  // `rec` may live in the finished read
  if (auto next = nextStep(id, current, offset, out.size(), step, /*use_crcs=*/true, used_crcs,
                           st)) {
    return readVerifiedAsync(id, current, offset, out, *next, std::move(done));
  }
  done(std::move(st));
}

Result<BlobInfo> ChunkStoreImpl::stat(const BlobId& id) {
  auto rec = index_->get(id);
  if (!rec) return fail(rec.error());
  return BlobInfo{id, rec->payload_len, rec->created_unix_nanos};
}

Result<BlobDescriptor> ChunkStoreImpl::describe(const BlobId& id) {
  ForegroundOp op(*this);  // reads the header from the drive
  auto rec = index_->get(id);
  if (!rec) return fail(rec.error());
  for (bool rechecked = false;; rechecked = true) {
    auto plan = planRead(id, *rec, 0, {}, false, false, false);  // the header region only
    if (!plan) return fail(plan.error());
    Status st = engine_.pread(plan->file->get(), plan->headIo(), rec->offset);
    if (st) st = verifyRead(*plan);
    if (st.isCorruption() && !rechecked) {
      // As for reads: a remove() may have punched the range since the lookup, which makes
      // the blob deleted (or stored again elsewhere), not corrupt.
      auto again = recheckAfterCorruption(id, *rec, 0, 0, st);
      if (again) {
        rec = *again;
        continue;
      }
      st = again.error();
    }
    if (st.isCorruption()) noteCorrupt(id, st);
    if (!st) return fail(st);
    auto hdr = decodeHeader(plan->headIo().first(rec->header_region_len));
    if (!hdr) return fail(hdr.error());
    return BlobDescriptor{hdr->id, hdr->ec, hdr->stripe_data_len, std::move(hdr->bucket),
                          std::move(hdr->key), hdr->flags};
  }
}

Status ChunkStoreImpl::remove(const BlobId& id) {
  ForegroundOp op(*this);
  IdClaim claim(*this, id);
  auto rec = index_->getUncached(id);  // not cached on its way out
  if (!rec) return rec.error();
  // Persist first, then free: a crash in between leaves an orphan range, never an index
  // entry pointing at a hole.
  {
    // Only a suspect's removal waits for the marker thread (and takes its mark with it):
    // the others share RocksDB's synced writes with each other as before. A note that
    // comes after the check below can leave a mark of a removed blob, which the next open
    // drops.
    std::unique_lock marks(marks_mu_, std::defer_lock);
    const auto suspect = [&] {
      std::lock_guard lock(corrupt_mu_);
      return corrupt_.contains(id);
    };
    bool marked_corrupt = suspect();
    if (marked_corrupt) {
      marks.lock();
      marked_corrupt = suspect();
    }
    GRANARY_RETURN_IF_ERROR(index_->remove(id, marked_corrupt));
    std::lock_guard lock(corrupt_mu_);
    if (corrupt_.erase(id) > 0) suspects_ = corrupt_.size();
  }
  crcs_.erase(id);
  mappings_.forget(id);  // its hole punch is to free the space: no mapping may hold the file
  --blobs_;
  payload_bytes_ -= rec->payload_len;
  disk_bytes_ -= rec->diskLen();
  if (crashAt("remove.after_index")) return crashed("remove.after_index");
  punchUnlessPinned(id, *rec);
  return Status::ok();
}

Result<std::vector<BlobInfo>> ChunkStoreImpl::list(std::optional<BlobId> after, size_t limit) {
  std::vector<BlobInfo> out;
  if (limit == 0) return out;
  Status st = index_->forEach(after, [&](const BlobId& id, const IndexRecord& r) {
    out.push_back(BlobInfo{id, r.payload_len, r.created_unix_nanos});
    return out.size() < limit;
  });
  if (!st) return fail(st);
  return out;
}

Result<DriveStats> ChunkStoreImpl::stats() {
  struct statvfs vfs {};
  if (::statvfs(options_.dir.c_str(), &vfs) != 0) {
    return fail(Status::fromErrno(errno, "statvfs " + options_.dir));
  }
  DriveStats s;
  s.blobs = blobs_.load();
  s.payload_bytes = payload_bytes_.load();
  s.disk_bytes = disk_bytes_.load();
  s.reserved_bytes = extents_.reservedBytes();
  s.spare_zeroed_bytes = extents_.zeroedBytes();
  s.open_descriptors = extents_.openDescriptors();
  s.descriptors_closed = extents_.descriptorsClosed();
  s.unreclaimed_extents = unreclaimed_extents_;
  s.commit_batches = commits_.batches();
  s.committed_puts = committed_puts_.load();
  s.crc_cache_hits = crcs_.hits();
  s.crc_cache_misses = crcs_.misses();
  s.crc_cache_bytes = crcs_.bytes();
  s.index_cache_hits = index_->cacheHits();
  s.index_cache_misses = index_->cacheMisses();
  s.index_cache_bytes = index_->cacheBytes();
  const VerifiedMappings::Stats mapped = mappings_.stats();
  s.verified_hits = mapped.hits;
  s.verified_admitted = mapped.admitted;
  s.verified_blobs = mapped.mappings;
  s.verified_bytes = mapped.bytes;
  s.capacity_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  s.available_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  s.filesystem_id = static_cast<uint64_t>(vfs.f_fsid);
  s.opened_unix_nanos = opened_unix_nanos_;
  {
    std::lock_guard lock(corrupt_mu_);
    s.corrupt_ids.assign(corrupt_.begin(), corrupt_.end());
  }
  return s;
}

bool ChunkStoreImpl::writable() {
  const int64_t now = clock_.nowUnixNanos();
  if (now < writes_paused_until_.load()) return false;
  // Placement asks for every stripe, on event-loop threads: statvfs at most once a second.
  if (now >= space_checked_until_.load()) {
    space_ok_ = hasRoomFor(0);
    space_checked_until_ = now + 1'000'000'000;
  }
  return space_ok_.load();
}

}  // namespace

Result<std::unique_ptr<ChunkStore>> openChunkStore(const ChunkStoreOptions& options,
                                                   IoEngine& engine, RocksResources& resources,
                                                   const Clock& clock) {
  if (options.dir.empty()) return fail(Status::invalidArgument("chunk store dir is empty"));
  if (options.block_size < 512 || options.block_size > (64u << 20) ||
      options.block_size % 512 != 0) {
    return fail(Status::invalidArgument(
        fmt::format("block size {} is not a multiple of 512 in [512, 64 MiB]",
                    options.block_size)));
  }
  if (options.extent_size < kIoAlign || options.extent_size % kIoAlign != 0) {
    return fail(Status::invalidArgument("extent size is not a multiple of 4 KiB"));
  }
  // New directories must survive a power cut before anything is stored in them.
  for (const char* sub : {"/extents", "/index"}) {
    GRANARY_RETURN_IF_ERROR_RESULT(createDirectoriesDurably(options.dir + sub));
  }
  auto index = RocksIndex::open(options.dir + "/index", resources, options.index_cache_bytes);
  if (!index) return fail(index.error());
  auto store = std::make_unique<ChunkStoreImpl>(options, engine, clock, std::move(*index));
  if (Status st = store->init(); !st) return fail(st);
  return std::unique_ptr<ChunkStore>(std::move(store));
}

}  // namespace granary::chunkstore

// ExtentSet: the extent files of one drive (D/extents/XXXXXXXX.ext) and the append cursor
// of the active one. Hands out disjoint, kIoAlign-aligned ranges to concurrent writers and
// keeps one read-write descriptor per extent (O_DIRECT), and one read-only descriptor
// through the page cache for cached reads, each opened on first use.
//
// Descriptors are bounded: at `max_descriptors` open, opening another first closes those
// of the least recently used extents that no I/O holds. Each I/O holds its extent's
// descriptor (an ExtentFd) until it ends, so a descriptor is never closed under a read, a
// write or its fdatasync. The count passes the bound by the extents held at once, and
// stays over it until the next open trims it.
//
// Crash safety: a set never appends to an extent it did not create itself. The first
// allocation after open creates a fresh extent, so bytes of unknown state left by a crash
// are never written over or next to; they are orphans for the sweep.
//
// Pre-zeroed spares (docs/chunkstore-format.md, "Pre-zeroed extents"): a write into blocks
// that already hold data leaves fdatasync a data flush, while a write into a hole also
// allocates blocks, which the sync must commit to the journal. prepareSpare() zeroes the
// next extent ahead of time (D/extents/spare.tmp, renamed spare.zero once synced); the
// next roll renames it into place instead of creating a hole. A spare found at open (a
// clean shutdown's) is used; a half-zeroed one is removed.
// Thread safety: all methods are thread safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "granary/chunkstore/chunk_store.h"
#include "granary/chunkstore/io_engine.h"
#include "granary/common/status.h"

namespace granary::chunkstore {

// fsyncs a directory, making the entries created in it durable.
Status syncDirectory(IoEngine& engine, const std::string& dir);

// An open extent descriptor, closed when its last holder lets it go; it may outlive its set
// (a pinned range released after the store), so it needs neither the set nor its engine,
// and closes with close(2) itself: an engine wrapper never sees the close (none needs to;
// PowerLossEngine's fd-to-path entry is replaced by the next open of that number).
class ExtentFile {
 public:
  ExtentFile(int fd, std::shared_ptr<std::atomic<size_t>> open_count);
  ~ExtentFile();
  ExtentFile(const ExtentFile&) = delete;
  ExtentFile& operator=(const ExtentFile&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
  const std::shared_ptr<std::atomic<size_t>> open_count_;
};
using ExtentFd = std::shared_ptr<const ExtentFile>;

class ExtentSet {
 public:
  struct Allocation {
    uint32_t extent = 0;
    ExtentFd file;
    uint64_t offset = 0;
  };
  // Durably records that extent numbers below `next` are taken; called (and must succeed)
  // before the extent file `next - 1` is created, so a number is never used twice.
  using PersistNext = std::function<Status(uint32_t next)>;

  // Live blob ranges (offset, length) per extent, for orphan reclamation.
  using LiveRanges = std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>>;
  struct ReclaimStats {
    uint64_t extents_removed = 0;  // extent files without a live blob, unlinked
    uint64_t ranges_punched = 0;   // orphan ranges that still held data
    uint64_t bytes_punched = 0;
    uint64_t extents_failed = 0;   // left as they were (logged): an I/O error, a lost file
  };

  ExtentSet(IoEngine& engine, std::string dir, uint64_t extent_size, bool direct_io,
            size_t max_descriptors, PersistNext persist_next, CrashPoint crash_point);
  ~ExtentSet();
  ExtentSet(const ExtentSet&) = delete;
  ExtentSet& operator=(const ExtentSet&) = delete;

  // Finds the highest extent number in the directory; new extents get numbers above both
  // it and `min_next`.
  Status open(uint32_t min_next);
  // How many of the extents open() found are numbered `from` or above.
  size_t foundFrom(uint32_t from) const;
  // Reserves `len` (a multiple of kIoAlign) bytes, rolling to a new extent when the active
  // one would grow past extent_size (a blob larger than that gets an extent of its own).
  Result<Allocation> allocate(uint64_t len);
  // Stops appending to `extent` (after a failed fdatasync its page-cache state is unknown):
  // the next allocation starts a new extent, and retired(extent) is true from then on
  // (until the store is reopened), so that writes already made to it are not acknowledged
  // on the strength of a later fdatasync.
  void retire(uint32_t extent);
  bool retired(uint32_t extent) const;
  // Frees every byte of the extents found by open() that `live` does not cover: unlinks
  // extents without live blobs, truncates the others after their last live blob and
  // punches their gaps (only where data remains, found with SEEK_DATA, so a restart does
  // not re-punch old holes). An extent that fails is left as it was, for the next open.
  // Call before the first allocation, with nothing else running.
  ReclaimStats reclaimOrphans(const LiveRanges& live);
  // The descriptor of an existing extent (opened on first use).
  Result<ExtentFd> fd(uint32_t extent);
  // A read-only descriptor of an existing extent through the page cache (no O_DIRECT, and
  // no readahead: a read fetches only what it asks for), opened on first use; fd(extent)
  // itself where the drive has no O_DIRECT. The page cache is per file, so it stays
  // coherent with fd()'s direct writes and hole punches.
  Result<ExtentFd> cachedFd(uint32_t extent);
  // cachedFd(extent) if it is open already (no system call), else null.
  ExtentFd cachedFdIfOpen(uint32_t extent) const;
  // Extent descriptors open now (held by I/Os included), and how many were closed to stay
  // within max_descriptors since the set was made.
  size_t openDescriptors() const;
  uint64_t descriptorsClosed() const;
  std::string path(uint32_t extent) const;
  bool directIo() const;

  // Whether prepareSpare() has work: no spare is ready or being prepared, and the active
  // extent is at least half full (a drive that is not being filled gets no spare).
  bool wantsSpare() const;
  // Prepares the spare on the calling thread: creates spare.tmp of extent_size, writes
  // zeros over it in pieces of `piece` bytes, calling pace(bytes) before each, fdatasyncs
  // it and renames it to spare.zero. kUnavailable, the partial file removed, when pace()
  // returns false or dropSpare() is called meanwhile.
  Status prepareSpare(uint64_t piece, const std::function<bool(uint64_t)>& pace);
  // Removes the spare, ready or in preparation, returning its space (after an ENOSPC).
  void dropSpare();
  // Punches the unused tails of pre-zeroed extents that were rolled off (kept off the
  // allocation path: a punch waits for the file's direct I/O in flight).
  Status freeRolledTails();
  // Bytes allocated ahead of use: the spare as far as it is zeroed, the unused tail of the
  // pre-zeroed active extent, and rolled-off tails not yet punched. With the live blobs'
  // bytes, this is what `du` sees of the extents.
  uint64_t reservedBytes() const;
  // Bytes prepareSpare() has written since open (background writes, not blobs).
  uint64_t zeroedBytes() const;

 private:
  // An extent's descriptors, and when one was last handed out (use_tick_ then).
  struct OpenExtent {
    ExtentFd direct;  // read-write, O_DIRECT where the drive takes it
    ExtentFd cached;  // read-only through the page cache (only when direct_io_)
    mutable std::atomic<uint64_t> used{0};
  };
  // With fds_mu_ held (shared is enough): the descriptor if open, marked as used.
  ExtentFd findLocked(uint32_t extent, bool cached) const;
  // With fds_mu_ held exclusively, before opening a descriptor for `extent`: at the bound,
  // takes the descriptors of the least recently used extents that no I/O holds out of the
  // table, down to about 7/8 of the bound (so the next opens find room without a scan), and
  // returns them, to be closed once fds_mu_ is released (declare the vector before the lock).
  [[nodiscard]] std::vector<ExtentFd> makeRoomLocked(uint32_t extent);
  // With fds_mu_ held exclusively: owns `fd` as `extent`'s descriptor of that kind, used now.
  ExtentFd installLocked(uint32_t extent, bool cached, int fd);
  Result<ExtentFd> openExtent(uint32_t extent, bool create);
  Result<int> openDirect(const std::string& path, int flags);
  // reclaimOrphans() of one extent, counted in `stats`.
  Status reclaimExtent(uint32_t extent, const LiveRanges& live, ReclaimStats& stats);
  std::string sparePath(bool ready) const;
  // Takes the spare out of the set under alloc_mu_ and returns its descriptor, to become an
  // extent or to go to removeSpare() (-1 when none was ready; one in preparation is only
  // flagged to stop, prepareSpare cleans up).
  int takeSpareLocked();
  // Closes a dropped spare's descriptor and unlinks it.
  void removeSpare(int fd);

  IoEngine& engine_;
  const std::string dir_;
  const uint64_t extent_size_;
  PersistNext persist_next_;
  CrashPoint crash_point_;
  std::vector<uint32_t> found_;  // extents present at open()

  const size_t max_descriptors_;
  // ExtentFiles alive (shared with them: they may outlive the set).
  const std::shared_ptr<std::atomic<size_t>> open_count_ =
      std::make_shared<std::atomic<size_t>>(0);
  mutable std::shared_mutex fds_mu_;
  std::map<uint32_t, OpenExtent> open_;
  // Advanced by each open: extents handed out since the last open share its value, so the
  // hot path writes a shared line only after an open, and eviction order is by opens.
  std::atomic<uint64_t> use_tick_{0};
  uint64_t descriptors_closed_ = 0;  // guarded by fds_mu_
  bool direct_io_;  // guarded by fds_mu_; cleared if the filesystem refuses O_DIRECT
  // An O_DIRECT open succeeded here (guarded by fds_mu_): the filesystem takes O_DIRECT, so
  // a later failed open (EMFILE, EIO) is that error, not a refusal of O_DIRECT.
  bool direct_proven_ = false;

  mutable std::mutex alloc_mu_;  // the allocation cursor and the retired set
  std::set<uint32_t> retired_;
  uint32_t next_extent_ = 0;
  bool has_active_ = false;
  uint32_t active_extent_ = 0;
  ExtentFd active_file_;  // held, so the active extent's descriptor is never closed
  uint64_t cursor_ = 0;
  bool active_zeroed_ = false;  // the active extent was a spare: its tail is allocated

  enum class Spare { kNone, kPreparing, kReady };
  Spare spare_ = Spare::kNone;  // guarded by alloc_mu_, like the rest of the spare state
  bool spare_cancel_ = false;   // dropSpare() during kPreparing
  int spare_fd_ = -1;           // kReady: the spare's descriptor
  uint64_t spare_zeroed_ = 0;   // bytes of the spare zeroed so far
  uint64_t zeroed_total_ = 0;   // bytes of spares zeroed since open
  std::vector<std::pair<uint32_t, uint64_t>> rolled_tails_;  // (extent, cursor) to punch
};

}  // namespace granary::chunkstore

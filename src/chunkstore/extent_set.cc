#include "extent_set.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <mutex>
#include <utility>

#include <fmt/core.h>

#include "aligned_buffer.h"
#include "granary/common/log.h"
#include "posix_engine.h"

namespace granary::chunkstore {

namespace {

constexpr std::string_view kExtentSuffix = ".ext";
constexpr std::string_view kSpareTmp = "spare.tmp";
constexpr std::string_view kSpareReady = "spare.zero";

// "0000002a.ext" -> 42; anything else (temp files, strays) is ignored.
bool parseExtentName(const std::string& name, uint32_t* out) {
  if (name.size() != 8 + kExtentSuffix.size() || !name.ends_with(kExtentSuffix)) return false;
  auto [p, ec] = std::from_chars(name.data(), name.data() + 8, *out, 16);
  return ec == std::errc() && p == name.data() + 8;
}

}  // namespace

ExtentFile::ExtentFile(int fd, std::shared_ptr<std::atomic<size_t>> open_count)
    : fd_(fd), open_count_(std::move(open_count)) {
  open_count_->fetch_add(1, std::memory_order_relaxed);
}

ExtentFile::~ExtentFile() {
  Status st = posix_io::closeFile(fd_);
  if (!st) log::warn("closing extent descriptor {}: {}", fd_, st.toString());
  open_count_->fetch_sub(1, std::memory_order_relaxed);
}

ExtentSet::ExtentSet(IoEngine& engine, std::string dir, uint64_t extent_size, bool direct_io,
                     size_t max_descriptors, PersistNext persist_next, CrashPoint crash_point)
    : engine_(engine),
      dir_(std::move(dir)),
      extent_size_(extent_size),
      persist_next_(std::move(persist_next)),
      crash_point_(std::move(crash_point)),
      max_descriptors_(std::max<size_t>(max_descriptors, 2)),
      direct_io_(direct_io) {}

ExtentSet::~ExtentSet() {
  if (spare_fd_ >= 0) (void)engine_.close(spare_fd_);  // a ready spare stays for next time
}

std::string ExtentSet::path(uint32_t extent) const {
  return fmt::format("{}/{:08x}{}", dir_, extent, kExtentSuffix);
}

std::string ExtentSet::sparePath(bool ready) const {
  return fmt::format("{}/{}", dir_, ready ? kSpareReady : kSpareTmp);
}

bool ExtentSet::directIo() const {
  std::shared_lock lock(fds_mu_);
  return direct_io_;
}

Status ExtentSet::open(uint32_t min_next) {
  std::error_code ec;
  uint32_t next = min_next;
  bool spare_found = false;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end;
       it.increment(ec)) {
    uint32_t n = 0;
    const std::string name = it->path().filename().string();
    if (name == kSpareReady) spare_found = true;
    if (!parseExtentName(name, &n)) continue;
    found_.push_back(n);
    if (n >= next) {
      if (n == UINT32_MAX) return Status::corruption("extent numbers exhausted in " + dir_);
      next = n + 1;
    }
  }
  if (ec) return Status::ioError(fmt::format("listing {}: {}", dir_, ec.message()));
  // A half-zeroed spare is started over (prepareSpare() removes it again if this fails); a
  // ready one (renamed only after its sync) is kept.
  (void)engine_.remove(sparePath(false));
  int spare_fd = -1;
  if (spare_found) {
    const uint64_t size = std::filesystem::file_size(sparePath(true), ec);
    if (!ec && size == extent_size_) {
      std::unique_lock lock(fds_mu_);
      if (auto fd = openDirect(sparePath(true), O_RDWR)) spare_fd = *fd;
    }
    if (spare_fd < 0) (void)engine_.remove(sparePath(true));
  }
  std::lock_guard lock(alloc_mu_);
  next_extent_ = next;
  if (spare_fd >= 0) {
    spare_ = Spare::kReady;
    spare_fd_ = spare_fd;
    spare_zeroed_ = extent_size_;
  }
  return Status::ok();
}

Status syncDirectory(IoEngine& engine, const std::string& dir) {
  auto fd = engine.open(dir, O_RDONLY | O_DIRECTORY, 0);
  if (!fd) return fd.error();
  Status st = engine.fsync(*fd);  // fdatasync promises nothing about entries
  Status closed = engine.close(*fd);
  return st.isOk() ? closed : st;
}

// With fds_mu_ held exclusively.
Result<int> ExtentSet::openDirect(const std::string& file, int flags) {
  auto fd = engine_.open(file, flags | (direct_io_ ? O_DIRECT : 0), 0644);
  if (fd && direct_io_) direct_proven_ = true;
  // Only a filesystem that never took O_DIRECT here refuses it: switching a drive whose
  // earlier descriptors are O_DIRECT to buffered I/O would leave those in use by reads
  // that expect the page cache's (unaligned) access.
  // A retryable failure (out of descriptors or memory) says nothing of O_DIRECT.
  if (!fd && direct_io_ && !direct_proven_ && fd.error().code() == Status::Code::kIoError &&
      !fd.error().retryable()) {
    // tmpfs and some FUSE filesystems refuse O_DIRECT (EINVAL). Buffered I/O plus
    // fdatasync keeps the durability contract; only the page-cache bypass is lost. O_EXCL
    // is dropped on the retry: the refused open may already have created the file, and the
    // name is ours alone (an extent number is persisted before creation).
    auto buffered = engine_.open(file, flags & ~O_EXCL, 0644);
    if (buffered) {
      log::warn("{} refuses O_DIRECT ({}); using buffered I/O for this drive", dir_,
                fd.error().message());
      direct_io_ = false;
    }
    fd = std::move(buffered);
  }
  return fd;
}

ExtentFd ExtentSet::installLocked(uint32_t extent, bool cached, int fd) {
  ExtentFd file;
  try {
    file = std::make_shared<ExtentFile>(fd, open_count_);
  } catch (...) {
    (void)posix_io::closeFile(fd);
    throw;
  }
  OpenExtent& entry = open_[extent];  // should this throw, `file` closes the descriptor
  (cached ? entry.cached : entry.direct) = file;
  entry.used.store(use_tick_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  return file;
}

ExtentFd ExtentSet::findLocked(uint32_t extent, bool cached) const {
  auto it = open_.find(extent);
  if (it == open_.end()) return nullptr;
  const ExtentFd& file = cached && direct_io_ ? it->second.cached : it->second.direct;
  if (!file) return nullptr;
  const uint64_t now = use_tick_.load(std::memory_order_relaxed);
  if (it->second.used.load(std::memory_order_relaxed) != now) {
    it->second.used.store(now, std::memory_order_relaxed);
  }
  return file;
}

std::vector<ExtentFd> ExtentSet::makeRoomLocked(uint32_t extent) {
  use_tick_.fetch_add(1, std::memory_order_relaxed);
  std::vector<ExtentFd> closing;
  size_t open = open_count_->load(std::memory_order_relaxed);
  if (open < max_descriptors_) return closing;
  // Room for this open and the next eighth of the bound's.
  const size_t target = max_descriptors_ - 1 - max_descriptors_ / 8;
  // Only the table holds a descriptor no I/O holds (use_count 1), and no I/O can take one
  // while fds_mu_ is held exclusively: closing it pulls nothing from under anyone.
  auto idle = [](const ExtentFd& f) { return f == nullptr || f.use_count() == 1; };
  std::vector<std::pair<uint64_t, uint32_t>> idle_extents;  // (last used, extent)
  for (const auto& [n, entry] : open_) {
    if (n != extent && idle(entry.direct) && idle(entry.cached)) {
      idle_extents.emplace_back(entry.used.load(std::memory_order_relaxed), n);
    }
  }
  std::sort(idle_extents.begin(), idle_extents.end());
  // If every one is in use, the set is over its bound until enough are let go.
  for (const auto& [used, n] : idle_extents) {
    if (open <= target) break;
    auto it = open_.find(n);
    for (ExtentFd* file : {&it->second.direct, &it->second.cached}) {
      if (*file == nullptr) continue;
      closing.push_back(std::move(*file));
      --open;
      ++descriptors_closed_;
    }
    open_.erase(it);
  }
  return closing;
}

Result<ExtentFd> ExtentSet::openExtent(uint32_t extent, bool create) {
  std::vector<ExtentFd> closing;  // closed after the lock is released
  std::unique_lock lock(fds_mu_);
  if (ExtentFd file = findLocked(extent, /*cached=*/false)) return file;
  closing = makeRoomLocked(extent);
  auto fd = openDirect(path(extent), O_RDWR | (create ? O_CREAT | O_EXCL : 0));
  if (!fd) return fail(fd.error());
  return installLocked(extent, /*cached=*/false, *fd);
}

Result<ExtentFd> ExtentSet::fd(uint32_t extent) {
  {
    std::shared_lock lock(fds_mu_);
    if (ExtentFd file = findLocked(extent, /*cached=*/false)) return file;
  }
  return openExtent(extent, /*create=*/false);
}

Result<ExtentFd> ExtentSet::cachedFd(uint32_t extent) {
  {
    std::shared_lock lock(fds_mu_);
    if (ExtentFd file = findLocked(extent, /*cached=*/true)) return file;
  }
  if (!directIo()) return fd(extent);
  std::vector<ExtentFd> closing;  // closed after the lock is released
  std::unique_lock lock(fds_mu_);
  if (ExtentFd file = findLocked(extent, /*cached=*/true)) return file;
  closing = makeRoomLocked(extent);
  auto fd = engine_.open(path(extent), O_RDONLY, 0);
  if (!fd) return fail(fd.error());
  // Blob reads are random and exact: readahead would only fetch other blobs' bytes.
  (void)::posix_fadvise(*fd, 0, 0, POSIX_FADV_RANDOM);
  return installLocked(extent, /*cached=*/true, *fd);
}

ExtentFd ExtentSet::cachedFdIfOpen(uint32_t extent) const {
  std::shared_lock lock(fds_mu_);
  return findLocked(extent, /*cached=*/true);
}

size_t ExtentSet::openDescriptors() const {
  return open_count_->load(std::memory_order_relaxed);
}

uint64_t ExtentSet::descriptorsClosed() const {
  std::shared_lock lock(fds_mu_);
  return descriptors_closed_;
}

Result<ExtentSet::Allocation> ExtentSet::allocate(uint64_t len) {
  std::lock_guard lock(alloc_mu_);
  if (!has_active_ || (cursor_ > 0 && cursor_ + len > extent_size_)) {
    if (next_extent_ == UINT32_MAX) return fail(Status::noSpace("extent numbers exhausted"));
    uint32_t extent = next_extent_;
    if (Status st = persist_next_(extent + 1); !st) return fail(st);
    next_extent_ = extent + 1;
    if (crash_point_ && crash_point_("extent.after_persist_next")) {
      return fail(Status::unavailable("crashed at extent.after_persist_next"));
    }
    bool zeroed = false;
    ExtentFd new_file;
    if (spare_ == Spare::kReady && len <= extent_size_) {
      // The spare becomes this extent: already the full size, every block written.
      Status st = engine_.rename(sparePath(true), path(extent));
      if (st) {
        zeroed = true;
        const int spare = takeSpareLocked();
        std::vector<ExtentFd> closing;  // closed after fds_mu_ is released
        std::unique_lock fds_lock(fds_mu_);
        closing = makeRoomLocked(extent);
        new_file = installLocked(extent, /*cached=*/false, spare);
        fds_lock.unlock();
        if (crash_point_ && crash_point_("extent.after_spare_rename")) {
          return fail(Status::unavailable("crashed at extent.after_spare_rename"));
        }
      } else {
        log::warn("{}: cannot use the spare extent: {}", dir_, st.toString());
        removeSpare(takeSpareLocked());
      }
    }
    if (!zeroed) {
      auto fd = openExtent(extent, /*create=*/true);
      if (!fd) return fail(fd.error());
      if (crash_point_ && crash_point_("extent.after_create")) {
        return fail(Status::unavailable("crashed at extent.after_create"));
      }
      // Presized (a hole: nothing allocated), so that appends do not grow the file. On ext4
      // an O_DIRECT write past the end of the file holds the inode lock and completes
      // before the next one starts, so concurrent appends to one extent reach the disk one
      // at a time (docs/chunkstore-format.md, "Why extents are presized").
      if (Status st = engine_.resize((*fd)->get(), extent_size_); !st) return fail(st);
      if (crash_point_ && crash_point_("extent.after_resize")) {
        return fail(Status::unavailable("crashed at extent.after_resize"));
      }
      new_file = std::move(*fd);
    }
    // The new extent's directory entry must be durable before an index entry points into it.
    if (Status st = syncDirectory(engine_, dir_); !st) {
      // Never used: a spare's blocks are freed with the rolled-off tails.
      if (zeroed) rolled_tails_.emplace_back(extent, 0);
      return fail(st);
    }
    if (has_active_ && active_zeroed_) rolled_tails_.emplace_back(active_extent_, cursor_);
    if (has_active_) {
      // Written to until now (writes do not mark it): the newest in the table, not the oldest.
      std::shared_lock fds_lock(fds_mu_);
      (void)findLocked(active_extent_, /*cached=*/false);
    }
    has_active_ = true;
    active_extent_ = extent;
    active_file_ = std::move(new_file);
    active_zeroed_ = zeroed;
    cursor_ = 0;
  }
  Allocation a{active_extent_, active_file_, cursor_};
  cursor_ += alignUp(len, kIoAlign);
  return a;
}

void ExtentSet::retire(uint32_t extent) {
  std::lock_guard lock(alloc_mu_);
  if (has_active_ && active_extent_ == extent) {
    if (active_zeroed_) rolled_tails_.emplace_back(active_extent_, cursor_);
    has_active_ = false;
    active_file_.reset();
  }
  retired_.insert(extent);
}

bool ExtentSet::wantsSpare() const {
  std::lock_guard lock(alloc_mu_);
  return spare_ == Spare::kNone && has_active_ && cursor_ >= extent_size_ / 2;
}

Status ExtentSet::prepareSpare(uint64_t piece, const std::function<bool(uint64_t)>& pace) {
  {
    std::lock_guard lock(alloc_mu_);
    if (spare_ != Spare::kNone) return Status::ok();
    spare_ = Spare::kPreparing;
    spare_cancel_ = false;
    spare_zeroed_ = 0;
  }
  int fd = -1;
  bool renamed = false;
  // Gives up: the partial (or, if dropped meanwhile, the finished) spare is removed.
  auto abandon = [&](Status why) {
    if (fd >= 0) (void)engine_.close(fd);
    (void)engine_.remove(sparePath(renamed));  // if this fails, the next try removes it
    std::lock_guard lock(alloc_mu_);
    spare_ = Spare::kNone;
    spare_zeroed_ = 0;
    return why;
  };
  // Leftovers of an earlier failure (no spare is ours now).
  for (bool ready : {false, true}) {
    if (Status st = engine_.remove(sparePath(ready)); !st) return abandon(st);
  }
  Result<int> opened = [&] {
    std::unique_lock lock(fds_mu_);
    return openDirect(sparePath(false), O_RDWR | O_CREAT | O_EXCL);
  }();
  // Not under fds_mu_: abandon() takes alloc_mu_, which allocate() takes before fds_mu_.
  if (!opened) return abandon(opened.error());
  fd = *opened;
  // Sized first, so that the zeroing writes never grow the file (see allocate()).
  if (Status st = engine_.resize(fd, extent_size_); !st) return abandon(st);
  const AlignedBuffer zeros(std::min(piece, extent_size_));
  if (!zeros.valid()) return abandon(Status::noSpace("no memory for the zeroing buffer"));
  for (uint64_t at = 0; at < extent_size_;) {
    const uint64_t n = std::min<uint64_t>(zeros.size(), extent_size_ - at);
    if (!pace(n)) return abandon(Status::unavailable("spare zeroing stopped"));
    bool dropped = false;
    {
      std::lock_guard lock(alloc_mu_);
      dropped = spare_cancel_;
    }
    // Not under alloc_mu_: abandon() takes it (dropSpare() after an ENOSPC used to leave
    // the drive's allocation lock held here forever).
    if (dropped) return abandon(Status::unavailable("spare dropped"));
    if (Status st = engine_.pwrite(fd, {zeros.data(), n}, at); !st) return abandon(st);
    at += n;
    std::lock_guard lock(alloc_mu_);
    spare_zeroed_ = at;
    zeroed_total_ += n;
  }
  if (Status st = engine_.fdatasync(fd); !st) return abandon(st);
  if (crash_point_ && crash_point_("spare.after_sync")) {
    return Status::unavailable("crashed at spare.after_sync");
  }
  // Only a synced spare is named ready, so one found at open is whole (its directory entry
  // is made durable with the extent's, when a roll uses it). Renamed under alloc_mu_, with
  // the state: a roll between the two used to find the spare still preparing, cancel it,
  // and leave its zeroing wasted (as rolls do syncDirectory, a rename fits under the lock).
  bool dropped = false;
  Status st;
  {
    std::lock_guard lock(alloc_mu_);
    dropped = spare_cancel_;
    if (!dropped) st = engine_.rename(sparePath(false), sparePath(true));
    if (!dropped && st) {
      renamed = true;
      spare_ = Spare::kReady;
      spare_fd_ = fd;
    }
  }
  // Not under alloc_mu_: abandon() takes it.
  if (dropped) return abandon(Status::unavailable("spare dropped"));
  return st ? Status::ok() : abandon(st);
}

int ExtentSet::takeSpareLocked() {
  if (spare_ == Spare::kPreparing) spare_cancel_ = true;
  if (spare_ != Spare::kReady) return -1;
  spare_ = Spare::kNone;
  spare_zeroed_ = 0;
  return std::exchange(spare_fd_, -1);
}

void ExtentSet::removeSpare(int fd) {
  if (fd < 0) return;
  (void)engine_.close(fd);
  (void)engine_.remove(sparePath(true));  // if this fails, prepareSpare() removes it
}

void ExtentSet::dropSpare() {
  int fd = -1;
  {
    std::lock_guard lock(alloc_mu_);
    fd = takeSpareLocked();
  }
  // Unlinked outside the lock: freeing a GiB of blocks takes a while.
  removeSpare(fd);
}

Status ExtentSet::freeRolledTails() {
  std::vector<std::pair<uint32_t, uint64_t>> tails;
  {
    std::lock_guard lock(alloc_mu_);
    tails = rolled_tails_;  // counted by reservedBytes() until punched
  }
  Status result = Status::ok();
  for (const auto& tail : tails) {
    const auto& [extent, cursor] = tail;
    if (cursor < extent_size_) {
      auto fd = this->fd(extent);
      Status st = fd ? engine_.punchHole((*fd)->get(), cursor, extent_size_ - cursor)
                     : fd.error();
      if (!st) {
        // Still allocated (and counted): tried again next time, or cut by recovery.
        if (result) result = st;
        continue;
      }
    }
    std::lock_guard lock(alloc_mu_);
    std::erase(rolled_tails_, tail);
  }
  return result;
}

uint64_t ExtentSet::zeroedBytes() const {
  std::lock_guard lock(alloc_mu_);
  return zeroed_total_;
}

uint64_t ExtentSet::reservedBytes() const {
  std::lock_guard lock(alloc_mu_);
  uint64_t bytes = spare_zeroed_;
  if (has_active_ && active_zeroed_ && cursor_ < extent_size_) bytes += extent_size_ - cursor_;
  for (const auto& [extent, cursor] : rolled_tails_) {
    if (cursor < extent_size_) bytes += extent_size_ - cursor;
  }
  return bytes;
}

size_t ExtentSet::foundFrom(uint32_t from) const {
  return static_cast<size_t>(std::ranges::count_if(found_, [&](uint32_t n) { return n >= from; }));
}

bool ExtentSet::retired(uint32_t extent) const {
  std::lock_guard lock(alloc_mu_);
  return retired_.contains(extent);
}

ExtentSet::ReclaimStats ExtentSet::reclaimOrphans(const LiveRanges& live) {
  ReclaimStats stats;
  for (uint32_t extent : found_) {
    // An extent that cannot be reclaimed keeps its orphan bytes until the next open: they
    // are wasted space, never read or written over (new blobs go to new extents), so a
    // failing disk region or a missing file costs the drive none of its other blobs.
    Status st = reclaimExtent(extent, live, stats);
    if (!st) {
      ++stats.extents_failed;
      log::warn("{}: orphan bytes left for the next open: {}", path(extent), st.toString());
    }
  }
  found_.clear();
  return stats;
}

Status ExtentSet::reclaimExtent(uint32_t extent, const LiveRanges& live, ReclaimStats& stats) {
  auto it = live.find(extent);
  if (it == live.end() || it->second.empty()) {
    // No live blob: the whole file is orphan bytes. Close our descriptor first.
    {
      std::unique_lock lock(fds_mu_);
      open_.erase(extent);
    }
    GRANARY_RETURN_IF_ERROR(engine_.remove(path(extent)));
    ++stats.extents_removed;
    return Status::ok();
  }
  // A descriptor of its own, closed after: the walk touches each extent once, and keeping
  // them would only push the ones reads use out of the bounded table.
  auto fd = engine_.open(path(extent), O_RDWR, 0644);
  if (!fd) return fd.error();
  struct Closer {
    IoEngine& engine;
    int fd;
    ~Closer() { (void)engine.close(fd); }
  } closer{engine_, *fd};
  const off_t size = ::lseek(*fd, 0, SEEK_END);
  if (size < 0) return Status::fromErrno(errno, "lseek " + path(extent));
  auto ranges = it->second;
  std::sort(ranges.begin(), ranges.end());
  uint64_t pos = 0;
  // Calls fn(begin, end) for each run of [begin, end) that holds data (a SEEK_DATA /
  // SEEK_HOLE walk), so that old holes and a presized extent's unwritten tail are skipped.
  auto forEachDataRun = [&](uint64_t begin, uint64_t end, auto&& fn) -> Status {
    uint64_t at = begin;
    while (at < end) {
      off_t data = ::lseek(*fd, static_cast<off_t>(at), SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) return Status::ok();  // no data past `at`
        return Status::fromErrno(errno, "SEEK_DATA in " + path(extent));
      }
      if (static_cast<uint64_t>(data) >= end) return Status::ok();
      off_t hole = ::lseek(*fd, data, SEEK_HOLE);
      if (hole < 0) return Status::fromErrno(errno, "SEEK_HOLE in " + path(extent));
      uint64_t stop = std::min<uint64_t>(static_cast<uint64_t>(hole), end);
      GRANARY_RETURN_IF_ERROR(fn(static_cast<uint64_t>(data), stop));
      ++stats.ranges_punched;
      stats.bytes_punched += stop - static_cast<uint64_t>(data);
      at = stop;
    }
    return Status::ok();
  };
  for (const auto& [offset, len] : ranges) {
    if (offset > pos) {
      GRANARY_RETURN_IF_ERROR(forEachDataRun(pos, offset, [&](uint64_t begin, uint64_t stop) {
        return engine_.punchHole(*fd, begin, stop - begin);
      }));
    }
    pos = std::max(pos, offset + len);
  }
  if (static_cast<uint64_t>(size) > pos) {
    // The tail after the last live blob is cut off rather than punched: a torn write can
    // leave a partial last block, which a punch would only zero, not free. Only its data
    // counts as reclaimed (an extent is presized: most of its tail may be a hole).
    GRANARY_RETURN_IF_ERROR(forEachDataRun(pos, static_cast<uint64_t>(size),
                                           [](uint64_t, uint64_t) { return Status::ok(); }));
    GRANARY_RETURN_IF_ERROR(engine_.resize(*fd, pos));
  }
  return Status::ok();
}

}  // namespace granary::chunkstore

#include "extent_set.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <mutex>

#include <fmt/core.h>

#include "aligned_buffer.h"
#include "granary/common/log.h"

namespace granary::chunkstore {

namespace {

constexpr std::string_view kExtentSuffix = ".ext";

// "0000002a.ext" -> 42; anything else (temp files, strays) is ignored.
bool parseExtentName(const std::string& name, uint32_t* out) {
  if (name.size() != 8 + kExtentSuffix.size() || !name.ends_with(kExtentSuffix)) return false;
  auto [p, ec] = std::from_chars(name.data(), name.data() + 8, *out, 16);
  return ec == std::errc() && p == name.data() + 8;
}

}  // namespace

ExtentSet::ExtentSet(IoEngine& engine, std::string dir, uint64_t extent_size, bool direct_io,
                     PersistNext persist_next, CrashPoint crash_point)
    : engine_(engine),
      dir_(std::move(dir)),
      extent_size_(extent_size),
      persist_next_(std::move(persist_next)),
      crash_point_(std::move(crash_point)),
      direct_io_(direct_io) {}

ExtentSet::~ExtentSet() {
  for (const auto* fds : {&fds_, &cached_fds_}) {
    for (const auto& [extent, fd] : *fds) {
      Status st = engine_.close(fd);
      if (!st) log::warn("closing extent {}: {}", path(extent), st.toString());
    }
  }
}

std::string ExtentSet::path(uint32_t extent) const {
  return fmt::format("{}/{:08x}{}", dir_, extent, kExtentSuffix);
}

bool ExtentSet::directIo() const {
  std::shared_lock lock(fds_mu_);
  return direct_io_;
}

Status ExtentSet::open(uint32_t min_next) {
  std::error_code ec;
  uint32_t next = min_next;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end;
       it.increment(ec)) {
    uint32_t n = 0;
    if (!parseExtentName(it->path().filename().string(), &n)) continue;
    found_.push_back(n);
    if (n >= next) {
      if (n == UINT32_MAX) return Status::corruption("extent numbers exhausted in " + dir_);
      next = n + 1;
    }
  }
  if (ec) return Status::ioError(fmt::format("listing {}: {}", dir_, ec.message()));
  std::lock_guard lock(alloc_mu_);
  next_extent_ = next;
  return Status::ok();
}

Status syncDirectory(IoEngine& engine, const std::string& dir) {
  auto fd = engine.open(dir, O_RDONLY | O_DIRECTORY, 0);
  if (!fd) return fd.error();
  Status st = engine.fdatasync(*fd);
  Status closed = engine.close(*fd);
  return st.isOk() ? closed : st;
}

Result<int> ExtentSet::openExtent(uint32_t extent, bool create) {
  std::unique_lock lock(fds_mu_);
  if (auto it = fds_.find(extent); it != fds_.end()) return it->second;
  int flags = O_RDWR | (create ? O_CREAT | O_EXCL : 0);
  auto fd = engine_.open(path(extent), flags | (direct_io_ ? O_DIRECT : 0), 0644);
  if (!fd && direct_io_ && fd.error().code() == Status::Code::kIoError) {
    // tmpfs and some FUSE filesystems refuse O_DIRECT (EINVAL). Buffered I/O plus
    // fdatasync keeps the durability contract; only the page-cache bypass is lost. O_EXCL
    // is dropped on the retry: the refused open may already have created the file, and the
    // extent number is ours alone (persisted before creation).
    auto buffered = engine_.open(path(extent), flags & ~O_EXCL, 0644);
    if (buffered) {
      log::warn("{} refuses O_DIRECT ({}); using buffered I/O for this drive", dir_,
                fd.error().message());
      direct_io_ = false;
    }
    fd = std::move(buffered);
  }
  if (!fd) return fd;
  fds_.emplace(extent, *fd);
  return fd;
}

Result<int> ExtentSet::fd(uint32_t extent) {
  {
    std::shared_lock lock(fds_mu_);
    if (auto it = fds_.find(extent); it != fds_.end()) return it->second;
  }
  return openExtent(extent, /*create=*/false);
}

Result<int> ExtentSet::cachedFd(uint32_t extent) {
  {
    std::shared_lock lock(fds_mu_);
    if (auto it = cached_fds_.find(extent); it != cached_fds_.end()) return it->second;
  }
  if (!directIo()) return fd(extent);
  std::unique_lock lock(fds_mu_);
  if (auto it = cached_fds_.find(extent); it != cached_fds_.end()) return it->second;
  auto fd = engine_.open(path(extent), O_RDONLY, 0);
  if (!fd) return fd;
  // Blob reads are random and exact: readahead would only fetch other blobs' bytes.
  (void)::posix_fadvise(*fd, 0, 0, POSIX_FADV_RANDOM);
  cached_fds_.emplace(extent, *fd);
  return fd;
}

std::optional<int> ExtentSet::cachedFdIfOpen(uint32_t extent) const {
  std::shared_lock lock(fds_mu_);
  const auto& fds = direct_io_ ? cached_fds_ : fds_;
  if (auto it = fds.find(extent); it != fds.end()) return it->second;
  return std::nullopt;
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
    auto fd = openExtent(extent, /*create=*/true);
    if (!fd) return fail(fd.error());
    if (crash_point_ && crash_point_("extent.after_create")) {
      return fail(Status::unavailable("crashed at extent.after_create"));
    }
    // Presized (a hole: nothing allocated), so that appends do not grow the file. On ext4
    // an O_DIRECT write past the end of the file holds the inode lock and completes before
    // the next one starts, so concurrent appends to one extent reach the disk one at a
    // time (docs/chunkstore-format.md, "Why extents are presized").
    if (Status st = engine_.resize(*fd, extent_size_); !st) return fail(st);
    if (crash_point_ && crash_point_("extent.after_resize")) {
      return fail(Status::unavailable("crashed at extent.after_resize"));
    }
    // The new extent's directory entry must be durable before an index entry points into it.
    if (Status st = syncDirectory(engine_, dir_); !st) return fail(st);
    has_active_ = true;
    active_extent_ = extent;
    active_fd_ = *fd;
    cursor_ = 0;
  }
  Allocation a{active_extent_, active_fd_, cursor_};
  cursor_ += alignUp(len, kIoAlign);
  return a;
}

void ExtentSet::retire(uint32_t extent) {
  std::lock_guard lock(alloc_mu_);
  if (has_active_ && active_extent_ == extent) has_active_ = false;
  retired_.insert(extent);
}

bool ExtentSet::retired(uint32_t extent) const {
  std::lock_guard lock(alloc_mu_);
  return retired_.contains(extent);
}

Result<ExtentSet::ReclaimStats> ExtentSet::reclaimOrphans(const LiveRanges& live) {
  ReclaimStats stats;
  for (uint32_t extent : found_) {
    auto it = live.find(extent);
    if (it == live.end() || it->second.empty()) {
      // No live blob: the whole file is orphan bytes. Close our descriptor first.
      {
        std::unique_lock lock(fds_mu_);
        for (auto* fds : {&fds_, &cached_fds_}) {
          if (auto f = fds->find(extent); f != fds->end()) {
            (void)engine_.close(f->second);
            fds->erase(f);
          }
        }
      }
      std::error_code ec;
      std::filesystem::remove(path(extent), ec);
      if (ec) return fail(Status::ioError(fmt::format("removing {}: {}", path(extent),
                                                      ec.message())));
      ++stats.extents_removed;
      continue;
    }
    auto fd = this->fd(extent);
    if (!fd) return fail(fd.error());
    const off_t size = ::lseek(*fd, 0, SEEK_END);
    if (size < 0) return fail(Status::fromErrno(errno, "lseek " + path(extent)));
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
        Status st = forEachDataRun(pos, offset, [&](uint64_t begin, uint64_t stop) {
          return engine_.punchHole(*fd, begin, stop - begin);
        });
        if (!st) return fail(st);
      }
      pos = std::max(pos, offset + len);
    }
    if (static_cast<uint64_t>(size) > pos) {
      // The tail after the last live blob is cut off rather than punched: a torn write can
      // leave a partial last block, which a punch would only zero, not free. Only its data
      // counts as reclaimed (an extent is presized: most of its tail may be a hole).
      Status st = forEachDataRun(pos, static_cast<uint64_t>(size),
                                 [](uint64_t, uint64_t) { return Status::ok(); });
      if (!st) return fail(st);
      if (Status cut = engine_.resize(*fd, pos); !cut) return fail(cut);
    }
  }
  found_.clear();
  return stats;
}

}  // namespace granary::chunkstore

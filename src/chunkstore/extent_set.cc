#include "extent_set.h"

#include <fcntl.h>

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
                     PersistNext persist_next)
    : engine_(engine),
      dir_(std::move(dir)),
      extent_size_(extent_size),
      persist_next_(std::move(persist_next)),
      direct_io_(direct_io) {}

ExtentSet::~ExtentSet() {
  for (auto& [extent, fd] : fds_) {
    Status st = engine_.close(fd);
    if (!st) log::warn("closing extent {}: {}", path(extent), st.toString());
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
    if (parseExtentName(it->path().filename().string(), &n) && n >= next) {
      if (n == UINT32_MAX) return Status::corruption("extent numbers exhausted in " + dir_);
      next = n + 1;
    }
  }
  if (ec) return Status::ioError(fmt::format("listing {}: {}", dir_, ec.message()));
  std::lock_guard lock(alloc_mu_);
  next_extent_ = next;
  return Status::ok();
}

Status ExtentSet::syncDir() {
  // The new extent's directory entry must be durable before an index entry points into it.
  auto dfd = engine_.open(dir_, O_RDONLY | O_DIRECTORY, 0);
  if (!dfd) return dfd.error();
  Status st = engine_.fdatasync(*dfd);
  Status cst = engine_.close(*dfd);
  return st.isOk() ? cst : st;
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

Result<ExtentSet::Allocation> ExtentSet::allocate(uint64_t len) {
  std::lock_guard lock(alloc_mu_);
  if (!has_active_ || (cursor_ > 0 && cursor_ + len > extent_size_)) {
    if (next_extent_ == UINT32_MAX) return fail(Status::noSpace("extent numbers exhausted"));
    uint32_t extent = next_extent_;
    if (Status st = persist_next_(extent + 1); !st) return fail(st);
    next_extent_ = extent + 1;
    auto fd = openExtent(extent, /*create=*/true);
    if (!fd) return fail(fd.error());
    if (Status st = syncDir(); !st) return fail(st);
    has_active_ = true;
    active_extent_ = extent;
    active_fd_ = *fd;
    cursor_ = 0;
  }
  Allocation a{active_extent_, active_fd_, cursor_};
  cursor_ += alignUp(len, kIoAlign);
  return a;
}

}  // namespace granary::chunkstore

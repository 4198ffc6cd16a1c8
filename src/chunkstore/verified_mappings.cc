#include "verified_mappings.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "granary/common/log.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; glibc 2.36's headers may lack it
#endif

namespace granary::chunkstore {

namespace {
// A /proc/self/pagemap entry: bit 63 is "page present" (mapped by this process).
constexpr uint64_t kPagePresent = 1ull << 63;
}  // namespace

struct VerifiedMappings::Mapping {
  Mapping(void* a, size_t l, uint32_t e, uint64_t o, uint64_t p)
      : addr(a), len(l), extent(e), offset(o), payload_len(p) {}
  ~Mapping() { ::munmap(addr, len); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  void* const addr;
  const size_t len;
  // The blob's place when admitted: another blob of the same id elsewhere is not this one.
  const uint32_t extent;
  const uint64_t offset;
  const uint64_t payload_len;
};

VerifiedMappings::VerifiedMappings(Limits limits) : limits_(limits) {
  if (limits.mappings == 0 || limits.bytes == 0) return;
  if (::sysconf(_SC_PAGESIZE) != static_cast<long>(kIoAlign)) return;  // blobs are 4 KiB aligned
  pagemap_fd_ = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap_fd_ < 0) {
    log::info("no /proc/self/pagemap ({}): every page-cache read is verified again",
              std::strerror(errno));
    return;
  }
  enabled_ = true;
}

VerifiedMappings::~VerifiedMappings() {
  map_.clear();
  lru_.clear();  // unmaps every mapping no reader holds
  if (pagemap_fd_ >= 0) ::close(pagemap_fd_);
}

bool VerifiedMappings::allMapped(const Mapping& m, uint64_t first_page, uint64_t pages) const {
  std::array<uint64_t, 512> entries;
  uint64_t page = reinterpret_cast<uintptr_t>(m.addr) / kIoAlign + first_page;
  while (pages > 0) {
    const size_t n = std::min<uint64_t>(pages, entries.size());
    const ssize_t got = ::pread(pagemap_fd_, entries.data(), n * sizeof(uint64_t),
                                static_cast<off_t>(page * sizeof(uint64_t)));
    if (got != static_cast<ssize_t>(n * sizeof(uint64_t))) return false;
    for (size_t i = 0; i < n; ++i) {
      if ((entries[i] & kPagePresent) == 0) return false;
    }
    page += n;
    pages -= n;
  }
  return true;
}

bool VerifiedMappings::verified(const BlobId& id, const IndexRecord& rec, uint64_t offset,
                                uint64_t len) {
  if (!enabled() || len == 0) return false;
  std::shared_ptr<Mapping> m;
  std::shared_ptr<Mapping> gone;
  {
    std::lock_guard lock(mu_);
    auto it = map_.find(id);
    if (it == map_.end()) return false;
    const Mapping& found = *it->second->second;
    if (found.extent != rec.extent || found.offset != rec.offset ||
        found.payload_len != rec.payload_len || offset + len > found.payload_len) {
      eraseLocked(it, gone);
      return false;
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    m = it->second->second;  // held: the address stays this mapping's while it is checked
  }
  const uint64_t first = offset / kIoAlign;
  if (allMapped(*m, first, alignUp(offset + len, kIoAlign) / kIoAlign - first)) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // A page left (reclaimed, punched): the mapping no longer proves anything.
  std::lock_guard lock(mu_);
  if (auto it = map_.find(id); it != map_.end() && it->second->second == m) eraseLocked(it, gone);
  return false;
}

void VerifiedMappings::noteVerified(const BlobId& id, const IndexRecord& rec, int fd,
                                    const std::function<bool()>& verify_payload) {
  if (!enabled()) return;
  try {
    {
      std::lock_guard lock(mu_);
      if (map_.contains(id)) return;
      if (seen_.erase(id) == 0) {  // the first verified read: remember it, no more
        if (seen_.size() >= 2 * limits_.mappings) seen_.clear();
        seen_.insert(id);
        return;
      }
    }
    std::shared_ptr<Mapping> m = admit(rec, fd, verify_payload);
    if (!m) return;
    std::vector<std::shared_ptr<Mapping>> evicted;  // unmapped after the lock
    std::lock_guard lock(mu_);
    if (map_.contains(id)) return;  // admitted meanwhile by another read
    lru_.emplace_front(id, m);
    try {
      map_.emplace(id, lru_.begin());
    } catch (...) {
      lru_.pop_front();  // every list node has its map entry
      throw;
    }
    bytes_ += m->len;
    admitted_.fetch_add(1, std::memory_order_relaxed);
    while (map_.size() > limits_.mappings || bytes_ > limits_.bytes) {
      eraseLocked(map_.find(lru_.back().first), evicted.emplace_back());
    }
  } catch (const std::bad_alloc&) {
    // Not admitted: its reads keep verifying.
  }
}

std::shared_ptr<VerifiedMappings::Mapping> VerifiedMappings::admit(
    const IndexRecord& rec, int fd, const std::function<bool()>& verify_payload) {
  const size_t len = alignUp(rec.payload_len, kIoAlign);
  if (len == 0 || len > limits_.bytes) return nullptr;
  void* addr = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd,
                      static_cast<off_t>(rec.offset + rec.header_region_len));
  if (addr == MAP_FAILED) return nullptr;
  auto m = std::make_shared<Mapping>(addr, len, rec.extent, rec.offset, rec.payload_len);
  // Populating faults the pages in: only when all are cached, so that it reads no drive.
  std::vector<unsigned char> resident(len / kIoAlign);
  if (::mincore(addr, len, resident.data()) != 0) return nullptr;
  for (unsigned char r : resident) {
    if ((r & 1) == 0) return nullptr;
  }
  if (::madvise(addr, len, MADV_POPULATE_READ) != 0) {
    if (errno == EINVAL && enabled_.exchange(false)) {
      log::info("the kernel has no MADV_POPULATE_READ: every page-cache read is verified "
                "again");
    }
    return nullptr;
  }
  // Mapped before the bytes are verified and still mapped after: never dropped between.
  if (!verify_payload() || !allMapped(*m, 0, len / kIoAlign)) return nullptr;
  return m;
}

void VerifiedMappings::forget(const BlobId& id) {
  if (!enabled()) return;
  std::shared_ptr<Mapping> gone;
  std::lock_guard lock(mu_);
  seen_.erase(id);
  if (auto it = map_.find(id); it != map_.end()) eraseLocked(it, gone);
}

void VerifiedMappings::eraseLocked(
    std::unordered_map<BlobId, Lru::iterator, BlobIdHash>::iterator it,
    std::shared_ptr<Mapping>& out) {
  out = std::move(it->second->second);
  bytes_ -= out->len;
  lru_.erase(it->second);
  map_.erase(it);
}

VerifiedMappings::Stats VerifiedMappings::stats() const {
  Stats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.admitted = admitted_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.mappings = map_.size();
  s.bytes = bytes_;
  return s;
}

}  // namespace granary::chunkstore

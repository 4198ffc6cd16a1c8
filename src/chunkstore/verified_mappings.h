// VerifiedMappings: the blobs whose payload was verified in the page cache and has stayed
// there since, so that sending it from the page cache again (sendfile) needs no new pass
// over its bytes. Verifying a cached 1 MiB GET reads every byte once more than nginx does
// (docs/benchmarks.md, "Verified pages kept mapped"); ZFS's ARC and Ceph BlueStore's
// cache, too, check a block when it comes from the drive, not on every hit.
//
// The kernel says nothing when it drops a cached page and later reads it from the drive
// again (unverified), but it unmaps a page from every process before dropping it (reclaim,
// a hole punch, the invalidation by an O_DIRECT write over it), and a page comes back into
// a mapping only through a fault in that mapping. So an admitted blob has a read-only
// mapping of its payload of its own, populated before the payload is verified through the
// file (the copy into a small buffer every cached read makes) and checked after: when every
// page is still mapped then, the bytes verified were those pages' bytes. Nothing touches
// the mapping afterwards, so a page of it still mapped (bit 63 of its /proc/self/pagemap
// entry) is still the page that was verified. One mapping per blob matters: the kernel's
// fault-around, which maps the cached neighbours of a faulting page, stays inside the
// mapping, so no page is ever mapped that was not then verified.
//
// What it does not cover, as before it: a page dropped and read again between a check and
// the send that follows (one range's send; a GET's first stripe slice is checked whole,
// then sent), and memory corrupted after its check.
//
// A blob is admitted at its second verified read (objects read once, as a stream reads
// them, cost no mapping), bounded by mappings and by bytes, least recently used out first.
// Mapped pages count in the process's RSS (RssFile): they are the page cache's, shared
// with the kernel, not memory of this process. Off (every read verifies) with zero limits,
// or where the kernel lacks MADV_POPULATE_READ (5.14) or /proc/self/pagemap.
//
// Thread safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "blob_format.h"
#include "granary/common/ids.h"

namespace granary::chunkstore {

class VerifiedMappings {
 public:
  struct Limits {
    size_t mappings = 0;  // at most this many blobs (each mapping is a kernel VMA)
    uint64_t bytes = 0;   // ... and this many mapped bytes
  };
  explicit VerifiedMappings(Limits limits);
  ~VerifiedMappings();
  VerifiedMappings(const VerifiedMappings&) = delete;
  VerifiedMappings& operator=(const VerifiedMappings&) = delete;

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Whether payload bytes [offset, offset + len) of blob `id`, stored at `rec`, lie in a
  // mapping admitted for it whose pages there are all still mapped: verified, and in the
  // page cache since. A mapping that lost a page is forgotten.
  bool verified(const BlobId& id, const IndexRecord& rec, uint64_t offset, uint64_t len);

  // After a read verified bytes of blob `id` (at `rec`) in the page cache of `fd`, its
  // extent file: at the blob's second such read, maps its payload and, when all of it is
  // cached, calls `verify_payload` (which must verify every payload byte through `fd`'s
  // page cache) and keeps the mapping if that passed and every page stayed mapped.
  // Best effort: any failure leaves the blob unadmitted.
  void noteVerified(const BlobId& id, const IndexRecord& rec, int fd,
                    const std::function<bool()>& verify_payload);

  // Unmaps `id`'s mapping, if any (its blob is removed, or suspect).
  void forget(const BlobId& id);

  struct Stats {
    uint64_t hits = 0;       // verified() calls answered true, since construction
    uint64_t admitted = 0;   // mappings kept, since construction
    uint64_t mappings = 0;   // held now
    uint64_t bytes = 0;      // mapped now
  };
  Stats stats() const;

 private:
  struct Mapping;
  using Lru = std::list<std::pair<BlobId, std::shared_ptr<Mapping>>>;

  bool allMapped(const Mapping& m, uint64_t first_page, uint64_t pages) const;
  std::shared_ptr<Mapping> admit(const IndexRecord& rec, int fd,
                                 const std::function<bool()>& verify_payload);
  // Removes `it`; the mapping is handed to `out` so that it is unmapped after the lock.
  void eraseLocked(std::unordered_map<BlobId, Lru::iterator, BlobIdHash>::iterator it,
                   std::shared_ptr<Mapping>& out);

  const Limits limits_;
  std::atomic<bool> enabled_{false};
  int pagemap_fd_ = -1;

  mutable std::mutex mu_;
  Lru lru_;  // most recently used first
  std::unordered_map<BlobId, Lru::iterator, BlobIdHash> map_;
  std::unordered_set<BlobId, BlobIdHash> seen_;  // verified once, not admitted
  uint64_t bytes_ = 0;
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> admitted_{0};
};

}  // namespace granary::chunkstore

// ChunkStore: one drive's write-once blob store.
//
// A blob is one erasure-coded fragment. On disk (docs/chunkstore-format.md) it is a
// self-describing header (format version, blob id, EC profile, owning bucket/key, block
// size, payload length, one CRC32C per block) followed by the payload, appended 4 KiB
// aligned to an extent file with O_DIRECT. A per-drive RocksDB maps blob id -> (extent,
// offset, lengths).
//
// Contract:
//  - put() returns ok only when the bytes and the index entry are durable (fdatasync of
//    the extent, then a synced RocksDB write). A second put of an existing id is
//    kAlreadyExists and leaves the first intact.
//  - read() verifies the CRC32C of every block it touches (only those) and the header;
//    any mismatch is kCorruption, never data. Absent blob: kNotFound.
//    Concurrent puts share their syncs (group commit): one fdatasync per touched extent and
//    one synced RocksDB WriteBatch for every blob written while the previous group synced.
//    put() is putAsync() and a wait: no thread waits for the disk while a put is in flight.
//  - remove() deletes the index entry (synced), then punches the blob's hole (once no
//    pinIfCached() range of it is held any more).
//  - Opening a drive reclaims orphans: extent ranges no index entry covers (a crash between
//    a blob's write and its index entry, or between an index removal and its punch).
// Thread safety: every method may be called concurrently from many threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/chunkstore/io_engine.h"
#include "granary/common/ids.h"
#include "granary/common/status.h"
#include "granary/ec/erasure_code.h"

namespace granary {
class Clock;
class RocksResources;
}  // namespace granary

namespace granary::chunkstore {

// What the writer knows about a fragment; stored in its header so that the blob index
// (and, later, the object index) can be rebuilt from the drives alone.
// BlobDescriptor::flags bits (the header's flags field, docs/chunkstore-format.md).
inline constexpr uint16_t kBlobFlagPart = 0x1;        // a multipart upload part's stripe
inline constexpr uint16_t kBlobFlagLastStripe = 0x2;  // the last stripe of its object or part
inline constexpr uint16_t kBlobFlagSystem = 0x4;      // Granary's own (an index checkpoint)

struct BlobDescriptor {
  BlobId id;
  ec::EcProfile ec;
  uint64_t stripe_data_len = 0;  // object bytes in this stripe (before padding)
  std::string bucket;            // owning object, <= 255 bytes
  std::string key;               // owning object key, <= 1024 bytes
  uint16_t flags = 0;            // kBlobFlag* bits
  bool operator==(const BlobDescriptor&) const = default;
};

struct BlobInfo {
  BlobId id;
  uint64_t length = 0;  // payload bytes
  int64_t created_unix_nanos = 0;
};

struct DriveStats {
  uint64_t blobs = 0;
  uint64_t payload_bytes = 0;     // sum of live blob payloads
  uint64_t disk_bytes = 0;        // sum of live blobs' on-disk lengths (headers, padding)
  // Extent bytes allocated ahead of use: the pre-zeroed spare extent and the unused tail of
  // a pre-zeroed extent being filled. disk_bytes + reserved_bytes is what `du` sees.
  uint64_t reserved_bytes = 0;
  uint64_t spare_zeroed_bytes = 0;  // zeros written to prepare spares since open
  // Extent descriptors open now (ChunkStoreOptions::extent_descriptors), and how many were
  // closed since open to stay within that bound: a count that keeps climbing means reads
  // reopen extents, and the bound is too low for the drive's working set.
  uint64_t open_descriptors = 0;
  uint64_t descriptors_closed = 0;
  // Extents whose orphan bytes the last open could not reclaim (an I/O error; logged, left
  // as they were, tried again at the next open): space that stays allocated.
  uint64_t unreclaimed_extents = 0;
  uint64_t commit_batches = 0;    // group commits (fdatasync + index batch) since open
  uint64_t committed_puts = 0;    // puts those batches made durable
  // From the drive's scrubber, when one runs (LocalChunkClient::startScrubbers).
  uint64_t scrub_passes = 0;
  uint64_t scrubbed_bytes = 0;
  uint64_t corrupt_blobs = 0;     // corrupt or unreadable, found by the scrubber since start
  // The block CRC cache (ChunkStoreOptions::crc_cache_bytes): lookups that found a blob's
  // CRCs there and lookups that did not (the read verifies the header region), since
  // open; memory it holds now.
  uint64_t crc_cache_hits = 0;
  uint64_t crc_cache_misses = 0;
  uint64_t crc_cache_bytes = 0;
  // The blob index's in-memory entries (ChunkStoreOptions::index_cache_bytes): lookups
  // they answered and those that went to RocksDB, since open; memory they hold now.
  uint64_t index_cache_hits = 0;
  uint64_t index_cache_misses = 0;
  uint64_t index_cache_bytes = 0;
  // ChunkStoreOptions::verified_mappings: pinIfCached() ranges that needed no verification
  // (their pages verified earlier and cached since) and blobs admitted, since open; blobs
  // and bytes mapped now.
  uint64_t verified_hits = 0;
  uint64_t verified_admitted = 0;
  uint64_t verified_blobs = 0;
  uint64_t verified_bytes = 0;
  // Blobs still stored that failed their CRC32C, or that the disk would not read (EIO), in
  // a read or the scrubber's, at most kMaxCorruptIds: what repair rebuilds without a verify
  // pass. Marked in the blob index, so kept across a restart until the blob is removed.
  std::vector<BlobId> corrupt_ids;
  uint64_t capacity_bytes = 0;    // filesystem size
  uint64_t available_bytes = 0;   // filesystem free space
  // The file system's id (statvfs f_fsid; 0 when it has none): drives that share one
  // (serve's, under one data directory) report its size and free space each.
  uint64_t filesystem_id = 0;
  // When the drive was opened (Unix ns): the counts "since open" above start from zero
  // again when it changes (0 from a server that does not say).
  uint64_t opened_unix_nanos = 0;
};

inline constexpr size_t kMaxCorruptIds = 1024;

// A read's failure that makes the blob a suspect, as a CRC failure does (corrupt_ids): the
// disk or filesystem refused the bytes (EIO, a short read). Not a retryable I/O error (out
// of descriptors or memory: the process's state, nothing of the disk's), nor any other
// code. Through a ChunkClient an I/O error may also be a failed exchange: repair trusts it
// only for a blob its drive lists.
inline bool unreadableBlob(const Status& st) {
  return st.code() == Status::Code::kIoError && !st.retryable();
}

// A blob's payload bytes, verified where they lie in the page cache and pinned there: the
// `length` bytes at `offset` of the open file `fd` are the blob's until `pin` is released
// (a remove() meanwhile defers its hole punch to then, and the pin holds `fd` open). For
// sendfile(2): the bytes go from the page cache to a socket without a
// copy through user space. Release the pin (destroy or reset it) before the store.
struct CachedRange {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::shared_ptr<void> pin;
};

class ChunkStore {
 public:
  virtual ~ChunkStore() = default;
  virtual Status put(const BlobDescriptor& desc, std::span<const uint8_t> payload) = 0;
  // put() that does not wait for the I/O: the blob is encoded and its existence checked on
  // the calling thread (a RocksDB get, which may read the disk: call this from a worker,
  // not from an event loop), its write goes to the engine's asynchronous path, and its
  // sync and index entry to the group commit. `done` runs with put()'s outcome once the
  // blob is durable (or failed), on a commit thread, or on this thread before putAsync
  // returns when the put fails early; it must not block. `payload` must stay valid and
  // unchanged until `done` runs: a payload of 64 KiB or more, 4 KiB aligned in memory and
  // of whole 4 KiB blocks, is written from where it is (O_DIRECT), not copied. Destroying
  // the store waits for the puts in flight.
  virtual void putAsync(const BlobDescriptor& desc, std::span<const uint8_t> payload,
                        IoDone done) = 0;
  // Reads payload bytes [offset, offset + out.size()). Reading past the end is
  // kInvalidArgument. After a failure `out` holds unspecified bytes. A 4 KiB-aligned `out`
  // of whole 4 KiB blocks at a 4 KiB-aligned offset is read into directly, without a copy.
  // Reads go through the page cache when ChunkStoreOptions::cached_reads is set; a block
  // that fails its CRC there is read again from the drive.
  virtual Status read(const BlobId& id, uint64_t offset, std::span<uint8_t> out) = 0;
  // read() from the drive itself, past the page cache: what the scrubber verifies.
  virtual Status readFromDrive(const BlobId& id, uint64_t offset, std::span<uint8_t> out) = 0;
  // Every block of `id` was just read from the drive (readFromDrive, in pieces) and
  // verified: it is no repair suspect (corrupt_ids) any more, as after a passing EIO.
  virtual void verifiedOnDrive(const BlobId& id) = 0;
  // read(), done now only if it needs no wait: the index entry in memory, the bytes in the
  // page cache (cached_reads), and verified. True: `out` holds them. False: nothing is
  // known (not cached, or any failure; `out` is unspecified): call read() or readAsync().
  // Safe on an event loop.
  virtual bool readIfCached(const BlobId& id, uint64_t offset, std::span<uint8_t> out) = 0;
  // readIfCached() that leaves the bytes where they are: payload bytes [offset, offset +
  // len), verified in the page cache as readIfCached() verifies them (through a small
  // buffer that stays in the CPU's cache), pinned there (CachedRange). Nothing when
  // readIfCached() would decline. Safe on an event loop.
  virtual std::optional<CachedRange> pinIfCached(const BlobId& id, uint64_t offset,
                                                 uint64_t len) = 0;
  // read() whose I/O goes to the engine's asynchronous path (io_engine.h). The index lookup
  // runs on the calling thread (a RocksDB get, which may read the disk: call this from a
  // worker, not from an event loop); `done` runs once the bytes are verified, on the
  // engine's completion thread, or on this thread before readAsync returns when the
  // engine has no asynchronous path or the read fails early. `out` must stay valid until
  // then; destroying the store waits for the reads in flight.
  virtual void readAsync(const BlobId& id, uint64_t offset, std::span<uint8_t> out,
                         IoDone done) = 0;
  virtual Result<BlobInfo> stat(const BlobId& id) = 0;
  // The descriptor stored in the blob's header (read from the disk and verified; the
  // payload is not read). kCorruption if the header fails its checks.
  virtual Result<BlobDescriptor> describe(const BlobId& id) = 0;
  virtual Status remove(const BlobId& id) = 0;
  // Waits until no asynchronous read or put of this store is in flight (their callbacks
  // have returned): a caller whose callbacks reach objects it is about to destroy (event
  // loops) calls this first.
  virtual void drain() = 0;
  // Blobs in id order, strictly after `after` when given; at most `limit`.
  virtual Result<std::vector<BlobInfo>> list(std::optional<BlobId> after, size_t limit) = 0;
  virtual Result<DriveStats> stats() = 0;
  // Whether new blobs should be placed here: false while the drive is (nearly) full, i.e.
  // after an ENOSPC until space is seen again, or with less than the reserve free.
  virtual bool writable() = 0;
};

// Test hook for crash-consistency tests: called at each named step of the write order
// (docs/chunkstore-format.md, "Crash points"). Returning true simulates the process dying
// at that instant: the operation stops without any further I/O or cleanup and fails with
// kUnavailable. Null in production.
using CrashPoint = std::function<bool(std::string_view point)>;

// Client operations on a set of drives (ChunkStoreOptions::activity): the spare zeroer of
// each runs at full speed only while the whole set is quiet, since drives that share a
// disk (or a process's drives, which often do) compete for it. Thread safe; times are a
// Clock's monotonicNanos(), the same clock for every drive of the set.
class DriveActivity {
 public:
  void begin(int64_t now) {
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    last_.store(now, std::memory_order_relaxed);
  }
  void end(int64_t now) {
    last_.store(now, std::memory_order_relaxed);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }
  // No operation in flight, and none began or ended in the last `nanos`.
  bool quietFor(int64_t now, int64_t nanos) const {
    return in_flight_.load(std::memory_order_relaxed) == 0 &&
           now - last_.load(std::memory_order_relaxed) >= nanos;
  }

 private:
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> last_{0};
};

struct ChunkStoreOptions {
  std::string dir;                      // the drive's directory (created if missing)
  uint32_t block_size = 4096;           // CRC32C granularity of new blobs
  uint64_t extent_size = 1ull << 30;    // roll over to a new extent file past this size
  bool direct_io = true;                // O_DIRECT (falls back with a warning if refused)
  // Blob reads through the page cache (writes stay O_DIRECT): hot blobs are served from
  // memory, and every read is still CRC-checked. Off: every read goes to the drive.
  bool cached_reads = true;
  // Memory for the verified block CRCs of recently read blobs, so that their next reads
  // skip the header region's I/O (src/chunkstore/crc_cache.h). 0: always read the header.
  uint64_t crc_cache_bytes = 16ull << 20;
  // Memory for the index entries of recently put or read blobs, so that a read looks its
  // blob up without RocksDB (src/chunkstore/rocks_index.h): 192 bytes a blob, about 87,000
  // blobs in 16 MiB. 0: every lookup asks RocksDB.
  uint64_t index_cache_bytes = 16ull << 20;
  // Blobs whose verified page-cache bytes are trusted while they stay cached
  // (src/chunkstore/verified_mappings.h): pinIfCached() skips verifying again a range of
  // one that never left the page cache since. Each is one read-only mapping of the blob's
  // payload (counted in the process's RSS as file pages). 0 in either: every pinIfCached()
  // verifies.
  size_t verified_mappings = 0;
  uint64_t verified_mapping_bytes = 0;
  // Keep this much free: not writable() below it (plus 8 MiB). The drive's blob index
  // (RocksDB: WAL, 32 MiB memtable flushes) writes into it, and a removal is an index
  // write: a drive filled to its last bytes by fragments could free none.
  uint64_t reserve_bytes = 256ull << 20;
  // Bytes per second a background thread may write to pre-zero the next extent, so that
  // the syncs of the writes into it commit no block allocations (docs/chunkstore-format.md,
  // "Pre-zeroed extents"); unlimited while the drive is quiet (no client read, put or
  // removal on any drive of `activity` for 250 ms). 0: no spares, every extent starts as a
  // hole.
  uint64_t spare_zero_rate = 0;
  // Extent descriptors to keep open (each extent read or written has one, or two with
  // O_DIRECT: direct and through the page cache); at this bound, opening another closes
  // those of the least recently used extents no I/O holds (src/chunkstore/extent_set.h).
  size_t extent_descriptors = 1024;
  // Shared by the drives of a disk or a process (null: this drive's own).
  std::shared_ptr<DriveActivity> activity;
  CrashPoint crash_point;
};

// Opens (creating if needed) the drive at options.dir. `engine`, `resources` and `clock`
// must outlive the store.
Result<std::unique_ptr<ChunkStore>> openChunkStore(const ChunkStoreOptions& options,
                                                   IoEngine& engine,
                                                   RocksResources& resources,
                                                   const Clock& clock);

}  // namespace granary::chunkstore

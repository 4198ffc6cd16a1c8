// The object data path: cutting a body into stripes, erasure coding them, placing the
// k + m fragments with rendezvous hashing and writing them in parallel (ObjectWriter);
// and reading byte ranges back from the data fragments only, decoding from parity when a
// fragment is missing or corrupt (readObjectRange).
//
// Stripe layout (docs/architecture.md): a stripe holds up to k * fragment_len object
// bytes; data fragment j holds stripe bytes [j * fl, (j + 1) * fl) where fl is the
// stripe's fragment length (fragment_len for full stripes, the smallest multiple of 4 KiB
// that fits for the last one), zero padded. Parity fragments k..k+m-1 follow.
//
// Memory per request is bounded, and all requests' together by the data path's buffer
// budget: a writer holds one stripe buffer from start() to its end, and a second one from
// its first stripe on if the budget had it to spare then; a reader holds at most two
// stripe slices (one being sent, one prefetched).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/counter.h>

#include "buffer_budget.h"
#include "calls_in_flight.h"
#include "http_range.h"
#include "asio.h"
#include "granary/chunkstore/chunk_client.h"
#include "granary/common/ids.h"
#include "granary/common/worker_pool.h"
#include "granary/ec/erasure_code.h"
#include "granary/index_kv/index.h"
#include "granary/placement/cluster_map.h"
#include "s3_request.h"
#include "task_group.h"

namespace granary::gateway {

struct DataPathCounters {
  prometheus::Counter& degraded_stripes;  // stripes decoded from parity on read
  prometheus::Counter& fragment_errors;   // fragment reads that failed (any reason)
  prometheus::Counter& encoded_bytes;     // data bytes erasure coded
  prometheus::Counter& decoded_bytes;     // stripe bytes rebuilt from parity
  prometheus::Counter& crc_failures;      // fragment reads that failed verification
  prometheus::Counter& hedged_stripes;    // stripes decoded because a data fragment was slow
  prometheus::Counter& sent_from_cache;   // object bytes sent from the page cache (sendfile)
  prometheus::Counter& refused_reads;     // fragment reads not made: drive stalled (beginRead)
  prometheus::Counter& moved_puts;        // fragment puts written again on another drive
};

class DataPath {
 public:
  // `buffer_budget`: bytes of stripe buffers all GET streams and uploads may hold at once
  // (GatewayOptions::buffer_memory); `admission_wait`: how long an upload waits for its
  // first buffer before it is refused (GatewayOptions::buffer_wait_seconds).
  // `pool` runs reads' blocking calls and decoding; `bulk_pool` writers' encoding and
  // fragment writes (GatewayDeps::bulk_pool; may be the same pool).
  DataPath(const placement::ClusterMap& map, chunkstore::ChunkClient& chunks,
           const ec::ErasureCode& code, WorkerPool& pool, WorkerPool& bulk_pool,
           uint32_t fragment_len,
           DataPathCounters counters, uint64_t buffer_budget,
           std::chrono::milliseconds admission_wait = BufferBudget::kDefaultAdmissionWait);
  ~DataPath() { fragment_puts_.waitNone(); }

  const placement::ClusterMap& map() const { return map_; }
  chunkstore::ChunkClient& chunks() { return chunks_; }
  // The code new objects are written with (the cluster map's profile).
  const ec::ErasureCode& code() const { return code_; }
  // The code for an object's own profile (its manifest's `ec`), which a map changed since
  // it was written no longer names: decoding with another profile's matrix would return
  // wrong bytes. Made once per profile and kept. kInvalidArgument for an impossible one.
  Result<const ec::ErasureCode*> codeFor(const ec::EcProfile& profile);
  WorkerPool& pool() { return pool_; }
  WorkerPool& bulkPool() { return bulk_pool_; }
  uint32_t fragmentLen() const { return fragment_len_; }
  uint64_t stripeCapacity() const { return uint64_t(code_.profile().k) * fragment_len_; }
  DataPathCounters& counters() { return counters_; }
  BufferBudget& budget() { return budget_; }
  // Fragment writes in flight, each from its first put to its last (a failed one may be
  // written again elsewhere, from the bulk pool): the gateway waits for none before its
  // event loops and this data path go.
  CallsInFlight& fragmentPuts() { return fragment_puts_; }

  // Fragment length used for a stripe holding `len` object bytes.
  uint32_t fragmentLenFor(uint64_t len) const;

  // Hedged reads (GatewayOptions::hedge_after_ms); 0 = off, the default here.
  void setHedgeAfter(std::chrono::milliseconds after) { hedge_after_ = after; }
  std::chrono::milliseconds hedgeAfter() const { return hedge_after_; }
  // Whether readObjectRange may send page-cache ranges with sendfile (GatewayOptions::sendfile).
  void setSendfile(bool on) { sendfile_ = on; }
  bool sendfile() const { return sendfile_; }

  // A fragment read running on the pool, counted against its server until it ends. Each
  // read holds a worker until its drive answers (stalled: up to the chunk client's 30 s),
  // so a drive counts as stalled when readsPerDrive() reads of its server are running, its
  // own oldest started kStalledRead ago or more and none of its reads ended in that time:
  // a new read of it is then not made (its stripe is decoded from parity), so that the
  // server holds about that many workers (or one per drive of it that has reads running,
  // if more), not all of them, and the reads of the others go on. A drive whose reads end
  // is never refused, however many run: its stripes are not decoded for being popular. The server: the drive's endpoint, or the drive itself for
  // drives of this process (a remote server's drives share one count, each drive's
  // progress is its own: one hung drive of a server that answers is still refused).
  static constexpr std::chrono::milliseconds kStalledRead{100};
  // The reads running, per server and drive: shared with the reads, which may end after
  // the data path is gone (a hedge's leftover read at shutdown).
  struct RunningReads {
    using Clock = std::chrono::steady_clock;
    struct Drive {
      std::multiset<Clock::time_point> starts;  // of its reads running
      Clock::time_point last_end;               // of its last read that ended
    };
    struct Server {
      size_t running = 0;  // reads of all its drives
      std::map<std::string, Drive, std::less<>> drives;
    };
    std::mutex mu;
    std::map<std::string, Server, std::less<>> servers;
  };
  class DriveRead {
   public:
    DriveRead(DriveRead&& o) noexcept
        : running_(std::move(o.running_)), server_(o.server_), drive_(o.drive_), at_(o.at_) {}
    DriveRead& operator=(DriveRead&&) = delete;
    ~DriveRead();

   private:
    friend class DataPath;
    using Server = RunningReads::Server;
    using Drive = RunningReads::Drive;
    DriveRead(std::shared_ptr<RunningReads> running, Server* server, Drive* drive,
              std::multiset<RunningReads::Clock::time_point>::iterator at)
        : running_(std::move(running)), server_(server), drive_(drive), at_(at) {}
    std::shared_ptr<RunningReads> running_;  // null once moved from
    Server* server_;                         // in running_->servers
    Drive* drive_;                           // in server_->drives
    std::multiset<RunningReads::Clock::time_point>::iterator at_;
  };
  // Counts a read of `drive` about to run; nullopt when it is stalled (read around it).
  // `must`: counted even then (the read is needed).
  std::optional<DriveRead> beginRead(std::string_view drive, bool must = false);
  // Default: half the pool's workers, at least 4.
  void setReadsPerDrive(size_t n) { reads_per_drive_ = n; }
  size_t readsPerDrive() const { return reads_per_drive_; }

 private:
  const placement::ClusterMap& map_;
  chunkstore::ChunkClient& chunks_;
  const ec::ErasureCode& code_;
  WorkerPool& pool_;
  WorkerPool& bulk_pool_;
  uint32_t fragment_len_;
  DataPathCounters counters_;
  BufferBudget budget_;
  std::chrono::milliseconds hedge_after_{0};
  bool sendfile_ = true;
  size_t reads_per_drive_;
  std::shared_ptr<RunningReads> running_ = std::make_shared<RunningReads>();
  CallsInFlight fragment_puts_;
  std::mutex other_codes_mu_;
  std::vector<std::unique_ptr<ec::ErasureCode>> other_codes_;  // codeFor's, never removed
};

// Best-effort removal of every fragment blob of `stripes` (fragments that no manifest
// will point at: a failed or refused upload's), on the bulk pool, where uploads' work
// runs, so that a burst of failed uploads does not take the threads reads need. A
// removal that fails is logged with `what` and left to the orphan sweep.
Task<void> removeFragments(DataPath& dp, asio::any_io_executor executor,
                           const std::vector<std::string>& drives,
                           const std::vector<index_kv::StripeLayout>& stripes,
                           std::string_view what);

// Writes one object version's stripes. Usage: start(), then fill buffer() (up to
// stripeCapacity()) and call flush(n); repeat; then finish(). On any failure after start()
// call abandon() to delete what was written.
// `size` is the object's (or part's) declared size: the stripe whose flush brings the bytes
// written to exactly `size` is marked the last in its fragments' headers, and `part` marks
// every fragment as a multipart part's; `granary admin rebuild-index` reads both
// (docs/operations.md, "Index loss").
class ObjectWriter {
 public:
  ObjectWriter(DataPath& dp, VersionId version, std::string bucket, std::string key,
               asio::any_io_executor executor, uint64_t size, bool part);
  ~ObjectWriter();

  // Takes the first stripe buffer from the data path's buffer budget, waiting in line
  // behind other requests; kUnavailable if the budget stays spent for the admission wait
  // (the request is then answered 503). Call it holding no other budget lease.
  Task<Status> start();
  // The buffer to fill next; valid after start() succeeded, until the next flush().
  std::span<uint8_t> buffer();
  // Starts writing the current buffer's first `len` bytes as the next stripe, and returns
  // once the next buffer is free (the stripe before this one is durable). Returns the
  // first error of any stripe so far; after one, writes nothing more. A fragment whose
  // drive fails its put (I/O error, full, no answer) is written to another drive
  // (placement::chooseAnotherDrive), up to kFragmentPutTries drives, while writable drives
  // remain in k failure domains: one failing drive does not fail the upload.
  Task<Status> flush(size_t len);
  // The object turned out `size` bytes long, not the size it was made with (a body that
  // learned its length while streaming, BodySource::finalLength): at least what was
  // written, at most the size given. Before the flush of its last stripe, which the
  // fragments' headers mark as the last.
  void shrinkTo(uint64_t size);
  // Waits for every stripe and gives the buffers back. After ok, drives() and stripes()
  // describe the object.
  Task<Status> finish();
  // Best-effort removal of every fragment written so far (waits for in-flight writes).
  Task<void> abandon();

  const std::vector<std::string>& drives() const { return drives_; }
  const std::vector<index_kv::StripeLayout>& stripes() const { return stripes_; }

 private:
  struct Slot;
  struct StripeWrites;
  static constexpr int kFragmentPutTries = 3;  // a fragment's drive, then two others
  // Puts fragment `j` of a stripe to its drive in `sw`, moving it to another on a failure
  // the drive may not have tomorrow; `done` hears the last try's outcome.
  static void putFragment(std::shared_ptr<StripeWrites> sw, int j, std::shared_ptr<Slot> keep,
                          std::span<const uint8_t> bytes, int tries, TaskGroup::Done done,
                          CallsInFlight::Token token);
  static constexpr int kPrimary = 0;  // held from start() to the end
  static constexpr int kSpare = 1;    // taken if the budget can spare it, then kept
  uint16_t driveIndex(const std::string& drive);

  DataPath& dp_;
  VersionId version_;
  std::string bucket_;
  std::string key_;
  asio::any_io_executor executor_;
  uint64_t size_;
  uint64_t slot_data_len_;    // a buffer's object bytes: the object's size, up to a stripe
  uint64_t slot_parity_len_;  // and its parity fragments
  uint64_t written_ = 0;
  uint16_t flags_;
  // Waits for the stripe written from slot `slot`, if any; returns failed_.
  Task<Status> waitFor(int slot);

  std::shared_ptr<Slot> slots_[2];  // shared with in-flight writes
  int current_ = kPrimary;          // the slot being filled
  std::unique_ptr<TaskGroup> in_flight_[2];  // the writes of the latest stripe from each slot
  std::shared_ptr<StripeWrites> writes_[2];  // and where its fragments went
  std::vector<std::string> avoid_;  // drives that failed a put of this object: not chosen again
  Status failed_;                   // the first stripe error
  std::vector<std::string> drives_;
  std::vector<index_kv::StripeLayout> stripes_;
};

// Blocking (call it on the worker pool): object bytes [first, first + length) of a
// striped manifest, read from the data fragments only, into `out` (length bytes). Any
// fragment failure, a server believed down (kUnavailable, not asked) or a stalled drive
// (DataPath::beginRead) fails the call; the caller
// then uses readObjectRange, which decodes from parity. For many small ranges read
// concurrently (record batch gets).
Status readRangeDirect(DataPath& dp, const index_kv::Manifest& manifest, uint64_t first,
                       uint64_t length, uint8_t* out);

// Streams object bytes [first, first + length) of a striped manifest into `sink`
// (whose head must already be written). `prepaid`: the caller holds a lease of the buffer
// budget for the bytes the stripe buffers pass on to (a record read, whose bytes are
// charged before they are read): the stripe buffers are not charged again (waiting for
// them behind its own lease would stall every slice), and the next slice is always read
// ahead. `holds`: whether the caller holds a lease of the budget meanwhile (a copy's
// writer does), as BufferBudget::acquire takes it: a read that holds none (a GET stream,
// a record insert's CRCs, an upload's indexing) is refused its slice (kUnavailable) when
// twice the budget stays lent. No default: a caller that holds nothing and said kLease
// would overdraw without bound.
Task<Status> readObjectRange(DataPath& dp, const index_kv::Manifest& manifest, uint64_t first,
                             uint64_t length, BodySink& sink, bool prepaid,
                             BufferBudget::Holds holds);

// How the ranges of crc32cOfRanges are read: as spans, each one read of the object;
// ranges closer than kCrcSpanGap are read as one span (their gap read and skipped).
constexpr uint64_t kCrcSpanGap = 64 * 1024;
struct CrcPlan {
  std::vector<size_t> order;                         // the ranges' indices by offset
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [first, end): one read each
  uint64_t bytes = 0;                                // object bytes read, gaps included
};
// Sorts the ranges: millions take a while, so callers run it on a pool.
CrcPlan planCrcs(std::span<const ByteRange> ranges);

// The CRC32C of each of `ranges` of `manifest` (any order; they may overlap), reading
// each byte of the spans of `plan` (planCrcs of these ranges) once, a stripe at a time
// (no more than that in memory); kInternal for a range past the end.
Task<Result<std::vector<uint32_t>>> crc32cOfRanges(DataPath& dp,
                                                   const index_kv::Manifest& manifest,
                                                   std::span<const ByteRange> ranges,
                                                   const CrcPlan& plan);

// Object bytes [first, first + length) of `manifest` (inline or striped) in memory, for
// small reads (records, small copies); kInternal if the range is past the end (callers
// check ranges first: this one would be a stale row or a bug).
// `prepaid` as readObjectRange's.
Task<Result<std::string>> readObjectBytes(DataPath& dp, const index_kv::Manifest& manifest,
                                          uint64_t first, uint64_t length,
                                          bool prepaid = false);

}  // namespace granary::gateway

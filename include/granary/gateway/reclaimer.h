// Reclaimer: gives space back.
//  - collectGarbage(): deletes the blobs of versions on the index's GC queue (overwritten
//    or deleted objects) once they have waited `gc_grace` (so GETs still streaming the
//    old version finish), then removes the queue entries.
//  - sweepOrphans(): deletes blobs that no manifest references and that are older than
//    `orphan_grace` (written by a PUT that crashed or failed before its commit; the grace
//    period protects PUTs still in progress).
// start() runs both periodically on a background thread; stop() joins it.
// Metrics (granary_gc_*) count what every pass did, whoever started it.
// Thread safety: one pass at a time (internally serialised).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "granary/common/periodic_thread.h"
#include "granary/common/status.h"

namespace prometheus {
class Registry;
}
namespace granary {
class Clock;
}
namespace granary::chunkstore {
class ChunkClient;
}
namespace granary::index_kv {
class Index;
struct RecordGcStats;
}
namespace granary::placement {
struct ClusterMap;
}

namespace granary::gateway {

struct ReclaimerOptions {
  std::chrono::seconds gc_grace{1800};
  std::chrono::seconds orphan_grace{3600};
  std::chrono::seconds gc_interval{10};
  std::chrono::seconds sweep_interval{600};
  // Background passes run only while this answers true (BackgroundLeader::leading);
  // unset: always. Explicit calls do not ask.
  std::function<bool()> leading = {};
};

struct ReclaimStats {
  uint64_t blobs_removed = 0;
  uint64_t entries_done = 0;   // GC entries completed / blobs examined by a sweep
  uint64_t entries_kept = 0;   // GC: due entries left on the queue (a drive down, an error)
  uint64_t remove_errors = 0;  // removals that failed (not-found is not a failure)
};

class Reclaimer {
 public:
  // Registers granary_gc_* metrics in `registry`. Everything passed must outlive it.
  Reclaimer(index_kv::Index& index, chunkstore::ChunkClient& chunks,
            const placement::ClusterMap& map, const Clock& clock,
            prometheus::Registry& registry, ReclaimerOptions options);
  ~Reclaimer();

  // `go_on`, when given, is asked before each queue entry: once it answers false the pass
  // ends, having finished what it finished (the background pass gives it `leading`: a
  // gateway that lost the lease mid-pass, a paused process, must not remove blobs beside
  // the new leader's pass, which could find a fragment moved back onto the drive since).
  Result<ReclaimStats> collectGarbage(const std::function<bool()>& go_on = {});
  Result<ReclaimStats> sweepOrphans();
  // Removes the record-index rows of dead record sets (overwritten or deleted containers),
  // a bounded number per call; with `sweep`, first marks dead the sets of indexing runs
  // that never committed and are older than orphan_grace.
  Result<index_kv::RecordGcStats> collectRecords(bool sweep);

  void start();
  void stop();

 private:
  struct Metrics;

  void pass();

  index_kv::Index& index_;
  chunkstore::ChunkClient& chunks_;
  const placement::ClusterMap& map_;
  const Clock& clock_;
  ReclaimerOptions options_;
  std::unique_ptr<Metrics> metrics_;
  std::mutex pass_mu_;
  std::chrono::steady_clock::time_point next_sweep_;  // periodic thread only
  PeriodicThread thread_;
};

}  // namespace granary::gateway

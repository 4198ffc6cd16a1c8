// Repairer: brings every stripe back to k + m healthy fragments in distinct failure
// domains (docs/operations.md, "Repair").
//
// One pass walks every object of every bucket, and every part of its multipart uploads
// in progress (committed with Index::relocatePartFragments). For each stripe of its manifest it asks
// each fragment's drive about the fragment (ChunkClient::stat, or a whole CRC-verified
// read with `verify` or when the drive lists the fragment among the blobs that failed
// their CRC on a read or a scrub: DriveStats::corrupt_ids), and then:
//  - a fragment that is missing (a wiped or replaced drive, a drive no longer in the map)
//    or corrupt is decoded from k healthy ones and written to a usable drive in a failure
//    domain the stripe does not use yet (or, with too few domains, to any usable drive:
//    the degraded rule of placement); a corrupt copy is removed first, so its own drive
//    may take the rebuilt one;
//  - a fragment that shares a failure domain with another of its stripe (a degraded
//    write's) is copied to a domain the stripe does not use, once one is usable;
//  - a fragment on a server that does not answer is left alone: the server may come back
//    (take it out of the map to have its fragments rebuilt elsewhere).
//  - a healthy fragment on a draining drive is copied off it: to the drive placement now
//    chooses for its slot if that one is free, else as a rebuilt one would go, never
//    leaving the stripe on fewer than k domains.
// A rebalancing pass (`granary admin rebalance`) also copies healthy fragments that are
// not on the drives placement now chooses for their stripe onto those drives.
// The new locations are committed with Index::relocateFragments, a compare-and-swap on
// the manifest the pass read, so a concurrent overwrite, delete or other repairer wins
// and this pass's copies become orphans for the sweep; the old locations go on the GC
// queue. A stripe needing a rebuild with fewer than k healthy fragments readable now
// (lost, or on servers that do not answer) is counted unrecoverable, and left as it is.
//
// Thread safety: runPass may be called from any thread; one pass runs at a time.
#pragma once

#include <atomic>
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
}
namespace granary::placement {
struct ClusterMap;
}

namespace granary::gateway {

struct RepairOptions {
  std::chrono::seconds interval{0};  // between background passes; 0: no background passes
  bool verify = false;               // read every fragment whole instead of stat'ing it
  // Background passes run only while this answers true (BackgroundLeader::leading);
  // unset: always. Explicit calls do not ask.
  std::function<bool()> leading = {};
};

struct RepairStats {
  uint64_t objects = 0;                // striped objects examined
  uint64_t parts = 0;                  // parts of multipart uploads in progress examined
  uint64_t stripes = 0;
  uint64_t fragments_missing = 0;      // found missing (or on a drive gone from the map)
  uint64_t fragments_corrupt = 0;      // found failing their CRC (verify passes)
  uint64_t fragments_unreachable = 0;  // on servers that did not answer: left alone
  uint64_t fragments_stacked = 0;      // found sharing a failure domain within a stripe
  uint64_t fragments_rebuilt = 0;      // decoded and written to another drive
  uint64_t fragments_moved = 0;        // copied to a failure domain of their own
  uint64_t fragments_misplaced = 0;    // rebalance: healthy, off the current placement
  uint64_t fragments_rebalanced = 0;   // rebalance: copied to the current placement
  uint64_t fragments_draining = 0;     // named on a draining drive, whatever their state
  uint64_t fragments_drained = 0;      // copied off a draining drive
  uint64_t unrecoverable_stripes = 0;  // fewer than k healthy fragments
  uint64_t conflicts = 0;              // objects changed under the pass (retried next pass)
  uint64_t errors = 0;                 // reads, writes or commits that failed
  RepairStats& operator+=(const RepairStats& o);
};

class Repairer {
 public:
  // Registers granary_repair_* metrics in `registry`. Everything passed must outlive it.
  Repairer(index_kv::Index& index, chunkstore::ChunkClient& chunks,
           const placement::ClusterMap& map, const Clock& clock,
           prometheus::Registry& registry, RepairOptions options);
  ~Repairer();

  // One pass over every object. dry_run: find and count, change nothing. rebalance: also
  // move healthy fragments that are not on the drives the current map would choose for
  // their stripe (after a drive was added or a weight changed) onto those drives. An
  // error that stops the pass (the index cannot be listed) is returned; per-object
  // failures are counted in `errors`. kUnavailable at once if a pass is running already.
  Result<RepairStats> runPass(bool dry_run, bool rebalance = false);

  // Background passes every options.interval (if > 0), the first at a random point between
  // half an interval and one interval from now.
  void start();
  void stop();   // ends the pass in progress early

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PeriodicThread thread_;
};

}  // namespace granary::gateway

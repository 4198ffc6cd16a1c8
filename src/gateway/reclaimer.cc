#include "granary/gateway/reclaimer.h"

#include <map>
#include <set>

#include "granary/chunkstore/chunk_client.h"
#include "granary/common/clock.h"
#include "granary/common/log.h"
#include "granary/index_kv/index.h"
#include "granary/index_kv/manifest_blobs.h"
#include "granary/placement/cluster_map.h"

namespace granary::gateway {

namespace {
constexpr size_t kGcBatch = 256;
constexpr size_t kSweepPage = 1024;
}  // namespace

Reclaimer::Reclaimer(index_kv::Index& index, chunkstore::ChunkClient& chunks,
                     const placement::ClusterMap& map, const Clock& clock,
                     ReclaimerOptions options)
    : index_(index), chunks_(chunks), map_(map), clock_(clock), options_(options) {}

Reclaimer::~Reclaimer() { stop(); }

Result<ReclaimStats> Reclaimer::collectGarbage() {
  std::lock_guard pass(pass_mu_);
  ReclaimStats stats;
  const int64_t cutoff =
      clock_.nowUnixNanos() -
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.gc_grace).count();
  // Entries that cannot finish yet (a drive down) stay on the queue; each page starts
  // after the last one seen, so they do not hide the entries behind them. A drive found
  // down is not asked again in this pass (each ask could wait for a timeout).
  std::string after;
  std::set<std::string, std::less<>> down;
  for (;;) {
    if (thread_.stopping()) break;  // shutting down: the next start goes on from the front
    auto due = index_.gcDue(cutoff, kGcBatch, after);
    if (!due) return fail(due.error());
    const bool last_page = due->size() < kGcBatch;
    // An index service older than the page cursor answers from the front again: what it
    // finished is gone from there, what is left at or before the cursor was seen.
    std::erase_if(*due, [&](const index_kv::GcEntry& e) {
      return !after.empty() && e.queue_key <= after;
    });
    if (due->empty()) break;
    after = due->back().queue_key;
    std::vector<index_kv::GcEntry> done;
    for (auto& entry : *due) {
      // An entry of blobs still in use (fragments a repair moved away, of an object, of a
      // part, or of the object completed from it) may list a location a live row uses
      // again (a later repair put the fragment back): never remove those.
      std::set<std::pair<std::string, BlobId>> in_use;
      auto live = index_.blobsInUse(entry.version, entry.blobs);
      if (!live) {
        // A row the index cannot read keeps this entry (removing nothing) and lets the
        // others go on; any other failure (an index that does not answer, or an older
        // one without the call) ends the pass.
        if (live.error().code() != Status::Code::kCorruption) return fail(live.error());
        log::warn("gc: entry of version {} kept: {}", entry.version.toHex(),
                  live.error().toString());
        continue;
      }
      for (auto& blob : *live) in_use.emplace(std::move(blob.drive), blob.id);
      bool complete = true;
      for (const auto& blob : entry.blobs) {
        if (in_use.contains({blob.drive, blob.id})) continue;
        // A drive taken out of the cluster map (decommissioned): nothing can remove its
        // blobs any more, and keeping the entry would have every pass read it for ever.
        // Should the drive come back, what it holds is unreferenced: the sweep's.
        if (map_.findDrive(blob.drive) == nullptr) continue;
        if (down.contains(blob.drive) || !chunks_.reachable(blob.drive)) {
          complete = false;  // kept: removed on a later pass
          continue;
        }
        Status st = chunks_.remove(blob.drive, blob.id);
        if (st.isOk()) {
          ++stats.blobs_removed;
        } else if (!st.isNotFound()) {
          // Keep the entry: a drive that is down now gets its blobs removed later.
          complete = false;
          if (st.code() == Status::Code::kUnavailable) down.insert(blob.drive);
          log::warn("gc: cannot remove {} on {}: {}", blob.id.toString(), blob.drive,
                    st.toString());
        }
      }
      if (complete) done.push_back(std::move(entry));
    }
    if (!done.empty()) {
      Status st = index_.gcDone(done);
      if (!st.isOk()) return fail(st);
      stats.entries_done += done.size();
    }
    if (last_page) break;
  }
  return stats;
}

Result<ReclaimStats> Reclaimer::sweepOrphans() {
  std::lock_guard pass(pass_mu_);
  ReclaimStats stats;
  const int64_t cutoff =
      clock_.nowUnixNanos() -
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.orphan_grace).count();
  for (const auto& drive : map_.drives) {
    std::optional<BlobId> after;
    std::map<VersionId, bool> referenced;  // per drive page: versions repeat across stripes
    for (;;) {
      if (thread_.stopping()) return stats;
      auto page = chunks_.list(drive.id, after, kSweepPage);
      if (!page) {
        log::warn("sweep: cannot list {}: {}", drive.id, page.error().toString());
        break;
      }
      for (const auto& blob : *page) {
        ++stats.entries_done;
        if (blob.created_unix_nanos > cutoff) continue;  // may belong to a PUT in progress
        // The same by the writing gateway's clock (the version's time), which its PUT
        // deadline counts by: a chunk server's clock behind the gateways' must not make a
        // write in progress look old.
        if (blob.id.version.createdUnixNanos() > cutoff) continue;
        if (blob.id.version.isSystem()) continue;  // an index checkpoint, not an object's
        auto it = referenced.find(blob.id.version);
        if (it == referenced.end()) {
          auto ref = index_.isBlobVersionReferenced(blob.id.version);
          if (!ref) return fail(ref.error());
          bool keep = *ref;
          if (!keep) {
            // The fence: a commit of this version that is still on its way (a PUT past
            // its deadline, a request late in a remote index's queue) either lands
            // first, and the version is kept, or is refused for good once it is dead.
            auto dead = index_.markVersionDead(blob.id.version);
            if (!dead) return fail(dead.error());
            keep = !*dead;
          }
          it = referenced.emplace(blob.id.version, keep).first;
        }
        if (it->second) continue;
        Status st = chunks_.remove(drive.id, blob.id);
        if (st.isOk()) {
          ++stats.blobs_removed;
          log::info("sweep: removed orphan blob {} on {}", blob.id.toString(), drive.id);
        }
      }
      if (page->size() < kSweepPage) break;
      after = page->back().id;
      referenced.clear();
    }
  }
  return stats;
}

void Reclaimer::start() {
  next_sweep_ = std::chrono::steady_clock::now() + options_.sweep_interval;
  thread_.start(options_.gc_interval, [this] { pass(); });
}

void Reclaimer::stop() { thread_.stop(); }

Result<index_kv::RecordGcStats> Reclaimer::collectRecords(bool sweep) {
  std::lock_guard pass(pass_mu_);
  const int64_t orphan_before =
      sweep ? clock_.nowUnixNanos() -
                  std::chrono::duration_cast<std::chrono::nanoseconds>(options_.orphan_grace).count()
            : 0;
  return index_.collectRecordGarbage(200000, orphan_before);
}

void Reclaimer::pass() {
  if (auto r = collectGarbage(); !r) log::warn("gc pass failed: {}", r.error().toString());
  const bool sweep = std::chrono::steady_clock::now() >= next_sweep_;
  if (auto r = collectRecords(sweep); !r) {
    log::warn("record gc pass failed: {}", r.error().toString());
  }
  if (sweep) {
    if (auto r = sweepOrphans(); !r) log::warn("sweep failed: {}", r.error().toString());
    next_sweep_ = std::chrono::steady_clock::now() + options_.sweep_interval;
  }
}

}  // namespace granary::gateway

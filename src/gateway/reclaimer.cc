#include "granary/gateway/reclaimer.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

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

struct Reclaimer::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : removed(prometheus::BuildCounter()
                    .Name("granary_gc_blobs_removed_total")
                    .Help("Blobs removed by the GC (replaced or deleted versions) and by the "
                          "orphan sweep")
                    .Register(r)),
        errors(prometheus::BuildCounter()
                   .Name("granary_gc_remove_errors_total")
                   .Help("Blob removals that failed (a drive down, an I/O error); the GC "
                         "keeps the entry and tries again next pass")
                   .Register(r)),
        failures(prometheus::BuildCounter()
                     .Name("granary_gc_pass_failures_total")
                     .Help("Background GC, record GC and sweep passes that stopped on an "
                           "error (logged)")
                     .Register(r)),
        gc_removed(removed.Add({{"pass", "gc"}})),
        sweep_removed(removed.Add({{"pass", "sweep"}})),
        gc_errors(errors.Add({{"pass", "gc"}})),
        sweep_errors(errors.Add({{"pass", "sweep"}})),
        gc_failed(failures.Add({{"pass", "gc"}})),
        records_failed(failures.Add({{"pass", "records"}})),
        sweep_failed(failures.Add({{"pass", "sweep"}})),
        entries_done(prometheus::BuildCounter()
                         .Name("granary_gc_entries_done_total")
                         .Help("GC queue entries whose blobs are all gone, removed from the "
                               "queue")
                         .Register(r)
                         .Add({})),
        entries_kept(prometheus::BuildGauge()
                         .Name("granary_gc_entries_kept")
                         .Help("Due GC queue entries the last complete GC pass left on the "
                               "queue (a drive down, a removal or a row that failed)")
                         .Register(r)
                         .Add({})),
        last_pass(prometheus::BuildGauge()
                      .Name("granary_gc_last_pass_timestamp_seconds")
                      .Help("When the last background GC pass ended (Unix time)")
                      .Register(r)
                      .Add({})),
        last_success(prometheus::BuildGauge()
                         .Name("granary_gc_last_success_timestamp_seconds")
                         .Help("When the last background GC pass in which no step failed "
                               "ended (Unix time)")
                         .Register(r)
                         .Add({})) {}

  prometheus::Family<prometheus::Counter>& removed;
  prometheus::Family<prometheus::Counter>& errors;
  prometheus::Family<prometheus::Counter>& failures;
  prometheus::Counter& gc_removed;
  prometheus::Counter& sweep_removed;
  prometheus::Counter& gc_errors;
  prometheus::Counter& sweep_errors;
  prometheus::Counter& gc_failed;
  prometheus::Counter& records_failed;
  prometheus::Counter& sweep_failed;
  prometheus::Counter& entries_done;
  prometheus::Gauge& entries_kept;
  prometheus::Gauge& last_pass;
  prometheus::Gauge& last_success;
};

Reclaimer::Reclaimer(index_kv::Index& index, chunkstore::ChunkClient& chunks,
                     const placement::ClusterMap& map, const Clock& clock,
                     prometheus::Registry& registry, ReclaimerOptions options)
    : index_(index),
      chunks_(chunks),
      map_(map),
      clock_(clock),
      options_(options),
      metrics_(std::make_unique<Metrics>(registry)) {}

Reclaimer::~Reclaimer() { stop(); }

Result<ReclaimStats> Reclaimer::collectGarbage(const std::function<bool()>& go_on) {
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
  bool cut_short = false;  // go_on() answered false
  for (;;) {
    if (thread_.stopping() || cut_short) break;  // the next pass goes on from the front
    // Until a page is empty: one may end short of kGcBatch (IndexOptions::gc_page_blobs).
    auto due = index_.gcDue(cutoff, kGcBatch, after);
    if (!due) return fail(due.error());
    // An index service older than the page cursor answers from the front again: what it
    // finished is gone from there, what is left at or before the cursor was seen.
    std::erase_if(*due, [&](const index_kv::GcEntry& e) {
      return !after.empty() && e.queue_key <= after;
    });
    if (due->empty()) break;
    after = due->back().queue_key;
    std::vector<index_kv::GcEntry> done;
    for (auto& entry : *due) {
      if (go_on && !go_on()) {
        cut_short = true;
        break;
      }
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
        ++stats.entries_kept;
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
          metrics_->gc_removed.Increment();
        } else if (!st.isNotFound()) {
          // Keep the entry: a drive that is down now gets its blobs removed later.
          complete = false;
          ++stats.remove_errors;
          metrics_->gc_errors.Increment();
          if (st.code() == Status::Code::kUnavailable) down.insert(blob.drive);
          log::warn("gc: cannot remove {} on {}: {}", blob.id.toString(), blob.drive,
                    st.toString());
        }
      }
      if (complete) {
        done.push_back(std::move(entry));
      } else {
        ++stats.entries_kept;
      }
    }
    if (!done.empty()) {
      Status st = index_.gcDone(done);
      if (!st.isOk()) return fail(st);
      stats.entries_done += done.size();
      metrics_->entries_done.Increment(static_cast<double>(done.size()));
    }
  }
  // A whole pass (not one cut short by stop() or a lost lease): what it kept is what stays
  // queued.
  if (!thread_.stopping() && !cut_short) {
    metrics_->entries_kept.Set(static_cast<double>(stats.entries_kept));
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
          metrics_->sweep_removed.Increment();
          log::info("sweep: removed orphan blob {} on {}", blob.id.toString(), drive.id);
        } else if (!st.isNotFound()) {  // the next sweep finds it again
          ++stats.remove_errors;
          metrics_->sweep_errors.Increment();
          log::warn("sweep: cannot remove {} on {}: {}", blob.id.toString(), drive.id,
                    st.toString());
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
  if (options_.leading && !options_.leading()) {
    metrics_->entries_kept.Set(0);  // the leader's figure counts, not a past one of ours
    return;
  }
  bool ok = true;  // no step failed (a removal that failed is counted, not a failure)
  if (auto r = collectGarbage(options_.leading); !r) {
    ok = false;
    metrics_->gc_failed.Increment();
    log::warn("gc pass failed: {}", r.error().toString());
  }
  const bool sweep = std::chrono::steady_clock::now() >= next_sweep_;
  if (auto r = collectRecords(sweep); !r) {
    ok = false;
    metrics_->records_failed.Increment();
    log::warn("record gc pass failed: {}", r.error().toString());
  }
  if (sweep) {
    if (auto r = sweepOrphans(); !r) {
      ok = false;
      metrics_->sweep_failed.Increment();
      log::warn("sweep failed: {}", r.error().toString());
    }
    next_sweep_ = std::chrono::steady_clock::now() + options_.sweep_interval;
  }
  const double now = static_cast<double>(clock_.nowUnixNanos()) / 1e9;
  metrics_->last_pass.Set(now);
  if (ok) metrics_->last_success.Set(now);
}

}  // namespace granary::gateway

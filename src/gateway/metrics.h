// Gateway metrics (prometheus-cpp). Registered on the registry passed in; no globals.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "granary/chunkstore/chunk_store.h"

#include "object_io.h"

namespace granary::gateway {

class GatewayMetrics {
 public:
  explicit GatewayMetrics(prometheus::Registry& registry);
  void observe(std::string_view op, int status, double seconds);
  void requestStarted() { in_flight_.Increment(); }
  void requestFinished() { in_flight_.Decrement(); }
  void connectionOpened() { connections_.Increment(); }
  void connectionClosed() { connections_.Decrement(); }
  // Over --max-connections-per-address (`per_address`), else over --max-connections.
  void connectionRefused(bool per_address) {
    (per_address ? refused_per_address_ : refused_total_).Increment();
  }
  void bytesIn(uint64_t n) { bytes_in_.Increment(static_cast<double>(n)); }
  void bytesOut(uint64_t n) { bytes_out_.Increment(static_cast<double>(n)); }
  // How late an event loop ran a timer (server.cc, the lag probe): what every connection
  // on that loop waits, beyond its own work, when the loop is busy or short of CPU.
  void loopLag(double seconds) { loop_lag_.Observe(seconds); }
  prometheus::Registry& registry() { return registry_; }
  DataPathCounters dataPathCounters();
  // Begins a scrape's refresh of the series below: the number its reads are set with.
  // Figures read by an earlier scrape than those shown (two scrapes at once, the other's
  // reads made later) are not shown.
  uint64_t beginScrape() { return scrapes_.fetch_add(1) + 1; }
  // Per-drive series, refreshed from ChunkClient::stats before each scrape. A drive whose
  // statistics could not be read has granary_drive_up 0 and no other series: a value
  // kept from an earlier scrape (a dead drive's free space) would be a lie. Its counts
  // since it opened are counters (Counts).
  void setDrive(const std::string& drive, const Result<chunkstore::DriveStats>& stats,
                uint64_t scrape);
  // The index's series (record index, storage, commits), refreshed before each scrape;
  // granary_index_up 0 when one could not be read (an index service down), whose series
  // are then left out (the commit counters keep their last value). The commit counts are
  // counters (Counts).
  void setIndex(const Result<index_kv::RecordIndexStats>& records,
                const Result<index_kv::IndexStorageStats>& storage,
                const Result<index_kv::IndexCommitStats>& commits, uint64_t scrape);
  // The file systems holding the drives whose statistics this scrape read, each counted
  // once (granary_storage_capacity_bytes, granary_storage_available_bytes).
  void setStorage(uint64_t capacity, uint64_t available, uint64_t scrape);
  // The buffer budget of GET streams and uploads (BufferBudget), refreshed before each
  // scrape; its counts are counters (Counts).
  void setBufferBudget(const BufferBudget::Stats& stats, uint64_t scrape);
  // Outcomes of indexed uploads.
  void containerIndexed(const index_kv::RecordIndexInfo& info);

 private:
  prometheus::Registry& registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Gauge& in_flight_;
  prometheus::Gauge& connections_;
  prometheus::Family<prometheus::Counter>& connections_refused_;
  prometheus::Counter& refused_total_;
  prometheus::Counter& refused_per_address_;
  prometheus::Counter& bytes_in_;
  prometheus::Counter& bytes_out_;
  prometheus::Counter& degraded_stripes_;
  prometheus::Counter& hedged_stripes_;
  prometheus::Counter& sent_from_cache_;
  prometheus::Counter& fragment_errors_;
  prometheus::Counter& refused_reads_;
  prometheus::Counter& moved_puts_;
  prometheus::Counter& encoded_bytes_;
  prometheus::Counter& decoded_bytes_;
  prometheus::Counter& crc_failures_;
  prometheus::Histogram& loop_lag_;
  // One family per DriveStats field: a gauge for a level now (blobs, free bytes), a
  // counter for a count since the drive opened (its name ends in _total).
  enum FigureKind { kLevel, kCount };
  struct DriveFigure {
    const char* name;
    const char* help;
    uint64_t chunkstore::DriveStats::*field;
    FigureKind kind;
    prometheus::Family<prometheus::Gauge>* gauges = nullptr;
    prometheus::Family<prometheus::Counter>* counters = nullptr;
  };
  std::vector<DriveFigure> drives_;
  prometheus::Family<prometheus::Gauge>& drive_up_;
  prometheus::Gauge& index_up_;
  prometheus::Gauge& storage_capacity_;
  prometheus::Gauge& storage_available_;
  uint64_t storage_scrape_ = 0;  // the scrape whose figures they show; guarded by scraped_mu_
  // The counts a source (a drive, the index, the buffer budget) keeps since it opened, as
  // shown: a counter never goes back, so a source that opened again (its counts from 0:
  // a restarted chunk server) is shown as the counts of its earlier openings (`base`)
  // plus its new ones; a count lower than the one shown, of the same opening, read out of
  // order, leaves it as it is. Openings are told apart by when they were (as the source
  // says), not ordered by it: a clock set back across a restart is a new opening too.
  // Figures of an opening already replaced are not shown (read from the old process by a
  // scrape that began after the one that saw the new). A source that does not say when
  // it opened (0: older servers) is one opening: after its restart its counters stay
  // where they were until its new counts pass them.
  struct Counts {
    static constexpr size_t kReplacedKept = 8;
    uint64_t shown_scrape = 0;       // the scrape whose figures are shown
    std::optional<uint64_t> opened;  // the opening they are of
    std::vector<uint64_t> replaced;  // openings before it, the latest kReplacedKept
    std::vector<double> base, shown;  // per count
    // False if figures read by `scrape` are older than those shown; else they will be.
    bool newer(uint64_t scrape);
    // Figures of opening `opening`, `n` counts, follow; false (nothing to show) if that
    // opening was replaced.
    bool of(uint64_t opening, size_t n);
    // The value to show for count `i`, read as `count`.
    double show(size_t i, uint64_t count);
  };
  std::atomic<uint64_t> scrapes_{0};
  // Series are removed and added again: two scrapes at once must not set one the other
  // is removing. Guards the Counts and the series set from scraped figures.
  std::mutex scraped_mu_;
  std::map<std::string, Counts> drive_counts_;
  Counts index_counts_;
  Counts buffer_counts_;
  prometheus::Family<prometheus::Gauge>& record_index_;
  prometheus::Family<prometheus::Counter>& containers_indexed_;
  prometheus::Counter& records_indexed_;
  prometheus::Family<prometheus::Gauge>& index_storage_;
  prometheus::Family<prometheus::Counter>& index_group_commits_;
  prometheus::Family<prometheus::Counter>& index_committed_requests_;
  prometheus::Family<prometheus::Counter>& index_failed_writes_;
  prometheus::Gauge& index_commits_failing_;
  prometheus::Family<prometheus::Gauge>& buffer_budget_;
  prometheus::Gauge& buffer_waiting_;
  prometheus::Family<prometheus::Counter>& buffer_waits_;
  prometheus::Family<prometheus::Counter>& buffer_overdrafts_;
  prometheus::Family<prometheus::Counter>& buffer_refusals_;
};

}  // namespace granary::gateway

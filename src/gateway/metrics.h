// Gateway metrics (prometheus-cpp). Registered on the registry passed in; no globals.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <mutex>
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
  void connectionRefused() { connections_refused_.Increment(); }
  void bytesIn(uint64_t n) { bytes_in_.Increment(static_cast<double>(n)); }
  void bytesOut(uint64_t n) { bytes_out_.Increment(static_cast<double>(n)); }
  // How late an event loop ran a timer (server.cc, the lag probe): what every connection
  // on that loop waits, beyond its own work, when the loop is busy or short of CPU.
  void loopLag(double seconds) { loop_lag_.Observe(seconds); }
  prometheus::Registry& registry() { return registry_; }
  DataPathCounters dataPathCounters();
  // Per-drive gauges, refreshed from ChunkClient::stats before each scrape.
  void setDrive(const std::string& drive, const chunkstore::DriveStats& stats);
  // Record index: size gauges refreshed before each scrape; outcomes of indexed uploads.
  void setRecordIndex(const index_kv::RecordIndexStats& stats);
  void setIndexStorage(const index_kv::IndexStorageStats& stats);
  void setIndexCommits(const index_kv::IndexCommitStats& stats);
  // The buffer budget of GET streams and uploads (BufferBudget), refreshed before each
  // scrape.
  void setBufferBudget(const BufferBudget::Stats& stats);
  void containerIndexed(const index_kv::RecordIndexInfo& info);

 private:
  prometheus::Registry& registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Gauge& in_flight_;
  prometheus::Gauge& connections_;
  prometheus::Counter& connections_refused_;
  prometheus::Counter& bytes_in_;
  prometheus::Counter& bytes_out_;
  prometheus::Counter& degraded_stripes_;
  prometheus::Counter& hedged_stripes_;
  prometheus::Counter& sent_from_cache_;
  prometheus::Counter& fragment_errors_;
  prometheus::Counter& encoded_bytes_;
  prometheus::Counter& decoded_bytes_;
  prometheus::Counter& crc_failures_;
  prometheus::Histogram& loop_lag_;
  // One gauge family per DriveStats field.
  struct DriveGauge {
    const char* name;
    const char* help;
    uint64_t chunkstore::DriveStats::*field;
    prometheus::Family<prometheus::Gauge>* family = nullptr;
  };
  std::vector<DriveGauge> drives_;
  prometheus::Family<prometheus::Gauge>& record_index_;
  prometheus::Family<prometheus::Counter>& containers_indexed_;
  prometheus::Counter& records_indexed_;
  prometheus::Family<prometheus::Gauge>& index_storage_;
  prometheus::Gauge& index_group_commits_;
  prometheus::Gauge& index_committed_requests_;
  prometheus::Family<prometheus::Gauge>& buffer_budget_;
  prometheus::Gauge& buffer_waiting_;
  prometheus::Counter& buffer_waits_;
  prometheus::Counter& buffer_overdrafts_;
  prometheus::Counter& buffer_refusals_;
  std::mutex buffer_counters_mu_;  // concurrent scrapes
  uint64_t buffer_waits_seen_ = 0;
  uint64_t buffer_overdrafts_seen_ = 0;
  uint64_t buffer_refusals_seen_ = 0;
};

}  // namespace granary::gateway

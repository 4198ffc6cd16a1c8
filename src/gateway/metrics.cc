#include "metrics.h"

#include <algorithm>

namespace granary::gateway {

GatewayMetrics::GatewayMetrics(prometheus::Registry& registry)
    : registry_(registry),
      requests_(prometheus::BuildCounter()
                    .Name("granary_s3_requests_total")
                    .Help("S3 requests by operation and HTTP status")
                    .Register(registry)),
      latency_(prometheus::BuildHistogram()
                   .Name("granary_s3_request_duration_seconds")
                   .Help("S3 request latency by operation")
                   .Register(registry)),
      in_flight_(prometheus::BuildGauge()
                     .Name("granary_s3_requests_in_flight")
                     .Help("S3 requests being served now")
                     .Register(registry)
                     .Add({})),
      connections_(prometheus::BuildGauge()
                       .Name("granary_s3_connections")
                       .Help("Client connections open now")
                       .Register(registry)
                       .Add({})),
      connections_refused_(prometheus::BuildCounter()
                               .Name("granary_s3_connections_refused_total")
                               .Help("Connections answered 503 SlowDown and closed, by the "
                                     "cap reached: total (--max-connections) or address "
                                     "(--max-connections-per-address)")
                               .Register(registry)),
      refused_total_(connections_refused_.Add({{"cap", "total"}})),
      refused_per_address_(connections_refused_.Add({{"cap", "address"}})),
      bytes_in_(prometheus::BuildCounter()
                    .Name("granary_s3_received_bytes_total")
                    .Help("Object payload bytes received")
                    .Register(registry)
                    .Add({})),
      bytes_out_(prometheus::BuildCounter()
                     .Name("granary_s3_sent_bytes_total")
                     .Help("Object payload bytes sent")
                     .Register(registry)
                     .Add({})),
      degraded_stripes_(prometheus::BuildCounter()
                            .Name("granary_degraded_stripes_total")
                            .Help("Stripes read back by decoding from parity (hedged ones "
                                  "included)")
                            .Register(registry)
                            .Add({})),
      hedged_stripes_(prometheus::BuildCounter()
                          .Name("granary_hedged_stripes_total")
                          .Help("Stripes decoded from parity because a data fragment read "
                                "was slower than the hedging delay (each also counted in "
                                "granary_degraded_stripes_total)")
                          .Register(registry)
                          .Add({})),
      sent_from_cache_(prometheus::BuildCounter()
                           .Name("granary_get_sent_from_cache_bytes_total")
                           .Help("GET body bytes sent with sendfile from the page cache, "
                                 "verified there, without a copy through a buffer")
                           .Register(registry)
                           .Add({})),
      fragment_errors_(prometheus::BuildCounter()
                           .Name("granary_fragment_read_errors_total")
                           .Help("Fragment reads that failed: missing, corrupt or I/O error")
                           .Register(registry)
                           .Add({})),
      refused_reads_(prometheus::BuildCounter()
                         .Name("granary_fragment_reads_refused_total")
                         .Help("Fragment reads not made because their drive looked stalled "
                               "(reads of it running long, none ended lately): the stripe "
                               "is decoded from parity instead (a record of a batch GET is "
                               "read the slow way, which may count again)")
                         .Register(registry)
                         .Add({})),
      moved_puts_(prometheus::BuildCounter()
                      .Name("granary_fragment_puts_moved_total")
                      .Help("Fragment writes that failed on their drive (I/O error, full, "
                            "no answer) and were written again on another drive")
                      .Register(registry)
                      .Add({})),
      encoded_bytes_(prometheus::BuildCounter()
                         .Name("granary_ec_encoded_bytes_total")
                         .Help("Data bytes erasure coded on PUT")
                         .Register(registry)
                         .Add({})),
      decoded_bytes_(prometheus::BuildCounter()
                         .Name("granary_ec_decoded_bytes_total")
                         .Help("Stripe bytes rebuilt from parity on read (degraded reads)")
                         .Register(registry)
                         .Add({})),
      crc_failures_(prometheus::BuildCounter()
                        .Name("granary_crc_failures_total")
                        .Help("Fragment reads refused because the stored bytes failed their "
                              "CRC32C (or header) check")
                        .Register(registry)
                        .Add({})),
      loop_lag_(prometheus::BuildHistogram()
                    .Name("granary_event_loop_lag_seconds")
                    .Help("How late each S3 event loop ran a timer it set every 50 ms: the "
                          "wait its busy turns (or a lack of CPU) add to every connection "
                          "on it")
                    .Register(registry)
                    .Add({}, prometheus::Histogram::BucketBoundaries{
                                 0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,
                                 0.25, 1})),
      drives_{
          DriveFigure{"granary_drive_blobs", "Blobs (fragments) stored on a drive",
                      &chunkstore::DriveStats::blobs, kLevel},
          DriveFigure{"granary_drive_payload_bytes", "Payload bytes of the blobs on a drive",
                      &chunkstore::DriveStats::payload_bytes, kLevel},
          DriveFigure{"granary_drive_disk_bytes",
                      "Bytes the live blobs of a drive occupy on disk (headers, padding)",
                      &chunkstore::DriveStats::disk_bytes, kLevel},
          DriveFigure{"granary_drive_reserved_bytes",
                      "Extent bytes of a drive allocated ahead of use (the pre-zeroed spare "
                      "extent, the unused tail of a pre-zeroed extent)",
                      &chunkstore::DriveStats::reserved_bytes, kLevel},
          DriveFigure{"granary_drive_spare_zeroed_bytes_total",
                      "Zeros written to prepare a drive's spare extents "
                      "(background writes; they count in granary_io_bytes_total too)",
                      &chunkstore::DriveStats::spare_zeroed_bytes, kCount},
          DriveFigure{"granary_drive_open_descriptors",
                      "Extent file descriptors a drive holds open now",
                      &chunkstore::DriveStats::open_descriptors, kLevel},
          DriveFigure{"granary_drive_descriptors_closed_total",
                      "Extent descriptors a drive closed to stay within its bound "
                      "(--extent-descriptors); a steady rate means extents are reopened",
                      &chunkstore::DriveStats::descriptors_closed, kCount},
          DriveFigure{"granary_drive_unreclaimed_extents",
                      "Extents whose orphan bytes a drive's last open could not reclaim "
                      "(I/O errors, logged; tried again at the next open)",
                      &chunkstore::DriveStats::unreclaimed_extents, kLevel},
          DriveFigure{"granary_drive_capacity_bytes", "Size of the file system holding a drive",
                      &chunkstore::DriveStats::capacity_bytes, kLevel},
          DriveFigure{"granary_drive_available_bytes",
                      "Free space of the file system holding a drive",
                      &chunkstore::DriveStats::available_bytes, kLevel},
          DriveFigure{"granary_drive_group_commits_total",
                      "Group commits of a drive (one data sync + one index sync)",
                      &chunkstore::DriveStats::commit_batches, kCount},
          DriveFigure{"granary_drive_committed_puts_total",
                      "Blob puts made durable by a drive's group commits",
                      &chunkstore::DriveStats::committed_puts, kCount},
          DriveFigure{"granary_drive_scrub_passes_total", "Completed scrub passes over a drive",
                      &chunkstore::DriveStats::scrub_passes, kCount},
          DriveFigure{"granary_drive_scrubbed_bytes_total",
                      "Payload bytes verified by the scrubber",
                      &chunkstore::DriveStats::scrubbed_bytes, kCount},
          DriveFigure{"granary_drive_corrupt_blobs_total",
                      "Corrupt or unreadable blobs found by the scrubber",
                      &chunkstore::DriveStats::corrupt_blobs, kCount},
          DriveFigure{"granary_drive_crc_cache_hits_total",
                      "Lookups of a blob's block CRCs in memory that found them (the read "
                      "skips the blob's header region)",
                      &chunkstore::DriveStats::crc_cache_hits, kCount},
          DriveFigure{"granary_drive_crc_cache_misses_total",
                      "Lookups of a blob's block CRCs in memory that did not find them (the "
                      "read verifies the blob's header region)",
                      &chunkstore::DriveStats::crc_cache_misses, kCount},
          DriveFigure{"granary_drive_crc_cache_bytes",
                      "Memory held by the drive's block CRC cache",
                      &chunkstore::DriveStats::crc_cache_bytes, kLevel},
          DriveFigure{"granary_drive_index_cache_hits_total",
                      "Blob index lookups answered from memory without RocksDB",
                      &chunkstore::DriveStats::index_cache_hits, kCount},
          DriveFigure{"granary_drive_index_cache_misses_total",
                      "Blob index lookups that went to RocksDB",
                      &chunkstore::DriveStats::index_cache_misses, kCount},
          DriveFigure{"granary_drive_index_cache_bytes",
                      "Memory held by the drive's in-memory blob index entries",
                      &chunkstore::DriveStats::index_cache_bytes, kLevel},
          DriveFigure{"granary_drive_verified_hits_total",
                      "Page-cache ranges sent without verifying them again (their pages "
                      "verified earlier and cached since)",
                      &chunkstore::DriveStats::verified_hits, kCount},
          DriveFigure{"granary_drive_verified_admitted_total",
                      "Blobs whose verified page-cache pages were mapped to be trusted while "
                      "cached",
                      &chunkstore::DriveStats::verified_admitted, kCount},
          DriveFigure{"granary_drive_verified_blobs",
                      "Blobs whose verified page-cache pages are mapped now",
                      &chunkstore::DriveStats::verified_blobs, kLevel},
          DriveFigure{"granary_drive_verified_bytes",
                      "Bytes of verified page-cache pages mapped now (in RSS as file pages)",
                      &chunkstore::DriveStats::verified_bytes, kLevel},
      },
      drive_up_(prometheus::BuildGauge()
                    .Name("granary_drive_up")
                    .Help("1 if the drive's statistics were read for this scrape, 0 if its "
                          "server or the drive did not answer (its other series are left "
                          "out then)")
                    .Register(registry)),
      index_up_(prometheus::BuildGauge()
                    .Name("granary_index_up")
                    .Help("1 if the index's statistics were read for this scrape, 0 if the "
                          "index did not answer")
                    .Register(registry)
                    .Add({})),
      storage_capacity_(prometheus::BuildGauge()
                            .Name("granary_storage_capacity_bytes")
                            .Help("Size of the file systems holding the drives that answered, "
                                  "each file system counted once (drives sharing one report "
                                  "its size each in granary_drive_capacity_bytes)")
                            .Register(registry)
                            .Add({})),
      storage_available_(prometheus::BuildGauge()
                             .Name("granary_storage_available_bytes")
                             .Help("Free space of the file systems holding the drives that "
                                   "answered, each file system counted once")
                             .Register(registry)
                             .Add({})),
      record_index_(prometheus::BuildGauge()
                        .Name("granary_record_index")
                        .Help("Record index size (RocksDB estimates): rows, bytes, sets, dead_sets")
                        .Register(registry)),
      containers_indexed_(prometheus::BuildCounter()
                              .Name("granary_record_containers_total")
                              .Help("Uploads that asked for a record index, by outcome")
                              .Register(registry)),
      records_indexed_(prometheus::BuildCounter()
                           .Name("granary_records_indexed_total")
                           .Help("Record rows published by indexed uploads")
                           .Register(registry)
                           .Add({})),
      index_storage_(prometheus::BuildGauge()
                         .Name("granary_index_storage_bytes")
                         .Help("Index size (RocksDB): sst files, memtables, live data estimate")
                         .Register(registry)),
      index_group_commits_(prometheus::BuildCounter()
                               .Name("granary_index_group_commits_total")
                               .Help("Synced index batches written")
                               .Register(registry)),
      index_committed_requests_(prometheus::BuildCounter()
                                    .Name("granary_index_committed_requests_total")
                                    .Help("Index writes those batches completed (their ratio "
                                          "is the batch size)")
                                    .Register(registry)),
      index_failed_writes_(prometheus::BuildCounter()
                               .Name("granary_index_failed_commits_total")
                               .Help("Index batches whose synced write failed (every request "
                                     "in them failed)")
                               .Register(registry)),
      index_commits_failing_(prometheus::BuildGauge()
                                 .Name("granary_index_commits_failing")
                                 .Help("1 if the index's latest batch write failed: after a "
                                       "failed WAL sync the index takes no write until it "
                                       "restarts (reads go on)")
                                 .Register(registry)
                                 .Add({})),
      buffer_budget_(prometheus::BuildGauge()
                         .Name("granary_buffer_budget_bytes")
                         .Help("Stripe-buffer budget of GET streams and uploads "
                               "(--buffer-memory): capacity, in use, peak since start, in use "
                               "by uploads")
                         .Register(registry)),
      buffer_waiting_(prometheus::BuildGauge()
                          .Name("granary_buffer_budget_waiting_streams")
                          .Help("GET streams and uploads waiting for buffer budget now")
                          .Register(registry)
                          .Add({})),
      buffer_waits_(prometheus::BuildCounter()
                        .Name("granary_buffer_budget_waits_total")
                        .Help("Times a GET stream or an upload had to wait for buffer budget")
                        .Register(registry)),
      buffer_overdrafts_(prometheus::BuildCounter()
                             .Name("granary_buffer_budget_overdrafts_total")
                             .Help("GET streams' waits for buffer budget that ran out of "
                                   "patience (2 s) and went ahead over the budget")
                             .Register(registry)),
      buffer_refusals_(prometheus::BuildCounter()
                           .Name("granary_buffer_budget_refusals_total")
                           .Help("Uploads answered 503 because buffer budget stayed spent for "
                                 "--buffer-wait, and reads refused because twice the budget "
                                 "stayed lent that long")
                           .Register(registry)) {
  for (auto& f : drives_) {
    if (f.kind == kCount) {
      f.counters = &prometheus::BuildCounter().Name(f.name).Help(f.help).Register(registry);
    } else {
      f.gauges = &prometheus::BuildGauge().Name(f.name).Help(f.help).Register(registry);
    }
  }
}

DataPathCounters GatewayMetrics::dataPathCounters() {
  return {degraded_stripes_, fragment_errors_, encoded_bytes_, decoded_bytes_, crc_failures_,
          hedged_stripes_, sent_from_cache_, refused_reads_, moved_puts_};
}

namespace {

// Shows `value` on the counter of `family` labelled `labels` (made at 0 if it was not
// there). Values given for one series never go down (GatewayMetrics::Counts).
void setCounter(prometheus::Family<prometheus::Counter>& family,
                const std::map<std::string, std::string>& labels, double value) {
  prometheus::Counter& counter = family.Add(labels);
  if (value > counter.Value()) counter.Increment(value - counter.Value());
}

// Sets each (label value, figure) of `family`'s series labelled `label`; when `ok` is
// false, removes them instead.
void setOrRemove(prometheus::Family<prometheus::Gauge>& family, const std::string& label,
                 bool ok, std::initializer_list<std::pair<const char*, uint64_t>> values) {
  for (const auto& [name, value] : values) {
    prometheus::Gauge& gauge = family.Add({{label, name}});
    if (ok) {
      gauge.Set(static_cast<double>(value));
    } else {
      family.Remove(&gauge);
    }
  }
}

}  // namespace

bool GatewayMetrics::Counts::newer(uint64_t scrape) {
  if (scrape < shown_scrape) return false;
  shown_scrape = scrape;
  return true;
}

bool GatewayMetrics::Counts::of(uint64_t opening, size_t n) {
  if (std::find(replaced.begin(), replaced.end(), opening) != replaced.end()) return false;
  if (shown.size() < n) {
    shown.resize(n, 0);
    base.resize(n, 0);
  }
  if (opened && *opened != opening) {  // it opened again: counts from 0
    base = shown;
    if (replaced.size() == kReplacedKept) replaced.erase(replaced.begin());
    replaced.push_back(*opened);
  }
  opened = opening;
  return true;
}

double GatewayMetrics::Counts::show(size_t i, uint64_t count) {
  shown[i] = std::max(shown[i], base[i] + static_cast<double>(count));
  return shown[i];
}

void GatewayMetrics::setDrive(const std::string& drive,
                              const Result<chunkstore::DriveStats>& stats, uint64_t scrape) {
  std::lock_guard lock(scraped_mu_);
  Counts& counts = drive_counts_[drive];
  if (!counts.newer(scrape)) return;
  // Figures of an opening already replaced: read from the process before a restart by a
  // scrape that began later than the one that saw the new process.
  if (stats && !counts.of(stats->opened_unix_nanos, drives_.size())) return;
  drive_up_.Add({{"drive", drive}}).Set(stats ? 1 : 0);
  const std::map<std::string, std::string> labels{{"drive", drive}};
  for (size_t i = 0; i < drives_.size(); ++i) {
    DriveFigure& f = drives_[i];
    if (stats && f.kind == kCount) {
      setCounter(*f.counters, labels, counts.show(i, (*stats).*f.field));
    } else if (stats) {
      f.gauges->Add(labels).Set(static_cast<double>((*stats).*f.field));
    } else if (f.kind == kCount) {
      f.counters->Remove(&f.counters->Add(labels));
    } else {
      f.gauges->Remove(&f.gauges->Add(labels));
    }
  }
}

void GatewayMetrics::setIndex(const Result<index_kv::RecordIndexStats>& records,
                              const Result<index_kv::IndexStorageStats>& storage,
                              const Result<index_kv::IndexCommitStats>& commits,
                              uint64_t scrape) {
  std::lock_guard lock(scraped_mu_);
  if (!index_counts_.newer(scrape)) return;
  if (commits && !index_counts_.of(commits->opened_unix_nanos, 3)) return;  // as setDrive
  index_up_.Set(records && storage && commits ? 1 : 0);
  const index_kv::RecordIndexStats r = records.value_or(index_kv::RecordIndexStats{});
  setOrRemove(record_index_, "what", records.has_value(),
              {{"rows", r.rows}, {"bytes", r.bytes}, {"sets", r.sets},
               {"dead_sets", r.dead_sets}});
  const index_kv::IndexStorageStats s = storage.value_or(index_kv::IndexStorageStats{});
  setOrRemove(index_storage_, "what", storage.has_value(),
              {{"sst", s.sst_bytes}, {"memtable", s.memtable_bytes},
               {"live_data", s.live_data_bytes}});
  if (!commits) return;
  setCounter(index_group_commits_, {}, index_counts_.show(0, commits->batches));
  setCounter(index_committed_requests_, {}, index_counts_.show(1, commits->requests));
  setCounter(index_failed_writes_, {}, index_counts_.show(2, commits->failed_writes));
  index_commits_failing_.Set(commits->failing ? 1 : 0);
}

void GatewayMetrics::setStorage(uint64_t capacity, uint64_t available, uint64_t scrape) {
  std::lock_guard lock(scraped_mu_);
  if (scrape < storage_scrape_) return;  // read before the figures shown
  storage_scrape_ = scrape;
  storage_capacity_.Set(static_cast<double>(capacity));
  storage_available_.Set(static_cast<double>(available));
}

void GatewayMetrics::setBufferBudget(const BufferBudget::Stats& stats, uint64_t scrape) {
  std::lock_guard lock(scraped_mu_);
  if (!buffer_counts_.newer(scrape)) return;
  buffer_budget_.Add({{"what", "capacity"}}).Set(static_cast<double>(stats.capacity));
  buffer_budget_.Add({{"what", "used"}}).Set(static_cast<double>(stats.used));
  buffer_budget_.Add({{"what", "peak"}}).Set(static_cast<double>(stats.peak));
  buffer_budget_.Add({{"what", "uploads"}}).Set(static_cast<double>(stats.uploads));
  buffer_waiting_.Set(static_cast<double>(stats.waiting));
  buffer_counts_.of(0, 3);  // this process's own budget: one opening
  setCounter(buffer_waits_, {}, buffer_counts_.show(0, stats.waits));
  setCounter(buffer_overdrafts_, {}, buffer_counts_.show(1, stats.overdrafts));
  setCounter(buffer_refusals_, {}, buffer_counts_.show(2, stats.refusals));
}

void GatewayMetrics::containerIndexed(const index_kv::RecordIndexInfo& info) {
  if (info.status.empty()) return;
  containers_indexed_.Add({{"status", info.status}}).Increment();
  records_indexed_.Increment(static_cast<double>(info.rows));
}

void GatewayMetrics::observe(std::string_view op, int status, double seconds) {
  std::string o(op);
  requests_.Add({{"op", o}, {"status", std::to_string(status)}}).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  latency_.Add({{"op", o}}, kBuckets).Observe(seconds);
}

}  // namespace granary::gateway

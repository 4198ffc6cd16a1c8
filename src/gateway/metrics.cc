#include "metrics.h"

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
                               .Help("Connections answered 503 SlowDown and closed: the "
                                     "connection cap (--max-connections) was reached")
                               .Register(registry)
                               .Add({})),
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
                            .Help("Stripes read back by decoding from parity")
                            .Register(registry)
                            .Add({})),
      hedged_stripes_(prometheus::BuildCounter()
                          .Name("granary_hedged_stripes_total")
                          .Help("Stripes decoded from parity because a data fragment read "
                                "was slower than the hedging delay")
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
          DriveGauge{"granary_drive_blobs", "Blobs (fragments) stored on a drive",
                     &chunkstore::DriveStats::blobs},
          DriveGauge{"granary_drive_payload_bytes", "Payload bytes of the blobs on a drive",
                     &chunkstore::DriveStats::payload_bytes},
          DriveGauge{"granary_drive_disk_bytes",
                     "Bytes the live blobs of a drive occupy on disk (headers, padding)",
                     &chunkstore::DriveStats::disk_bytes},
          DriveGauge{"granary_drive_reserved_bytes",
                     "Extent bytes of a drive allocated ahead of use (the pre-zeroed spare "
                     "extent, the unused tail of a pre-zeroed extent)",
                     &chunkstore::DriveStats::reserved_bytes},
          DriveGauge{"granary_drive_spare_zeroed_bytes",
                     "Zeros written to prepare a drive's spare extents since it opened "
                     "(background writes; they count in granary_io_bytes_total too)",
                     &chunkstore::DriveStats::spare_zeroed_bytes},
          DriveGauge{"granary_drive_capacity_bytes", "Size of the file system holding a drive",
                     &chunkstore::DriveStats::capacity_bytes},
          DriveGauge{"granary_drive_available_bytes",
                     "Free space of the file system holding a drive",
                     &chunkstore::DriveStats::available_bytes},
          DriveGauge{"granary_drive_group_commits",
                     "Group commits (one data sync + one index sync) since the drive opened",
                     &chunkstore::DriveStats::commit_batches},
          DriveGauge{"granary_drive_committed_puts",
                     "Blob puts made durable since the drive opened",
                     &chunkstore::DriveStats::committed_puts},
          DriveGauge{"granary_drive_scrub_passes", "Completed scrub passes over a drive",
                     &chunkstore::DriveStats::scrub_passes},
          DriveGauge{"granary_drive_scrubbed_bytes", "Payload bytes verified by the scrubber",
                     &chunkstore::DriveStats::scrubbed_bytes},
          DriveGauge{"granary_drive_corrupt_blobs", "Corrupt blobs found by the scrubber",
                     &chunkstore::DriveStats::corrupt_blobs},
          DriveGauge{"granary_drive_crc_cache_hits",
                     "Lookups of a blob's block CRCs in memory that found them (the read "
                     "skips the blob's header region), since the drive opened",
                     &chunkstore::DriveStats::crc_cache_hits},
          DriveGauge{"granary_drive_crc_cache_misses",
                     "Lookups of a blob's block CRCs in memory that did not find them (the "
                     "read verifies the blob's header region), since the drive opened",
                     &chunkstore::DriveStats::crc_cache_misses},
          DriveGauge{"granary_drive_crc_cache_bytes",
                     "Memory held by the drive's block CRC cache",
                     &chunkstore::DriveStats::crc_cache_bytes},
          DriveGauge{"granary_drive_index_cache_hits",
                     "Blob index lookups answered from memory without RocksDB, since the "
                     "drive opened",
                     &chunkstore::DriveStats::index_cache_hits},
          DriveGauge{"granary_drive_index_cache_misses",
                     "Blob index lookups that went to RocksDB, since the drive opened",
                     &chunkstore::DriveStats::index_cache_misses},
          DriveGauge{"granary_drive_index_cache_bytes",
                     "Memory held by the drive's in-memory blob index entries",
                     &chunkstore::DriveStats::index_cache_bytes},
          DriveGauge{"granary_drive_verified_hits",
                     "Page-cache ranges sent without verifying them again (their pages "
                     "verified earlier and cached since), since the drive opened",
                     &chunkstore::DriveStats::verified_hits},
          DriveGauge{"granary_drive_verified_admitted",
                     "Blobs whose verified page-cache pages were mapped to be trusted while "
                     "cached, since the drive opened",
                     &chunkstore::DriveStats::verified_admitted},
          DriveGauge{"granary_drive_verified_blobs",
                     "Blobs whose verified page-cache pages are mapped now",
                     &chunkstore::DriveStats::verified_blobs},
          DriveGauge{"granary_drive_verified_bytes",
                     "Bytes of verified page-cache pages mapped now (in RSS as file pages)",
                     &chunkstore::DriveStats::verified_bytes},
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
      index_group_commits_(prometheus::BuildGauge()
                               .Name("granary_index_group_commits")
                               .Help("Synced index batches written since the index opened")
                               .Register(registry)
                               .Add({})),
      index_committed_requests_(prometheus::BuildGauge()
                                    .Name("granary_index_committed_requests")
                                    .Help("Index writes those batches completed (their ratio "
                                          "is the batch size)")
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
                        .Register(registry)
                        .Add({})),
      buffer_overdrafts_(prometheus::BuildCounter()
                             .Name("granary_buffer_budget_overdrafts_total")
                             .Help("GET streams' waits for buffer budget that ran out of "
                                   "patience (2 s) and went ahead over the budget")
                             .Register(registry)
                             .Add({})),
      buffer_refusals_(prometheus::BuildCounter()
                           .Name("granary_buffer_budget_refusals_total")
                           .Help("Uploads answered 503 because buffer budget stayed spent for "
                                 "--buffer-wait")
                           .Register(registry)
                           .Add({})) {
  for (auto& g : drives_) {
    g.family = &prometheus::BuildGauge().Name(g.name).Help(g.help).Register(registry);
  }
}

DataPathCounters GatewayMetrics::dataPathCounters() {
  return {degraded_stripes_, fragment_errors_, encoded_bytes_, decoded_bytes_, crc_failures_,
          hedged_stripes_, sent_from_cache_};
}

namespace {

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

void GatewayMetrics::setDrive(const std::string& drive,
                              const Result<chunkstore::DriveStats>& stats) {
  std::lock_guard lock(scraped_gauges_mu_);
  drive_up_.Add({{"drive", drive}}).Set(stats ? 1 : 0);
  for (auto& g : drives_) {
    prometheus::Gauge& gauge = g.family->Add({{"drive", drive}});
    if (stats) {
      gauge.Set(static_cast<double>((*stats).*g.field));
    } else {
      g.family->Remove(&gauge);
    }
  }
}

void GatewayMetrics::setIndex(const Result<index_kv::RecordIndexStats>& records,
                              const Result<index_kv::IndexStorageStats>& storage,
                              const Result<index_kv::IndexCommitStats>& commits) {
  std::lock_guard lock(scraped_gauges_mu_);
  index_up_.Set(records && storage && commits ? 1 : 0);
  const index_kv::RecordIndexStats r = records.value_or(index_kv::RecordIndexStats{});
  setOrRemove(record_index_, "what", records.has_value(),
              {{"rows", r.rows}, {"bytes", r.bytes}, {"sets", r.sets},
               {"dead_sets", r.dead_sets}});
  const index_kv::IndexStorageStats s = storage.value_or(index_kv::IndexStorageStats{});
  setOrRemove(index_storage_, "what", storage.has_value(),
              {{"sst", s.sst_bytes}, {"memtable", s.memtable_bytes},
               {"live_data", s.live_data_bytes}});
  if (commits) {
    index_group_commits_.Set(static_cast<double>(commits->batches));
    index_committed_requests_.Set(static_cast<double>(commits->requests));
  }
}

void GatewayMetrics::setBufferBudget(const BufferBudget::Stats& stats) {
  buffer_budget_.Add({{"what", "capacity"}}).Set(static_cast<double>(stats.capacity));
  buffer_budget_.Add({{"what", "used"}}).Set(static_cast<double>(stats.used));
  buffer_budget_.Add({{"what", "peak"}}).Set(static_cast<double>(stats.peak));
  buffer_budget_.Add({{"what", "uploads"}}).Set(static_cast<double>(stats.uploads));
  buffer_waiting_.Set(static_cast<double>(stats.waiting));
  // The budget counts since start; the counters advance by what is new since the last scrape.
  std::lock_guard lock(buffer_counters_mu_);
  auto advance = [](prometheus::Counter& counter, uint64_t& seen, uint64_t now) {
    if (now > seen) counter.Increment(static_cast<double>(now - seen));
    seen = std::max(seen, now);
  };
  advance(buffer_waits_, buffer_waits_seen_, stats.waits);
  advance(buffer_overdrafts_, buffer_overdrafts_seen_, stats.overdrafts);
  advance(buffer_refusals_, buffer_refusals_seen_, stats.refusals);
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

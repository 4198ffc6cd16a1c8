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
      drive_blobs_(prometheus::BuildGauge()
                       .Name("granary_drive_blobs")
                       .Help("Blobs (fragments) stored on a drive")
                       .Register(registry)),
      drive_payload_(prometheus::BuildGauge()
                         .Name("granary_drive_payload_bytes")
                         .Help("Payload bytes of the blobs stored on a drive")
                         .Register(registry)),
      drive_capacity_(prometheus::BuildGauge()
                          .Name("granary_drive_capacity_bytes")
                          .Help("Size of the file system holding a drive")
                          .Register(registry)),
      drive_available_(prometheus::BuildGauge()
                           .Name("granary_drive_available_bytes")
                           .Help("Free space of the file system holding a drive")
                           .Register(registry)) {}

DataPathCounters GatewayMetrics::dataPathCounters() {
  return {degraded_stripes_, fragment_errors_, encoded_bytes_};
}

void GatewayMetrics::setDrive(const std::string& drive, uint64_t blobs, uint64_t payload_bytes,
                              uint64_t capacity_bytes, uint64_t available_bytes) {
  drive_blobs_.Add({{"drive", drive}}).Set(static_cast<double>(blobs));
  drive_payload_.Add({{"drive", drive}}).Set(static_cast<double>(payload_bytes));
  drive_capacity_.Add({{"drive", drive}}).Set(static_cast<double>(capacity_bytes));
  drive_available_.Add({{"drive", drive}}).Set(static_cast<double>(available_bytes));
}

void GatewayMetrics::observe(std::string_view op, int status, double seconds) {
  std::string o(op);
  requests_.Add({{"op", o}, {"status", std::to_string(status)}}).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  latency_.Add({{"op", o}}, kBuckets).Observe(seconds);
}

}  // namespace granary::gateway

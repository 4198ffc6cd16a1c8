// granary-bench: runs workloads against an S3 endpoint. Phases: create the bucket, prepare
// (upload the objects reads need), run every workload at once for the duration, clean up.
// Each workload is `concurrency` keep-alive connections with one request in flight each,
// spread over `threads` event-loop threads of its own; every request is signed with SigV4.
// No Beast in this header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "granary/common/status.h"
#include "s3_client.h"
#include "spec.h"
#include "stats.h"

namespace granary::bench {

struct RunConfig {
  cli::Endpoint endpoint;
  cli::S3Credentials creds;
  std::string bucket = "granary-bench";
  double duration_s = 30;
  unsigned threads = 1;
  double timeout_s = 120;        // per network operation
  unsigned prepare_concurrency = 32;
  bool progress = true;          // a live line on stderr every second
  bool create_bucket = true;     // false: the bucket exists (or the endpoint is not S3)
  std::vector<WorkloadSpec> workloads;  // each with its key prefix set
};

struct WorkloadResult {
  WorkloadSpec spec;
  WorkloadStats stats;
  double seconds = 0;                    // measured phase, start to last completion
  std::vector<std::string> error_samples;  // the first few distinct errors
};

struct RunResult {
  std::vector<WorkloadResult> workloads;
};

Result<RunResult> run(RunConfig config);

}  // namespace granary::bench

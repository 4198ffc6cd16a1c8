// granary-bench: what to run. A workload is one class of clients with its own accounting
// ("loader", "checkpoint"); several workloads run at the same time against one endpoint.
//
// Spec syntax (one --workload each):  name=loader,op=range,size=64MiB,range=64KiB-4MiB,
//   objects=16,concurrency=8[,count=N][,rate=OPS][,prefix=P][,prepare=auto|skip]
//   [,cleanup=yes|no][,mix=get:70+put:20+head:10]
// Pure code: parsing and validation only, so it is unit tested without a network.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/status.h"

namespace granary::bench {

enum class Op { kPut, kGet, kRange, kHead, kList, kDelete };
inline constexpr Op kAllOps[] = {Op::kPut, Op::kGet, Op::kRange, Op::kHead, Op::kList, Op::kDelete};
inline constexpr size_t kOpCount = std::size(kAllOps);
std::string_view opName(Op op);
std::optional<Op> parseOp(std::string_view name);

struct MixEntry {
  Op op;
  unsigned weight;
};

struct WorkloadSpec {
  std::string name = "main";
  // A single operation, or "mix" with `mix` weights (put, get, range, head, delete).
  std::optional<Op> op;
  std::vector<MixEntry> mix;
  uint64_t size = 4096;              // object size
  uint64_t range_min = 64 << 10;     // ranged GET length bounds (op range)
  uint64_t range_max = 4 << 20;
  uint64_t objects = 0;              // objects prepared (get/range/head/list/delete/mix);
                                     // for put: keys cycled over (0: a new key per PUT)
  unsigned concurrency = 8;          // connections, one request in flight each
  uint64_t count = 0;                // stop after this many operations (0: duration only)
  // Operations a second, started on a fixed schedule whether or not the endpoint keeps up
  // (an open loop, as a data loader consumes at its trainer's pace), each one's latency
  // counted from when it was due; `concurrency` bounds how many are in flight. 0: a closed
  // loop, each connection sending its next request when its last one ends.
  double rate = 0;
  std::string prefix;                // key prefix; default "<run id>/<name>/"
  bool prepare = true;               // upload `objects` first (prepare=skip: they exist)
  bool cleanup = true;               // delete what the run created (cleanup=no keeps it)
  uint64_t list_page = 1000;         // max-keys per LIST page

  bool needsObjects() const;         // reads prepared objects
  std::string describe() const;      // the spec back, normalised, for the report
};

// "4096", "4KiB", "64MiB", "1GiB", "4k", "4K", "1M" (binary units; "KB"/"MB" are decimal).
Result<uint64_t> parseSize(std::string_view text);
// "30", "30s", "500ms", "2m".
Result<double> parseSeconds(std::string_view text);
// A human size: 4096 -> "4KiB", 1536 -> "1536B".
std::string formatSize(uint64_t bytes);

Result<WorkloadSpec> parseWorkload(std::string_view spec);

}  // namespace granary::bench

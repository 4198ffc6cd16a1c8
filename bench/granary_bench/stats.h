// granary-bench: accounting (per workload and operation) and the object payload.
// Pure code, unit tested.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spec.h"

namespace granary::bench {

// Where one operation's latency went, in microseconds; the three add up to it.
struct LatencyPhases {
  uint64_t wait_us = 0;     // due until sent: waiting for a free connection (paced only)
  uint64_t to_head_us = 0;  // request sent (body included) until the response head came
  uint64_t body_us = 0;     // response head until its last byte
};

// One operation type's figures inside one connection; merged at the end of the run.
struct OpStats {
  uint64_t ops = 0;     // completed without error
  uint64_t errors = 0;
  uint64_t bytes = 0;   // payload bytes moved (sent for PUT, received for GET)
  uint64_t items = 0;   // keys listed (LIST)
  std::vector<uint32_t> latency_us;  // one sample per successful op
  // Per successful op, in the same order: its LatencyPhases.
  std::vector<uint32_t> wait_us, to_head_us, body_us;

  void record(uint64_t micros, uint64_t payload_bytes, uint64_t listed = 0,
              const LatencyPhases& phases = {});
  void merge(const OpStats& other);
};

struct LatencySummary {
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
};
// Nearest-rank percentiles; sorts `samples`.
LatencySummary summarize(std::vector<uint32_t>& samples);

using WorkloadStats = std::array<OpStats, kOpCount>;

// Object contents: byte j of an object is pattern[(seed + j) % pattern size], seed derived
// from the key, so any reader can check any byte range of any object it did not write.
class Payload {
 public:
  explicit Payload(size_t pattern_bytes = size_t{16} << 20, uint64_t seed = 0x6772616e617279);
  uint64_t seedFor(std::string_view key) const;
  // Calls fn(span) for the contiguous pattern pieces of bytes [offset, offset + len) of the
  // object with `seed`, each at most `max_piece` long.
  template <typename Fn>
  void forEachPiece(uint64_t seed, uint64_t offset, uint64_t len, size_t max_piece, Fn&& fn) const {
    while (len > 0) {
      std::span<const char> p = piece(seed, offset, std::min<uint64_t>(len, max_piece));
      fn(p);
      offset += p.size();
      len -= p.size();
    }
  }
  // The longest contiguous run of the object's bytes from `offset`, at most max_len long.
  std::span<const char> piece(uint64_t seed, uint64_t offset, uint64_t max_len) const {
    size_t at = static_cast<size_t>((seed + offset) % pattern_.size());
    size_t n = static_cast<size_t>(std::min<uint64_t>(max_len, pattern_.size() - at));
    return {pattern_.data() + at, n};
  }
  // True when `data` equals bytes [offset, offset + data.size()) of the object.
  bool matches(uint64_t seed, uint64_t offset, std::span<const char> data) const;

 private:
  std::vector<char> pattern_;
};

}  // namespace granary::bench

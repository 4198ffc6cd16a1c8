// Helpers of the tests that drive the data path (DataPath, ObjectWriter): counters for
// DataPath and a writer loop.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string_view>

#include "object_io.h"

namespace granary::gateway::testing {

struct Counters {
  prometheus::Registry registry;
  prometheus::Counter& degraded = prometheus::BuildCounter()
                                      .Name("test_degraded_stripes_total")
                                      .Help("degraded")
                                      .Register(registry)
                                      .Add({});
  prometheus::Counter& fragment_errors = prometheus::BuildCounter()
                                             .Name("test_fragment_errors_total")
                                             .Help("errors")
                                             .Register(registry)
                                             .Add({});
  prometheus::Counter& encoded = prometheus::BuildCounter()
                                     .Name("test_encoded_bytes_total")
                                     .Help("encoded")
                                     .Register(registry)
                                     .Add({});
  prometheus::Counter& decoded = prometheus::BuildCounter()
                                     .Name("test_decoded_bytes_total")
                                     .Help("decoded")
                                     .Register(registry)
                                     .Add({});
  prometheus::Counter& hedged = prometheus::BuildCounter()
                                    .Name("test_hedged_stripes_total")
                                    .Help("hedged")
                                    .Register(registry)
                                    .Add({});
  prometheus::Counter& sent_from_cache = prometheus::BuildCounter()
                                             .Name("test_sent_from_cache_bytes_total")
                                             .Help("sendfile")
                                             .Register(registry)
                                             .Add({});
  prometheus::Counter& crc_failures = prometheus::BuildCounter()
                                          .Name("test_crc_failures_total")
                                          .Help("crc")
                                          .Register(registry)
                                          .Add({});
  prometheus::Counter& refused = prometheus::BuildCounter()
                                     .Name("test_refused_reads_total")
                                     .Help("refused")
                                     .Register(registry)
                                     .Add({});
  prometheus::Counter& moved_puts = prometheus::BuildCounter()
                                        .Name("test_moved_puts_total")
                                        .Help("moved")
                                        .Register(registry)
                                        .Add({});
};

// Starts the writer, fills its buffer stripe by stripe from `data`, then finishes. Stops at the
// first error (the caller abandons).
inline Task<Status> writeAll(ObjectWriter& w, std::string_view data) {
  if (Status st = co_await w.start(); !st.isOk()) co_return st;
  size_t pos = 0;
  while (pos < data.size()) {
    std::span<uint8_t> buf = w.buffer();
    size_t n = std::min(buf.size(), data.size() - pos);
    std::memcpy(buf.data(), data.data() + pos, n);
    pos += n;
    Status st = co_await w.flush(n);
    if (!st.isOk()) co_return st;
  }
  Status st = co_await w.finish();
  co_return st;
}

inline DataPathCounters countersOf(Counters& c) {
  return DataPathCounters{c.degraded, c.fragment_errors, c.encoded, c.decoded, c.crc_failures,
                          c.hedged, c.sent_from_cache, c.refused, c.moved_puts};
}

}  // namespace granary::gateway::testing

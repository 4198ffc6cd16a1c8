// BackgroundLeader: which gateway of a cluster runs the background passes (GC, orphan
// sweep, record GC, lifecycle, repair). Every gateway keeps the jobs' timers, but a pass
// runs only on the gateway holding the index's lease "background" (Index::holdLease):
// with N gateways, each repair pass otherwise looked at every fragment N times and the GC
// passes raced each other's removals.
//  - start() takes or renews the lease at once, then every ttl/3. stop() gives it up, so
//    that another gateway takes over at its next renewal, not after the ttl.
//  - leading(): the last renewal succeeded, asked less than ttl/2 ago by this host's steady
//    clock (the index counts the ttl by its own monotonic clock; half of it leaves room
//    for a slow call).
//  - A renewal that fails (the index does not answer) stops this gateway leading until one
//    succeeds: no pass could run without the index anyway. An index service older than
//    leases answers true to everyone (each gateway leads, as before).
// A leader that dies leaves the lease to expire: another gateway leads within ttl + ttl/3.
// Explicit passes (granary admin repair, tests' direct calls) do not ask.
// Thread safety: leading() from any thread; start/stop from one.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "granary/common/periodic_thread.h"

namespace prometheus {
class Gauge;
class Registry;
}  // namespace prometheus
namespace granary::index_kv {
class Index;
}

namespace granary::gateway {

class BackgroundLeader {
 public:
  // `holder`: this gateway's name in the lease (unique per process). Registers
  // granary_background_leader in `registry`. Everything passed must outlive it.
  BackgroundLeader(index_kv::Index& index, std::string holder, std::chrono::milliseconds ttl,
                   prometheus::Registry& registry);
  ~BackgroundLeader();
  BackgroundLeader(const BackgroundLeader&) = delete;
  BackgroundLeader& operator=(const BackgroundLeader&) = delete;

  void start();
  void stop();
  bool leading() const;
  // One renewal (start() runs them); answers leading().
  bool renew();

  static constexpr const char* kLeaseName = "background";

 private:
  index_kv::Index& index_;
  const std::string holder_;
  const std::chrono::milliseconds ttl_;
  prometheus::Gauge& gauge_;
  // steady_clock ticks of the last successful renewal; 0: none (or given up).
  std::atomic<int64_t> renewed_at_{0};
  PeriodicThread thread_;
};

}  // namespace granary::gateway

#include "granary/gateway/background_leader.h"

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <utility>

#include "granary/common/log.h"
#include "granary/index_kv/index.h"

namespace granary::gateway {

BackgroundLeader::BackgroundLeader(index_kv::Index& index, std::string holder,
                                   std::chrono::milliseconds ttl,
                                   prometheus::Registry& registry)
    : index_(index),
      holder_(std::move(holder)),
      ttl_(ttl),
      gauge_(prometheus::BuildGauge()
                 .Name("granary_background_leader")
                 .Help("1 if this gateway runs the cluster's background passes (GC, sweep, "
                       "lifecycle, repair) now: it holds the index's lease")
                 .Register(registry)
                 .Add({})) {}

BackgroundLeader::~BackgroundLeader() { stop(); }

bool BackgroundLeader::renew() {
  const bool was = leading();
  gauge_.Set(was ? 1 : 0);  // a renewal that hangs must not leave a stale 1 shown
  // Counted from before the call: the index's ttl began at or after this moment.
  const int64_t asked = std::chrono::steady_clock::now().time_since_epoch().count();
  auto held = index_.holdLease(kLeaseName, holder_, ttl_);
  if (held && *held) {
    renewed_at_ = asked;
  } else {
    renewed_at_ = 0;
    if (!held) log::warn("background lease: {}", held.error().toString());
  }
  const bool now = leading();
  if (now != was) {
    log::info("background passes: this gateway {}", now ? "leads them" : "does not lead them");
  }
  gauge_.Set(now ? 1 : 0);
  return now;
}

bool BackgroundLeader::leading() const {
  const int64_t at = renewed_at_;
  if (at == 0) return false;
  using Steady = std::chrono::steady_clock;
  return Steady::now() - Steady::time_point(Steady::duration(at)) < ttl_ / 2;
}

void BackgroundLeader::start() {
  (void)renew();
  thread_.start(std::max(ttl_ / 3, std::chrono::milliseconds(1)), [this] { (void)renew(); });
}

void BackgroundLeader::stop() {
  const bool first_stop = !thread_.stopping();  // the destructor stops again
  thread_.stop();
  renewed_at_ = 0;
  gauge_.Set(0);
  // Given up even after a renewal that failed here: the index may have applied it, and
  // only its holder can give a lease up.
  if (first_stop) (void)index_.holdLease(kLeaseName, holder_, std::chrono::milliseconds(0));
}

}  // namespace granary::gateway

// BackgroundLeader: two gateways' leaders over one real index and its ManualClock. The
// index decides who holds the lease; each leader also stops leading on its own once its
// last renewal is older than half the ttl (by the steady clock).
#include "granary/gateway/background_leader.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <prometheus/registry.h>
#include <string>
#include <thread>

#include "gateway_test_util.h"

namespace granary::gateway {
namespace {

using testing::kSecond;
using testing::TestCluster;

double gauge(prometheus::Registry& registry) {
  for (const auto& family : registry.Collect()) {
    if (family.name == "granary_background_leader") return family.metric.at(0).gauge.value;
  }
  FAIL("no granary_background_leader");
  return -1;
}

TEST_CASE("One gateway leads the background passes, another takes over when it goes") {
  TestCluster cluster;
  prometheus::Registry reg_a, reg_b;
  const std::chrono::seconds ttl(30);
  BackgroundLeader a(cluster.index(), "gw-a", ttl, reg_a);
  BackgroundLeader b(cluster.index(), "gw-b", ttl, reg_b);
  CHECK(a.renew());
  CHECK_FALSE(b.renew());
  CHECK(a.leading());
  CHECK_FALSE(b.leading());
  CHECK(gauge(reg_a) == 1);
  CHECK(gauge(reg_b) == 0);

  // a stops renewing (its host hangs): once the index's clock passes the ttl, b leads, and
  // a's next renewal finds it taken.
  cluster.clock.advance(29 * kSecond);
  CHECK_FALSE(b.renew());
  cluster.clock.advance(2 * kSecond);
  CHECK(b.renew());
  CHECK_FALSE(a.renew());
  CHECK_FALSE(a.leading());
  CHECK(gauge(reg_a) == 0);
  CHECK(gauge(reg_b) == 1);

  // b shuts down and gives the lease up: a leads at its next renewal, not a ttl later.
  b.stop();
  CHECK_FALSE(b.leading());
  CHECK(gauge(reg_b) == 0);
  CHECK(a.renew());
}

TEST_CASE("A leader whose renewals stop stops leading after half its ttl") {
  TestCluster cluster;
  prometheus::Registry registry;
  BackgroundLeader leader(cluster.index(), "gw-a", std::chrono::milliseconds(200), registry);
  REQUIRE(leader.renew());
  // No renewal since: by its own clock it must not assume the lease past ttl / 2, while
  // the index still counts it held (its clock stands still here).
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  CHECK_FALSE(leader.leading());
  CHECK(leader.renew());
}

}  // namespace
}  // namespace granary::gateway

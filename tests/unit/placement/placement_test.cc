#include "granary/placement/placement.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

using granary::Status;
using granary::placement::chooseAnotherDrive;
using granary::placement::chooseDrives;
using granary::placement::spreadLikeChooseDrives;
using granary::placement::ClusterMap;
using granary::placement::Drive;
using granary::placement::rankDrives;

namespace {

constexpr int kKeys = 100'000;

// prefix + number. (Not `"d" + std::to_string(i)`: g++ 12 -O3 gives a false -Wrestrict.)
std::string named(std::string prefix, int n) { return prefix.append(std::to_string(n)); }

std::string keyOf(int i) { return named("bucket/object-", i).append("#stripe0"); }

// `n` drives d0..d<n-1>, drive i in domain "dom<i % domains>", all of weight 1.
ClusterMap makeMap(int n, int domains, granary::ec::EcProfile ec = {1, 0}) {
  ClusterMap map;
  map.ec = ec;
  for (int i = 0; i < n; ++i) {
    std::string id = named("d", i);
    map.drives.push_back(
        {id, named("s", i), named("dom", i % domains), 1.0, "", std::string("drives/").append(id)});
  }
  return map;
}

std::string first(const ClusterMap& map, const std::string& key) {
  auto r = chooseDrives(map, key, 1);
  REQUIRE(r.has_value());
  return map.drives[r->front()].id;
}

std::vector<std::string> ids(const ClusterMap& map, const std::vector<size_t>& idx) {
  std::vector<std::string> out;
  for (size_t i : idx) out.push_back(map.drives[i].id);
  return out;
}

// How often each drive is chosen when every key places `count` fragments.
std::vector<int> tally(const ClusterMap& map, size_t count) {
  std::vector<int> hits(map.drives.size(), 0);
  for (int i = 0; i < kKeys; ++i) {
    auto r = chooseDrives(map, keyOf(i), count);
    REQUIRE(r.has_value());
    for (size_t idx : *r) ++hits[idx];
  }
  return hits;
}

void checkBalanced(const std::vector<int>& hits, double tolerance, const char* label) {
  const double mean = static_cast<double>(std::accumulate(hits.begin(), hits.end(), 0)) /
                      static_cast<double>(hits.size());
  const auto [lo, hi] = std::minmax_element(hits.begin(), hits.end());
  std::printf("%s: mean %.1f, min %d (%+.2f%%), max %d (%+.2f%%)\n", label, mean, *lo,
              100.0 * (*lo / mean - 1), *hi, 100.0 * (*hi / mean - 1));
  for (int h : hits) {
    INFO(label << ": drive share " << h << " vs mean " << mean);
    CHECK(std::abs(h - mean) <= tolerance * mean);
  }
}

}  // namespace

TEST_CASE("Ranking is a deterministic permutation, also across a copied map") {
  const ClusterMap map = makeMap(12, 12);
  const ClusterMap copy = map;
  std::set<std::vector<size_t>> distinct_orders;
  for (int i = 0; i < 200; ++i) {
    auto order = rankDrives(map, keyOf(i));
    CHECK(order == rankDrives(map, keyOf(i)));
    CHECK(order == rankDrives(copy, keyOf(i)));
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<size_t> all(12);
    std::iota(all.begin(), all.end(), size_t{0});
    CHECK(sorted == all);
    distinct_orders.insert(order);
  }
  CHECK(distinct_orders.size() > 190);  // keys spread over orders
  CHECK(rankDrives(ClusterMap{}, "x").empty());
}

TEST_CASE("Ranking depends on drive ids, not on their position in the map") {
  ClusterMap map = makeMap(8, 8);
  ClusterMap reversed = map;
  std::reverse(reversed.drives.begin(), reversed.drives.end());
  for (int i = 0; i < 100; ++i) {
    CHECK(ids(map, rankDrives(map, keyOf(i))) == ids(reversed, rankDrives(reversed, keyOf(i))));
  }
}

TEST_CASE("Placement is pinned: the same key maps to the same drives in every build") {
  // Stored manifests name drives, but a lost manifest entry, rebalancing and repair all
  // recompute placement: a changed hash would move every object. Update only on purpose.
  const ClusterMap map = makeMap(6, 6);
  CHECK(ids(map, rankDrives(map, "bucket/object#0")) ==
        std::vector<std::string>{"d2", "d1", "d5", "d0", "d3", "d4"});
  CHECK(ids(map, rankDrives(map, "")) ==
        std::vector<std::string>{"d2", "d1", "d4", "d3", "d5", "d0"});
  CHECK(ids(map, rankDrives(map, "a-somewhat-longer-key-of-more-than-16-bytes/7")) ==
        std::vector<std::string>{"d5", "d0", "d1", "d2", "d4", "d3"});
  // A fingerprint of 1000 full rankings over 12 drives.
  const ClusterMap twelve = makeMap(12, 12);
  uint64_t fingerprint = 0;
  for (int i = 0; i < 1000; ++i) {
    for (size_t idx : rankDrives(twelve, keyOf(i))) fingerprint = fingerprint * 31 + idx;
  }
  CHECK(fingerprint == 0x7cdad86e606eea3eull);
}

TEST_CASE("Equal weights spread first choices and whole stripes evenly", "[balance]") {
  const ClusterMap map = makeMap(12, 12);
  checkBalanced(tally(map, 1), 0.05, "choose 1 of 12");
  checkBalanced(tally(map, 6), 0.05, "choose 6 of 12");
}

TEST_CASE("A drive of weight 2 receives about twice the keys") {
  ClusterMap map = makeMap(12, 12);
  map.drives[3].weight = 2.0;
  map.drives[7].weight = 0.5;
  auto hits = tally(map, 1);
  // Shares are weight / total weight = 2/12.5, 0.5/12.5 and 1/12.5.
  double others = 0;
  for (size_t i = 0; i < hits.size(); ++i) {
    if (i != 3 && i != 7) others += hits[i];
  }
  others /= 10;
  const double heavy = hits[3] / others;
  const double light = hits[7] / others;
  std::printf("weighted: weight 2 gets %.3fx, weight 0.5 gets %.3fx of a weight-1 drive\n", heavy,
              light);
  CHECK(heavy == Approx(2.0).epsilon(0.05));
  CHECK(light == Approx(0.5).epsilon(0.05));
}

TEST_CASE("Adding a drive only moves the keys the new drive wins") {
  const ClusterMap before = makeMap(12, 12);
  ClusterMap after = before;
  after.drives.push_back({"d12", "s12", "dom12", 1.0, "", "drives/d12"});
  int moved = 0;
  int stripe_changes = 0;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = keyOf(i);
    std::string a = first(before, key);
    std::string b = first(after, key);
    if (a != b) {
      ++moved;
      REQUIRE(b == "d12");
    }
    // A 6-drive stripe changes by at most one member, and only to take in the new drive.
    auto s1 = ids(before, chooseDrives(before, key, 6).value());
    auto s2 = ids(after, chooseDrives(after, key, 6).value());
    std::vector<std::string> gone;
    std::sort(s1.begin(), s1.end());
    std::sort(s2.begin(), s2.end());
    std::set_difference(s1.begin(), s1.end(), s2.begin(), s2.end(), std::back_inserter(gone));
    REQUIRE(gone.size() <= 1);
    if (!gone.empty()) {
      ++stripe_changes;
      REQUIRE(std::find(s2.begin(), s2.end(), "d12") != s2.end());
    }
  }
  const double fraction = static_cast<double>(moved) / kKeys;
  std::printf(
      "add 13th drive: %.4f of first choices moved (ideal 1/13 = %.4f), "
      "%.4f of 6-drive stripes changed one member (ideal 6/13 = %.4f)\n",
      fraction, 1.0 / 13, static_cast<double>(stripe_changes) / kKeys, 6.0 / 13);
  CHECK(fraction == Approx(1.0 / 13).epsilon(0.05));
  CHECK(static_cast<double>(stripe_changes) / kKeys == Approx(6.0 / 13).epsilon(0.05));
}

TEST_CASE("Removing a drive only moves the keys that drive held") {
  const ClusterMap before = makeMap(12, 12);
  ClusterMap after = before;
  after.drives.erase(after.drives.begin() + 5);
  int moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = keyOf(i);
    std::string a = first(before, key);
    std::string b = first(after, key);
    if (a != b) {
      ++moved;
      REQUIRE(a == "d5");
    }
    REQUIRE((a != "d5" ? a == b : b != "d5"));
  }
  const double fraction = static_cast<double>(moved) / kKeys;
  std::printf("remove 1 of 12 drives: %.4f of first choices moved (ideal 1/12 = %.4f)\n", fraction,
              1.0 / 12);
  CHECK(fraction == Approx(1.0 / 12).epsilon(0.05));
}

TEST_CASE("Changing one drive's weight only moves keys to or from that drive") {
  const ClusterMap before = makeMap(12, 12);
  ClusterMap after = before;
  after.drives[0].weight = 3.0;
  for (int i = 0; i < 20'000; ++i) {
    const std::string key = keyOf(i);
    std::string a = first(before, key);
    std::string b = first(after, key);
    if (a != b) REQUIRE(b == "d0");
  }
}

TEST_CASE("A stripe never puts two fragments in one failure domain") {
  const ClusterMap map = makeMap(12, 6);  // d_i and d_{i+6} share a domain
  for (int i = 0; i < 10'000; ++i) {
    auto r = chooseDrives(map, keyOf(i), 6);
    REQUIRE(r.has_value());
    REQUIRE(r->size() == 6);
    std::set<std::string> domains;
    for (size_t idx : *r) domains.insert(map.drives[idx].domain);
    REQUIRE(domains.size() == 6);
    // Fragment order follows the ranking: the first pick is the top-ranked drive.
    REQUIRE(r->front() == rankDrives(map, keyOf(i)).front());
  }
  auto seven = chooseDrives(map, "k", 7);
  REQUIRE_FALSE(seven.has_value());
  CHECK(seven.error().code() == Status::Code::kUnavailable);
  CHECK(seven.error().retryable());
}

TEST_CASE("Unusable drives are skipped, and the other keys stay put") {
  const ClusterMap map = makeMap(12, 12);
  auto not_d3 = [](const Drive& d) { return d.id != "d3"; };
  int moved = 0;
  for (int i = 0; i < 20'000; ++i) {
    const std::string key = keyOf(i);
    auto all = chooseDrives(map, key, 4).value();
    auto some = chooseDrives(map, key, 4, not_d3).value();
    for (size_t idx : some) REQUIRE(map.drives[idx].id != "d3");
    bool had_d3 = std::find(all.begin(), all.end(), size_t{3}) != all.end();
    if (!had_d3) REQUIRE(all == some);
    moved += had_d3;
  }
  CHECK(moved > 0);
  auto none = chooseDrives(map, "k", 1, [](const Drive&) { return false; });
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code() == Status::Code::kUnavailable);
  auto eleven = chooseDrives(map, "k", 11, not_d3);
  REQUIRE(eleven.has_value());
  CHECK(chooseDrives(map, "k", 12, not_d3).error().code() == Status::Code::kUnavailable);
}

TEST_CASE("Choosing zero drives succeeds and choosing more than exist fails") {
  const ClusterMap map = makeMap(3, 3);
  auto zero = chooseDrives(map, "k", 0);
  REQUIRE(zero.has_value());
  CHECK(zero->empty());
  CHECK(chooseDrives(map, "k", 4).error().code() == Status::Code::kUnavailable);
  CHECK(chooseDrives(ClusterMap{}, "k", 1).error().code() == Status::Code::kUnavailable);
}

TEST_CASE("With domains down, a degraded placement stacks fragments, down to min_domains") {
  // Six servers of one drive each, each its own domain (the cluster-up.sh layout).
  const ClusterMap map = makeMap(6, 6, {4, 2});
  auto up = [](const Drive& d) { return d.id != "d1" && d.id != "d4"; };
  for (int i = 0; i < 2'000; ++i) {
    const std::string key = keyOf(i);
    // Strict by default: four domains cannot hold six fragments.
    CHECK(chooseDrives(map, key, 6, up).error().code() == Status::Code::kUnavailable);
    auto r = chooseDrives(map, key, 6, up, 4);
    REQUIRE(r.has_value());
    REQUIRE(r->size() == 6);
    std::map<size_t, int> per_drive;
    for (size_t idx : *r) {
      REQUIRE(up(map.drives[idx]));
      ++per_drive[idx];
    }
    // All four live drives hold a fragment; two hold a second one.
    REQUIRE(per_drive.size() == 4);
    for (const auto& [idx, n] : per_drive) REQUIRE(n <= 2);
    // The first four follow the ranking of the live drives, then the best two repeat.
    std::vector<size_t> live;
    for (size_t idx : rankDrives(map, key)) {
      if (up(map.drives[idx])) live.push_back(idx);
    }
    REQUIRE(std::vector<size_t>(r->begin(), r->begin() + 4) == live);
    REQUIRE((*r)[4] == live[0]);
    REQUIRE((*r)[5] == live[1]);
  }
  // Three live domains are fewer than min_domains = 4.
  auto three = chooseDrives(map, "k", 6, [](const Drive& d) { return d.id < "d3"; }, 4);
  CHECK(three.error().code() == Status::Code::kUnavailable);
}

TEST_CASE("A degraded placement spreads the extra fragments over the live domains") {
  // Six hosts of three drives, each host its own domain, two hosts down: 4+2 on four
  // domains. No host may hold three fragments (losing it would leave 3 < k).
  const ClusterMap map = makeMap(18, 6, {4, 2});
  auto up = [](const Drive& d) { return d.domain != "dom1" && d.domain != "dom4"; };
  for (int i = 0; i < 2'000; ++i) {
    auto r = chooseDrives(map, keyOf(i), 6, up, 4);
    REQUIRE(r.has_value());
    std::map<std::string, int> per_domain;
    for (size_t idx : *r) {
      REQUIRE(up(map.drives[idx]));
      ++per_domain[map.drives[idx].domain];
    }
    REQUIRE(std::set<size_t>(r->begin(), r->end()).size() == 6);
    REQUIRE(per_domain.size() == 4);
    for (const auto& [domain, n] : per_domain) REQUIRE(n <= 2);
  }
}

TEST_CASE("A degraded placement keeps domains even when they have unequal usable drives") {
  // Six hosts of two drives (dom0: d0, d6; dom1: d1, d7; ...), 4+2. Hosts 4 and 5 are
  // down, and hosts 1-3 have one drive full: dom0 has two usable drives, the others one.
  const ClusterMap map = makeMap(12, 6, {4, 2});
  auto up = [](const Drive& d) {
    return d.domain != "dom4" && d.domain != "dom5" && d.id != "d7" && d.id != "d8" &&
           d.id != "d9";
  };
  for (int i = 0; i < 2'000; ++i) {
    auto r = chooseDrives(map, keyOf(i), 6, up, 4);
    REQUIRE(r.has_value());
    REQUIRE(r->size() == 6);
    std::map<std::string, int> per_domain;
    std::map<size_t, int> per_drive;
    for (size_t idx : *r) {
      REQUIRE(up(map.drives[idx]));
      ++per_domain[map.drives[idx].domain];
      ++per_drive[idx];
    }
    // Losing any one domain still leaves k = 4 fragments.
    for (const auto& [domain, n] : per_domain) REQUIRE(n <= 2);
    // Both of dom0's drives are used before any drive takes a second fragment.
    REQUIRE(per_drive.size() == 5);
  }
}

TEST_CASE("A degraded placement prefers another drive of a used domain to stacking") {
  const ClusterMap map = makeMap(8, 4, {4, 2});  // two drives per domain
  auto r = chooseDrives(map, "k", 6, nullptr, 4);
  REQUIRE(r.has_value());
  std::set<size_t> distinct(r->begin(), r->end());
  CHECK(distinct.size() == 6);  // six different drives, two domains hold two each
}

TEST_CASE("Another drive for a stripe: a free domain, the best ranked usable one") {
  const ClusterMap map = makeMap(12, 6, {4, 2});  // dom<i % 6>: two drives per domain
  for (int i = 0; i < 500; ++i) {
    const std::string key = keyOf(i);
    auto r = chooseDrives(map, key, 6);
    REQUIRE(r.has_value());
    // Fragment 0's drive failed: the other five stay, its own domain is free again.
    std::vector<std::string> holding = ids(map, {r->begin() + 1, r->end()});
    const std::string failed = map.drives[(*r)[0]].id;
    auto usable = [&](const Drive& d) { return d.id != failed; };
    auto other = chooseAnotherDrive(map, key, holding, usable, false);
    REQUIRE(other.has_value());
    // The only free domain is the failed drive's: its other drive.
    CHECK(map.drives[*other].domain == map.drives[(*r)[0]].domain);
    CHECK(map.drives[*other].id != failed);
    // It is the first usable drive of that domain in rank order.
    for (size_t idx : rankDrives(map, key)) {
      if (map.drives[idx].domain == map.drives[*other].domain && usable(map.drives[idx])) {
        CHECK(idx == *other);
        break;
      }
    }
  }
}

TEST_CASE("Another drive for a stripe with no free domain: only when degraded, least loaded") {
  const ClusterMap map = makeMap(12, 6, {4, 2});
  const std::string key = keyOf(7);
  auto r = chooseDrives(map, key, 6);
  REQUIRE(r.has_value());
  std::vector<std::string> holding = ids(map, *r);  // every domain holds one already
  // A seventh fragment's drive: none in a free domain.
  CHECK_FALSE(chooseAnotherDrive(map, key, holding, nullptr, false).has_value());
  auto other = chooseAnotherDrive(map, key, holding, nullptr, true);
  REQUIRE(other.has_value());
  // A drive holding none of the stripe: each domain has one that holds none.
  CHECK(std::find(holding.begin(), holding.end(), map.drives[*other].id) == holding.end());
  // With two fragments in one domain, the choice avoids that domain.
  holding.push_back(map.drives[*other].id);
  auto third = chooseAnotherDrive(map, key, holding, nullptr, true);
  REQUIRE(third.has_value());
  CHECK(map.drives[*third].domain != map.drives[*other].domain);
  // Nothing usable: none.
  CHECK_FALSE(chooseAnotherDrive(map, key, holding, [](const Drive&) { return false; }, true)
                  .has_value());
  // A drive the map does not know counts as a domain of its own: beside one fragment in
  // each real domain, it takes no domain's place, and the choice is still degraded.
  std::vector<std::string> all_and_gone = ids(map, *r);
  all_and_gone.push_back("gone");
  CHECK_FALSE(chooseAnotherDrive(map, key, all_and_gone, nullptr, false).has_value());
  auto any = chooseAnotherDrive(map, key, all_and_gone, nullptr, true);
  REQUIRE(any.has_value());
  CHECK(std::find(all_and_gone.begin(), all_and_gone.end(), map.drives[*any].id) ==
        all_and_gone.end());
}

TEST_CASE("A stripe is spread as chooseDrives spreads one: k domains, none over its share") {
  const ClusterMap map = makeMap(12, 6, {4, 2});  // d<i> in dom<i % 6>
  using V = std::vector<std::string>;
  CHECK(spreadLikeChooseDrives(map, V{"d0", "d1", "d2", "d3", "d4", "d5"}, 6, 4));
  // Degraded: two domains hold two each (6 over 4 domains: a share of 2).
  CHECK(spreadLikeChooseDrives(map, V{"d0", "d6", "d1", "d7", "d2", "d3"}, 6, 4));
  // Four domains, one holding three: losing it would leave 3 < k.
  CHECK_FALSE(spreadLikeChooseDrives(map, V{"d0", "d6", "d0", "d1", "d2", "d3"}, 6, 4));
  // Three domains: fewer than k.
  CHECK_FALSE(spreadLikeChooseDrives(map, V{"d0", "d6", "d1", "d7", "d2", "d8"}, 6, 4));
  // Placed so far (a fragment waits for another drive): the share is of the whole stripe.
  CHECK(spreadLikeChooseDrives(map, V{"d0", "d6", "d1", "d2", "d3"}, 6, 4));
  // An id the map does not know is a domain of its own.
  CHECK(spreadLikeChooseDrives(map, V{"d0", "d1", "d2", "gone"}, 6, 4));
  CHECK_FALSE(spreadLikeChooseDrives(map, V{}, 6, 4));
}

TEST_CASE("A draining drive is never chosen, and the others keep their keys") {
  ClusterMap map = makeMap(8, 8, {4, 2});
  ClusterMap drained = map;
  drained.drives[3].draining = true;
  for (int i = 0; i < 2'000; ++i) {
    auto before = chooseDrives(map, keyOf(i), 6);
    auto after = chooseDrives(drained, keyOf(i), 6);
    REQUIRE(before.has_value());
    REQUIRE(after.has_value());
    REQUIRE(std::find(after->begin(), after->end(), size_t{3}) == after->end());
    // Only the stripes d3 was in change, as if it had left the map.
    if (std::find(before->begin(), before->end(), size_t{3}) == before->end()) {
      REQUIRE(*after == *before);
    }
    std::vector<std::string> holding = ids(drained, {after->begin(), after->begin() + 5});
    auto other = chooseAnotherDrive(drained, keyOf(i), holding, nullptr, true);
    REQUIRE(other.has_value());
    REQUIRE(*other != 3);
  }
  // Nothing but draining drives: no placement.
  for (auto& d : drained.drives) d.draining = true;
  CHECK_FALSE(chooseDrives(drained, "k", 1).has_value());
  CHECK_FALSE(chooseAnotherDrive(drained, "k", {}, nullptr, true).has_value());
}

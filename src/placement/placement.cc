// Weighted rendezvous hashing. The hash and the score are part of the on-disk contract
// (moving them moves every stored fragment): see docs/ec-placement.md before changing them.
#include "granary/placement/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace granary::placement {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kKeySeed = 0x6772616E61727931ull;  // "granary1"

// SplitMix64's finalizer: a bijection with full avalanche.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Absorbs the bytes 8 at a time (little-endian, the last word zero-padded), mixing after
// every word, then folds in the length. Byte order is fixed so results match on every host.
uint64_t hashBytes(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  size_t i = 0;
  while (i < bytes.size()) {
    uint64_t word = 0;
    for (size_t b = 0; b < 8 && i < bytes.size(); ++b, ++i) {
      word |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * b);
    }
    h = mix64((h ^ word) + kGolden);
  }
  return mix64((h ^ bytes.size()) + kGolden);
}

// -weight / ln(u) with u = hash(key, drive id) mapped into (0, 1]: the top 53 bits plus a
// half step, so u is never 0. (For h >> 11 = 2^53 - 1 the sum rounds to 2^53 and u is 1:
// the score is -inf, last; once in 2^53 pairs, and the pinned format keeps it.) Of two
// drives, the one with the higher score wins.
double score(uint64_t key_hash, const Drive& drive) {
  const uint64_t h = hashBytes(drive.id, key_hash);
  const double u = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
  return -drive.weight / std::log(u);
}

}  // namespace

std::vector<size_t> rankDrives(const ClusterMap& map, std::string_view key) {
  const uint64_t key_hash = hashBytes(key, kKeySeed);
  std::vector<std::pair<double, size_t>> scored;
  scored.reserve(map.drives.size());
  for (size_t i = 0; i < map.drives.size(); ++i) {
    scored.emplace_back(score(key_hash, map.drives[i]), i);
  }
  std::sort(scored.begin(), scored.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    const std::string& ida = map.drives[a.second].id;
    const std::string& idb = map.drives[b.second].id;
    if (ida != idb) return ida < idb;
    return a.second < b.second;  // only for maps that were never validated
  });
  std::vector<size_t> order;
  order.reserve(scored.size());
  for (const auto& s : scored) order.push_back(s.second);
  return order;
}

Result<std::vector<size_t>> chooseDrives(const ClusterMap& map, std::string_view key, size_t count,
                                         const std::function<bool(const Drive&)>& usable,
                                         size_t min_domains) {
  std::vector<size_t> chosen;
  if (count == 0) return chosen;
  std::vector<size_t> usable_order;  // usable drives, best first
  for (size_t idx : rankDrives(map, key)) {
    const Drive& d = map.drives[idx];
    if (!d.draining && (!usable || usable(d))) usable_order.push_back(idx);
  }
  // Pass 1: one drive per failure domain.
  std::vector<std::string_view> domains;
  for (size_t idx : usable_order) {
    const Drive& d = map.drives[idx];
    if (std::find(domains.begin(), domains.end(), d.domain) != domains.end()) continue;
    chosen.push_back(idx);
    domains.push_back(d.domain);
    if (chosen.size() == count) return chosen;
  }
  if (chosen.size() < std::min(min_domains, count)) {
    return fail(Status::unavailable(
        "placement: need " + std::to_string(std::min(min_domains, count)) +
        " usable drives in distinct failure domains, found " + std::to_string(chosen.size())));
  }
  // Degraded (docs/ec-placement.md, "Fewer failure domains than fragments"): each further
  // fragment goes to a domain holding the fewest so far, there to a drive holding the
  // fewest of the stripe (another drive of the domain before a chosen one again), the
  // best ranked of those; so no domain holds more than its share, however many usable
  // drives each has.
  std::vector<size_t> load(domains.size(), 1);  // fragments per domain of `domains`
  std::vector<size_t> on_drive(map.drives.size(), 0);  // fragments per drive
  for (size_t idx : chosen) on_drive[idx] = 1;
  auto domainOf = [&](size_t idx) {
    return static_cast<size_t>(
        std::find(domains.begin(), domains.end(), map.drives[idx].domain) - domains.begin());
  };
  auto fewer = [&](size_t a, size_t b) {  // drive indices; true if `a` should come first
    const size_t la = load[domainOf(a)], lb = load[domainOf(b)];
    return la != lb ? la < lb : on_drive[a] < on_drive[b];
  };
  while (chosen.size() < count) {
    std::optional<size_t> best;  // a drive index; usable_order is best ranked first
    for (size_t idx : usable_order) {
      if (!best || fewer(idx, *best)) best = idx;
    }
    if (!best) return fail(Status::unavailable("placement: no usable drive"));
    chosen.push_back(*best);
    ++load[domainOf(*best)];
    ++on_drive[*best];
  }
  return chosen;
}

std::optional<size_t> chooseAnotherDrive(const ClusterMap& map, std::string_view key,
                                         std::span<const std::string> holding,
                                         const std::function<bool(const Drive&)>& usable,
                                         bool degraded) {
  std::map<std::string_view, size_t> domain_load;
  std::map<std::string_view, size_t> drive_load;
  for (const std::string& id : holding) {
    ++domain_load[map.domainOf(id)];
    ++drive_load[id];
  }
  auto loadOf = [](const std::map<std::string_view, size_t>& m, std::string_view k) {
    auto it = m.find(k);
    return it == m.end() ? size_t{0} : it->second;
  };
  auto cost = [&](const Drive& d) {
    return std::pair{loadOf(domain_load, d.domain), loadOf(drive_load, d.id)};
  };
  std::optional<size_t> best;
  std::pair<size_t, size_t> best_cost;
  for (size_t idx : rankDrives(map, key)) {
    const Drive& d = map.drives[idx];
    const auto c = cost(d);
    if (c.first > 0 && !degraded) continue;
    if (best && c >= best_cost) continue;  // equals: the best ranked, seen first, stays
    if (d.draining || (usable && !usable(d))) continue;
    best = idx;
    best_cost = c;
    if (c.first == 0) break;  // a free domain: nothing ranked lower beats it
  }
  return best;
}

bool spreadLikeChooseDrives(const ClusterMap& map, std::span<const std::string> drives,
                            size_t fragments, size_t min_domains) {
  std::map<std::string_view, size_t> load;
  for (const std::string& id : drives) {
    ++load[map.domainOf(id)];
  }
  if (load.empty() || load.size() < min_domains) return false;
  const size_t share = (fragments + load.size() - 1) / load.size();
  return std::all_of(load.begin(), load.end(), [&](const auto& l) { return l.second <= share; });
}

}  // namespace granary::placement

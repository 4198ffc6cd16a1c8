// Weighted rendezvous (HRW) placement.
//
// For a placement key (e.g. the object version id + stripe number), every drive gets the
// score  -weight / ln(u)  with u = hash(key, drive id) mapped into (0, 1)  (the
// "logarithmic method" of weighted rendezvous hashing, as in Ceph's straw2), and drives
// are ranked by score. Deterministic: the same map and key always give the same order.
// Adding or removing a drive only moves the keys that the drive wins or loses.
// Pure functions; thread safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/status.h"
#include "granary/placement/cluster_map.h"

namespace granary::placement {

// Every drive of the map, best first, as indices into map.drives.
std::vector<size_t> rankDrives(const ClusterMap& map, std::string_view key);

// Chooses `count` drives for one stripe: walks rankDrives() order, skipping draining
// drives, drives for which `usable` returns false and drives whose failure domain already
// holds a chosen drive. Returns indices into map.drives, in fragment order.
//
// With fewer usable failure domains than `count`, but at least `min_domains` of them (a
// degraded write: servers are down), the remaining fragments go, in rank order, first to
// other usable drives of the domains already used, then to the chosen drives again (one
// drive then holds more than one fragment of the stripe). kUnavailable if fewer than
// min(count, min_domains) usable domains exist. The default min_domains = count refuses
// every degraded placement.
Result<std::vector<size_t>> chooseDrives(
    const ClusterMap& map, std::string_view key, size_t count,
    const std::function<bool(const Drive&)>& usable = nullptr,
    size_t min_domains = SIZE_MAX);

// A drive for one more fragment of a stripe (a rebuilt one, or one whose write failed)
// whose other fragments are on `holding` (drive ids, one per fragment, repeats allowed; an
// id the map does not know is a domain of its own, ClusterMap::domainOf). The best ranked
// usable drive (never a draining one) in a failure domain that holds none of them;
// failing that, with `degraded`, a usable drive in the domain holding the fewest, there
// one holding the fewest of the stripe, the best ranked of equals (chooseDrives' degraded
// rule). nullopt if no drive qualifies.
std::optional<size_t> chooseAnotherDrive(const ClusterMap& map, std::string_view key,
                                         std::span<const std::string> holding,
                                         const std::function<bool(const Drive&)>& usable,
                                         bool degraded);

// Whether a stripe of `fragments` fragments, those placed on `drives` (one id per
// fragment; an id the map does not know is a domain of its own), is spread as chooseDrives
// spreads one: over `min_domains` failure domains or more, none holding more than its even
// share of the stripe, ceil(fragments / domains). (A degraded write then loses no more
// than that share with any one domain.)
bool spreadLikeChooseDrives(const ClusterMap& map, std::span<const std::string> drives,
                            size_t fragments, size_t min_domains);

}  // namespace granary::placement

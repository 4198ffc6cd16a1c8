// The cluster map: which drives exist, on which servers and failure domains, with which
// weights, and the EC profile new objects use. Versioned by `epoch`: every change bumps it.
//
// JSON form (docs/architecture.md, "Cluster map"):
// {
//   "epoch": 1,
//   "index": "127.0.0.1:9300",      (cluster mode only: the index service)
//   "ec": {"k": 4, "m": 2},
//   "drives": [
//     {"id": "d0", "server": "local", "domain": "d0", "weight": 1.0,
//      "endpoint": "", "path": "drives/d0"}, ...
//   ]
// }
// Drive ids are unique, non-empty strings of [A-Za-z0-9._-]; weights are > 0. A drive may
// say "draining": true (being emptied before it leaves the map: placement never chooses
// it, reads go on, a rebalance moves its fragments off).
// Value type: copyable, no thread-safety needs beyond const access.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/status.h"
#include "granary/ec/erasure_code.h"

namespace granary::placement {

struct Drive {
  std::string id;        // stable drive id, recorded in manifests
  std::string server;    // chunk server that owns the drive
  std::string domain;    // failure domain (host, rack, ...): at most one fragment per stripe
  double weight = 1.0;   // relative capacity
  std::string endpoint;  // chunk server address for remote access ("" = in-process)
  std::string path;      // directory of the drive on its server
  bool draining = false;  // never chosen for a fragment; rebalance empties it
  bool operator==(const Drive&) const = default;
};

struct ClusterMap {
  uint64_t epoch = 1;
  std::string index_endpoint;  // "HOST:PORT" of `granary index`; "" = embedded (serve)
  ec::EcProfile ec;
  std::vector<Drive> drives;

  // Parses and validates (unique ids, weights > 0, k + m <= number of failure domains).
  static Result<ClusterMap> fromJson(std::string_view json);
  std::string toJson() const;

  const Drive* findDrive(std::string_view id) const;
  // The failure domain of drive `id`; a drive the map does not know (taken out of it) is a
  // domain of its own, named by its id. A view into this map or into `id`.
  std::string_view domainOf(std::string_view id) const;
  size_t domainCount() const;
};

}  // namespace granary::placement

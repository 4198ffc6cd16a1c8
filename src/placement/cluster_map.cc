// ClusterMap <-> JSON. The format is documented in docs/ec-placement.md. Neither direction
// throws: every problem comes back as kInvalidArgument naming the offending field.
#include "granary/placement/cluster_map.h"

#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <utility>

namespace granary::placement {
namespace {

using Json = nlohmann::json;

Status bad(std::string message) { return Status::invalidArgument("cluster map: " + message); }

bool validId(std::string_view id) {
  if (id.empty()) return false;
  for (char c : id) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Unknown keys are rejected so that a typo ("wieght") is not silently ignored.
Status checkKeys(const Json& obj, std::initializer_list<std::string_view> allowed,
                 const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (!known) return bad(where + ": unknown field \"" + key + "\"");
  }
  return Status::ok();
}

Result<std::string> stringField(const Json& obj, const char* name, const std::string& where,
                                bool required) {
  auto it = obj.find(name);
  if (it == obj.end()) {
    if (required) return fail(bad(where + ": missing field \"" + name + "\""));
    return std::string();
  }
  if (!it->is_string()) return fail(bad(where + ": \"" + name + "\" must be a string"));
  return it->get<std::string>();
}

Result<uint8_t> fragmentCount(const Json& ec, const char* name) {
  auto it = ec.find(name);
  if (it == ec.end()) return fail(bad(std::string("ec: missing field \"") + name + "\""));
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 255) {
    return fail(bad(std::string("ec.") + name + " must be an integer in 0..255"));
  }
  return static_cast<uint8_t>(it->get<int64_t>());
}

Result<Drive> parseDrive(const Json& d, size_t index) {
  const std::string where = "drives[" + std::to_string(index) + "]";
  if (!d.is_object()) return fail(bad(where + " must be an object"));
  Status keys = checkKeys(
      d, {"id", "server", "domain", "weight", "endpoint", "path", "draining"}, where);
  if (!keys.isOk()) return fail(keys);
  Drive drive;
  auto id = stringField(d, "id", where, true);
  if (!id) return fail(id.error());
  if (!validId(*id)) {
    return fail(bad(where + ": id \"" + *id + "\" must be non-empty and use only [A-Za-z0-9._-]"));
  }
  drive.id = *id;
  const std::string named = where + " (\"" + drive.id + "\")";
  using Field = std::pair<const char*, std::string*>;
  for (Field f : {Field{"server", &drive.server}, Field{"domain", &drive.domain}}) {
    auto value = stringField(d, f.first, named, true);
    if (!value) return fail(value.error());
    if (value->empty()) return fail(bad(named + ": \"" + f.first + "\" must not be empty"));
    *f.second = std::move(*value);
  }
  for (Field f : {Field{"endpoint", &drive.endpoint}, Field{"path", &drive.path}}) {
    auto value = stringField(d, f.first, named, false);
    if (!value) return fail(value.error());
    *f.second = std::move(*value);
  }
  if (auto w = d.find("weight"); w != d.end()) {
    if (!w->is_number() || !std::isfinite(w->get<double>()) || w->get<double>() <= 0) {
      return fail(bad(named + ": weight must be a number > 0"));
    }
    drive.weight = w->get<double>();
  }
  if (auto dr = d.find("draining"); dr != d.end()) {
    if (!dr->is_boolean()) return fail(bad(named + ": draining must be true or false"));
    drive.draining = dr->get<bool>();
  }
  return drive;
}

Status validate(const ClusterMap& map) {
  if (map.ec.k < 1) return bad("ec.k must be at least 1");
  if (map.ec.total() > ec::kMaxFragments) {
    return bad("ec.k + ec.m must be at most " + std::to_string(ec::kMaxFragments));
  }
  std::set<std::string_view> ids;
  std::map<std::string_view, std::string_view> domain_of_endpoint;
  for (const Drive& d : map.drives) {
    if (!ids.insert(d.id).second) return bad("duplicate drive id \"" + d.id + "\"");
    // One chunk server is one process on one host: it fails as a whole, so its drives in
    // two failure domains would let one failure take two fragments of a stripe.
    if (d.endpoint.empty()) continue;  // in-process (serve): one drive, one domain
    auto [it, added] = domain_of_endpoint.emplace(d.endpoint, d.domain);
    if (!added && it->second != d.domain) {
      return bad("drive \"" + d.id + "\": chunk server " + d.endpoint + " is in domain \"" +
                 std::string(it->second) + "\" already; one server's drives share a domain");
    }
  }
  if (static_cast<size_t>(map.ec.total()) > map.domainCount()) {
    return bad("ec.k + ec.m = " + std::to_string(map.ec.total()) +
               " needs that many failure domains, the map has " +
               std::to_string(map.domainCount()));
  }
  // Draining drives take no fragments: with fewer than k domains left, nothing could be
  // written (with fewer than k + m, new stripes are degraded: allowed, documented).
  std::set<std::string_view> placeable;
  for (const Drive& d : map.drives) {
    if (!d.draining) placeable.insert(d.domain);
  }
  if (placeable.size() < static_cast<size_t>(map.ec.k)) {
    return bad("ec.k = " + std::to_string(map.ec.k) + " needs that many failure domains " +
               "with a drive that is not draining, the map has " +
               std::to_string(placeable.size()));
  }
  return Status::ok();
}

}  // namespace

Result<ClusterMap> ClusterMap::fromJson(std::string_view text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return fail(bad(std::string("not valid JSON: ") + e.what()));
  }
  if (!root.is_object()) return fail(bad("top level must be an object"));
  if (Status st = checkKeys(root, {"epoch", "ec", "drives", "index"}, "top level"); !st.isOk()) {
    return fail(st);
  }
  ClusterMap map;
  auto epoch = root.find("epoch");
  if (epoch == root.end()) return fail(bad("missing field \"epoch\""));
  if (!epoch->is_number_unsigned()) return fail(bad("epoch must be a non-negative integer"));
  map.epoch = epoch->get<uint64_t>();

  auto index = stringField(root, "index", "top level", false);
  if (!index) return fail(index.error());
  map.index_endpoint = std::move(*index);

  auto ec = root.find("ec");
  if (ec == root.end()) return fail(bad("missing field \"ec\""));
  if (!ec->is_object()) return fail(bad("ec must be an object"));
  if (Status st = checkKeys(*ec, {"k", "m"}, "ec"); !st.isOk()) return fail(st);
  auto k = fragmentCount(*ec, "k");
  if (!k) return fail(k.error());
  auto m = fragmentCount(*ec, "m");
  if (!m) return fail(m.error());
  map.ec = {*k, *m};

  auto drives = root.find("drives");
  if (drives == root.end()) return fail(bad("missing field \"drives\""));
  if (!drives->is_array()) return fail(bad("drives must be an array"));
  for (size_t i = 0; i < drives->size(); ++i) {
    auto drive = parseDrive((*drives)[i], i);
    if (!drive) return fail(drive.error());
    map.drives.push_back(std::move(*drive));
  }
  if (Status st = validate(map); !st.isOk()) return fail(st);
  return map;
}

std::string ClusterMap::toJson() const {
  nlohmann::ordered_json drives = nlohmann::ordered_json::array();
  for (const Drive& d : this->drives) {
    drives.push_back({{"id", d.id},
                      {"server", d.server},
                      {"domain", d.domain},
                      {"weight", d.weight},
                      {"endpoint", d.endpoint},
                      {"path", d.path}});
    if (d.draining) drives.back()["draining"] = true;  // absent: the usual case
  }
  nlohmann::ordered_json root;
  root["epoch"] = epoch;
  if (!index_endpoint.empty()) root["index"] = index_endpoint;
  root["ec"] = {{"k", ec.k}, {"m", ec.m}};
  root["drives"] = std::move(drives);
  // Replace invalid UTF-8 rather than throw: a hand-built map may hold arbitrary bytes.
  return root.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

const Drive* ClusterMap::findDrive(std::string_view id) const {
  for (const Drive& d : drives) {
    if (d.id == id) return &d;
  }
  return nullptr;
}

std::string_view ClusterMap::domainOf(std::string_view id) const {
  const Drive* d = findDrive(id);
  return d != nullptr ? std::string_view(d->domain) : id;
}

size_t ClusterMap::domainCount() const {
  std::set<std::string_view> domains;
  for (const Drive& d : drives) domains.insert(d.domain);
  return domains.size();
}

}  // namespace granary::placement

// The internal chunk API's own wire format (docs/internal-api.md): paths, blob
// descriptors and JSON bodies; signing and errors are rpc/wire.h's.
#include "internal_http.h"

#include <nlohmann/json.hpp>

#include "granary/common/hex.h"

namespace granary::chunkstore::internal {

namespace {

constexpr std::string_view kDrivesSegment = "/drives/";

// Runs `fn` on a parsed JSON document, turning any parse or type error into kIoError
// (a malformed body from the server is a transport-level failure).
template <typename T, typename F>
Result<T> fromJson(std::string_view text, F fn) {
  try {
    return fn(nlohmann::json::parse(text));
  } catch (const std::exception& e) {
    return fail(Status::ioError(std::string("malformed internal API body: ") + e.what()));
  }
}

}  // namespace

std::string blobIdHex(const BlobId& id) { return toHex(id.encode()); }

Result<BlobId> parseBlobIdHex(std::string_view hex) {
  auto raw = fromHex(hex);
  if (!raw || raw->size() != BlobId::kEncodedSize) {
    return fail(Status::invalidArgument("bad blob id '" + std::string(hex) + "'"));
  }
  return BlobId::decode(*raw);
}

std::string drivesPath() { return std::string(kPrefix) + "/drives"; }
std::string healthPath() { return std::string(kPrefix) + "/health"; }
std::string statsPath(std::string_view drive) {
  return std::string(kPrefix) + std::string(kDrivesSegment) + percentEncode(drive) + "/stats";
}
std::string blobListPath(std::string_view drive) {
  return std::string(kPrefix) + std::string(kDrivesSegment) + percentEncode(drive) + "/blobs";
}
std::string blobPath(std::string_view drive, const BlobId& id) {
  return blobListPath(drive) + "/" + blobIdHex(id);
}

Result<Route> parseRoute(std::string_view path) {
  auto bad = [&] {
    return fail(Status::invalidArgument("no such internal API path '" + std::string(path) + "'"));
  };
  if (!path.starts_with(kPrefix)) return bad();
  std::string_view rest = path.substr(kPrefix.size());
  Route route;
  if (rest == "/health") return route;
  if (rest == "/drives") {
    route.kind = Route::Kind::kDrives;
    return route;
  }
  if (!rest.starts_with(kDrivesSegment)) return bad();
  rest.remove_prefix(kDrivesSegment.size());
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0) return bad();
  auto drive = percentDecode(rest.substr(0, slash));
  if (!drive) return bad();
  route.drive = std::move(*drive);
  rest.remove_prefix(slash);
  if (rest == "/stats") {
    route.kind = Route::Kind::kStats;
  } else if (rest == "/blobs") {
    route.kind = Route::Kind::kBlobList;
  } else if (rest.starts_with("/blobs/")) {
    auto id = parseBlobIdHex(rest.substr(7));
    if (!id) return fail(id.error());
    route.kind = Route::Kind::kBlob;
    route.id = *id;
  } else {
    return bad();
  }
  return route;
}

Headers descriptorHeaders(const BlobDescriptor& desc) {
  return {{std::string(kEcHeader), std::to_string(desc.ec.k) + "+" + std::to_string(desc.ec.m)},
          {std::string(kStripeLenHeader), std::to_string(desc.stripe_data_len)},
          {std::string(kBucketHeader), percentEncode(desc.bucket)},
          {std::string(kKeyHeader), percentEncode(desc.key)},
          {std::string(kFlagsHeader), std::to_string(desc.flags)}};
}

Result<BlobDescriptor> parseDescriptor(const BlobId& id, const Headers& headers) {
  BlobDescriptor desc;
  desc.id = id;
  auto ec = findHeader(headers, kEcHeader);
  auto stripe = findHeader(headers, kStripeLenHeader);
  auto bucket = findHeader(headers, kBucketHeader);
  auto key = findHeader(headers, kKeyHeader);
  if (!ec || !stripe || !bucket || !key) {
    return fail(Status::invalidArgument("blob descriptor headers missing"));
  }
  size_t plus = ec->find('+');
  if (plus == std::string_view::npos) return fail(Status::invalidArgument("malformed x-granary-ec"));
  auto k = parseU64(ec->substr(0, plus));
  auto m = parseU64(ec->substr(plus + 1));
  auto len = parseU64(*stripe);
  auto b = percentDecode(*bucket);
  auto kk = percentDecode(*key);
  if (!k || !m || *k > 255 || *m > 255 || !len || !b || !kk) {
    return fail(Status::invalidArgument("malformed blob descriptor headers"));
  }
  desc.ec = {static_cast<uint8_t>(*k), static_cast<uint8_t>(*m)};
  desc.stripe_data_len = *len;
  desc.bucket = std::move(*b);
  desc.key = std::move(*kk);
  if (auto flags = findHeader(headers, kFlagsHeader)) {
    auto f = parseU64(*flags);
    if (!f || *f > 0xffff) return fail(Status::invalidArgument("malformed x-granary-flags"));
    desc.flags = static_cast<uint16_t>(*f);
  }
  return desc;
}

std::string encodeBlobList(const std::vector<BlobInfo>& blobs) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& b : blobs) {
    arr.push_back({{"id", blobIdHex(b.id)}, {"length", b.length},
                   {"created_ns", b.created_unix_nanos}});
  }
  return nlohmann::json{{"blobs", std::move(arr)}}.dump();
}

Result<std::vector<BlobInfo>> decodeBlobList(std::string_view json) {
  return fromJson<std::vector<BlobInfo>>(json, [](const nlohmann::json& j) {
    std::vector<BlobInfo> out;
    for (const auto& e : j.at("blobs")) {
      auto id = parseBlobIdHex(e.at("id").get<std::string>());
      if (!id) throw std::runtime_error(id.error().message());
      out.push_back({*id, e.at("length").get<uint64_t>(), e.at("created_ns").get<int64_t>()});
    }
    return out;
  });
}

namespace {
// Every DriveStats field on the wire, by name: encode and decode share this one table.
constexpr std::pair<const char*, uint64_t DriveStats::*> kStatsFields[] = {
    {"blobs", &DriveStats::blobs},
    {"payload_bytes", &DriveStats::payload_bytes},
    {"disk_bytes", &DriveStats::disk_bytes},
    {"reserved_bytes", &DriveStats::reserved_bytes},
    {"spare_zeroed_bytes", &DriveStats::spare_zeroed_bytes},
    {"open_descriptors", &DriveStats::open_descriptors},
    {"descriptors_closed", &DriveStats::descriptors_closed},
    {"unreclaimed_extents", &DriveStats::unreclaimed_extents},
    {"commit_batches", &DriveStats::commit_batches},
    {"committed_puts", &DriveStats::committed_puts},
    {"scrub_passes", &DriveStats::scrub_passes},
    {"scrubbed_bytes", &DriveStats::scrubbed_bytes},
    {"corrupt_blobs", &DriveStats::corrupt_blobs},
    {"crc_cache_hits", &DriveStats::crc_cache_hits},
    {"crc_cache_misses", &DriveStats::crc_cache_misses},
    {"crc_cache_bytes", &DriveStats::crc_cache_bytes},
    {"index_cache_hits", &DriveStats::index_cache_hits},
    {"index_cache_misses", &DriveStats::index_cache_misses},
    {"index_cache_bytes", &DriveStats::index_cache_bytes},
    {"verified_hits", &DriveStats::verified_hits},
    {"verified_admitted", &DriveStats::verified_admitted},
    {"verified_blobs", &DriveStats::verified_blobs},
    {"verified_bytes", &DriveStats::verified_bytes},
    {"capacity_bytes", &DriveStats::capacity_bytes},
    {"available_bytes", &DriveStats::available_bytes},
    {"filesystem_id", &DriveStats::filesystem_id},
    {"opened_unix_nanos", &DriveStats::opened_unix_nanos},
};
// A field added to DriveStats must be added to the table (and to docs/internal-api.md).
static_assert(sizeof(DriveStats) ==
              std::size(kStatsFields) * sizeof(uint64_t) + sizeof(std::vector<BlobId>));
}  // namespace

std::string encodeStats(const DriveStats& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, field] : kStatsFields) j[name] = s.*field;
  nlohmann::json ids = nlohmann::json::array();
  for (const auto& id : s.corrupt_ids) ids.push_back(blobIdHex(id));
  j["corrupt_ids"] = std::move(ids);
  return j.dump();
}

Result<DriveStats> decodeStats(std::string_view json) {
  return fromJson<DriveStats>(json, [](const nlohmann::json& j) {
    DriveStats s;
    // A field an older server does not send stays 0.
    for (const auto& [name, field] : kStatsFields) s.*field = j.value(name, uint64_t{0});
    if (auto ids = j.find("corrupt_ids"); ids != j.end()) {
      for (const auto& hex : *ids) {
        auto id = parseBlobIdHex(hex.get<std::string>());
        if (!id) throw std::runtime_error("bad blob id in corrupt_ids");
        s.corrupt_ids.push_back(*id);
      }
    }
    return s;
  });
}

std::string encodeDrives(const std::vector<DriveState>& drives) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& d : drives) arr.push_back({{"id", d.id}, {"writable", d.writable}});
  return nlohmann::json{{"drives", std::move(arr)}}.dump();
}

Result<std::vector<DriveState>> decodeDrives(std::string_view json) {
  return fromJson<std::vector<DriveState>>(json, [](const nlohmann::json& j) {
    std::vector<DriveState> out;
    for (const auto& e : j.at("drives")) {
      out.push_back({e.at("id").get<std::string>(), e.at("writable").get<bool>()});
    }
    return out;
  });
}

}  // namespace granary::chunkstore::internal

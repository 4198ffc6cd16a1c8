// The admin API (/_granary/admin/, docs/operations.md): operator views, SigV4-signed with
// the root user's key. For now: GET /_granary/admin/stats.
#include <nlohmann/json.hpp>

#include "handlers.h"

namespace granary::gateway {

Task<S3Response> adminRequest(GatewayContext& ctx, const S3Request& req, std::string& op) {
  if (req.path != "/_granary/admin/stats" || req.method != "GET") {
    op = "Admin";
    S3Response res = errorResponse({S3ErrorCode::kInvalidRequest, "Unknown admin request"}, req);
    res.status = 404;
    co_return res;
  }
  op = "AdminStats";
  nlohmann::json out = nlohmann::json::object();
  Status failed;
  co_await offload(ctx.pool(), [&] {
    auto buckets = ctx.index().listBuckets();
    if (!buckets) {
      failed = buckets.error();
      return 0;
    }
    out["buckets"] = buckets->size();
    const index_kv::RecordIndexStats r = ctx.index().recordIndexStats();
    out["record_index"] = {{"rows", r.rows},
                           {"bytes", r.bytes},
                           {"sets", r.sets},
                           {"dead_sets", r.dead_sets},
                           {"note", "RocksDB estimates; per container: HEAD x-granary-record-count"}};
    nlohmann::json drives = nlohmann::json::array();
    for (const auto& d : ctx.deps.map.drives) {
      nlohmann::json j = {{"id", d.id}};
      if (auto st = ctx.deps.chunks.stats(d.id)) {
        j["blobs"] = st->blobs;
        j["payload_bytes"] = st->payload_bytes;
        j["disk_bytes"] = st->disk_bytes;
        j["capacity_bytes"] = st->capacity_bytes;
        j["available_bytes"] = st->available_bytes;
        j["corrupt_blobs"] = st->corrupt_blobs;
      } else {
        j["error"] = st.error().toString();
      }
      drives.push_back(std::move(j));
    }
    out["drives"] = std::move(drives);
    return 0;
  });
  if (!failed.isOk()) co_return errorResponse(fromStatus(failed), req);
  S3Response res;
  res.set("Content-Type", "application/json");
  res.body = out.dump(2) + "\n";
  co_return res;
}

}  // namespace granary::gateway

// The admin API (/_granary/admin/, docs/operations.md): operator views and user management,
// SigV4-signed with the root user's key (the router refuses everyone else).
//   GET    /_granary/admin/stats
//   GET    /_granary/admin/status
//   POST   /_granary/admin/repair[?dry-run]
//   POST   /_granary/admin/rebalance[?dry-run]
//   GET    /_granary/admin/object?bucket=B&key=K
//   GET    /_granary/admin/users
//   PUT    /_granary/admin/users/<name>   [{"access_key": .., "secret_key": ..}]
//   DELETE /_granary/admin/users/<name>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "granary/common/clock.h"
#include "granary/common/hex.h"
#include "granary/common/random.h"
#include "granary/placement/cluster_map.h"
#include "handlers.h"
#include "uri.h"

namespace granary::gateway {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kUsersPath = "/_granary/admin/users";

S3Response invalid(const S3Request& req, std::string message) {
  return errorResponse({S3ErrorCode::kInvalidArgument, std::move(message)}, req);
}

bool allOf(std::string_view s, bool (*ok)(char)) { return std::all_of(s.begin(), s.end(), ok); }

// IAM's rules: names of 1-64 characters [A-Za-z0-9+=,.@_-]; access keys of 16-128
// characters [A-Za-z0-9_]. Secrets: 8-128 printable ASCII characters, no spaces.
bool validUserName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && allOf(s, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("+=,.@_-").find(c) !=
                                                              std::string_view::npos;
  });
}
bool validAccessKey(std::string_view s) {
  return s.size() >= 16 && s.size() <= 128 && allOf(s, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}
bool validSecretKey(std::string_view s) {
  return s.size() >= 8 && s.size() <= 128 && allOf(s, [](char c) { return c > ' ' && c < 127; });
}

// One drive's figures from its ChunkClient stats (or the error that replaced them).
Json driveJson(GatewayContext& ctx, const placement::Drive& d) {
  Json j = {{"id", d.id}};
  if (auto st = ctx.deps.chunks.stats(d.id)) {
    j["blobs"] = st->blobs;
    j["payload_bytes"] = st->payload_bytes;
    j["disk_bytes"] = st->disk_bytes;
    j["reserved_bytes"] = st->reserved_bytes;
    j["capacity_bytes"] = st->capacity_bytes;
    j["available_bytes"] = st->available_bytes;
    j["corrupt_blobs"] = st->corrupt_blobs;
  } else {
    j["error"] = st.error().toString();
  }
  return j;
}

// The cluster as this gateway sees it: the map's epoch and EC profile, the index's health,
// and per chunk server whether it answers, with its drives' capacity.
Task<S3Response> adminStatus(GatewayContext& ctx) {
  Json out = Json::object();
  co_await offload(ctx.pool(), [&] {
    const auto& map = ctx.deps.map;
    out["epoch"] = map.epoch;
    out["ec"] = {{"k", map.ec.k}, {"m", map.ec.m}};
    auto buckets = ctx.index().listBuckets();
    // Readable is not writable: after a failed WAL sync the index takes no write until it
    // restarts.
    auto commits = ctx.index().commitStats();
    const bool writing = !commits || !commits->failing;
    out["index"] = {{"endpoint", map.index_endpoint.empty() ? "embedded" : map.index_endpoint},
                    {"healthy", buckets.has_value() && writing}};
    if (!buckets) {
      out["index"]["error"] = buckets.error().toString();
    } else if (!writing) {
      out["index"]["error"] = "its latest commit write failed (" +
                              std::to_string(commits->failed_writes) +
                              " failed since it opened): restart the index";
    }
    std::map<std::string, Json> servers;  // by server name, in name order
    std::set<std::string> healthy_domains;
    for (const auto& d : map.drives) {
      Json drive = driveJson(ctx, d);
      drive["domain"] = d.domain;
      const bool up = !drive.contains("error") && ctx.deps.chunks.reachable(d.id);
      drive["writable"] = up && ctx.deps.chunks.writable(d.id);
      if (d.draining) drive["draining"] = true;  // placement leaves it out
      if (up) healthy_domains.insert(d.domain);
      Json& server = servers[d.server];
      if (server.is_null()) {
        server = {{"server", d.server},
                  {"endpoint", d.endpoint.empty() ? "in-process" : d.endpoint},
                  {"healthy", true},
                  {"drives", Json::array()}};
      }
      if (!up) server["healthy"] = false;
      server["drives"].push_back(std::move(drive));
    }
    out["servers"] = Json::array();
    for (auto& [name, server] : servers) out["servers"].push_back(std::move(server));
    out["domains"] = {{"total", map.domainCount()}, {"healthy", healthy_domains.size()}};
    // Whether this gateway runs the GC, sweep, lifecycle and repair passes now (it holds
    // the index's lease; docs/operations.md).
    const auto& leading = ctx.deps.background_leading;
    out["background"] = {{"leading", leading ? leading() : true}};
    return 0;
  });
  co_return jsonResponse(out, 2);
}

// Where an object's fragments are: per stripe, each fragment's drive and blob id (the
// internal API's hex), so that an operator (or a test) can ask the chunk servers.
Task<S3Response> adminObject(GatewayContext& ctx, const S3Request& req) {
  auto bucket = req.queryValue("bucket");
  auto key = req.queryValue("key");
  if (!bucket || !key) co_return invalid(req, "bucket and key are required");
  auto m = co_await offload(ctx.pool(), [&] {
    return ctx.index().getObject(std::string(*bucket), std::string(*key));
  });
  if (!m) co_return errorResponse(fromStatus(m.error()), req);
  Json stripes = Json::array();
  for (const auto& s : m->stripes) {
    Json fragments = Json::array();
    for (size_t j = 0; j < s.drives.size(); ++j) {
      BlobId id{s.blob_version, s.blob_stripe, static_cast<uint16_t>(j)};
      fragments.push_back({{"drive", m->drives[s.drives[j]]}, {"blob", toHex(id.encode())}});
    }
    stripes.push_back({{"data_len", s.data_len},
                       {"fragment_len", s.fragment_len},
                       {"fragments", std::move(fragments)}});
  }
  co_return jsonResponse(Json{{"version", m->version.toHex()},
                              {"size", m->size},
                              {"inline", m->is_inline},
                              {"ec", {{"k", m->ec.k}, {"m", m->ec.m}}},
                              {"stripes", std::move(stripes)}},
                         2);
}

// One repair (or rebalance) pass now, on a worker thread; answers with what it found and
// did.
Task<S3Response> adminRepair(GatewayContext& ctx, const S3Request& req, bool rebalance) {
  const bool dry_run = req.queryValue("dry-run").has_value();
  auto stats = co_await offload(ctx.pool(),
                                [&] { return ctx.repairer.runPass(dry_run, rebalance); });
  if (!stats) co_return errorResponse(fromStatus(stats.error()), req);
  const RepairStats& s = *stats;
  co_return jsonResponse(Json{{"dry_run", dry_run},
                              {"objects", s.objects},
                              {"parts", s.parts},
                              {"stripes", s.stripes},
                              {"fragments_missing", s.fragments_missing},
                              {"fragments_corrupt", s.fragments_corrupt},
                              {"fragments_unreachable", s.fragments_unreachable},
                              {"fragments_stacked", s.fragments_stacked},
                              {"fragments_rebuilt", s.fragments_rebuilt},
                              {"fragments_moved", s.fragments_moved},
                              {"fragments_misplaced", s.fragments_misplaced},
                              {"fragments_rebalanced", s.fragments_rebalanced},
                              {"fragments_draining", s.fragments_draining},
                              {"fragments_drained", s.fragments_drained},
                              {"unrecoverable_stripes", s.unrecoverable_stripes},
                              {"conflicts", s.conflicts},
                              {"errors", s.errors}},
                         2);
}

Task<S3Response> adminStats(GatewayContext& ctx, const S3Request& req) {
  Json out = Json::object();
  Status failed;
  co_await offload(ctx.pool(), [&] {
    auto buckets = ctx.index().listBuckets();
    if (!buckets) {
      failed = buckets.error();
      return 0;
    }
    out["buckets"] = buckets->size();
    auto records = ctx.index().recordIndexStats();
    if (!records) {
      failed = records.error();
      return 0;
    }
    const index_kv::RecordIndexStats& r = *records;
    out["record_index"] = {{"rows", r.rows},
                           {"bytes", r.bytes},
                           {"sets", r.sets},
                           {"dead_sets", r.dead_sets},
                           {"note", "RocksDB estimates; per container: HEAD x-granary-record-count"}};
    Json drives = Json::array();
    for (const auto& d : ctx.deps.map.drives) drives.push_back(driveJson(ctx, d));
    out["drives"] = std::move(drives);
    return 0;
  });
  if (!failed.isOk()) co_return errorResponse(fromStatus(failed), req);
  co_return jsonResponse(out, 2);
}

Task<S3Response> listUsers(GatewayContext& ctx, const S3Request& req) {
  auto users = co_await offload(ctx.pool(), [&] { return ctx.index().listUsers(); });
  if (!users) co_return errorResponse(fromStatus(users.error()), req);
  Json list = Json::array();
  for (const auto& u : *users) {
    list.push_back({{"name", u.name},
                    {"access_key", u.access_key},
                    {"created_unix_nanos", u.created_unix_nanos}});
  }
  co_return jsonResponse(Json{{"users", std::move(list)}}, 2);
}

Task<S3Response> addUser(GatewayContext& ctx, const S3Request& req, std::string name,
                         BodySource& body) {
  if (!validUserName(name) || name == ctx.credentials.root().access_key ||
      name == ctx.credentials.ownerId(ctx.credentials.root().access_key)) {
    co_return invalid(req, "A user name is 1-64 characters of [A-Za-z0-9+=,.@_-]");
  }
  auto text = co_await readSmallBody(req, body, 16 * 1024);
  if (!text) co_return errorResponse(text.error(), req, body);
  index_kv::UserInfo user;
  user.name = std::move(name);
  if (text->find_first_not_of(" \t\r\n") != std::string::npos) {
    Json j = Json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      co_return invalid(req, "The body must be a JSON object");
    }
    // A field misspelt, or not a string, would be ignored and random keys made where the
    // operator believes chosen ones were set.
    for (const auto& [field, value] : j.items()) {
      if (field != "access_key" && field != "secret_key") {
        co_return invalid(req, "Unknown field " + field + ": the body may hold access_key "
                               "and secret_key");
      }
      if (!value.is_string()) co_return invalid(req, field + " must be a string");
    }
    if (j.contains("access_key")) user.access_key = j["access_key"].get<std::string>();
    if (j.contains("secret_key")) user.secret_key = j["secret_key"].get<std::string>();
  }
  if (user.access_key.empty()) user.access_key = "GK" + randomAlphanumeric(ctx.deps.random, 18);
  if (user.secret_key.empty()) user.secret_key = randomAlphanumeric(ctx.deps.random, 40);
  if (!validAccessKey(user.access_key) || user.access_key == ctx.credentials.root().access_key) {
    co_return invalid(req, "An access key is 16-128 characters of [A-Za-z0-9_], not the root's");
  }
  if (!validSecretKey(user.secret_key)) {
    co_return invalid(req, "A secret key is 8-128 printable ASCII characters without spaces");
  }
  user.created_unix_nanos = ctx.deps.clock.nowUnixNanos();
  Status st = co_await offload(ctx.pool(), [&] { return ctx.index().createUser(user); });
  if (st.code() == Status::Code::kAlreadyExists) {
    co_return errorResponse({S3ErrorCode::kEntityAlreadyExists, st.message()}, req);
  }
  if (!st.isOk()) co_return errorResponse(fromStatus(st), req);
  co_await refreshUsers(ctx);
  co_return jsonResponse(Json{{"name", user.name},
                              {"access_key", user.access_key},
                              {"secret_key", user.secret_key}},
                         2);
}

Task<S3Response> removeUser(GatewayContext& ctx, const S3Request& req, std::string name) {
  Status st = co_await offload(ctx.pool(), [&] { return ctx.index().deleteUser(name); });
  if (st.isNotFound()) {
    co_return errorResponse({S3ErrorCode::kNoSuchEntity, "The user does not exist"}, req);
  }
  if (!st.isOk()) co_return errorResponse(fromStatus(st), req);
  if (Status reloaded = co_await refreshUsers(ctx); !reloaded.isOk()) {
    // The user is gone from the index: its key stops working here now, whatever the
    // reload says (the other gateways' periodic reloads drop it too).
    log::warn("admin: reloading users after removing {}: {}", name, reloaded.toString());
    // On the pool: it waits for a reload in progress, which may wait on the index.
    co_await offload(ctx.pool(), [&] {
      ctx.credentials.forget(name);
      return 0;
    });
  }
  S3Response res;
  res.status = 204;
  co_return res;
}

}  // namespace

Status reloadUsers(GatewayContext& ctx) {
  return ctx.credentials.reloadUsers([&] { return ctx.index().listUsers(); });
}

Task<Status> refreshUsers(GatewayContext& ctx) {
  co_return co_await offload(ctx.pool(), [&] { return reloadUsers(ctx); });
}

Task<S3Response> adminRequest(GatewayContext& ctx, const S3Request& req, BodySource& body,
                              std::string& op) {
  const std::string_view path = req.path;
  if (path == "/_granary/admin/object" && req.method == "GET") {
    op = "AdminObject";
    co_return co_await adminObject(ctx, req);
  }
  if (path == "/_granary/admin/repair" && req.method == "POST") {
    op = "AdminRepair";
    co_return co_await adminRepair(ctx, req, false);
  }
  if (path == "/_granary/admin/rebalance" && req.method == "POST") {
    op = "AdminRebalance";
    co_return co_await adminRepair(ctx, req, true);
  }
  if (path == "/_granary/admin/status" && req.method == "GET") {
    op = "AdminStatus";
    co_return co_await adminStatus(ctx);
  }
  if (path == "/_granary/admin/stats" && req.method == "GET") {
    op = "AdminStats";
    co_return co_await adminStats(ctx, req);
  }
  if (path == kUsersPath && req.method == "GET") {
    op = "AdminListUsers";
    co_return co_await listUsers(ctx, req);
  }
  if (path.starts_with(kUsersPath) && path.size() > kUsersPath.size() + 1 &&
      path[kUsersPath.size()] == '/') {
    auto name = percentDecode(path.substr(kUsersPath.size() + 1), false);
    if (!name) co_return invalid(req, "Invalid URI encoding");
    if (req.method == "PUT") {
      op = "AdminAddUser";
      co_return co_await addUser(ctx, req, std::move(*name), body);
    }
    if (req.method == "DELETE") {
      op = "AdminRemoveUser";
      co_return co_await removeUser(ctx, req, std::move(*name));
    }
    op = "Admin";
    co_return errorResponse({S3ErrorCode::kMethodNotAllowed,
                             "A user is added with PUT and removed with DELETE"},
                            req);
  }
  op = "Admin";
  S3Response res = errorResponse({S3ErrorCode::kInvalidRequest, "Unknown admin request"}, req);
  res.status = 404;
  co_return res;
}

}  // namespace granary::gateway

// The chunk server: the internal chunk API (docs/internal-api.md) over a ChunkClient, as
// one rpc::Server handler. Every request runs on the pool; a blob GET goes to the
// backend's asynchronous read and is answered from the I/O engine's completion thread.
#include "granary/chunkstore/chunk_server.h"

#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <span>

#include "granary/chunkstore/chunk_client.h"
#include "granary/ec/erasure_code.h"
#include "granary/rpc/server.h"
#include "internal_http.h"

namespace granary::chunkstore {

using namespace internal;
using rpc::errorReply;
using rpc::jsonReply;
using rpc::methodNotAllowed;
using rpc::Reply;
using rpc::ReplyDone;
using rpc::Request;

namespace {

constexpr size_t kDefaultListLimit = 1000;

class ChunkServerImpl final : public ChunkServer {
 public:
  ChunkServerImpl(const ChunkServerOptions& options, ChunkClient& backend)
      : options_(options), backend_(backend) {}

  Status start(WorkerPool& pool, const Clock& clock) {
    rpc::ServerOptions o;
    o.name = "granary-chunkserver";
    o.listen_host = options_.listen_host;
    o.listen_port = options_.listen_port;
    o.event_loops = options_.event_loops;
    o.cluster_secret = options_.cluster_secret;
    o.idle_timeout_seconds = options_.idle_timeout_seconds;
    o.io_timeout_seconds = options_.io_timeout_seconds;
    o.max_header_bytes = options_.max_header_bytes;
    o.max_body_bytes = options_.max_blob_bytes;
    o.max_connections = options_.max_connections;
    o.body_memory_bytes = options_.body_memory_bytes;
    o.body_memory_wait = options_.body_memory_wait;
    o.render_metrics = options_.render_metrics;
    o.metrics_token = options_.metrics_token;
    auto server = rpc::Server::create(
        o, [this](Request& req, ReplyDone done) { handle(req, std::move(done)); }, pool, clock);
    if (!server) return server.error();
    server_ = std::move(*server);
    return Status::ok();
  }

  uint16_t port() const override { return server_->port(); }
  void run() override { server_->run(); }
  void stop() override { server_->stop(); }
  rpc::BodyMemoryStats bodyMemory() const override { return server_->bodyMemory(); }

 private:
  // Runs on the pool (the server checked the signature and the body's CRC): a blob GET
  // answers from the I/O engine's completion thread, a blob PUT from the store's commit
  // thread; everything else here.
  void handle(Request& req, ReplyDone done) {
    auto [path, query] = splitTarget(req.target);
    auto route = parseRoute(path);
    if (!route) return done(errorReply(route.error()));
    if (!route->drive.empty() && std::find(options_.drives.begin(), options_.drives.end(),
                                           route->drive) == options_.drives.end()) {
      // The map places it here, but this server was started without it (a --dir left
      // out): its fragments are out of reach, not lost. kNotFound would have readers
      // take them for lost and the GC for removed.
      return done(errorReply(Status::unavailable(
          fmt::format("drive '{}' is not served by this chunk server", route->drive))));
    }
    if (route->kind == Route::Kind::kBlob && req.method == "GET") {
      return readBlob(*route, query, std::move(done));
    }
    if (route->kind == Route::Kind::kBlob && req.method == "PUT") {
      // The answer is made where the put becomes durable (the store's commit thread); this
      // thread goes back to the pool once the blob is encoded and its write submitted.
      auto desc = parseDescriptor(route->id, req.headers);
      if (!desc) return done(errorReply(desc.error()));
      return backend_.putAsync(route->drive, *desc, req.body,
                               [done = std::move(done)](Status st) mutable {
                                 done(st.isOk() ? Reply{} : errorReply(st));
                               });
    }
    done(handleRoute(req, *route, query));
  }

  Reply handleRoute(Request& req, const Route& route, std::string_view query) {
    bool get = req.method == "GET";
    switch (route.kind) {
      case Route::Kind::kHealth:
        return get ? jsonReply(R"({"status":"ok"})") : methodNotAllowed(req.method);
      case Route::Kind::kDrives: {
        if (!get) return methodNotAllowed(req.method);
        std::vector<DriveState> drives;
        for (const auto& id : options_.drives) drives.push_back({id, backend_.writable(id)});
        return jsonReply(encodeDrives(drives));
      }
      case Route::Kind::kStats: {
        if (!get) return methodNotAllowed(req.method);
        auto stats = backend_.stats(route.drive);
        return stats ? jsonReply(encodeStats(*stats)) : errorReply(stats.error());
      }
      case Route::Kind::kBlobList:
        return get ? listBlobs(route.drive, query) : methodNotAllowed(req.method);
      case Route::Kind::kBlob:
        return blob(req, route, query);
    }
    return errorReply(Status::internal("unhandled route"));
  }

  Reply listBlobs(const std::string& drive, std::string_view query) {
    std::optional<BlobId> after;
    if (auto a = queryParam(query, "after")) {
      auto id = parseBlobIdHex(*a);
      if (!id) return errorReply(id.error());
      after = *id;
    }
    size_t limit = kDefaultListLimit;
    if (auto l = queryParam(query, "limit")) {
      auto v = parseU64(*l);
      // Over the cap is an error, not a silently short page: callers stop paging at the
      // first page shorter than the limit they asked for.
      if (!v || *v > options_.max_list_limit) {
        return errorReply(Status::invalidArgument(
            fmt::format("limit must be a number <= {}", options_.max_list_limit)));
      }
      limit = static_cast<size_t>(*v);
    }
    auto blobs = backend_.list(drive, after, limit);
    return blobs ? jsonReply(encodeBlobList(*blobs)) : errorReply(blobs.error());
  }

  // HEAD and DELETE of a blob (GET and PUT: handle()).
  Reply blob(Request& req, const Route& route, std::string_view query) {
    if (req.method == "HEAD" && queryParam(query, "header") == "1") {
      auto desc = backend_.describe(route.drive, route.id);
      if (!desc) return errorReply(desc.error());
      Reply r;
      r.headers = descriptorHeaders(*desc);
      return r;
    }
    if (req.method == "HEAD") {
      auto found = backend_.stat(route.drive, route.id);
      if (!found) return errorReply(found.error());
      Reply r;
      r.head_length = found->length;
      r.headers = {{std::string(kBlobLengthHeader), std::to_string(found->length)},
                   {std::string(kCreatedHeader), std::to_string(found->created_unix_nanos)}};
      return r;
    }
    if (req.method == "DELETE") {
      Status st = backend_.remove(route.drive, route.id);
      return st.isOk() ? Reply{} : errorReply(st);
    }
    return methodNotAllowed(req.method);
  }

  // GET of a blob range: the read goes to the backend's asynchronous path, and the answer
  // is made where it completes.
  void readBlob(const Route& route, std::string_view query, ReplyDone done) {
    auto offset = queryParam(query, "offset");
    auto length = queryParam(query, "length");
    auto parsed_o = offset ? parseU64(*offset) : std::nullopt;
    auto parsed_n = length ? parseU64(*length) : std::nullopt;
    if (!parsed_o || !parsed_n) {
      return done(errorReply(Status::invalidArgument("offset and length are required")));
    }
    const uint64_t first = *parsed_o, count = *parsed_n;
    if (count > options_.max_blob_bytes) {
      return done(errorReply(Status::invalidArgument("length exceeds the server's limit")));
    }
    // The range against the blob before its buffer is made: a request for 64 MiB of a
    // 4 KiB blob (or of none) must not allocate 64 MiB first. Usually an index-cache hit;
    // the read checks again.
    auto found = backend_.stat(route.drive, route.id);
    if (!found) return done(errorReply(found.error()));
    if (first > found->length || count > found->length - first) {
      return done(errorReply(Status::invalidArgument("range beyond the blob's length")));
    }
    auto r = std::make_unique<Reply>();
    // The read fills it, so skip the zero-fill. (g++ 12's libstdc++ passes the capacity,
    // not the requested size, to the callback: return the size we asked for.)
    const size_t want = static_cast<size_t>(count);
    r->body.resize_and_overwrite(want, [want](char*, size_t) { return want; });
    std::span<uint8_t> out{reinterpret_cast<uint8_t*>(r->body.data()), r->body.size()};
    backend_.readAsync(route.drive, route.id, first, out,
                       [r = std::move(r), out, done = std::move(done)](Status st) mutable {
                         if (!st.isOk()) return done(errorReply(st));
                         r->headers = {{std::string(kCrcHeader), crcHex(ec::crc32c(out))},
                                       {"content-type", "application/octet-stream"}};
                         done(std::move(*r));
                       });
  }

  ChunkServerOptions options_;
  ChunkClient& backend_;
  std::unique_ptr<rpc::Server> server_;  // last: destroyed (its calls drained) first
};

}  // namespace

Result<std::unique_ptr<ChunkServer>> ChunkServer::create(const ChunkServerOptions& options,
                                                         ChunkClient& backend,
                                                         WorkerPool& pool, const Clock& clock) {
  if (options.cluster_secret.empty()) {
    return fail(Status::invalidArgument("a chunk server needs a cluster secret"));
  }
  auto server = std::make_unique<ChunkServerImpl>(options, backend);
  Status st = server->start(pool, clock);
  if (!st.isOk()) return fail(st);
  return std::unique_ptr<ChunkServer>(std::move(server));
}

}  // namespace granary::chunkstore

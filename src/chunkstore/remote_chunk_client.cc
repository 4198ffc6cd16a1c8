// RemoteChunkClient: the chunk API's calls over rpc::Client (signed HTTP/1.1 on pooled
// keep-alive connections), plus the cached drive lists behind writable().
#include "granary/chunkstore/remote_chunk_client.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "granary/common/clock.h"
#include "granary/rpc/client.h"
#include "internal_http.h"

namespace granary::chunkstore {

using namespace internal;
using rpc::Answer;
using rpc::Call;


struct RemoteChunkClient::Impl {
  // Per endpoint: the cached drive list.
  struct Endpoint {
    std::mutex mu;
    std::map<std::string, bool, std::less<>> writable;
    // False from a failed exchange (unreachable server) until a drive list comes back.
    bool reachable = true;
    bool listed = false;  // a drive list has come back: a drive it leaves out is not served
    int64_t next_refresh_nanos = 0;
    bool refreshing = false;
  };

  Impl(std::map<std::string, std::string, std::less<>> d, std::string s,
       RemoteChunkClientOptions o, const Clock& c)
      : drives(std::move(d)),
        max_refreshers(refresherLimit(drives)),
        options(o),
        clock(c),
        client(std::move(s), o, c) {}

  ~Impl() {
    {
      std::lock_guard lock(refresh_mu);
      refresh_stop = true;
    }
    refresh_cv.notify_all();
    for (auto& t : refreshers) t.join();
  }

  Endpoint& endpointState(std::string_view endpoint) {
    std::lock_guard lock(endpoints_mu);
    auto it = endpoints.find(endpoint);
    if (it == endpoints.end()) {
      it = endpoints.emplace(std::string(endpoint), std::make_unique<Endpoint>()).first;
    }
    return *it->second;
  }

  Result<std::string_view> endpointOf(std::string_view drive) const {
    auto it = drives.find(drive);
    if (it == drives.end()) {
      return fail(Status::notFound("unknown drive '" + std::string(drive) + "'"));
    }
    return std::string_view(it->second);
  }

  // execute() on the drive's endpoint, with a non-2xx answer turned into its Status. A
  // server that cannot be reached is marked so (its drives stop taking new fragments, and
  // reads go around it) until a drive list comes back from it.
  Result<Answer> call(std::string_view drive, const Call& c) {
    auto endpoint = endpointOf(drive);
    if (!endpoint) return fail(endpoint.error());
    auto answer = client.execute(*endpoint, c);
    if (!answer) {
      // Only a failed exchange (no HTTP answer at all) says the server is gone; an error
      // answer, even a 503, comes from a live server.
      if (answer.error().code() == Status::Code::kUnavailable) markUnreachable(*endpoint);
      return fail(answer.error());
    }
    if (!answer->ok()) return fail(answer->error());
    return answer;
  }

  void markUnreachable(std::string_view endpoint) {
    Endpoint& cache = endpointState(endpoint);
    std::lock_guard lock(cache.mu);
    cache.reachable = false;
  }

  Result<std::vector<DriveState>> fetchDrives(std::string_view endpoint) {
    Call c;
    c.path = drivesPath();
    auto answer = client.call(endpoint, c);
    if (!answer) return fail(answer.error());
    return decodeDrives(answer->body);
  }

  // Asks the background refreshers for the endpoint's drive list unless a refresh is
  // pending or the list is fresh. Never waits on the network: writable() is called from
  // placement on event-loop threads, and a hung server must not stall them. Nor does a
  // hung server hold up the others' lists: while every refresher is busy another starts,
  // up to one per endpoint (at most kMaxRefreshers).
  void refreshDrives(std::string_view endpoint, Endpoint& cache) {
    int64_t now = clock.monotonicNanos();
    {
      std::lock_guard lock(cache.mu);
      if (cache.refreshing || now < cache.next_refresh_nanos) return;
      cache.refreshing = true;
      cache.next_refresh_nanos =
          now + std::chrono::duration_cast<std::chrono::nanoseconds>(options.drive_list_refresh)
                    .count();
    }
    std::lock_guard lock(refresh_mu);
    refresh_wanted.emplace(endpoint);
    if (idle_refreshers < refresh_wanted.size() && refreshers.size() < max_refreshers) {
      refreshers.emplace_back([this] { refreshLoop(); });
      ++idle_refreshers;
    }
    refresh_cv.notify_one();
  }

  static size_t refresherLimit(const std::map<std::string, std::string, std::less<>>& drives) {
    std::set<std::string_view> endpoints;
    for (const auto& [drive, endpoint] : drives) endpoints.insert(endpoint);
    return std::min(endpoints.size(), kMaxRefreshers);
  }

  void refreshLoop() {
    std::unique_lock lock(refresh_mu);
    for (;;) {
      refresh_cv.wait(lock, [&] { return refresh_stop || !refresh_wanted.empty(); });
      if (refresh_stop) return;
      std::string endpoint = std::move(refresh_wanted.extract(refresh_wanted.begin()).value());
      --idle_refreshers;
      lock.unlock();
      auto list = fetchDrives(endpoint);
      Endpoint& cache = endpointState(endpoint);
      {
        std::lock_guard cache_lock(cache.mu);
        cache.refreshing = false;
        // On failure keep the drive states we knew, but not the server's health.
        cache.reachable = list.has_value();
        if (list) {
          cache.listed = true;
          cache.writable.clear();
          for (const auto& d : *list) cache.writable[d.id] = d.writable;
        }
      }
      lock.lock();
      ++idle_refreshers;
    }
  }

  static constexpr size_t kMaxRefreshers = 16;

  const std::map<std::string, std::string, std::less<>> drives;
  const size_t max_refreshers;
  const RemoteChunkClientOptions options;
  const Clock& clock;
  rpc::Client client;
  std::mutex endpoints_mu;  // guards the map, not the Endpoints
  std::map<std::string, std::unique_ptr<Endpoint>, std::less<>> endpoints;

  std::mutex refresh_mu;
  std::condition_variable refresh_cv;
  std::set<std::string> refresh_wanted;  // endpoints whose drive list is wanted
  bool refresh_stop = false;
  size_t idle_refreshers = 0;  // started and waiting for work
  std::vector<std::thread> refreshers;  // started as needed; last member: joined first
};

RemoteChunkClient::RemoteChunkClient(std::map<std::string, std::string, std::less<>> drives,
                                     std::string cluster_secret,
                                     RemoteChunkClientOptions options, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(drives), std::move(cluster_secret), options,
                                   clock)) {}

RemoteChunkClient::~RemoteChunkClient() = default;

Status RemoteChunkClient::put(std::string_view drive, const BlobDescriptor& desc,
                              std::span<const uint8_t> payload) {
  Call c;
  c.method = "PUT";
  c.path = blobPath(drive, desc.id);
  c.headers = descriptorHeaders(desc);
  c.body = payload;
  c.idempotent = false;
  auto answer = impl_->call(drive, c);
  return answer ? Status::ok() : answer.error();
}

Status RemoteChunkClient::read(std::string_view drive, const BlobId& id, uint64_t offset,
                               std::span<uint8_t> out) {
  Call c;
  c.path = blobPath(drive, id);
  c.query = "length=" + std::to_string(out.size()) + "&offset=" + std::to_string(offset);
  c.read_into = out;
  auto answer = impl_->call(drive, c);
  return answer ? Status::ok() : answer.error();
}

Status RemoteChunkClient::remove(std::string_view drive, const BlobId& id) {
  Call c;
  c.method = "DELETE";
  c.path = blobPath(drive, id);
  auto answer = impl_->call(drive, c);
  return answer ? Status::ok() : answer.error();
}

Result<std::vector<BlobInfo>> RemoteChunkClient::list(std::string_view drive,
                                                      std::optional<BlobId> after,
                                                      size_t limit) {
  // Larger requests go out as several pages, each well under any server's cap, so the
  // result holds `limit` blobs unless the drive has no more.
  std::vector<BlobInfo> out;
  while (out.size() < limit) {
    const size_t want = std::min(limit - out.size(), std::max<size_t>(1, impl_->options.list_page));
    Call c;
    c.path = blobListPath(drive);
    if (after) c.query = "after=" + blobIdHex(*after) + "&";
    c.query += "limit=" + std::to_string(want);
    auto answer = impl_->call(drive, c);
    if (!answer) return fail(answer.error());
    auto page = decodeBlobList(answer->body);
    if (!page) return page;
    out.insert(out.end(), page->begin(), page->end());
    if (page->size() < want) break;
    after = out.back().id;
  }
  return out;
}

Result<DriveStats> RemoteChunkClient::stats(std::string_view drive) {
  Call c;
  c.path = statsPath(drive);
  auto answer = impl_->call(drive, c);
  if (!answer) return fail(answer.error());
  return decodeStats(answer->body);
}

Result<BlobInfo> RemoteChunkClient::stat(std::string_view drive, const BlobId& id) {
  Call c;
  c.method = "HEAD";
  c.path = blobPath(drive, id);
  auto answer = impl_->call(drive, c);
  if (!answer) return fail(answer.error());
  auto length = findHeader(answer->headers, kBlobLengthHeader);
  auto created = findHeader(answer->headers, kCreatedHeader);
  auto l = length ? parseU64(*length) : std::nullopt;
  auto t = created ? parseU64(*created) : std::nullopt;
  if (!l || !t) return fail(Status::ioError("chunk server sent a malformed stat answer"));
  return BlobInfo{id, *l, static_cast<int64_t>(*t)};
}

Result<BlobDescriptor> RemoteChunkClient::describe(std::string_view drive, const BlobId& id) {
  Call c;
  c.method = "HEAD";
  c.path = blobPath(drive, id);
  c.query = "header=1";
  auto answer = impl_->call(drive, c);
  if (!answer) return fail(answer.error());
  auto desc = parseDescriptor(id, answer->headers);
  if (!desc) return fail(Status::ioError("chunk server sent a malformed descriptor: " +
                                         desc.error().message()));
  return desc;
}

bool RemoteChunkClient::writable(std::string_view drive) const {
  auto endpoint = impl_->endpointOf(drive);
  if (!endpoint) return false;
  auto& cache = impl_->endpointState(*endpoint);
  impl_->refreshDrives(*endpoint, cache);
  std::lock_guard lock(cache.mu);
  if (!cache.reachable) return false;
  // A drive the server's list leaves out (a --dir it was not started with, endpoints
  // swapped in the map) takes nothing: every put there would fail.
  auto it = cache.writable.find(drive);
  return it == cache.writable.end() ? !cache.listed : it->second;
}

bool RemoteChunkClient::reachable(std::string_view drive) const {
  auto endpoint = impl_->endpointOf(drive);
  if (!endpoint) return false;
  auto& cache = impl_->endpointState(*endpoint);
  impl_->refreshDrives(*endpoint, cache);
  std::lock_guard lock(cache.mu);
  return cache.reachable;
}

Result<std::vector<DriveState>> RemoteChunkClient::drives(std::string_view endpoint) {
  return impl_->fetchDrives(endpoint);
}

Status RemoteChunkClient::health(std::string_view endpoint) {
  Call c;
  c.path = healthPath();
  auto answer = impl_->client.call(endpoint, c);
  return answer ? Status::ok() : answer.error();
}

uint64_t RemoteChunkClient::connectionsOpened() const { return impl_->client.connectionsOpened(); }

}  // namespace granary::chunkstore

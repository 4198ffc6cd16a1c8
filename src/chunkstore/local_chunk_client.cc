// LocalChunkClient: the in-process ChunkClient over the drives this process opened.
#include "granary/chunkstore/chunk_client.h"

namespace granary::chunkstore {

LocalChunkClient::LocalChunkClient(
    std::map<std::string, std::unique_ptr<ChunkStore>, std::less<>> drives,
    std::map<std::string, Status, std::less<>> unopened)
    : drives_(std::move(drives)), unopened_(std::move(unopened)) {}

Result<ChunkStore*> LocalChunkClient::find(std::string_view drive) const {
  auto it = drives_.find(drive);
  if (it == drives_.end()) {
    if (auto failed = unopened_.find(drive); failed != unopened_.end()) {
      return fail(Status::unavailable("drive '" + std::string(drive) +
                                      "' did not open: " + failed->second.message()));
    }
    return fail(Status::notFound("unknown drive '" + std::string(drive) + "'"));
  }
  return it->second.get();
}

Status LocalChunkClient::put(std::string_view drive, const BlobDescriptor& desc,
                             std::span<const uint8_t> payload) {
  auto store = find(drive);
  if (!store) return store.error();
  return (*store)->put(desc, payload);
}

void LocalChunkClient::putAsync(std::string_view drive, const BlobDescriptor& desc,
                                std::span<const uint8_t> payload, IoDone done) {
  auto store = find(drive);
  if (!store) return done(store.error());
  (*store)->putAsync(desc, payload, std::move(done));
}

Status LocalChunkClient::read(std::string_view drive, const BlobId& id, uint64_t offset,
                              std::span<uint8_t> out) {
  auto store = find(drive);
  if (!store) return store.error();
  return (*store)->read(id, offset, out);
}

bool LocalChunkClient::readIfCached(std::string_view drive, const BlobId& id, uint64_t offset,
                                    std::span<uint8_t> out) {
  auto store = find(drive);
  return store && (*store)->readIfCached(id, offset, out);
}

std::optional<CachedRange> LocalChunkClient::pinIfCached(std::string_view drive,
                                                        const BlobId& id, uint64_t offset,
                                                        uint64_t len) {
  auto store = find(drive);
  if (!store) return std::nullopt;
  return (*store)->pinIfCached(id, offset, len);
}

void LocalChunkClient::readAsync(std::string_view drive, const BlobId& id, uint64_t offset,
                                 std::span<uint8_t> out, IoDone done) {
  auto store = find(drive);
  if (!store) return done(store.error());
  (*store)->readAsync(id, offset, out, std::move(done));
}

void LocalChunkClient::drain() {
  for (auto& [id, store] : drives_) store->drain();
}

Status LocalChunkClient::remove(std::string_view drive, const BlobId& id) {
  auto store = find(drive);
  if (!store) return store.error();
  return (*store)->remove(id);
}

Result<BlobInfo> LocalChunkClient::stat(std::string_view drive, const BlobId& id) {
  auto store = find(drive);
  if (!store) return fail(store.error());
  return (*store)->stat(id);
}

Result<BlobDescriptor> LocalChunkClient::describe(std::string_view drive, const BlobId& id) {
  auto store = find(drive);
  if (!store) return fail(store.error());
  return (*store)->describe(id);
}

Result<std::vector<BlobInfo>> LocalChunkClient::list(std::string_view drive,
                                                     std::optional<BlobId> after,
                                                     size_t limit) {
  auto store = find(drive);
  if (!store) return fail(store.error());
  return (*store)->list(after, limit);
}

Result<DriveStats> LocalChunkClient::stats(std::string_view drive) {
  auto store = find(drive);
  if (!store) return fail(store.error());
  auto stats = (*store)->stats();
  if (!stats) return stats;
  if (auto it = scrubbers_.find(drive); it != scrubbers_.end()) {
    ScrubStats scrub = it->second->stats();
    stats->scrub_passes = scrub.passes;
    stats->scrubbed_bytes = scrub.bytes;
    stats->corrupt_blobs = scrub.corrupt;
  }
  return stats;
}

void LocalChunkClient::startScrubbers(const ScrubOptions& per_drive) {
  for (auto& [id, store] : drives_) {
    if (scrubbers_.contains(id)) continue;
    auto scrubber = std::make_unique<Scrubber>(*store, "drive " + id, per_drive);
    scrubber->start();
    scrubbers_.emplace(id, std::move(scrubber));
  }
}

bool LocalChunkClient::writable(std::string_view drive) const {
  auto it = drives_.find(drive);
  return it != drives_.end() && it->second->writable();
}

}  // namespace granary::chunkstore

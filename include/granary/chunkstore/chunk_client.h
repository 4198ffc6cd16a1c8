// ChunkClient: how the gateway reaches blobs on any drive of the cluster, by drive id.
// LocalChunkClient serves drives opened in this process (`granary serve`); a remote
// implementation (internal HTTP to chunk servers) implements the same interface.
//
// Contract: the same as ChunkStore's, per drive; an unknown drive id is kNotFound, an
// unreachable drive kUnavailable. Thread safety: all methods are thread safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/chunkstore/chunk_store.h"
#include "granary/chunkstore/scrubber.h"

namespace granary::chunkstore {

class ChunkClient {
 public:
  virtual ~ChunkClient() = default;
  virtual Status put(std::string_view drive, const BlobDescriptor& desc,
                     std::span<const uint8_t> payload) = 0;
  // put() with ChunkStore::putAsync's contract; the default puts synchronously, then calls
  // `done` on this thread.
  virtual void putAsync(std::string_view drive, const BlobDescriptor& desc,
                        std::span<const uint8_t> payload, IoDone done) {
    done(put(drive, desc, payload));
  }
  virtual Status read(std::string_view drive, const BlobId& id, uint64_t offset,
                      std::span<uint8_t> out) = 0;
  // ChunkStore::readIfCached on `drive`; a client without a fast path answers false.
  virtual bool readIfCached(std::string_view /*drive*/, const BlobId& /*id*/,
                            uint64_t /*offset*/, std::span<uint8_t> /*out*/) {
    return false;
  }
  // ChunkStore::pinIfCached on `drive`; a client whose drives are not in this process
  // answers nothing.
  virtual std::optional<CachedRange> pinIfCached(std::string_view /*drive*/,
                                                 const BlobId& /*id*/, uint64_t /*offset*/,
                                                 uint64_t /*len*/) {
    return std::nullopt;
  }
  // read() with ChunkStore::readAsync's contract; the default reads synchronously, then
  // calls `done` on this thread.
  virtual void readAsync(std::string_view drive, const BlobId& id, uint64_t offset,
                         std::span<uint8_t> out, IoDone done) {
    done(read(drive, id, offset, out));
  }
  virtual Status remove(std::string_view drive, const BlobId& id) = 0;
  // Waits until no asynchronous operation started through this client is in flight (see
  // ChunkStore::drain). The default has none to wait for.
  virtual void drain() {}
  virtual Result<BlobInfo> stat(std::string_view drive, const BlobId& id) = 0;
  virtual Result<BlobDescriptor> describe(std::string_view drive, const BlobId& id) = 0;
  virtual Result<std::vector<BlobInfo>> list(std::string_view drive,
                                             std::optional<BlobId> after, size_t limit) = 0;
  virtual Result<DriveStats> stats(std::string_view drive) = 0;
  // Whether new fragments should be placed on the drive now.
  virtual bool writable(std::string_view drive) const = 0;
  // Whether the drive's server answered lately (a drive that is reachable but not
  // writable is full or failing). Local drives are always reachable.
  virtual bool reachable(std::string_view /*drive*/) const { return true; }
};

class LocalChunkClient final : public ChunkClient {
 public:
  // Takes ownership of the stores, keyed by drive id. `unopened`: drives of this process
  // that could not be opened, and why: every call naming one is kUnavailable (a reader
  // rebuilds from the other fragments; placement leaves it out), never kNotFound (which
  // says a fragment is lost).
  explicit LocalChunkClient(
      std::map<std::string, std::unique_ptr<ChunkStore>, std::less<>> drives,
      std::map<std::string, Status, std::less<>> unopened = {});
  Status put(std::string_view drive, const BlobDescriptor& desc,
             std::span<const uint8_t> payload) override;
  void putAsync(std::string_view drive, const BlobDescriptor& desc,
                std::span<const uint8_t> payload, IoDone done) override;
  Status read(std::string_view drive, const BlobId& id, uint64_t offset,
              std::span<uint8_t> out) override;
  bool readIfCached(std::string_view drive, const BlobId& id, uint64_t offset,
                    std::span<uint8_t> out) override;
  std::optional<CachedRange> pinIfCached(std::string_view drive, const BlobId& id,
                                         uint64_t offset, uint64_t len) override;
  void readAsync(std::string_view drive, const BlobId& id, uint64_t offset,
                 std::span<uint8_t> out, IoDone done) override;
  Status remove(std::string_view drive, const BlobId& id) override;
  void drain() override;
  Result<BlobInfo> stat(std::string_view drive, const BlobId& id) override;
  Result<BlobDescriptor> describe(std::string_view drive, const BlobId& id) override;
  Result<std::vector<BlobInfo>> list(std::string_view drive, std::optional<BlobId> after,
                                     size_t limit) override;
  Result<DriveStats> stats(std::string_view drive) override;
  bool writable(std::string_view drive) const override;

  // Starts a background Scrubber on every drive, each with `per_drive` options; their
  // progress and findings appear in stats(). Call once, before serving.
  void startScrubbers(const ScrubOptions& per_drive);

 private:
  Result<ChunkStore*> find(std::string_view drive) const;
  std::map<std::string, std::unique_ptr<ChunkStore>, std::less<>> drives_;
  std::map<std::string, Status, std::less<>> unopened_;
  // Declared after drives_: destroyed (stopped) first.
  std::map<std::string, std::unique_ptr<Scrubber>, std::less<>> scrubbers_;
};

}  // namespace granary::chunkstore

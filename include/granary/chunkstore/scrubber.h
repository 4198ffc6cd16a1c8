// Scrubber: re-reads every blob of one drive in the background, verifying each block's
// CRC32C (through ChunkStore::read), and reports the corrupt ones, so silent corruption is
// found before a client needs the data (and, with repair, fixed from parity).
//
// Foreground first: the scrubber runs on its own thread at the lowest best-effort I/O
// priority and never reads faster than its RateLimiter allows, in pieces of `piece_bytes`,
// so a client read waits behind at most one small scrub read. After a full pass it sleeps
// `pass_interval` before the next. A pass whose blob list fails goes on from the blob it
// stopped at after `list_retry` (or `pass_interval`, if shorter).
//
// Thread safety: stats() may be called from any thread while the scrubber runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "granary/chunkstore/chunk_store.h"
#include "granary/common/rate_limiter.h"

namespace granary::chunkstore {

struct ScrubOptions {
  uint64_t rate_bytes_per_second = 50ull << 20;  // 0 = unlimited
  uint64_t piece_bytes = 64 << 10;               // largest single scrub read
  std::chrono::milliseconds pass_interval{std::chrono::hours(24)};
  // After the blob list fails (the drive's index could not be read), the pass goes on after
  // this long, not after a whole pass interval.
  std::chrono::milliseconds list_retry{std::chrono::minutes(1)};
};

struct ScrubStats {
  uint64_t passes = 0;         // completed full passes
  uint64_t blobs = 0;          // blobs verified (all passes)
  uint64_t bytes = 0;          // payload bytes verified (all passes)
  uint64_t corrupt = 0;        // corrupt or unreadable (EIO) blobs found (all passes)
  std::vector<BlobId> recent;  // the last of those found (at most 64)
};

class Scrubber {
 public:
  // Called on the scrubber thread for each corrupt or unreadable blob found.
  using OnCorrupt = std::function<void(const BlobId&, const Status&)>;

  Scrubber(ChunkStore& store, std::string name, ScrubOptions options, OnCorrupt on_corrupt = {});
  ~Scrubber();  // stops and joins
  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  void start();
  void stop();
  // One full pass on the calling thread (rate limited); kUnavailable if stopped meanwhile.
  // A pass whose blob list fails returns that error, and the next one starts where it
  // stopped (the blobs already verified are not read again).
  Status runPass();
  ScrubStats stats() const;

 private:
  // Ok and `verified`, or ok and not (deleted meanwhile, or a read the process could not
  // make now: the next pass tries again); else the blob is corrupt or unreadable, or the
  // scrubber is stopping (kUnavailable).
  Status scrubBlob(const BlobInfo& blob, std::vector<uint8_t>& buffer, bool& verified);
  void run();

  ChunkStore& store_;
  const std::string name_;
  const ScrubOptions options_;
  OnCorrupt on_corrupt_;
  RateLimiter limiter_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  ScrubStats stats_;
  std::optional<BlobId> resume_after_;  // where a pass whose list failed goes on
  std::thread thread_;
};

}  // namespace granary::chunkstore

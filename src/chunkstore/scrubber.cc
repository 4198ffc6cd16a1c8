#include "granary/chunkstore/scrubber.h"

#include <algorithm>

#include "granary/common/log.h"
#include "io_priority.h"

namespace granary::chunkstore {

namespace {

constexpr size_t kRecentCorrupt = 64;
constexpr size_t kListBatch = 256;

}  // namespace

Scrubber::Scrubber(ChunkStore& store, std::string name, ScrubOptions options,
                   OnCorrupt on_corrupt)
    : store_(store),
      name_(std::move(name)),
      options_(options),
      on_corrupt_(std::move(on_corrupt)),
      // Saves up at most two pieces: the scrub reads one piece at a time, evenly paced,
      // never a run of back-to-back pieces (a start-up burst of a tenth of a second's
      // worth, 20 pieces at 50 MB/s, took a client read's p99 from 1.1x to 1.4x the quiet
      // one's in 0.5 s windows); the second piece makes up a late wake-up.
      limiter_(options.rate_bytes_per_second, 2 * std::max<uint64_t>(options.piece_bytes, 4096)) {}

Scrubber::~Scrubber() { stop(); }

void Scrubber::start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { run(); });
}

void Scrubber::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  limiter_.stop();
  if (thread_.joinable()) thread_.join();
}

ScrubStats Scrubber::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Scrubber::run() {
  lowerIoPriority();
  for (;;) {
    Status st = runPass();
    auto pause = options_.pass_interval;
    if (!st && st.code() != Status::Code::kUnavailable) {
      // The blob list failed: the pass goes on from where it stopped, soon, not from the
      // first blob after a whole interval.
      pause = std::min(pause, options_.list_retry);
      log::warn("scrub of {}: {} (going on in {} ms)", name_, st.toString(), pause.count());
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, pause, [this] { return stopping_; })) return;
  }
}

Status Scrubber::runPass() {
  std::vector<uint8_t> buffer(options_.piece_bytes);
  std::optional<BlobId> after;
  {
    std::lock_guard lock(mu_);
    after = resume_after_;
  }
  for (;;) {
    auto blobs = store_.list(after, kListBatch);
    if (!blobs) {
      std::lock_guard lock(mu_);
      resume_after_ = after;
      return blobs.error();
    }
    for (const BlobInfo& blob : *blobs) {
      bool verified = false;
      Status st = scrubBlob(blob, buffer, verified);
      if (st.code() == Status::Code::kUnavailable) return st;  // stopping
      std::lock_guard lock(mu_);
      if (!st.isOk()) {  // corrupt, or unreadable (the store remembers it for repair)
        ++stats_.corrupt;
        if (stats_.recent.size() == kRecentCorrupt) stats_.recent.erase(stats_.recent.begin());
        stats_.recent.push_back(blob.id);
      } else if (verified) {
        ++stats_.blobs;
      }
    }
    if (blobs->size() < kListBatch) break;
    after = blobs->back().id;
  }
  std::lock_guard lock(mu_);
  ++stats_.passes;
  resume_after_.reset();
  return Status::ok();
}

Status Scrubber::scrubBlob(const BlobInfo& blob, std::vector<uint8_t>& buffer, bool& verified) {
  // An empty blob still has a header to verify: one zero-length read.
  uint64_t offset = 0;
  do {
    const uint64_t n = std::min<uint64_t>(buffer.size(), blob.length - offset);
    if (!limiter_.acquire(std::max<uint64_t>(n, 4096))) {
      return Status::unavailable("scrubber stopping");
    }
    Status st = store_.readFromDrive(blob.id, offset, {buffer.data(), n});
    if (st.isNotFound()) return Status::ok();  // deleted meanwhile
    if (st.isCorruption()) {
      log::error("scrub of {}: {}", name_, st.message());
      if (on_corrupt_) on_corrupt_(blob.id, st);
      return st;
    }
    if (unreadableBlob(st)) {
      // The disk refused the bytes (EIO): as lost as corrupt ones, and repair rebuilds it
      // (the store lists it among corrupt_ids).
      log::error("scrub of {}: reading {}: {}", name_, blob.id.toString(), st.toString());
      if (on_corrupt_) on_corrupt_(blob.id, st);
      return st;
    }
    if (!st) {
      log::warn("scrub of {}: reading {}: {}", name_, blob.id.toString(), st.toString());
      return Status::ok();  // transient (the process is short of something): next pass
    }
    offset += n;
    std::lock_guard lock(mu_);
    stats_.bytes += n;
  } while (offset < blob.length);
  verified = true;
  store_.verifiedOnDrive(blob.id);
  return Status::ok();
}

}  // namespace granary::chunkstore

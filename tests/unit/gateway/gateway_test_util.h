// Helpers shared by the gateway unit tests: a temp-dir cluster of real chunk stores (and,
// on demand, a real index) behind a fault-injecting ChunkClient, with a ManualClock.
// No Asio here, so the reclaimer test stays a fast-compiling TU.
#pragma once

#include "support/temp_dir.h"

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <thread>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "granary/chunkstore/chunk_client.h"
#include "granary/chunkstore/chunk_store.h"
#include "granary/chunkstore/io_engine.h"
#include "granary/common/clock.h"
#include "granary/common/ids.h"
#include "granary/common/random.h"
#include "granary/common/rocks_resources.h"
#include "granary/index_kv/index.h"
#include "granary/placement/cluster_map.h"

namespace granary::gateway::testing {

// 2024-05-01T12:00:00Z: the handler tests sign requests with this date.
inline constexpr int64_t kStartUnixSeconds = 1'714'564'800;
inline constexpr int64_t kStartUnixNanos = kStartUnixSeconds * 1'000'000'000;
inline constexpr int64_t kSecond = 1'000'000'000;

using granary::test_support::TempDir;

inline std::string randomString(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A multipart upload of bucket/key initiated now (by `clock`), with a fresh id; not stored.
inline index_kv::MultipartUpload newUpload(const Clock& clock, Random& random,
                                           const std::string& bucket, const std::string& key,
                                           const std::string& owner) {
  index_kv::MultipartUpload u;
  u.upload_id = VersionId::generate(clock, random).toHex();
  u.bucket = bucket;
  u.key = key;
  u.owner = owner;
  u.initiated_unix_nanos = clock.nowUnixNanos();
  return u;
}

// Forwards to a real client; a test makes chosen drives fail reads, puts or removes, or
// stop being writable. Faults may be changed only while no request is in flight.
// readAsync and putAsync complete on the client's own completion thread, as a real
// engine's do, never on the caller's: the gateway's asynchronous paths are exercised.
class FaultyChunkClient final : public chunkstore::ChunkClient {
 public:
  explicit FaultyChunkClient(chunkstore::ChunkClient& target)
      : target_(target), completer_([this] { completeLoop(); }) {}
  ~FaultyChunkClient() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    completer_.join();
  }

  void failReads(const std::string& drive, Status st) { read_faults_[drive] = std::move(st); }
  void failPuts(const std::string& drive, Status st) { put_faults_[drive] = std::move(st); }
  // Asynchronous puts to the drive land, then report `st` (an answer lost on its way).
  void failPutsAfterLanding(const std::string& drive, Status st) {
    landed_put_faults_[drive] = std::move(st);
  }
  void failRemoves(const std::string& drive, Status st) { remove_faults_[drive] = std::move(st); }
  void failLists(const std::string& drive, Status st) { list_faults_[drive] = std::move(st); }
  // describe() of every fragment of stripe `stripe` (of any blob version) fails with `st`.
  void failDescribes(uint32_t stripe, Status st) { describe_faults_[stripe] = std::move(st); }
  // Reads from the drive answer only after `delay` (a slow server); set before reading.
  void delayReads(const std::string& drive, std::chrono::milliseconds delay) {
    read_delays_[drive] = delay;
  }
  // Puts to the drive are acknowledged only `delay` after they are durable.
  void delayPuts(const std::string& drive, std::chrono::milliseconds delay) {
    put_delays_[drive] = delay;
  }
  // The most asynchronous puts in flight at once so far.
  int peakPutsInFlight() const {
    std::lock_guard lock(mu_);
    return peak_puts_;
  }
  void setReadOnly(const std::string& drive) { read_only_.insert(drive); }
  // The drive's server stops answering as far as reachable() is concerned.
  void setUnreachable(const std::string& drive) { unreachable_.insert(drive); }
  void clearFaults() {
    read_faults_.clear();
    put_faults_.clear();
    landed_put_faults_.clear();
    remove_faults_.clear();
    list_faults_.clear();
    describe_faults_.clear();
    read_delays_.clear();
    put_delays_.clear();
    read_only_.clear();
    unreachable_.clear();
  }
  int injected() const {
    std::lock_guard lock(mu_);
    return injected_;
  }

  Status put(std::string_view drive, const chunkstore::BlobDescriptor& desc,
             std::span<const uint8_t> payload) override {
    if (auto f = fault(put_faults_, drive)) return *f;
    return target_.put(drive, desc, payload);
  }
  Status read(std::string_view drive, const BlobId& id, uint64_t offset,
              std::span<uint8_t> out) override {
    if (auto f = fault(read_faults_, drive)) return *f;
    {
      std::lock_guard lock(mu_);
      auto& [now, peak] = reads_running_[std::string(drive)];
      peak = std::max(peak, ++now);
    }
    std::this_thread::sleep_for(delayOf(read_delays_, drive));
    Status st = target_.read(drive, id, offset, out);
    std::lock_guard lock(mu_);
    --reads_running_[std::string(drive)].first;
    return st;
  }
  // The most read() calls of the drive that ran at once.
  int peakReads(const std::string& drive) const {
    std::lock_guard lock(mu_);
    auto it = reads_running_.find(drive);
    return it == reads_running_.end() ? 0 : it->second.second;
  }
  // A drive with a read fault or delay has nothing in memory: its reads meet the fault.
  std::optional<chunkstore::CachedRange> pinIfCached(std::string_view drive, const BlobId& id,
                                                     uint64_t offset, uint64_t len) override {
    if (read_faults_.contains(drive) || read_delays_.contains(drive)) return std::nullopt;
    return target_.pinIfCached(drive, id, offset, len);
  }
  void readAsync(std::string_view drive, const BlobId& id, uint64_t offset,
                 std::span<uint8_t> out, chunkstore::IoDone done) override {
    if (auto f = fault(read_faults_, drive)) return completeLater(*f, {}, std::move(done));
    target_.readAsync(drive, id, offset, out,
                      [this, delay = delayOf(read_delays_, drive),
                       done = std::move(done)](Status st) mutable {
                        completeLater(std::move(st), delay, std::move(done));
                      });
  }
  void putAsync(std::string_view drive, const chunkstore::BlobDescriptor& desc,
                std::span<const uint8_t> payload, chunkstore::IoDone done) override {
    if (auto f = fault(put_faults_, drive)) return completeLater(*f, {}, std::move(done));
    {
      std::lock_guard lock(mu_);
      peak_puts_ = std::max(peak_puts_, ++puts_in_flight_);
    }
    chunkstore::IoDone counted = [this, done = std::move(done),
                                  lost = fault(landed_put_faults_, drive)](Status st) mutable {
      {
        std::lock_guard lock(mu_);
        --puts_in_flight_;
      }
      done(st.isOk() && lost ? std::move(*lost) : std::move(st));
    };
    target_.putAsync(drive, desc, payload,
                     [this, delay = delayOf(put_delays_, drive),
                      counted = std::move(counted)](Status st) mutable {
                       completeLater(std::move(st), delay, std::move(counted));
                     });
  }
  void drain() override {
    target_.drain();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return pending_.empty() && running_ == 0; });
  }
  Status remove(std::string_view drive, const BlobId& id) override {
    if (auto f = fault(remove_faults_, drive)) return *f;
    return target_.remove(drive, id);
  }
  Result<chunkstore::BlobInfo> stat(std::string_view drive, const BlobId& id) override {
    return target_.stat(drive, id);
  }
  Result<chunkstore::BlobDescriptor> describe(std::string_view drive, const BlobId& id) override {
    if (auto f = describe_faults_.find(id.stripe); f != describe_faults_.end()) {
      return fail(f->second);
    }
    return target_.describe(drive, id);
  }
  Result<std::vector<chunkstore::BlobInfo>> list(std::string_view drive,
                                                 std::optional<BlobId> after,
                                                 size_t limit) override {
    if (auto f = fault(list_faults_, drive)) return fail(*f);
    return target_.list(drive, after, limit);
  }
  Result<chunkstore::DriveStats> stats(std::string_view drive) override {
    ++stats_calls;
    return target_.stats(drive);
  }
  std::atomic<int> stats_calls{0};  // stats() asked, of any drive
  bool writable(std::string_view drive) const override {
    return !read_only_.contains(std::string(drive)) && target_.writable(drive);
  }
  bool reachable(std::string_view drive) const override {
    return !unreachable_.contains(std::string(drive)) && target_.reachable(drive);
  }

 private:
  std::optional<Status> fault(const std::map<std::string, Status, std::less<>>& faults,
                              std::string_view drive) {
    auto it = faults.find(drive);
    if (it == faults.end()) return std::nullopt;
    std::lock_guard lock(mu_);
    ++injected_;
    return it->second;
  }

  using Delays = std::map<std::string, std::chrono::milliseconds, std::less<>>;
  static std::chrono::milliseconds delayOf(const Delays& delays, std::string_view drive) {
    auto it = delays.find(drive);
    return it == delays.end() ? std::chrono::milliseconds(0) : it->second;
  }

  // Queues `done(st)` for the completion thread, to run `delay` from now.
  void completeLater(Status st, std::chrono::milliseconds delay, chunkstore::IoDone done) {
    {
      std::lock_guard lock(mu_);
      pending_.emplace(std::chrono::steady_clock::now() + delay,
                       Completion{std::move(st), std::move(done)});
    }
    cv_.notify_all();
  }
  // Runs completions in deadline order; at destruction, the remaining ones at their time.
  void completeLoop() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (pending_.empty()) {
        if (stopping_) return;
        cv_.wait(lock);
        continue;
      }
      const auto due = pending_.begin()->first;
      if (std::chrono::steady_clock::now() < due) {
        cv_.wait_until(lock, due);  // or earlier, for a completion queued meanwhile
        continue;
      }
      Completion c = std::move(pending_.begin()->second);
      pending_.erase(pending_.begin());
      ++running_;
      lock.unlock();
      c.done(std::move(c.st));
      lock.lock();
      --running_;
      cv_.notify_all();
    }
  }

  struct Completion {
    Status st;
    chunkstore::IoDone done;
  };

  chunkstore::ChunkClient& target_;
  std::map<std::string, Status, std::less<>> read_faults_;
  std::map<std::string, Status, std::less<>> put_faults_;
  std::map<std::string, Status, std::less<>> landed_put_faults_;
  std::map<std::string, Status, std::less<>> remove_faults_;
  std::map<std::string, Status, std::less<>> list_faults_;
  std::map<uint32_t, Status> describe_faults_;
  Delays read_delays_;
  Delays put_delays_;
  std::set<std::string> read_only_;
  std::set<std::string> unreachable_;
  mutable std::mutex mu_;  // injected_, pending_, running_, stopping_, puts and reads in flight
  std::condition_variable cv_;
  int injected_ = 0;
  std::multimap<std::chrono::steady_clock::time_point, Completion> pending_;
  int running_ = 0;
  bool stopping_ = false;
  int puts_in_flight_ = 0;
  int peak_puts_ = 0;
  std::map<std::string, std::pair<int, int>> reads_running_;  // drive: running, peak
  std::thread completer_;  // last: starts after, and stops before, the members it uses
};

// `drives` chunk stores (ids d0, d1, ...; one failure domain each) in a temp dir, all
// stamped by one ManualClock; `chunks` is the faulty wrapper over them.
class TestCluster {
 public:
  explicit TestCluster(int drives = 6, ec::EcProfile ec = {4, 2}) {
    map.ec = ec;
    std::map<std::string, std::unique_ptr<chunkstore::ChunkStore>, std::less<>> stores;
    for (int i = 0; i < drives; ++i) {
      // Not `"d" + std::to_string(i)`: g++ 12 -O3 reports a false -Wrestrict on it.
      std::string id = "d";
      id += std::to_string(i);
      map.drives.push_back({id, "local", id, 1.0, "", dir.path() + "/" + id});
      chunkstore::ChunkStoreOptions opts;
      opts.dir = dir.path() + "/" + id;
      opts.extent_size = 64 << 20;
      auto s = chunkstore::openChunkStore(opts, *engine, resources, clock);
      if (!s) throw std::runtime_error("openChunkStore: " + s.error().toString());
      stores.emplace(id, std::move(*s));
    }
    local = std::make_unique<chunkstore::LocalChunkClient>(std::move(stores));
    chunks = std::make_unique<FaultyChunkClient>(*local);
  }

  // Opens the index (once) in the same temp dir, with the same clock.
  index_kv::Index& index() {
    if (!index_) {
      index_kv::IndexOptions opts;
      opts.dir = dir.path() + "/index";
      opts.new_index_margin = {};  // versions minted right after it opened are its
      auto idx = index_kv::openIndex(opts, resources, clock);
      if (!idx) throw std::runtime_error("openIndex: " + idx.error().toString());
      index_ = std::move(*idx);
    }
    return *index_;
  }

  // A multipart upload of bucket/key created in index(), owned by "root".
  index_kv::MultipartUpload startUpload(const std::string& bucket, const std::string& key,
                                        Random& random) {
    index_kv::MultipartUpload u = newUpload(clock, random, bucket, key, "root");
    Status st = index().createUpload(u, 0);
    if (!st.isOk()) throw std::runtime_error("createUpload: " + st.toString());
    return u;
  }

  // Part `number` whose bytes are those `written` (a manifest of stripes, not committed)
  // holds: its version, size, ETag, drives, stripes and profile.
  static index_kv::PartInfo partOf(const index_kv::Manifest& written, uint32_t number = 1) {
    index_kv::PartInfo p;
    p.part_number = number;
    p.size = written.size;
    p.etag = written.etag;
    p.version = written.version;
    p.drives = written.drives;
    p.stripes = written.stripes;
    p.ec = written.ec;
    return p;
  }

  // Copies blob `id` (header and payload) from one drive to another, as a repair's move
  // does before its commit; through the real client. No assertion: any thread may call it.
  Status copyFragment(const std::string& from, const std::string& to, const BlobId& id) {
    auto desc = local->describe(from, id);
    if (!desc) return desc.error();
    auto info = local->stat(from, id);
    if (!info) return info.error();
    std::vector<uint8_t> bytes(info->length);
    if (Status st = local->read(from, id, 0, bytes); !st.isOk()) return st;
    return local->put(to, *desc, bytes);
  }

  // Every blob on one drive (read through the real client, never faulted).
  std::vector<chunkstore::BlobInfo> blobs(const std::string& drive) {
    auto l = local->list(drive, std::nullopt, 100000);
    if (!l) throw std::runtime_error("list: " + l.error().toString());
    return *l;
  }
  // Every (drive, blob id) in the cluster.
  std::set<std::pair<std::string, BlobId>> allBlobs() {
    std::set<std::pair<std::string, BlobId>> out;
    for (const auto& d : map.drives) {
      for (const auto& b : blobs(d.id)) out.emplace(d.id, b.id);
    }
    return out;
  }

  TempDir dir;
  ManualClock clock{kStartUnixNanos};
  std::unique_ptr<chunkstore::IoEngine> engine = chunkstore::makePosixEngine();
  RocksResources resources{RocksBudget{16 << 20, 16 << 20}};
  placement::ClusterMap map;
  std::unique_ptr<chunkstore::LocalChunkClient> local;
  std::unique_ptr<FaultyChunkClient> chunks;

 private:
  std::unique_ptr<index_kv::Index> index_;  // destroyed before the stores and resources
};

}  // namespace granary::gateway::testing

#include "object_io.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "granary/common/aligned_bytes.h"
#include "granary/common/log.h"
#include "granary/placement/placement.h"

namespace granary::gateway {

namespace {
constexpr uint64_t kAlign = 4096;
uint64_t roundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

DataPath::DataPath(const placement::ClusterMap& map, chunkstore::ChunkClient& chunks,
                   const ec::ErasureCode& code, WorkerPool& pool, WorkerPool& bulk_pool,
                   uint32_t fragment_len, DataPathCounters counters, uint64_t buffer_budget,
                   std::chrono::milliseconds admission_wait)
    : map_(map),
      chunks_(chunks),
      code_(code),
      pool_(pool),
      bulk_pool_(bulk_pool),
      fragment_len_(fragment_len),
      counters_(counters),
      budget_(buffer_budget, BufferBudget::kDefaultPatience, admission_wait),
      reads_per_drive_(std::max<size_t>(4, pool.threads() / 2)) {}

std::optional<DataPath::DriveRead> DataPath::beginRead(std::string_view drive, bool must) {
  const placement::Drive* d = map_.findDrive(drive);
  const std::string_view name = d != nullptr && !d->endpoint.empty() ? d->endpoint : drive;
  const auto now = RunningReads::Clock::now();
  std::lock_guard lock(running_->mu);
  auto s = running_->servers.find(name);
  if (s == running_->servers.end()) {
    s = running_->servers.emplace(std::string(name), RunningReads::Server()).first;
  }
  RunningReads::Server& server = s->second;
  auto it = server.drives.find(drive);
  if (it == server.drives.end()) {
    it = server.drives.emplace(std::string(drive), RunningReads::Drive()).first;
  }
  RunningReads::Drive& state = it->second;
  if (!must && server.running >= reads_per_drive_ && !state.starts.empty() &&
      now - std::max(*state.starts.begin(), state.last_end) >= kStalledRead) {
    counters_.refused_reads.Increment();
    return std::nullopt;
  }
  ++server.running;
  return DriveRead(running_, &server, &state, state.starts.insert(now));
}

DataPath::DriveRead::~DriveRead() {
  if (!running_) return;
  const auto now = RunningReads::Clock::now();
  std::lock_guard lock(running_->mu);
  --server_->running;
  drive_->starts.erase(at_);
  drive_->last_end = now;
}

Result<const ec::ErasureCode*> DataPath::codeFor(const ec::EcProfile& profile) {
  if (profile == code_.profile()) return &code_;
  std::lock_guard lock(other_codes_mu_);
  for (const auto& code : other_codes_) {
    if (code->profile() == profile) return code.get();
  }
  auto made = ec::ErasureCode::create(profile);
  if (!made) return fail(made.error());
  other_codes_.push_back(std::move(*made));
  return other_codes_.back().get();
}

uint32_t DataPath::fragmentLenFor(uint64_t len) const {
  if (len >= stripeCapacity()) return fragment_len_;
  uint64_t k = code_.profile().k;
  return static_cast<uint32_t>(std::max<uint64_t>(kAlign, roundUp((len + k - 1) / k, kAlign)));
}

// One stripe's buffers: k data fragments back to back, then m parity fragments, and their
// charge to the buffer budget (given back with the slot: at finish(), or when the writer
// goes). Not zeroed: the object bytes, flush()'s padding and the encoder write every byte
// that is sent.
struct ObjectWriter::Slot {
  Slot(size_t data_len, size_t parity_len, BufferBudget::Lease lease)
      : data(data_len), parity(parity_len), data_len(data_len), lease(std::move(lease)) {}
  AlignedBytes data;
  AlignedBytes parity;
  size_t data_len;
  BufferBudget::Lease lease;
};

// The fragment writes of one stripe: where each fragment goes, and the drives that failed a
// put of it. Shared by the writes, which may move a fragment; the writer copies `drives`
// into the stripe's layout once they have all ended.
struct ObjectWriter::StripeWrites {
  StripeWrites(DataPath& dp, std::string placement_key, chunkstore::BlobDescriptor desc,
               std::vector<std::string> drives, size_t index)
      : dp(dp),
        placement_key(std::move(placement_key)),
        desc(std::move(desc)),
        index(index),
        drives(std::move(drives)) {}

  // Fragment `j`'s put failed on `drive` with `st`: gives it another drive, the
  // placement's choice given where the stripe's other fragments are (chooseAnotherDrive,
  // degraded if it must), never one that failed a put of this stripe (nor, when the
  // server did not answer, another drive of that server); and only if the stripe's
  // fragments, but those waiting for a drive, are then spread as a degraded write spreads
  // them (k failure domains or more, none holding more than its share). Returns the
  // drive, or "" for none.
  std::string moveFragment(int j, const std::string& drive, const Status& st) {
    std::lock_guard lock(mu);
    auto fail = [this](const std::string& id) {
      if (std::find(failed.begin(), failed.end(), id) == failed.end()) failed.push_back(id);
    };
    fail(drive);
    const placement::Drive* d = dp.map().findDrive(drive);
    const bool no_answer =
        st.code() == Status::Code::kTimeout || st.code() == Status::Code::kUnavailable;
    if (no_answer && d != nullptr && !d->endpoint.empty()) {
      for (const auto& other : dp.map().drives) {
        if (other.endpoint == d->endpoint) fail(other.id);
      }
    }
    waiting[j] = 1;
    std::vector<std::string> holding;
    for (size_t i = 0; i < drives.size(); ++i) {
      if (waiting[i] == 0) holding.push_back(drives[i]);
    }
    auto idx = placement::chooseAnotherDrive(
        dp.map(), placement_key, holding,
        [&](const placement::Drive& c) {
          return std::find(failed.begin(), failed.end(), c.id) == failed.end() &&
                 dp.chunks().writable(c.id);
        },
        true);
    if (!idx) return {};
    const placement::Drive& to = dp.map().drives[*idx];
    holding.push_back(to.id);
    if (!placement::spreadLikeChooseDrives(dp.map(), holding, drives.size(),
                                           static_cast<size_t>(desc.ec.k))) {
      return {};
    }
    drives[j] = to.id;
    waiting[j] = 0;
    return drives[j];
  }

  DataPath& dp;
  const std::string placement_key;
  const chunkstore::BlobDescriptor desc;  // its id's fragment is set per put
  const size_t index;                     // the stripe's, in stripes_
  std::mutex mu;
  std::vector<std::string> drives;  // per fragment (guarded by mu)
  std::vector<uint8_t> waiting = std::vector<uint8_t>(drives.size(), 0);  // for a drive (mu)
  std::vector<std::string> failed;  // drives not to write the stripe to (mu)
};

namespace {

// Failures of the drive or its server, which another drive may not have.
bool driveFailure(const Status& st) {
  switch (st.code()) {
    case Status::Code::kIoError:
    case Status::Code::kNoSpace:
    case Status::Code::kUnavailable:
    case Status::Code::kTimeout:
      return true;
    default:
      return false;
  }
}

}  // namespace

void ObjectWriter::putFragment(std::shared_ptr<StripeWrites> sw, int j, std::shared_ptr<Slot> keep,
                               std::span<const uint8_t> bytes, int tries, TaskGroup::Done done,
                               CallsInFlight::Token token) {
  chunkstore::BlobDescriptor desc = sw->desc;
  desc.id.fragment = static_cast<uint16_t>(j);
  std::string drive;
  {
    std::lock_guard lock(sw->mu);
    drive = sw->drives[j];
  }
  DataPath& dp = sw->dp;
  // The task keeps the slot alive in case the writer goes first, and lets go of it before
  // it reports done: once finish() has seen every stripe done, the slot and its charge to
  // the budget are the writer's alone to give back.
  dp.chunks().putAsync(
      drive, desc, bytes,
      [sw = std::move(sw), j, keep = std::move(keep), bytes, tries, drive, id = desc.id,
       done = std::move(done), token = std::move(token)](Status st) mutable {
        if (st.isOk() || tries <= 1 || !driveFailure(st)) {
          keep.reset();  // before the writer can see its stripe done
          done(std::move(st));
          { auto over = std::move(token); }  // and the write is over once done has run
          return;
        }
        // Chosen and written from the bulk pool, not from this completion thread.
        WorkerPool& bulk = sw->dp.bulkPool();
        bulk.submit([sw = std::move(sw), j, keep = std::move(keep), bytes, tries,
                     drive = std::move(drive), id, st = std::move(st), done = std::move(done),
                     token = std::move(token)]() mutable {
          DataPath& dp = sw->dp;
          // Pool work must not throw (the pool would end the process): a failure to choose
          // another drive is the fragment's failure.
          std::string other;
          try {
            other = sw->moveFragment(j, drive, st);
          } catch (const std::exception& e) {
            st = Status::internal(std::string("choosing another drive: ") + e.what());
          }
          if (other.empty()) {
            keep.reset();
            done(std::move(st));
            { auto over = std::move(token); }
            return;
          }
          log::warn("fragment {} failed on {} ({}); writing it to {}", id.toString(), drive,
                    st.toString(), other);
          dp.counters().moved_puts.Increment();
          // A put whose answer was lost (no answer, a connection cut after the request
          // went out) may have landed: that copy is not the manifest's, and the orphan
          // sweep takes it only once the object is overwritten or deleted.
          putFragment(std::move(sw), j, std::move(keep), bytes, tries - 1, std::move(done),
                      std::move(token));
        });
      });
}

ObjectWriter::ObjectWriter(DataPath& dp, VersionId version, std::string bucket, std::string key,
                           asio::any_io_executor executor, uint64_t size, bool part)
    : dp_(dp),
      version_(version),
      bucket_(std::move(bucket)),
      key_(std::move(key)),
      executor_(std::move(executor)),
      size_(size),
      flags_(part ? chunkstore::kBlobFlagPart : 0) {
  // No larger than the object needs: a 1 MiB PUT used to zero two whole 4+2 stripes
  // (12 MiB), a fifth of the server's CPU at 1 MiB PUTs. One byte past the declared size
  // still fits, so a longer body is seen as one.
  const auto profile = dp_.code().profile();
  const uint64_t unit = uint64_t(profile.k) * kAlign;
  slot_data_len_ = std::min<uint64_t>(dp_.stripeCapacity(), roundUp(size_ + 1, unit));
  slot_parity_len_ = uint64_t(profile.m) * dp_.fragmentLenFor(slot_data_len_);
}

ObjectWriter::~ObjectWriter() = default;

Task<Status> ObjectWriter::start() {
  if (slots_[kPrimary]) co_return Status::ok();
  BufferBudget::Lease lease = co_await dp_.budget().acquire(slot_data_len_ + slot_parity_len_,
                                                            BufferBudget::Kind::kUpload);
  if (!lease.held()) co_return BufferBudget::spent();
  slots_[kPrimary] = std::make_shared<Slot>(slot_data_len_, slot_parity_len_, std::move(lease));
  co_return Status::ok();
}

std::span<uint8_t> ObjectWriter::buffer() {
  Slot& slot = *slots_[current_];  // start() succeeded
  return {slot.data.data(), slot.data_len};
}

uint16_t ObjectWriter::driveIndex(const std::string& drive) {
  auto it = std::find(drives_.begin(), drives_.end(), drive);
  if (it != drives_.end()) return static_cast<uint16_t>(it - drives_.begin());
  drives_.push_back(drive);
  return static_cast<uint16_t>(drives_.size() - 1);
}

Task<Status> ObjectWriter::waitFor(int slot) {
  if (in_flight_[slot]) {
    Status st = co_await in_flight_[slot]->wait();
    in_flight_[slot].reset();
    if (std::shared_ptr<StripeWrites> sw = std::move(writes_[slot])) {
      std::lock_guard lock(sw->mu);  // every put has ended: for the analyzers' sake
      index_kv::StripeLayout& layout = stripes_[sw->index];
      for (size_t j = 0; j < sw->drives.size(); ++j) layout.drives[j] = driveIndex(sw->drives[j]);
      for (const std::string& d : sw->failed) {
        if (std::find(avoid_.begin(), avoid_.end(), d) == avoid_.end()) avoid_.push_back(d);
      }
    }
    if (!st.isOk() && failed_.isOk()) failed_ = std::move(st);
  }
  co_return failed_;
}

Task<Status> ObjectWriter::flush(size_t len) {
  if (!failed_.isOk()) co_return failed_;
  if (len == 0) co_return co_await finish();
  if (!slots_[current_]) co_return Status::internal("ObjectWriter::flush without a buffer");

  const auto profile = dp_.code().profile();
  const uint32_t stripe = static_cast<uint32_t>(stripes_.size());
  const uint32_t fl = dp_.fragmentLenFor(len);
  Slot& slot = *slots_[current_];
  if (len > slot.data_len) co_return Status::invalidArgument("stripe larger than its buffer");
  // Data fragment j starts at j * fl; zero the padding after the object bytes.
  std::fill(slot.data.data() + len, slot.data.data() + uint64_t(profile.k) * fl, 0);

  size_t full = 0;
  // With servers down, a stripe may go degraded onto k failure domains (a domain then
  // holds more than one fragment; docs/ec-placement.md): every fragment is still written.
  std::string placement_key = fmt::format("{}:{}", version_.toHex(), stripe);
  auto chosen = placement::chooseDrives(
      dp_.map(), placement_key, profile.total(),
      [this, &full](const placement::Drive& d) {
        const bool writable = dp_.chunks().writable(d.id);
        if (!writable && dp_.chunks().reachable(d.id)) ++full;  // full or failing: 507
        return writable && std::find(avoid_.begin(), avoid_.end(), d.id) == avoid_.end();
      },
      profile.k);
  if (!chosen) {
    if (full > 0) {
      co_return Status::noSpace(fmt::format("{} drives are full or failing; {}", full,
                                            chosen.error().message()));
    }
    co_return chosen.error();
  }

  index_kv::StripeLayout layout;
  layout.blob_version = version_;
  layout.blob_stripe = stripe;
  layout.data_len = len;
  layout.fragment_len = fl;
  for (size_t d : *chosen) layout.drives.push_back(driveIndex(dp_.map().drives[d].id));

  // Parity first (CPU work off the event loop), then all k + m fragment writes at once.
  Status encoded = co_await offload(dp_.bulkPool(), [&slot, fl, profile, this] {
    std::vector<const uint8_t*> data(profile.k);
    std::vector<uint8_t*> parity(profile.m);
    for (int j = 0; j < profile.k; ++j) data[j] = slot.data.data() + uint64_t(j) * fl;
    for (int j = 0; j < profile.m; ++j) parity[j] = slot.parity.data() + uint64_t(j) * fl;
    dp_.code().encode(fl, data, parity);
    dp_.counters().encoded_bytes.Increment(double(profile.k) * fl);
    return Status::ok();
  });
  if (!encoded.isOk()) co_return encoded;

  written_ += len;
  chunkstore::BlobDescriptor desc;
  desc.id = BlobId{version_, stripe, 0};
  desc.ec = profile;
  desc.stripe_data_len = len;
  desc.bucket = bucket_;
  desc.key = key_;
  desc.flags = flags_ | (written_ == size_ ? chunkstore::kBlobFlagLastStripe : uint16_t{0});
  std::vector<std::string> targets;
  for (uint16_t d : layout.drives) targets.push_back(drives_[d]);
  auto sw = std::make_shared<StripeWrites>(dp_, std::move(placement_key), std::move(desc),
                                           std::move(targets), stripes_.size());
  auto group = std::make_unique<TaskGroup>(dp_.bulkPool(), executor_);
  for (int j = 0; j < profile.total(); ++j) {
    const uint8_t* p = j < profile.k ? slot.data.data() + uint64_t(j) * fl
                                     : slot.parity.data() + uint64_t(j - profile.k) * fl;
    // The pool thread submits the fragment's write; the task ends when the fragment is
    // durable, without a thread waiting for the disk meanwhile.
    group->spawnAsync(
        [sw, j, keep = slots_[current_], bytes = std::span<const uint8_t>(p, fl),
         token = CallsInFlight::Token(dp_.fragmentPuts())](TaskGroup::Done done) mutable {
          putFragment(std::move(sw), j, std::move(keep), bytes, kFragmentPutTries,
                      std::move(done), std::move(token));
        });
  }
  writes_[current_] = std::move(sw);
  in_flight_[current_] = std::move(group);
  stripes_.push_back(std::move(layout));
  // This stripe's writes go on while the caller fills the other buffer: the encoding and
  // submission of a stripe overlap the previous stripe's writes and sync, and at most two
  // stripes are in flight. The primary buffer is the writer's for its whole life; the spare
  // is taken from the budget the first time it is wanted, only if that needs no wait, and
  // then kept and reused like the primary (a fresh 6 MiB per stripe cost the loader's p99
  // under checkpoint PUTs). Without a spare, the writer waits for its stripe and refills
  // the primary: slower, but it never waits for the budget while it holds bytes of it.
  if (current_ == kSpare) {
    current_ = kPrimary;
    co_return co_await waitFor(kPrimary);
  }
  const bool more = written_ < size_;  // after the last stripe nothing is filled again
  if (more && !slots_[kSpare]) {
    if (BufferBudget::Lease spare = dp_.budget().tryAcquire(
            slot_data_len_ + slot_parity_len_, BufferBudget::Kind::kUpload);
        spare.held()) {
      slots_[kSpare] =
          std::make_shared<Slot>(slot_data_len_, slot_parity_len_, std::move(spare));
    }
  }
  Status st = co_await waitFor(kSpare);
  if (!st.isOk()) co_return st;
  if (more && slots_[kSpare]) {
    current_ = kSpare;
    co_return Status::ok();
  }
  co_return co_await waitFor(kPrimary);
}

void ObjectWriter::shrinkTo(uint64_t size) { size_ = std::clamp(size, written_, size_); }

Task<Status> ObjectWriter::finish() {
  (void)co_await waitFor(kPrimary);
  Status st = co_await waitFor(kSpare);
  if (!avoid_.empty()) {
    // Fragments moved: the manifest lists only the drives its stripes use.
    std::vector<std::string> used;
    std::vector<int> remap(drives_.size(), -1);
    for (auto& s : stripes_) {
      for (uint16_t& d : s.drives) {
        if (remap[d] < 0) {
          remap[d] = static_cast<int>(used.size());
          used.push_back(drives_[d]);
        }
        d = static_cast<uint16_t>(remap[d]);
      }
    }
    drives_ = std::move(used);
  }
  // No buffer is needed any more: give the budget back now, not when the writer goes.
  slots_[kPrimary].reset();
  slots_[kSpare].reset();
  co_return st;
}

Task<void> removeFragments(DataPath& dp, asio::any_io_executor executor,
                           const std::vector<std::string>& drives,
                           const std::vector<index_kv::StripeLayout>& stripes,
                           std::string_view what) {
  TaskGroup cleanup(dp.bulkPool(), std::move(executor));
  for (const auto& s : stripes) {
    for (size_t j = 0; j < s.drives.size(); ++j) {
      if (s.drives[j] >= drives.size()) continue;
      BlobId id{s.blob_version, s.blob_stripe, static_cast<uint16_t>(j)};
      std::string drive = drives[s.drives[j]];
      cleanup.spawn([&dp, id, drive, what] {
        Status st = dp.chunks().remove(drive, id);
        if (!st.isOk() && !st.isNotFound()) {
          log::warn("{}: cannot remove {} on {}: {}", what, id.toString(), drive, st.toString());
        }
        return Status::ok();
      });
    }
  }
  (void)co_await cleanup.wait();
}

Task<void> ObjectWriter::abandon() {
  (void)co_await finish();
  co_await removeFragments(dp_, executor_, drives_, stripes_, "abandon");
}

namespace {

// A stripe slice being read: [first, first + length) of the stripe's object bytes.
struct FastReads {
  std::mutex mu;
  std::vector<Status> results;  // per data fragment touched
  // 1 once its read ended. Bytes, not std::vector<bool>: the event loop sets some while
  // workers set others, and bits of one word would race.
  std::vector<uint8_t> done;
  // The bytes the reads land in: theirs to hold, as a hedged read moves on without them.
  std::shared_ptr<AlignedBytes> out;
  // Their charge to the buffer budget, given back with them: reads a hedge left behind on
  // a stalled drive keep counting until they end.
  BufferBudget::Lease lease;
};

struct StripeRead {
  const index_kv::StripeLayout* layout = nullptr;
  uint64_t first = 0;
  uint64_t length = 0;
  std::shared_ptr<AlignedBytes> out;  // the stripe slice's bytes once read
  std::shared_ptr<FastReads> reads;
  BufferBudget::Lease hedge_lease;  // the hedged decode's own slice buffer
  std::unique_ptr<TaskGroup> group;
};

Status unreachable(const std::string& drive) {
  return Status::unavailable("the server of drive " + drive + " does not answer (not asked)");
}

Status stalled(std::string_view drive, size_t reads) {
  return Status::unavailable(
      fmt::format("drive {} is stalled: {} or more reads of its server running, none of "
                  "its own ended in {} ms (not asked)",
                  drive, reads, DataPath::kStalledRead.count()));
}

BlobId blobOf(const index_kv::StripeLayout& s, int j) {
  return BlobId{s.blob_version, s.blob_stripe, static_cast<uint16_t>(j)};
}

// Reads fragment `id` (bytes [off, off + dst.size())) of `drive` and counts it if it
// fails: where it fails, once, whoever waits for it (a hedge may not).
Status readFragment(DataPath& dp, const std::string& drive, const BlobId& id, uint64_t off,
                    std::span<uint8_t> dst) {
  Status st = dp.chunks().read(drive, id, off, dst);
  if (!st.isOk()) {
    dp.counters().fragment_errors.Increment();
    if (st.isCorruption()) dp.counters().crc_failures.Increment();
    log::warn("fragment {} on {}: {}", id.toString(), drive, st.toString());
  }
  return st;
}

// Happy path: read only the touched parts of the data fragments, in parallel.
std::unique_ptr<StripeRead> startStripeRead(DataPath& dp, const index_kv::Manifest& m,
                                            const index_kv::StripeLayout& s, uint64_t first,
                                            uint64_t length, asio::any_io_executor ex) {
  auto r = std::make_unique<StripeRead>();
  r->layout = &s;
  r->first = first;
  r->length = length;
  r->out = std::make_shared<AlignedBytes>(length);
  r->group = std::make_unique<TaskGroup>(dp.pool(), ex);
  const uint64_t fl = s.fragment_len;
  const int j0 = static_cast<int>(first / fl);
  const int j1 = static_cast<int>((first + length - 1) / fl);
  r->reads = std::make_shared<FastReads>();
  r->reads->results.resize(j1 - j0 + 1);
  r->reads->done.resize(j1 - j0 + 1, 0);
  r->reads->out = r->out;
  for (int j = j0; j <= j1; ++j) {
    uint64_t lo = std::max<uint64_t>(first, uint64_t(j) * fl);
    uint64_t hi = std::min<uint64_t>(first + length, uint64_t(j + 1) * fl);
    uint8_t* dst = r->out->data() + (lo - first);
    std::string drive = m.drives[s.drives[j]];
    if (!dp.chunks().reachable(drive)) {
      // Its server does not answer: decode from parity at once rather than wait for a
      // connection to time out.
      r->reads->results[j - j0] = unreachable(drive);
      r->reads->done[j - j0] = 1;
      continue;
    }
    const uint64_t off = lo - uint64_t(j) * fl, n = hi - lo;
    if (dp.chunks().readIfCached(drive, blobOf(s, j), off, {dst, n})) {
      // In memory and verified, here on the event loop: no hop to a worker and back.
      r->reads->done[j - j0] = 1;
      continue;
    }
    r->group->spawn([&dp, reads = r->reads, idx = j - j0, drive, id = blobOf(s, j), off,
                     dst, n]() mutable {
      // Let go of when this returns, before the group hears it ended: the slice's buffer
      // and its budget charge go with the last read, so a reader done with the slice
      // finds them given back (not with the task, which a worker destroys later).
      std::shared_ptr<FastReads> held = std::move(reads);
      // Refused: decoded from parity, and asked after all should the others fall short.
      auto running = dp.beginRead(drive);
      Status st = running ? readFragment(dp, drive, id, off, {dst, n})
                          : stalled(drive, dp.readsPerDrive());
      std::lock_guard lock(held->mu);
      held->results[idx] = std::move(st);
      held->done[idx] = 1;
      return Status::ok();
    });
  }
  return r;
}

// Degraded path: read whole fragments from every other drive and rebuild the stripe.
// `failed_data[j]`: data fragment j is not counted on; `ask_again[j]`: it may still be
// read whole should the others fall short.
Task<Status> decodeStripe(DataPath& dp, const index_kv::Manifest& m, StripeRead& r,
                          const std::vector<bool>& failed_data,
                          const std::vector<bool>& ask_again) {
  const auto& s = *r.layout;
  const int k = m.ec.k, total = m.ec.total();
  const uint64_t fl = s.fragment_len;
  if (static_cast<int>(s.drives.size()) != total) {
    co_return Status::corruption("manifest stripe has the wrong number of fragments");
  }
  // The decode space (k + m whole fragments, 6 MiB with 4+2) is charged to the buffer
  // budget like a stripe slice: many streams reading around a failed drive must not grow
  // memory with their number. A read may wait for it while holding its slice: the wait is
  // bounded (the budget's patience, then an overdraft).
  BufferBudget::Lease space = co_await dp.budget().acquire(uint64_t(total) * fl);
  std::vector<uint8_t> frags(uint64_t(total) * fl);
  auto ok = std::make_shared<std::vector<Status>>(total);
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  // On servers believed down, failed on the fast path, or refused for their drive's reads
  // running (DataPath::beginRead): asked only if the others fall short, and then even if
  // their drive is busy.
  std::vector<int> skipped;
  std::vector<uint8_t> refused(total, 0);
  auto readAll = [&](const std::vector<int>& which, bool must) -> Task<void> {
    TaskGroup group(dp.pool(), ex);
    for (int j : which) {
      std::string drive = m.drives[s.drives[j]];
      group.spawn([&dp, ok, &refused, j, drive, id = blobOf(s, j),
                   dst = frags.data() + uint64_t(j) * fl, fl, must] {
        auto running = dp.beginRead(drive, must);
        refused[j] = !running;
        if (!running) {
          (*ok)[j] = stalled(drive, dp.readsPerDrive());
          return Status::ok();
        }
        (*ok)[j] = readFragment(dp, drive, id, 0, {dst, fl});
        return Status::ok();
      });
    }
    (void)co_await group.wait();
  };
  // Read first: the data fragments counted on, and parity up to k fragments in all; the
  // other parity only should those fall short. Reading every fragment would wait for the
  // slowest of k + m - 1 (a hung server: the I/O timeout, on every stripe) and move
  // (m - 1) fragments more than the decode needs.
  std::vector<int> first, spare;
  for (int j = 0; j < total; ++j) {
    if (j < k && failed_data[j]) {
      (*ok)[j] = Status::corruption("failed on the fast path");
      // A read that failed is asked again if the others fall short: it may have failed for
      // a passing reason (a server believed down that answers, one failed exchange). One
      // still in flight (a hedge) is not: its answer is being waited for elsewhere.
      if (ask_again[j]) skipped.push_back(j);
    } else if (!dp.chunks().reachable(m.drives[s.drives[j]])) {
      (*ok)[j] = unreachable(m.drives[s.drives[j]]);
      skipped.push_back(j);
    } else if (static_cast<int>(first.size()) < k) {
      first.push_back(j);
    } else {
      (*ok)[j] = Status::unavailable("not read: enough other fragments");
      spare.push_back(j);
    }
  }
  co_await readAll(first, false);
  const auto readable = [&] {
    return std::count_if(ok->begin(), ok->end(), [](const Status& st) { return st.isOk(); });
  };
  if (readable() < k && !spare.empty()) co_await readAll(spare, false);
  if (readable() < k) {
    for (const auto* tried : {&first, &spare}) {
      for (int j : *tried) {
        if (refused[j]) skipped.push_back(j);
      }
    }
    if (!skipped.empty()) co_await readAll(skipped, true);
  }
  std::vector<bool> present(total);
  std::vector<uint8_t*> ptrs(total);
  int have = 0;
  for (int j = 0; j < total; ++j) {
    present[j] = (*ok)[j].isOk();
    have += present[j];
    ptrs[j] = frags.data() + uint64_t(j) * fl;
  }
  if (have < k) {
    co_return Status::unavailable(
        fmt::format("stripe {}: only {} of {} fragments readable", s.blob_stripe, have, total));
  }
  std::unique_ptr<bool[]> present_arr(new bool[total]);
  for (int j = 0; j < total; ++j) present_arr[j] = present[j];
  auto code = dp.codeFor(m.ec);
  if (!code) co_return code.error();
  const ec::ErasureCode* decoder = *code;
  Status st = co_await offload(dp.pool(), [&] {
    // Data only: the parity not read (or lost) is of no use to this read.
    return decoder->reconstructData(fl, ptrs, std::span<const bool>(present_arr.get(), total));
  });
  if (!st.isOk()) co_return st;
  dp.counters().degraded_stripes.Increment();
  dp.counters().decoded_bytes.Increment(static_cast<double>(uint64_t(k) * fl));
  std::memcpy(r.out->data(), frags.data() + r.first, r.length);
  co_return Status::ok();
}

// The data fragment reads did not all answer within the hedging delay: decode the stripe
// from the other fragments into a fresh buffer (the slow reads keep theirs). If that
// cannot be done, wait for the slow reads after all. `ok` on return: the stripe is read.
Task<std::optional<Status>> hedgeStripeRead(DataPath& dp, const index_kv::Manifest& m,
                                            StripeRead& r) {
  const uint64_t fl = r.layout->fragment_len;
  const int j0 = static_cast<int>(r.first / fl);
  std::vector<bool> slow(m.ec.k, false);
  std::vector<bool> failed(m.ec.k, false);
  {
    std::lock_guard lock(r.reads->mu);
    for (size_t i = 0; i < r.reads->done.size(); ++i) {
      // Failed ones too: the decode does not count on them.
      slow[j0 + i] = !r.reads->done[i] || !r.reads->results[i].isOk();
      failed[j0 + i] = r.reads->done[i] && !r.reads->results[i].isOk();
    }
  }
  // A second slice buffer, charged: with the budget spent, the fast reads are waited for.
  BufferBudget::Lease extra = dp.budget().tryAcquire(r.length);
  if (!extra.held()) co_return std::nullopt;
  auto fast = r.out;
  r.out = std::make_shared<AlignedBytes>(r.length);
  r.hedge_lease = std::move(extra);
  Status st = co_await decodeStripe(dp, m, r, slow, failed);
  if (st.isOk()) {
    dp.counters().hedged_stripes.Increment();  // decoded: counted once it is
    co_return st;
  }
  log::warn("stripe {} of {}: hedged decode failed ({}); waiting for the data fragments",
            r.layout->blob_stripe, m.version.toHex(), st.toString());
  r.out = std::move(fast);
  r.hedge_lease.reset();
  co_return std::nullopt;  // the caller waits for the fast reads
}

Task<Status> finishStripeRead(DataPath& dp, const index_kv::Manifest& m, StripeRead& r) {
  const auto hedge = dp.hedgeAfter();
  if (hedge.count() > 0 && m.ec.m > 0) {
    const bool finished = co_await r.group->waitFor(hedge);
    if (!finished) {
      std::optional<Status> hedged = co_await hedgeStripeRead(dp, m, r);
      if (hedged) co_return *hedged;
    }
  }
  (void)co_await r.group->wait();
  const uint64_t fl = r.layout->fragment_len;
  const int j0 = static_cast<int>(r.first / fl);
  std::vector<bool> failed(m.ec.k, false);
  bool any = false;
  {
    std::lock_guard lock(r.reads->mu);
    for (size_t i = 0; i < r.reads->results.size(); ++i) {
      failed[j0 + i] = !r.reads->results[i].isOk();  // counted where it failed, if read
      any = any || failed[j0 + i];
    }
  }
  if (!any) co_return Status::ok();
  co_return co_await decodeStripe(dp, m, r, failed, failed);
}

}  // namespace

namespace {
// The stripe slices covering object bytes [first, first + length), in order.
struct Slice {
  const index_kv::StripeLayout* s;
  uint64_t first, length;
};
Result<std::vector<Slice>> slicesOf(const index_kv::Manifest& manifest, uint64_t first,
                                    uint64_t length) {
  std::vector<Slice> slices;
  uint64_t pos = 0, end = first + length;
  for (const auto& s : manifest.stripes) {
    uint64_t s_end = pos + s.data_len;
    if (s_end > first && pos < end) {
      uint64_t lo = std::max(first, pos), hi = std::min(end, s_end);
      if (uint64_t(manifest.ec.k) * s.fragment_len < s.data_len ||
          s.drives.size() != static_cast<size_t>(manifest.ec.total())) {
        return fail(Status::corruption("manifest stripe layout is inconsistent"));
      }
      slices.push_back({&s, lo - pos, hi - lo});
    }
    pos = s_end;
    if (pos >= end) break;
  }
  if (pos < end) return fail(Status::corruption("manifest stripes shorter than the object"));
  return slices;
}
}  // namespace

namespace {
// A data fragment's share of a stripe slice: payload bytes [offset, offset + length) of
// blob `id` on `drive`.
struct FragmentRange {
  const std::string& drive;
  BlobId id;
  uint64_t offset, length;
};

// The data fragment ranges holding the slice's bytes, in order.
std::vector<FragmentRange> fragmentRanges(const index_kv::Manifest& manifest, const Slice& sl) {
  std::vector<FragmentRange> out;
  const uint64_t fl = sl.s->fragment_len;
  for (uint64_t at = sl.first; at < sl.first + sl.length;) {
    const uint64_t j = at / fl;
    const uint64_t n = std::min(sl.first + sl.length, (j + 1) * fl) - at;
    out.push_back({manifest.drives[sl.s->drives[j]], blobOf(*sl.s, static_cast<int>(j)),
                   at - j * fl, n});
    at += n;
  }
  return out;
}

// Sends the slice's leading fragment ranges that are in the page cache with the sink's
// sendFile, each verified and pinned there just before its send (so the window in which
// the kernel could drop a checked page and read it again unchecked stays one range's
// send); `sent` is set to the bytes sent, up to the first range that is not cached.
// `whole`: all of the slice or nothing (the ranges are all verified and pinned first, so
// the window above is the whole slice's sends): a GET's first slice, whose bytes must not
// go out before the rest is known readable, since the first byte sent commits the
// response to 200 (a failure after it can only cut the body short).
Task<Status> sendCachedRanges(DataPath& dp, const index_kv::Manifest& manifest,
                              const Slice& sl, BodySink& sink, bool whole, uint64_t& sent) {
  sent = 0;
  std::vector<chunkstore::CachedRange> pinned;  // `whole`: all pinned before any is sent
  const std::vector<FragmentRange> ranges = fragmentRanges(manifest, sl);
  for (size_t i = 0; i < ranges.size(); ++i) {
    const FragmentRange& fr = ranges[i];
    std::optional<chunkstore::CachedRange> r =
        dp.chunks().pinIfCached(fr.drive, fr.id, fr.offset, fr.length);
    if (!r) {
      if (whole) co_return Status::ok();
      break;
    }
    pinned.push_back(std::move(*r));
    if (whole && i + 1 < ranges.size()) continue;
    for (const chunkstore::CachedRange& p : pinned) {
      Status st = co_await sink.sendFile(p.fd, p.offset, p.length);
      if (!st.isOk()) co_return st;
      dp.counters().sent_from_cache.Increment(static_cast<double>(p.length));
      sent += p.length;
    }
    pinned.clear();
  }
  co_return Status::ok();
}
}  // namespace

Status readRangeDirect(DataPath& dp, const index_kv::Manifest& manifest, uint64_t first,
                       uint64_t length, uint8_t* out) {
  if (length == 0) return Status::ok();
  auto slices = slicesOf(manifest, first, length);
  if (!slices) return slices.error();
  for (const Slice& sl : *slices) {
    for (const FragmentRange& fr : fragmentRanges(manifest, sl)) {
      // As the stripe reads: a server believed down is not waited on (connect timeouts,
      // retries) when the caller's degraded path can read around it at once.
      if (!dp.chunks().reachable(fr.drive)) return unreachable(fr.drive);
      auto running = dp.beginRead(fr.drive);
      if (!running) return stalled(fr.drive, dp.readsPerDrive());
      GRANARY_RETURN_IF_ERROR(readFragment(dp, fr.drive, fr.id, fr.offset, {out, fr.length}));
      out += fr.length;
    }
  }
  return Status::ok();
}

Task<Status> readObjectRange(DataPath& dp, const index_kv::Manifest& manifest, uint64_t first,
                             uint64_t length, BodySink& sink, bool prepaid,
                             BufferBudget::Holds holds) {
  if (length == 0) co_return Status::ok();
  auto ex = co_await asio::this_coro::executor;
  auto sliced = slicesOf(manifest, first, length);
  if (!sliced) co_return sliced.error();
  const std::vector<Slice>& slices = *sliced;

  // Fragment ranges in the page cache (that pass their CRCs there) go out with sendfile
  // when the sink can: no buffer, no copy. The rest of a slice is read into a stripe buffer
  // charged to the data path's BufferBudget. The one being sent is waited for, holding
  // nothing; the read-ahead of the next slice, after a slice that needed a buffer, is
  // started only when the budget has room for it now (buffer_budget.h, "Deadlock rule").
  const bool send_files = dp.sendfile() && sink.sendsFiles();
  std::unique_ptr<StripeRead> next;
  for (size_t i = 0; i < slices.size(); ++i) {
    Slice sl = slices[i];
    if (!next && send_files) {
      uint64_t sent = 0;
      Status st = co_await sendCachedRanges(dp, manifest, sl, sink, /*whole=*/i == 0, sent);
      if (!st.isOk()) co_return st;
      if (sent == sl.length) continue;
      sl.first += sent;
      sl.length -= sent;
    }
    if (!next) {
      BufferBudget::Lease got;
      if (!prepaid) {
        // Initialised from the co_await, then moved: no temporary of a co_await expression
        // with a destructor (the g++ 12 note in task_group.h).
        BufferBudget::Lease taken =
            co_await dp.budget().acquire(sl.length, BufferBudget::Kind::kRead, holds);
        if (!taken.held()) co_return BufferBudget::spent();
        got = std::move(taken);
      }
      next = startStripeRead(dp, manifest, *sl.s, sl.first, sl.length, ex);
      next->reads->lease = std::move(got);
    }
    std::unique_ptr<StripeRead> cur = std::move(next);
    Status st = co_await finishStripeRead(dp, manifest, *cur);
    if (!st.isOk()) co_return st;
    if (i + 1 < slices.size()) {
      const auto& n = slices[i + 1];
      BufferBudget::Lease ahead;
      if (!prepaid) ahead = dp.budget().tryAcquire(n.length);
      if (prepaid || ahead.held()) {
        next = startStripeRead(dp, manifest, *n.s, n.first, n.length, ex);
        next->reads->lease = std::move(ahead);
      }
    }
    st = co_await sink.write(cur->out->span());
    if (!st.isOk()) {
      if (next) (void)co_await next->group->wait();
      co_return st;
    }
  }
  co_return Status::ok();
}

namespace {

class StringSink final : public BodySink {
 public:
  explicit StringSink(std::string& out) : out_(out) {}
  Task<Status> writeHead(const S3Response&, uint64_t) override { co_return Status::ok(); }
  Task<Status> write(std::span<const uint8_t> data) override {
    out_.append(reinterpret_cast<const char*>(data.data()), data.size());
    co_return Status::ok();
  }

 private:
  std::string& out_;
};

// Receives one span's bytes in order and feeds each range the bytes of it they hold.
class RangesCrcSink final : public BodySink {
 public:
  RangesCrcSink(WorkerPool& pool, std::span<const ByteRange> ranges,
                const std::vector<size_t>& order, std::vector<uint32_t>& crcs)
      : pool_(pool), ranges_(ranges), order_(order), crcs_(crcs) {}
  // The span's bytes start at `pos`.
  void startAt(uint64_t pos) { pos_ = pos; }
  Task<Status> writeHead(const S3Response&, uint64_t) override { co_return Status::ok(); }
  Task<Status> write(std::span<const uint8_t> data) override {
    // A stripe's worth takes tens of microseconds: on a worker, not the event loop.
    if (data.size() < kInline) {
      feed(data);
    } else {
      co_await offload(pool_, [&] {
        feed(data);
        return 0;
      });
    }
    co_return Status::ok();
  }

 private:
  void feed(std::span<const uint8_t> data) {
    const uint64_t end = pos_ + data.size();
    while (next_ < order_.size() && ranges_[order_[next_]].first < end) {
      if (ranges_[order_[next_]].length > 0) active_.push_back(order_[next_]);
      ++next_;
    }
    std::erase_if(active_, [&](size_t i) {
      const ByteRange& r = ranges_[i];
      const uint64_t lo = std::max(r.first, pos_);
      const uint64_t hi = std::min(r.first + r.length, end);
      if (lo < hi) crcs_[i] = ec::crc32c(data.subspan(lo - pos_, hi - lo), crcs_[i]);
      return r.first + r.length <= end;
    });
    pos_ = end;
  }

  static constexpr size_t kInline = 64 * 1024;
  WorkerPool& pool_;
  std::span<const ByteRange> ranges_;
  const std::vector<size_t>& order_;
  std::vector<uint32_t>& crcs_;
  uint64_t pos_ = 0;
  size_t next_ = 0;             // in order_: the next range to start
  std::vector<size_t> active_;  // ranges started and not ended
};

}  // namespace

CrcPlan planCrcs(std::span<const ByteRange> ranges) {
  CrcPlan plan;
  plan.order.resize(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) plan.order[i] = i;
  std::sort(plan.order.begin(), plan.order.end(), [&](size_t a, size_t b) {
    return std::pair{ranges[a].first, ranges[a].length} <
           std::pair{ranges[b].first, ranges[b].length};
  });
  for (size_t i : plan.order) {
    const ByteRange& r = ranges[i];
    if (r.length == 0) continue;
    if (!plan.spans.empty() && r.first <= plan.spans.back().second + kCrcSpanGap) {
      plan.spans.back().second = std::max(plan.spans.back().second, r.first + r.length);
    } else {
      plan.spans.emplace_back(r.first, r.first + r.length);
    }
  }
  for (const auto& [first, end] : plan.spans) plan.bytes += end - first;
  return plan;
}

Task<Result<std::vector<uint32_t>>> crc32cOfRanges(DataPath& dp,
                                                   const index_kv::Manifest& manifest,
                                                   std::span<const ByteRange> ranges,
                                                   const CrcPlan& plan) {
  for (const ByteRange& r : ranges) {
    if (r.first > manifest.size || r.length > manifest.size - r.first) {
      co_return fail(Status::internal("the byte range lies outside the object"));
    }
  }
  if (manifest.is_inline && manifest.inline_data.size() < manifest.size) {
    co_return fail(Status::corruption("inline body shorter than the object size"));
  }
  if (plan.order.size() != ranges.size()) {
    co_return fail(Status::internal("a CRC plan made for other ranges"));
  }
  std::vector<uint32_t> crcs(ranges.size(), 0);
  RangesCrcSink sink(dp.pool(), ranges, plan.order, crcs);
  for (const auto& [first, end] : plan.spans) {
    sink.startAt(first);
    Status st;
    if (manifest.is_inline) {
      st = co_await sink.write(
          {reinterpret_cast<const uint8_t*>(manifest.inline_data.data()) + first, end - first});
    } else {
      st = co_await readObjectRange(dp, manifest, first, end - first, sink, /*prepaid=*/false,
                                    BufferBudget::Holds::kNothing);
    }
    if (!st.isOk()) co_return fail(st);
  }
  co_return crcs;
}

Task<Result<std::string>> readObjectBytes(DataPath& dp, const index_kv::Manifest& manifest,
                                          uint64_t first, uint64_t length, bool prepaid) {
  if (first > manifest.size || length > manifest.size - first) {
    co_return fail(Status::internal("the byte range lies outside the object"));
  }
  std::string bytes;
  if (manifest.is_inline) {
    if (manifest.inline_data.size() < first + length) {
      co_return fail(Status::corruption("inline body shorter than the object size"));
    }
    bytes = manifest.inline_data.substr(first, length);
  } else {
    bytes.reserve(length);
    StringSink sink(bytes);
    Status st = co_await readObjectRange(dp, manifest, first, length, sink, prepaid,
                                         BufferBudget::Holds::kNothing);
    if (!st.isOk()) co_return fail(st);
  }
  co_return bytes;
}

}  // namespace granary::gateway

// Reclaimer against a real index and real chunk stores sharing one ManualClock: GC of
// overwritten versions after gc_grace, and the orphan sweep after orphan_grace.
#include "granary/gateway/reclaimer.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <prometheus/registry.h>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "forwarding_index.h"
#include "gateway_test_util.h"
#include "granary/common/random.h"

namespace granary::gateway {
namespace {

using testing::kSecond;
using testing::TestCluster;

using BlobSet = std::set<std::pair<std::string, BlobId>>;

constexpr uint32_t kFragLen = 4096;

struct ReclaimerFixture {
  ReclaimerFixture() : index(cluster.index()) {
    index_kv::BucketInfo b;
    b.name = "bucket";
    b.owner = "root";
    b.created_unix_nanos = cluster.clock.nowUnixNanos();
    REQUIRE(index.createBucket(b).isOk());
    options.gc_grace = std::chrono::seconds(60);
    options.orphan_grace = std::chrono::seconds(3600);
  }

  // Puts `stripes` stripes of k + m fragments of a new version directly on the drives
  // (stripe s on drives rotated by s) and returns its manifest (not committed).
  // `writer_clock`: the clock the version is minted by (the writing gateway's), when not
  // the chunk stores'.
  index_kv::Manifest writeBlobs(uint32_t stripes, const Clock* writer_clock = nullptr) {
    index_kv::Manifest m;
    m.version = VersionId::generate(writer_clock ? *writer_clock : cluster.clock, random);
    m.ec = cluster.map.ec;
    for (const auto& d : cluster.map.drives) m.drives.push_back(d.id);
    const int total = m.ec.total();
    std::vector<uint8_t> payload(kFragLen, 0xAB);
    for (uint32_t s = 0; s < stripes; ++s) {
      index_kv::StripeLayout layout;
      layout.blob_version = m.version;
      layout.blob_stripe = s;
      layout.data_len = uint64_t(m.ec.k) * kFragLen;
      layout.fragment_len = kFragLen;
      for (int j = 0; j < total; ++j) {
        uint16_t d = static_cast<uint16_t>((j + s) % m.drives.size());
        layout.drives.push_back(d);
        chunkstore::BlobDescriptor desc;
        desc.id = BlobId{m.version, s, static_cast<uint16_t>(j)};
        desc.ec = m.ec;
        desc.stripe_data_len = layout.data_len;
        desc.bucket = "bucket";
        desc.key = "key";
        REQUIRE(cluster.local->put(m.drives[d], desc, payload).isOk());
      }
      m.size += layout.data_len;
      m.stripes.push_back(std::move(layout));
    }
    m.etag = "0123456789abcdef0123456789abcdef";
    m.mtime_unix_nanos = cluster.clock.nowUnixNanos();
    return m;
  }

  static BlobSet blobsOf(const index_kv::Manifest& m) {
    BlobSet out;
    for (const auto& s : m.stripes) {
      for (size_t j = 0; j < s.drives.size(); ++j) {
        out.emplace(m.drives[s.drives[j]],
                    BlobId{s.blob_version, s.blob_stripe, static_cast<uint16_t>(j)});
      }
    }
    return out;
  }

  void commit(const std::string& key, const index_kv::Manifest& m) {
    auto r = index.putObject("bucket", key, m, index_kv::Precondition::none());
    REQUIRE(r.has_value());
  }

  // Commits a version of "key" and then another over it, and lets gc_grace pass: the
  // first is on the GC queue and due. Returns {replaced, current}.
  std::pair<index_kv::Manifest, index_kv::Manifest> overwrittenPastGrace() {
    index_kv::Manifest replaced = writeBlobs(1);
    commit("key", replaced);
    index_kv::Manifest current = writeBlobs(1);
    commit("key", current);
    cluster.clock.advance(120 * kSecond);
    return {replaced, current};
  }

  static BlobSet unite(const BlobSet& a, const BlobSet& b) {
    BlobSet out = a;
    out.insert(b.begin(), b.end());
    return out;
  }

  // One GC pass once gc_grace (60 s) has passed since now.
  ReclaimStats gcPastGrace() {
    Reclaimer reclaimer(index, *cluster.chunks, cluster.map, cluster.clock, registry, options);
    cluster.clock.advance(61 * kSecond);
    auto done = reclaimer.collectGarbage();
    REQUIRE(done.has_value());
    return *done;
  }

  // A granary_gc_* series' value (a counter's or a gauge's); `pass`: its label, if any.
  double metric(const std::string& name, const std::string& pass = "") {
    for (const auto& family : registry.Collect()) {
      if (family.name != name) continue;
      for (const auto& m : family.metric) {
        if (!pass.empty() && (m.label.empty() || m.label[0].value != pass)) continue;
        return family.type == prometheus::MetricType::Gauge ? m.gauge.value : m.counter.value;
      }
    }
    FAIL("no series " << name << " " << pass);
    return 0;
  }

  TestCluster cluster;
  index_kv::Index& index;
  SeededRandom random{99};
  ReclaimerOptions options;
  prometheus::Registry registry;
};

TEST_CASE("GC never removes a queued location that the live manifest uses again") {
  ReclaimerFixture f;
  index_kv::Manifest m = f.writeBlobs(1);
  f.commit("key", m);
  // A repair moves fragment 0 to another drive (a copy there), and a later one moves it
  // back before the GC ran: both old locations are queued, one is in use again.
  const std::string home = m.drives[m.stripes[0].drives[0]];
  const uint16_t away_idx = m.stripes[0].drives[5];  // the drive of fragment 5
  index_kv::Manifest away = m;
  away.stripes[0].drives[0] = away_idx;
  const std::string away_drive = m.drives[away_idx];
  REQUIRE(away_drive != home);
  REQUIRE(f.cluster.copyFragment(home, away_drive, BlobId{m.version, 0, 0}).isOk());
  REQUIRE(f.index.relocateFragments("bucket", "key", m, away).isOk());
  REQUIRE(f.index.relocateFragments("bucket", "key", away, m).isOk());

  ReclaimStats done = f.gcPastGrace();
  CHECK(done.entries_done == 2);
  CHECK(done.blobs_removed == 1);  // the copy away from home
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(m));
}

TEST_CASE("GC never removes a queued part location that the part, then its object, uses again") {
  ReclaimerFixture f;
  // Part 1 of an upload, one stripe; its fragment 0 is copied to the drive of fragment 5
  // and the part row moved there and back (repairs), twice: the queue holds its home
  // location under the part's version, which no manifest has.
  index_kv::Manifest w = f.writeBlobs(1);
  auto u = f.cluster.startUpload("bucket", "key", f.random);
  const index_kv::PartInfo part = TestCluster::partOf(w);
  REQUIRE(f.index.putPart("bucket", "key", u.upload_id, part).has_value());
  index_kv::PartInfo away = part;
  away.stripes[0].drives[0] = part.stripes[0].drives[5];
  const std::string own = w.drives[part.stripes[0].drives[0]];
  const std::string there = w.drives[away.stripes[0].drives[0]];
  const BlobId fragment{w.version, 0, 0};
  REQUIRE(f.cluster.copyFragment(own, there, fragment).isOk());
  REQUIRE(f.index.relocatePartFragments("bucket", "key", u.upload_id, part, away).isOk());
  REQUIRE(f.index.relocatePartFragments("bucket", "key", u.upload_id, away, part).isOk());

  ReclaimStats done = f.gcPastGrace();
  CHECK(done.entries_done == 2);
  CHECK(done.blobs_removed == 1);  // the copy away from home
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(w));

  // The same once the upload completed: the object's manifest uses the part's blobs.
  REQUIRE(f.cluster.copyFragment(own, there, fragment).isOk());
  REQUIRE(f.index.relocatePartFragments("bucket", "key", u.upload_id, part, away).isOk());
  index_kv::Manifest m = w;
  m.version = VersionId::generate(f.cluster.clock, f.random);
  m.stripes = away.stripes;
  REQUIRE(f.index.completeUpload("bucket", "key", u.upload_id, m, index_kv::Precondition::none())
              .has_value());
  index_kv::Manifest home = m;
  home.stripes = part.stripes;
  REQUIRE(f.index.relocateFragments("bucket", "key", m, home).isOk());
  done = f.gcPastGrace();
  CHECK(done.entries_done == 2);
  CHECK(done.blobs_removed == 1);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(home));
}

TEST_CASE("GC removes an overwritten version's blobs only after gc_grace, and only those") {
  ReclaimerFixture f;
  index_kv::Manifest old_version = f.writeBlobs(2);
  f.commit("key", old_version);
  f.cluster.clock.advance(kSecond);
  index_kv::Manifest new_version = f.writeBlobs(3);
  f.commit("key", new_version);  // enqueues old_version's blobs for GC
  const BlobSet old_blobs = ReclaimerFixture::blobsOf(old_version);
  const BlobSet new_blobs = ReclaimerFixture::blobsOf(new_version);
  REQUIRE(old_blobs.size() == 12);
  REQUIRE(new_blobs.size() == 18);
  REQUIRE(f.cluster.allBlobs() == ReclaimerFixture::unite(old_blobs, new_blobs));

  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  auto early = reclaimer.collectGarbage();
  REQUIRE(early.has_value());
  CHECK(early->blobs_removed == 0);
  CHECK(early->entries_done == 0);
  f.cluster.clock.advance(59 * kSecond);
  auto still_early = reclaimer.collectGarbage();
  REQUIRE(still_early.has_value());
  CHECK(still_early->blobs_removed == 0);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::unite(old_blobs, new_blobs));

  f.cluster.clock.advance(2 * kSecond);
  auto due = reclaimer.collectGarbage();
  REQUIRE(due.has_value());
  CHECK(due->blobs_removed == 12);
  CHECK(due->entries_done == 1);
  CHECK(f.cluster.allBlobs() == new_blobs);

  // The queue entry is gone: a second pass does nothing.
  auto again = reclaimer.collectGarbage();
  REQUIRE(again.has_value());
  CHECK(again->blobs_removed == 0);
  CHECK(again->entries_done == 0);
  CHECK(f.cluster.allBlobs() == new_blobs);
  auto current = f.index.getObject("bucket", "key");
  REQUIRE(current.has_value());
  CHECK(current->version == new_version.version);
}

TEST_CASE("A GC pass whose gateway lost the lease stops before its next entry") {
  // A paused leader that resumes after another took over must not go on removing blobs
  // beside the new leader's pass: each entry asks again.
  ReclaimerFixture f;
  std::vector<BlobSet> replaced;
  for (int i = 0; i < 3; ++i) {
    index_kv::Manifest old_version = f.writeBlobs(1);
    f.commit("key" + std::to_string(i), old_version);
    f.commit("key" + std::to_string(i), f.writeBlobs(1));  // queues old_version's blobs
    replaced.push_back(ReclaimerFixture::blobsOf(old_version));
  }
  f.cluster.clock.advance(61 * kSecond);
  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  int asked = 0;
  auto first = reclaimer.collectGarbage([&] { return ++asked <= 1; });  // leads for one
  REQUIRE(first.has_value());
  CHECK(first->entries_done == 1);
  CHECK(asked == 2);
  size_t left = 0;
  const BlobSet all = f.cluster.allBlobs();
  for (const BlobSet& blobs : replaced) {
    left += std::all_of(blobs.begin(), blobs.end(),
                        [&](const auto& b) { return all.contains(b); });
  }
  CHECK(left == 2);  // two entries untouched, not half removed
  auto rest = reclaimer.collectGarbage();  // explicit: not asked
  REQUIRE(rest.has_value());
  CHECK(rest->entries_done == 2);
}

TEST_CASE("GC keeps an entry whose blobs cannot be removed and finishes it on a later pass") {
  ReclaimerFixture f;
  auto [old_version, new_version] = f.overwrittenPastGrace();
  f.cluster.chunks->failRemoves("d1", Status::ioError("drive offline", true));

  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  auto first = reclaimer.collectGarbage();
  REQUIRE(first.has_value());
  CHECK(first->blobs_removed == 5);
  CHECK(first->entries_done == 0);
  CHECK(first->entries_kept == 1);
  CHECK(first->remove_errors == 1);
  BlobSet left = ReclaimerFixture::blobsOf(new_version);
  left.emplace("d1", BlobId{old_version.version, 0, 1});  // rotation 0: fragment 1 on d1
  CHECK(f.cluster.allBlobs() == left);
  // What an operator sees of an entry that stays: kept, and the failed removal.
  CHECK(f.metric("granary_gc_entries_kept") == 1);
  CHECK(f.metric("granary_gc_remove_errors_total", "gc") == 1);
  CHECK(f.metric("granary_gc_blobs_removed_total", "gc") == 5);
  CHECK(f.metric("granary_gc_entries_done_total") == 0);

  f.cluster.chunks->clearFaults();
  auto second = reclaimer.collectGarbage();
  REQUIRE(second.has_value());
  CHECK(second->blobs_removed == 1);
  CHECK(second->entries_done == 1);
  CHECK(second->entries_kept == 0);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(new_version));
  CHECK(f.metric("granary_gc_entries_kept") == 0);
  CHECK(f.metric("granary_gc_remove_errors_total", "gc") == 1);
  CHECK(f.metric("granary_gc_blobs_removed_total", "gc") == 6);
  CHECK(f.metric("granary_gc_entries_done_total") == 1);
}

TEST_CASE("The GC's kept-entries gauge falls to 0 when a pass finds the queue empty") {
  ReclaimerFixture f;
  f.overwrittenPastGrace();
  f.cluster.chunks->failRemoves("d1", Status::ioError("drive offline", true));
  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  REQUIRE(reclaimer.collectGarbage().has_value());
  REQUIRE(f.metric("granary_gc_entries_kept") == 1);
  // The entry leaves the queue some other way (another gateway's GC finished it).
  auto due = f.index.gcDue(f.cluster.clock.nowUnixNanos(), 10);
  REQUIRE(due.has_value());
  REQUIRE(f.index.gcDone(*due).isOk());
  auto empty = reclaimer.collectGarbage();
  REQUIRE(empty.has_value());
  CHECK(empty->entries_kept == 0);
  CHECK(f.metric("granary_gc_entries_kept") == 0);
}

TEST_CASE("GC finishes entries naming a drive taken out of the map, the sweep gets its blobs") {
  ReclaimerFixture f;
  auto [old_version, new_version] = f.overwrittenPastGrace();
  // d1 is decommissioned: the map no longer names it (its server may still answer).
  placement::ClusterMap smaller = f.cluster.map;
  std::erase_if(smaller.drives, [](const placement::Drive& d) { return d.id == "d1"; });
  Reclaimer reclaimer(f.index, *f.cluster.chunks, smaller, f.cluster.clock, f.registry, f.options);
  auto gc = reclaimer.collectGarbage();
  REQUIRE(gc.has_value());
  CHECK(gc->blobs_removed == 5);
  CHECK(gc->entries_done == 1);  // not kept for ever
  BlobSet left = ReclaimerFixture::blobsOf(new_version);
  left.emplace("d1", BlobId{old_version.version, 0, 1});
  CHECK(f.cluster.allBlobs() == left);
  // Back in the map, what d1 still holds of the old version is an orphan.
  f.cluster.clock.advance(2 * 3600 * kSecond);
  Reclaimer whole(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                  f.options);
  CHECK(whole.sweepOrphans().value().blobs_removed == 1);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(new_version));
}

TEST_CASE("Entries stuck on a drive that is down hide none behind them, and it is asked once") {
  ReclaimerFixture f;
  // More overwritten versions than one page of the queue: every entry has a fragment on d1.
  constexpr int kVersions = 300;
  index_kv::Manifest last;
  for (int i = 0; i < kVersions; ++i) {
    last = f.writeBlobs(1);
    f.commit("key", last);
  }
  f.cluster.clock.advance(120 * kSecond);
  f.cluster.chunks->failRemoves("d1", Status::unavailable("server down"));
  const int injected_before = f.cluster.chunks->injected();

  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  auto first = reclaimer.collectGarbage();
  REQUIRE(first.has_value());
  CHECK(first->blobs_removed == (kVersions - 1) * 5);  // all but each one's d1 fragment
  CHECK(first->entries_done == 0);
  CHECK(f.cluster.chunks->injected() - injected_before == 1);  // d1 asked once this pass

  f.cluster.chunks->clearFaults();
  auto second = reclaimer.collectGarbage();
  REQUIRE(second.has_value());
  CHECK(second->blobs_removed == kVersions - 1);
  CHECK(second->entries_done == kVersions - 1);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(last));
}

TEST_CASE("GC of a deleted object removes its blobs after gc_grace") {
  ReclaimerFixture f;
  index_kv::Manifest m = f.writeBlobs(2);
  f.commit("gone", m);
  auto removed = f.index.deleteObject("bucket", "gone", index_kv::Precondition::none());
  REQUIRE(removed.has_value());
  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  CHECK(reclaimer.collectGarbage().value().blobs_removed == 0);
  CHECK(f.cluster.allBlobs().size() == 12);
  f.cluster.clock.advance(61 * kSecond);
  CHECK(reclaimer.collectGarbage().value().blobs_removed == 12);
  CHECK(f.cluster.allBlobs().empty());
}

TEST_CASE("The orphan sweep removes old unreferenced blobs and keeps young or referenced ones") {
  ReclaimerFixture f;
  // At t0: an orphan (a PUT that died before its commit) and a committed object.
  index_kv::Manifest orphan = f.writeBlobs(2);
  index_kv::Manifest live = f.writeBlobs(1);
  f.commit("live", live);
  // An overwritten version still waiting on the GC queue is referenced too.
  index_kv::Manifest queued = f.writeBlobs(1);
  f.commit("overwritten", queued);
  f.cluster.clock.advance(2 * 3600 * kSecond);
  index_kv::Manifest replacement = f.writeBlobs(1);
  f.commit("overwritten", replacement);
  // At t0 + 2h: a young orphan (a PUT in progress).
  index_kv::Manifest young = f.writeBlobs(1);

  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  auto swept = reclaimer.sweepOrphans();
  REQUIRE(swept.has_value());
  CHECK(swept->blobs_removed == 12);
  CHECK(swept->entries_done == 12 + 6 + 6 + 6 + 6);  // every blob examined once
  BlobSet expected = ReclaimerFixture::blobsOf(live);
  for (const auto* m : {&queued, &replacement, &young}) {
    expected = ReclaimerFixture::unite(expected, ReclaimerFixture::blobsOf(*m));
  }
  CHECK(f.cluster.allBlobs() == expected);

  // Once the young orphan is old enough, it goes too; the queued version stays.
  f.cluster.clock.advance(3601 * kSecond);
  auto later = reclaimer.sweepOrphans();
  REQUIRE(later.has_value());
  CHECK(later->blobs_removed == 6);
  expected = ReclaimerFixture::unite(ReclaimerFixture::blobsOf(live),
                                     ReclaimerFixture::blobsOf(replacement));
  expected = ReclaimerFixture::unite(expected, ReclaimerFixture::blobsOf(queued));
  CHECK(f.cluster.allBlobs() == expected);
}

TEST_CASE("The orphan sweep also goes by the writer's clock, which its PUT deadline counts by") {
  ReclaimerFixture f;
  // A write in progress whose gateway's clock runs 2 h ahead of the chunk servers': by the
  // chunk servers' clock its blobs are old, by its own (its version's) they are new.
  ManualClock ahead{f.cluster.clock.nowUnixNanos() + 2 * 3600 * kSecond};
  index_kv::Manifest in_progress = f.writeBlobs(1, &ahead);
  f.cluster.clock.advance(2 * 3600 * kSecond);
  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  auto swept = reclaimer.sweepOrphans();
  REQUIRE(swept.has_value());
  CHECK(swept->blobs_removed == 0);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(in_progress));
  // Old by both clocks: an orphan.
  f.cluster.clock.advance(3601 * kSecond);
  CHECK(reclaimer.sweepOrphans().value().blobs_removed == 6);
  CHECK(f.cluster.allBlobs().empty());
}

TEST_CASE("An empty index put in place of a lost one sweeps nothing older than itself") {
  ReclaimerFixture f;
  index_kv::Manifest committed = f.writeBlobs(2);
  f.commit("k", committed);
  f.cluster.clock.advance(2 * 3600 * kSecond);
  // The index's disk is lost and a new, empty index starts on a fresh directory.
  testing::TempDir fresh_dir;
  RocksResources resources{RocksBudget{8 << 20, 8 << 20}};
  auto fresh = index_kv::openIndex({fresh_dir.path()}, resources, f.cluster.clock);
  REQUIRE(fresh.has_value());
  Reclaimer reclaimer(**fresh, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  f.cluster.clock.advance(2 * 3600 * kSecond);
  auto swept = reclaimer.sweepOrphans();
  REQUIRE(swept.has_value());
  CHECK(swept->blobs_removed == 0);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(committed));
  // What is written after it, and never committed, is its to sweep.
  f.writeBlobs(1);  // an orphan
  f.cluster.clock.advance(2 * 3600 * kSecond);
  CHECK(reclaimer.sweepOrphans().value().blobs_removed == 6);
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(committed));
}

TEST_CASE("A commit landing after the sweep read 'unreferenced' keeps its blobs, a later one fails") {
  ReclaimerFixture f;
  index_kv::Manifest slow = f.writeBlobs(2);    // its commit lands during the sweep
  index_kv::Manifest later = f.writeBlobs(1);   // its commit comes after the sweep
  f.cluster.clock.advance(2 * 3600 * kSecond);  // both past the orphan grace
  // Between the sweep's read and its claim, the slow PUT's commit lands (a request late in
  // a remote index's queue): the claim must lose.
  struct LateCommit final : index_kv::ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Result<bool> markVersionDead(const VersionId& version) override {
      if (commit && version == commit->version) {
        REQUIRE(target_.putObject("bucket", "slow", *commit, index_kv::Precondition::none()));
        commit = nullptr;
      }
      return ForwardingIndex::markVersionDead(version);
    }
    const index_kv::Manifest* commit = nullptr;
  } index(f.index);
  index.commit = &slow;
  Reclaimer reclaimer(index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  auto swept = reclaimer.sweepOrphans();
  REQUIRE(swept.has_value());
  CHECK(swept->blobs_removed == 6);  // `later`'s, not the committed object's
  CHECK(f.cluster.allBlobs() == ReclaimerFixture::blobsOf(slow));
  CHECK(f.index.getObject("bucket", "slow").has_value());
  // The other PUT's commit arrives now: refused, or it would name removed fragments.
  auto put = f.index.putObject("bucket", "later", later, index_kv::Precondition::none());
  REQUIRE_FALSE(put.has_value());
  CHECK(put.error().code() == Status::Code::kTimeout);
}

TEST_CASE("The GC's last-success gauge stays put while passes fail, the last-pass one moves") {
  ReclaimerFixture f;
  struct FailingGc final : index_kv::ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Result<std::vector<index_kv::GcEntry>> gcDue(int64_t before, size_t limit,
                                                 std::string_view after) override {
      if (failing) return fail(Status::unavailable("index down"));
      return ForwardingIndex::gcDue(before, limit, after);
    }
    std::atomic<bool> failing{true};
  } index(f.index);
  f.options.gc_interval = std::chrono::seconds(1);
  Reclaimer reclaimer(index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      f.options);
  // Polls (the passes run on the reclaimer's thread) until `name` is non-zero.
  auto await = [&](const char* name) {
    for (int i = 0; i < 400 && f.metric(name) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return f.metric(name);
  };
  reclaimer.start();
  REQUIRE(await("granary_gc_last_pass_timestamp_seconds") > 0);
  CHECK(f.metric("granary_gc_pass_failures_total", "gc") >= 1);
  CHECK(f.metric("granary_gc_last_success_timestamp_seconds") == 0);
  index.failing = false;
  CHECK(await("granary_gc_last_success_timestamp_seconds") > 0);
  reclaimer.stop();
}

}  // namespace
}  // namespace granary::gateway

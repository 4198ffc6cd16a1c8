// Index checkpoints on the drives, their restore, and rebuildIndex, against real chunk
// stores and real indexes in temp dirs; objects are written by the real ObjectWriter.
#include "granary/gateway/index_recovery.h"

#include <prometheus/registry.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "asio.h"
#include "data_path_util.h"
#include "digest.h"
#include "forwarding_index.h"
#include "gateway_test_util.h"
#include "granary/common/hex.h"
#include "granary/common/random.h"
#include "granary/common/worker_pool.h"
#include "granary/gateway/reclaimer.h"
#include "granary/gateway/repairer.h"
#include "object_io.h"
#include "run_task.h"

namespace granary::gateway {
namespace {

using testing::Counters;
using testing::randomString;
using testing::TestCluster;
using testing::writeAll;

constexpr uint32_t kFragLen = 4096;
constexpr uint64_t kStripe = 4 * kFragLen;  // k = 4

struct RecoveryFixture {
  RecoveryFixture()
      : code(std::move(*ec::ErasureCode::create({4, 2}))),
        dp(cluster.map, *cluster.chunks, *code, pool, pool, kFragLen, testing::countersOf(counters),
           64 << 20),
        index(cluster.index()) {
    makeBucket(index, "bucket");
  }

  static void makeBucket(index_kv::Index& idx, const std::string& name) {
    index_kv::BucketInfo b;
    b.name = name;
    b.owner = "root";
    REQUIRE(idx.createBucket(b).isOk());
  }

  index_kv::MultipartUpload startUpload(const std::string& key) {
    return cluster.startUpload("bucket", key, random);
  }
  // Writes `data` as part 1 of `u` and records it.
  index_kv::PartInfo putPart(const index_kv::MultipartUpload& u, const std::string& data) {
    index_kv::PartInfo p = TestCluster::partOf(write("bucket", u.key, data, /*part=*/true));
    REQUIRE(p.size == data.size());
    REQUIRE(index.putPart("bucket", u.key, u.upload_id, p).has_value());
    return p;
  }
  // Copies fragment `fragment` of stripe 0 of (drives, stripes) to a drive the stripe does
  // not use and removes it from where it was, as a repair does; returns the new drive.
  std::string moveFragment(const std::vector<std::string>& drives,
                           const index_kv::StripeLayout& s, uint16_t fragment) {
    const std::string from = drives[s.drives[fragment]];
    std::set<std::string> used;
    for (auto i : s.drives) used.insert(drives[i]);
    std::string to;
    for (const auto& dr : cluster.map.drives) {
      if (!used.contains(dr.id)) to = dr.id;
    }
    REQUIRE(!to.empty());
    BlobId id{s.blob_version, s.blob_stripe, fragment};
    REQUIRE(cluster.copyFragment(from, to, id).isOk());
    REQUIRE(cluster.local->remove(from, id).isOk());
    return to;
  }

  // Writes `data` as a new version of bucket/key through ObjectWriter (`declared` is the
  // size the writer is told; a larger one leaves the last stripe unmarked, as an upload
  // cut short). Returns the manifest, not committed.
  index_kv::Manifest write(const std::string& bucket, const std::string& key,
                           const std::string& data, bool part = false,
                           std::optional<uint64_t> declared = std::nullopt) {
    cluster.clock.advance(1'000'000);  // distinct, increasing version times
    index_kv::Manifest m;
    m.version = VersionId::generate(cluster.clock, random);
    m.size = data.size();
    m.ec = code->profile();
    m.mtime_unix_nanos = cluster.clock.nowUnixNanos();
    Digest md5(Digest::Kind::kMd5);
    md5.update(data);
    m.etag = toHex(md5.finish());
    ObjectWriter w(dp, m.version, bucket, key, io.get_executor(), declared.value_or(data.size()),
                   part);
    REQUIRE(runTask(io, writeAll(w, data)).isOk());
    m.drives = w.drives();
    m.stripes = w.stripes();
    return m;
  }

  index_kv::Manifest put(index_kv::Index& idx, const std::string& key, const std::string& data,
                         const std::string& bucket = "bucket") {
    auto m = write(bucket, key, data);
    REQUIRE(idx.putObject(bucket, key, m, index_kv::Precondition::none()).has_value());
    return m;
  }

  // The object's bytes as the index describes them, read from the drives.
  std::string read(index_kv::Index& idx, const std::string& key,
                   const std::string& bucket = "bucket") {
    auto m = idx.getObject(bucket, key);
    REQUIRE(m.has_value());
    std::string out(m->size, '\0');
    Status st = readRangeDirect(dp, *m, 0, m->size, reinterpret_cast<uint8_t*>(out.data()));
    INFO(st.toString());
    REQUIRE(st.isOk());
    return out;
  }

  // A checkpointer of another index than the fixture's (a replacement index).
  IndexCheckpointer checkpointerOf(index_kv::Index& idx, prometheus::Registry& reg) {
    CheckpointOptions o;
    o.work_dir = cluster.dir.path() + "/ckpt-work";
    return IndexCheckpointer(idx, *cluster.chunks, cluster.map, cluster.clock, random, reg, o);
  }

  IndexCheckpointer checkpointer(size_t keep = 3) {
    CheckpointOptions o;
    o.work_dir = cluster.dir.path() + "/ckpt-work";
    o.interval = std::chrono::seconds(0);
    o.keep = keep;
    o.piece_bytes = 64 << 10;  // several pieces per file
    return IndexCheckpointer(index, *cluster.chunks, cluster.map, cluster.clock, random,
                             registry, o);
  }

  // Two checkpoints a second apart: the older holds object "a", the newer "a" and "b".
  std::pair<CheckpointInfo, CheckpointInfo> olderAndNewerCheckpoints() {
    put(index, "a", randomString(kStripe, 3));
    auto cp = checkpointer();
    auto older = cp.runOnce();
    REQUIRE(older.has_value());
    put(index, "b", randomString(kStripe, 4));
    cluster.clock.advance(1'000'000'000);
    auto newer = cp.runOnce();
    REQUIRE(newer.has_value());
    return {*older, *newer};
  }

  // System blobs per drive.
  std::map<std::string, std::set<BlobId>> systemBlobs() {
    std::map<std::string, std::set<BlobId>> out;
    for (const auto& [drive, id] : cluster.allBlobs()) {
      if (id.version.isSystem()) out[drive].insert(id);
    }
    return out;
  }

  // The checkpoints with a blob on any drive.
  std::set<VersionId> checkpointVersions() {
    std::set<VersionId> present;
    for (const auto& [drive, ids] : systemBlobs()) {
      for (const auto& id : ids) present.insert(id.version);
    }
    return present;
  }

  // One object, then a checkpoint on m + 1 = 3 drives, with `cp`.
  CheckpointInfo wholeCheckpoint(IndexCheckpointer& cp, uint64_t seed) {
    put(index, "a", randomString(kStripe, seed));
    cluster.clock.advance(1'000'000'000);
    auto whole = cp.runOnce();
    REQUIRE(whole.has_value());
    REQUIRE(whole->copies == 3);
    return *whole;
  }

  // With the drives' faults cleared, the next checkpoint is whole and the only one left.
  void checkWholeAgainPrunesTheRest(IndexCheckpointer& cp) {
    cluster.chunks->clearFaults();
    cluster.clock.advance(1'000'000'000);
    auto next = cp.runOnce();
    REQUIRE(next.has_value());
    CHECK(next->copies == 3);
    CHECK(checkpointVersions() == std::set<VersionId>{next->id});
  }

  // `creation`: kRebuilding for an index rebuildIndex fills, as rebuild-index opens it.
  std::unique_ptr<index_kv::Index> openAt(
      const std::string& dir,
      index_kv::IndexOptions::Creation creation = index_kv::IndexOptions::Creation::kNormal) {
    auto idx = index_kv::openIndex({.dir = dir, .creation = creation}, cluster.resources,
                                   cluster.clock);
    REQUIRE(idx.has_value());
    return std::move(*idx);
  }

  // The newest checkpoint restored into `dir`, opened as rebuild-index opens it.
  std::pair<std::unique_ptr<index_kv::Index>, CheckpointInfo> restoreForRebuild(
      const std::string& dir) {
    auto restored = restoreLatestCheckpoint(*cluster.chunks, cluster.map, dir);
    REQUIRE(restored.has_value());
    return {openAt(dir, index_kv::IndexOptions::Creation::kRebuilding), *restored};
  }
  // rebuildIndex of an index restoreForRebuild gave.
  RebuildStats rebuild(index_kv::Index& idx, const CheckpointInfo& restored) {
    auto stats = rebuildIndex(idx, *cluster.chunks, cluster.map,
                              RebuildOptions{"rootkey", restored.created_unix_nanos});
    REQUIRE(stats.has_value());
    return *stats;
  }

  TestCluster cluster{7};  // one drive more than a stripe needs: room to move fragments
  std::unique_ptr<ec::ErasureCode> code;
  SeededRandom random{11};
  Counters counters;
  prometheus::Registry registry;
  WorkerPool pool{2, "recovery-test"};
  DataPath dp;
  asio::io_context io;
  index_kv::Index& index;
};

constexpr auto kRebuilding = index_kv::IndexOptions::Creation::kRebuilding;

TEST_CASE("A checkpoint goes onto m + 1 failure domains and restores the index as it was") {
  RecoveryFixture f;
  std::string a = randomString(3 * kStripe + 100, 1);
  auto ma = f.put(f.index, "a", a);
  auto cp = f.checkpointer();
  auto info = cp.runOnce();
  REQUIRE(info.has_value());
  CHECK(info->copies == 3);
  CHECK(info->files > 0);
  CHECK(info->id.isSystem());
  auto sys = f.systemBlobs();
  CHECK(sys.size() == 3);  // three drives (each its own domain here) hold a copy
  std::set<std::set<BlobId>> distinct;
  for (const auto& [drive, ids] : sys) distinct.insert(ids);
  CHECK(distinct.size() == 1);  // the same, whole copy on each

  // Written after the checkpoint: not in the restored index.
  f.put(f.index, "later", "x");
  const std::string dir = f.cluster.dir.path() + "/restored";
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir);
  REQUIRE(restored.has_value());
  CHECK(restored->id == info->id);
  CHECK(restored->bytes == info->bytes);
  auto idx = f.openAt(dir);
  auto got = idx->getObject("bucket", "a");
  REQUIRE(got.has_value());
  CHECK(*got == *f.index.getObject("bucket", "a"));
  CHECK(f.read(*idx, "a") == a);
  CHECK(idx->getObject("bucket", "later").error().isNotFound());

  // A non-empty target directory is refused.
  CHECK(restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir).error().code() ==
        Status::Code::kInvalidArgument);
}

TEST_CASE("Old checkpoints are pruned to `keep`, and the orphan sweep leaves checkpoints alone") {
  RecoveryFixture f;
  f.put(f.index, "a", randomString(kStripe, 2));
  auto cp = f.checkpointer(/*keep=*/2);
  std::vector<VersionId> made;
  for (int i = 0; i < 4; ++i) {
    f.cluster.clock.advance(1'000'000'000);
    auto info = cp.runOnce();
    REQUIRE(info.has_value());
    made.push_back(info->id);
  }
  CHECK(f.checkpointVersions() == std::set<VersionId>{made[2], made[3]});

  f.cluster.clock.advance(int64_t{7200} * 1'000'000'000);  // past the orphan grace
  // An index that would give every version up: the sweep must know checkpoints itself
  // (today's index calls a system version referenced, as older than itself, by chance).
  struct KnowsNothing final : index_kv::ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Result<bool> isBlobVersionReferenced(const VersionId&) override { return false; }
    Result<bool> markVersionDead(const VersionId&) override { return true; }
  } forgetful(f.index);
  const auto before = f.systemBlobs();
  Reclaimer reclaimer(forgetful, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                      {});
  REQUIRE(reclaimer.sweepOrphans().has_value());
  CHECK(f.systemBlobs() == before);  // every piece of every checkpoint
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map,
                                          f.cluster.dir.path() + "/r");
  REQUIRE(restored.has_value());
  CHECK(restored->id == made[3]);
}

TEST_CASE("A checkpoint short of m + 1 copies prunes no whole one, and thin ones do not pile up") {
  // With --checkpoint-keep 1, one that landed on a single drive would otherwise leave
  // that drive holding the only checkpoint; and while drives stay down, each interval's
  // thin checkpoint must not add to the last one's.
  RecoveryFixture f;
  auto cp = f.checkpointer(/*keep=*/1);
  const CheckpointInfo whole = f.wholeCheckpoint(cp, 2);
  for (size_t d = 1; d < f.cluster.map.drives.size(); ++d) {
    f.cluster.chunks->setReadOnly(f.cluster.map.drives[d].id);
  }
  f.cluster.clock.advance(1'000'000'000);
  auto thin = cp.runOnce();
  REQUIRE(thin.has_value());
  CHECK(thin->copies == 1);
  CHECK(thin->removed == 0);
  CHECK(f.checkpointVersions() == std::set<VersionId>{whole.id, thin->id});
  f.cluster.clock.advance(1'000'000'000);
  auto thinner = cp.runOnce();
  REQUIRE(thinner.has_value());
  CHECK(f.checkpointVersions() == std::set<VersionId>{whole.id, thinner->id});
  f.checkWholeAgainPrunesTheRest(cp);
}

TEST_CASE("While a drive does not answer, pruning keeps every whole checkpoint") {
  // The silent drive's copies cannot be counted: the whole checkpoint would look thin
  // and go, leaving thin ones alone. Only the thin ones made since go.
  RecoveryFixture f;
  auto cp = f.checkpointer(/*keep=*/1);
  const CheckpointInfo whole = f.wholeCheckpoint(cp, 5);
  auto catalogCopies = [&f](const VersionId& v) {
    size_t n = 0;
    for (const auto& [drive, ids] : f.systemBlobs()) n += ids.contains(BlobId{v, 0, 0});
    return n;
  };
  // One drive holding the whole checkpoint falls silent; one other drive stays writable.
  std::string silent;
  for (const auto& [drive, ids] : f.systemBlobs()) {
    if (ids.contains(BlobId{whole.id, 0, 0})) silent = drive;
  }
  REQUIRE_FALSE(silent.empty());
  f.cluster.chunks->failLists(silent, Status::unavailable("injected: silent"));
  f.cluster.chunks->failPuts(silent, Status::unavailable("injected: silent"));
  bool one_writable = false;
  for (const auto& d : f.cluster.map.drives) {
    if (d.id == silent || one_writable) {
      f.cluster.chunks->setReadOnly(d.id);
    } else {
      one_writable = true;
    }
  }
  f.cluster.clock.advance(1'000'000'000);
  auto thin = cp.runOnce();
  REQUIRE(thin.has_value());
  CHECK(thin->copies == 1);
  CHECK(thin->removed == 0);
  CHECK(catalogCopies(whole.id) == 3);
  f.cluster.clock.advance(1'000'000'000);
  auto thinner = cp.runOnce();
  REQUIRE(thinner.has_value());
  CHECK(thinner->removed > 0);
  CHECK(catalogCopies(whole.id) == 3);
  CHECK(f.checkpointVersions() == std::set<VersionId>{whole.id, thinner->id});
  // The other drives writable again, the silent one still silent: new checkpoints are
  // whole on the drives that answer, and those beyond --checkpoint-keep go (they do not
  // pile up while the drive stays silent); the one it may hold a copy of stays.
  f.cluster.chunks->clearFaults();
  f.cluster.chunks->failLists(silent, Status::unavailable("injected: silent"));
  f.cluster.chunks->setReadOnly(silent);
  std::optional<CheckpointInfo> last;
  for (int i = 0; i < 3; ++i) {
    f.cluster.clock.advance(1'000'000'000);
    last = cp.runOnce().value();
    CHECK(last->copies == 3);
  }
  CHECK(f.checkpointVersions() == std::set<VersionId>{whole.id, last->id});
  f.checkWholeAgainPrunesTheRest(cp);
}

TEST_CASE("An index that replaced a lost one prunes none of the checkpoints made before it") {
  // A new, empty index started where a lost one was must not prune away the checkpoints
  // that could restore the lost one.
  RecoveryFixture f;
  f.put(f.index, "a", randomString(kStripe, 2));
  std::vector<VersionId> before;
  {
    auto cp = f.checkpointer(/*keep=*/2);
    for (int i = 0; i < 2; ++i) {
      f.cluster.clock.advance(1'000'000'000);
      before.push_back(cp.runOnce().value().id);
    }
  }
  f.cluster.clock.advance(1'000'000'000);
  auto fresh = f.openAt(f.cluster.dir.path() + "/fresh-index");
  f.cluster.clock.advance(int64_t{16 * 60 + 1} * 1'000'000'000);  // past its creation's margin
  CheckpointOptions o;
  o.work_dir = f.cluster.dir.path() + "/ckpt-work-fresh";
  o.interval = std::chrono::seconds(0);
  o.keep = 2;
  IndexCheckpointer cp(*fresh, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.random,
                       f.registry, o);
  std::vector<VersionId> after;
  for (int i = 0; i < 3; ++i) {
    f.cluster.clock.advance(1'000'000'000);
    after.push_back(cp.runOnce().value().id);
  }
  CHECK(f.checkpointVersions() == std::set<VersionId>{before[0], before[1], after[1], after[2]});
}

TEST_CASE("Restore falls back to an older checkpoint when the newest cannot be read whole") {
  RecoveryFixture f;
  auto [older, newer] = f.olderAndNewerCheckpoints();
  // Every copy of one piece of the newer checkpoint is lost.
  for (const auto& [drive, ids] : f.systemBlobs()) {
    for (const auto& id : ids) {
      if (id.version == newer.id && id.stripe == 1 && id.fragment == 0) {
        REQUIRE(f.cluster.local->remove(drive, id).isOk());
      }
    }
  }
  const std::string dir = f.cluster.dir.path() + "/restored";
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir);
  REQUIRE(restored.has_value());
  CHECK(restored->id == older.id);
  auto idx = f.openAt(dir);
  CHECK(idx->getObject("bucket", "a").has_value());
  CHECK(idx->getObject("bucket", "b").error().isNotFound());
}

TEST_CASE("Restore stops, not falls back, when a drive does not serve the newest now") {
  // An older checkpoint would drop what was acknowledged after it: a read that timed out
  // (or a server gone for a moment) must not pass the newest over.
  RecoveryFixture f;
  auto [older, newer] = f.olderAndNewerCheckpoints();
  for (const auto& d : f.cluster.map.drives) {
    f.cluster.chunks->failReads(d.id, Status::unavailable("timed out"));
  }
  const std::string dir = f.cluster.dir.path() + "/restored";
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir);
  f.cluster.chunks->clearFaults();
  REQUIRE_FALSE(restored.has_value());
  CHECK(restored.error().code() == Status::Code::kUnavailable);
  CHECK(restored.error().message().find(newer.id.toHex()) != std::string::npos);
  // Once the drives answer, the newest comes back.
  auto again = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir);
  REQUIRE(again.has_value());
  CHECK(again->id == newer.id);
  CHECK(f.openAt(dir)->getObject("bucket", "b").has_value());
}

TEST_CASE("rebuildIndex aborts an upload whose restored part names blobs GC took") {
  // Part 1 was uploaded again after the checkpoint (a retry) and GC removed the first
  // copy's blobs: the restored part row names them, and a Complete would answer 200 for
  // an object that cannot be read.
  RecoveryFixture f;
  const std::string data = randomString(2 * kStripe, 40);
  auto replaced = f.startUpload("replaced");
  const index_kv::PartInfo first = f.putPart(replaced, data);
  auto intact = f.startUpload("intact");
  f.putPart(intact, data);
  auto made = f.checkpointer().runOnce();
  REQUIRE(made.has_value());
  f.putPart(replaced, data);  // the retry: first's blobs go on the GC queue
  f.cluster.clock.advance(int64_t{7200} * 1'000'000'000);
  Reclaimer reclaimer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry, {});
  REQUIRE(reclaimer.collectGarbage().has_value());
  for (const auto& [drive, id] : f.cluster.allBlobs()) {
    REQUIRE(id.version != first.version);  // GC took them
  }

  auto [idx, restored] = f.restoreForRebuild(f.cluster.dir.path() + "/rebuilt");
  REQUIRE(idx->listParts("bucket", "replaced", replaced.upload_id, 0, 10)->at(0).version ==
          first.version);
  RebuildStats stats = f.rebuild(*idx, restored);
  CHECK(stats.uploads_checked == 2);
  CHECK(stats.uploads_aborted == 1);
  CHECK(stats.errors == 0);
  CHECK(idx->getUpload("bucket", "replaced", replaced.upload_id).error().isNotFound());
  CHECK(idx->getUpload("bucket", "intact", intact.upload_id).has_value());
}

TEST_CASE("rebuildIndex points a restored part at the drive a repair moved its fragment to") {
  RecoveryFixture f;
  const std::string data = randomString(2 * kStripe, 41);
  auto u = f.startUpload("moving");
  const index_kv::PartInfo part = f.putPart(u, data);
  REQUIRE(f.checkpointer().runOnce().has_value());
  // After the checkpoint a drain moved fragment 2 of stripe 1: the live index knows,
  // the restored row does not.
  const std::string to = f.moveFragment(part.drives, part.stripes[1], 2);
  auto [idx, restored] = f.restoreForRebuild(f.cluster.dir.path() + "/rebuilt");
  RebuildStats stats = f.rebuild(*idx, restored);
  CHECK(stats.uploads_checked == 1);
  CHECK(stats.uploads_aborted == 0);
  CHECK(stats.parts_relocated == 1);
  CHECK(stats.errors == 0);
  auto parts = idx->listParts("bucket", "moving", u.upload_id, 0, 10);
  REQUIRE(parts.has_value());
  REQUIRE(parts->size() == 1);
  const index_kv::PartInfo& now = parts->front();
  CHECK(now.drives[now.stripes[1].drives[2]] == to);
  CHECK(now.stripes[0] == part.stripes[0]);
  // A second run finds it where it is.
  auto again = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, RebuildOptions{"rootkey"});
  REQUIRE(again.has_value());
  CHECK(again->parts_relocated == 0);
}

TEST_CASE("Checkpoints are listed newest first, and any one of them can be restored") {
  RecoveryFixture f;
  auto [older, newer] = f.olderAndNewerCheckpoints();

  auto listed = listCheckpoints(*f.cluster.chunks, f.cluster.map);
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 2);
  CHECK((*listed)[0].id == newer.id);
  CHECK((*listed)[1].id == older.id);
  CHECK((*listed)[1].created_unix_nanos == older.created_unix_nanos);
  CHECK((*listed)[1].files == older.files);
  CHECK((*listed)[1].bytes == older.bytes);
  CHECK((*listed)[1].copies == 3);

  // The older one by its id: "b", written after it, is not there.
  const std::string dir = f.cluster.dir.path() + "/chosen";
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir, older.id);
  REQUIRE(restored.has_value());
  CHECK(restored->id == older.id);
  auto idx = f.openAt(dir);
  CHECK(idx->getObject("bucket", "a").has_value());
  CHECK(idx->getObject("bucket", "b").error().isNotFound());
  // An id that is no checkpoint on the drives: nothing restored, no fallback to another.
  auto missing = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map,
                                         f.cluster.dir.path() + "/none",
                                         VersionId::fromHex(std::string(32, 'f')).value());
  CHECK(missing.error().isNotFound());
  CHECK_FALSE(std::filesystem::exists(f.cluster.dir.path() + "/none/CURRENT"));
}

TEST_CASE("rebuildIndex brings a restored checkpoint up to date from the fragment headers") {
  RecoveryFixture f;
  const std::string a1 = randomString(2 * kStripe + 5, 10);
  const std::string c = randomString(kStripe + 7, 11);
  const std::string d = randomString(kStripe * 2, 12);  // a whole number of stripes
  f.put(f.index, "a", a1);
  auto mc = f.put(f.index, "c", c);
  auto md = f.put(f.index, "d", d);
  auto cp = f.checkpointer();
  REQUIRE(cp.runOnce().has_value());

  // After the checkpoint:
  const std::string a2 = randomString(kStripe + 1, 20);
  f.put(f.index, "a", a2);  // overwritten
  const std::string b = randomString(3 * kStripe + 321, 21);
  f.put(f.index, "b", b);   // new, several stripes
  const std::string e = randomString(kStripe / 2, 22);
  RecoveryFixture::makeBucket(f.index, "late");
  f.put(f.index, "e", e, "late");  // in a bucket made after the checkpoint
  // c deleted, and its blobs collected.
  REQUIRE(f.index.deleteObject("bucket", "c", index_kv::Precondition::none()).has_value());
  for (const auto& s : mc.stripes) {
    for (size_t j = 0; j < s.drives.size(); ++j) {
      REQUIRE(f.cluster.local
                  ->remove(mc.drives[s.drives[j]], BlobId{mc.version, s.blob_stripe, uint16_t(j)})
                  .isOk());
    }
  }
  f.moveFragment(md.drives, md.stripes[0], 1);  // one fragment of d moved (a repair)
  // A multipart part, and an upload cut short (no last-stripe mark): never rebuilt.
  f.write("bucket", "mp", randomString(kStripe, 30), /*part=*/true);
  f.write("bucket", "short", randomString(kStripe * 2, 31), false, kStripe * 3);

  auto [idx, restored] = f.restoreForRebuild(f.cluster.dir.path() + "/rebuilt");
  RebuildStats stats = f.rebuild(*idx, restored);
  CHECK(stats.drives == 7);
  CHECK(stats.objects_checked == 3);  // a, c, d of the checkpoint
  CHECK(stats.objects_dropped == 1);  // c
  CHECK(stats.objects_relocated == 1);  // d
  CHECK(stats.objects_rebuilt == 3);  // a (newer version), b, e
  CHECK(stats.part_versions_skipped == 1);
  CHECK(stats.versions_incomplete == 1);
  CHECK(stats.buckets_created == 1);
  CHECK(stats.errors == 0);

  CHECK(f.read(*idx, "a") == a2);
  CHECK(f.read(*idx, "b") == b);
  CHECK(f.read(*idx, "d") == d);
  CHECK(f.read(*idx, "e", "late") == e);
  CHECK(idx->getObject("bucket", "c").error().isNotFound());
  CHECK(idx->getObject("bucket", "mp").error().isNotFound());
  CHECK(idx->getObject("bucket", "short").error().isNotFound());
  auto rb = idx->getObject("bucket", "b");
  REQUIRE(rb.has_value());
  CHECK(rb->etag == f.index.getObject("bucket", "b")->etag);  // MD5 of the bytes
  CHECK(rb->size == b.size());
  CHECK(idx->getBucket("late")->owner == "rootkey");

  // A second run finds nothing to do.
  auto again = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, RebuildOptions{"rootkey"});
  REQUIRE(again.has_value());
  CHECK(again->objects_rebuilt == 0);
  CHECK(again->objects_relocated == 0);
  CHECK(again->objects_dropped == 0);
}

TEST_CASE("rebuildIndex from nothing rebuilds every complete single-PUT object, decoding lost fragments") {
  RecoveryFixture f;
  const std::string x = randomString(2 * kStripe + 99, 40);
  auto mx = f.put(f.index, "x", x);
  // A data fragment is gone: the ETag still comes out right through the parity.
  REQUIRE(f.cluster.local
              ->remove(mx.drives[mx.stripes[0].drives[0]], BlobId{mx.version, 0, 0})
              .isOk());
  const std::string dir = f.cluster.dir.path() + "/empty";
  auto idx = f.openAt(dir, kRebuilding);
  auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, RebuildOptions{"rootkey"});
  REQUIRE(stats.has_value());
  CHECK(stats->objects_rebuilt == 1);
  CHECK(stats->buckets_created == 1);
  auto got = idx->getObject("bucket", "x");
  REQUIRE(got.has_value());
  CHECK(got->etag == mx.etag);
  CHECK(got->size == x.size());
}

TEST_CASE("A version too old to have been committed after the checkpoint is not rebuilt") {
  RecoveryFixture f;
  // A PUT that failed long before the checkpoint left a complete version behind.
  auto orphan = f.write("bucket", "orphan", randomString(kStripe, 60));
  f.put(f.index, "kept", randomString(kStripe, 61));
  f.cluster.clock.advance(int64_t{3600} * 1'000'000'000);
  auto cp = f.checkpointer();
  REQUIRE(cp.runOnce().has_value());
  const std::string dir = f.cluster.dir.path() + "/r";
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir);
  REQUIRE(restored.has_value());
  auto idx = f.openAt(dir, kRebuilding);
  RebuildOptions o{"rootkey", restored->created_unix_nanos, std::chrono::seconds(1800)};
  auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, o);
  REQUIRE(stats.has_value());
  CHECK(stats->versions_stale == 1);
  CHECK(stats->objects_rebuilt == 0);
  CHECK(idx->getObject("bucket", "orphan").error().isNotFound());
  CHECK(idx->getObject("bucket", "kept").has_value());
}

TEST_CASE("A checkpoint of an index that started empty: versions from before it are rebuilt") {
  // The index disk was lost and an empty index started in its place (it never knew the
  // objects committed before it); checkpoints were made of that one, then it was lost too.
  RecoveryFixture f;
  auto lost = f.write("bucket", "lost", randomString(kStripe, 63));  // committed to the first
  auto older = f.write("bucket", "k", randomString(kStripe, 64));    // a version of k before
  auto empty = f.openAt(f.cluster.dir.path() + "/replacement");
  auto guard = empty->createdUnixNanos();
  REQUIRE(guard.has_value());
  REQUIRE(lost.version.createdUnixNanos() < *guard);  // as the empty index's guard says
  REQUIRE(older.version.createdUnixNanos() < *guard);
  RecoveryFixture::makeBucket(*empty, "bucket");
  const std::string newer = randomString(kStripe, 65);
  f.put(*empty, "k", newer);  // k's version committed to the empty index
  f.cluster.clock.advance(int64_t{3600} * 1'000'000'000);
  prometheus::Registry registry;  // its own: the fixture's has the index's checkpointer
  IndexCheckpointer cp = f.checkpointerOf(*empty, registry);
  REQUIRE(cp.runOnce().has_value());
  const std::string dir = f.cluster.dir.path() + "/r";
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir);
  REQUIRE(restored.has_value());
  {
    // The guard travels with the checkpoint (rebuild-index reads it so).
    auto probe = f.openAt(dir);
    CHECK(probe->createdUnixNanos().value() == *guard);
  }
  auto idx = f.openAt(dir, kRebuilding);
  RebuildOptions o{"rootkey", restored->created_unix_nanos, std::chrono::seconds(1800)};
  o.checkpoint_guard_unix_nanos = *guard;
  auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, o);
  REQUIRE(stats.has_value());
  CHECK(stats->errors == 0);
  CHECK(stats->versions_stale == 0);  // without the guard: both, and "lost" is swept
  CHECK(stats->objects_rebuilt == 1);
  CHECK(stats->versions_superseded == 1);  // k's older version: the checkpoint's is later
  auto got = idx->getObject("bucket", "lost");
  REQUIRE(got.has_value());
  CHECK(got->version == lost.version);
  CHECK(f.read(*idx, "k") == newer);
}

TEST_CASE("A lost index's version within the cutoff does not replace the newer manifest") {
  // The replacement index checkpointed minutes after it started: the lost index's version
  // of k is within the cutoff, and being found does not make it the later one.
  RecoveryFixture f;
  auto lost = f.write("bucket", "k", randomString(kStripe, 68));  // the lost index's k
  auto empty = f.openAt(f.cluster.dir.path() + "/replacement");
  RecoveryFixture::makeBucket(*empty, "bucket");
  const std::string newer = randomString(kStripe, 69);
  f.put(*empty, "k", newer);
  auto overwritten = f.put(*empty, "k2", randomString(kStripe, 70));
  f.cluster.clock.advance(int64_t{900} * 1'000'000'000);
  prometheus::Registry registry;  // its own: the fixture's has the index's checkpointer
  IndexCheckpointer cp = f.checkpointerOf(*empty, registry);
  auto made = cp.runOnce();
  REQUIRE(made.has_value());
  // After the checkpoint the replacement index took an overwrite of k2: it must win.
  const std::string after = randomString(kStripe, 71);
  f.put(*empty, "k2", after);
  const std::string dir = f.cluster.dir.path() + "/r";
  REQUIRE(restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, dir).has_value());
  auto idx = f.openAt(dir, kRebuilding);
  RebuildOptions o{"rootkey", made->created_unix_nanos};
  o.checkpoint_guard_unix_nanos = empty->createdUnixNanos().value();
  REQUIRE(lost.version.createdUnixNanos() < o.checkpoint_guard_unix_nanos);
  auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, o);
  REQUIRE(stats.has_value());
  CHECK(stats->errors == 0);
  CHECK(stats->versions_superseded >= 1);  // the lost index's k
  CHECK(f.read(*idx, "k") == newer);
  CHECK(f.read(*idx, "k2") == after);
  CHECK(idx->getObject("bucket", "k2")->version != overwritten.version);
}

TEST_CASE("A version the orphan sweep marked dead is stale to a rebuild, not an error") {
  // A sweep marked the failed PUT dead, then stopped before it removed all fragments.
  RecoveryFixture f;
  auto dead = f.write("bucket", "dead", randomString(kStripe, 66));
  f.put(f.index, "alive", randomString(kStripe, 67));
  auto idx = f.openAt(f.cluster.dir.path() + "/r", kRebuilding);
  REQUIRE(idx->markVersionDead(dead.version).value());
  auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, RebuildOptions{"rootkey"});
  REQUIRE(stats.has_value());
  CHECK(stats->errors == 0);  // an error kept the index's guard: every rebuild failed
  CHECK(stats->versions_stale == 1);
  CHECK(stats->objects_rebuilt == 1);
  CHECK(idx->getObject("bucket", "dead").error().isNotFound());
  CHECK(idx->getObject("bucket", "alive").has_value());
}

TEST_CASE("A version older than max_put but within the clock margin is rebuilt") {
  // Its gateway's clock may have run behind the index host's: it could have been
  // acknowledged after the checkpoint.
  RecoveryFixture f;
  const std::string body = randomString(kStripe, 62);
  auto late = f.write("bucket", "late", body);
  f.cluster.clock.advance(int64_t{2400} * 1'000'000'000);  // 1800 s + 10 minutes of skew
  auto cp = f.checkpointer();
  REQUIRE(cp.runOnce().has_value());
  auto restored = restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map,
                                          f.cluster.dir.path() + "/r");
  REQUIRE(restored.has_value());
  RebuildOptions o{"rootkey", restored->created_unix_nanos, std::chrono::seconds(1800)};
  SECTION("with the default margin") {
    auto idx = f.openAt(f.cluster.dir.path() + "/r", kRebuilding);
    auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, o);
    REQUIRE(stats.has_value());
    CHECK(stats->versions_stale == 0);
    CHECK(stats->objects_rebuilt == 1);
    auto got = idx->getObject("bucket", "late");
    REQUIRE(got.has_value());
    CHECK(got->size == body.size());
  }
  SECTION("without one") {
    o.clock_margin = std::chrono::seconds(0);
    auto idx = f.openAt(f.cluster.dir.path() + "/r", kRebuilding);
    auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, o);
    REQUIRE(stats.has_value());
    CHECK(stats->versions_stale == 1);
  }
}

TEST_CASE("Repair writes fragments with the header flags the writer gave them") {
  RecoveryFixture f;
  auto m = f.put(f.index, "x", randomString(2 * kStripe + 10, 70));
  REQUIRE(m.stripes.size() == 3);
  const auto& last = m.stripes[2];
  REQUIRE(f.cluster.local->remove(m.drives[last.drives[0]], BlobId{m.version, 2, 0}).isOk());
  Repairer r(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry, {});
  auto pass = r.runPass(false);
  REQUIRE(pass.has_value());
  CHECK(pass->fragments_rebuilt == 1);
  auto now = f.index.getObject("bucket", "x");
  REQUIRE(now.has_value());
  auto desc = f.cluster.local->describe(now->drives[now->stripes[2].drives[0]],
                                        BlobId{m.version, 2, 0});
  REQUIRE(desc.has_value());
  CHECK(desc->flags == chunkstore::kBlobFlagLastStripe);
}

TEST_CASE("stripeFlags marks multipart parts and the last stripe of each blob version") {
  SeededRandom random(3);
  ManualClock clock(1'000'000'000);
  index_kv::Manifest m;
  m.version = VersionId::generate(clock, random);
  const VersionId p1 = VersionId::generate(clock, random), p2 = VersionId::generate(clock, random);
  auto stripe = [](VersionId v, uint32_t n) {
    index_kv::StripeLayout s;
    s.blob_version = v;
    s.blob_stripe = n;
    return s;
  };
  m.stripes = {stripe(p1, 0), stripe(p1, 1), stripe(p2, 0)};
  using chunkstore::kBlobFlagLastStripe;
  using chunkstore::kBlobFlagPart;
  CHECK(stripeFlags(m, 0) == kBlobFlagPart);
  CHECK(stripeFlags(m, 1) == (kBlobFlagPart | kBlobFlagLastStripe));
  CHECK(stripeFlags(m, 2) == (kBlobFlagPart | kBlobFlagLastStripe));
  m.stripes = {stripe(m.version, 0), stripe(m.version, 1)};
  CHECK(stripeFlags(m, 0) == 0);
  CHECK(stripeFlags(m, 1) == kBlobFlagLastStripe);
}

TEST_CASE("A stripe that cannot be described is a rebuild error, not an incomplete version") {
  // Counted incomplete, the version would be left out and the rebuilt index (guard 0)
  // would let the orphan sweep delete a complete, acknowledged object; as an error, the
  // rebuild is reported failed and the new index keeps its guard.
  RecoveryFixture f;
  f.put(f.index, "x", randomString(2 * kStripe + 5, 51));
  f.cluster.chunks->failDescribes(1, Status::unavailable("server busy"));
  auto idx = f.openAt(f.cluster.dir.path() + "/x", kRebuilding);
  auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, RebuildOptions{"rootkey"});
  REQUIRE(stats.has_value());
  CHECK(stats->errors == 1);
  CHECK(stats->versions_incomplete == 0);
  CHECK(stats->objects_rebuilt == 0);
  // A fragment that is gone (NotFound) or rotten (Corruption) is lost: the version is
  // incomplete, as before, and the rebuild does not fail on it forever.
  f.cluster.chunks->clearFaults();
  f.cluster.chunks->failDescribes(1, Status::corruption("header checksum mismatch"));
  auto idx2 = f.openAt(f.cluster.dir.path() + "/x2", kRebuilding);
  auto stats2 = rebuildIndex(*idx2, *f.cluster.chunks, f.cluster.map, RebuildOptions{"rootkey"});
  REQUIRE(stats2.has_value());
  CHECK(stats2->errors == 0);
  CHECK(stats2->versions_incomplete == 1);
}

TEST_CASE("rebuildIndex refuses to run while a drive does not answer") {
  RecoveryFixture f;
  f.put(f.index, "x", randomString(kStripe, 50));
  f.cluster.chunks->failLists("d2", Status::unavailable("server down"));
  auto idx = f.openAt(f.cluster.dir.path() + "/x", kRebuilding);
  auto stats = rebuildIndex(*idx, *f.cluster.chunks, f.cluster.map, RebuildOptions{"rootkey"});
  REQUIRE_FALSE(stats.has_value());
  CHECK(stats.error().code() == Status::Code::kUnavailable);
  // Nor does a restore: the newest checkpoint might be on that drive.
  CHECK(restoreLatestCheckpoint(*f.cluster.chunks, f.cluster.map, f.cluster.dir.path() + "/y")
            .error()
            .code() == Status::Code::kUnavailable);
}

}  // namespace
}  // namespace granary::gateway

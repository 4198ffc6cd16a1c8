// Repairer against a real index and real chunk stores: missing, corrupt and stacked
// fragments, unreachable drives, unrecoverable stripes, and the dry run.
#include "granary/gateway/repairer.h"

#include <prometheus/registry.h>

#include <catch2/catch.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "forwarding_index.h"
#include "gateway_test_util.h"
#include "granary/common/random.h"
#include "granary/ec/erasure_code.h"
#include "granary/placement/placement.h"

namespace granary::gateway {
namespace {

using testing::TestCluster;

constexpr uint32_t kFragLen = 4096;

struct RepairFixture {
  explicit RepairFixture(int drives = 6) : cluster(drives), index(cluster.index()) {
    index_kv::BucketInfo b;
    b.name = "bucket";
    b.owner = "root";
    REQUIRE(index.createBucket(b).isOk());
  }

  // One stripe of `version` whose fragment j lies on drive d<drives[j]>, with real
  // Reed-Solomon parity, written with `flags`; remembers every fragment's bytes.
  index_kv::StripeLayout writeStripe(const VersionId& version, const std::string& key,
                                     const std::vector<int>& drives, uint16_t flags) {
    const ec::EcProfile ec = cluster.map.ec;
    std::vector<std::vector<uint8_t>> frags(ec.total(), std::vector<uint8_t>(kFragLen));
    std::vector<const uint8_t*> data;
    std::vector<uint8_t*> parity;
    for (int j = 0; j < ec.total(); ++j) {
      if (j < ec.k) {
        random.fill(frags[j]);
        data.push_back(frags[j].data());
      } else {
        parity.push_back(frags[j].data());
      }
    }
    code->encode(kFragLen, data, parity);
    index_kv::StripeLayout layout;
    layout.blob_version = version;
    layout.data_len = uint64_t(ec.k) * kFragLen;
    layout.fragment_len = kFragLen;
    for (int j = 0; j < ec.total(); ++j) {
      layout.drives.push_back(static_cast<uint16_t>(drives[j]));
      chunkstore::BlobDescriptor desc;
      desc.id = BlobId{version, 0, static_cast<uint16_t>(j)};
      desc.ec = ec;
      desc.stripe_data_len = layout.data_len;
      desc.bucket = "bucket";
      desc.key = key;
      desc.flags = flags;
      REQUIRE(cluster.local->put(cluster.map.drives[drives[j]].id, desc, frags[j]).isOk());
      expected[{version, j}] = frags[j];
    }
    return layout;
  }

  // Commits object `key` of one stripe laid out as writeStripe does.
  index_kv::Manifest put(const std::string& key, std::vector<int> drives) {
    index_kv::Manifest m;
    m.version = VersionId::generate(cluster.clock, random);
    m.ec = cluster.map.ec;
    m.size = uint64_t(m.ec.k) * kFragLen;
    m.etag = "etag";
    for (const auto& d : cluster.map.drives) m.drives.push_back(d.id);
    m.stripes.push_back(writeStripe(m.version, key, drives, 0));
    REQUIRE(index.putObject("bucket", key, m, index_kv::Precondition::none()).has_value());
    return m;
  }

  // Starts an upload of `key` and stores its part 1: one stripe as put's, flagged a part's.
  std::pair<index_kv::MultipartUpload, index_kv::PartInfo> putPart(const std::string& key,
                                                                  std::vector<int> drives) {
    index_kv::MultipartUpload u = cluster.startUpload("bucket", key, random);
    index_kv::PartInfo p;
    p.part_number = 1;
    p.version = VersionId::generate(cluster.clock, random);
    p.size = uint64_t(cluster.map.ec.k) * kFragLen;
    p.etag = "part-etag";
    p.ec = cluster.map.ec;
    for (const auto& d : cluster.map.drives) p.drives.push_back(d.id);
    p.stripes.push_back(writeStripe(
        p.version, key, drives, chunkstore::kBlobFlagPart | chunkstore::kBlobFlagLastStripe));
    REQUIRE(index.putPart("bucket", key, u.upload_id, p).has_value());
    return {u, p};
  }

  // Checks that each fragment of `stripe` holds exactly the right bytes where `drives`
  // says; returns those drives.
  std::vector<std::string> checkStripe(const std::vector<std::string>& drives,
                                       const index_kv::StripeLayout& s) {
    std::vector<std::string> where;
    for (size_t j = 0; j < s.drives.size(); ++j) {
      const std::string& drive = drives[s.drives[j]];
      std::vector<uint8_t> got(kFragLen);
      INFO("fragment " << j << " on " << drive);
      REQUIRE(cluster.local->read(drive, BlobId{s.blob_version, 0, static_cast<uint16_t>(j)}, 0,
                                  got)
                  .isOk());
      CHECK(got == expected.at({s.blob_version, static_cast<int>(j)}));
      where.push_back(drive);
    }
    return where;
  }

  // The drives the committed manifest puts the fragments on, each checked.
  std::vector<std::string> checkFragments(const std::string& key) {
    auto m = index.getObject("bucket", key);
    REQUIRE(m.has_value());
    return checkStripe(m->drives, m->stripes.at(0));
  }

  // The same for part 1 of `upload`, as the index holds it now.
  index_kv::PartInfo currentPart(const index_kv::MultipartUpload& u) {
    auto parts = index.listParts("bucket", u.key, u.upload_id, 0, 10);
    REQUIRE(parts.has_value());
    REQUIRE(parts->size() == 1);
    return parts->front();
  }

  Status removeFragment(const index_kv::Manifest& m, int j) {
    return cluster.local->remove(m.drives[m.stripes[0].drives[j]],
                                 BlobId{m.version, 0, static_cast<uint16_t>(j)});
  }

  RepairStats pass(bool dry_run, bool verify = false, bool rebalance = false) {
    Repairer r(index, *cluster.chunks, cluster.map, cluster.clock, registry,
               RepairOptions{std::chrono::seconds(0), verify});
    auto stats = r.runPass(dry_run, rebalance);
    REQUIRE(stats.has_value());
    return *stats;
  }

  double metric(const std::string& outcome) {
    for (const auto& family : registry.Collect()) {
      if (family.name != "granary_repair_fragments_total") continue;
      for (const auto& m : family.metric) {
        for (const auto& l : m.label) {
          if (l.name == "outcome" && l.value == outcome) return m.counter.value;
        }
      }
    }
    return 0;
  }
  // Flips a payload byte of the only blob of `drive` (its header region is 4 KiB).
  void flipPayloadByte(const std::string& drive) {
    std::fstream extent(cluster.dir.path() + "/" + drive + "/extents/00000000.ext",
                        std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(extent.good());
    extent.seekg(4096 + 100);
    char byte = 0;
    extent.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    extent.seekp(4096 + 100);
    extent.write(&byte, 1);
  }
  // An unlabelled counter's value.
  double counter(const std::string& name) {
    for (const auto& family : registry.Collect()) {
      if (family.name == name && !family.metric.empty()) return family.metric[0].counter.value;
    }
    return -1;
  }

  TestCluster cluster;
  index_kv::Index& index;
  prometheus::Registry registry;
  SeededRandom random{42};
  std::unique_ptr<ec::ErasureCode> code = std::move(*ec::ErasureCode::create({4, 2}));
  std::map<std::pair<VersionId, int>, std::vector<uint8_t>> expected;
};

}  // namespace

TEST_CASE("Repair rebuilds a missing fragment from the others, a dry run only counts") {
  RepairFixture f;
  auto m = f.put("k", {0, 1, 2, 3, 4, 5});
  f.put("healthy", {5, 4, 3, 2, 1, 0});
  REQUIRE(f.removeFragment(m, 1).isOk());  // a data fragment
  REQUIRE(f.removeFragment(m, 5).isOk());  // and a parity one

  RepairStats dry = f.pass(true);
  CHECK(dry.objects == 2);
  CHECK(dry.stripes == 2);
  CHECK(dry.fragments_missing == 2);
  CHECK(dry.fragments_rebuilt == 0);
  CHECK(f.cluster.blobs("d1").size() == 1);  // nothing written

  RepairStats done = f.pass(false);
  CHECK(done.fragments_rebuilt == 2);
  CHECK(done.errors == 0);
  CHECK(done.conflicts == 0);
  // Their domains were the only free ones: back on d1 and d5 (in the stripe's rank
  // order), with the right bytes; the other four did not move.
  auto where = f.checkFragments("k");
  CHECK(std::set<std::string>(where.begin(), where.end()).size() == 6);
  CHECK(where[0] == "d0");
  CHECK(where[2] == "d2");
  f.checkFragments("healthy");
  CHECK(f.pass(true).fragments_missing == 0);
  CHECK(f.metric("rebuilt") == 2);
}

TEST_CASE("Background repair passes run only while this gateway leads them") {
  RepairFixture f;
  auto m = f.put("k", {0, 1, 2, 3, 4, 5});
  REQUIRE(f.removeFragment(m, 1).isOk());
  std::atomic<bool> leads{false};
  RepairOptions options;
  options.interval = std::chrono::seconds(1);
  options.leading = [&leads] { return leads.load(); };
  Repairer repairer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                    options);
  repairer.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two passes were due
  CHECK(f.metric("rebuilt") == 0);  // skipped: another gateway leads
  leads = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (f.metric("rebuilt") == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  repairer.stop();
  CHECK(f.metric("rebuilt") == 1);
  f.checkFragments("k");
}

TEST_CASE("A background repair pass whose gateway lost the lease stops before its next object") {
  RepairFixture f;
  REQUIRE(f.removeFragment(f.put("a", {0, 1, 2, 3, 4, 5}), 1).isOk());
  REQUIRE(f.removeFragment(f.put("b", {0, 1, 2, 3, 4, 5}), 1).isOk());
  // Whether fragment 1 of `key` is where its manifest says, as the index holds it now.
  auto whole = [&f](const std::string& key) {
    auto m = f.index.getObject("bucket", key);
    if (!m.has_value()) return false;
    const auto& s = m->stripes.at(0);
    return f.cluster.local->stat(m->drives[s.drives[1]], BlobId{s.blob_version, 0, 1})
        .has_value();
  };
  // The lease is lost the moment "a" is repaired: a pass that asked only when it started
  // would go on to "b".
  RepairOptions options;
  options.interval = std::chrono::seconds(1);
  options.leading = [&whole] { return !whole("a"); };
  Repairer repairer(f.index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
                    options);
  repairer.start();
  // Once the background pass is over, an explicit dry run gets the pass lock.
  std::optional<RepairStats> after;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (whole("a")) {
      if (auto dry = repairer.runPass(/*dry_run=*/true); dry.has_value()) {
        after = *dry;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  repairer.stop();
  REQUIRE(after.has_value());
  f.checkFragments("a");
  CHECK(after->fragments_missing == 1);  // b's, left for the pass of the new leader
  CHECK_FALSE(whole("b"));
}

TEST_CASE("A repair whose commit outcome is unknown sends it again, and removes no copy") {
  // The index answers the first relocateFragments with an error; what happened behind it:
  enum class Behind {
    kApplied,      // the commit applied, its answer was lost
    kLater,        // not yet: the same call, sent again, applies
    kOtherChange,  // not, and the manifest changed meanwhile (a tag change)
    kUnreachable,  // every call fails
  };
  struct UncertainIndex final : index_kv::ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Behind behind = Behind::kApplied;
    int calls = 0;
    Status relocateFragments(std::string_view bucket, std::string_view key,
                             const index_kv::Manifest& expected,
                             const index_kv::Manifest& updated) override {
      if (++calls > 1 && behind != Behind::kUnreachable) {
        return target_.relocateFragments(bucket, key, expected, updated);
      }
      if (behind == Behind::kApplied) {
        (void)target_.relocateFragments(bucket, key, expected, updated);
      } else if (behind == Behind::kOtherChange) {
        index_kv::Manifest tagged = expected;
        tagged.tags["team"] = "data";
        (void)target_.updateObjectTags(bucket, key, expected, tagged);
      }
      return Status::timeout("the index did not answer");
    }
  };
  for (Behind behind :
       {Behind::kApplied, Behind::kLater, Behind::kOtherChange, Behind::kUnreachable}) {
    INFO("case " << static_cast<int>(behind));
    RepairFixture f;
    auto m = f.put("k", {0, 1, 2, 3, 4, 5});
    REQUIRE(f.removeFragment(m, 1).isOk());
    // Its own drive takes no writes: the rebuilt fragment goes elsewhere, a new location
    // only the commit makes the manifest's.
    f.cluster.chunks->setReadOnly("d1");
    UncertainIndex index(f.index);
    index.behind = behind;
    Repairer r(index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
               RepairOptions{std::chrono::seconds(0), false});
    auto stats = r.runPass(false, false);
    REQUIRE(stats.has_value());
    size_t copies = 0;
    for (const auto& [drive, id] : f.cluster.allBlobs()) {
      if (id.version == m.version && id.fragment == 1) ++copies;
    }
    CHECK(copies == 1);  // never removed after an error: the first request may yet apply
    auto now = f.index.getObject("bucket", "k");
    REQUIRE(now.has_value());
    const std::string& listed = now->drives[now->stripes[0].drives[1]];
    const bool commits = behind == Behind::kApplied || behind == Behind::kLater;
    CHECK((listed != "d1") == commits);
    CHECK(stats->fragments_rebuilt == (commits ? 1u : 0u));
    CHECK(stats->errors == (commits ? 0u : 1u));
    if (commits) f.checkFragments("k");
  }
}

TEST_CASE("Repair spreads a stacked stripe out once domains are usable again") {
  RepairFixture f;
  // A degraded write's stripe: six fragments on d0..d3 (d4 and d5 were down).
  f.put("k", {0, 1, 2, 3, 0, 1});
  RepairStats dry = f.pass(true);
  CHECK(dry.fragments_stacked == 2);

  // While d5 still cannot take writes, only one fragment can move.
  f.cluster.chunks->setReadOnly("d5");
  RepairStats partial = f.pass(false);
  CHECK(partial.fragments_moved == 1);
  CHECK(f.pass(true).fragments_stacked == 1);

  f.cluster.chunks->clearFaults();
  CHECK(f.pass(false).fragments_moved == 1);
  auto where = f.checkFragments("k");
  CHECK(std::set<std::string>(where.begin(), where.end()).size() == 6);
  CHECK(f.pass(true).fragments_stacked == 0);
  // The old copies wait on the GC queue; nothing else does.
  auto gc = f.index.gcDue(INT64_MAX, 100);
  REQUIRE(gc.has_value());
  size_t queued = 0;
  for (const auto& e : *gc) queued += e.blobs.size();
  CHECK(queued == 2);
}

TEST_CASE("With no free domain, a rebuilt fragment goes to the least-held one, beside none") {
  // Three domains of three drives; each stripe holds two fragments in each. One fragment
  // of domain C is lost: A and B hold two, C one, so the new copy belongs in C, on a drive
  // that holds no other fragment of the stripe where there is one (a third in A or B
  // would leave k - 1 when that domain goes).
  RepairFixture f(9);
  const char* domain_of[] = {"A", "A", "A", "B", "B", "B", "C", "C", "C"};
  for (int i = 0; i < 9; ++i) f.cluster.map.drives[i].domain = domain_of[i];
  for (int o = 0; o < 12; ++o) {
    const std::string key = "k" + std::to_string(o);
    auto m = f.put(key, {0, 1, 3, 4, 6, 7});
    REQUIRE(f.removeFragment(m, 5).isOk());  // the one on d7
  }
  RepairStats stats = f.pass(false);
  CHECK(stats.fragments_rebuilt == 12);
  for (int o = 0; o < 12; ++o) {
    auto where = f.checkFragments("k" + std::to_string(o));
    CHECK(std::set<std::string>(where.begin(), where.end()).size() == 6);
    CHECK((where[5] == "d7" || where[5] == "d8"));
  }
}

TEST_CASE("A verifying repair replaces a corrupt fragment on its own drive") {
  RepairFixture f;
  auto m = f.put("k", {0, 1, 2, 3, 4, 5});
  f.cluster.chunks->failReads("d2", Status::corruption("flipped bits"));
  CHECK(f.pass(true).fragments_corrupt == 0);  // a stat does not read the bytes
  RepairStats dry = f.pass(true, /*verify=*/true);
  CHECK(dry.fragments_corrupt == 1);
  RepairStats done = f.pass(false, true);
  CHECK(done.fragments_rebuilt == 1);
  f.cluster.chunks->clearFaults();
  CHECK(f.checkFragments("k")[2] == "d2");
  CHECK(f.pass(true, true).fragments_corrupt == 0);
}

TEST_CASE("A fragment its drive lists and will not read (EIO) is rebuilt as a corrupt one") {
  RepairFixture f;
  auto m = f.put("k", {0, 1, 2, 3, 4, 5});
  // An I/O error alone may be the exchange's (a proxy's 502): not trusted.
  f.cluster.chunks->failReads("d2", Status::fromErrno(EIO, "reading an extent"));
  RepairStats unlisted = f.pass(false, /*verify=*/true);
  CHECK(unlisted.fragments_corrupt == 0);
  CHECK(unlisted.fragments_rebuilt == 0);
  // The drive lists it (a read of it failed there), and it still does not read.
  f.flipPayloadByte("d2");
  std::vector<uint8_t> out(kFragLen);
  REQUIRE(f.cluster.local->read("d2", BlobId{m.version, 0, 2}, 0, out).code() ==
          Status::Code::kCorruption);
  RepairStats done = f.pass(false);
  CHECK(done.fragments_corrupt == 1);
  CHECK(done.fragments_rebuilt == 1);
  f.cluster.chunks->clearFaults();
  f.checkFragments("k");
  // Short of descriptors (retryable) says nothing of the fragment: left alone.
  f.cluster.chunks->failReads("d3", Status::fromErrno(EMFILE, "opening an extent"));
  RepairStats busy = f.pass(false, true);
  CHECK(busy.fragments_corrupt == 0);
  CHECK(busy.fragments_rebuilt == 0);
}

TEST_CASE("A fragment a read found corrupt is rebuilt by a plain (stat) pass") {
  RepairFixture f;
  auto m = f.put("k", {0, 1, 2, 3, 4, 5});
  f.flipPayloadByte("d2");
  const BlobId id{m.version, 0, 2};
  CHECK(f.pass(true).fragments_corrupt == 0);  // nobody has read it yet
  std::vector<uint8_t> out(kFragLen);
  REQUIRE(f.cluster.local->read("d2", id, 0, out).code() == Status::Code::kCorruption);
  auto stats = f.cluster.local->stats("d2");
  REQUIRE(stats.has_value());
  CHECK(stats->corrupt_ids == std::vector<BlobId>{id});
  CHECK(f.pass(true).fragments_corrupt == 1);
  RepairStats done = f.pass(false);
  CHECK(done.fragments_corrupt == 1);
  CHECK(done.fragments_rebuilt == 1);
  CHECK(f.cluster.local->stats("d2")->corrupt_ids.empty());  // the bad copy was removed
  f.checkFragments("k");
  CHECK(f.pass(true, /*verify=*/true).fragments_corrupt == 0);
}

TEST_CASE("A corrupt fragment is removed only once its rebuild has been decoded") {
  // Fragment 2 is known corrupt; 0, 1 and 3 look healthy to a stat but cannot be read: the
  // rebuild fails, and the corrupt copy (worth something to a reader of the other bytes of
  // its extent, and to a later pass) is still there.
  RepairFixture f;
  auto m = f.put("k", {0, 1, 2, 3, 4, 5});
  f.flipPayloadByte("d2");
  std::vector<uint8_t> out(kFragLen);
  REQUIRE(f.cluster.local->read("d2", BlobId{m.version, 0, 2}, 0, out).code() ==
          Status::Code::kCorruption);
  for (const char* d : {"d0", "d1", "d3"}) {
    f.cluster.chunks->failReads(d, Status::corruption("unreadable"));
  }
  RepairStats failed = f.pass(false);
  CHECK(failed.fragments_corrupt == 1);
  CHECK(failed.fragments_rebuilt == 0);
  CHECK(failed.errors == 1);
  CHECK(f.counter("granary_repair_errors_total") == 1);
  CHECK(f.counter("granary_repair_conflicts_total") == 0);
  CHECK(f.cluster.blobs("d2").size() == 1);  // not removed
  f.cluster.chunks->clearFaults();
  RepairStats done = f.pass(false);
  CHECK(done.fragments_rebuilt == 1);
  CHECK(f.checkFragments("k")[2] == "d2");  // replaced where it was
  CHECK(f.cluster.local->stats("d2")->corrupt_ids.empty());
}

TEST_CASE("Fragments on unreachable servers are left alone, and too few healthy is reported") {
  RepairFixture f;
  auto m = f.put("k", {0, 1, 2, 3, 4, 5});
  REQUIRE(f.removeFragment(m, 0).isOk());
  f.cluster.chunks->setUnreachable("d3");
  f.cluster.chunks->setUnreachable("d4");
  // Three healthy fragments it can read: not enough now, and nothing is written.
  RepairStats s = f.pass(false);
  CHECK(s.fragments_unreachable == 2);
  CHECK(s.fragments_missing == 1);
  CHECK(s.unrecoverable_stripes == 1);
  CHECK(s.fragments_rebuilt == 0);
  // With one server back, four are: the missing one is rebuilt, the unreachable one stays.
  f.cluster.chunks->clearFaults();
  f.cluster.chunks->setUnreachable("d4");
  s = f.pass(false);
  CHECK(s.fragments_unreachable == 1);
  CHECK(s.fragments_rebuilt == 1);
  CHECK(f.index.getObject("bucket", "k")->stripes[0].drives[4] == 4);
  f.cluster.chunks->clearFaults();
  f.checkFragments("k");

  auto lost = f.put("lost", {0, 1, 2, 3, 4, 5});
  for (int j : {0, 1, 2}) REQUIRE(f.removeFragment(lost, j).isOk());
  RepairStats bad = f.pass(false);
  CHECK(bad.unrecoverable_stripes == 1);
  CHECK(bad.fragments_rebuilt == 0);
  CHECK(f.cluster.blobs("d0").size() == 1);  // only "k"'s fragment: nothing half-written
}

TEST_CASE("Rebalance moves fragments onto the drives the current map places them on") {
  RepairFixture f(7);  // d6 is new: every object below was written before it existed
  std::vector<std::string> keys;
  uint64_t misplaced = 0;
  for (int i = 0; i < 12; ++i) {
    keys.push_back("k" + std::to_string(i));
    auto m = f.put(keys.back(), {0, 1, 2, 3, 4, 5});
    auto placed = placement::chooseDrives(
        f.cluster.map, fmt::format("{}:{}", m.version.toHex(), 0), 6);
    REQUIRE(placed.has_value());
    // d6 is in the stripe's placement unless the placement is exactly d0..d5.
    misplaced += std::find(placed->begin(), placed->end(), size_t{6}) != placed->end();
  }
  REQUIRE(misplaced > 0);
  CHECK(f.pass(true).fragments_misplaced == 0);  // a repair pass does not rebalance
  RepairStats dry = f.pass(true, false, true);
  CHECK(dry.fragments_misplaced == misplaced);
  RepairStats done = f.pass(false, false, true);
  CHECK(done.fragments_rebalanced == misplaced);
  CHECK(done.errors == 0);
  for (const auto& key : keys) {
    auto m = f.index.getObject("bucket", key);
    auto placed = placement::chooseDrives(
        f.cluster.map, fmt::format("{}:{}", m->version.toHex(), 0), 6);
    std::set<std::string> want;
    for (size_t idx : *placed) want.insert(f.cluster.map.drives[idx].id);
    auto where = f.checkFragments(key);
    CHECK(std::set<std::string>(where.begin(), where.end()) == want);
  }
  CHECK(f.cluster.blobs("d6").size() == misplaced);
  CHECK(f.pass(true, false, true).fragments_misplaced == 0);
  CHECK(f.metric("rebalanced") == double(misplaced));
}

TEST_CASE("A repair pass empties a draining drive, which no repair then writes to") {
  RepairFixture f(7);  // seven domains: each stripe has one free
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back("k" + std::to_string(i));
    f.put(keys.back(), {0, 1, 2, 3, 4, 5});
  }
  // Mark d2 draining (the map a restarted gateway reads); d6 stays empty until then.
  f.cluster.map.drives[2].draining = true;
  RepairStats dry = f.pass(true);  // a plain pass, as the background one: no rebalance
  CHECK(dry.fragments_draining >= keys.size());  // at least every fragment on d2
  CHECK(dry.fragments_misplaced == 0);
  RepairStats done = f.pass(false);
  CHECK(done.errors == 0);
  CHECK(done.fragments_drained == dry.fragments_draining);
  CHECK(done.fragments_rebalanced == 0);
  CHECK(f.metric("drained") == double(done.fragments_drained));
  for (const auto& key : keys) {
    auto where = f.checkFragments(key);  // every byte right, where the manifest says
    CHECK(std::find(where.begin(), where.end(), "d2") == where.end());
    CHECK(std::set<std::string>(where.begin(), where.end()).size() == 6);
  }
  CHECK(f.pass(true).fragments_draining == 0);
  // A missing fragment is rebuilt elsewhere, never onto the draining drive.
  auto m = f.index.getObject("bucket", keys[0]);
  REQUIRE(m.has_value());
  REQUIRE(f.removeFragment(*m, 0).isOk());
  CHECK(f.pass(false).fragments_rebuilt == 1);
  auto where = f.checkFragments(keys[0]);
  CHECK(std::find(where.begin(), where.end(), "d2") == where.end());
}

TEST_CASE("Rebalance drains a drive whose domain is the stripe's last free one: degraded") {
  RepairFixture f;  // six drives, six domains: with d2 draining, five are left for six
  f.put("k", {0, 1, 2, 3, 4, 5});
  f.cluster.map.drives[2].draining = true;
  RepairStats dry = f.pass(true, false, true);
  CHECK(dry.fragments_draining == 1);
  CHECK(dry.fragments_misplaced == 0);  // the others are where the map places them
  RepairStats done = f.pass(false, false, true);
  CHECK(done.fragments_drained == 1);
  CHECK(done.fragments_rebalanced == 0);
  CHECK(done.errors == 0);
  auto where = f.checkFragments("k");
  CHECK(std::find(where.begin(), where.end(), "d2") == where.end());
  CHECK(std::set<std::string>(where.begin(), where.end()).size() == 5);  // one stacked
  CHECK(f.pass(true, false, true).fragments_draining == 0);
}

TEST_CASE("A repair pass drains both fragments a draining drive holds, to two free domains") {
  RepairFixture f(8);
  f.put("k", {0, 1, 2, 3, 2, 5});  // d2 holds fragments 2 and 4
  f.cluster.map.drives[2].draining = true;
  RepairStats done = f.pass(false);
  CHECK(done.errors == 0);
  CHECK(done.fragments_drained == 2);
  auto where = f.checkFragments("k");
  CHECK(std::find(where.begin(), where.end(), "d2") == where.end());
  CHECK(std::set<std::string>(where.begin(), where.end()).size() == 6);
  CHECK(f.pass(true).fragments_draining == 0);
}

TEST_CASE("Fragments on a draining drive that does not answer count as draining, and stay") {
  RepairFixture f(7);
  f.put("k", {0, 1, 2, 3, 4, 5});
  f.cluster.map.drives[2].draining = true;
  f.cluster.chunks->setUnreachable("d2");
  CHECK(f.pass(true).fragments_draining == 1);
  RepairStats done = f.pass(false);
  CHECK(done.fragments_drained == 0);
  CHECK(done.fragments_draining == 1);
  f.cluster.chunks->clearFaults();
  CHECK(f.pass(false).fragments_drained == 1);
  auto where = f.checkFragments("k");
  CHECK(std::find(where.begin(), where.end(), "d2") == where.end());
}

TEST_CASE("A drained fragment is never stacked onto fewer than k domains: it stays, counted") {
  RepairFixture f;  // six drives, six domains, EC 4+2
  f.put("k", {0, 0, 1, 1, 2, 3});  // four domains, two of them holding two fragments
  f.cluster.map.drives[3].draining = true;
  f.cluster.chunks->setUnreachable("d4");
  f.cluster.chunks->setUnreachable("d5");
  // The only place left is d2, which would leave three domains: 3 < k.
  RepairStats done = f.pass(false);
  CHECK(done.fragments_draining == 1);
  CHECK(done.fragments_drained == 0);
  CHECK(done.errors == 0);
  f.cluster.chunks->clearFaults();
  CHECK(f.pass(false).fragments_drained == 1);
  auto where = f.checkFragments("k");
  CHECK(std::find(where.begin(), where.end(), "d3") == where.end());
  CHECK(f.pass(true).fragments_draining == 0);
}

TEST_CASE("A drain whose commit loses to an overwrite counts nothing drained, keeps no copy") {
  RepairFixture f(7);
  f.put("k", {0, 1, 2, 3, 4, 5});
  f.cluster.map.drives[2].draining = true;
  // The object is overwritten between the pass's copy and its compare-and-swap.
  struct OverwrittenIndex final : index_kv::ForwardingIndex {
    OverwrittenIndex(index_kv::Index& target, std::function<void()> overwrite)
        : ForwardingIndex(target), overwrite(std::move(overwrite)) {}
    Status relocateFragments(std::string_view bucket, std::string_view key,
                             const index_kv::Manifest& expected,
                             const index_kv::Manifest& updated) override {
      if (overwrite) std::exchange(overwrite, nullptr)();
      return ForwardingIndex::relocateFragments(bucket, key, expected, updated);
    }
    std::function<void()> overwrite;
  } index(f.index, [&] { f.put("k", {0, 1, 3, 4, 5, 5}); });
  Repairer r(index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
             RepairOptions{});
  auto done = r.runPass(false, false);
  REQUIRE(done.has_value());
  CHECK(index.overwrite == nullptr);
  CHECK(done->conflicts == 1);
  CHECK(done->fragments_draining == 1);
  CHECK(done->fragments_drained == 0);
  CHECK(f.metric("drained") == 0);
  CHECK(f.cluster.blobs("d6").empty());  // the pass's copy went with its refused commit
  auto where = f.checkFragments("k");  // the overwrite stands
  CHECK(std::find(where.begin(), where.end(), "d2") == where.end());
}

TEST_CASE("A copy another pass put meanwhile is no error of this pass, nor its to commit") {
  RepairFixture f(7);
  f.put("k", {0, 1, 2, 3, 4, 5});
  f.cluster.map.drives[2].draining = true;
  // d6 (the only free domain) answers that the fragment is there already.
  f.cluster.chunks->failPuts("d6", Status::alreadyExists("put there meanwhile"));
  RepairStats done = f.pass(false);
  CHECK(done.errors == 0);
  CHECK(done.fragments_draining == 1);
  CHECK(done.fragments_drained == 0);
  auto where = f.checkFragments("k");  // the manifest still names d2
  CHECK(std::find(where.begin(), where.end(), "d2") != where.end());
  f.cluster.chunks->clearFaults();
  CHECK(f.pass(false).fragments_drained == 1);
}

TEST_CASE("Repair rebuilds a lost fragment of a part of an upload in progress, as a part's") {
  RepairFixture f;
  auto [u, p] = f.putPart("big", {0, 1, 2, 3, 4, 5});
  f.put("done", {5, 4, 3, 2, 1, 0});
  REQUIRE(f.cluster.local->remove("d3", BlobId{p.version, 0, 3}).isOk());
  RepairStats dry = f.pass(true);
  CHECK(dry.objects == 1);
  CHECK(dry.parts == 1);
  CHECK(dry.stripes == 2);
  CHECK(dry.fragments_missing == 1);
  CHECK(dry.fragments_rebuilt == 0);

  RepairStats done = f.pass(false);
  CHECK(done.parts == 1);
  CHECK(done.fragments_rebuilt == 1);
  CHECK(done.errors == 0);
  CHECK(done.conflicts == 0);
  index_kv::PartInfo now = f.currentPart(u);
  auto where = f.checkStripe(now.drives, now.stripes.at(0));
  CHECK(where[3] == "d3");  // its domain was the only free one
  // Flagged as the part's own fragments are: a rebuild of the index from the drives
  // (index_recovery.h) must tell it from an object's.
  auto desc = f.cluster.local->describe("d3", BlobId{p.version, 0, 3});
  REQUIRE(desc.has_value());
  CHECK(desc->flags == (chunkstore::kBlobFlagPart | chunkstore::kBlobFlagLastStripe));
  CHECK(desc->key == "big");
  CHECK(f.pass(true).fragments_missing == 0);
}

TEST_CASE("A drain moves an upload's part off the drive, and a Complete from before follows it") {
  RepairFixture f(7);
  auto [u, p] = f.putPart("big", {0, 1, 2, 3, 4, 5});
  f.cluster.map.drives[2].draining = true;
  RepairStats dry = f.pass(true);
  CHECK(dry.parts == 1);
  CHECK(dry.fragments_draining == 1);
  RepairStats done = f.pass(false);
  CHECK(done.errors == 0);
  CHECK(done.fragments_drained == 1);
  index_kv::PartInfo now = f.currentPart(u);
  auto where = f.checkStripe(now.drives, now.stripes.at(0));
  CHECK(where[2] == "d6");  // the only domain the stripe did not use
  CHECK(f.pass(true).fragments_draining == 0);  // the drain is done: no part names d2
  // The place it left is the GC's.
  auto gc = f.index.gcDue(std::numeric_limits<int64_t>::max(), 10);
  REQUIRE(gc.has_value());
  REQUIRE(gc->size() == 1);
  CHECK(gc->front().blobs == std::vector<index_kv::BlobRef>{{"d2", BlobId{p.version, 0, 2}}});

  // A Complete that read the parts before the move names d2, whose copy the GC will take:
  // the object records d6, where the part row has the fragment now.
  auto manifestOf = [&](const index_kv::PartInfo& part) {
    index_kv::Manifest m;
    m.version = VersionId::generate(f.cluster.clock, f.random);
    m.ec = part.ec;
    m.size = part.size;
    m.etag = "etag-1";
    m.drives = part.drives;
    m.stripes = part.stripes;
    return m;
  };
  REQUIRE(f.index.completeUpload("bucket", "big", u.upload_id, manifestOf(p),
                                 index_kv::Precondition::none())
              .has_value());
  where = f.checkFragments("big");
  CHECK(where[2] == "d6");
  CHECK(std::find(where.begin(), where.end(), "d2") == where.end());
}

TEST_CASE("A part stored without its code is not moved by a drain, but its fragments count") {
  RepairFixture f(7);
  auto [u, p] = f.putPart("old", {0, 1, 2, 3, 4, 5});
  index_kv::PartInfo old = p;
  old.ec = {0, 0};  // as parts stored before parts recorded their profile
  REQUIRE(f.index.putPart("bucket", "old", u.upload_id, old).has_value());
  f.cluster.map.drives[2].draining = true;
  RepairStats done = f.pass(false);
  CHECK(done.parts == 0);
  CHECK(done.fragments_draining == 1);  // the drain does not look done
  CHECK(done.fragments_drained == 0);
  CHECK(f.currentPart(u) == old);
}

TEST_CASE("A part drain that loses to an abort counts nothing drained, keeps no copy") {
  RepairFixture f(7);
  auto [u, p] = f.putPart("big", {0, 1, 2, 3, 4, 5});
  f.cluster.map.drives[2].draining = true;
  // The upload is aborted between the pass's copy and its compare-and-swap.
  struct AbortedIndex final : index_kv::ForwardingIndex {
    AbortedIndex(index_kv::Index& target, std::function<void()> abort)
        : ForwardingIndex(target), abort(std::move(abort)) {}
    Status relocatePartFragments(std::string_view bucket, std::string_view key,
                                 std::string_view upload_id, const index_kv::PartInfo& expected,
                                 const index_kv::PartInfo& updated) override {
      if (abort) std::exchange(abort, nullptr)();
      return ForwardingIndex::relocatePartFragments(bucket, key, upload_id, expected, updated);
    }
    std::function<void()> abort;
  } index(f.index, [&] { REQUIRE(f.index.abortUpload("bucket", "big", u.upload_id).isOk()); });
  Repairer r(index, *f.cluster.chunks, f.cluster.map, f.cluster.clock, f.registry,
             RepairOptions{});
  auto done = r.runPass(false, false);
  REQUIRE(done.has_value());
  CHECK(index.abort == nullptr);
  CHECK(done->parts == 1);
  CHECK(done->conflicts == 1);
  CHECK(done->fragments_drained == 0);
  CHECK(f.metric("drained") == 0);
  CHECK(f.cluster.blobs("d6").empty());  // the pass's copy went with its refused commit
}

}  // namespace granary::gateway

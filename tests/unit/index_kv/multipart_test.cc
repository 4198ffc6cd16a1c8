#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <rocksdb/db.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <set>
#include <thread>

#include "index_kv/codec.h"
#include "test_util.h"

using namespace granary;
using namespace granary::index_kv;
using granary::index_kv::testing::allGc;
using granary::index_kv::testing::concat;
using granary::index_kv::testing::expectedBlobs;
using granary::index_kv::testing::locations;
using granary::index_kv::testing::IndexFixture;
using granary::index_kv::testing::bucketInfo;
using Code = Status::Code;

namespace {

std::set<BlobId> gcBlobIds(Index& index) {
  std::set<BlobId> out;
  for (const GcEntry& e : allGc(index)) {
    for (const BlobRef& b : e.blobs) out.insert(b.id);
  }
  return out;
}

std::set<BlobId> idsOf(const std::vector<BlobRef>& blobs) {
  std::set<BlobId> out;
  for (const BlobRef& b : blobs) out.insert(b.id);
  return out;
}

bool referenced(Index& index, const VersionId& v) {
  auto r = index.isBlobVersionReferenced(v);
  REQUIRE(r.has_value());
  return *r;
}

struct MultipartFixture : IndexFixture {
  MultipartFixture() { makeBucket("b"); }

  MultipartUpload newUpload(const std::string& key, const std::string& bucket = "b") {
    MultipartUpload u;
    u.upload_id = newVersion().toHex();
    u.bucket = bucket;
    u.key = key;
    u.owner = "alice";
    u.initiated_unix_nanos = clock.nowUnixNanos();
    u.content_type = "application/x-test";
    u.metadata = {{"color", "blue"}};
    REQUIRE(index->createUpload(u, 0).isOk());
    return u;
  }

  // A part of `stripes` 4+2 stripes over drives d0..d7, with a fresh version.
  PartInfo newPart(uint32_t number, uint32_t stripes = 2) {
    PartInfo p;
    p.part_number = number;
    p.version = newVersion();
    p.etag = fmt::format("part-{}-{}", number, p.version.toHex().substr(0, 8));
    p.mtime_unix_nanos = clock.nowUnixNanos();
    p.drives = eightDrives();
    p.stripes = stripeLayouts(p.version, stripes, number);
    p.size = uint64_t{stripes} * (4u << 20);
    p.ec = ec::EcProfile{4, 2};
    return p;
  }

  PartInfo putPart(const MultipartUpload& u, uint32_t number, uint32_t stripes = 2) {
    PartInfo p = newPart(number, stripes);
    auto r = index->putPart(u.bucket, u.key, u.upload_id, p);
    REQUIRE(r.has_value());
    return p;
  }

  // The manifest a gateway assembles from `parts`, in order, under a fresh version.
  Manifest assemble(const std::vector<PartInfo>& parts) {
    Manifest m;
    m.version = newVersion();
    m.ec = ec::EcProfile{4, 2};
    m.etag = "multipart-" + std::to_string(parts.size());
    m.mtime_unix_nanos = clock.nowUnixNanos();
    for (int d = 0; d < 8; ++d) m.drives.push_back(fmt::format("d{}", d));
    for (const PartInfo& p : parts) {
      for (const StripeLayout& s : p.stripes) m.stripes.push_back(s);
      m.size += p.size;
    }
    return m;
  }
};

std::vector<std::string> idsOf(const ListUploadsResult& r) {
  std::vector<std::string> out;
  for (const MultipartUpload& u : r.uploads) out.push_back(u.key + "#" + u.upload_id);
  return out;
}

}  // namespace

// ---- uploads -------------------------------------------------------------------------

TEST_CASE("An upload can be created and read back") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("dir/obj");
  auto got = f.index->getUpload("b", "dir/obj", u.upload_id);
  REQUIRE(got.has_value());
  CHECK(*got == u);
  CHECK(f.index->getUpload("b", "other", u.upload_id).error().code() == Code::kNotFound);
}

TEST_CASE("createUpload fails with kNotFound without the bucket, kAlreadyExists for a taken id") {
  MultipartFixture f;
  MultipartUpload u;
  u.upload_id = f.newVersion().toHex();
  u.bucket = "nobucket";
  u.key = "k";
  CHECK(f.index->createUpload(u, 0).code() == Code::kNotFound);
  MultipartUpload a = f.newUpload("k");
  CHECK(f.index->createUpload(a, 0).code() == Code::kAlreadyExists);
  MultipartUpload other_key = a;
  other_key.key = "other";
  CHECK(f.index->createUpload(other_key, 0).code() == Code::kAlreadyExists);
  MultipartUpload bad = a;
  bad.upload_id = "a/b";
  CHECK(f.index->createUpload(bad, 0).code() == Code::kInvalidArgument);
}

TEST_CASE("Uploads list in (key, upload id) order with prefix, markers and truncation") {
  MultipartFixture f;
  f.makeBucket("bb");
  MultipartUpload b1 = f.newUpload("b");
  MultipartUpload a1 = f.newUpload("a");
  MultipartUpload a2 = f.newUpload("a");  // same key, later id
  MultipartUpload c1 = f.newUpload("c/x");
  MultipartUpload ab = f.newUpload("ab");
  f.newUpload("a", "bb");  // another bucket whose name extends "b"

  auto all = f.index->listUploads("b", ListUploadsRequest{});
  REQUIRE(all.has_value());
  CHECK_FALSE(all->truncated);
  const std::vector<MultipartUpload> want{a1, a2, ab, b1, c1};
  CHECK(all->uploads == want);

  ListUploadsRequest req;
  req.prefix = "c/";
  CHECK(idsOf(*f.index->listUploads("b", req)) ==
        std::vector<std::string>{"c/x#" + c1.upload_id});

  // An upload id marker resumes inside one key's uploads.
  req = ListUploadsRequest{};
  req.key_marker = "a";
  req.upload_id_marker = a1.upload_id;
  CHECK(f.index->listUploads("b", req)->uploads ==
        std::vector<MultipartUpload>{a2, ab, b1, c1});
  // A key marker alone skips every upload of that key.
  req.upload_id_marker.clear();
  CHECK(f.index->listUploads("b", req)->uploads == std::vector<MultipartUpload>{ab, b1, c1});

  // Paging with max_uploads walks everything exactly once.
  std::vector<MultipartUpload> paged;
  req = ListUploadsRequest{};
  req.max_uploads = 2;
  for (int pages = 0; pages < 10; ++pages) {
    auto page = f.index->listUploads("b", req);
    REQUIRE(page.has_value());
    paged.insert(paged.end(), page->uploads.begin(), page->uploads.end());
    if (!page->truncated) break;
    REQUIRE(page->uploads.size() == 2);
    req.key_marker = page->uploads.back().key;
    req.upload_id_marker = page->uploads.back().upload_id;
  }
  CHECK(paged == want);

  req = ListUploadsRequest{};
  req.max_uploads = 0;
  auto none = f.index->listUploads("b", req);
  CHECK(none->uploads.empty());
  CHECK_FALSE(none->truncated);  // no marker to go on from: as max-keys=0, and MinIO
}

// ---- parts ---------------------------------------------------------------------------

TEST_CASE("Parts are listed in part-number order and paginate after a part number") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  std::map<uint32_t, PartInfo> parts;
  for (uint32_t n : {10u, 2u, 300u, 1u, 7u}) parts[n] = f.putPart(u, n);
  auto all = f.index->listParts("b", "k", u.upload_id, 0, 1000);
  REQUIRE(all.has_value());
  std::vector<PartInfo> want;
  for (auto& [n, p] : parts) want.push_back(p);
  CHECK(*all == want);

  auto page = f.index->listParts("b", "k", u.upload_id, 2, 2);
  REQUIRE(page.has_value());
  CHECK(*page == std::vector<PartInfo>{parts[7], parts[10]});
  CHECK(f.index->listParts("b", "k", u.upload_id, 300, 10)->empty());
  CHECK(f.index->listParts("b", "k", u.upload_id, 0xFFFFFFFFu, 10)->empty());
}

TEST_CASE("A part the orphan sweep marked dead is refused, a part in progress is never marked") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo stored = f.putPart(u, 1);
  CHECK_FALSE(f.index->markVersionDead(stored.version).value());
  // An UploadPart whose commit comes after the sweep took its fragments.
  PartInfo late = f.newPart(2);
  REQUIRE(f.index->markVersionDead(late.version).value());
  auto put = f.index->putPart(u.bucket, u.key, u.upload_id, late);
  REQUIRE_FALSE(put.has_value());
  CHECK(put.error().code() == Code::kTimeout);
  auto parts = f.index->listParts("b", "k", u.upload_id, 0, 100);
  REQUIRE(parts.has_value());
  REQUIRE(parts->size() == 1);
  CHECK((*parts)[0].version == stored.version);
}

TEST_CASE("putPart rejects part numbers outside 1..10000 and stripes of another version") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo zero = f.newPart(1);
  zero.part_number = 0;
  CHECK(f.index->putPart("b", "k", u.upload_id, zero).error().code() == Code::kInvalidArgument);
  PartInfo big = f.newPart(10001);
  CHECK(f.index->putPart("b", "k", u.upload_id, big).error().code() == Code::kInvalidArgument);
  PartInfo foreign = f.newPart(1);
  foreign.stripes[0].blob_version = f.newVersion();
  CHECK(f.index->putPart("b", "k", u.upload_id, foreign).error().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("Replacing a part enqueues the old part's blobs and returns its version") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo old = f.putPart(u, 3);
  CHECK(allGc(*f.index).empty());
  PartInfo fresh = f.newPart(3);
  auto replaced = f.index->putPart("b", "k", u.upload_id, fresh);
  REQUIRE(replaced.has_value());
  CHECK(*replaced == old.version);
  auto gc = allGc(*f.index);
  REQUIRE(gc.size() == 1);
  CHECK(gc[0].version == old.version);
  CHECK(gc[0].blobs == expectedBlobs(old));
  CHECK(*f.index->listParts("b", "k", u.upload_id, 0, 10) == std::vector<PartInfo>{fresh});
  // The old version stays referenced until its GC entry is done.
  CHECK(referenced(*f.index, old.version));
  REQUIRE(f.index->gcDone(gc).isOk());
  CHECK_FALSE(referenced(*f.index, old.version));
  CHECK(referenced(*f.index, fresh.version));
}

// ---- completion ----------------------------------------------------------------------

TEST_CASE("Part versions stay referenced through completion, unused ones until GC is done") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  PartInfo p2 = f.putPart(u, 2);
  PartInfo unused = f.putPart(u, 3);
  for (const PartInfo* p : {&p1, &p2, &unused}) CHECK(referenced(*f.index, p->version));

  Manifest m = f.assemble({p1, p2});
  auto done = f.index->completeUpload("b", "k", u.upload_id, m, Precondition::none());
  REQUIRE(done.has_value());
  CHECK_FALSE(done->has_value());
  CHECK(referenced(*f.index, p1.version));  // by the manifest now
  CHECK(referenced(*f.index, p2.version));
  CHECK(referenced(*f.index, unused.version));  // by its GC entry
  REQUIRE(f.index->gcDone(allGc(*f.index)).isOk());
  CHECK(referenced(*f.index, p1.version));
  CHECK(referenced(*f.index, p2.version));
  CHECK_FALSE(referenced(*f.index, unused.version));
}

TEST_CASE("Completing with unused parts enqueues exactly those parts' blobs") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  PartInfo p2 = f.putPart(u, 2);
  PartInfo p3 = f.putPart(u, 3);
  PartInfo p4 = f.putPart(u, 4);
  Manifest m = f.assemble({p1, p3});
  REQUIRE(f.index->completeUpload("b", "k", u.upload_id, m, Precondition::none()));

  auto gc = allGc(*f.index);
  std::set<VersionId> versions;
  for (const GcEntry& e : gc) versions.insert(e.version);
  CHECK(versions == std::set<VersionId>{p2.version, p4.version});
  std::set<BlobId> want = idsOf(expectedBlobs(p2));
  for (const BlobId& id : idsOf(expectedBlobs(p4))) want.insert(id);
  CHECK(gcBlobIds(*f.index) == want);

  auto got = f.index->getObject("b", "k");
  REQUIRE(got.has_value());
  CHECK(*got == m);
  CHECK(f.index->getUpload("b", "k", u.upload_id).error().code() == Code::kNotFound);
  CHECK(f.index->listParts("b", "k", u.upload_id, 0, 10).error().code() == Code::kNotFound);
  CHECK(f.index->listUploads("b", {})->uploads.empty());
}

TEST_CASE("Completing over an existing object reclaims the old object but not the new parts") {
  MultipartFixture f;
  Manifest old = f.stripedManifest(3);
  REQUIRE(f.index->putObject("b", "k", old, Precondition::none()));
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  PartInfo p2 = f.putPart(u, 2);
  Manifest m = f.assemble({p1, p2});
  auto done = f.index->completeUpload("b", "k", u.upload_id, m, Precondition::none());
  REQUIRE(done.has_value());
  CHECK(*done == std::optional<VersionId>(old.version));
  std::set<BlobId> gc = gcBlobIds(*f.index);
  CHECK(gc == idsOf(expectedBlobs(old)));
  for (const BlobRef& b : expectedBlobs(m)) CHECK_FALSE(gc.contains(b.id));
  REQUIRE(f.index->gcDone(allGc(*f.index)).isOk());
  CHECK_FALSE(referenced(*f.index, old.version));
  CHECK(referenced(*f.index, p1.version));
}

TEST_CASE("Overwriting a completed object with a manifest reusing its parts keeps those blobs") {
  // The new manifest reuses the completed object's part stripes (a copy onto itself that
  // kept the stripes): retiring the old one must not reclaim what the new one uses.
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  PartInfo p2 = f.putPart(u, 2);
  Manifest first = f.assemble({p1, p2});
  REQUIRE(f.index->completeUpload("b", "k", u.upload_id, first, Precondition::none()));
  Manifest second = first;
  second.version = f.newVersion();
  second.size -= second.stripes.back().data_len;
  second.stripes.pop_back();  // drops p2's last stripe
  REQUIRE(f.index->putObject("b", "k", second, Precondition::none()));
  std::set<BlobId> gc = gcBlobIds(*f.index);
  for (const BlobRef& b : expectedBlobs(second)) CHECK_FALSE(gc.contains(b.id));
  CHECK(gc.size() == 6);  // the dropped stripe's k + m fragments
}

TEST_CASE("Completion checks the precondition and leaves the upload in place on failure") {
  MultipartFixture f;
  REQUIRE(f.index->putObject("b", "k", f.inlineManifest("x"), Precondition::none()));
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  Manifest m = f.assemble({p1});
  CHECK(f.index->completeUpload("b", "k", u.upload_id, m, Precondition::mustNotExist())
            .error()
            .code() == Code::kPreconditionFailed);
  CHECK(f.index->getUpload("b", "k", u.upload_id).has_value());
  CHECK(f.index->listParts("b", "k", u.upload_id, 0, 10)->size() == 1);
  CHECK(allGc(*f.index).empty());
  CHECK(f.index->getObject("b", "k")->is_inline);
}

TEST_CASE("Completion rejects a manifest using a part version that is no longer current") {
  // The gateway reads the parts, then completes: a part replaced in between has its old
  // blobs on the GC queue, so the manifest must not reference them.
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  Manifest m = f.assemble({p1});
  f.putPart(u, 1);  // replaces p1
  CHECK(f.index->completeUpload("b", "k", u.upload_id, m, Precondition::none()).error().code() ==
        Code::kInvalidArgument);
  CHECK(f.index->getUpload("b", "k", u.upload_id).has_value());
  CHECK(f.index->getObject("b", "k").error().code() == Code::kNotFound);
}

TEST_CASE("A part's fragments relocate by compare-and-swap, the old places queued for GC") {
  // (Complete then takes the part's current locations, whatever the caller listed.)
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  Manifest stale = f.assemble({p1});
  // Stripe 0 of part 1 lies on d1..d6: its fragment 0 moves from d1 to d7.
  PartInfo moved = p1;
  REQUIRE(moved.stripes[0].drives[0] == 1);
  moved.stripes[0].drives[0] = 7;
  REQUIRE(f.index->relocatePartFragments("b", "k", u.upload_id, p1, moved).isOk());
  CHECK(*f.index->listParts("b", "k", u.upload_id, 0, 10) == std::vector<PartInfo>{moved});
  auto gc = allGc(*f.index);
  REQUIRE(gc.size() == 1);
  CHECK(gc[0].version == p1.version);
  CHECK(gc[0].blobs == std::vector<BlobRef>{{"d1", BlobId{p1.version, 0, 0}}});
  CHECK(referenced(*f.index, p1.version));
  // The GC's guard names where the part is now, not where it was.
  const auto both = concat(expectedBlobs(p1), expectedBlobs(moved));
  CHECK(locations(*f.index->blobsInUse(p1.version, both)) == locations(expectedBlobs(moved)));

  // What the row no longer is, or a change beyond where fragments are, is refused.
  CHECK(f.index->relocatePartFragments("b", "k", u.upload_id, p1, moved).code() ==
        Code::kPreconditionFailed);
  PartInfo retagged = moved;
  retagged.etag = "other";
  CHECK(f.index->relocatePartFragments("b", "k", u.upload_id, moved, retagged).code() ==
        Code::kInvalidArgument);
  PartInfo shorter = moved;
  shorter.stripes.pop_back();
  CHECK(f.index->relocatePartFragments("b", "k", u.upload_id, moved, shorter).code() ==
        Code::kInvalidArgument);

  // A Complete assembled from the parts as they were before the move names the old place,
  // which GC will empty: the object records where the fragment is now.
  REQUIRE(f.index->completeUpload("b", "k", u.upload_id, stale, Precondition::none())
              .has_value());
  Manifest fresh = f.assemble({moved});
  auto stored = f.index->getObject("b", "k");
  REQUIRE(stored.has_value());
  CHECK(stored->stripes == fresh.stripes);
  CHECK(stored->version == stale.version);
  CHECK(expectedBlobs(*stored) == expectedBlobs(moved));
  // Completed: the object's manifest is what uses the part's blobs now.
  CHECK(locations(*f.index->blobsInUse(p1.version, both)) == locations(expectedBlobs(moved)));
  CHECK(locations(*f.index->blobsInUse(stale.version, both)) ==
        locations(expectedBlobs(moved)));
  // The upload is gone: a late relocation finds nothing to change.
  CHECK(f.index->relocatePartFragments("b", "k", u.upload_id, moved, p1).code() ==
        Code::kNotFound);
}

TEST_CASE("Completion rejects a manifest whose EC profile is not its parts' own") {
  // Parts written 4+2 decode only with 4+2's matrix: a manifest stamped 3+3 (the map's
  // profile changed during the upload) would read wrong bytes once degraded.
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  Manifest m = f.assemble({p1});
  m.ec = ec::EcProfile{3, 3};
  CHECK(f.index->completeUpload("b", "k", u.upload_id, m, Precondition::none()).error().code() ==
        Code::kInvalidArgument);
  CHECK(f.index->getUpload("b", "k", u.upload_id).has_value());
  // A part stored before parts recorded a profile ({0, 0}) is not judged.
  PartInfo old = f.newPart(2);
  old.ec = ec::EcProfile{0, 0};
  REQUIRE(f.index->putPart("b", "k", u.upload_id, old).has_value());
  Manifest m2 = f.assemble({old});
  m2.ec = ec::EcProfile{3, 3};
  for (StripeLayout& s : m2.stripes) s.fragment_len = (s.fragment_len * 4 + 2) / 3;  // fits 3
  REQUIRE(f.index->completeUpload("b", "k", u.upload_id, m2, Precondition::none()).has_value());
  CHECK(f.index->getObject("b", "k")->ec == ec::EcProfile{3, 3});
}

TEST_CASE("Deleting a completed object enqueues the part blobs it used") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  PartInfo p2 = f.putPart(u, 2);
  Manifest m = f.assemble({p1, p2});
  REQUIRE(f.index->completeUpload("b", "k", u.upload_id, m, Precondition::none()));
  CHECK(allGc(*f.index).empty());
  REQUIRE(f.index->deleteObject("b", "k", Precondition::none()));
  CHECK(gcBlobIds(*f.index) == idsOf(expectedBlobs(m)));
  CHECK(referenced(*f.index, p1.version));
  REQUIRE(f.index->gcDone(allGc(*f.index)).isOk());
  CHECK_FALSE(referenced(*f.index, p1.version));
  CHECK_FALSE(referenced(*f.index, p2.version));
  CHECK_FALSE(referenced(*f.index, m.version));
}

// ---- abort, missing uploads, buckets ---------------------------------------------------

TEST_CASE("Aborting an upload enqueues every part's blobs and removes it") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  PartInfo p2 = f.putPart(u, 2, 3);
  REQUIRE(f.index->abortUpload("b", "k", u.upload_id).isOk());
  std::set<BlobId> want = idsOf(expectedBlobs(p1));
  for (const BlobId& id : idsOf(expectedBlobs(p2))) want.insert(id);
  CHECK(gcBlobIds(*f.index) == want);
  CHECK(f.index->getUpload("b", "k", u.upload_id).error().code() == Code::kNotFound);
  CHECK(f.index->abortUpload("b", "k", u.upload_id).code() == Code::kNotFound);
  REQUIRE(f.index->gcDone(allGc(*f.index)).isOk());
  CHECK_FALSE(referenced(*f.index, p1.version));
  CHECK_FALSE(referenced(*f.index, p2.version));
  CHECK(f.index->deleteBucket("b", 0).isOk());
}

TEST_CASE("Operations on a missing upload fail with kNotFound") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  const std::string missing = f.newVersion().toHex();
  PartInfo p = f.newPart(1);
  CHECK(f.index->getUpload("b", "k", missing).error().code() == Code::kNotFound);
  CHECK(f.index->putPart("b", "k", missing, p).error().code() == Code::kNotFound);
  CHECK(f.index->putPart("b", "other", u.upload_id, p).error().code() == Code::kNotFound);
  CHECK(f.index->listParts("b", "k", missing, 0, 10).error().code() == Code::kNotFound);
  CHECK(f.index->completeUpload("b", "k", missing, f.assemble({}), Precondition::none())
            .error()
            .code() == Code::kNotFound);
  CHECK(f.index->abortUpload("b", "k", missing).code() == Code::kNotFound);
  CHECK(f.index->abortUpload("nobucket", "k", u.upload_id).code() == Code::kNotFound);
  CHECK(allGc(*f.index).empty());
}

TEST_CASE("Deleting a bucket with an upload in progress fails with kNotEmpty") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  CHECK(f.index->deleteBucket("b", 0).code() == Code::kNotEmpty);
  REQUIRE(f.index->abortUpload("b", "k", u.upload_id).isOk());
  CHECK(f.index->deleteBucket("b", 0).isOk());
}

TEST_CASE("Uploads and parts survive a reopen") {
  MultipartFixture f;
  MultipartUpload u = f.newUpload("k");
  PartInfo p1 = f.putPart(u, 1);
  PartInfo p2 = f.putPart(u, 2);
  f.reopen();
  CHECK(*f.index->getUpload("b", "k", u.upload_id) == u);
  CHECK(*f.index->listParts("b", "k", u.upload_id, 0, 10) == std::vector<PartInfo>{p1, p2});
  CHECK(referenced(*f.index, p2.version));
  Manifest m = f.assemble({p1, p2});
  REQUIRE(f.index->completeUpload("b", "k", u.upload_id, m, Precondition::none()));
  CHECK(*f.index->getObject("b", "k") == m);
}

TEST_CASE("A database made before multipart uploads opens and gains the new column families") {
  testing::TempDir dir;
  RocksResources resources{RocksBudget{16ull << 20, 16ull << 20}};
  // The column families of that release only.
  testing::withRawDb(dir.path(), resources,
                     {rocksdb::kDefaultColumnFamilyName, "buckets", "objects", "manifests", "gc",
                      "blobrefs"},
                     [](rocksdb::DB&, const testing::RawHandles&) {});
  ManualClock clock{testing::kStartNanos};
  auto opened = openIndex(IndexOptions{dir.path(), 16}, resources, clock);
  REQUIRE(opened.has_value());
  Index& index = **opened;
  REQUIRE(index.createBucket(bucketInfo("b", "o", 1)).isOk());
  MultipartUpload u{"id1", "b", "k", "o", 1, "", {}, {}, {}, "", "", "", ""};
  REQUIRE(index.createUpload(u, 0).isOk());
  CHECK(*index.getUpload("b", "k", "id1") == u);
}

TEST_CASE("An object whose manifest is unreadable can still be deleted and overwritten") {
  IndexFixture f;
  f.makeBucket("b");
  const Manifest bad = f.stripedManifest(1);
  const Manifest other = f.stripedManifest(1);
  REQUIRE(f.index->putObject("b", "k", bad, Precondition::none()));
  REQUIRE(f.index->putObject("b", "k2", other, Precondition::none()));
  // The manifest rows of both, garbled on disk (a CBOR map of an unknown format).
  f.putRaw("manifests", {{versionKey(bad.version), "\xA1\x61\x66\x07"},
                         {versionKey(other.version), "\xA1\x61\x66\x07"}});
  REQUIRE(f.index->getObject("b", "k").error().isCorruption());
  // Deleted: gone, nothing queued for GC (the blobs are the orphan sweep's).
  REQUIRE(f.index->deleteObject("b", "k", Precondition::none()));
  CHECK(f.index->getObject("b", "k").error().isNotFound());
  CHECK_FALSE(referenced(*f.index, bad.version));
  // Overwritten: the new object is in place.
  const Manifest fresh = f.stripedManifest(1);
  REQUIRE(f.index->putObject("b", "k2", fresh, Precondition::none()));
  CHECK(*f.index->getObject("b", "k2") == fresh);
  CHECK(allGc(*f.index).empty());
  CHECK(f.index->deleteBucket("b", 0).code() == Code::kNotEmpty);
}

// ---- races ---------------------------------------------------------------------------

TEST_CASE("Complete, putPart and abort racing: one of complete/abort wins, no blob lost") {
  MultipartFixture f;
  std::map<std::string, int> outcomes;
  for (int round = 0; round < 40; ++round) {
    const std::string key = "race-" + std::to_string(round);
    MultipartUpload u = f.newUpload(key);
    PartInfo p1 = f.putPart(u, 1);
    PartInfo p2 = f.putPart(u, 2);
    PartInfo p3 = f.putPart(u, 3);
    Manifest m = f.assemble({p1, p2});
    // Racing parts: a new number, and a replacement of a part the manifest uses.
    PartInfo p4 = f.newPart(4);
    PartInfo p2b = f.newPart(2);

    std::atomic<int> go{0};
    Result<std::optional<VersionId>> completed = std::optional<VersionId>();
    Result<std::optional<VersionId>> put4 = std::optional<VersionId>();
    Result<std::optional<VersionId>> put2b = std::optional<VersionId>();
    Status aborted;
    auto wait = [&] {
      go.fetch_add(1);
      while (go.load() < 4) std::this_thread::yield();
    };
    std::thread a([&] {
      wait();
      completed = f.index->completeUpload("b", key, u.upload_id, m, Precondition::none());
    });
    std::thread b([&] {
      wait();
      aborted = f.index->abortUpload("b", key, u.upload_id);
    });
    std::thread c([&] {
      wait();
      put4 = f.index->putPart("b", key, u.upload_id, p4);
    });
    std::thread d([&] {
      wait();
      put2b = f.index->putPart("b", key, u.upload_id, p2b);
    });
    a.join();
    b.join();
    c.join();
    d.join();

    INFO("round " << round);
    outcomes[std::string(completed ? "complete" : "abort") + (put4 ? "+p4" : "") +
             (put2b ? "+p2b" : "")]++;
    // Complete fails only when abort won or p2 was replaced first.
    CHECK(completed.has_value() != aborted.isOk());
    if (!completed) {
      CHECK((completed.error().code() == Code::kNotFound ||
             completed.error().code() == Code::kInvalidArgument));
    }
    if (!aborted.isOk()) CHECK(aborted.code() == Code::kNotFound);
    for (auto* r : {&put4, &put2b}) {
      if (!*r) CHECK(r->error().code() == Code::kNotFound);
    }
    CHECK(f.index->getUpload("b", key, u.upload_id).error().code() == Code::kNotFound);

    // Every blob of every recorded part is either in the current manifest or on the GC
    // queue, never both; parts whose putPart failed are the caller's to remove.
    std::set<BlobId> live;
    if (auto obj = f.index->getObject("b", key)) live = idsOf(expectedBlobs(*obj));
    std::set<BlobId> gc = gcBlobIds(*f.index);
    std::vector<const PartInfo*> recorded{&p1, &p2, &p3};
    if (put4) recorded.push_back(&p4);
    if (put2b) recorded.push_back(&p2b);
    for (const PartInfo* p : recorded) {
      for (const BlobRef& blob : expectedBlobs(*p)) {
        CHECK(live.contains(blob.id) != gc.contains(blob.id));
      }
    }
    for (auto [r, p] : {std::pair{&put4, &p4}, std::pair{&put2b, &p2b}}) {
      if (*r) continue;
      for (const BlobRef& blob : expectedBlobs(*p)) {
        CHECK_FALSE(live.contains(blob.id));
        CHECK_FALSE(gc.contains(blob.id));
      }
    }
    REQUIRE(f.index->gcDone(allGc(*f.index)).isOk());
    if (completed) REQUIRE(f.index->deleteObject("b", key, Precondition::none()));
    REQUIRE(f.index->gcDone(allGc(*f.index)).isOk());
  }
  std::string summary;
  for (const auto& [name, n] : outcomes) summary += fmt::format("{}={} ", name, n);
  WARN("race outcomes: " << summary);
}

// ---- codec ---------------------------------------------------------------------------

TEST_CASE("Upload and part values round-trip and garbage decodes as kCorruption") {
  MultipartFixture f;
  MultipartUpload u;
  u.upload_id = "abc";
  u.bucket = "b";
  u.key = "k\xff";
  u.owner = "o";
  u.initiated_unix_nanos = -5;
  u.headers = {{"content-encoding", "gzip"}};
  CHECK(*decodeUpload(encodeUpload(u)) == u);
  PartInfo p = f.newPart(17, 3);
  CHECK(*decodePart(encodePart(p)) == p);

  // Checksum fields round-trip; records without them (the old format) still decode.
  MultipartUpload uc = u;
  uc.checksum_algorithm = "CRC64NVME";
  uc.checksum_type = "FULL_OBJECT";
  CHECK(*decodeUpload(encodeUpload(uc)) == uc);
  PartInfo pc = p;
  pc.checksum = ObjectChecksum{"CRC32C", "yZRlqg==", "FULL_OBJECT"};
  CHECK(*decodePart(encodePart(pc)) == pc);
  CHECK(decodePart(encodePart(p))->checksum.empty());
  nlohmann::json old_upload = {{"f", 1}, {"u", "id"}, {"b", "b"}, {"k", "k"}, {"o", "o"},
                               {"t", 1}};
  std::string old_upload_cbor;
  nlohmann::json::to_cbor(old_upload, old_upload_cbor);
  auto ou = decodeUpload(old_upload_cbor);
  REQUIRE(ou.has_value());
  CHECK(ou->checksum_algorithm.empty());
  CHECK(ou->checksum_type.empty());
  auto pj = nlohmann::json::from_cbor(encodePart(p));
  CHECK_FALSE(pj.contains("ck"));  // what an old writer wrote
  std::string old_part_cbor;
  nlohmann::json::to_cbor(pj, old_part_cbor);
  CHECK(decodePart(old_part_cbor)->checksum.empty());
  // The EC profile round-trips; a part written before it was recorded reads as {0, 0}.
  PartInfo p33 = p;
  p33.ec = ec::EcProfile{3, 3};
  CHECK(decodePart(encodePart(p33))->ec == ec::EcProfile{3, 3});
  pj.erase("k");
  pj.erase("m");
  old_part_cbor.clear();
  nlohmann::json::to_cbor(pj, old_part_cbor);
  auto unprofiled = decodePart(old_part_cbor);
  REQUIRE(unprofiled.has_value());
  CHECK(unprofiled->ec == ec::EcProfile{0, 0});
  CHECK(unprofiled->stripes == p.stripes);
  // A profile whose stripes do not name k + m drives, or an impossible one, is corrupt.
  PartInfo p53 = p;
  p53.ec = ec::EcProfile{5, 3};
  CHECK(decodePart(encodePart(p53)).error().code() == Code::kCorruption);
  PartInfo p40 = p;
  p40.ec = ec::EcProfile{40, 2};  // k + m > kMaxFragments
  CHECK(decodePart(encodePart(p40)).error().code() == Code::kCorruption);
  pj["k"] = 0;
  pj["m"] = 6;
  old_part_cbor.clear();
  nlohmann::json::to_cbor(pj, old_part_cbor);
  CHECK(decodePart(old_part_cbor).error().code() == Code::kCorruption);

  for (const std::string& bad : {std::string(), std::string("\xff\x00", 2),
                                 std::string("\xa0"), encodeBucket(bucketInfo("n", "o", 1))}) {
    CHECK(decodeUpload(bad).error().code() == Code::kCorruption);
    CHECK(decodePart(bad).error().code() == Code::kCorruption);
  }
  std::string enc = encodePart(p);
  for (size_t cut = 0; cut < enc.size(); ++cut) {
    auto r = decodePart(std::string_view(enc).substr(0, cut));
    CHECK_FALSE(r.has_value());
  }
  PartInfo bad_drive = p;
  bad_drive.stripes[0].drives[0] = 99;
  CHECK(decodePart(encodePart(bad_drive)).error().code() == Code::kCorruption);

  auto parsed = parseUploadKey(uploadKey("b", "a/b", "id1"));
  REQUIRE(parsed.has_value());
  CHECK(parsed->bucket == "b");
  CHECK(parsed->key == "a/b");
  CHECK(parsed->upload_id == "id1");
  CHECK(parseUploadKey("no-separators").error().code() == Code::kCorruption);
  CHECK(partKey("u", 1) < partKey("u", 256));
}

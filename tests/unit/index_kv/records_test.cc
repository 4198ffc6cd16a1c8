// The record index: rows hang off a record set named by the container's manifest.
#include <catch2/catch.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <set>

#include "common/sync_tracking_fs.h"
#include "test_util.h"

using namespace granary;
using namespace granary::index_kv;
using granary::index_kv::testing::IndexFixture;
using Code = Status::Code;

namespace {

// `n` rows of `container` in set `set`: keys "rec/00000".. at offsets 1000*i.
std::vector<RecordRow> makeRows(const std::string& container, const VersionId& set, int n,
                                const std::string& type = "", int first = 0) {
  std::vector<RecordRow> rows;
  for (int i = first; i < first + n; ++i) {
    rows.push_back(RecordRow{fmt::format("rec/{:05}", i), container, set, uint64_t(i) * 1000,
                             100 + uint64_t(i), 0xC0000000u + uint32_t(i), type});
  }
  return rows;
}

RecordIndexInfo indexed(const VersionId& set, uint64_t rows) {
  return RecordIndexInfo{"tar", "indexed", "", set, rows, rows * 40};
}

std::vector<RecordRow> rowsOf(const RecordPage& page) {
  std::vector<RecordRow> out;
  for (const RecordLocation& l : page.records) out.push_back(l.row);
  return out;
}

// Creates the set on first use (as an indexing run does), then stores the rows.
Status putRows(Index& index, const std::string& bucket, const std::string& container,
               const VersionId& set, const std::vector<RecordRow>& rows) {
  Status created = index.createRecordSet(bucket, container, set);
  if (!created.isOk() && created.code() != Status::Code::kAlreadyExists) return created;
  return index.putRecordRows(bucket, container, set, rows);
}

// Stores `rows` in `set` and commits an inline container naming the set: what an indexed
// PUT does. Returns the committed manifest.
Manifest publish(IndexFixture& f, const std::string& container, const VersionId& set,
                 const std::vector<RecordRow>& rows) {
  REQUIRE(putRows(*f.index, "b", container, set, rows).isOk());
  Manifest m = f.inlineManifest(container);
  m.records = indexed(set, rows.size());
  REQUIRE(f.index->putObject("b", container, m, Precondition::none()).has_value());
  return m;
}

// Every visible row with `prefix`, fetched `page_size` at a time.
std::vector<RecordRow> listAll(Index& index, const std::string& bucket, RecordQuery q,
                               size_t page_size, size_t* pages = nullptr) {
  std::vector<RecordRow> out;
  q.limit = page_size;
  size_t n = 0;
  for (;;) {
    auto page = index.listRecords(bucket, q);
    REQUIRE(page.has_value());
    ++n;
    for (auto& r : rowsOf(*page)) out.push_back(r);
    if (!page->truncated) break;
    REQUIRE(!page->next.empty());
    q.start_after = page->next;
    REQUIRE(n < 100000);
  }
  if (pages) *pages = n;
  return out;
}

// Rows of `set` still stored, visible or not.
size_t storedRows(Index& index, const VersionId& set) {
  auto rows = index.setRecords(set, std::nullopt, 1u << 30);
  REQUIRE(rows.has_value());
  return rows->size();
}

}  // namespace

TEST_CASE("Record rows are invisible until a manifest naming their set is committed") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId set = f.newVersion();
  auto rows = makeRows("shard.tar", set, 50);
  REQUIRE(putRows(*f.index, "b", "shard.tar", set, rows).isOk());

  RecordQuery all;
  CHECK(listAll(*f.index, "b", all, 1000).empty());

  Manifest m = f.inlineManifest("container bytes");
  m.records = indexed(set, rows.size());
  REQUIRE(f.index->putObject("b", "shard.tar", m, Precondition::none()).has_value());
  CHECK(listAll(*f.index, "b", all, 1000) == rows);
  CHECK(f.index->getObject("b", "shard.tar")->records == m.records);

  // Survives a reopen (the manifest's record info and the rows).
  f.reopen();
  CHECK(listAll(*f.index, "b", all, 1000) == rows);
  CHECK(f.index->getObject("b", "shard.tar")->records == m.records);
}

TEST_CASE("Record listing pages by key prefix, and exact-key lookups list every location") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId s1 = f.newVersion();
  const VersionId s2 = f.newVersion();
  auto r1 = makeRows("a.tar", s1, 120);
  auto r2 = makeRows("b.tar", s2, 30, "", 100);  // rec/00100.. overlap a.tar's last 20 keys
  publish(f, "a.tar", s1, r1);
  const Manifest mb = publish(f, "b.tar", s2, r2);

  std::vector<RecordRow> expected = r1;
  expected.insert(expected.end(), r2.begin(), r2.end());
  std::sort(expected.begin(), expected.end(), [](const RecordRow& x, const RecordRow& y) {
    return std::tie(x.key, x.container) < std::tie(y.key, y.container);
  });
  size_t pages = 0;
  RecordQuery all;
  CHECK(listAll(*f.index, "b", all, 7, &pages) == expected);
  CHECK(pages == (expected.size() + 6) / 7);

  RecordQuery prefix;
  prefix.prefix = "rec/0011";
  auto got = listAll(*f.index, "b", prefix, 3);
  CHECK(got.size() == 20);  // rec/00110..00119 in both containers
  for (const RecordRow& r : got) CHECK(r.key.starts_with("rec/0011"));

  RecordQuery exact;
  exact.key = "rec/00105";
  auto both = f.index->listRecords("b", exact);
  REQUIRE(both.has_value());
  REQUIRE(both->records.size() == 2);
  CHECK(both->records[0].row.container == "a.tar");
  CHECK(both->records[1].row.container == "b.tar");
  CHECK(both->records[1].container_version == mb.version);
  CHECK(both->records[1].container_mtime_unix_nanos == mb.mtime_unix_nanos);

  exact.container = "b.tar";
  auto one = f.index->listRecords("b", exact);
  REQUIRE(one->records.size() == 1);
  CHECK(one->records[0].row == r2[5]);

  // An exact key is not a prefix: "rec/0010" matches nothing.
  RecordQuery none;
  none.key = "rec/0010";
  CHECK(f.index->listRecords("b", none)->records.empty());
  // Other buckets see nothing.
  f.makeBucket("c");
  CHECK(listAll(*f.index, "c", all, 10).empty());
}

TEST_CASE("The type filter applies to typed (WARC) rows only") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId s1 = f.newVersion();
  std::vector<RecordRow> rows = makeRows("crawl.warc.gz", s1, 2, "request");
  auto responses = makeRows("crawl.warc.gz", s1, 2, "response", 2);
  for (auto& r : responses) r.key = rows[&r - &responses[0]].key;  // same URLs
  rows.insert(rows.end(), responses.begin(), responses.end());
  publish(f, "crawl.warc.gz", s1, rows);
  const VersionId s2 = f.newVersion();
  publish(f, "t.tar", s2, makeRows("t.tar", s2, 1));

  RecordQuery q;
  q.key = "rec/00000";
  q.type = "response";
  auto page = f.index->listRecords("b", q);
  REQUIRE(page->records.size() == 2);  // the WARC response and the untyped tar member
  CHECK(page->records[0].row.type == "response");
  CHECK(page->records[1].row.container == "t.tar");
  q.type.clear();
  CHECK(f.index->listRecords("b", q)->records.size() == 3);
}

TEST_CASE("An offset with its key and container looks up one row of the visible set") {
  // 20,000 rows of one key in one container: a reader naming one by its offset got a
  // refusal once the key's locations passed 10,000, and a batch of them scanned them all.
  IndexFixture f;
  f.makeBucket("b");
  const VersionId old_set = f.newVersion();
  publish(f, "c.tar", old_set, makeRows("c.tar", old_set, 3));  // replaced below
  const VersionId set = f.newVersion();
  std::vector<RecordRow> rows = makeRows("c.tar", set, 20'000);
  for (auto& r : rows) r.key = "same";
  rows.push_back(makeRows("c.tar", set, 1, "", 5)[0]);  // "rec/00005", at offset 5000
  rows.back().offset = 5000;
  publish(f, "c.tar", set, rows);
  publish(f, "d.tar", f.newVersion(), {});

  RecordQuery q;
  q.key = "same";
  q.container = "c.tar";
  q.offset = 7000;
  auto page = f.index->listRecords("b", q);
  REQUIRE(page.has_value());
  REQUIRE(page->records.size() == 1);
  CHECK(page->records[0].row == rows[7]);
  CHECK_FALSE(page->truncated);
  q.key = "rec/00005";  // shares offset 5000 with "same"
  q.offset = 5000;
  REQUIRE(f.index->listRecords("b", q)->records.size() == 1);
  CHECK(f.index->listRecords("b", q)->records[0].row.key == "rec/00005");
  q.offset = 0;  // "rec/00000" of the replaced set only
  q.key = "rec/00000";
  CHECK(f.index->listRecords("b", q)->records.empty());
  q.key = "same";
  q.offset = 7001;
  CHECK(f.index->listRecords("b", q)->records.empty());
  q.container = "d.tar";
  q.offset = 0;
  CHECK(f.index->listRecords("b", q)->records.empty());
  q.container = "no-such.tar";
  CHECK(f.index->listRecords("b", q)->records.empty());
  q.container.clear();
  CHECK(f.index->listRecords("b", q).error().code() == Status::Code::kInvalidArgument);
}

TEST_CASE("Overwriting or deleting a container hides its rows at once, GC removes them") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId s1 = f.newVersion();
  publish(f, "c.tar", s1, makeRows("c.tar", s1, 5000));

  RecordQuery all;
  bool deleting = GENERATE(false, true);
  if (deleting) {
    REQUIRE(f.index->deleteObject("b", "c.tar", Precondition::none()).has_value());
  } else {
    Manifest plain = f.inlineManifest("v2, not indexed");
    REQUIRE(f.index->putObject("b", "c.tar", plain, Precondition::none()).has_value());
  }
  CHECK(listAll(*f.index, "b", all, 1000).empty());
  CHECK(storedRows(*f.index, s1) == 5000);

  // Removal is bounded per call.
  auto gc = f.index->collectRecordGarbage(3000, 0);
  REQUIRE(gc.has_value());
  CHECK(gc->rows_removed == 3000);
  CHECK(gc->sets_removed == 0);
  CHECK(storedRows(*f.index, s1) == 2000);
  gc = f.index->collectRecordGarbage(3000, 0);
  REQUIRE(gc.has_value());
  CHECK(gc->rows_removed == 2000);
  CHECK(gc->sets_removed == 1);
  CHECK(storedRows(*f.index, s1) == 0);
  gc = f.index->collectRecordGarbage(3000, 0);
  CHECK(gc->rows_removed == 0);
  CHECK(gc->sets_removed == 0);
}

TEST_CASE("A rewrite that keeps the record set keeps the rows") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId s1 = f.newVersion();
  auto rows = makeRows("c.tar", s1, 10);
  const Manifest m = publish(f, "c.tar", s1, rows);
  Manifest same = m;  // same version rewritten in place (e.g. metadata)
  same.content_type = "application/x-tar";
  REQUIRE(f.index->putObject("b", "c.tar", same, Precondition::mustMatch(m.version)).has_value());
  (void)f.index->collectRecordGarbage(1000, 0);
  RecordQuery all;
  CHECK(listAll(*f.index, "b", all, 100) == rows);
}

TEST_CASE("attachRecords publishes rows on the current version, in several calls") {
  IndexFixture f;
  f.makeBucket("b");
  Manifest m = f.inlineManifest("plain container");
  REQUIRE(f.index->putObject("b", "c.tar", m, Precondition::none()).has_value());
  const VersionId set = f.newVersion();
  auto first = makeRows("c.tar", set, 10);
  auto second = makeRows("c.tar", set, 10, "", 10);
  REQUIRE(putRows(*f.index, "b", "c.tar", set, first).isOk());
  auto info = f.index->attachRecords("b", "c.tar", m.version, indexed(set, 10));
  REQUIRE(info.has_value());
  CHECK(info->rows == 10);
  RecordQuery all;
  CHECK(listAll(*f.index, "b", all, 100) == first);

  REQUIRE(putRows(*f.index, "b", "c.tar", set, second).isOk());
  info = f.index->attachRecords("b", "c.tar", m.version, indexed(set, 10));
  REQUIRE(info.has_value());
  CHECK(info->rows == 20);
  CHECK(info->row_bytes == 800);
  CHECK(listAll(*f.index, "b", all, 100).size() == 20);
  CHECK(f.index->getObject("b", "c.tar")->records.rows == 20);
  CHECK(f.index->getObject("b", "c.tar")->version == m.version);
}

TEST_CASE("attachRecords to a replaced version fails and the set's rows are removed") {
  IndexFixture f;
  f.makeBucket("b");
  Manifest m = f.inlineManifest("v1");
  REQUIRE(f.index->putObject("b", "c.tar", m, Precondition::none()).has_value());
  Manifest m2 = f.inlineManifest("v2");
  REQUIRE(f.index->putObject("b", "c.tar", m2, Precondition::none()).has_value());
  const VersionId set = f.newVersion();
  REQUIRE(putRows(*f.index, "b", "c.tar", set, makeRows("c.tar", set, 10)).isOk());
  auto info = f.index->attachRecords("b", "c.tar", m.version, indexed(set, 10));
  REQUIRE_FALSE(info.has_value());
  CHECK(info.error().code() == Code::kPreconditionFailed);
  RecordQuery all;
  CHECK(listAll(*f.index, "b", all, 100).empty());
  auto gc = f.index->collectRecordGarbage(1000, 0);
  CHECK(gc->rows_removed == 10);
  CHECK(storedRows(*f.index, set) == 0);
  // A dead set cannot be published by a later commit either.
  Manifest m3 = f.inlineManifest("v3");
  m3.records = indexed(set, 10);
  auto put = f.index->putObject("b", "c.tar", m3, Precondition::none());
  REQUIRE_FALSE(put.has_value());
  CHECK(put.error().code() == Code::kPreconditionFailed);
}

TEST_CASE("An orphan set marked dead is not marked again while its rows are removed") {
  // Its rows go a bounded number a pass; each pass re-marked it (the sweep lock taken
  // exclusively, blocking row inserts, and a commit) until the last row was gone.
  IndexFixture f;
  f.makeBucket("b");
  const VersionId orphan = f.newVersion();
  REQUIRE(putRows(*f.index, "b", "y.tar", orphan, makeRows("y.tar", orphan, 5)).isOk());
  f.clock.advance(2'000'000'000);
  const int64_t cutoff = f.clock.nowUnixNanos() - 1'000'000'000;
  auto gc = f.index->collectRecordGarbage(1, cutoff);  // marks it dead, removes a row
  REQUIRE(gc);
  CHECK(gc->rows_removed == 1);
  const uint64_t requests = f.index->commitStats()->requests;
  gc = f.index->collectRecordGarbage(1, cutoff);
  REQUIRE(gc);
  CHECK(gc->rows_removed == 1);
  CHECK(f.index->commitStats()->requests == requests);  // no second mark
  gc = f.index->collectRecordGarbage(100, cutoff);
  CHECK(storedRows(*f.index, orphan) == 0);
}

TEST_CASE("Abandoned and orphaned record sets are removed, named ones are kept") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId abandoned = f.newVersion();
  const VersionId orphan = f.newVersion();
  const VersionId named = f.newVersion();
  REQUIRE(putRows(*f.index, "b", "x.tar", abandoned, makeRows("x.tar", abandoned, 3)).isOk());
  REQUIRE(putRows(*f.index, "b", "y.tar", orphan, makeRows("y.tar", orphan, 4)).isOk());
  publish(f, "z.tar", named, makeRows("z.tar", named, 5));
  REQUIRE(f.index->abandonRecords(abandoned).isOk());

  // Young sets are not orphans yet (an upload may still be indexing).
  auto gc = f.index->collectRecordGarbage(1000, f.clock.nowUnixNanos() - 1'000'000'000);
  CHECK(gc->rows_removed == 3);
  CHECK(storedRows(*f.index, orphan) == 4);
  f.clock.advance(2'000'000'000);
  gc = f.index->collectRecordGarbage(1000, f.clock.nowUnixNanos() - 1'000'000'000);
  CHECK(gc->rows_removed == 4);
  CHECK(storedRows(*f.index, orphan) == 0);
  CHECK(storedRows(*f.index, named) == 5);
  RecordQuery all;
  CHECK(listAll(*f.index, "b", all, 100).size() == 5);
}

TEST_CASE("Listing stops early after max_examined invisible rows and resumes") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId hidden = f.newVersion();
  REQUIRE(putRows(*f.index, "b", "h.tar", hidden, makeRows("h.tar", hidden, 300)).isOk());
  const VersionId shown = f.newVersion();
  auto rows = makeRows("s.tar", shown, 3, "", 400);
  publish(f, "s.tar", shown, rows);
  RecordQuery q;
  q.max_examined = 100;
  auto page = f.index->listRecords("b", q);
  REQUIRE(page.has_value());
  CHECK(page->records.empty());
  CHECK(page->truncated);
  CHECK(listAll(*f.index, "b", q, 10) == rows);
}

TEST_CASE("Rows go only into a live set: never created, dead or removed sets refuse them") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId set = f.newVersion();
  CHECK(f.index->putRecordRows("b", "c.tar", set, makeRows("c.tar", set, 1)).code() ==
        Code::kPreconditionFailed);
  REQUIRE(f.index->createRecordSet("b", "c.tar", set).isOk());
  CHECK(f.index->createRecordSet("b", "c.tar", set).code() == Code::kAlreadyExists);
  CHECK(f.index->putRecordRows("b", "other.tar", set, makeRows("other.tar", set, 1)).code() ==
        Code::kInvalidArgument);
  REQUIRE(f.index->putRecordRows("b", "c.tar", set, makeRows("c.tar", set, 5)).isOk());
  // Swept as an orphan (a stalled indexing run) and collected: it cannot come back with
  // its early rows gone, neither by more rows nor by a commit naming it.
  f.clock.advance(10'000'000'000);
  auto gc = f.index->collectRecordGarbage(1000, f.clock.nowUnixNanos() - 1'000'000'000);
  REQUIRE(gc.has_value());
  CHECK(gc->rows_removed == 5);
  CHECK(gc->sets_removed == 1);
  CHECK(f.index->putRecordRows("b", "c.tar", set, makeRows("c.tar", set, 5, "", 5)).code() ==
        Code::kPreconditionFailed);
  Manifest m = f.inlineManifest("c");
  m.records = indexed(set, 10);
  CHECK(f.index->putObject("b", "c.tar", m, Precondition::none()).error().code() ==
        Code::kPreconditionFailed);
  CHECK(storedRows(*f.index, set) == 0);
}

#ifndef GRANARY_INDEX_OVER_RPC
// Direct only: over RPC the test thread's first clock reading is the client's signing
// date, before the request is sent, so the hook would run before the server's check.
TEST_CASE("Rows written into a set that dies meanwhile are taken back, not left unreachable") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId set = f.newVersion();
  publish(f, "c.tar", set, makeRows("c.tar", set, 5));
  // More rows for the published set; between their liveness check and their write the
  // container is overwritten, which marks the set dead on the committer.
  f.clock.armOnce([&] {
    Manifest plain = f.inlineManifest("v2, not indexed");
    REQUIRE(f.index->putObject("b", "c.tar", plain, Precondition::none()).has_value());
  });
  CHECK(f.index->putRecordRows("b", "c.tar", set, makeRows("c.tar", set, 5, "", 5)).code() ==
        Code::kPreconditionFailed);
  CHECK(storedRows(*f.index, set) == 5);  // the first five only, left to the GC
  auto gc = f.index->collectRecordGarbage(1000, 0);
  REQUIRE(gc.has_value());
  CHECK(gc->rows_removed == 5);
  CHECK(gc->sets_removed == 1);
  CHECK(storedRows(*f.index, set) == 0);
}
#endif

TEST_CASE("Two rows at one offset under two keys are both listed and both removed") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId set = f.newVersion();
  std::vector<RecordRow> rows = makeRows("c.warc", set, 1, "response");
  rows.push_back(rows[0]);
  rows[1].key = "<urn:uuid:1>";  // the same record by URI and by record id
  publish(f, "c.warc", set, rows);
  CHECK(storedRows(*f.index, set) == 2);
  RecordQuery all;
  CHECK(listAll(*f.index, "b", all, 10).size() == 2);
  // In container order, a page of one row at a time: the cursor names the key too, so a
  // page that ends between the two goes on with the other. (By offset alone it skips it.)
  std::vector<std::string> keys;
  std::optional<RecordCursor> after;
  for (int pages = 0; pages < 5; ++pages) {
    auto page = f.index->setRecords(set, after, 1);
    REQUIRE(page.has_value());
    if (page->empty()) break;
    keys.push_back(page->back().key);
    after = RecordCursor{page->back().offset, page->back().key};
  }
  CHECK(keys == std::vector<std::string>{rows[1].key, rows[0].key});  // by key, bytewise
  auto past = f.index->setRecords(set, RecordCursor{rows[0].offset, ""}, 10);
  REQUIRE(past.has_value());
  CHECK(past->empty());  // an offset alone: past every row at it
  REQUIRE(f.index->deleteObject("b", "c.warc", Precondition::none()).has_value());
  auto gc = f.index->collectRecordGarbage(1000, 0);
  CHECK(gc->rows_removed == 2);
  CHECK(storedRows(*f.index, set) == 0);
}

TEST_CASE("Bad record rows are refused") {
  IndexFixture f;
  f.makeBucket("b");
  const VersionId set = f.newVersion();
  auto rows = makeRows("c.tar", set, 1);
  rows[0].key = std::string("a\0b", 3);
  CHECK(putRows(*f.index, "b", "c.tar", set, rows).code() == Code::kInvalidArgument);
  rows[0].key = "";
  CHECK(putRows(*f.index, "b", "c.tar", set, rows).code() == Code::kInvalidArgument);
  rows = makeRows("other.tar", set, 1);
  CHECK(putRows(*f.index, "b", "c.tar", set, rows).code() == Code::kInvalidArgument);
  CHECK(putRows(*f.index, "b", "c.tar", VersionId{}, {}).code() == Code::kInvalidArgument);
}

TEST_CASE("Record sets and rows are durable when their writes return") {
  // In cluster mode the gateway outlives a power cut of the index host, and the commit
  // that publishes a set checks only that the set lives: rows lost with the page cache
  // would be published missing. So the set and every batch of rows are synced.
  auto fs = std::make_shared<granary::testing::SyncTrackingFileSystem>();
  granary::test_support::TempDir dir;
  RocksResources resources{RocksBudget{16ull << 20, 16ull << 20}, fs};
  ManualClock clock{granary::index_kv::testing::kStartNanos};
  SeededRandom random{5};
  auto opened = openIndex(IndexOptions{.dir = dir.path()}, resources, clock);
  REQUIRE(opened.has_value());
  Index& index = **opened;
  REQUIRE(index.createBucket(granary::index_kv::testing::bucketInfo("b", "o",
                                                                      clock.nowUnixNanos()))
              .isOk());
  CHECK(fs->unsyncedWalBytes() == 0);
  clock.advance(1000);
  const VersionId set = VersionId::generate(clock, random);
  REQUIRE(index.createRecordSet("b", "c.tar", set).isOk());
  CHECK(fs->unsyncedWalBytes() == 0);
  REQUIRE(index.putRecordRows("b", "c.tar", set, makeRows("c.tar", set, 100)).isOk());
  CHECK(fs->unsyncedWalBytes() == 0);
}

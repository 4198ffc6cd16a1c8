// RocksIndex: opening the DB, the read paths, and turning mutations into commit requests.
// Formats: docs/index-format.md.
#include "index_kv/rocks_index.h"

#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <filesystem>
#include <set>
#include <string_view>
#include <utility>
#include <system_error>

#include "granary/common/clock.h"
#include "granary/common/durable_dirs.h"
#include "granary/common/hex.h"
#include "granary/common/log.h"
#include "granary/common/rocks_resources.h"
#include "index_kv/codec.h"
#include "index_kv/listing.h"

namespace granary::index_kv {
Status checkBucketName(std::string_view bucket) {
  if (bucket.empty() || bucket.find('/') != std::string_view::npos) {
    return Status::invalidArgument("index: bad bucket name");
  }
  return Status::ok();
}

Status fromRocks(const rocksdb::Status& s, std::string_view context) {
  std::string message = std::string(context) + ": " + s.ToString();
  if (s.ok()) return Status::ok();
  if (s.IsNotFound()) return Status::notFound(std::move(message));
  if (s.IsCorruption()) return Status::corruption(std::move(message));
  if (s.IsNoSpace()) return Status::noSpace(std::move(message));
  if (s.IsIOError()) return Status::ioError(std::move(message));
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) {
    return Status::unavailable(std::move(message));
  }
  if (s.IsInvalidArgument()) return Status::invalidArgument(std::move(message));
  return Status::internal(std::move(message));
}

Result<std::unique_ptr<Index>> openIndex(const IndexOptions& options, RocksResources& resources,
                                         const Clock& clock) {
  auto index = RocksIndex::open(options, resources, clock);
  if (!index) return fail(index.error());
  return std::unique_ptr<Index>(std::move(*index));
}

Result<std::unique_ptr<RocksIndex>> RocksIndex::open(const IndexOptions& options,
                                                     RocksResources& resources,
                                                     const Clock& clock) {
  GRANARY_RETURN_IF_ERROR_RESULT(createDirectoriesDurably(options.dir));

  rocksdb::Options db_options = resources.baseOptions();
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName,
                           rocksdb::ColumnFamilyOptions(db_options));
  for (const char* name :
       {kBucketsCf, kObjectsCf, kManifestsCf, kGcCf, kBlobRefsCf, kUploadsCf, kPartsCf,
        kRecordsCf, kRecordSetsCf, kRecordOrderCf, kRecordGcCf, kUsersCf, kDeadVersionsCf}) {
    descriptors.emplace_back(name, resources.columnFamilyOptions());
  }
  std::unique_ptr<RocksIndex> index(new RocksIndex(clock));
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(db_options), options.dir,
                                        descriptors, &index->handles_, &raw);
  if (!s.ok()) return fail(fromRocks(s, "index: opening " + options.dir));
  index->db_.reset(raw);
  index->cfs_ = ColumnFamilies{index->handles_[1], index->handles_[2], index->handles_[3],
                               index->handles_[4], index->handles_[5], index->handles_[6],
                               index->handles_[7], index->handles_[8], index->handles_[9],
                               index->handles_[10], index->handles_[11],
                               index->handles_[12], index->handles_[13]};
  if (Status st = index->loadCreated(options); !st.isOk()) return fail(st);
  index->gc_page_blobs_ = std::max<size_t>(1, options.gc_page_blobs);
  index->queue_ =
      std::make_unique<CommitQueue>(raw, index->cfs_, clock, options.max_batch,
                                    index->gc_page_blobs_);
  if (Status st = index->queue_->start(); !st.isOk()) return fail(st);
  return index;
}

Status RocksIndex::loadCreated(const IndexOptions& options) {
  // In the default column family, which holds nothing else.
  static constexpr std::string_view kCreatedKey = "index_created_unix_nanos";
  const int64_t margin =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.new_index_margin).count();
  using Creation = IndexOptions::Creation;
  auto record = [&](int64_t t) {
    uint8_t v[8];
    putBe64(v, static_cast<uint64_t>(t));
    rocksdb::WriteOptions synced;
    synced.sync = true;
    rocksdb::Status put =
        db_->Put(synced, kCreatedKey, rocksdb::Slice(reinterpret_cast<const char*>(v), 8));
    return put.ok() ? Status::ok() : fromRocks(put, "index: recording its creation time");
  };
  if (options.creation != Creation::kNormal) {
    // Rebuilding: on disk a new index's guard (a restored checkpoint's time included: the
    // versions since it are not rebuilt yet), should the rebuild not finish; answering as
    // an index that knows every blob, so the rebuild sees only real references. Rebuilt:
    // 0 for good.
    created_unix_nanos_ = 0;
    return record(options.creation == Creation::kRebuilt ? 0
                                                          : clock_.nowUnixNanos() + margin);
  }
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kCreatedKey, &value);
  if (s.ok()) {
    if (value.size() != 8) return Status::corruption("index: malformed creation time");
    created_unix_nanos_ =
        static_cast<int64_t>(getBe64(reinterpret_cast<const uint8_t*>(value.data())));
    return Status::ok();
  }
  if (!s.IsNotFound()) return fromRocks(s, "index: reading its creation time");
  // Not recorded: a new index, or one made before the field (which has buckets: it
  // knows its blobs, 0).
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cfs_.buckets));
  it->SeekToFirst();
  if (!it->status().ok()) return fromRocks(it->status(), "index: reading buckets");
  created_unix_nanos_ = it->Valid() ? 0 : clock_.nowUnixNanos() + margin;
  return record(created_unix_nanos_);
}

RocksIndex::~RocksIndex() {
  queue_.reset();  // drains pending commits and joins the committer
  if (db_) {
    for (rocksdb::ColumnFamilyHandle* h : handles_) (void)db_->DestroyColumnFamilyHandle(h);
    (void)db_->Close();
  }
}

Status RocksIndex::submit(CommitRequest& req) {
  queue_->submit(req);
  return req.status;
}

// ---- buckets -------------------------------------------------------------------------

Status RocksIndex::createBucket(const BucketInfo& bucket) {
  GRANARY_RETURN_IF_ERROR(checkBucketName(bucket.name));
  CommitRequest req;
  req.kind = CommitRequest::Kind::kCreateBucket;
  req.bucket = bucket.name;
  req.bucket_value = encodeBucket(bucket);
  return submit(req);
}

Status RocksIndex::updateBucket(const BucketInfo& bucket, const BucketInfo& expected) {
  GRANARY_RETURN_IF_ERROR(checkBucketName(bucket.name));
  if (expected.name != bucket.name) return Status::invalidArgument("two buckets' names");
  CommitRequest req;
  req.kind = CommitRequest::Kind::kUpdateBucket;
  req.bucket = bucket.name;
  req.bucket_info = bucket;
  req.expected_bucket = expected;
  return submit(req);
}

namespace {
// With kBlockCacheTier, a read that would need a file answers nullopt.
std::optional<Result<BucketInfo>> readBucket(rocksdb::DB* db, const ColumnFamilies& cfs,
                                             std::string_view name, rocksdb::ReadTier tier) {
  rocksdb::ReadOptions options;
  options.read_tier = tier;
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(options, cfs.buckets, rocksdb::Slice(name), &value);
  if (s.IsIncomplete()) return std::nullopt;
  if (s.IsNotFound()) return fail(Status::notFound("no bucket " + std::string(name)));
  if (!s.ok()) return fail(fromRocks(s, "index: reading bucket"));
  return decodeBucket(value.ToStringView());
}
}  // namespace

Result<BucketInfo> RocksIndex::getBucket(std::string_view name) {
  auto r = readBucket(db_.get(), cfs_, name, rocksdb::kReadAllTier);
  if (!r) return fail(Status::internal("index: a full-tier read returned Incomplete"));
  return std::move(*r);
}

std::optional<Result<BucketInfo>> RocksIndex::getBucketFromMemory(std::string_view name) {
  return readBucket(db_.get(), cfs_, name, rocksdb::kBlockCacheTier);
}

Result<std::vector<BucketInfo>> RocksIndex::listBuckets() {
  return decodeAll<BucketInfo>(db_.get(), cfs_.buckets, decodeBucket, "buckets");
}

Status RocksIndex::deleteBucket(std::string_view name, int64_t created_unix_nanos) {
  CommitRequest req;
  req.kind = CommitRequest::Kind::kDeleteBucket;
  req.bucket = std::string(name);
  req.pre.bucket_created_unix_nanos = created_unix_nanos;
  return submit(req);
}

// ---- users ---------------------------------------------------------------------------

Status RocksIndex::createUser(const UserInfo& user) {
  if (user.name.empty() || user.access_key.empty() || user.secret_key.empty()) {
    return Status::invalidArgument("a user needs a name, an access key and a secret key");
  }
  CommitRequest req;
  req.kind = CommitRequest::Kind::kCreateUser;
  req.key = user.name;
  req.user = user;
  return submit(req);
}

Result<std::vector<UserInfo>> RocksIndex::listUsers() {
  return decodeAll<UserInfo>(db_.get(), cfs_.users, decodeUser, "users");
}

Status RocksIndex::deleteUser(std::string_view name) {
  CommitRequest req;
  req.kind = CommitRequest::Kind::kDeleteUser;
  req.key = std::string(name);
  return submit(req);
}

// ---- objects -------------------------------------------------------------------------

namespace {
// The encoded rows a manifest commit writes (putObject and completeUpload alike).
void stageManifest(CommitRequest& req, const Manifest& manifest) {
  req.manifest = &manifest;
  req.summary_value = encodeSummary(summaryOf(manifest));
  req.manifest_value = encodeManifest(manifest);
}

// The requests of putObject and deleteObject, synchronous or not. `manifest` must stay
// alive until the request is answered.
Status stagePutObject(CommitRequest& req, std::string_view bucket, std::string_view key,
                      const Manifest& manifest, Precondition pre) {
  GRANARY_RETURN_IF_ERROR(checkBucketName(bucket));
  if (key.empty()) return Status::invalidArgument("index: empty object key");
  GRANARY_RETURN_IF_ERROR(validateManifest(manifest));
  req.kind = CommitRequest::Kind::kPutObject;
  req.bucket = std::string(bucket);
  req.key = std::string(key);
  req.pre = pre;
  stageManifest(req, manifest);
  return Status::ok();
}

Status stageDeleteObject(CommitRequest& req, std::string_view bucket, std::string_view key,
                         Precondition pre) {
  GRANARY_RETURN_IF_ERROR(checkBucketName(bucket));
  req.kind = CommitRequest::Kind::kDeleteObject;
  req.bucket = std::string(bucket);
  req.key = std::string(key);
  req.pre = pre;
  return Status::ok();
}
}  // namespace

Result<std::optional<VersionId>> RocksIndex::putObject(std::string_view bucket,
                                                       std::string_view key,
                                                       const Manifest& manifest,
                                                       Precondition pre) {
  CommitRequest req;
  if (Status st = stagePutObject(req, bucket, key, manifest, pre); !st.isOk()) return fail(st);
  if (Status st = submit(req); !st.isOk()) return fail(st);
  return req.replaced;
}

template <typename Stage>
void RocksIndex::commitAsync(Manifest manifest, CommitDone done, Stage stage) {
  std::unique_ptr<AsyncCommit> commit;
  try {
    commit = std::make_unique<AsyncCommit>();
    commit->manifest = std::move(manifest);
    if (Status st = stage(commit->req, commit->manifest); !st.isOk()) return done(fail(st));
  } catch (const std::exception& e) {  // e.g. bad_alloc
    return done(fail(Status::internal(std::string("index: commit failed: ") + e.what())));
  }
  commit->done = std::move(done);
  CommitRequest& req = commit->req;
  // The callback owns the request; the queue moves it out of the request before calling
  // it, so the request dies with the callback, after it ran. (A lambda holding one
  // pointer: move_only_function keeps it without allocating, so this cannot throw.)
  req.on_done = [commit = std::move(commit)]() mutable {
    CommitRequest& r = commit->req;
    commit->done(r.status.isOk() ? Result<std::optional<VersionId>>(std::move(r.replaced))
                                 : fail(r.status));
  };
  queue_->submitAsync(req);
}

void RocksIndex::putObjectAsync(std::string_view bucket, std::string_view key,
                                Manifest manifest, Precondition pre, CommitDone done) {
  commitAsync(std::move(manifest), std::move(done), [&](CommitRequest& req, Manifest& m) {
    return stagePutObject(req, bucket, key, m, pre);
  });
}

namespace {

// kInvalidArgument unless `updated` is `expected` with its fragments elsewhere: only the
// drive table and the stripes' drive indices may differ (relocateFragments and
// relocatePartFragments: a repair's move). `Row`: Manifest or PartInfo.
template <typename Row>
Status checkOnlyLocationsDiffer(Row a, Row b) {
  bool same = a.stripes.size() == b.stripes.size();
  a.drives.clear();
  b.drives.clear();
  for (size_t i = 0; same && i < a.stripes.size(); ++i) {
    same = a.stripes[i].drives.size() == b.stripes[i].drives.size();
    a.stripes[i].drives.clear();
    b.stripes[i].drives.clear();
  }
  if (!same || a != b) {
    return Status::invalidArgument("index: a relocation may change only where fragments are");
  }
  return Status::ok();
}

}  // namespace

Status RocksIndex::relocateFragments(std::string_view bucket, std::string_view key,
                                     const Manifest& expected, const Manifest& updated) {
  if (Status st = validateManifest(updated); !st.isOk()) return st;
  GRANARY_RETURN_IF_ERROR(checkOnlyLocationsDiffer(expected, updated));
  return replaceManifest(bucket, key, expected, updated);
}

Status RocksIndex::updateObjectTags(std::string_view bucket, std::string_view key,
                                    const Manifest& expected, const Manifest& updated) {
  if (Status st = validateManifest(updated); !st.isOk()) return st;
  Manifest a = expected;
  a.tags = updated.tags;
  if (a != updated) {
    return Status::invalidArgument("index: a tag update may change only the tags");
  }
  return replaceManifest(bucket, key, expected, updated);
}

Status RocksIndex::replaceManifest(std::string_view bucket, std::string_view key,
                                   const Manifest& expected, const Manifest& updated) {
  CommitRequest req;
  req.kind = CommitRequest::Kind::kReplaceManifest;
  req.bucket = std::string(bucket);
  req.key = std::string(key);
  req.expected = &expected;
  stageManifest(req, updated);
  return submit(req);
}

namespace {

// Both reads of a lookup from one snapshot; with kBlockCacheTier a read that would need a
// file returns Incomplete.
std::optional<Result<Manifest>> readManifest(rocksdb::DB* db, const ColumnFamilies& cfs,
                                             std::string_view bucket, std::string_view key,
                                             rocksdb::ReadTier tier) {
  if (Status st = checkBucketName(bucket); !st.isOk()) return fail(st);
  Snapshot snap(db);
  rocksdb::ReadOptions options = snap.options();
  options.read_tier = tier;
  // Pinned values: decoded in place, not copied out of the memtable or block cache first.
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(options, cfs.objects, objectKey(bucket, key), &value);
  if (s.IsIncomplete()) return std::nullopt;
  if (s.IsNotFound()) return fail(Status::notFound("no such key"));
  if (!s.ok()) return fail(fromRocks(s, "index: reading object"));
  auto summary = decodeSummary(key, value.ToStringView());
  if (!summary) return fail(summary.error());
  value.Reset();
  s = db->Get(options, cfs.manifests, versionKey(summary->version), &value);
  if (s.IsIncomplete()) return std::nullopt;
  if (s.IsNotFound()) {
    return fail(Status::notFound("no manifest for version " + summary->version.toHex()));
  }
  if (!s.ok()) return fail(fromRocks(s, "index: reading manifest"));
  return decodeManifest(value.ToStringView());
}

}  // namespace

Result<std::vector<BlobRef>> RocksIndex::blobsInUse(const VersionId& version,
                                                    const std::vector<BlobRef>& among) {
  Snapshot snap(db_.get());  // one view: a row moving between the reads is seen once
  std::set<std::pair<std::string_view, BlobId>> asked, used;
  for (const BlobRef& b : among) asked.emplace(b.drive, b.id);
  auto add = [&](rocksdb::ColumnFamilyHandle* cf, const std::string& key, auto decode,
                 auto blobs) -> Status {
    std::string value;
    rocksdb::Status s = db_->Get(snap.options(), cf, key, &value);
    if (s.IsNotFound()) return Status::ok();
    if (!s.ok()) return fromRocks(s, "index: reading a row that uses blobs");
    auto row = decode(value);
    if (!row) return row.error();
    for (const BlobRef& b : blobs(*row)) {
      if (auto a = asked.find({b.drive, b.id}); a != asked.end()) used.insert(*a);
    }
    return Status::ok();
  };
  auto manifest = [&](const std::string& key) {
    return add(cfs_.manifests, key, [](std::string_view v) { return decodeManifest(v); },
               [](const Manifest& m) { return manifestBlobs(m); });
  };
  const std::string prefix = versionKey(version);
  GRANARY_RETURN_IF_ERROR_RESULT(manifest(prefix));
  // The rows the blobrefs column family says use blobs of `version` (codec.h): parts
  // ('p' + parts key) and manifests of completed uploads ('m' + manifest version).
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(snap.options(), cfs_.blobrefs));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    std::string_view rest = it->key().ToStringView().substr(prefix.size());
    if (rest.empty()) continue;
    const std::string row(rest.substr(1));
    if (rest[0] == kBlobRefManifestTag) {
      GRANARY_RETURN_IF_ERROR_RESULT(manifest(row));
    } else if (rest[0] == kBlobRefPartTag) {
      GRANARY_RETURN_IF_ERROR_RESULT(
          add(cfs_.parts, row, [](std::string_view v) { return decodePart(v); },
              [](const PartInfo& p) { return partBlobs(p); }));
    }
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: reading blob refs"));
  std::vector<BlobRef> out;
  for (const BlobRef& b : among) {
    if (used.contains({b.drive, b.id})) out.push_back(b);
  }
  return out;
}

Result<Manifest> RocksIndex::getObject(std::string_view bucket, std::string_view key) {
  auto r = readManifest(db_.get(), cfs_, bucket, key, rocksdb::kReadAllTier);
  if (!r) return fail(Status::internal("index: a full-tier read returned Incomplete"));
  return std::move(*r);
}

std::optional<Result<Manifest>> RocksIndex::getObjectFromMemory(std::string_view bucket,
                                                                std::string_view key) {
  return readManifest(db_.get(), cfs_, bucket, key, rocksdb::kBlockCacheTier);
}

Result<std::optional<VersionId>> RocksIndex::deleteObject(std::string_view bucket,
                                                          std::string_view key,
                                                          Precondition pre) {
  CommitRequest req;
  if (Status st = stageDeleteObject(req, bucket, key, pre); !st.isOk()) return fail(st);
  if (Status st = submit(req); !st.isOk()) return fail(st);
  return req.replaced;
}

void RocksIndex::deleteObjectAsync(std::string_view bucket, std::string_view key,
                                   Precondition pre, CommitDone done) {
  commitAsync(Manifest(), std::move(done), [&](CommitRequest& req, Manifest&) {
    return stageDeleteObject(req, bucket, key, pre);
  });
}

Result<ListResult> RocksIndex::listObjects(std::string_view bucket, const ListRequest& req) {
  if (Status st = checkBucketName(bucket); !st.isOk()) return fail(st);
  return listObjectsIn(db_.get(), cfs_.objects, bucket, req);
}

// ---- GC queue ------------------------------------------------------------------------

Result<std::vector<GcEntry>> RocksIndex::gcDue(int64_t enqueued_before_unix_nanos,
                                               size_t limit, std::string_view after) {
  std::vector<GcEntry> out;
  if (enqueued_before_unix_nanos < 0) return out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cfs_.gc));
  if (after.empty()) {
    it->SeekToFirst();
  } else {
    it->Seek(rocksdb::Slice(after.data(), after.size()));
    if (it->Valid() && it->key().ToStringView() == after) it->Next();
  }
  size_t page_blobs = 0;
  for (; it->Valid() && out.size() < limit; it->Next()) {
    // A row that does not decode is handed out with no blobs, for gcDone to drop: failing
    // the page would stop every GC pass at it for good. The versions it named stay
    // referenced by their blobrefs rows (the safe direction: space, not data).
    auto parts = parseGcKey(it->key().ToStringView());
    if (!parts) {
      const rocksdb::Slice key = it->key();
      log::warn("index: gc queue key {} does not parse; handing it out to be dropped",
                toHex({reinterpret_cast<const uint8_t*>(key.data()), key.size()}));
      out.push_back(GcEntry{it->key().ToString(), VersionId{}, 0, {}});
      continue;
    }
    if (parts->enqueued_unix_nanos > enqueued_before_unix_nanos) break;
    auto blobs = decodeGcBlobs(it->value().ToStringView());
    if (!blobs) {
      log::warn("index: gc queue entry of {}: {}; handing it out to be dropped",
                parts->version.toHex(), blobs.error().toString());
      blobs = std::vector<BlobRef>{};
    }
    if (!out.empty() && page_blobs + blobs->size() > gc_page_blobs_) break;  // next page
    page_blobs += blobs->size();
    out.push_back(GcEntry{it->key().ToString(), parts->version, parts->enqueued_unix_nanos,
                          std::move(*blobs)});
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: reading gc queue"));
  return out;
}

Status RocksIndex::gcDone(const std::vector<GcEntry>& entries) {
  if (entries.empty()) return Status::ok();
  CommitRequest req;
  req.kind = CommitRequest::Kind::kGcDone;
  for (const GcEntry& e : entries) req.gc_keys.push_back(e.queue_key);
  return submit(req);
}

Result<bool> RocksIndex::isBlobVersionReferenced(const VersionId& version) {
  // Older than this index: not its to call an orphan.
  if (version.createdUnixNanos() < created_unix_nanos_) return true;
  Snapshot snap(db_.get());
  return versionReferencedInDb(db_.get(), cfs_, snap.options(), version);
}

Result<bool> versionReferencedInDb(rocksdb::DB* db, const ColumnFamilies& cfs,
                                   const rocksdb::ReadOptions& options,
                                   const VersionId& version) {
  const std::string key = versionKey(version);
  std::string value;
  rocksdb::Status s = db->Get(options, cfs.manifests, key, &value);
  if (s.ok()) return true;
  if (!s.IsNotFound()) return fail(fromRocks(s, "index: reading manifest"));
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(options, cfs.blobrefs));
  it->Seek(key);
  if (it->Valid()) return it->key().starts_with(key);
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: reading blob refs"));
  return false;
}

Result<bool> RocksIndex::markVersionDead(const VersionId& version) {
  // Older than this index: not its to call an orphan (isBlobVersionReferenced).
  if (version.createdUnixNanos() < created_unix_nanos_) return false;
  CommitRequest req;
  req.kind = CommitRequest::Kind::kMarkVersionDead;
  req.dead_version = version;
  Status st = submit(req);
  if (st.isOk()) return true;
  if (st.code() == Status::Code::kPreconditionFailed) return false;
  return fail(st);
}

Result<bool> RocksIndex::holdLease(std::string_view name, std::string_view holder,
                                   std::chrono::milliseconds ttl) {
  constexpr size_t kMaxLeases = 1024;
  if (name.empty() || name.size() > 64 || holder.empty() || holder.size() > 256) {
    return fail(Status::invalidArgument("index: a lease's name (1-64 bytes) and holder "
                                        "(1-256 bytes) are required"));
  }
  if (ttl < std::chrono::milliseconds(0) || ttl > std::chrono::hours(1)) {
    return fail(Status::invalidArgument("index: a lease lasts 0 ms to an hour"));
  }
  // The monotonic clock: a wall clock set back would stretch a dead holder's lease (no
  // background pass for as long), one set forward would cut a live holder's short.
  const int64_t now = clock_.monotonicNanos();
  std::lock_guard lock(leases_mu_);
  auto it = leases_.find(name);
  const bool others = it != leases_.end() && it->second.holder != holder;
  if (ttl.count() == 0) {  // given up
    if (it != leases_.end() && !others) leases_.erase(it);
    return false;
  }
  if (others && it->second.expires_nanos > now) return false;
  if (it == leases_.end()) {
    if (leases_.size() >= kMaxLeases) {
      std::erase_if(leases_, [now](const auto& l) { return l.second.expires_nanos <= now; });
    }
    if (leases_.size() >= kMaxLeases) {
      return fail(Status::invalidArgument("index: too many leases"));
    }
    it = leases_.emplace(std::string(name), Lease{}).first;
  }
  it->second.holder = std::string(holder);
  it->second.expires_nanos =
      now + std::chrono::duration_cast<std::chrono::nanoseconds>(ttl).count();
  return true;
}

// ---- multipart uploads ---------------------------------------------------------------

Status RocksIndex::createUpload(const MultipartUpload& upload,
                                int64_t bucket_created_unix_nanos) {
  GRANARY_RETURN_IF_ERROR(checkBucketName(upload.bucket));
  if (upload.key.empty()) return Status::invalidArgument("index: empty object key");
  if (upload.key.find('\0') != std::string::npos) {
    return Status::invalidArgument("index: object key contains NUL");
  }
  GRANARY_RETURN_IF_ERROR(checkUploadId(upload.upload_id));
  CommitRequest req;
  req.kind = CommitRequest::Kind::kCreateUpload;
  req.bucket = upload.bucket;
  req.key = upload.key;
  req.upload_id = upload.upload_id;
  req.upload_value = encodeUpload(upload);
  req.pre.bucket_created_unix_nanos = bucket_created_unix_nanos;
  return submit(req);
}

Result<MultipartUpload> RocksIndex::getUpload(std::string_view bucket, std::string_view key,
                                              std::string_view upload_id) {
  if (Status st = checkBucketName(bucket); !st.isOk()) return fail(st);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.uploads,
                               uploadKey(bucket, key, upload_id), &value);
  if (s.IsNotFound()) return fail(Status::notFound("no upload " + std::string(upload_id)));
  if (!s.ok()) return fail(fromRocks(s, "index: reading upload"));
  return decodeUpload(value);
}

Result<std::optional<VersionId>> RocksIndex::putPart(std::string_view bucket,
                                                     std::string_view key,
                                                     std::string_view upload_id,
                                                     const PartInfo& part) {
  if (Status st = checkUploadId(upload_id); !st.isOk()) return fail(st);
  if (Status st = validatePart(part); !st.isOk()) return fail(st);
  CommitRequest req;
  req.kind = CommitRequest::Kind::kPutPart;
  req.bucket = std::string(bucket);
  req.key = std::string(key);
  req.upload_id = std::string(upload_id);
  req.part = &part;
  req.part_value = encodePart(part);
  if (Status st = submit(req); !st.isOk()) return fail(st);
  return req.replaced;
}

Status RocksIndex::relocatePartFragments(std::string_view bucket, std::string_view key,
                                         std::string_view upload_id, const PartInfo& expected,
                                         const PartInfo& updated) {
  if (Status st = checkUploadId(upload_id); !st.isOk()) return st;
  if (Status st = validatePart(updated); !st.isOk()) return st;
  GRANARY_RETURN_IF_ERROR(checkOnlyLocationsDiffer(expected, updated));
  CommitRequest req;
  req.kind = CommitRequest::Kind::kReplacePart;
  req.bucket = std::string(bucket);
  req.key = std::string(key);
  req.upload_id = std::string(upload_id);
  req.part = &updated;
  req.expected_part = &expected;
  req.part_value = encodePart(updated);
  return submit(req);
}

Result<std::vector<PartInfo>> RocksIndex::listParts(std::string_view bucket,
                                                    std::string_view key,
                                                    std::string_view upload_id,
                                                    uint32_t after_part, size_t max_parts) {
  if (Status st = checkBucketName(bucket); !st.isOk()) return fail(st);
  if (Status st = checkUploadId(upload_id); !st.isOk()) return fail(st);
  Snapshot snap(db_.get());
  std::string value;
  rocksdb::Status s =
      db_->Get(snap.options(), cfs_.uploads, uploadKey(bucket, key, upload_id), &value);
  if (s.IsNotFound()) return fail(Status::notFound("no upload " + std::string(upload_id)));
  if (!s.ok()) return fail(fromRocks(s, "index: reading upload"));
  std::vector<PartInfo> out;
  if (after_part == 0xFFFFFFFFu) return out;
  const std::string end = partsEnd(upload_id);
  rocksdb::ReadOptions options = snap.options();
  rocksdb::Slice upper(end);
  options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.parts));
  // Part numbers start at 1; partKey(id, 0) is the upload id's owner row.
  for (it->Seek(partKey(upload_id, std::max<uint32_t>(after_part + 1, 1)));
       it->Valid() && out.size() < max_parts; it->Next()) {
    auto part = decodePart(it->value().ToStringView());
    if (!part) return fail(part.error());
    out.push_back(std::move(*part));
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: reading parts"));
  return out;
}

Result<ListUploadsResult> RocksIndex::listUploads(std::string_view bucket,
                                                  const ListUploadsRequest& req) {
  if (Status st = checkBucketName(bucket); !st.isOk()) return fail(st);
  ListUploadsResult out;
  const std::string begin = bucketBegin(bucket) + req.prefix;
  std::string end = prefixSuccessor(begin);  // never empty: begin contains '/'
  // Start at the later of the prefix and the marker position; rows at or before the
  // marker (key_marker, upload_id_marker) are skipped below.
  std::string start = begin;
  if (!req.key_marker.empty()) {
    start = std::max(start, uploadKey(bucket, req.key_marker, req.upload_id_marker));
  }
  rocksdb::ReadOptions options;  // one iterator: a consistent view
  rocksdb::Slice upper(end);
  options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.uploads));
  for (it->Seek(start); it->Valid(); it->Next()) {
    auto parts = parseUploadKey(it->key().ToStringView());
    if (!parts) return fail(parts.error());
    if (!req.key_marker.empty()) {
      // S3: an empty upload id marker skips every upload of key_marker.
      if (parts->key < req.key_marker) continue;
      if (parts->key == req.key_marker &&
          (req.upload_id_marker.empty() || parts->upload_id <= req.upload_id_marker)) {
        continue;
      }
    }
    if (out.uploads.size() == req.max_uploads) {
      // max-uploads=0 asks for none, and says nothing of more (as max-keys=0): a
      // truncated answer would come without a marker to go on from.
      out.truncated = req.max_uploads > 0;
      break;
    }
    auto upload = decodeUpload(it->value().ToStringView());
    if (!upload) return fail(upload.error());
    out.uploads.push_back(std::move(*upload));
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: listing uploads"));
  return out;
}

Result<std::optional<VersionId>> RocksIndex::completeUpload(std::string_view bucket,
                                                            std::string_view key,
                                                            std::string_view upload_id,
                                                            const Manifest& manifest,
                                                            Precondition pre) {
  if (Status st = checkBucketName(bucket); !st.isOk()) return fail(st);
  if (key.empty()) return fail(Status::invalidArgument("index: empty object key"));
  if (Status st = checkUploadId(upload_id); !st.isOk()) return fail(st);
  if (Status st = validateManifest(manifest); !st.isOk()) return fail(st);
  CommitRequest req;
  req.kind = CommitRequest::Kind::kCompleteUpload;
  req.bucket = std::string(bucket);
  req.key = std::string(key);
  req.upload_id = std::string(upload_id);
  req.pre = pre;
  stageManifest(req, manifest);
  if (Status st = submit(req); !st.isOk()) return fail(st);
  return req.replaced;
}

Status RocksIndex::abortUpload(std::string_view bucket, std::string_view key,
                               std::string_view upload_id) {
  GRANARY_RETURN_IF_ERROR(checkUploadId(upload_id));
  CommitRequest req;
  req.kind = CommitRequest::Kind::kAbortUpload;
  req.bucket = std::string(bucket);
  req.key = std::string(key);
  req.upload_id = std::string(upload_id);
  return submit(req);
}

}  // namespace granary::index_kv

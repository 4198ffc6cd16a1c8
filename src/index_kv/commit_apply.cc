// Evaluation of one commit request against the DB plus the batch's overlay, and staging
// of its writes. Formats: docs/index-format.md.
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <span>

#include "granary/common/hex.h"
#include "granary/common/log.h"
#include "index_kv/codec.h"
#include "index_kv/commit_queue.h"
#include "index_kv/commit_staging.h"

namespace granary::index_kv {
void BatchBuilder::apply(CommitRequest& req) {
  req.replaced.reset();
  batch_.SetSavePoint();
  dead_added_.clear();
  // A bucket name with '/' would address another bucket's keys (object and upload keys
  // are "bucket/key..."): refused whatever the request (users and GC name no bucket).
  Status st = req.bucket.empty() ? Status::ok() : checkBucketName(req.bucket);
  try {
    if (st.isOk()) st = applyKind(req);
  } catch (...) {
    // Undone before anything that may fail again (out of memory, even the failure's
    // message may not be made): a request failed must leave nothing staged, or half of
    // it (an old version retired, the new one not put) would be written with the batch.
    // commitBatch fails this request alone.
    rollBack(req);
    throw;
  }
  if (st.isOk()) {
    (void)batch_.PopSavePoint();
  } else {
    rollBack(req);
  }
  req.status = std::move(st);
}

void BatchBuilder::rollBack(CommitRequest& req) {
  (void)batch_.RollbackToSavePoint();
  for (const VersionId& set : dead_added_) dead_sets_.erase(set);
  req.replaced.reset();
}

Status BatchBuilder::applyKind(CommitRequest& req) {
  switch (req.kind) {
    case CommitRequest::Kind::kCreateBucket: return createBucket(req);
    case CommitRequest::Kind::kUpdateBucket: return updateBucket(req);
    case CommitRequest::Kind::kDeleteBucket: return deleteBucket(req);
    case CommitRequest::Kind::kPutObject: return putObject(req);
    case CommitRequest::Kind::kDeleteObject: return deleteObject(req);
    case CommitRequest::Kind::kGcDone: return gcDone(req);
    case CommitRequest::Kind::kCreateUpload: return createUpload(req);
    case CommitRequest::Kind::kPutPart: return putPart(req);
    case CommitRequest::Kind::kCompleteUpload: return completeUpload(req);
    case CommitRequest::Kind::kAbortUpload: return abortUpload(req);
    case CommitRequest::Kind::kAttachRecords: return attachRecords(req);
    case CommitRequest::Kind::kAbandonRecords: return abandonRecords(req);
    case CommitRequest::Kind::kRecordGcDone: return recordGcDone(req);
    case CommitRequest::Kind::kCreateUser: return createUser(req);
    case CommitRequest::Kind::kDeleteUser: return deleteUser(req);
    case CommitRequest::Kind::kReplaceManifest: return replaceManifest(req);
    case CommitRequest::Kind::kMarkVersionDead: return markVersionDead(req);
    case CommitRequest::Kind::kReplacePart: return replacePart(req);
  }
  return Status::internal("index: unknown commit request kind");
}

// ---- overlay-aware reads -------------------------------------------------------------

Result<std::optional<std::string>> BatchBuilder::bucketValue(const std::string& bucket) {
  if (auto it = buckets_.find(bucket); it != buckets_.end()) return it->second;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.buckets, bucket, &value);
  if (!s.ok() && !s.IsNotFound()) return fail(fromRocks(s, "index: reading bucket"));
  // Kept for the rest of the batch: only this thread writes buckets, so the row cannot
  // change under it, and a batch of PUTs into one bucket reads it once.
  auto row = s.IsNotFound() ? std::optional<std::string>() : std::optional(std::move(value));
  buckets_.emplace(bucket, row);
  return row;
}

Result<bool> BatchBuilder::bucketExists(const std::string& bucket) {
  auto value = bucketValue(bucket);
  if (!value) return fail(value.error());
  return value->has_value();
}

Result<bool> BatchBuilder::bucketHasObjects(const std::string& bucket) {
  const std::string begin = bucketBegin(bucket);
  const std::string end = bucketEnd(bucket);
  for (auto it = objects_.lower_bound(begin); it != objects_.end() && it->first < end; ++it) {
    if (it->second.has_value()) return true;
  }
  rocksdb::ReadOptions options;
  rocksdb::Slice upper(end);
  options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.objects));
  // Keys deleted earlier in this batch are still in the DB: skip them (at most one per
  // request in the batch).
  for (it->Seek(begin); it->Valid(); it->Next()) {
    auto o = objects_.find(it->key().ToString());
    if (o == objects_.end() || o->second.has_value()) return true;
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: scanning bucket"));
  return false;
}

Result<std::optional<VersionId>> BatchBuilder::currentVersion(const std::string& object_key) {
  if (auto it = objects_.find(object_key); it != objects_.end()) return it->second;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.objects, object_key, &value);
  if (s.IsNotFound()) return std::optional<VersionId>();
  if (!s.ok()) return fail(fromRocks(s, "index: reading object"));
  auto summary = decodeSummary(object_key, value);
  if (!summary) return fail(summary.error());
  if (!summary->names_blobs) blobless_[summary->version] = summary->record_set;
  return std::optional<VersionId>(summary->version);
}

Result<std::optional<Manifest>> BatchBuilder::loadManifest(const VersionId& version) {
  if (auto it = manifests_.find(version); it != manifests_.end()) {
    return std::optional<Manifest>(*it->second);
  }
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.manifests, versionKey(version),
                               &value);
  if (s.IsNotFound()) return std::optional<Manifest>();
  if (!s.ok()) return fail(fromRocks(s, "index: reading manifest"));
  auto m = decodeManifest(value);
  if (!m) return fail(m.error());
  return std::optional<Manifest>(std::move(*m));
}

// Enqueue time is the clock's now; should that key be taken (same nanosecond, same
// version: a version rewritten in place twice), probe the following nanoseconds.
Result<std::string> BatchBuilder::freeGcKey(const VersionId& version) {
  int64_t t = clock_.nowUnixNanos();
  for (int attempt = 0; attempt < 1000; ++attempt, ++t) {
    std::string key = gcKey(t, version);
    if (gc_entries_.contains(key)) continue;
    if (gc_deleted_.contains(key)) return key;
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.gc, key, &value);
    if (s.IsNotFound()) return key;
    if (!s.ok()) return fail(fromRocks(s, "index: reading gc queue"));
  }
  return fail(Status::internal("index: no free gc queue key"));
}

// ---- staging -------------------------------------------------------------------------

Result<std::optional<std::string>> BatchBuilder::retire(const VersionId& old_version,
                                                        const Manifest* keep) {
  GRANARY_STAGE_OR_FAIL(batch_.Delete(cfs_.manifests, versionKey(old_version)));
  // The manifest is read only to find blobs to reclaim. A version whose summary, read in
  // this batch, says it names none (an inline object: most overwrites of small objects),
  // and whose manifest this batch has not rewritten, is retired from its summary alone.
  std::optional<Manifest> loaded;
  VersionId set;
  if (auto it = blobless_.find(old_version);
      it != blobless_.end() && !manifests_.contains(old_version)) {
    set = it->second;
  } else {
    auto old = loadManifest(old_version);
    if (!old && old.error().isCorruption()) {
      // An unreadable manifest must not make its key impossible to delete or overwrite
      // for ever: the version goes without it. Its own blobs become orphans (the sweep
      // takes them); blob versions it borrowed stay referenced by its blob-ref rows.
      log::error("index: retiring object version {} whose manifest is unreadable ({}); "
                 "its blobs are left to the orphan sweep",
                 old_version.toHex(), old.error().toString());
      return std::optional<std::string>();
    }
    if (!old) return fail(old.error());
    if (!old->has_value()) {
      // An object row without its manifest: nothing to reclaim. Should not happen.
      log::warn("index: object version {} has no manifest row", old_version.toHex());
      return std::optional<std::string>();
    }
    loaded = std::move(*old);
    set = loaded->records.set;
  }
  // The old version's record rows become invisible with this commit (the new summary no
  // longer names their set); mark the set dead so its rows are removed.
  if (!set.isZero() && (keep == nullptr || keep->records.set != set)) {
    if (Status st = markRecordSetDead(set); !st.isOk()) return fail(st);
  }
  if (!loaded) return std::optional<std::string>();
  const Manifest& m = *loaded;
  for (const VersionId& bv : foreignBlobVersions(m)) {
    GRANARY_STAGE_OR_FAIL(batch_.Delete(cfs_.blobrefs, blobRefManifestKey(bv, m.version)));
  }
  std::vector<BlobRef> blobs = manifestBlobs(m);
  if (keep != nullptr && !blobs.empty()) {
    // A rewrite that still uses some of the same blobs (same-version rewrite after a
    // rebalance, metadata-only copy) must not reclaim them.
    blobs = blobsNotIn(std::move(blobs), manifestBlobs(*keep));
  }
  return enqueueGc(m.version, std::move(blobs));
}

Result<std::optional<std::string>> BatchBuilder::enqueueGc(const VersionId& version,
                                                           std::vector<BlobRef> blobs) {
  std::optional<std::string> first;
  // Entries of at most gc_entry_blobs_: gcDue hands an entry out whole, and one of a
  // 5 TiB object (some 8 million blobs) would be over the internal API's answer limit,
  // stopping every GC pass at it.
  for (size_t begin = 0; begin < blobs.size(); begin += gc_entry_blobs_) {
    const std::span<const BlobRef> slice =
        std::span(blobs).subspan(begin, std::min(gc_entry_blobs_, blobs.size() - begin));
    auto key = freeGcKey(version);
    if (!key) return fail(key.error());
    std::vector<VersionId> versions;
    for (const BlobRef& b : slice) versions.push_back(b.id.version);
    std::sort(versions.begin(), versions.end());
    versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
    GRANARY_STAGE_OR_FAIL(batch_.Put(cfs_.gc, *key, encodeGcBlobs(slice)));
    for (const VersionId& v : versions) {
      GRANARY_STAGE_OR_FAIL(batch_.Put(cfs_.blobrefs, blobRefGcKey(v, *key), rocksdb::Slice()));
    }
    gc_entries_[*key] = std::move(versions);
    gc_deleted_.erase(*key);
    if (!first) first = std::move(*key);
  }
  return first;
}

Status BatchBuilder::createBucket(CommitRequest& req) {
  GRANARY_RETURN_IF_ERROR(checkBucketName(req.bucket));
  auto exists = bucketExists(req.bucket);
  if (!exists) return exists.error();
  if (*exists) return Status::alreadyExists("bucket " + req.bucket + " exists");
  GRANARY_STAGE(batch_.Put(cfs_.buckets, req.bucket, req.bucket_value));
  buckets_[req.bucket] = req.bucket_value;
  bucket_created_.erase(req.bucket);
  return Status::ok();
}

Status BatchBuilder::updateBucket(CommitRequest& req) {
  // One read, through this batch's own writes: a bucket created earlier in the batch is
  // updatable.
  auto value = bucketValue(req.bucket);
  if (!value) return value.error();
  if (!value->has_value()) return Status::notFound("no bucket " + req.bucket);
  auto current = decodeBucket(**value);
  if (!current) return current.error();
  if (req.expected_bucket && !(*current == *req.expected_bucket)) {
    return Status::preconditionFailed("bucket " + req.bucket + " was changed meanwhile");
  }
  BucketInfo updated = *req.bucket_info;
  updated.owner = current->owner;
  updated.created_unix_nanos = current->created_unix_nanos;
  std::string encoded = encodeBucket(updated);
  GRANARY_STAGE(batch_.Put(cfs_.buckets, req.bucket, encoded));
  buckets_[req.bucket] = std::move(encoded);
  return Status::ok();
}

// ---- users ---------------------------------------------------------------------------

Result<std::map<std::string, UserInfo>> BatchBuilder::loadUsers() {
  auto rows = decodeAll<UserInfo>(db_, cfs_.users, decodeUser, "users");
  if (!rows) return fail(rows.error());
  std::map<std::string, UserInfo> users;
  for (UserInfo& u : *rows) users.emplace(u.name, std::move(u));
  for (const auto& [name, row] : users_) {
    if (row) {
      users[name] = *row;
    } else {
      users.erase(name);
    }
  }
  return users;
}

Status BatchBuilder::createUser(CommitRequest& req) {
  // Users are few and rarely written: a scan keeps both the name and the access key unique.
  auto users = loadUsers();
  if (!users) return users.error();
  if (users->contains(req.key)) return Status::alreadyExists("user " + req.key + " exists");
  for (const auto& [name, user] : *users) {
    if (user.access_key == req.user->access_key) {
      return Status::alreadyExists("access key already belongs to user " + name);
    }
  }
  GRANARY_STAGE(batch_.Put(cfs_.users, req.key, encodeUser(*req.user)));
  users_[req.key] = *req.user;
  return Status::ok();
}

Status BatchBuilder::deleteUser(CommitRequest& req) {
  auto users = loadUsers();
  if (!users) return users.error();
  if (!users->contains(req.key)) return Status::notFound("no user " + req.key);
  GRANARY_STAGE(batch_.Delete(cfs_.users, req.key));
  users_[req.key] = std::nullopt;
  return Status::ok();
}

Status BatchBuilder::deleteBucket(CommitRequest& req) {
  GRANARY_RETURN_IF_ERROR(requireBucket(req.bucket, req.pre.bucket_created_unix_nanos));
  auto has_objects = bucketHasObjects(req.bucket);
  if (!has_objects) return has_objects.error();
  if (*has_objects) return Status::notEmpty("bucket " + req.bucket + " is not empty");
  auto has_uploads = bucketHasUploads(req.bucket);
  if (!has_uploads) return has_uploads.error();
  if (*has_uploads) {
    return Status::notEmpty("bucket " + req.bucket + " has multipart uploads in progress");
  }
  GRANARY_STAGE(batch_.Delete(cfs_.buckets, req.bucket));
  buckets_[req.bucket] = std::nullopt;
  bucket_created_.erase(req.bucket);
  return Status::ok();
}

Status BatchBuilder::putObject(CommitRequest& req) {
  // Stripes name few distinct blob versions (one, but for a copy of a completed upload).
  std::vector<VersionId> blob_versions;
  for (const StripeLayout& s : req.manifest->stripes) blob_versions.push_back(s.blob_version);
  std::sort(blob_versions.begin(), blob_versions.end());
  blob_versions.erase(std::unique(blob_versions.begin(), blob_versions.end()),
                      blob_versions.end());
  for (const VersionId& v : blob_versions) GRANARY_RETURN_IF_ERROR(requireNotDead(v));
  const std::string okey = objectKey(req.bucket, req.key);
  auto current = checkPut(req, okey);
  if (!current) return current.error();
  return stagePut(req, okey, *current);
}

Result<std::optional<VersionId>> BatchBuilder::checkPut(CommitRequest& req,
                                                        const std::string& okey) {
  Status bucket = requireBucket(req.bucket, req.pre.bucket_created_unix_nanos);
  if (!bucket.isOk()) return fail(bucket);
  auto current = currentVersion(okey);
  if (!current) return current;
  switch (req.pre.kind) {
    case Precondition::Kind::kNone: break;
    case Precondition::Kind::kMustNotExist:
      if (current->has_value()) return fail(Status::preconditionFailed("key exists"));
      break;
    case Precondition::Kind::kMustMatch: {
      Status st = checkMatch(*current, req.pre);
      if (!st.isOk()) return fail(st);
      break;
    }
  }
  return current;
}

Status BatchBuilder::requireBucket(const std::string& bucket, int64_t created_unix_nanos) {
  auto value = bucketValue(bucket);
  if (!value) return value.error();
  if (!value->has_value()) return Status::notFound("no bucket " + bucket);
  if (created_unix_nanos == 0) return Status::ok();
  // Decoded once per bucket and batch: a batch of PUTs into one bucket (the committer is
  // serial) must not decode its settings, policy included, for each.
  auto cached = bucket_created_.find(bucket);
  if (cached == bucket_created_.end()) {
    auto info = decodeBucket(**value);
    if (!info) return info.error();
    cached = bucket_created_.emplace(bucket, info->created_unix_nanos).first;
  }
  if (cached->second != created_unix_nanos) {
    return Status::notFound("bucket " + bucket + " was deleted and created again");
  }
  return Status::ok();
}

Status BatchBuilder::checkMatch(const std::optional<VersionId>& current,
                                const Precondition& pre) {
  if (!current.has_value() || *current != pre.version) {
    return Status::preconditionFailed("key's current version does not match");
  }
  if (pre.tags.empty()) return Status::ok();
  auto manifest = loadManifest(*current);
  if (!manifest) return manifest.error();
  if (!manifest->has_value()) return Status::preconditionFailed("key's manifest is gone");
  for (const auto& [name, value] : pre.tags) {
    auto it = (*manifest)->tags.find(name);
    if (it == (*manifest)->tags.end() || it->second != value) {
      return Status::preconditionFailed("key's tags do not match");
    }
  }
  return Status::ok();
}

Status BatchBuilder::stagePut(CommitRequest& req, const std::string& okey,
                              const std::optional<VersionId>& current) {
  const Manifest& m = *req.manifest;
  if (!m.records.set.isZero()) {
    // A record set swept as an orphan (or abandoned) must not be published.
    auto alive = recordSetAlive(m.records.set);
    if (!alive) return alive.error();
    if (!*alive) return Status::preconditionFailed("index: the object's record set is gone");
  }
  // Old rows are removed before the new ones are written, so a same-version rewrite
  // ends with the new rows in place. retire() never reclaims a blob `m` uses.
  if (current.has_value()) {
    auto retired = retire(*current, &m);
    if (!retired) return retired.error();
  }
  GRANARY_STAGE(batch_.Put(cfs_.objects, okey, req.summary_value));
  GRANARY_STAGE(batch_.Put(cfs_.manifests, versionKey(m.version), req.manifest_value));
  for (const VersionId& bv : foreignBlobVersions(m)) {
    GRANARY_STAGE(batch_.Put(cfs_.blobrefs, blobRefManifestKey(bv, m.version), rocksdb::Slice()));
  }
  if (current.has_value() && *current != m.version) manifests_.erase(*current);
  manifests_[m.version] = &m;
  objects_[okey] = m.version;
  req.replaced = current;
  return Status::ok();
}

Status BatchBuilder::replaceManifest(CommitRequest& req) {
  GRANARY_RETURN_IF_ERROR(requireBucket(req.bucket, req.pre.bucket_created_unix_nanos));
  const std::string okey = objectKey(req.bucket, req.key);
  auto current = currentVersion(okey);
  if (!current) return current.error();
  if (!current->has_value()) return Status::notFound("no such key");
  if (**current != req.expected->version) {
    return Status::preconditionFailed("the key has another version now");
  }
  auto manifest = loadManifest(**current);
  if (!manifest) return manifest.error();
  if (!manifest->has_value() || **manifest != *req.expected) {
    return Status::preconditionFailed("the manifest changed since it was read");
  }
  return stagePut(req, okey, *current);
}

Status BatchBuilder::deleteObject(CommitRequest& req) {
  if (req.pre.kind == Precondition::Kind::kMustNotExist) {
    return Status::invalidArgument("index: delete cannot require the key to be absent");
  }
  GRANARY_RETURN_IF_ERROR(requireBucket(req.bucket, req.pre.bucket_created_unix_nanos));
  const std::string okey = objectKey(req.bucket, req.key);
  auto current = currentVersion(okey);
  if (!current) return current.error();
  if (req.pre.kind == Precondition::Kind::kMustMatch) {
    Status st = checkMatch(*current, req.pre);
    if (!st.isOk()) return st;
  }
  if (!current->has_value()) return Status::ok();  // S3: deleting a missing key succeeds
  auto retired = retire(**current, nullptr);
  if (!retired) return retired.error();
  GRANARY_STAGE(batch_.Delete(cfs_.objects, okey));
  ++object_deletes_;
  manifests_.erase(**current);
  objects_[okey] = std::nullopt;
  req.replaced = *current;
  return Status::ok();
}

Status BatchBuilder::gcDone(CommitRequest& req) {
  std::vector<std::string> removed;
  for (const std::string& key : req.gc_keys) {
    if (gc_deleted_.contains(key)) continue;
    std::vector<VersionId> versions;
    if (!parseGcKey(key)) {
      // A row whose key does not parse (gcDue hands such rows out): dropped, naming no
      // version it could release.
      log::warn("index: removing a gc queue row whose key does not parse");
    } else if (auto it = gc_entries_.find(key); it != gc_entries_.end()) {
      versions = it->second;
    } else {
      std::string value;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.gc, key, &value);
      if (s.IsNotFound()) continue;  // already done: gcDone is idempotent
      if (!s.ok()) return fromRocks(s, "index: reading gc queue");
      auto blobs = decodeGcBlobs(value);
      if (!blobs) {
        // Drop the bad row anyway; its blobrefs rows (if any) stay and keep those
        // versions "referenced": the safe direction.
        log::warn("index: removing unreadable gc entry: {}", blobs.error().toString());
      } else {
        for (const BlobRef& b : *blobs) versions.push_back(b.id.version);
        std::sort(versions.begin(), versions.end());
        versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
      }
    }
    for (const VersionId& v : versions) {
      GRANARY_STAGE(batch_.Delete(cfs_.blobrefs, blobRefGcKey(v, key)));
    }
    GRANARY_STAGE(batch_.Delete(cfs_.gc, key));
    removed.push_back(key);
  }
  for (const std::string& key : removed) {
    gc_entries_.erase(key);
    gc_deleted_.insert(key);
  }
  return Status::ok();
}

// ---- the orphan sweep's fence ---------------------------------------------------------

Status BatchBuilder::requireNotDead(const VersionId& version) {
  bool dead = dead_versions_.contains(version);
  if (!dead) {
    std::string value;
    rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), cfs_.dead_versions, versionKey(version), &value);
    if (!s.ok() && !s.IsNotFound()) return fromRocks(s, "index: reading dead versions");
    dead = s.ok();
  }
  if (!dead) return Status::ok();
  return Status(Status::Code::kTimeout,
                "index: blob version " + version.toHex() +
                    " was swept as an orphan: the write took longer than the orphan grace");
}

Result<bool> BatchBuilder::versionReferenced(const VersionId& version) {
  auto in_db = versionReferencedInDb(db_, cfs_, rocksdb::ReadOptions(), version);
  if (!in_db || *in_db) return in_db;
  const std::string key = versionKey(version);
  // This batch's writes: any manifest or blobrefs row of the version, put or deleted. A
  // claim losing to a deletion is only deferred (the next sweep asks again); one winning
  // over a staged reference would lose data.
  struct Finder : rocksdb::WriteBatch::Handler {
    uint32_t manifests = 0;
    uint32_t blobrefs = 0;
    std::string_view prefix;
    bool found = false;
    void note(uint32_t cf, const rocksdb::Slice& k) {
      if ((cf == manifests || cf == blobrefs) && k.starts_with(prefix)) found = true;
    }
    rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& k, const rocksdb::Slice&) override {
      note(cf, k);
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
      note(cf, k);
      return rocksdb::Status::OK();
    }
    rocksdb::Status SingleDeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
      note(cf, k);
      return rocksdb::Status::OK();
    }
  } finder;
  finder.manifests = cfs_.manifests->GetID();
  finder.blobrefs = cfs_.blobrefs->GetID();
  finder.prefix = key;
  // Another kind of write (none is staged today) fails the walk: counted as a reference.
  if (!batch_.Iterate(&finder).ok()) return true;
  return finder.found;
}

Status BatchBuilder::markVersionDead(CommitRequest& req) {
  const VersionId& v = req.dead_version;
  if (dead_versions_.contains(v)) return Status::ok();
  const std::string key = versionKey(v);
  {
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.dead_versions, key, &value);
    if (s.ok()) return Status::ok();  // marked by an earlier sweep
    if (!s.IsNotFound()) return fromRocks(s, "index: reading dead versions");
  }
  auto referenced = versionReferenced(v);
  if (!referenced) return referenced.error();
  if (*referenced) return Status::preconditionFailed("index: blob version is referenced");
  const int64_t now = clock_.nowUnixNanos();
  const int64_t forget_before =
      now - std::chrono::duration_cast<std::chrono::nanoseconds>(kDeadVersionRetention).count();
  // Forget a few of the oldest marks with each new one: no PUT of theirs can commit now.
  VersionId cutoff;
  putBe64(cutoff.bytes.data(), static_cast<uint64_t>(std::max<int64_t>(forget_before, 0)));
  const std::string upper = versionKey(cutoff);
  rocksdb::ReadOptions options;
  rocksdb::Slice upper_slice(upper);
  options.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.dead_versions));
  int forgotten = 0;
  for (it->SeekToFirst(); it->Valid() && forgotten < 64; it->Next(), ++forgotten) {
    GRANARY_STAGE(batch_.Delete(cfs_.dead_versions, it->key()));
  }
  if (!it->status().ok()) return fromRocks(it->status(), "index: reading dead versions");
  // Older than the retention itself: no commit of it can come, no mark is needed.
  if (v.createdUnixNanos() < forget_before) return Status::ok();
  uint8_t when[8];
  putBe64(when, static_cast<uint64_t>(now));
  GRANARY_STAGE(batch_.Put(cfs_.dead_versions, key,
                           rocksdb::Slice(reinterpret_cast<const char*>(when), 8)));
  dead_versions_.insert(v);
  return Status::ok();
}

}  // namespace granary::index_kv

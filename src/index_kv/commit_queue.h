// The commit queue: every index mutation goes through one committer thread, which merges
// the requests pending at that moment (up to max_batch) into one WAL-synced WriteBatch.
// Each request is evaluated in order against the DB plus the effects of the requests
// before it in the same batch (BatchBuilder's overlay), so preconditions are exact and a
// failed request fails alone. See docs/index-format.md, "Commit queue".
//
// Thread safety: submit() and submitAsync() may be called from any number of threads;
// submit() blocks until the request's batch is durable (or failed), submitAsync() returns
// at once and the request's `on_done` runs on the committer thread then. The destructor
// drains pending requests, then joins the committer; no submit may start after
// destruction begins.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "granary/common/clock.h"
#include "granary/index_kv/index.h"
#include "index_kv/column_families.h"

namespace granary::index_kv {

// How long a dead-version mark (Index::markVersionDead) is kept, counted from the
// version's creation: far longer than any PUT may take (its deadline is half the orphan
// grace) plus its commit's time in a queue.
inline constexpr std::chrono::hours kDeadVersionRetention{7 * 24};

struct CommitRequest {
  enum class Kind {
    kCreateBucket,
    kUpdateBucket,
    kDeleteBucket,
    kPutObject,
    kDeleteObject,
    kGcDone,
    kCreateUpload,
    kPutPart,
    kCompleteUpload,
    kAbortUpload,
    kAttachRecords,
    kAbandonRecords,
    kRecordGcDone,
    kCreateUser,
    kDeleteUser,
    kReplaceManifest,  // relocateFragments, updateObjectTags: same version, new manifest
    kMarkVersionDead,  // the orphan sweep's fence (Index::markVersionDead)
    kReplacePart,      // relocatePartFragments: same part, fragments elsewhere
  };
  Kind kind = Kind::kCreateBucket;
  std::string bucket;     // every kind but kGcDone
  std::string key;        // kPutObject, kDeleteObject and the upload kinds
  std::string upload_id;  // the upload kinds
  // kPutObject, kDeleteObject, kCompleteUpload; its bucket_created_unix_nanos also
  // kDeleteBucket and kCreateUpload.
  Precondition pre;
  // kCreateBucket, kUpdateBucket: the encoded BucketInfo (kUpdateBucket: `bucket_info`,
  // applied only while the stored bucket equals `expected_bucket`).
  std::optional<BucketInfo> bucket_info;
  std::optional<BucketInfo> expected_bucket;
  // kCreateBucket: the encoded BucketInfo. kPutObject: the encoded summary and manifest
  // (encoded by the caller's thread so the committer only does I/O).
  std::string bucket_value;
  std::string summary_value;
  std::string manifest_value;
  // kPutObject, kCompleteUpload, kReplaceManifest; the caller's, alive until completion.
  const Manifest* manifest = nullptr;
  const Manifest* expected = nullptr;  // kReplaceManifest: the manifest it must still be
  // kCompleteUpload: `manifest` with the locations the part rows have now, when a repair
  // moved a fragment after the caller listed the parts (`manifest` then points here).
  std::optional<Manifest> relocated;
  std::string upload_value;            // kCreateUpload: the encoded MultipartUpload
  const PartInfo* part = nullptr;      // kPutPart, kReplacePart; the caller's, alive until done
  std::string part_value;              // kPutPart, kReplacePart: the encoded PartInfo
  const PartInfo* expected_part = nullptr;  // kReplacePart: the row it must still be
  std::vector<std::string> gc_keys;    // kGcDone
  // kAttachRecords: the container version and the rows to publish; kAbandonRecords and
  // kRecordGcDone: record_info.set. kRecordGcDone: the record_gc value seen when the
  // removal started (a set re-marked dead since then is kept for another pass).
  VersionId container_version;
  RecordIndexInfo record_info;
  std::string record_gc_value;
  std::optional<UserInfo> user;  // kCreateUser (key: the user's name; kDeleteUser too)
  // kMarkVersionDead: the blob version to mark. Outcome kPreconditionFailed: referenced.
  VersionId dead_version;

  // Outcome, set by the committer before `done` is fulfilled.
  Status status;
  std::optional<VersionId> replaced;
  RecordIndexInfo record_result;  // kAttachRecords: the container's record index after it
  std::string record_lost;        // kAttachRecords: why the set could not be attached
  // Called once with the outcome set, on the committer thread (on the calling thread if
  // the queue does not take the request, or on the destroying thread for a queue never
  // started); submit() sets it to wake its caller. It may own, and so free, the request:
  // the queue moves it out before calling it and touches the request no more. What it
  // throws is logged and dropped.
  std::move_only_function<void()> on_done;
};

// Evaluates the requests of one batch in order and stages their writes in one WriteBatch.
// Lives on the committer thread for one batch.
class BatchBuilder {
 public:
  // `gc_entry_blobs`: the most blobs one GC queue entry names (IndexOptions::gc_page_blobs).
  BatchBuilder(rocksdb::DB* db, const ColumnFamilies& cfs, const Clock& clock,
               size_t gc_entry_blobs)
      : db_(db), cfs_(cfs), clock_(clock), gc_entry_blobs_(std::max<size_t>(gc_entry_blobs, 1)) {}

  // Checks `req`'s preconditions and stages its writes; sets req.status and req.replaced.
  // A request that fails stages nothing and leaves the overlay untouched.
  void apply(CommitRequest& req);
  rocksdb::WriteBatch& batch() { return batch_; }
  // Object rows this batch deletes (each a tombstone listings walk until compacted).
  uint64_t objectDeletes() const { return object_deletes_; }

 private:
  // Undoes what apply() staged for `req` (its save point).
  void rollBack(CommitRequest& req);
  Status createBucket(CommitRequest& req);
  Status updateBucket(CommitRequest& req);
  Status deleteBucket(CommitRequest& req);
  Status putObject(CommitRequest& req);
  Status deleteObject(CommitRequest& req);
  Status gcDone(CommitRequest& req);
  Status createUpload(CommitRequest& req);
  Status putPart(CommitRequest& req);
  Status replacePart(CommitRequest& req);
  Status takeCurrentLocations(CommitRequest& req, const std::map<std::string, PartInfo>& parts);
  Status completeUpload(CommitRequest& req);
  Status abortUpload(CommitRequest& req);
  Status attachRecords(CommitRequest& req);
  Status abandonRecords(CommitRequest& req);
  Status recordGcDone(CommitRequest& req);
  Status createUser(CommitRequest& req);
  Status deleteUser(CommitRequest& req);
  Status replaceManifest(CommitRequest& req);
  Status markVersionDead(CommitRequest& req);
  // The one request's staging, by its kind.
  Status applyKind(CommitRequest& req);
  // Every user: the DB's rows with this batch's writes applied.
  Result<std::map<std::string, UserInfo>> loadUsers();
  // Stages "set is dead" (record_gc row) unless already staged in this batch.
  Status markRecordSetDead(const VersionId& set);
  // False if the set is dead, or has no record_sets row (never written or removed).
  Result<bool> recordSetAlive(const VersionId& set);
  // kTimeout if the orphan sweep marked blob version `version` dead (this batch included):
  // its fragments are being removed, so nothing may be committed that uses them.
  Status requireNotDead(const VersionId& version);
  // True if the DB (manifests row, blobrefs rows) or a write this batch has staged
  // references blob version `version`; a staged write is counted whatever it does.
  Result<bool> versionReferenced(const VersionId& version);

  // putObject in two steps, shared with completeUpload: checkPut reads (bucket exists,
  // precondition) and returns the key's current version; stagePut retires it and stages
  // the new rows, updating the overlay only once nothing can fail any more.
  Result<std::optional<VersionId>> checkPut(CommitRequest& req, const std::string& object_key);
  Status stagePut(CommitRequest& req, const std::string& object_key,
                  const std::optional<VersionId>& current);

  // A kMustMatch precondition against the key's current version: the version, then the
  // tags it requires (read from the manifest, this batch's writes included).
  Status checkMatch(const std::optional<VersionId>& current, const Precondition& pre);
  // kNotFound unless `bucket` exists (this batch's writes included) and, when
  // `created_unix_nanos` (Precondition::bucket_created_unix_nanos) is non-zero, is the one
  // created at that instant.
  Status requireBucket(const std::string& bucket, int64_t created_unix_nanos);

  Result<bool> bucketExists(const std::string& bucket);
  // The bucket's value (nullopt: no such bucket), this batch's writes included.
  Result<std::optional<std::string>> bucketValue(const std::string& bucket);
  Result<bool> bucketHasObjects(const std::string& bucket);
  Result<bool> bucketHasUploads(const std::string& bucket);
  Result<bool> uploadExists(const std::string& upload_key);
  Result<bool> uploadIdTaken(const std::string& upload_id);
  // The upload's parts (overlay applied), keyed by parts key, in part-number order.
  Result<std::map<std::string, PartInfo>> loadParts(const std::string& upload_id);
  Result<std::optional<PartInfo>> loadPart(const std::string& part_key);
  // Enqueues `blobs` (if any) on the GC queue as entries of at most gc_entry_blobs_ blobs,
  // each keyed by (now, version), with one blobrefs 'g' row per distinct blob version of
  // the entry. Returns the first gc key used, if any.
  Result<std::optional<std::string>> enqueueGc(const VersionId& version,
                                               std::vector<BlobRef> blobs);
  // Stages the removal of the given parts (rows and blobrefs 'p' rows) and enqueues each
  // part's blobs whose BlobId `keep` does not use.
  Status retireParts(const std::map<std::string, PartInfo>& parts, const Manifest* keep);
  Result<std::optional<VersionId>> currentVersion(const std::string& object_key);
  Result<std::optional<Manifest>> loadManifest(const VersionId& version);
  Result<std::string> freeGcKey(const VersionId& version);
  // Stages removal of the manifest `old` (manifest row, blobrefs rows) and enqueues its
  // blobs that `keep` does not reference on the GC queue. Returns the gc key used, if any.
  Result<std::optional<std::string>> retire(const VersionId& old_version, const Manifest* keep);

  rocksdb::DB* db_;
  ColumnFamilies cfs_;
  const Clock& clock_;
  const size_t gc_entry_blobs_;
  rocksdb::WriteBatch batch_;
  // Overlay: effects of the requests already staged in this batch.
  // name -> the bucket's value as this batch leaves it (nullopt: deleted or absent), also
  // for buckets only read
  std::map<std::string, std::optional<std::string>> buckets_;
  std::map<std::string, int64_t> bucket_created_;  // name -> creation time, as decoded
  std::map<std::string, std::optional<VersionId>> objects_;      // object key -> current
  std::map<VersionId, const Manifest*> manifests_;               // written in this batch
  std::map<std::string, std::vector<VersionId>> gc_entries_;     // gc key -> blob versions
  std::set<std::string> gc_deleted_;                             // gc keys deleted
  std::map<std::string, bool> uploads_;                          // upload key -> exists
  std::map<std::string, bool> upload_ids_;                       // upload id -> taken
  std::map<std::string, std::optional<PartInfo>> parts_;         // parts key -> row
  std::set<VersionId> dead_sets_;                                // record sets marked dead
  // Versions whose summary, read in this batch, says their manifest names no blobs ->
  // their record set: retire() needs no manifest read for them.
  std::map<VersionId, VersionId> blobless_;
  std::map<std::string, std::optional<UserInfo>> users_;         // name -> row (nullopt: gone)
  std::vector<VersionId> dead_added_;  // by the request being applied (undone on failure)
  std::set<VersionId> dead_versions_;  // blob versions marked dead in this batch
  std::vector<std::unique_ptr<Manifest>> owned_manifests_;       // rewritten in this batch
  uint64_t object_deletes_ = 0;
};

class CommitQueue {
 public:
  // `gc_entry_blobs`: as BatchBuilder's.
  CommitQueue(rocksdb::DB* db, const ColumnFamilies& cfs, const Clock& clock,
              size_t max_batch, size_t gc_entry_blobs);
  ~CommitQueue();
  CommitQueue(const CommitQueue&) = delete;
  CommitQueue& operator=(const CommitQueue&) = delete;

  // Starts the committer thread. kInternal if it cannot be created.
  Status start();
  // Enqueues `req` and blocks until it is durable or failed; the outcome is in `req`.
  void submit(CommitRequest& req);
  // Enqueues `req` and returns; req.on_done (set) runs once its outcome is in `req`. For
  // callers that must not block (an event loop): no thread waits for the group's sync.
  void submitAsync(CommitRequest& req);
  IndexCommitStats stats() const;

 private:
  void run();
  void commitBatch(const std::vector<CommitRequest*>& batch);
  void flushAfterBulkDeletes(uint64_t deletes);
  // Calls (and drops) req.on_done.
  static void finish(CommitRequest& req);

  rocksdb::DB* db_;
  ColumnFamilies cfs_;
  const Clock& clock_;
  size_t max_batch_;
  size_t gc_entry_blobs_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<CommitRequest*> pending_;
  bool stopping_ = false;
  std::thread thread_;

  const uint64_t opened_unix_nanos_;  // IndexCommitStats::opened_unix_nanos
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> failed_writes_{0};
  std::atomic<bool> failing_{false};
  // Object deletes written since the objects' memtable was last flushed for them (the
  // committer thread's alone).
  uint64_t deletes_unflushed_ = 0;
};

}  // namespace granary::index_kv

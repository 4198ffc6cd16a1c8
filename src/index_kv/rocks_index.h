// RocksIndex: the Index on one RocksDB (docs/index-format.md). Reads go straight to
// RocksDB from the calling thread; every mutation goes through the CommitQueue.
// Private header: tests include it for commitStats().
#pragma once

#include <rocksdb/db.h>

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "granary/index_kv/index.h"
#include "index_kv/column_families.h"
#include "index_kv/commit_queue.h"

namespace granary::index_kv {

class RocksIndex final : public Index {
 public:
  // Opens (creating if needed) the DB in options.dir and starts the committer.
  static Result<std::unique_ptr<RocksIndex>> open(const IndexOptions& options,
                                                  RocksResources& resources,
                                                  const Clock& clock);
  ~RocksIndex() override;

  Status createBucket(const BucketInfo& bucket) override;
  Result<BucketInfo> getBucket(std::string_view name) override;
  std::optional<Result<BucketInfo>> getBucketFromMemory(std::string_view name) override;
  Result<std::vector<BucketInfo>> listBuckets() override;
  Status updateBucket(const BucketInfo& bucket, const BucketInfo& expected) override;
  Status createUser(const UserInfo& user) override;
  Result<std::vector<UserInfo>> listUsers() override;
  Status deleteUser(std::string_view name) override;
  Status deleteBucket(std::string_view name, int64_t created_unix_nanos) override;

  Result<std::vector<BlobRef>> blobsInUse(const VersionId& version,
                                          const std::vector<BlobRef>& among) override;
  Status relocateFragments(std::string_view bucket, std::string_view key,
                           const Manifest& expected, const Manifest& updated) override;
  Status updateObjectTags(std::string_view bucket, std::string_view key,
                          const Manifest& expected, const Manifest& updated) override;
  Result<std::optional<VersionId>> putObject(std::string_view bucket, std::string_view key,
                                             const Manifest& manifest,
                                             Precondition pre) override;
  bool asyncCommits() const override { return true; }
  void putObjectAsync(std::string_view bucket, std::string_view key, Manifest manifest,
                      Precondition pre, CommitDone done) override;
  void deleteObjectAsync(std::string_view bucket, std::string_view key, Precondition pre,
                         CommitDone done) override;
  Result<Manifest> getObject(std::string_view bucket, std::string_view key) override;
  std::optional<Result<Manifest>> getObjectFromMemory(std::string_view bucket,
                                                      std::string_view key) override;
  Result<std::optional<VersionId>> deleteObject(std::string_view bucket, std::string_view key,
                                                Precondition pre) override;
  Result<ListResult> listObjects(std::string_view bucket, const ListRequest& req) override;

  Result<std::vector<GcEntry>> gcDue(int64_t enqueued_before_unix_nanos, size_t limit,
                                     std::string_view after = {}) override;
  Status gcDone(const std::vector<GcEntry>& entries) override;
  Result<bool> isBlobVersionReferenced(const VersionId& version) override;
  Result<bool> markVersionDead(const VersionId& version) override;

  Status createUpload(const MultipartUpload& upload, int64_t bucket_created_unix_nanos) override;
  Result<MultipartUpload> getUpload(std::string_view bucket, std::string_view key,
                                    std::string_view upload_id) override;
  Result<std::optional<VersionId>> putPart(std::string_view bucket, std::string_view key,
                                           std::string_view upload_id,
                                           const PartInfo& part) override;
  Status relocatePartFragments(std::string_view bucket, std::string_view key,
                               std::string_view upload_id, const PartInfo& expected,
                               const PartInfo& updated) override;
  Result<std::vector<PartInfo>> listParts(std::string_view bucket, std::string_view key,
                                          std::string_view upload_id, uint32_t after_part,
                                          size_t max_parts) override;
  Result<ListUploadsResult> listUploads(std::string_view bucket,
                                        const ListUploadsRequest& req) override;
  Result<std::optional<VersionId>> completeUpload(std::string_view bucket,
                                                  std::string_view key,
                                                  std::string_view upload_id,
                                                  const Manifest& manifest,
                                                  Precondition pre) override;
  Status abortUpload(std::string_view bucket, std::string_view key,
                     std::string_view upload_id) override;

  Status createRecordSet(std::string_view bucket, std::string_view container,
                         const VersionId& set) override;
  Status putRecordRows(std::string_view bucket, std::string_view container, const VersionId& set,
                       const std::vector<RecordRow>& rows) override;
  Result<RecordIndexInfo> attachRecords(std::string_view bucket, std::string_view container,
                                        const VersionId& version,
                                        const RecordIndexInfo& info) override;
  Status abandonRecords(const VersionId& set) override;
  Result<RecordPage> listRecords(std::string_view bucket, const RecordQuery& query) override;
  Result<std::vector<RecordRow>> setRecords(const VersionId& set,
                                            const std::optional<RecordCursor>& after,
                                            size_t limit) override;
  Result<RecordGcStats> collectRecordGarbage(size_t max_rows,
                                             int64_t orphan_before_unix_nanos) override;
  Result<RecordIndexStats> recordIndexStats() override;
  Result<IndexStorageStats> storageStats() override;
  Result<IndexCommitStats> commitStats() override { return queue_->stats(); }
  Status checkpoint(const std::string& dir) override;
  Result<int64_t> createdUnixNanos() override { return created_unix_nanos_; }
  Result<bool> holdLease(std::string_view name, std::string_view holder,
                         std::chrono::milliseconds ttl) override;

 private:
  RocksIndex(const Clock& clock) : clock_(clock) {}
  Status submit(CommitRequest& req);
  // relocateFragments and updateObjectTags, once `updated` is checked against `expected`.
  Status replaceManifest(std::string_view bucket, std::string_view key,
                         const Manifest& expected, const Manifest& updated);
  // A request of putObjectAsync or deleteObjectAsync, the manifest it points to, and who
  // gets its outcome.
  struct AsyncCommit {
    CommitRequest req;
    Manifest manifest;
    CommitDone done;
  };
  // putObjectAsync and deleteObjectAsync: stage(req, manifest) checks and fills the
  // request (a Status), then it is queued without waiting; `done` gets its outcome
  // (req.replaced or its error) on the committer thread, or here if staging fails or
  // throws, and the request is freed after.
  template <typename Stage>
  void commitAsync(Manifest manifest, CommitDone done, Stage stage);
  // collectRecordGarbage's two halves.
  Status markOrphanSets(int64_t orphan_before_unix_nanos);
  Status removeDeadSet(const VersionId& set, const std::string& gc_value, size_t& budget,
                       RecordGcStats& stats);

  // Reads the index's creation time, recording it first in a new index (see Index).
  Status loadCreated(const IndexOptions& options);

  const Clock& clock_;
  int64_t created_unix_nanos_ = 0;
  size_t gc_page_blobs_ = 1;  // IndexOptions::gc_page_blobs
  struct Lease {
    std::string holder;
    int64_t expires_nanos = 0;  // by the monotonic clock
  };
  std::mutex leases_mu_;
  std::map<std::string, Lease, std::less<>> leases_;  // holdLease's, in memory only
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  ColumnFamilies cfs_;
  std::unique_ptr<CommitQueue> queue_;
  // putRecordRows' "is the set live?" check and its write hold this shared; the orphan
  // sweep holds it exclusively from its last look at a set's touch time to the commit that
  // marks the set dead. Without it, rows written just after the sweep looked could revive
  // a set whose older rows the sweep then removes.
  std::shared_mutex record_sweep_mu_;
};

}  // namespace granary::index_kv

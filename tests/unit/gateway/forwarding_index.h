// ForwardingIndex: an Index that passes every call to another; a test overrides the calls it
// wants to fail or watch (the store behind it stays real). Generated from MeteredIndex's
// list of methods (src/index_kv/metered_index.cc).
#pragma once

#include "granary/index_kv/index.h"

namespace granary::index_kv {  // (test code: the index types by their short names)

class ForwardingIndex : public Index {
 public:
  explicit ForwardingIndex(Index& target) : target_(target) {}

  Status createBucket(const BucketInfo& b) override {
    return target_.createBucket(b);
  }
  Result<BucketInfo> getBucket(std::string_view name) override {
    return target_.getBucket(name);
  }
  std::optional<Result<BucketInfo>> getBucketFromMemory(std::string_view name) override {
    return target_.getBucketFromMemory(name);
  }
  Result<std::vector<BucketInfo>> listBuckets() override {
    return target_.listBuckets();
  }
  Status updateBucket(const BucketInfo& b, const BucketInfo& expected) override {
    return target_.updateBucket(b, expected);
  }
  Status deleteBucket(std::string_view name, int64_t created_unix_nanos) override {
    return target_.deleteBucket(name, created_unix_nanos);
  }
  Status createUser(const UserInfo& u) override {
    return target_.createUser(u);
  }
  Result<std::vector<UserInfo>> listUsers() override {
    return target_.listUsers();
  }
  Status deleteUser(std::string_view name) override {
    return target_.deleteUser(name);
  }
  Result<std::optional<VersionId>> putObject(std::string_view bucket, std::string_view key,
                                             const Manifest& m, Precondition pre) override {
    return target_.putObject(bucket, key, m, pre);
  }
  bool asyncCommits() const override { return target_.asyncCommits(); }
  void putObjectAsync(std::string_view bucket, std::string_view key, Manifest m,
                      Precondition pre, CommitDone done) override {
    target_.putObjectAsync(bucket, key, std::move(m), pre, std::move(done));
  }
  void deleteObjectAsync(std::string_view bucket, std::string_view key, Precondition pre,
                         CommitDone done) override {
    target_.deleteObjectAsync(bucket, key, pre, std::move(done));
  }
  Result<std::vector<BlobRef>> blobsInUse(const VersionId& version,
                                          const std::vector<BlobRef>& among) override {
    return target_.blobsInUse(version, among);
  }
  Status relocateFragments(std::string_view bucket, std::string_view key,
                           const Manifest& expected, const Manifest& updated) override {
    return target_.relocateFragments(bucket, key, expected, updated);
  }
  Status updateObjectTags(std::string_view bucket, std::string_view key,
                          const Manifest& expected, const Manifest& updated) override {
    return target_.updateObjectTags(bucket, key, expected, updated);
  }
  Result<Manifest> getObject(std::string_view bucket, std::string_view key) override {
    return target_.getObject(bucket, key);
  }
  std::optional<Result<Manifest>> getObjectFromMemory(std::string_view bucket,
                                                      std::string_view key) override {
    return target_.getObjectFromMemory(bucket, key);
  }
  Result<std::optional<VersionId>> deleteObject(std::string_view bucket, std::string_view key,
                                                Precondition pre) override {
    return target_.deleteObject(bucket, key, pre);
  }
  Result<ListResult> listObjects(std::string_view bucket, const ListRequest& req) override {
    return target_.listObjects(bucket, req);
  }
  Result<std::vector<GcEntry>> gcDue(int64_t before, size_t limit,
                                     std::string_view after = {}) override {
    return target_.gcDue(before, limit, after);
  }
  Status gcDone(const std::vector<GcEntry>& entries) override {
    return target_.gcDone(entries);
  }
  Result<bool> isBlobVersionReferenced(const VersionId& version) override {
    return target_.isBlobVersionReferenced(version);
  }
  Result<bool> markVersionDead(const VersionId& version) override {
    return target_.markVersionDead(version);
  }
  Result<bool> holdLease(std::string_view name, std::string_view holder,
                         std::chrono::milliseconds ttl) override {
    return target_.holdLease(name, holder, ttl);
  }
  Status createUpload(const MultipartUpload& upload, int64_t bucket_created_unix_nanos) override {
    return target_.createUpload(upload, bucket_created_unix_nanos);
  }
  Result<MultipartUpload> getUpload(std::string_view bucket, std::string_view key,
                                    std::string_view upload_id) override {
    return target_.getUpload(bucket, key, upload_id);
  }
  Result<std::optional<VersionId>> putPart(std::string_view bucket, std::string_view key,
                                           std::string_view upload_id,
                                           const PartInfo& part) override {
    return target_.putPart(bucket, key, upload_id, part);
  }
  Status relocatePartFragments(std::string_view bucket, std::string_view key,
                               std::string_view upload_id, const PartInfo& expected,
                               const PartInfo& updated) override {
    return target_.relocatePartFragments(bucket, key, upload_id, expected, updated);
  }
  Result<std::vector<PartInfo>> listParts(std::string_view bucket, std::string_view key,
                                          std::string_view upload_id, uint32_t after_part,
                                          size_t max_parts) override {
    return target_.listParts(bucket, key, upload_id, after_part, max_parts);
  }
  Result<ListUploadsResult> listUploads(std::string_view bucket,
                                        const ListUploadsRequest& req) override {
    return target_.listUploads(bucket, req);
  }
  Result<std::optional<VersionId>> completeUpload(std::string_view bucket, std::string_view key,
                                                  std::string_view upload_id, const Manifest& m,
                                                  Precondition pre) override {
    return target_.completeUpload(bucket, key, upload_id, m, pre);
  }
  Status abortUpload(std::string_view bucket, std::string_view key,
                     std::string_view upload_id) override {
    return target_.abortUpload(bucket, key, upload_id);
  }
  Status createRecordSet(std::string_view bucket, std::string_view container,
                         const VersionId& set) override {
    return target_.createRecordSet(bucket, container, set);
  }
  Status putRecordRows(std::string_view bucket, std::string_view container, const VersionId& set,
                       const std::vector<RecordRow>& rows) override {
    return target_.putRecordRows(bucket, container, set, rows);
  }
  Result<RecordIndexInfo> attachRecords(std::string_view bucket, std::string_view container,
                                        const VersionId& version,
                                        const RecordIndexInfo& info) override {
    return target_.attachRecords(bucket, container, version, info);
  }
  Status abandonRecords(const VersionId& set) override {
    return target_.abandonRecords(set);
  }
  Result<RecordPage> listRecords(std::string_view bucket, const RecordQuery& query) override {
    return target_.listRecords(bucket, query);
  }
  Result<std::vector<RecordRow>> setRecords(const VersionId& set,
                                            const std::optional<RecordCursor>& after,
                                            size_t limit) override {
    return target_.setRecords(set, after, limit);
  }
  Result<RecordGcStats> collectRecordGarbage(size_t max_rows, int64_t orphan_before) override {
    return target_.collectRecordGarbage(max_rows, orphan_before);
  }
  Result<RecordIndexStats> recordIndexStats() override { return target_.recordIndexStats(); }
  Result<IndexStorageStats> storageStats() override { return target_.storageStats(); }
  Result<IndexCommitStats> commitStats() override { return target_.commitStats(); }
  Status checkpoint(const std::string& dir) override { return target_.checkpoint(dir); }
  Result<int64_t> createdUnixNanos() override { return target_.createdUnixNanos(); }

 protected:
  Index& target_;
};

}  // namespace granary::index_kv

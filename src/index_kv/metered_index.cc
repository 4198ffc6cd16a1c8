// makeMeteredIndex (index.h): counts and times every Index call. The metric objects of each
// operation are looked up once, at construction.
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <type_traits>

#include "granary/index_kv/index.h"

namespace granary::index_kv {
namespace {

enum Op {
  kCreateBucket, kGetBucket, kListBuckets, kUpdateBucket, kDeleteBucket, kPutObject,
  kGetObject, kDeleteObject, kListObjects, kGcDue, kGcDone, kBlobReferenced, kCreateUpload,
  kGetUpload, kPutPart, kListParts, kListUploads, kCompleteUpload, kAbortUpload,
  kCreateRecordSet, kPutRecordRows, kAttachRecords, kAbandonRecords, kListRecords,
  kSetRecords, kRecordGc, kCreateUser, kListUsers, kDeleteUser, kRelocate, kBlobsInUse,
  kUpdateTags, kMarkDead, kRelocatePart, kHoldLease, kOpCount
};
constexpr std::array<const char*, kOpCount> kOpNames = {
    "create_bucket",  "get_bucket",       "list_buckets",    "update_bucket",
    "delete_bucket",  "put_object",       "get_object",      "delete_object",
    "list_objects",   "gc_due",           "gc_done",         "blob_referenced",
    "create_upload",  "get_upload",       "put_part",        "list_parts",
    "list_uploads",   "complete_upload",  "abort_upload",    "create_record_set",
    "put_record_rows", "attach_records",  "abandon_records", "list_records",
    "set_records",    "record_gc",        "create_user",     "list_users",
    "delete_user",    "relocate_fragments", "blobs_in_use", "update_object_tags",
    "mark_version_dead", "relocate_part_fragments", "hold_lease"};
// A name missing from the list above would be a null label at start-up.
static_assert(std::ranges::none_of(kOpNames, [](const char* s) { return s == nullptr; }));

bool failed(const Status& st) {
  return !st.isOk() && !st.isNotFound() && st.code() != Status::Code::kPreconditionFailed;
}
template <typename T>
bool failed(const Result<T>& r) {
  return !r && failed(r.error());
}

class MeteredIndex final : public Index {
 public:
  MeteredIndex(std::unique_ptr<Index> inner, prometheus::Registry& registry)
      : inner_(std::move(inner)) {
    auto& ops = prometheus::BuildCounter()
                    .Name("granary_index_operations_total")
                    .Help("Index (manifest and record index) operations")
                    .Register(registry);
    auto& errors = prometheus::BuildCounter()
                       .Name("granary_index_errors_total")
                       .Help("Index operations that failed (not-found and precondition "
                             "answers excluded)")
                       .Register(registry);
    auto& latency = prometheus::BuildHistogram()
                        .Name("granary_index_operation_duration_seconds")
                        .Help("Index operation latency (writes include their group commit)")
                        .Register(registry);
    static const prometheus::Histogram::BucketBoundaries kBuckets = {
        0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
        0.005,   0.01,     0.025,   0.05,   0.1,     0.25,   0.5,   1};
    for (int i = 0; i < kOpCount; ++i) {
      const prometheus::Labels labels{{"op", kOpNames[i]}};
      metrics_[i] = {&ops.Add(labels), &errors.Add(labels), &latency.Add(labels, kBuckets)};
    }
  }

  Status createBucket(const BucketInfo& b) override {
    return timed(kCreateBucket, [&] { return inner_->createBucket(b); });
  }
  Result<BucketInfo> getBucket(std::string_view name) override {
    return timed(kGetBucket, [&] { return inner_->getBucket(name); });
  }
  std::optional<Result<BucketInfo>> getBucketFromMemory(std::string_view name) override {
    return timedIfAnswered(kGetBucket, [&] { return inner_->getBucketFromMemory(name); });
  }
  Result<std::vector<BucketInfo>> listBuckets() override {
    return timed(kListBuckets, [&] { return inner_->listBuckets(); });
  }
  Status updateBucket(const BucketInfo& b, const BucketInfo& expected) override {
    return timed(kUpdateBucket, [&] { return inner_->updateBucket(b, expected); });
  }
  Status deleteBucket(std::string_view name, int64_t created_unix_nanos) override {
    return timed(kDeleteBucket, [&] { return inner_->deleteBucket(name, created_unix_nanos); });
  }
  Status createUser(const UserInfo& u) override {
    return timed(kCreateUser, [&] { return inner_->createUser(u); });
  }
  Result<std::vector<UserInfo>> listUsers() override {
    return timed(kListUsers, [&] { return inner_->listUsers(); });
  }
  Status deleteUser(std::string_view name) override {
    return timed(kDeleteUser, [&] { return inner_->deleteUser(name); });
  }
  Result<std::optional<VersionId>> putObject(std::string_view bucket, std::string_view key,
                                             const Manifest& m, Precondition pre) override {
    return timed(kPutObject, [&] { return inner_->putObject(bucket, key, m, pre); });
  }
  bool asyncCommits() const override { return inner_->asyncCommits(); }
  void putObjectAsync(std::string_view bucket, std::string_view key, Manifest m,
                      Precondition pre, CommitDone done) override {
    inner_->putObjectAsync(bucket, key, std::move(m), pre, timedDone(kPutObject, std::move(done)));
  }
  void deleteObjectAsync(std::string_view bucket, std::string_view key, Precondition pre,
                         CommitDone done) override {
    inner_->deleteObjectAsync(bucket, key, pre, timedDone(kDeleteObject, std::move(done)));
  }
  Result<std::vector<BlobRef>> blobsInUse(const VersionId& version,
                                          const std::vector<BlobRef>& among) override {
    return timed(kBlobsInUse, [&] { return inner_->blobsInUse(version, among); });
  }
  Status relocateFragments(std::string_view bucket, std::string_view key,
                           const Manifest& expected, const Manifest& updated) override {
    return timed(kRelocate,
                 [&] { return inner_->relocateFragments(bucket, key, expected, updated); });
  }
  Status updateObjectTags(std::string_view bucket, std::string_view key,
                          const Manifest& expected, const Manifest& updated) override {
    return timed(kUpdateTags,
                 [&] { return inner_->updateObjectTags(bucket, key, expected, updated); });
  }
  Result<Manifest> getObject(std::string_view bucket, std::string_view key) override {
    return timed(kGetObject, [&] { return inner_->getObject(bucket, key); });
  }
  std::optional<Result<Manifest>> getObjectFromMemory(std::string_view bucket,
                                                      std::string_view key) override {
    return timedIfAnswered(kGetObject, [&] { return inner_->getObjectFromMemory(bucket, key); });
  }
  Result<std::optional<VersionId>> deleteObject(std::string_view bucket, std::string_view key,
                                                Precondition pre) override {
    return timed(kDeleteObject, [&] { return inner_->deleteObject(bucket, key, pre); });
  }
  Result<ListResult> listObjects(std::string_view bucket, const ListRequest& req) override {
    return timed(kListObjects, [&] { return inner_->listObjects(bucket, req); });
  }
  Result<std::vector<GcEntry>> gcDue(int64_t before, size_t limit,
                                     std::string_view after = {}) override {
    return timed(kGcDue, [&] { return inner_->gcDue(before, limit, after); });
  }
  Status gcDone(const std::vector<GcEntry>& entries) override {
    return timed(kGcDone, [&] { return inner_->gcDone(entries); });
  }
  Result<bool> isBlobVersionReferenced(const VersionId& version) override {
    return timed(kBlobReferenced, [&] { return inner_->isBlobVersionReferenced(version); });
  }
  Result<bool> markVersionDead(const VersionId& version) override {
    return timed(kMarkDead, [&] { return inner_->markVersionDead(version); });
  }
  Result<bool> holdLease(std::string_view name, std::string_view holder,
                         std::chrono::milliseconds ttl) override {
    return timed(kHoldLease, [&] { return inner_->holdLease(name, holder, ttl); });
  }
  Status createUpload(const MultipartUpload& upload, int64_t bucket_created_unix_nanos) override {
    return timed(kCreateUpload,
                 [&] { return inner_->createUpload(upload, bucket_created_unix_nanos); });
  }
  Result<MultipartUpload> getUpload(std::string_view bucket, std::string_view key,
                                    std::string_view upload_id) override {
    return timed(kGetUpload, [&] { return inner_->getUpload(bucket, key, upload_id); });
  }
  Result<std::optional<VersionId>> putPart(std::string_view bucket, std::string_view key,
                                           std::string_view upload_id,
                                           const PartInfo& part) override {
    return timed(kPutPart, [&] { return inner_->putPart(bucket, key, upload_id, part); });
  }
  Status relocatePartFragments(std::string_view bucket, std::string_view key,
                               std::string_view upload_id, const PartInfo& expected,
                               const PartInfo& updated) override {
    return timed(kRelocatePart, [&] {
      return inner_->relocatePartFragments(bucket, key, upload_id, expected, updated);
    });
  }
  Result<std::vector<PartInfo>> listParts(std::string_view bucket, std::string_view key,
                                          std::string_view upload_id, uint32_t after_part,
                                          size_t max_parts) override {
    return timed(kListParts,
                 [&] { return inner_->listParts(bucket, key, upload_id, after_part, max_parts); });
  }
  Result<ListUploadsResult> listUploads(std::string_view bucket,
                                        const ListUploadsRequest& req) override {
    return timed(kListUploads, [&] { return inner_->listUploads(bucket, req); });
  }
  Result<std::optional<VersionId>> completeUpload(std::string_view bucket, std::string_view key,
                                                  std::string_view upload_id, const Manifest& m,
                                                  Precondition pre) override {
    return timed(kCompleteUpload,
                 [&] { return inner_->completeUpload(bucket, key, upload_id, m, pre); });
  }
  Status abortUpload(std::string_view bucket, std::string_view key,
                     std::string_view upload_id) override {
    return timed(kAbortUpload, [&] { return inner_->abortUpload(bucket, key, upload_id); });
  }
  Status createRecordSet(std::string_view bucket, std::string_view container,
                         const VersionId& set) override {
    return timed(kCreateRecordSet, [&] { return inner_->createRecordSet(bucket, container, set); });
  }
  Status putRecordRows(std::string_view bucket, std::string_view container, const VersionId& set,
                       const std::vector<RecordRow>& rows) override {
    return timed(kPutRecordRows,
                 [&] { return inner_->putRecordRows(bucket, container, set, rows); });
  }
  Result<RecordIndexInfo> attachRecords(std::string_view bucket, std::string_view container,
                                        const VersionId& version,
                                        const RecordIndexInfo& info) override {
    return timed(kAttachRecords,
                 [&] { return inner_->attachRecords(bucket, container, version, info); });
  }
  Status abandonRecords(const VersionId& set) override {
    return timed(kAbandonRecords, [&] { return inner_->abandonRecords(set); });
  }
  Result<RecordPage> listRecords(std::string_view bucket, const RecordQuery& query) override {
    return timed(kListRecords, [&] { return inner_->listRecords(bucket, query); });
  }
  Result<std::vector<RecordRow>> setRecords(const VersionId& set,
                                            const std::optional<RecordCursor>& after,
                                            size_t limit) override {
    return timed(kSetRecords, [&] { return inner_->setRecords(set, after, limit); });
  }
  Result<RecordGcStats> collectRecordGarbage(size_t max_rows, int64_t orphan_before) override {
    return timed(kRecordGc, [&] { return inner_->collectRecordGarbage(max_rows, orphan_before); });
  }
  Result<RecordIndexStats> recordIndexStats() override { return inner_->recordIndexStats(); }
  Result<IndexStorageStats> storageStats() override { return inner_->storageStats(); }
  Result<IndexCommitStats> commitStats() override { return inner_->commitStats(); }
  Status checkpoint(const std::string& dir) override { return inner_->checkpoint(dir); }
  Result<int64_t> createdUnixNanos() override { return inner_->createdUnixNanos(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct OpMetrics {
    prometheus::Counter* ops;
    prometheus::Counter* errors;
    prometheus::Histogram* latency;
  };

  void record(Op op, Clock::time_point start, bool error) {
    const OpMetrics& m = metrics_[op];
    m.latency->Observe(std::chrono::duration<double>(Clock::now() - start).count());
    m.ops->Increment();
    if (error) m.errors->Increment();
  }
  // `done`, counted and timed from now to its call.
  CommitDone timedDone(Op op, CommitDone done) {
    return [this, op, start = Clock::now(), done = std::move(done)](
               Result<std::optional<VersionId>> r) mutable {
      record(op, start, failed(r));
      done(std::move(r));
    };
  }
  template <typename F>
  auto timed(Op op, F&& call) -> std::invoke_result_t<F&> {
    const auto start = Clock::now();
    auto r = call();
    record(op, start, failed(r));
    return r;
  }
  // A lookup from memory: counted when it answers; a miss is counted by the full lookup
  // the caller makes next.
  template <typename F>
  auto timedIfAnswered(Op op, F&& call) -> std::invoke_result_t<F&> {
    const auto start = Clock::now();
    auto r = call();
    if (r) record(op, start, failed(*r));
    return r;
  }

  std::array<OpMetrics, kOpCount> metrics_{};
  // After the metrics: an index destroyed with commits pending answers them (and so
  // records them) while it goes.
  std::unique_ptr<Index> inner_;
};

}  // namespace

std::unique_ptr<Index> makeMeteredIndex(std::unique_ptr<Index> inner,
                                        prometheus::Registry& registry) {
  return std::make_unique<MeteredIndex>(std::move(inner), registry);
}

}  // namespace granary::index_kv

#include "granary/gateway/lifecycle.h"

#include <limits>

#include "granary/common/clock.h"
#include "granary/common/log.h"
#include "granary/index_kv/index.h"

namespace granary::gateway {
namespace {

constexpr int64_t kNanos = 1'000'000'000;

}  // namespace

LifecycleJob::LifecycleJob(index_kv::Index& index, const Clock& clock, LifecycleOptions options)
    : index_(index), clock_(clock), options_(options) {}

LifecycleJob::~LifecycleJob() { stop(); }

void LifecycleJob::start() {
  thread_.start(options_.interval, [this] {
    auto stats = runOnce();
    if (!stats) {
      log::warn("lifecycle pass failed: {}", stats.error().toString());
    } else if (stats->objects_expired > 0 || stats->uploads_aborted > 0) {
      log::info("lifecycle: {} objects expired, {} uploads aborted", stats->objects_expired,
                stats->uploads_aborted);
    }
  });
}

void LifecycleJob::stop() { thread_.stop(); }

Result<LifecycleStats> LifecycleJob::runOnce() {
  std::lock_guard pass(pass_mu_);
  LifecycleStats stats;
  auto buckets = index_.listBuckets();
  if (!buckets) return fail(buckets.error());
  const int64_t now = clock_.nowUnixNanos();
  for (const index_kv::BucketInfo& bucket : *buckets) {
    ++stats.buckets;
    // A bucket deleted since listBuckets is no error: there is nothing left to expire.
    Status st = expireObjects(bucket, now, stats);
    if (st.isOk() || st.isNotFound()) st = abortUploads(bucket, now, stats);
    if (!st.isOk() && !st.isNotFound()) return fail(st);
  }
  return stats;
}

Status LifecycleJob::expireObjects(const index_kv::BucketInfo& bucket, int64_t now,
                                   LifecycleStats& stats) {
  const int64_t day = options_.day_seconds * kNanos;
  for (const index_kv::LifecycleRule& rule : bucket.lifecycle) {
    if (!rule.enabled) continue;
    // Objects modified at or before `cutoff` expire.
    int64_t cutoff = std::numeric_limits<int64_t>::min();
    if (rule.expiration_days) cutoff = now - *rule.expiration_days * day;
    if (rule.expiration_date_unix && now >= *rule.expiration_date_unix * kNanos) {
      cutoff = std::numeric_limits<int64_t>::max();
    }
    if (cutoff == std::numeric_limits<int64_t>::min()) continue;
    index_kv::ListRequest list;
    list.prefix = rule.prefix;
    for (;;) {
      auto page = index_.listObjects(bucket.name, list);
      if (!page) return page.error();
      for (const index_kv::ObjectSummary& object : page->objects) {
        if (object.mtime_unix_nanos > cutoff) continue;
        auto deleted = index_.deleteObject(bucket.name, object.key,
                                           index_kv::Precondition::mustMatch(object.version));
        if (deleted) {
          ++stats.objects_expired;
        } else if (deleted.error().code() != Status::Code::kPreconditionFailed &&
                   !deleted.error().isNotFound()) {
          return deleted.error();  // else: overwritten or deleted meanwhile, keep it
        }
      }
      if (!page->truncated) break;
      list.start_after = page->next_start_after;
    }
  }
  return Status::ok();
}

Status LifecycleJob::abortUploads(const index_kv::BucketInfo& bucket, int64_t now,
                                  LifecycleStats& stats) {
  const int64_t day = options_.day_seconds * kNanos;
  const int64_t max_age = options_.multipart_max_age.count() * kNanos;
  bool any_rule = false;
  for (const auto& rule : bucket.lifecycle) any_rule |= rule.enabled && rule.abort_incomplete_days;
  if (!any_rule && max_age <= 0) return Status::ok();
  auto due = [&](const index_kv::MultipartUpload& upload) {
    const int64_t age = now - upload.initiated_unix_nanos;
    if (max_age > 0 && age >= max_age) return true;
    for (const auto& rule : bucket.lifecycle) {
      if (rule.enabled && rule.abort_incomplete_days && upload.key.starts_with(rule.prefix) &&
          age >= *rule.abort_incomplete_days * day) {
        return true;
      }
    }
    return false;
  };
  index_kv::ListUploadsRequest list;
  for (;;) {
    auto page = index_.listUploads(bucket.name, list);
    if (!page) return page.error();
    for (const index_kv::MultipartUpload& upload : page->uploads) {
      if (!due(upload)) continue;
      Status st = index_.abortUpload(bucket.name, upload.key, upload.upload_id);
      if (st.isOk()) {
        ++stats.uploads_aborted;
      } else if (!st.isNotFound()) {
        return st;  // else: completed or aborted meanwhile
      }
    }
    if (!page->truncated || page->uploads.empty()) break;
    list.key_marker = page->uploads.back().key;
    list.upload_id_marker = page->uploads.back().upload_id;
  }
  return Status::ok();
}

}  // namespace granary::gateway

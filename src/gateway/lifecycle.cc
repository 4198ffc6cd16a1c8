#include "granary/gateway/lifecycle.h"

#include <algorithm>
#include <optional>

#include "granary/common/clock.h"
#include "granary/common/log.h"
#include "granary/index_kv/index.h"

namespace granary::gateway {
namespace {

constexpr int64_t kNanos = 1'000'000'000;

// Whole seconds: days (<= 100,000, s3_xml.cc) times a day's seconds cannot overflow, and
// a date rule far in the future ("9999-12-31" for "never") compares correctly.
int64_t ageSeconds(int64_t now_unix_nanos, int64_t then_unix_nanos) {
  return (now_unix_nanos - then_unix_nanos) / kNanos;
}

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
  for (const index_kv::LifecycleRule& rule : bucket.lifecycle) {
    if (!rule.enabled) continue;
    // Objects at least `min_age` seconds old expire.
    std::optional<int64_t> min_age;
    if (rule.expiration_days) min_age = *rule.expiration_days * options_.day_seconds;
    if (rule.expiration_date_unix && now / kNanos >= *rule.expiration_date_unix) min_age = 0;
    if (!min_age) continue;
    index_kv::ListRequest list;
    list.prefix = rule.prefix;
    for (;;) {
      auto page = index_.listObjects(bucket.name, list);
      if (!page) return page.error();
      for (const index_kv::ObjectSummary& object : page->objects) {
        if (ageSeconds(now, object.mtime_unix_nanos) < *min_age) continue;
        if ((rule.size_greater_than && object.size <= *rule.size_greater_than) ||
            (rule.size_less_than && object.size >= *rule.size_less_than)) {
          continue;
        }
        if (!rule.tags.empty()) {
          // Tags are in the manifest, not the listing: read it for the objects left.
          auto m = index_.getObject(bucket.name, object.key);
          if (!m) {
            // Gone meanwhile, or unreadable: kept, and the pass goes on (one bad manifest
            // must not stop every later bucket's rules).
            if (!m.error().isNotFound()) {
              log::warn("lifecycle: {}/{} kept, its tags unreadable: {}", bucket.name,
                        object.key, m.error().toString());
            }
            continue;
          }
          if (m->version != object.version ||
              !std::all_of(rule.tags.begin(), rule.tags.end(), [&](const auto& tag) {
                auto it = m->tags.find(tag.first);
                return it != m->tags.end() && it->second == tag.second;
              })) {
            continue;
          }
        }
        if (options_.before_expire) options_.before_expire(bucket.name, object.key);
        // Conditional on the version seen and on the rule's tags: an object overwritten, or
        // whose matching tag was removed, since it was read here is kept.
        auto deleted = index_.deleteObject(
            bucket.name, object.key, index_kv::Precondition::mustMatch(object.version, rule.tags));
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
  const int64_t max_age = options_.multipart_max_age.count();
  bool any_rule = false;
  for (const auto& rule : bucket.lifecycle) any_rule |= rule.enabled && rule.abort_incomplete_days;
  if (!any_rule && max_age <= 0) return Status::ok();
  auto due = [&](const index_kv::MultipartUpload& upload) {
    const int64_t age = ageSeconds(now, upload.initiated_unix_nanos);
    if (max_age > 0 && age >= max_age) return true;
    for (const auto& rule : bucket.lifecycle) {
      if (rule.enabled && rule.abort_incomplete_days && upload.key.starts_with(rule.prefix) &&
          age >= *rule.abort_incomplete_days * options_.day_seconds) {
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

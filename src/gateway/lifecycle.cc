#include "granary/gateway/lifecycle.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

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

// In whole seconds too. True once `days` lifecycle days have passed since `then` as S3
// counts them: its time plus the days, rounded up to the next day boundary, which is
// midnight UTC with 86,400-second days (the Unix epoch is one).
bool daysHavePassed(int64_t now_unix_nanos, int64_t then_unix_nanos, int64_t days,
                    int64_t day_seconds) {
  const int64_t end = then_unix_nanos / kNanos + days * day_seconds;
  const int64_t due = (end + day_seconds - 1) / day_seconds * day_seconds;
  return now_unix_nanos / kNanos >= due;
}

// Whether `rule` has a Date and it has come: every object under it is due.
bool dateHasCome(const index_kv::LifecycleRule& rule, int64_t now_unix_nanos) {
  return rule.expiration_date_unix && now_unix_nanos / kNanos >= *rule.expiration_date_unix;
}

}  // namespace

LifecycleJob::LifecycleJob(index_kv::Index& index, const Clock& clock, LifecycleOptions options)
    : index_(index), clock_(clock), options_(options) {}

LifecycleJob::~LifecycleJob() { stop(); }

void LifecycleJob::start() {
  thread_.start(options_.interval, [this] {
    if (options_.leading && !options_.leading()) return;  // another gateway's to run
    auto stats = runOnce();
    if (!stats) {
      log::warn("lifecycle pass failed: {}", stats.error().toString());
    } else if (stats->objects_expired > 0 || stats->uploads_aborted > 0 ||
               stats->objects_failed > 0 || stats->buckets_failed > 0) {
      log::info(
          "lifecycle: {} objects expired, {} uploads aborted, {} objects and {} "
          "buckets failed",
          stats->objects_expired, stats->uploads_aborted, stats->objects_failed,
          stats->buckets_failed);
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
  for (index_kv::BucketInfo& bucket : *buckets) {
    if (thread_.stopping()) break;  // shutting down: the next start's passes go on
    ++stats.buckets;
    // A bucket deleted since listBuckets is no error: there is nothing left to expire.
    Status st = expireObjects(bucket, now, stats);
    // Its uploads are aborted even when its objects could not be expired (the backstop
    // must not wait on an unreadable listing).
    if (!st.isNotFound()) {
      Status aborted = abortUploads(bucket, now, stats);
      if (st.isOk()) st = aborted;
    }
    if (!st.isOk() && !st.isNotFound()) {
      // One bucket's failure (an unreadable listing, an index that timed out) leaves the
      // later buckets their rules and the uploads' backstop; the next pass tries it again.
      ++stats.buckets_failed;
      log::warn("lifecycle: bucket {} left for the next pass: {}", bucket.name, st.toString());
    }
  }
  return stats;
}

Status LifecycleJob::refresh(index_kv::BucketInfo& bucket) {
  auto now = index_.getBucket(bucket.name);
  if (!now) return now.error();
  if (now->created_unix_nanos != bucket.created_unix_nanos) {
    return Status::notFound("bucket " + bucket.name + " was made again");
  }
  bucket = std::move(*now);
  return Status::ok();
}

Status LifecycleJob::expireObjects(index_kv::BucketInfo& bucket, int64_t now,
                                   LifecycleStats& stats) {
  // The rules are read again before each page: a rule removed or changed (or the bucket
  // deleted) while the pass runs binds the rest of it. On a change the bucket starts over
  // with its new rules (a few times at most; then the next pass).
  for (int start = 0; start < 3; ++start) {
    const std::vector<index_kv::LifecycleRule> rules = bucket.lifecycle;
    // The rules with something to expire: every object under them once their date has
    // come, else those their days have passed.
    std::vector<const index_kv::LifecycleRule*> active;
    for (const auto& rule : rules) {
      if (rule.enabled && (dateHasCome(rule, now) || rule.expiration_days)) {
        active.push_back(&rule);
      }
    }
    // Rules without tags first: they need no manifest read, and their delete does not
    // depend on tags a client may change meanwhile.
    std::stable_partition(active.begin(), active.end(),
                          [](const index_kv::LifecycleRule* r) { return r->tags.empty(); });
    // One listing per prefix no other active rule's prefix holds: a thousand rules over
    // one prefix (or over the whole bucket) list it once, not a thousand times.
    std::vector<std::string> prefixes;
    for (const auto* rule : active) prefixes.push_back(rule->prefix);
    std::sort(prefixes.begin(), prefixes.end());
    std::vector<std::string> covering;
    for (auto& p : prefixes) {
      if (covering.empty() || !p.starts_with(covering.back())) covering.push_back(std::move(p));
    }
    bool changed = false;
    for (size_t i = 0; i < covering.size() && !changed; ++i) {
      Status st = expireUnder(bucket, rules, active, covering[i], now, stats, changed);
      if (!st.isOk()) return st;
    }
    if (!changed) return Status::ok();
  }
  return Status::ok();
}

Status LifecycleJob::expireUnder(index_kv::BucketInfo& bucket,
                                 const std::vector<index_kv::LifecycleRule>& rules,
                                 const std::vector<const index_kv::LifecycleRule*>& active,
                                 const std::string& prefix, int64_t now, LifecycleStats& stats,
                                 bool& changed) {
  // Whether `rule` expires `object` going by the listing (its tags are read apart).
  const auto due = [&](const index_kv::LifecycleRule& rule, const index_kv::ObjectSummary& object) {
    if (!object.key.starts_with(rule.prefix)) return false;
    if (!dateHasCome(rule, now) &&
        !daysHavePassed(now, object.mtime_unix_nanos, *rule.expiration_days,
                        options_.day_seconds)) {
      return false;
    }
    return !(rule.size_greater_than && object.size <= *rule.size_greater_than) &&
           !(rule.size_less_than && object.size >= *rule.size_less_than);
  };
  index_kv::ListRequest list;
  list.prefix = prefix;
  list.max_keys = options_.page_keys;
  for (;;) {
    if (thread_.stopping()) return Status::ok();
    if (Status st = refresh(bucket); !st.isOk()) return st;
    if (bucket.lifecycle != rules) {
      changed = true;
      return Status::ok();
    }
    auto page = index_.listObjects(bucket.name, list);
    if (!page) return page.error();
    for (const index_kv::ObjectSummary& object : page->objects) {
      // The first rule that expires the object. Tags are in the manifest, not the
      // listing: read once, for an object some tag rule is otherwise due on.
      const index_kv::LifecycleRule* expiring = nullptr;
      std::optional<Result<index_kv::Manifest>> manifest;
      for (const auto* rule : active) {
        if (!due(*rule, object)) continue;
        if (rule->tags.empty()) {
          expiring = rule;
          break;
        }
        if (!manifest) {
          manifest = index_.getObject(bucket.name, object.key);
          // Gone meanwhile, or unreadable: kept by the tag rules, and the pass goes on
          // (one bad manifest must not stop every later bucket's rules).
          if (!*manifest && !(*manifest).error().isNotFound()) {
            log::warn("lifecycle: {}/{} kept by tag rules, its tags unreadable: {}", bucket.name,
                      object.key, (*manifest).error().toString());
          }
        }
        const auto& m = *manifest;
        if (m && m->version == object.version &&
            std::all_of(rule->tags.begin(), rule->tags.end(), [&](const auto& tag) {
              auto it = m->tags.find(tag.first);
              return it != m->tags.end() && it->second == tag.second;
            })) {
          expiring = rule;
          break;
        }
      }
      if (!expiring) continue;
      if (options_.before_expire) options_.before_expire(bucket.name, object.key);
      // Conditional on the version seen, on the rule's tags, and on the bucket being the
      // one whose rules these are: an object overwritten, or whose matching tag was
      // removed, since it was read here is kept, and so is one of a bucket made again.
      auto pre = index_kv::Precondition::mustMatch(object.version, expiring->tags);
      pre.bucket_created_unix_nanos = bucket.created_unix_nanos;
      auto deleted = index_.deleteObject(bucket.name, object.key, pre);
      if (deleted) {
        ++stats.objects_expired;
      } else if (deleted.error().isCorruption()) {
        // An unreadable stored value: that object stays (an operator's matter), the rest
        // of the bucket does not wait on it.
        ++stats.objects_failed;
        log::warn("lifecycle: {}/{} kept, not deletable: {}", bucket.name, object.key,
                  deleted.error().toString());
      } else if (deleted.error().code() != Status::Code::kPreconditionFailed &&
                 !deleted.error().isNotFound()) {
        return deleted.error();  // else: overwritten or deleted meanwhile, keep it
      }
    }
    if (!page->truncated) break;
    list.start_after = page->next_start_after;
  }
  return Status::ok();
}

Status LifecycleJob::abortUploads(index_kv::BucketInfo& bucket, int64_t now,
                                  LifecycleStats& stats) {
  if (Status st = refresh(bucket); !st.isOk()) return st;  // the rules as they are now
  const int64_t max_age = options_.multipart_max_age.count();
  bool any_rule = false;
  for (const auto& rule : bucket.lifecycle) any_rule |= rule.enabled && rule.abort_incomplete_days;
  if (!any_rule && max_age <= 0) return Status::ok();
  auto due = [&](const index_kv::MultipartUpload& upload) {
    const int64_t age = ageSeconds(now, upload.initiated_unix_nanos);
    if (max_age > 0 && age >= max_age) return true;
    for (const auto& rule : bucket.lifecycle) {
      if (rule.enabled && rule.abort_incomplete_days && upload.key.starts_with(rule.prefix) &&
          daysHavePassed(now, upload.initiated_unix_nanos, *rule.abort_incomplete_days,
                         options_.day_seconds)) {
        return true;
      }
    }
    return false;
  };
  index_kv::ListUploadsRequest list;
  for (;;) {
    if (thread_.stopping()) return Status::ok();
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

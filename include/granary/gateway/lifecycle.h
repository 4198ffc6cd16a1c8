// LifecycleJob: applies buckets' lifecycle configurations (PutBucketLifecycleConfiguration)
// in the background, as S3 does once a day:
//  - Expiration: deletes the objects under a rule's prefix whose last modification is at
//    least `Days` old (or every one of them from the rule's `Date` on), filtered by the
//    rule's tags and sizes. The delete is conditional on the version the job saw and on
//    the rule's tags, so an object overwritten, or untagged, meanwhile is kept.
//    Their blobs go through the GC queue like any delete.
//  - AbortIncompleteMultipartUpload: aborts uploads under a rule's prefix initiated at
//    least `DaysAfterInitiation` ago; and, for every bucket, uploads older than
//    `multipart_max_age` (the operator's backstop for clients that never clean up).
// As in S3, `Days` count from the object's time rounded up to the next midnight UTC.
// start() runs a pass every `interval`; runOnce() runs one now.
// Thread safety: one pass at a time (internally serialised).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "granary/common/periodic_thread.h"
#include "granary/common/status.h"

namespace granary {
class Clock;
}
namespace granary::index_kv {
class Index;
struct BucketInfo;
struct LifecycleRule;
}

namespace granary::gateway {

struct LifecycleOptions {
  std::chrono::seconds interval{3600};
  int64_t day_seconds = 86400;  // the length of a lifecycle "day" (tests shorten it)
  std::chrono::seconds multipart_max_age{7 * 86400};  // 0: no backstop
  // Objects listed a page; the bucket's rules are read again before each page.
  size_t page_keys = 1000;
  // Fault injection for tests: called once the job has chosen an object to expire, just
  // before its conditional delete (a test changes the object there). Unset in production.
  std::function<void(const std::string& bucket, const std::string& key)> before_expire = {};
  // Background passes run only while this answers true (BackgroundLeader::leading);
  // unset: always. Explicit calls do not ask.
  std::function<bool()> leading = {};
};

struct LifecycleStats {
  uint64_t buckets = 0;          // buckets examined
  uint64_t objects_expired = 0;
  uint64_t uploads_aborted = 0;
  uint64_t objects_failed = 0;   // kept because deleting them failed (unreadable values)
  uint64_t buckets_failed = 0;   // left for the next pass after an error (logged)
};

class LifecycleJob {
 public:
  LifecycleJob(index_kv::Index& index, const Clock& clock, LifecycleOptions options);
  ~LifecycleJob();

  Result<LifecycleStats> runOnce();
  void start();
  void stop();

 private:
  // `bucket` as the index has it now; kNotFound if it is gone or was made again since.
  Status refresh(index_kv::BucketInfo& bucket);
  Status expireObjects(index_kv::BucketInfo& bucket, int64_t now, LifecycleStats& stats);
  // The objects under `prefix`, each judged by every rule of `active` (those of `rules`
  // due to expire something) whose prefix it has: one listing for all of them. `changed`
  // set (and the listing left) when the bucket's rules are no longer `rules`.
  Status expireUnder(index_kv::BucketInfo& bucket,
                     const std::vector<index_kv::LifecycleRule>& rules,
                     const std::vector<const index_kv::LifecycleRule*>& active,
                     const std::string& prefix, int64_t now, LifecycleStats& stats,
                     bool& changed);
  Status abortUploads(index_kv::BucketInfo& bucket, int64_t now, LifecycleStats& stats);

  index_kv::Index& index_;
  const Clock& clock_;
  LifecycleOptions options_;
  std::mutex pass_mu_;
  PeriodicThread thread_;
};

}  // namespace granary::gateway

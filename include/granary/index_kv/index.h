// Index: the metadata service. Buckets, object manifests, listing, and the GC queue of
// superseded versions' blobs. One RocksDB (docs/index-format.md) with column families:
//   buckets    bucket name                 -> BucketInfo (CBOR)
//   objects    bucket "/" key              -> ObjectSummary (CBOR; small: what LIST needs)
//   manifests  version id (16 bytes)       -> Manifest (CBOR; stripes, inline body)
//   gc         be64(enqueue ns) + version  -> replaced Manifest's blob list (CBOR)
//   blobrefs   blob version + tag + referrer -> "still referenced" marks (orphan sweep)
//   uploads    bucket "/" key "\0" upload id -> MultipartUpload (CBOR)
//   parts      upload id "/" be32(part)     -> PartInfo (CBOR)
//   records       bucket "/" record key "\0" container key "\0" set + be64(offset) -> row
//   record_sets   record set id (16)        -> RecordSetMeta (which container, since when)
//   record_order  set + be64(offset)        -> record key (a set's rows in container order)
//   record_gc     set                       -> be64(enqueue ns): dead sets to remove
//   users         user name                 -> UserInfo (CBOR): named users and their keys
//
// Record index (docs/record-index.md): the rows of a container hang off a *record set*, an
// id minted per indexing run and named by the container's manifest. A row is visible only
// while the container's current manifest names its set, so overwriting or deleting the
// container hides all its rows in the same commit, however many there are; the dead set's
// rows are removed later, in bounded batches, by collectRecordGarbage().
//
// Contract:
//  - Every mutation is durable when it returns ok (one WAL-synced WriteBatch).
//  - putObject/deleteObject are compare-and-swap on the key's current version: the
//    Precondition is checked and the write applied atomically with respect to every other
//    commit. Concurrent commits from many threads are merged by a commit queue into one
//    synced WriteBatch (group commit), so throughput is not one fsync per object.
//  - When a commit replaces or deletes a version that has blobs, that version's blobs
//    are enqueued on the GC queue in the same batch.
//  - listObjects seeks past whole common prefixes instead of visiting every key under
//    them, and reads only the objects column family.
// Thread safety: all methods are thread safe. Calls block (RocksDB I/O): call them from a
// worker pool, never from an event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "granary/common/ids.h"
#include "granary/common/status.h"
#include "granary/ec/erasure_code.h"

namespace granary {
class Clock;
class RocksResources;
}  // namespace granary

namespace prometheus {
class Registry;
}

namespace granary::index_kv {

// One rule of a bucket's lifecycle configuration (PutBucketLifecycleConfiguration): what the
// lifecycle job applies to the keys under `prefix`.
struct LifecycleRule {
  std::string id;
  bool enabled = true;
  std::string prefix;
  // Expiration: delete objects this many days after their last modification, or (date)
  // from this instant on (Unix seconds, midnight UTC).
  std::optional<int64_t> expiration_days;
  std::optional<int64_t> expiration_date_unix;
  // AbortIncompleteMultipartUpload: abort uploads initiated this many days ago.
  std::optional<int64_t> abort_incomplete_days;
  // The filter beyond the prefix (Filter/Tag, Filter/And, ObjectSize*): every tag here the
  // object must carry with this value, and its size in bytes must be above / below these.
  // Expiration only: S3 refuses them with AbortIncompleteMultipartUpload.
  std::map<std::string, std::string> tags = {};
  std::optional<uint64_t> size_greater_than = {};
  std::optional<uint64_t> size_less_than = {};
  // The versioning actions: NoncurrentVersionExpiration (NoncurrentDays, and
  // NewerNoncurrentVersions) and Expiration/ExpiredObjectDeleteMarker. Kept and answered
  // as set (configuration tools compare what they read back), and no-ops: every object is
  // its one current version, and there are no delete markers.
  std::optional<int64_t> noncurrent_days = {};
  std::optional<int64_t> newer_noncurrent_versions = {};
  std::optional<bool> expired_object_delete_marker = {};
  bool operator==(const LifecycleRule&) const = default;
};

// One rule of a bucket's CORS configuration (PutBucketCors): which cross-origin browser
// requests the gateway allows. Origins and headers may hold one `*` wildcard each.
struct CorsRule {
  std::string id;
  std::vector<std::string> allowed_origins;  // at least one
  std::vector<std::string> allowed_methods;  // GET, PUT, HEAD, POST, DELETE; at least one
  std::vector<std::string> allowed_headers;  // request headers a preflight may name
  std::vector<std::string> expose_headers;   // response headers the browser may read
  std::optional<int64_t> max_age_seconds;    // how long a browser may cache a preflight
  bool operator==(const CorsRule&) const = default;
};

struct BucketInfo {
  std::string name;
  // The owning user: a named user's name, or the root user's access key (buckets made by
  // the root user). The root user may use every bucket; a named user only its own.
  std::string owner;
  int64_t created_unix_nanos = 0;
  // Record indexing of every PUT / multipart upload that does not say otherwise
  // (x-granary-index values; empty: off). docs/record-index.md.
  std::string index_format;
  std::string index_key;
  // Canned ACL public-read: anonymous GET/HEAD of objects and listing are allowed.
  bool public_read = false;
  std::vector<LifecycleRule> lifecycle;  // empty: no lifecycle configuration
  std::vector<CorsRule> cors;            // empty: no CORS configuration
  std::map<std::string, std::string> tags;  // PutBucketTagging; empty: none (NoSuchTagSet)
  // PutBucketVersioning Suspended: GetBucketVersioning says so. Objects keep their one
  // version "null" either way (what S3 does in a suspended bucket); Enabled is not offered.
  bool versioning_suspended = false;
  // PutBucketPolicy: the policy document as the owner sent it (JSON, checked when set;
  // the gateway evaluates it). Empty: none (NoSuchBucketPolicy).
  std::string policy;
  bool operator==(const BucketInfo&) const = default;
};

// A named user (the admin API's `users`): its own key pair, stored in the index so that
// every gateway knows it. The root user is not stored here (it comes from configuration).
struct UserInfo {
  std::string name;
  std::string access_key;
  std::string secret_key;
  int64_t created_unix_nanos = 0;
  bool operator==(const UserInfo&) const = default;
};

// Where one stripe's fragments live. Fragment i of the stripe is blob
// {blob_version, blob_stripe, i} on drive manifest.drives[drives[i]].
struct StripeLayout {
  VersionId blob_version;      // = the manifest's version for a single PUT
  uint32_t blob_stripe = 0;    // stripe number inside blob_version
  uint64_t data_len = 0;       // object bytes in this stripe
  uint32_t fragment_len = 0;   // bytes per fragment (data_len <= k * fragment_len)
  std::vector<uint16_t> drives;  // k + m entries, indices into Manifest::drives
  bool operator==(const StripeLayout&) const = default;
};

// An S3 additional checksum of an object or a part, as the client sees it.
struct ObjectChecksum {
  std::string algorithm;  // "CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"; empty: none
  std::string value;      // base64 of the big-endian checksum; COMPOSITE ones end in "-<parts>"
  std::string type;       // "FULL_OBJECT" or "COMPOSITE"
  bool empty() const { return algorithm.empty(); }
  bool operator==(const ObjectChecksum&) const = default;
};

// The record index of a container version (docs/record-index.md).
struct RecordIndexInfo {
  std::string format;   // "tar", "warc", "warc.gz"; empty when never indexed
  std::string status;   // "indexed", "not-indexable", "malformed"; empty: not asked for
  std::string message;  // why not indexed (or a warning)
  VersionId set;        // the record set holding the rows (zero unless status "indexed")
  uint64_t rows = 0;
  uint64_t row_bytes = 0;  // bytes of keys and values the rows occupy in the index
  bool operator==(const RecordIndexInfo&) const = default;
};

struct Manifest {
  VersionId version;
  uint64_t size = 0;
  std::string etag;  // without quotes
  int64_t mtime_unix_nanos = 0;
  std::string content_type;
  std::map<std::string, std::string> metadata;  // x-amz-meta-* (names lower-case, no prefix)
  std::map<std::string, std::string> headers;   // stored system headers (Content-Encoding..)
  // Object tags (x-amz-tagging, PutObjectTagging): at most 10, keys unique. Changing them
  // keeps the version, and so the ETag and Last-Modified (Index::updateObjectTags).
  std::map<std::string, std::string> tags;
  ec::EcProfile ec;
  bool is_inline = false;
  std::string inline_data;               // the whole body when is_inline
  std::vector<std::string> drives;       // drive id table
  std::vector<StripeLayout> stripes;     // in object order
  ObjectChecksum checksum;               // verified or computed at write time; may be empty
  RecordIndexInfo records;               // the container's record index, if any
  // The multipart upload whose Complete made this version; empty for other writes. A
  // retried Complete finds its answer by it (tag updates and repairs keep it).
  std::string upload_id;
  bool operator==(const Manifest&) const = default;
};

struct ObjectSummary {
  std::string key;
  uint64_t size = 0;
  std::string etag;
  int64_t mtime_unix_nanos = 0;
  VersionId version;
  VersionId record_set;  // = the manifest's records.set (zero: no visible rows)
  // False when the manifest names no blobs (an inline or empty object): replacing or
  // deleting the object then reclaims nothing but its rows, and the index does not read
  // the manifest to find out. True when not known (summaries written before the flag).
  bool names_blobs = true;
};

// One record of a container: where its unit lies in the container version.
struct RecordRow {
  std::string key;        // record key (tar member name, WARC-Target-URI, ...); no NUL
  std::string container;  // the container's object key
  VersionId set;          // the record set the row belongs to
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc32c = 0;    // of container bytes [offset, offset + length)
  std::string type;       // WARC-Type; empty for tar members
  bool operator==(const RecordRow&) const = default;
};

// Record keys are 1..kMaxRecordKey bytes without NUL (the row key layout needs it);
// kInvalidArgument otherwise. Writers of rows (indexers, batch insert) check with this.
inline constexpr size_t kMaxRecordKey = 8192;
Status checkRecordKey(std::string_view key);

// Bytes one row occupies in the index's record column families (keys and values, before
// compression): what RecordIndexInfo::row_bytes adds up.
uint64_t recordRowBytes(std::string_view bucket, const RecordRow& row);

// Where a listing of one set in container order resumes: after the row (offset, key), or,
// with an empty key, after every row at `offset`.
struct RecordCursor {
  uint64_t offset = 0;
  std::string key;
};

// A visible row plus what the reader needs about its container.
struct RecordLocation {
  RecordRow row;
  VersionId container_version;
  int64_t container_mtime_unix_nanos = 0;
};

struct RecordQuery {
  // Exactly one of: `key` (every location of that record key) or `prefix` (record keys
  // starting with it; empty prefix: all).
  std::optional<std::string> key;
  std::string prefix;
  std::string container;   // only rows of this container (empty: any)
  std::string type;        // WARC rows must have this type (empty: any); untyped rows pass
  // With `key` and `container`: only the row at this offset of the container's visible
  // set, looked up directly (however many rows the key has there).
  std::optional<uint64_t> offset;
  std::string start_after; // an opaque position from a previous page (RecordPage::next)
  size_t limit = 1000;
  size_t max_examined = 100000;  // rows looked at (visible or not) before a page ends early
};

struct RecordPage {
  std::vector<RecordLocation> records;  // in (record key, container, set, offset) order
  bool truncated = false;
  std::string next;  // when truncated: pass as start_after
};

// What the index occupies (RocksDB estimates), for the metrics endpoint.
struct IndexStorageStats {
  uint64_t sst_bytes = 0;        // table files on disk, all column families
  uint64_t memtable_bytes = 0;   // memtables in memory
  uint64_t live_data_bytes = 0;  // estimate of the live data in them
};

// Size of the record index (RocksDB estimates: cheap, approximate).
struct RecordIndexStats {
  uint64_t rows = 0;        // rows stored, visible or waiting for removal
  uint64_t bytes = 0;       // bytes of the record column families (SST + memtables)
  uint64_t sets = 0;        // record sets (indexed container versions and runs in progress)
  uint64_t dead_sets = 0;   // sets waiting for their rows to be removed
};

// The index's group commit since it opened: each batch is one synced RocksDB write.
// Counts since the index opened, at opened_unix_nanos (0 from a server that does not say).
struct IndexCommitStats {
  uint64_t batches = 0;   // synced batches written
  uint64_t requests = 0;  // write requests the batches completed (successfully or not)
  uint64_t opened_unix_nanos = 0;
  uint64_t failed_writes = 0;  // batches whose RocksDB write failed
  // The latest batch's write failed. After a hard error (a WAL sync that failed) RocksDB
  // refuses every write until the index restarts, and this stays true: reads go on, but
  // nothing can be written.
  bool failing = false;
};

struct RecordGcStats {
  uint64_t rows_removed = 0;
  uint64_t sets_removed = 0;
};

struct ListRequest {
  std::string prefix;
  std::string delimiter;     // empty: no grouping
  std::string start_after;   // exclusive; also used for continuation tokens and markers
  size_t max_keys = 1000;    // objects + common prefixes returned, at most
};

struct ListResult {
  std::vector<ObjectSummary> objects;
  std::vector<std::string> common_prefixes;
  bool truncated = false;
  std::string next_start_after;  // when truncated: the last key or prefix returned
  uint64_t keys_examined = 0;    // iterator positions visited (to prove prefix skipping)
};

// Condition on the key's current version for putObject/deleteObject.
struct Precondition {
  enum class Kind { kNone, kMustNotExist, kMustMatch } kind = Kind::kNone;
  VersionId version;  // for kMustMatch
  // kMustMatch only: the current version must also carry each of these tags with this
  // value (checked with the version, in the same batch). The lifecycle job's tag rules
  // delete on it: a tag change keeps the version, so the version alone cannot tell that
  // the tag the rule matched was removed meanwhile.
  std::map<std::string, std::string> tags = {};
  // Any kind: when non-zero, the bucket must be the one created at this instant (its
  // BucketInfo.created_unix_nanos), not one of the same name deleted and created again
  // since the gateway judged the request (kNotFound otherwise, as for no bucket).
  int64_t bucket_created_unix_nanos = 0;
  static Precondition none() { return {}; }
  static Precondition mustNotExist() { return {Kind::kMustNotExist, {}}; }
  static Precondition mustMatch(VersionId v, std::map<std::string, std::string> tags = {}) {
    return {Kind::kMustMatch, v, std::move(tags)};
  }
};

struct BlobRef {
  std::string drive;
  BlobId id;
  bool operator==(const BlobRef&) const = default;
};

struct GcEntry {
  std::string queue_key;  // opaque; pass back to gcDone
  VersionId version;
  int64_t enqueued_unix_nanos = 0;
  std::vector<BlobRef> blobs;
};

// A multipart upload in progress (CreateMultipartUpload .. Complete/Abort).
struct MultipartUpload {
  std::string upload_id;  // opaque to clients: the hex of a VersionId minted at creation
  std::string bucket;
  std::string key;
  std::string owner;
  int64_t initiated_unix_nanos = 0;
  // Applied to the object at completion (from the CreateMultipartUpload request).
  std::string content_type;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> headers;
  std::map<std::string, std::string> tags;  // the create request's x-amz-tagging
  // x-amz-checksum-algorithm / x-amz-checksum-type of the create request ("" when absent).
  std::string checksum_algorithm;
  std::string checksum_type;
  // Record indexing asked for at creation (x-granary-index, x-granary-index-key): done at
  // completion. Empty: none.
  std::string index_format;
  std::string index_key;
  bool operator==(const MultipartUpload&) const = default;
};

// One uploaded part. Its bytes are stripes of blob version `version` (always striped, never
// inline), exactly like a single PUT's; Complete references those stripes without copying.
struct PartInfo {
  uint32_t part_number = 0;  // 1..10000
  uint64_t size = 0;
  std::string etag;          // MD5 hex of the part, without quotes
  int64_t mtime_unix_nanos = 0;
  VersionId version;
  std::vector<std::string> drives;    // drive id table
  std::vector<StripeLayout> stripes;  // blob_version == version
  ObjectChecksum checksum;            // the part's own checksum (type FULL_OBJECT); may be empty
  // The code its stripes were written with (the writing gateway's map). The completed
  // object takes it: decoding with another profile's matrix returns wrong bytes. {0, 0} in
  // a part stored before parts recorded it.
  ec::EcProfile ec{0, 0};
  bool operator==(const PartInfo&) const = default;
};

struct ListUploadsRequest {
  std::string prefix;
  std::string key_marker;        // exclusive, with upload_id_marker as in S3
  std::string upload_id_marker;
  size_t max_uploads = 1000;
};

struct ListUploadsResult {
  std::vector<MultipartUpload> uploads;  // ordered by (key, initiation time, upload id)
  bool truncated = false;
};

class Index {
 public:
  virtual ~Index() = default;

  // kAlreadyExists if the bucket exists.
  virtual Status createBucket(const BucketInfo& bucket) = 0;
  virtual Result<BucketInfo> getBucket(std::string_view name) = 0;
  // getBucket's answer if it can be had without blocking on I/O, as getObjectFromMemory
  // below. The default never answers.
  virtual std::optional<Result<BucketInfo>> getBucketFromMemory(std::string_view /*name*/) {
    return std::nullopt;
  }
  // Every bucket, in name order (byte-wise): ListBuckets pages by name.
  virtual Result<std::vector<BucketInfo>> listBuckets() = 0;
  // Replaces a bucket's settings with `bucket`'s (owner and creation time are kept) if
  // the stored bucket still equals `expected`, what the caller read and changed:
  // kPreconditionFailed when another change came first (read again and retry), so that
  // two changes of different settings never undo each other. kNotFound.
  virtual Status updateBucket(const BucketInfo& bucket, const BucketInfo& expected) = 0;
  // kNotFound, or kNotEmpty while the bucket holds objects or multipart uploads.
  // `created_unix_nanos` as Precondition::bucket_created_unix_nanos (0: any bucket of that
  // name): a request judged against one bucket must not delete another made since.
  virtual Status deleteBucket(std::string_view name, int64_t created_unix_nanos) = 0;

  // Named users. createUser: kAlreadyExists if the name or the access key is taken;
  // kInvalidArgument for an empty name or key. deleteUser: kNotFound.
  virtual Status createUser(const UserInfo& user) = 0;
  virtual Result<std::vector<UserInfo>> listUsers() = 0;
  virtual Status deleteUser(std::string_view name) = 0;

  // Commits `manifest` as the current version of bucket/key. Returns the version it
  // replaced, if any. kNotFound if the bucket does not exist; kPreconditionFailed if the
  // precondition does not hold.
  virtual Result<std::optional<VersionId>> putObject(std::string_view bucket,
                                                     std::string_view key,
                                                     const Manifest& manifest,
                                                     Precondition pre) = 0;
  // putObject and deleteObject without a thread that waits for the commit: `done` gets
  // what the synchronous call would return, exactly once. Where asyncCommits() is true,
  // these return at once and `done` runs on the index's committer thread, so it must not
  // block (post to an event loop); a request refused before it is queued (a bad name, an
  // empty key, an invalid manifest, a queue shutting down) is answered on the calling
  // thread. Elsewhere (the default) they are the synchronous call followed by `done` on
  // the calling thread, which blocks: callers on an event loop ask asyncCommits() first
  // and hand the synchronous call to a worker thread otherwise. putObjectAsync takes the
  // manifest by value: it may outlive the caller's.
  using CommitDone = std::move_only_function<void(Result<std::optional<VersionId>>)>;
  virtual bool asyncCommits() const { return false; }
  virtual void putObjectAsync(std::string_view bucket, std::string_view key, Manifest manifest,
                              Precondition pre, CommitDone done) {
    done(putObject(bucket, key, manifest, pre));
  }
  virtual void deleteObjectAsync(std::string_view bucket, std::string_view key,
                                 Precondition pre, CommitDone done) {
    done(deleteObject(bucket, key, pre));
  }
  // Repair and rebalance: replaces the manifest of bucket/key's current version with
  // `updated`, a copy of `expected` whose fragments moved (only `drives` and `stripes` may
  // differ; kInvalidArgument otherwise), if the key's current manifest still equals
  // `expected`: kPreconditionFailed if it was overwritten, deleted, or changed meanwhile
  // (another repairer, records attached), kNotFound if the bucket or key is gone. The
  // fragment locations `expected` has and `updated` no longer has go on the GC queue in
  // the same batch.
  virtual Status relocateFragments(std::string_view bucket, std::string_view key,
                                   const Manifest& expected, const Manifest& updated) = 0;
  // PutObjectTagging and DeleteObjectTagging: as relocateFragments, but `updated` may
  // differ from `expected` only in its `tags` (kInvalidArgument otherwise). The version,
  // and so the ETag and Last-Modified, stay; nothing is reclaimed.
  virtual Status updateObjectTags(std::string_view bucket, std::string_view key,
                                  const Manifest& expected, const Manifest& updated) = 0;
  // The GC's guard: which of `among` (a GC entry's locations) a live row names, among the
  // rows that use blobs of `version`: the committed manifest of that version (a key's
  // current one), each part row of an upload in progress whose blobs are of it, and each
  // committed manifest using them (a completed upload's). In `among`'s order; empty when
  // none. A queued location a live row uses again (a repair moved the fragment back) must
  // not be removed. The answer is never larger than the question, whatever the rows' size.
  virtual Result<std::vector<BlobRef>> blobsInUse(const VersionId& version,
                                                  const std::vector<BlobRef>& among) = 0;
  // kNotFound if the bucket or the key does not exist.
  virtual Result<Manifest> getObject(std::string_view bucket, std::string_view key) = 0;
  // getObject's answer if it can be had without blocking on I/O (from memory: RocksDB's
  // memtables and block cache), nullopt if finding it would read a file. Event loops call
  // this first and hand only misses to a worker thread: a hot lookup then costs no thread
  // hop. The default never answers.
  virtual std::optional<Result<Manifest>> getObjectFromMemory(std::string_view /*bucket*/,
                                                              std::string_view /*key*/) {
    return std::nullopt;
  }
  // Removes the key; returns the removed version (nullopt if the key did not exist: S3
  // DELETE of a missing key succeeds). kNotFound if the bucket does not exist.
  virtual Result<std::optional<VersionId>> deleteObject(std::string_view bucket,
                                                        std::string_view key,
                                                        Precondition pre) = 0;
  virtual Result<ListResult> listObjects(std::string_view bucket, const ListRequest& req) = 0;

  // GC queue: entries enqueued at or before `enqueued_before_unix_nanos`, oldest first;
  // those after the entry whose queue_key is `after` when given (the next page: entries
  // that cannot finish yet, a drive down, must not hide those behind them). At most
  // `limit` entries, and a page may end before it (IndexOptions::gc_page_blobs): only an
  // empty page says that no entry is left.
  virtual Result<std::vector<GcEntry>> gcDue(int64_t enqueued_before_unix_nanos, size_t limit,
                                             std::string_view after = {}) = 0;
  virtual Status gcDone(const std::vector<GcEntry>& entries) = 0;
  // True if blobs of `version` may still be needed: a committed manifest references them,
  // they belong to a part of an upload in progress, or they wait on the GC queue; or the
  // version was created before this index (createdUnixNanos), which therefore cannot know.
  // Used by the orphan sweep.
  virtual Result<bool> isBlobVersionReferenced(const VersionId& version) = 0;
  // The orphan sweep's fence, asked before it removes an unreferenced version's fragments.
  // In one commit (so atomically with every other commit): if nothing references
  // `version` (as isBlobVersionReferenced), marks it dead and answers true, and its
  // fragments may go; if something does, answers false. A dead version is never committed
  // after: putObject and putPart naming blobs of it fail kTimeout (the write outlived the
  // orphan grace; S3: retry), so a late commit cannot publish fragments a sweep removes.
  // Idempotent: true again for a version already dead. A mark is kept 7 days past the
  // version's creation (kDeadVersionRetention), longer than any PUT may take.
  virtual Result<bool> markVersionDead(const VersionId& version) = 0;
  // When this index began, as the orphan sweep needs it: blob versions created before it
  // may belong to objects it never heard of (a new, empty index put where a lost one was),
  // so it never calls them unreferenced. 0: it knows them all (an index made before this
  // field existed, or one rebuilt from the drives: IndexOptions::creation). A new index
  // records its clock's time plus a margin for the gateways' clocks being ahead of it.
  virtual Result<int64_t> createdUnixNanos() = 0;
  // A lease among the gateways (which one runs the background passes: GC, sweep,
  // lifecycle, repair). True if `holder` now holds lease `name` for `ttl` from now by the
  // index's monotonic clock (taken or renewed); false if another holder's has not expired.
  // `ttl` 0 gives the lease up if `holder` holds it (false). Leases live in the index's memory
  // only: after its restart the first to ask gets one (at worst two passes overlap for a
  // while, which every pass tolerates). kInvalidArgument for an empty or long name or
  // holder (64, 256 bytes), a ttl over an hour, or past 1024 live leases.
  virtual Result<bool> holdLease(std::string_view name, std::string_view holder,
                                 std::chrono::milliseconds ttl) = 0;

  // --- Multipart uploads. Every mutation goes through the commit queue like the others.
  // kNotFound if the bucket does not exist (or, with a non-zero `bucket_created_unix_nanos`,
  // is not the one created then: Precondition::bucket_created_unix_nanos); kAlreadyExists
  // if the upload id is taken.
  virtual Status createUpload(const MultipartUpload& upload,
                              int64_t bucket_created_unix_nanos) = 0;
  // kNotFound if no such upload for bucket/key (S3: NoSuchUpload).
  virtual Result<MultipartUpload> getUpload(std::string_view bucket, std::string_view key,
                                            std::string_view upload_id) = 0;
  // Records a part, replacing a part with the same number (whose blobs go on the GC queue
  // in the same batch). Returns the replaced part's version. kNotFound if the upload is
  // gone (completed or aborted meanwhile: the caller then removes the part's blobs).
  virtual Result<std::optional<VersionId>> putPart(std::string_view bucket, std::string_view key,
                                                   std::string_view upload_id,
                                                   const PartInfo& part) = 0;
  // Repair and drain of a part (as relocateFragments for an object): replaces the part
  // row `expected` of the upload with `updated`, a copy whose fragments moved (only
  // `drives` and the stripes' drives may differ; kInvalidArgument otherwise), if the row
  // still equals `expected`: kPreconditionFailed if the part was replaced meanwhile,
  // kNotFound if the upload is gone (completed or aborted). The locations `expected` has
  // and `updated` no longer has go on the GC queue in the same batch.
  virtual Status relocatePartFragments(std::string_view bucket, std::string_view key,
                                       std::string_view upload_id, const PartInfo& expected,
                                       const PartInfo& updated) = 0;
  // Parts in part-number order, numbers > `after_part`, at most `max_parts`.
  virtual Result<std::vector<PartInfo>> listParts(std::string_view bucket, std::string_view key,
                                                  std::string_view upload_id,
                                                  uint32_t after_part, size_t max_parts) = 0;
  virtual Result<ListUploadsResult> listUploads(std::string_view bucket,
                                                const ListUploadsRequest& req) = 0;
  // Atomically: checks the upload exists (kNotFound) and `pre` on the key; commits
  // `manifest` as putObject does (the replaced version's blobs go on the GC queue); removes
  // the upload and all its part rows; puts the blobs of every part whose version the
  // manifest's stripes do not reference on the GC queue; records that the manifest
  // references the part versions it uses. Returns the replaced version of the key.
  // kInvalidArgument if a stripe uses a part version that is no longer a current part of
  // the upload (a part was replaced after the caller listed the parts). A fragment a
  // repair moved since then (relocatePartFragments) is recorded where the part row has
  // it now, not where `manifest` says.
  virtual Result<std::optional<VersionId>> completeUpload(std::string_view bucket,
                                                          std::string_view key,
                                                          std::string_view upload_id,
                                                          const Manifest& manifest,
                                                          Precondition pre) = 0;
  // Removes the upload and its parts; every part's blobs go on the GC queue. kNotFound if
  // no such upload.
  virtual Status abortUpload(std::string_view bucket, std::string_view key,
                             std::string_view upload_id) = 0;

  // --- Record index (docs/record-index.md).
  // Creates an empty record set for container bucket/`container` (a fresh id per
  // indexing run); kAlreadyExists if the id is taken.
  virtual Status createRecordSet(std::string_view bucket, std::string_view container,
                                 const VersionId& set) = 0;
  // Stores rows of record set `set`, created by createRecordSet for this container (each
  // row's container and set fields must match); refreshes the set's last-write time, which
  // the orphan sweep reads. Rows stay invisible until a manifest naming the set is
  // committed (putObject/completeUpload with manifest.records.set, or attachRecords). Not
  // synced on its own: the commit that publishes the set syncs the WAL, which holds these
  // writes before it. kInvalidArgument for a key with NUL or empty; kPreconditionFailed
  // if the set is dead or gone (swept as an orphan).
  virtual Status putRecordRows(std::string_view bucket, std::string_view container,
                               const VersionId& set, const std::vector<RecordRow>& rows) = 0;
  // Publishes (more) rows of `set` for the container's current version `version`: sets
  // manifest.records to `info` (status "indexed", info.set == set) if the version has no
  // set yet, or adds info.rows/row_bytes if it already names `set`. kPreconditionFailed if
  // `version` is no longer current or names another set; the set is then marked dead.
  virtual Result<RecordIndexInfo> attachRecords(std::string_view bucket,
                                                std::string_view container,
                                                const VersionId& version,
                                                const RecordIndexInfo& info) = 0;
  // Marks a set dead (an indexing run that failed or lost its commit): its rows go.
  virtual Status abandonRecords(const VersionId& set) = 0;
  // Visible rows matching `query`.
  virtual Result<RecordPage> listRecords(std::string_view bucket, const RecordQuery& query) = 0;
  // Rows of one set in container order (by offset, then record key: several keys can
  // name one unit), after `after` (all when nullopt).
  virtual Result<std::vector<RecordRow>> setRecords(const VersionId& set,
                                                    const std::optional<RecordCursor>& after,
                                                    size_t limit) = 0;
  // Removes rows of dead sets, at most `max_rows` rows per call, in batches; and marks
  // dead the sets older than `orphan_before_unix_nanos` that no manifest names (an
  // indexing run that crashed before its commit); orphan_before_unix_nanos <= 0 skips
  // that scan of every set.
  virtual Result<RecordGcStats> collectRecordGarbage(size_t max_rows,
                                                     int64_t orphan_before_unix_nanos) = 0;
  // Statistics (estimates). An index service that cannot be reached is an error, never
  // zeros: a metric must not show an outage as an empty index.
  virtual Result<RecordIndexStats> recordIndexStats() = 0;
  virtual Result<IndexStorageStats> storageStats() { return IndexStorageStats{}; }
  virtual Result<IndexCommitStats> commitStats() { return IndexCommitStats{}; }
  // A consistent copy of the whole index as RocksDB files in `dir` (which must not exist;
  // created on the index's filesystem, hard links where possible): openIndex on it opens
  // the index as of this call. Only where the database is (kInvalidArgument elsewhere, e.g. over RPC).
  virtual Status checkpoint(const std::string& /*dir*/) {
    return Status::invalidArgument("checkpoints are made where the index runs");
  }
};

// Wraps `inner` so that every call is counted in `registry`:
// granary_index_operations_total{op}, granary_index_errors_total{op} (failures other than
// kNotFound and kPreconditionFailed, which are answers) and the
// granary_index_operation_duration_seconds{op} histogram.
std::unique_ptr<Index> makeMeteredIndex(std::unique_ptr<Index> inner,
                                        prometheus::Registry& registry);

struct IndexOptions {
  std::string dir;
  size_t max_batch = 512;  // commits merged into one WriteBatch at most
  // What the index records as its creation time (createdUnixNanos, the orphan sweep's
  // guard; see Index). kNormal: a new index (an empty directory) records when it began.
  // kRebuilding (rebuild-index, while it scans the drives): the index answers as one that
  // knows every blob (0), so that the rebuild sees only real references, but records now
  // (as a new index, a restored checkpoint's time replaced), should the rebuild not
  // finish. kRebuilt (once the rebuild finished without errors): records 0, for good.
  enum class Creation { kNormal, kRebuilding, kRebuilt };
  Creation creation = Creation::kNormal;
  // How far ahead of the clock a new index records its creation: a gateway whose clock
  // runs ahead of the index host's (the internal API accepts 15 minutes of skew) mints
  // versions "after" a creation they came before. The cost: orphans of a new index's
  // first minutes are never swept, nor its checkpoints of those minutes pruned. 0 where
  // one clock serves both (granary serve) and in tests.
  std::chrono::seconds new_index_margin{16 * 60};
  // gcDue's page: past its first entry, at most this many blob references in all (an
  // entry of a 1 TiB object names 1.5 million: a page of 256 such would be gigabytes, and
  // over the internal API's answer limit, stopping every GC pass at it).
  size_t gc_page_blobs = size_t{1} << 18;
};

// `resources` and `clock` must outlive the index.
Result<std::unique_ptr<Index>> openIndex(const IndexOptions& options, RocksResources& resources,
                                         const Clock& clock);

}  // namespace granary::index_kv

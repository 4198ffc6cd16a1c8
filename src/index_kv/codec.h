// Key and value encodings of the index's RocksDB (the format is docs/index-format.md; keep
// the two in step). Values are CBOR maps with short field names. Every decode function
// returns kCorruption on bad bytes and never throws or crashes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/ids.h"
#include "granary/common/status.h"
#include "granary/index_kv/index.h"

namespace granary::index_kv {

// ---- keys ----------------------------------------------------------------------------

// objects CF: bucket "/" key. Bucket names never contain '/', so one bucket's keys are the
// range [bucketBegin(b), bucketEnd(b)) = [b + "/", b + "0") ('0' is '/' + 1).
std::string objectKey(std::string_view bucket, std::string_view key);
std::string bucketBegin(std::string_view bucket);
std::string bucketEnd(std::string_view bucket);

// manifests CF: the 16 version bytes.
std::string versionKey(const VersionId& version);
Result<VersionId> parseVersionKey(std::string_view key);

// gc CF: be64(enqueue unix nanos) + 16 version bytes: the queue sorts oldest first.
inline constexpr size_t kGcKeySize = 24;
std::string gcKey(int64_t enqueued_unix_nanos, const VersionId& version);
struct GcKeyParts {
  int64_t enqueued_unix_nanos = 0;
  VersionId version;
};
Result<GcKeyParts> parseGcKey(std::string_view key);

// blobrefs CF: blob version (16) + tag + referrer. Any row starting with a version's 16
// bytes means that version's blobs are still referenced.
inline constexpr char kBlobRefManifestTag = 'm';  // + owning manifest version (16 bytes)
inline constexpr char kBlobRefGcTag = 'g';        // + gc queue key (24 bytes)
std::string blobRefManifestKey(const VersionId& blob_version, const VersionId& owner);
std::string blobRefGcKey(const VersionId& blob_version, std::string_view gc_key);

// The smallest string greater than every string that starts with `prefix`: increment the
// last byte that is not 0xFF and drop what follows it. Empty when there is none (the
// prefix is empty or all 0xFF).
std::string prefixSuccessor(std::string_view prefix);

// ---- values --------------------------------------------------------------------------

std::string encodeBucket(const BucketInfo& bucket);
Result<BucketInfo> decodeBucket(std::string_view value);

// The summary value does not repeat the key: decodeSummary takes it from the caller.
std::string encodeSummary(const ObjectSummary& summary);
Result<ObjectSummary> decodeSummary(std::string_view key, std::string_view value);

std::string encodeManifest(const Manifest& manifest);
Result<Manifest> decodeManifest(std::string_view value);

std::string encodeGcBlobs(const std::vector<BlobRef>& blobs);
Result<std::vector<BlobRef>> decodeGcBlobs(std::string_view value);

// ---- manifest helpers ----------------------------------------------------------------

// kInvalidArgument unless the EC profile fits and every stripe names k + m drives that
// exist in the manifest's drive table.
Status validateManifest(const Manifest& manifest);
// Every fragment of every stripe: {drives[stripe.drives[i]], {blob_version, blob_stripe,
// i}} for i in 0..k+m-1. Entries with out-of-range drive indices are skipped.
std::vector<BlobRef> manifestBlobs(const Manifest& manifest);
// Distinct stripe blob versions other than the manifest's own version, sorted.
std::vector<VersionId> foreignBlobVersions(const Manifest& manifest);

}  // namespace granary::index_kv

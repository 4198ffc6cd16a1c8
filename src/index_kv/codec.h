// Key and value encodings of the index's RocksDB (the format is docs/index-format.md; keep
// the two in step). Values are CBOR maps with short field names. Every decode function
// returns kCorruption on bad bytes and never throws or crashes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/ids.h"
#include "granary/common/status.h"
#include "granary/index_kv/index.h"
#include "granary/index_kv/manifest_blobs.h"

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
inline constexpr char kBlobRefPartTag = 'p';      // + parts key (upload id "/" be32 part)
std::string blobRefManifestKey(const VersionId& blob_version, const VersionId& owner);
std::string blobRefGcKey(const VersionId& blob_version, std::string_view gc_key);
std::string blobRefPartKey(const VersionId& blob_version, std::string_view part_key);

// uploads CF: bucket "/" key "\0" upload id. One bucket's uploads are the range
// [bucketBegin(b), bucketEnd(b)), ordered by (key, upload id). Upload ids never contain
// '/' or '\0' (checkUploadId), so the upload id is what follows the last '\0'.
std::string uploadKey(std::string_view bucket, std::string_view key,
                      std::string_view upload_id);
struct UploadKeyParts {
  std::string bucket;
  std::string key;
  std::string upload_id;
};
Result<UploadKeyParts> parseUploadKey(std::string_view row_key);
// kInvalidArgument unless non-empty and free of '/' and '\0'.
Status checkUploadId(std::string_view upload_id);

// parts CF: upload id "/" be32(part number). One upload's parts are the range
// [partKey(u, 1), partsEnd(u)), in part-number order. partKey(u, 0) is the upload id's
// owner row (value: the upload's uploads key): it makes upload ids unique across keys.
std::string partKey(std::string_view upload_id, uint32_t part_number);
std::string partsBegin(std::string_view upload_id);
std::string partsEnd(std::string_view upload_id);

// The smallest string greater than every string that starts with `prefix`: increment the
// last byte that is not 0xFF and drop what follows it. Empty when there is none (the
// prefix is empty or all 0xFF).
std::string prefixSuccessor(std::string_view prefix);

// ---- values --------------------------------------------------------------------------

std::string encodeBucket(const BucketInfo& bucket);
Result<BucketInfo> decodeBucket(std::string_view value);

std::string encodeUser(const UserInfo& user);
Result<UserInfo> decodeUser(std::string_view value);

// The summary value does not repeat the key: decodeSummary takes it from the caller.
std::string encodeSummary(const ObjectSummary& summary);
// The summary row of `manifest` (its key left empty).
ObjectSummary summaryOf(const Manifest& manifest);
Result<ObjectSummary> decodeSummary(std::string_view key, std::string_view value);

std::string encodeManifest(const Manifest& manifest);
Result<Manifest> decodeManifest(std::string_view value);

std::string encodeGcBlobs(std::span<const BlobRef> blobs);
Result<std::vector<BlobRef>> decodeGcBlobs(std::string_view value);

std::string encodeUpload(const MultipartUpload& upload);
Result<MultipartUpload> decodeUpload(std::string_view value);

std::string encodePart(const PartInfo& part);
Result<PartInfo> decodePart(std::string_view value);

// ---- manifest helpers ----------------------------------------------------------------

// kInvalidArgument unless the EC profile fits and every stripe names k + m drives that
// exist in the manifest's drive table.
Status validateManifest(const Manifest& manifest);
// kInvalidArgument unless 1 <= part_number <= 10000, every stripe's blob_version is the
// part's version and every drive index exists in the part's drive table.
Status validatePart(const PartInfo& part);
// Distinct stripe blob versions other than the manifest's own version, sorted.
std::vector<VersionId> foreignBlobVersions(const Manifest& manifest);
// `blobs` less every one `kept` names too, drive and id alike (a fragment moved to another
// drive is not kept: its old place is reclaimed). Sorts `kept` and looks each blob up in
// it: the commit thread runs this over every blob of an object that is rewritten (a
// 100 GiB object has some 150,000), where a scan of `kept` per blob takes tens of seconds.
std::vector<BlobRef> blobsNotIn(std::vector<BlobRef> blobs, std::vector<BlobRef> kept);

}  // namespace granary::index_kv

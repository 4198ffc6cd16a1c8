// S3 XML bodies: responses written with XmlWriter (xml_writer.h), request bodies parsed
// with pugixml (well-formedness and entity decoding are the library's job, not ours).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "granary/index_kv/index.h"
#include "s3_error.h"
#include "xml_writer.h"

namespace granary::gateway {

// This host's id: the x-amz-id-2 header of every answer and the <HostId> of error bodies
// (AWS's id of the host that served a request, which users quote to support): the
// SHA-256 of the host name, in hex, as MinIO gives it.
const std::string& hostId();

std::string errorXml(const S3Error& error, std::string_view resource,
                     std::string_view request_id);

// One page of ListBuckets: the caller's buckets (in name order), the prefix asked for and,
// when more follow, the token that continues after the last.
struct ListBucketsPage {
  std::vector<index_kv::BucketInfo> buckets;
  std::string owner_id;
  std::string region;  // every bucket's BucketRegion
  std::string prefix;  // echoed when not empty
  std::string continuation_token;
};
std::string listBucketsXml(const ListBucketsPage& page);

// ListObjects (marker), ListObjectsV2 (continuation token), ListObjectVersions (key and
// version-id markers; every object is its one version, "null").
enum class ListKind { kV1, kV2, kVersions };

struct ListObjectsParams {
  ListKind kind = ListKind::kV2;
  std::string bucket;
  std::string prefix;
  std::string delimiter;
  std::string marker;              // v1 Marker, v2 StartAfter, versions KeyMarker
  std::string version_id_marker;   // versions: "" or "null", as received
  std::string continuation_token;  // v2, as received
  // When truncated: v2 NextContinuationToken, v1 NextMarker, versions NextKeyMarker.
  std::string next_token;
  size_t max_keys = 1000;
  bool url_encode = false;         // encoding-type=url
  bool fetch_owner = false;
  std::string owner_id;
};

std::string listObjectsXml(const ListObjectsParams& params, const index_kv::ListResult& result);

std::string locationXml(std::string_view region);

// PutBucketVersioning's <VersioningConfiguration><Status>Enabled|Suspended</Status>
// <MfaDelete>Enabled|Disabled</MfaDelete>: true for Suspended. MalformedXML for anything
// else; NotImplemented for Enabled and MfaDelete Enabled (one version per key).
S3Result<bool> parseVersioningSuspended(std::string_view body);
// GetBucketVersioning: <Status>Suspended</Status>, or nothing (never enabled).
std::string versioningXml(bool suspended);

// POST Object's answer to success_action_status 201.
std::string postResponseXml(std::string_view location, std::string_view bucket,
                            std::string_view key, std::string_view quoted_etag);

// --- Object tags (S3's rules: at most 10 a object, keys of 1 to 128 characters and values
// of up to 256, unique keys, no "aws:" prefix, ASCII limited to letters, digits, spaces
// and _ . : / = + - @; other characters must be UTF-8).
inline constexpr size_t kMaxObjectTags = 10;
inline constexpr size_t kMaxBucketTags = 50;  // PutBucketTagging: the same rules, 50 tags
using TagSet = std::map<std::string, std::string>;
// PutObjectTagging's (and PutBucketTagging's, with kMaxBucketTags) <Tagging><TagSet><Tag>
// <Key>k</Key><Value>v</Value></Tag>...: MalformedXML for bad XML or a Tag without a Key
// or Value; InvalidTag for a tag S3 refuses, a repeated key or more than `max_tags`.
S3Result<TagSet> parseTagging(std::string_view body, size_t max_tags = kMaxObjectTags);
// The x-amz-tagging header of PutObject, CreateMultipartUpload and CopyObject:
// "k1=v1&k2=v2", URL-encoded. InvalidArgument when it does not decode or a key repeats;
// InvalidTag for a tag S3 refuses.
S3Result<TagSet> parseTaggingHeader(std::string_view value);
// GetObjectTagging's <Tagging><TagSet>...: keys in order.
std::string taggingXml(const TagSet& tags);

// GetObjectAttributes: the attributes asked for (x-amz-object-attributes), in S3's order.
struct ObjectAttributesRequest {
  bool etag = false;
  bool checksum = false;
  bool object_parts = false;
  bool storage_class = false;
  bool object_size = false;
};
std::string objectAttributesXml(const ObjectAttributesRequest& want,
                                const index_kv::Manifest& manifest);

// With the copy's checksum (Checksum<ALGORITHM>, and ChecksumType for an object) unless empty.
std::string copyObjectResultXml(std::string_view etag, int64_t mtime_unix_nanos,
                                const index_kv::ObjectChecksum& checksum);
std::string copyPartResultXml(std::string_view etag, int64_t mtime_unix_nanos,
                              const index_kv::ObjectChecksum& checksum);

struct ObjectIdentifier {
  std::string key;
  std::optional<std::string> version_id;  // <VersionId>, when sent
  std::optional<std::string> etag;        // <ETag>, when sent: a conditional delete
  bool operator==(const ObjectIdentifier&) const = default;
};
struct DeleteObjectsRequest {
  bool quiet = false;
  std::vector<ObjectIdentifier> objects;
};
inline constexpr size_t kMaxDeleteObjects = 1000;
// The '<' a DeleteObjects body may hold (tags, and comments and CDATA sections too): an
// Object holds at most Key, VersionId, ETag, LastModifiedTime and Size, 12 tags.
inline constexpr size_t kMaxDeleteBodyTags = kMaxDeleteObjects * 12 + 64;
// <Delete><Quiet>..</Quiet><Object><Key>..</Key><VersionId>..</VersionId><ETag>..</ETag>
// </Object>...
// </Delete>; MalformedXML for bad XML, no objects, more than kMaxDeleteObjects, or more
// than kMaxDeleteBodyTags '<'.
S3Result<DeleteObjectsRequest> parseDeleteObjects(std::string_view body);

struct DeleteOutcome {
  std::string key;
  std::optional<std::string> version_id;  // echoed as it was asked for
  std::optional<S3Error> error;  // nullopt: deleted
};
std::string deleteResultXml(const std::vector<DeleteOutcome>& outcomes, bool quiet);

// <CreateBucketConfiguration><LocationConstraint>r</LocationConstraint>...: returns the
// location constraint ("" if absent). Empty body is fine. MalformedXML otherwise.
S3Result<std::string> parseCreateBucketConfiguration(std::string_view body);

// --- Bucket configuration.

// GetBucketAcl: the owner's FULL_CONTROL grant, plus READ for AllUsers when public-read.
std::string bucketAclXml(std::string_view owner_id, bool public_read);
// PutBucketAcl's <AccessControlPolicy> body: true if it grants READ to AllUsers (s3cmd's
// setacl --acl-public). MalformedXML for bad XML; NotImplemented for a grant Granary cannot
// honour (other grantees, or other permissions for AllUsers).
S3Result<bool> parseAccessControlPolicy(std::string_view body);

inline constexpr size_t kMaxLifecycleRules = 1000;
// Tags one lifecycle rule's filter may name.
inline constexpr size_t kMaxLifecycleFilterTags = 10;
// <LifecycleConfiguration><Rule>...: Expiration (Days or Date) and
// AbortIncompleteMultipartUpload actions, filtered by key prefix (Filter/Prefix or the
// older Rule/Prefix), and for Expiration by tags and object sizes (Filter/Tag,
// Filter/ObjectSize*, Filter/And). MalformedXML for bad XML, a missing or unknown Status,
// no rules, a Filter with two conditions outside an And, an empty And, a condition twice
// in an And; InvalidArgument for a non-positive Days, a Date that is not midnight UTC, a
// duplicate ID or tag key, or a rule without an action; InvalidRequest for sizes out of
// range or order and tags or sizes beside AbortIncompleteMultipartUpload (S3's codes);
// NotImplemented for what the lifecycle job does not apply (transitions, noncurrent
// versions, delete markers).
S3Result<std::vector<index_kv::LifecycleRule>> parseLifecycleConfiguration(
    std::string_view body);
std::string lifecycleConfigurationXml(const std::vector<index_kv::LifecycleRule>& rules);

inline constexpr size_t kMaxCorsRules = 100;
// GET, PUT, HEAD, POST or DELETE: the methods a CORS rule may allow (and a preflight ask
// for).
inline bool isCorsMethod(std::string_view method) {
  return method == "GET" || method == "PUT" || method == "HEAD" || method == "POST" ||
         method == "DELETE";
}
// <CORSConfiguration><CORSRule>...: 1..100 rules, each with at least one AllowedOrigin
// and AllowedMethod. MalformedXML for bad XML, an unknown element, no rules, a rule
// without origins or methods, or a MaxAgeSeconds that is not a non-negative integer;
// InvalidRequest for a method other than GET, PUT, HEAD, POST and DELETE, an origin or
// header with more than one `*`, more than 100 rules, or an ID over 255 characters.
S3Result<std::vector<index_kv::CorsRule>> parseCorsConfiguration(std::string_view body);
std::string corsConfigurationXml(const std::vector<index_kv::CorsRule>& rules);

// --- Multipart uploads.
std::string initiateMultipartUploadXml(std::string_view bucket, std::string_view key,
                                       std::string_view upload_id);

struct CompletedPart {
  uint32_t part_number = 0;
  std::string etag;  // without quotes
  // <ChecksumCRC32>v</ChecksumCRC32>...: algorithm name ("CRC32") -> value as sent.
  std::map<std::string, std::string> checksums;
};
inline constexpr size_t kMaxParts = 10000;
// The '<' a Complete body may hold (tags, comments, CDATA): a Part holds PartNumber, ETag
// and up to five checksums, 16 tags (20 leave room).
inline constexpr size_t kMaxCompleteBodyTags = kMaxParts * 20 + 64;
// <CompleteMultipartUpload><Part><PartNumber>n</PartNumber><ETag>e</ETag></Part>...: the
// parts in document order. MalformedXML for bad XML, no parts, more than kMaxParts, more
// than kMaxCompleteBodyTags '<', or a part without a numeric PartNumber or an ETag. Checksum<ALG> children are collected;
// other children are ignored.
S3Result<std::vector<CompletedPart>> parseCompleteMultipartUpload(std::string_view body);

// With a non-empty `checksum`: Checksum<ALG> and ChecksumType elements.
std::string completeMultipartUploadXml(std::string_view location, std::string_view bucket,
                                       std::string_view key, std::string_view etag,
                                       const index_kv::ObjectChecksum& checksum = {});

struct ListPartsParams {
  std::string bucket;
  std::string key;
  std::string upload_id;
  std::string owner_id;
  std::string checksum_algorithm;  // the upload's, "" for none
  std::string checksum_type;
  uint32_t part_number_marker = 0;
  size_t max_parts = 1000;
  bool truncated = false;
};
std::string listPartsXml(const ListPartsParams& params,
                         const std::vector<index_kv::PartInfo>& parts);

struct ListUploadsParams {
  std::string bucket;
  std::string prefix;
  std::string delimiter;
  std::string key_marker;
  std::string upload_id_marker;
  size_t max_uploads = 1000;
  bool url_encode = false;  // encoding-type=url
};
// One page of ListMultipartUploads: uploads and the common prefixes keys rolled into (at
// most max_uploads of both), and where the next page starts when truncated (the last
// entry: a key and upload id, or a prefix and no id).
struct UploadsPage {
  std::vector<index_kv::MultipartUpload> uploads;
  std::vector<std::string> common_prefixes;
  bool truncated = false;
  std::string next_key_marker;
  std::string next_upload_id_marker;
};
std::string listMultipartUploadsXml(const ListUploadsParams& params, const UploadsPage& page);

}  // namespace granary::gateway

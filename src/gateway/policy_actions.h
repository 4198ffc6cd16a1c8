// The IAM actions of S3 operations, shared by authorization (access.cc: what a request
// asks a bucket policy for) and the policy parser (bucket_policy.cc: whether a
// statement's actions can apply to its resources).
#pragma once

#include <string_view>
#include <utility>

namespace granary::gateway {

// What a policy names each operation by (the IAM action), and what it acts on: the
// object (`on` kObject), the bucket, or every object of the bucket (the record index's
// bucket-wide reads: a policy must allow s3:GetObject on "arn:aws:s3:::bucket/*").
// Operations not listed (the record index's settings, requests Granary does not serve)
// are the owner's alone.
enum class On { kBucket, kObject, kAllObjects };
struct OperationAction {
  std::string_view op;
  std::string_view action;
  On on = On::kBucket;
  std::string_view also = {};  // a second action it needs as well (AWS's rule)
  bool also_of_bucket = false;  // `also` is asked of the bucket itself, not of `on`
};
inline constexpr OperationAction kActions[] = {
    {"GetObject", "s3:GetObject", On::kObject},
    {"HeadObject", "s3:GetObject", On::kObject},
    {"GetObjectAttributes", "s3:GetObject", On::kObject, "s3:GetObjectAttributes"},
    {"PutObject", "s3:PutObject", On::kObject},
    {"CopyObject", "s3:PutObject", On::kObject},
    {"CreateMultipartUpload", "s3:PutObject", On::kObject},
    {"UploadPart", "s3:PutObject", On::kObject},
    {"UploadPartCopy", "s3:PutObject", On::kObject},
    {"CompleteMultipartUpload", "s3:PutObject", On::kObject},
    {"AbortMultipartUpload", "s3:AbortMultipartUpload", On::kObject},
    {"ListParts", "s3:ListMultipartUploadParts", On::kObject},
    {"DeleteObject", "s3:DeleteObject", On::kObject},
    {"GetObjectTagging", "s3:GetObjectTagging", On::kObject},
    {"PutObjectTagging", "s3:PutObjectTagging", On::kObject},
    {"DeleteObjectTagging", "s3:DeleteObjectTagging", On::kObject},
    {"GetObjectAcl", "s3:GetObjectAcl", On::kObject},
    {"PutObjectAcl", "s3:PutObjectAcl", On::kObject},
    {"ListContainerRecords", "s3:GetObject", On::kObject},
    {"PutRecordRows", "s3:PutObject", On::kObject},
    {"GetRecord", "s3:GetObject", On::kAllObjects},
    {"HeadRecord", "s3:GetObject", On::kAllObjects},
    // It names the bucket's containers (object keys), page after page: a listing too.
    {"ListRecords", "s3:GetObject", On::kAllObjects, "s3:ListBucket", true},
    {"BatchGetRecords", "s3:GetObject", On::kAllObjects},
    {"ListObjects", "s3:ListBucket"},
    {"ListObjectsV2", "s3:ListBucket"},
    {"HeadBucket", "s3:ListBucket"},
    {"ListObjectVersions", "s3:ListBucketVersions"},
    {"ListMultipartUploads", "s3:ListBucketMultipartUploads"},
    {"GetBucketLocation", "s3:GetBucketLocation"},
    {"DeleteBucket", "s3:DeleteBucket"},
    {"GetBucketAcl", "s3:GetBucketAcl"},
    {"PutBucketAcl", "s3:PutBucketAcl"},
    {"GetBucketLifecycleConfiguration", "s3:GetLifecycleConfiguration"},
    {"PutBucketLifecycleConfiguration", "s3:PutLifecycleConfiguration"},
    {"DeleteBucketLifecycle", "s3:PutLifecycleConfiguration"},
    {"GetBucketCors", "s3:GetBucketCORS"},
    {"PutBucketCors", "s3:PutBucketCORS"},
    {"DeleteBucketCors", "s3:PutBucketCORS"},
    {"GetBucketTagging", "s3:GetBucketTagging"},
    {"PutBucketTagging", "s3:PutBucketTagging"},
    {"DeleteBucketTagging", "s3:PutBucketTagging"},
    {"GetBucketVersioning", "s3:GetBucketVersioning"},
    {"PutBucketVersioning", "s3:PutBucketVersioning"},
    {"GetBucketPolicy", "s3:GetBucketPolicy"},
    {"PutBucketPolicy", "s3:PutBucketPolicy"},
    {"DeleteBucketPolicy", "s3:DeleteBucketPolicy"},
    {"GetBucketPolicyStatus", "s3:GetBucketPolicyStatus"},
    {"GetBucketLogging", "s3:GetBucketLogging"},
    {"GetBucketAccelerateConfiguration", "s3:GetAccelerateConfiguration"},
    {"GetBucketRequestPayment", "s3:GetBucketRequestPayment"},
    {"GetBucketNotificationConfiguration", "s3:GetBucketNotification"},
    {"GetBucketEncryption", "s3:GetEncryptionConfiguration"},
    {"DeleteBucketEncryption", "s3:PutEncryptionConfiguration"},
    {"GetBucketWebsite", "s3:GetBucketWebsite"},
    {"DeleteBucketWebsite", "s3:DeleteBucketWebsite"},
    {"GetBucketReplication", "s3:GetReplicationConfiguration"},
    {"DeleteBucketReplication", "s3:PutReplicationConfiguration"},
    {"GetObjectLockConfiguration", "s3:GetBucketObjectLockConfiguration"},
    {"GetBucketOwnershipControls", "s3:GetBucketOwnershipControls"},
    {"DeleteBucketOwnershipControls", "s3:PutBucketOwnershipControls"},
    {"GetPublicAccessBlock", "s3:GetBucketPublicAccessBlock"},
    {"DeletePublicAccessBlock", "s3:PutBucketPublicAccessBlock"},
};

// What an object action becomes when the request names a version (IAM's *Version actions).
constexpr std::string_view versionAction(std::string_view action) {
  constexpr std::pair<std::string_view, std::string_view> kVersionActions[] = {
      {"s3:GetObject", "s3:GetObjectVersion"},
      {"s3:DeleteObject", "s3:DeleteObjectVersion"},
      {"s3:GetObjectTagging", "s3:GetObjectVersionTagging"},
      {"s3:PutObjectTagging", "s3:PutObjectVersionTagging"},
      {"s3:DeleteObjectTagging", "s3:DeleteObjectVersionTagging"},
      {"s3:GetObjectAcl", "s3:GetObjectVersionAcl"},
      {"s3:PutObjectAcl", "s3:PutObjectVersionAcl"},
      {"s3:GetObjectAttributes", "s3:GetObjectVersionAttributes"},
  };
  for (const auto& [plain, versioned] : kVersionActions) {
    if (action == plain) return versioned;
  }
  return action;
}

}  // namespace granary::gateway

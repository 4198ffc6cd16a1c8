// S3 errors: the AWS error codes the gateway answers with, their HTTP statuses, and the
// single mapping from internal Status codes to S3 errors (fromStatus).
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "granary/common/status.h"

namespace granary::gateway {

enum class S3ErrorCode {
  kAccessDenied,
  kAccessForbidden,  // a CORS preflight the bucket's rules do not allow (403)
  kAuthorizationHeaderMalformed,
  kAuthorizationQueryParametersError,
  kBadDigest,
  kBadRequest,  // a CORS preflight without Origin or Access-Control-Request-Method (400)
  kBucketAlreadyExists,
  kBucketAlreadyOwnedByYou,
  kBucketNotEmpty,
  kEntityTooLarge,
  kIncompleteBody,
  kInternalError,
  kInvalidAccessKeyId,
  kInvalidArgument,
  kInvalidBucketName,
  kInvalidDigest,
  kInvalidRange,
  kInvalidRequest,
  kInvalidTag,
  kKeyTooLongError,
  kMalformedXML,
  kMaxMessageLengthExceeded,  // a request body (XML) over its limit (400)
  kMalformedPolicy,  // PutBucketPolicy: a policy document S3 refuses (400)
  kMetadataTooLarge,
  kMethodNotAllowed,
  kMissingContentLength,
  kMissingSecurityHeader,
  kNoSuchBucket,
  kNoSuchKey,
  kNoSuchUpload,
  kNoSuchLifecycleConfiguration,
  // Bucket settings Granary has no way to set (bucket_ops.cc, absentBucketSetting).
  kNoSuchBucketPolicy,
  kNoSuchCORSConfiguration,
  kNoSuchPublicAccessBlockConfiguration,
  kNoSuchTagSet,
  kNoSuchWebsiteConfiguration,
  kObjectLockConfigurationNotFoundError,
  kOwnershipControlsNotFoundError,
  kReplicationConfigurationNotFoundError,
  kServerSideEncryptionConfigurationNotFoundError,
  kEntityAlreadyExists,  // admin API (IAM's name): the user exists
  kNoSuchEntity,         // admin API (IAM's name): no such user
  kInvalidPart,
  kInvalidPartNumber,  // GET ?partNumber= past the object's parts (416)
  kInvalidPartOrder,
  kEntityTooSmall,
  kNotImplemented,
  kOperationAborted,  // a bucket setting changed concurrently, retries exhausted (409)
  kConditionalRequestConflict,  // a conditional write lost a race at its commit (409)
  kPreconditionFailed,
  kRequestHeaderSectionTooLarge,
  kRequestTimeout,
  kRequestTimeTooSkewed,
  kServiceUnavailable,
  kSignatureDoesNotMatch,
  kSlowDown,
  kStorageFull,  // no AWS equivalent: MinIO's XMinioStorageFull (507)
  kXAmzContentSHA256Mismatch,
  // POST Object (browser form uploads), 400 each
  kMalformedPOSTRequest,
  kInvalidPolicyDocument,
  kMaxPostPreDataLengthExceededError,
  kIncorrectNumberOfFilesInPostRequest,
  kNotModified,  // 304, no body
};

struct S3Error {
  S3ErrorCode code = S3ErrorCode::kInternalError;
  std::string message;
  // Elements AWS adds after <Message> for some codes (InvalidRange: RangeRequested,
  // ActualObjectSize), name and text, in order.
  std::vector<std::pair<std::string, std::string>> details = {};
};

template <typename T>
using S3Result = std::expected<T, S3Error>;

// A versionId other than "null": Granary keeps one version of each object, "null".
inline S3Error invalidVersionId() {
  return {S3ErrorCode::kInvalidArgument, "Invalid version id specified"};
}

// The bucket named does not exist (or is not the one the request was judged against).
inline S3Error noSuchBucket() {
  return {S3ErrorCode::kNoSuchBucket, "The specified bucket does not exist"};
}

inline std::unexpected<S3Error> s3fail(S3ErrorCode code, std::string message) {
  return std::unexpected<S3Error>(S3Error{code, std::move(message)});
}

std::string_view errorName(S3ErrorCode code);
int httpStatus(S3ErrorCode code);
// The one place internal failures become S3 errors. `not_found` says which 404 a
// kNotFound means in this context (kNoSuchBucket or kNoSuchKey).
S3Error fromStatus(const Status& status, S3ErrorCode not_found = S3ErrorCode::kNoSuchKey);
// A failure of the data path (writing or reading fragments on the chunk servers): the
// store's, never the request's, whatever code a chunk server gave (a drive it does not
// serve is kNotFound, a body that failed its CRC on the wire kInvalidArgument): 503 when a
// server is down or slow, 507 when the drives are full, otherwise 500. SDKs retry these.
S3Error dataPathError(const Status& status);

}  // namespace granary::gateway

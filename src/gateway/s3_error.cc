// S3 error names and HTTP statuses as AWS documents them ("Error responses", S3 API
// reference), and the one mapping from internal Status codes to S3 errors.
#include "s3_error.h"

namespace granary::gateway {

std::string_view errorName(S3ErrorCode code) {
  switch (code) {
    case S3ErrorCode::kAccessDenied:
      return "AccessDenied";
    case S3ErrorCode::kAccessForbidden:
      return "AccessForbidden";
    case S3ErrorCode::kAuthorizationHeaderMalformed:
      return "AuthorizationHeaderMalformed";
    case S3ErrorCode::kAuthorizationQueryParametersError:
      return "AuthorizationQueryParametersError";
    case S3ErrorCode::kBadDigest:
      return "BadDigest";
    case S3ErrorCode::kBadRequest:
      return "BadRequest";
    case S3ErrorCode::kBucketAlreadyExists:
      return "BucketAlreadyExists";
    case S3ErrorCode::kBucketAlreadyOwnedByYou:
      return "BucketAlreadyOwnedByYou";
    case S3ErrorCode::kBucketNotEmpty:
      return "BucketNotEmpty";
    case S3ErrorCode::kEntityTooLarge:
      return "EntityTooLarge";
    case S3ErrorCode::kMetadataTooLarge:
      return "MetadataTooLarge";
    case S3ErrorCode::kInvalidTag:
      return "InvalidTag";
    case S3ErrorCode::kIncompleteBody:
      return "IncompleteBody";
    case S3ErrorCode::kInternalError:
      return "InternalError";
    case S3ErrorCode::kInvalidAccessKeyId:
      return "InvalidAccessKeyId";
    case S3ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case S3ErrorCode::kInvalidBucketName:
      return "InvalidBucketName";
    case S3ErrorCode::kInvalidDigest:
      return "InvalidDigest";
    case S3ErrorCode::kInvalidRange:
      return "InvalidRange";
    case S3ErrorCode::kInvalidRequest:
      return "InvalidRequest";
    case S3ErrorCode::kKeyTooLongError:
      return "KeyTooLongError";
    case S3ErrorCode::kMalformedXML:
      return "MalformedXML";
    case S3ErrorCode::kMaxMessageLengthExceeded:
      return "MaxMessageLengthExceeded";
    case S3ErrorCode::kMalformedPOSTRequest:
      return "MalformedPOSTRequest";
    case S3ErrorCode::kMalformedPolicy:
      return "MalformedPolicy";
    case S3ErrorCode::kInvalidPartNumber:
      return "InvalidPartNumber";
    case S3ErrorCode::kInvalidPolicyDocument:
      return "InvalidPolicyDocument";
    case S3ErrorCode::kMaxPostPreDataLengthExceededError:
      return "MaxPostPreDataLengthExceededError";
    case S3ErrorCode::kIncorrectNumberOfFilesInPostRequest:
      return "IncorrectNumberOfFilesInPostRequest";
    case S3ErrorCode::kMethodNotAllowed:
      return "MethodNotAllowed";
    case S3ErrorCode::kMissingContentLength:
      return "MissingContentLength";
    case S3ErrorCode::kMissingSecurityHeader:
      return "MissingSecurityHeader";
    case S3ErrorCode::kNoSuchBucket:
      return "NoSuchBucket";
    case S3ErrorCode::kNoSuchKey:
      return "NoSuchKey";
    case S3ErrorCode::kNoSuchUpload:
      return "NoSuchUpload";
    case S3ErrorCode::kNoSuchLifecycleConfiguration:
      return "NoSuchLifecycleConfiguration";
    case S3ErrorCode::kNoSuchBucketPolicy:
      return "NoSuchBucketPolicy";
    case S3ErrorCode::kNoSuchCORSConfiguration:
      return "NoSuchCORSConfiguration";
    case S3ErrorCode::kNoSuchPublicAccessBlockConfiguration:
      return "NoSuchPublicAccessBlockConfiguration";
    case S3ErrorCode::kNoSuchTagSet:
      return "NoSuchTagSet";
    case S3ErrorCode::kNoSuchWebsiteConfiguration:
      return "NoSuchWebsiteConfiguration";
    case S3ErrorCode::kObjectLockConfigurationNotFoundError:
      return "ObjectLockConfigurationNotFoundError";
    case S3ErrorCode::kOwnershipControlsNotFoundError:
      return "OwnershipControlsNotFoundError";
    case S3ErrorCode::kReplicationConfigurationNotFoundError:
      return "ReplicationConfigurationNotFoundError";
    case S3ErrorCode::kServerSideEncryptionConfigurationNotFoundError:
      return "ServerSideEncryptionConfigurationNotFoundError";
    case S3ErrorCode::kEntityAlreadyExists:
      return "EntityAlreadyExists";
    case S3ErrorCode::kNoSuchEntity:
      return "NoSuchEntity";
    case S3ErrorCode::kInvalidPart:
      return "InvalidPart";
    case S3ErrorCode::kInvalidPartOrder:
      return "InvalidPartOrder";
    case S3ErrorCode::kEntityTooSmall:
      return "EntityTooSmall";
    case S3ErrorCode::kNotImplemented:
      return "NotImplemented";
    case S3ErrorCode::kOperationAborted:
      return "OperationAborted";
    case S3ErrorCode::kConditionalRequestConflict:
      return "ConditionalRequestConflict";
    case S3ErrorCode::kPreconditionFailed:
      return "PreconditionFailed";
    case S3ErrorCode::kRequestHeaderSectionTooLarge:
      return "RequestHeaderSectionTooLarge";
    case S3ErrorCode::kRequestTimeout:
      return "RequestTimeout";
    case S3ErrorCode::kRequestTimeTooSkewed:
      return "RequestTimeTooSkewed";
    case S3ErrorCode::kServiceUnavailable:
      return "ServiceUnavailable";
    case S3ErrorCode::kSignatureDoesNotMatch:
      return "SignatureDoesNotMatch";
    case S3ErrorCode::kSlowDown:
      return "SlowDown";
    case S3ErrorCode::kStorageFull:
      return "XGranaryStorageFull";
    case S3ErrorCode::kXAmzContentSHA256Mismatch:
      return "XAmzContentSHA256Mismatch";
    case S3ErrorCode::kNotModified:
      return "NotModified";
  }
  return "InternalError";
}

int httpStatus(S3ErrorCode code) {
  switch (code) {
    case S3ErrorCode::kAccessDenied:
    case S3ErrorCode::kAccessForbidden:
    case S3ErrorCode::kSignatureDoesNotMatch:
    case S3ErrorCode::kInvalidAccessKeyId:
    case S3ErrorCode::kRequestTimeTooSkewed:
      return 403;
    case S3ErrorCode::kNoSuchBucket:
    case S3ErrorCode::kNoSuchKey:
    case S3ErrorCode::kNoSuchUpload:
    case S3ErrorCode::kNoSuchLifecycleConfiguration:
    case S3ErrorCode::kNoSuchBucketPolicy:
    case S3ErrorCode::kNoSuchCORSConfiguration:
    case S3ErrorCode::kNoSuchPublicAccessBlockConfiguration:
    case S3ErrorCode::kNoSuchTagSet:
    case S3ErrorCode::kNoSuchWebsiteConfiguration:
    case S3ErrorCode::kObjectLockConfigurationNotFoundError:
    case S3ErrorCode::kOwnershipControlsNotFoundError:
    case S3ErrorCode::kReplicationConfigurationNotFoundError:
    case S3ErrorCode::kServerSideEncryptionConfigurationNotFoundError:
    case S3ErrorCode::kNoSuchEntity:
      return 404;
    case S3ErrorCode::kEntityAlreadyExists:
    case S3ErrorCode::kOperationAborted:
    case S3ErrorCode::kConditionalRequestConflict:
    case S3ErrorCode::kBucketNotEmpty:
    case S3ErrorCode::kBucketAlreadyOwnedByYou:
    case S3ErrorCode::kBucketAlreadyExists:
      return 409;
    case S3ErrorCode::kInvalidRange:
    case S3ErrorCode::kInvalidPartNumber:
      return 416;
    case S3ErrorCode::kPreconditionFailed:
      return 412;
    case S3ErrorCode::kNotModified:
      return 304;
    case S3ErrorCode::kMethodNotAllowed:
      return 405;
    case S3ErrorCode::kNotImplemented:
      return 501;
    case S3ErrorCode::kInternalError:
      return 500;
    case S3ErrorCode::kServiceUnavailable:
    case S3ErrorCode::kSlowDown:
      return 503;
    case S3ErrorCode::kStorageFull:
      return 507;
    case S3ErrorCode::kMissingContentLength:
      return 411;
    case S3ErrorCode::kRequestTimeout:
    case S3ErrorCode::kIncompleteBody:
    case S3ErrorCode::kEntityTooLarge:
    case S3ErrorCode::kMetadataTooLarge:
    case S3ErrorCode::kKeyTooLongError:
    case S3ErrorCode::kRequestHeaderSectionTooLarge:
    case S3ErrorCode::kInvalidDigest:
    case S3ErrorCode::kBadDigest:
    case S3ErrorCode::kBadRequest:
    case S3ErrorCode::kXAmzContentSHA256Mismatch:
    case S3ErrorCode::kMalformedXML:
    case S3ErrorCode::kMaxMessageLengthExceeded:
    case S3ErrorCode::kInvalidTag:
    case S3ErrorCode::kInvalidArgument:
    case S3ErrorCode::kInvalidRequest:
    case S3ErrorCode::kInvalidBucketName:
    case S3ErrorCode::kAuthorizationHeaderMalformed:
    case S3ErrorCode::kAuthorizationQueryParametersError:
    case S3ErrorCode::kMissingSecurityHeader:
    case S3ErrorCode::kInvalidPart:
    case S3ErrorCode::kInvalidPartOrder:
    case S3ErrorCode::kEntityTooSmall:
    case S3ErrorCode::kMalformedPOSTRequest:
    case S3ErrorCode::kMalformedPolicy:
    case S3ErrorCode::kInvalidPolicyDocument:
    case S3ErrorCode::kMaxPostPreDataLengthExceededError:
    case S3ErrorCode::kIncorrectNumberOfFilesInPostRequest:
      return 400;
  }
  return 500;
}

S3Error fromStatus(const Status& status, S3ErrorCode not_found) {
  using Code = Status::Code;
  switch (status.code()) {
    case Code::kOk:
      // A caller mapped success to an error: a bug, reported as such.
      return {S3ErrorCode::kInternalError, "internal error: success reported as a failure"};
    case Code::kNotFound:
      return {not_found, status.message()};
    // Buckets map kAlreadyExists to BucketAlreadyOwnedByYou/BucketAlreadyExists themselves;
    // anywhere else it means the request conflicts with existing state.
    case Code::kAlreadyExists:
      return {S3ErrorCode::kInvalidRequest, status.message()};
    case Code::kInvalidArgument:
      return {S3ErrorCode::kInvalidArgument, status.message()};
    case Code::kPreconditionFailed:
      return {S3ErrorCode::kPreconditionFailed,
              "At least one of the pre-conditions you specified did not hold"};
    case Code::kNotEmpty:
      return {S3ErrorCode::kBucketNotEmpty, "The bucket you tried to delete is not empty"};
    case Code::kPermissionDenied:
      return {S3ErrorCode::kAccessDenied, "Access Denied"};
    case Code::kUnavailable:
    case Code::kTimeout:
      return {S3ErrorCode::kServiceUnavailable, "Please reduce your request rate."};
    // Out of space is a capacity condition, not a bug, and not one a quick retry fixes:
    // 507 Insufficient Storage (as MinIO answers), with a message that says what ran out.
    case Code::kNoSpace:
      return {S3ErrorCode::kStorageFull,
              "Storage backend has reached its minimum free space: " + status.message()};
    case Code::kCorruption:
    case Code::kIoError:
    case Code::kInternal:
      return {S3ErrorCode::kInternalError, "We encountered an internal error. Please try again."};
  }
  return {S3ErrorCode::kInternalError, "We encountered an internal error. Please try again."};
}

S3Error dataPathError(const Status& status) {
  using Code = Status::Code;
  switch (status.code()) {
    case Code::kUnavailable:
    case Code::kTimeout:
    case Code::kNoSpace:
      return fromStatus(status);
    default:
      return {S3ErrorCode::kInternalError, "We encountered an internal error. Please try again."};
  }
}

}  // namespace granary::gateway

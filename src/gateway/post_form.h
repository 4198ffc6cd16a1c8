// Browser form uploads (POST Object; "Browser-based uploads using POST" in the S3 user
// guide): the multipart/form-data framing (RFC 7578) up to the first byte of the file, the
// form's signature, and the POST policy (a base64 JSON document the form signs) checked
// against the form's fields. Pure functions, no I/O: the handler (post_object.cc) streams
// the file's bytes itself. No Debian library parses multipart/form-data incrementally into
// our own body stream (GMime parses whole MIME messages), so the framing is written here,
// and fuzzed (tests/fuzz/post_form_fuzz.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "s3_error.h"
#include "sigv4.h"

namespace granary::gateway {

using FormFields = std::vector<std::pair<std::string, std::string>>;

// The form up to the file: the fields before it and the file part's own headers.
struct FormHead {
  // Names lower-cased (S3 matches form field names without regard to case), in order,
  // each name once.
  FormFields fields;
  // The file part's filename parameter, its last path component ("" if none). The part's
  // own Content-Type is not kept: S3 takes the type from the Content-Type field, which the
  // policy can restrict, and binary/octet-stream without one.
  std::string filename;
  size_t data_offset = 0;  // where the file's bytes begin in the parsed input

  std::optional<std::string_view> field(std::string_view lower_name) const;
};

// The boundary of "multipart/form-data; boundary=..." (quoted or not), nullopt for any
// other content type or a boundary RFC 2046 does not allow (1..70 characters).
std::optional<std::string> formBoundary(std::string_view content_type);

// Parses the body's first bytes up to the first byte of the part named "file", resuming
// where the previous call stopped: the work over a form is linear in its length however it
// arrives (a client sending a byte at a time costs no more than one sending it all).
class FormHeadParser {
 public:
  explicit FormHeadParser(std::string_view boundary);
  // `in`: every byte of the body so far (each call's `in` extends the previous one's).
  // nullopt: `in` ends before the file (read more; unless `complete`, `in` being the whole
  // body, which is then an error). MalformedPOSTRequest: bad framing or a part without a
  // form-data name; IncorrectNumberOfFilesInPostRequest: the form ends without a file;
  // InvalidArgument: a field named twice. An error is final: later calls return it.
  S3Result<std::optional<FormHead>> parse(std::string_view in, bool complete);

 private:
  enum class State { kPreamble, kDelimiter, kHeaders, kValue, kDone };
  std::string dash_;       // "--" boundary
  std::string delimiter_;  // CRLF "--" boundary
  State state_ = State::kPreamble;
  size_t at_ = 0;          // where the current state's bytes begin
  size_t search_ = 0;      // where the current state's search resumes
  bool padded_ = false;    // transport padding seen after the current delimiter
  std::string name_;       // the field whose value is being read
  std::set<std::string, std::less<>> names_;
  FormHead head_;
  std::optional<S3Error> failed_;
};

// One FormHeadParser over all of `in` (tests, fuzzing).
S3Result<std::optional<FormHead>> parseFormHead(std::string_view in, std::string_view boundary,
                                                bool complete);

// The form's signature: SigV4 (x-amz-algorithm, x-amz-credential, x-amz-date and
// x-amz-signature; AuthInfo::version 4, `signature` hex) or SigV2 (AWSAccessKeyId and
// signature; version 2, `signature` base64); nullopt for a form with neither and no policy
// (an anonymous upload). InvalidArgument for a missing or malformed part, as S3 answers.
S3Result<std::optional<AuthInfo>> parsePostAuth(const FormHead& form);
// Whether `auth` signs `policy` (the base64 text as sent) with `secret`:
// SignatureDoesNotMatch if not.
S3Result<void> verifyPostSignature(const AuthInfo& auth, std::string_view policy,
                                   std::string_view secret, SigningKeyCache& keys);

struct PostPolicyCondition {
  enum class Kind { kEq, kStartsWith, kLengthRange };
  Kind kind = Kind::kEq;
  std::string field;  // lower-case, without the '$'
  std::string value;  // kEq, kStartsWith
  uint64_t min = 0;   // kLengthRange, bytes
  uint64_t max = 0;
  std::string text;   // as S3 quotes it in an error: ["eq", "$key", "a"]
};

struct PostPolicy {
  int64_t expiration = 0;  // Unix seconds
  std::vector<PostPolicyCondition> conditions;
};

// The decoded policy document. InvalidPolicyDocument for anything but an object with an
// ISO 8601 "expiration" and a "conditions" array of {"field": "value"} objects and
// ["eq" | "starts-with", "$field", "value"] or ["content-length-range", min, max] arrays.
S3Result<PostPolicy> parsePostPolicy(std::string_view json);

// Form fields no policy condition needs to name (lower-case): the policy and the signature
// that signs it, the file, and x-ignore-*.
bool unsignedFormField(std::string_view name);

struct PostLengthRange {
  uint64_t min = 0;
  uint64_t max = UINT64_MAX;
};
// AccessDenied ("Invalid according to Policy: ...") unless `now` is before the expiration,
// every condition holds for `fields` (a field not sent is "", and `bucket` is the bucket
// posted to unless a "bucket" field names it; starts-with on Content-Type holds for each
// type of a comma-separated list) and every field but the policy, the signature, the file
// and x-ignore-* is named by a condition. Returns the allowed sizes.
S3Result<PostLengthRange> checkPostPolicy(const PostPolicy& policy, const FormFields& fields,
                                          std::string_view bucket, int64_t now_unix_seconds);

}  // namespace granary::gateway

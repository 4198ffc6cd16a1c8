// Status and Result<T>: how every fallible call on the data path reports failure.
//
// Contract: functions that can fail return Status (no value) or Result<T> (a value or a
// Status). Both are [[nodiscard]]. Exceptions are reserved for start-up and config errors.
// The gateway maps Code to S3 error names in exactly one place (gateway/s3_error.cc).
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace granary {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kNotFound,          // the thing asked for does not exist
    kAlreadyExists,     // a write-once or create-only target already exists
    kInvalidArgument,   // the caller's input is malformed
    kCorruption,        // stored bytes failed verification (CRC, magic, format version)
    kIoError,           // the environment failed (EIO, short I/O, ...)
    kNoSpace,           // ENOSPC or a quota
    kPreconditionFailed,// compare-and-swap lost, or a conditional request's condition
    kNotEmpty,          // e.g. deleting a bucket that still holds objects
    kUnavailable,       // a dependency is down or overloaded; usually retryable
    kPermissionDenied,  // authenticated but not allowed / bad credentials
    kTimeout,
    kInternal,          // a bug: should not happen
  };

  Status() = default;
  Status(Code code, std::string message, bool retryable = false)
      : code_(code), retryable_(retryable), message_(std::move(message)) {}

  static Status ok() { return {}; }
  static Status notFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status alreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status invalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status ioError(std::string m, bool retryable = false) {
    return {Code::kIoError, std::move(m), retryable};
  }
  static Status noSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
  static Status preconditionFailed(std::string m) {
    return {Code::kPreconditionFailed, std::move(m)};
  }
  static Status notEmpty(std::string m) { return {Code::kNotEmpty, std::move(m)}; }
  static Status unavailable(std::string m) { return {Code::kUnavailable, std::move(m), true}; }
  static Status permissionDenied(std::string m) {
    return {Code::kPermissionDenied, std::move(m)};
  }
  static Status timeout(std::string m) { return {Code::kTimeout, std::move(m), true}; }
  static Status internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  // errno-based I/O failure: ENOSPC becomes kNoSpace, EAGAIN/EINTR are retryable.
  static Status fromErrno(int err, std::string_view context);

  bool isOk() const { return code_ == Code::kOk; }
  explicit operator bool() const { return isOk(); }
  Code code() const { return code_; }
  bool retryable() const { return retryable_; }
  const std::string& message() const { return message_; }
  std::string toString() const;

  bool isNotFound() const { return code_ == Code::kNotFound; }
  bool isCorruption() const { return code_ == Code::kCorruption; }

 private:
  Code code_ = Code::kOk;
  bool retryable_ = false;
  std::string message_;
};

std::string_view codeName(Status::Code code);

template <typename T>
using Result = std::expected<T, Status>;

// `return fail(st);` inside a function returning Result<T>.
inline std::unexpected<Status> fail(Status s) { return std::unexpected<Status>(std::move(s)); }

}  // namespace granary

// Early return of a non-ok Status (in functions returning Status).
#define GRANARY_RETURN_IF_ERROR(expr)            \
  do {                                           \
    ::granary::Status _st = (expr);              \
    if (!_st.isOk()) return _st;                 \
  } while (0)

// The same, in functions returning Result<T>.
#define GRANARY_RETURN_IF_ERROR_RESULT(expr)              \
  do {                                                    \
    ::granary::Status _st = (expr);                       \
    if (!_st.isOk()) return ::granary::fail(std::move(_st)); \
  } while (0)

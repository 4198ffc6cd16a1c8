#include "granary/common/status.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace granary {

Status Status::fromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return noSpace(std::move(msg));
    case ENOENT:
      return notFound(std::move(msg));
    case EEXIST:
      return alreadyExists(std::move(msg));
    case EAGAIN:
    case EINTR:
    // The process is short of something (descriptors, memory), not the disk failing:
    // later may work, and a drive must not be judged by it.
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return ioError(std::move(msg), /*retryable=*/true);
    default:
      return ioError(std::move(msg));
  }
}

std::string_view codeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kNotFound: return "NotFound";
    case Status::Code::kAlreadyExists: return "AlreadyExists";
    case Status::Code::kInvalidArgument: return "InvalidArgument";
    case Status::Code::kCorruption: return "Corruption";
    case Status::Code::kIoError: return "IOError";
    case Status::Code::kNoSpace: return "NoSpace";
    case Status::Code::kPreconditionFailed: return "PreconditionFailed";
    case Status::Code::kNotEmpty: return "NotEmpty";
    case Status::Code::kUnavailable: return "Unavailable";
    case Status::Code::kPermissionDenied: return "PermissionDenied";
    case Status::Code::kTimeout: return "Timeout";
    case Status::Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::toString() const {
  if (isOk()) return "OK";
  std::string s(codeName(code_));
  s += ": ";
  s += message_;
  return s;
}

}  // namespace granary

// Output files and the records-batch frame reader (record_stream.h).
#include "record_stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>

namespace granary::cli {
namespace {

constexpr size_t kMaxFrameLine = size_t{1} << 20;  // a header line (keys are <= 8 KiB)

}  // namespace

Output::Output(std::string path) : path_(std::move(path)) {}

Output::~Output() {
  if (file_ != nullptr) discard();  // neither finished nor discarded: a failed transfer
}

Status Output::open() {
  if (path_.empty() || file_ != nullptr) return Status::ok();
  // Only a regular file, or none, is replaced by a rename; a symbolic link (/dev/stdout,
  // a link to a file) is written through, as a device or pipe is.
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(path_, ec);
  const bool in_place = !ec && std::filesystem::exists(status) &&
                        !std::filesystem::is_regular_file(status);
  if (in_place) {
    writing_ = path_;
    file_ = std::fopen(writing_.c_str(), "wb");
  } else {
    // Created anew, never opened through a name someone else put there (a link).
    writing_ = path_ + ".granary-partial";
    if (::unlink(writing_.c_str()) != 0 && errno != ENOENT) {
      return Status::fromErrno(errno, "cannot replace " + writing_);
    }
    const int fd = ::open(writing_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    file_ = fd < 0 ? nullptr : ::fdopen(fd, "wb");
    if (fd >= 0 && file_ == nullptr) ::close(fd);
  }
  return file_ != nullptr ? Status::ok() : Status::fromErrno(errno, "cannot create " + writing_);
}

Status Output::write(std::string_view bytes) {
  if (discarded_) return Status::internal("write to a discarded output " + path_);
  if (Status st = open(); !st) return st;
  FILE* f = path_.empty() ? stdout : file_;
  if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    return Status::ioError("cannot write " + (path_.empty() ? "standard output" : path_));
  }
  return Status::ok();
}

Status Output::finish() {
  if (discarded_) return Status::ok();
  if (Status st = open(); !st) return st;
  FILE* f = path_.empty() ? stdout : file_;
  bool ok = std::fflush(f) == 0;
  if (file_ != nullptr) {
    ok = std::fclose(file_) == 0 && ok;
    file_ = nullptr;
    if (ok && writing_ != path_ && std::rename(writing_.c_str(), path_.c_str()) != 0) {
      Status st = Status::fromErrno(errno, "cannot rename " + writing_ + " to " + path_);
      std::remove(writing_.c_str());
      return st;
    }
    if (!ok && writing_ != path_) std::remove(writing_.c_str());
  }
  return ok ? Status::ok() : Status::ioError("cannot write " + path_);
}

void Output::discard() {
  discarded_ = true;
  if (file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  if (writing_ != path_) std::remove(writing_.c_str());  // a device or pipe is left be
}

FrameReader::FrameReader(HeaderFn on_header, DataFn on_data)
    : on_header_(std::move(on_header)), on_data_(std::move(on_data)) {}

Status FrameReader::feed(std::string_view in) {
  while (!in.empty()) {
    if (ended_) return Status::corruption("bytes after the end of the record stream");
    if (remaining_ > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size()));
      if (Status st = on_data_(in.substr(0, n)); !st) return st;
      remaining_ -= n;
      in.remove_prefix(n);
      continue;
    }
    size_t nl = in.find('\n');
    line_.append(in.substr(0, nl));
    if (line_.size() > kMaxFrameLine) return Status::corruption("record header line too long");
    if (nl == std::string_view::npos) return Status::ok();
    in.remove_prefix(nl + 1);
    nlohmann::json header = nlohmann::json::parse(line_, nullptr, false);
    if (header.is_discarded() || !header.is_object()) {
      return Status::corruption("a record header is not a JSON object");
    }
    if (header.contains("end") && header["end"] == true) {
      ended_ = true;
    } else if (header.contains("size") && header["size"].is_number_unsigned()) {
      remaining_ = header["size"].get<uint64_t>();
    } else {
      return Status::corruption("a record header has no size");
    }
    Status st = on_header_(header, line_);
    line_.clear();  // keeps its buffer for the next header
    if (!st) return st;
  }
  return Status::ok();
}

}  // namespace granary::cli

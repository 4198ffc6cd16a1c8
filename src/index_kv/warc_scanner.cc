// Streaming WARC scanners: plain .warc, and .warc.gz with one gzip member per record (the
// layout Common Crawl and warcio write, which is what makes records readable at offsets).
//
// Record layout (WARC 1.1, ISO 28500): "WARC/1.1" CRLF, named fields "Name: value" CRLF
// (names case-insensitive, continuation lines start with SP or HT), CRLF, then exactly
// Content-Length bytes of block, then CRLF CRLF. Bare LF line ends are tolerated in the
// header because some writers emit them. Only the header block is buffered.
#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "granary/ec/erasure_code.h"
#include "granary/common/strings.h"
#include "granary/index_kv/index.h"
#include "index_kv/container_scanners.h"
#include "index_kv/gzip_member.h"

namespace granary::index_kv {
namespace {

constexpr std::string_view kMagic = "WARC/";
constexpr std::string_view kTrailer = "\r\n\r\n";
constexpr size_t kInflateScratch = 256 * 1024;

// True while the bytes seen so far can still begin "WARC/".
bool magicPrefixOk(std::string_view seen) {
  const size_t n = std::min(seen.size(), kMagic.size());
  return seen.substr(0, n) == kMagic.substr(0, n);
}

bool versionLineOk(std::string_view line) {
  // "WARC/" digits "." digits
  line = trimSpaces(line);
  if (!line.starts_with(kMagic)) {
    return false;
  }
  line.remove_prefix(kMagic.size());
  const size_t dot = line.find('.');
  const auto digits = [](std::string_view d) {
    return !d.empty() && d.size() <= 4 &&
           std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return dot != std::string_view::npos && digits(line.substr(0, dot)) &&
         digits(line.substr(dot + 1));
}

// Consumes the bytes of one WARC record and stops at its end. The header is parsed line by
// line as lines complete (so junk fails early), buffering only the current line. Errors are
// worded relative to the record; the owner adds where the record is.
class WarcRecordScanner {
 public:
  explicit WarcRecordScanner(const ParserOptions& o)
      : max_header_(o.max_header_bytes), key_kind_(o.warc_key) {}

  void reset() {
    state_ = State::kHeader;
    line_.clear();
    header_bytes_ = 0;
    lines_ = 0;
    consumed_ = 0;
    content_length_str_.clear();
    key_.clear();
    type_.clear();
    key_seen_ = false;
    type_seen_ = false;
    last_value_ = nullptr;
    have_field_ = false;
  }

  bool idle() const { return consumed_ == 0; }
  bool done() const { return state_ == State::kDone; }
  const std::string& key() const { return key_; }
  const std::string& type() const { return type_; }

  // Returns how many bytes of `in` belong to the record (all of them unless it ended).
  Result<size_t> consume(std::span<const uint8_t> in) {
    size_t pos = 0;
    while (pos < in.size() && state_ != State::kDone) {
      const uint8_t* p = in.data() + pos;
      const size_t avail = in.size() - pos;
      size_t take = 0;
      switch (state_) {
        case State::kHeader: {
          const void* nl = std::memchr(p, '\n', avail);
          take = nl ? static_cast<size_t>(static_cast<const uint8_t*>(nl) - p) + 1 : avail;
          if (header_bytes_ + take > max_header_) {
            return fail(Status::invalidArgument(fmt::format(
                "header block exceeds the limit of {} bytes (max_header_bytes)", max_header_)));
          }
          header_bytes_ += take;
          line_.append(reinterpret_cast<const char*>(p), take);
          if (lines_ == 0 && !magicPrefixOk(line_)) {
            return fail(Status::invalidArgument("does not start with \"WARC/\""));
          }
          if (nl != nullptr) {
            Status st = endOfLine();
            if (!st.isOk()) {
              return fail(std::move(st));
            }
            line_.clear();
          }
          break;
        }
        case State::kBlock:
          take = static_cast<size_t>(std::min<uint64_t>(block_left_, avail));
          block_left_ -= take;
          if (block_left_ == 0) {
            state_ = State::kTrailer;
          }
          break;
        case State::kTrailer:
          while (take < avail && trailer_pos_ < kTrailer.size()) {
            if (p[take] != static_cast<uint8_t>(kTrailer[trailer_pos_])) {
              return fail(Status::invalidArgument(fmt::format(
                  "block of Content-Length {} is not followed by \\r\\n\\r\\n (record byte {})",
                  content_length_, consumed_ + take)));
            }
            ++take;
            ++trailer_pos_;
          }
          if (trailer_pos_ == kTrailer.size()) {
            state_ = State::kDone;
          }
          break;
        case State::kDone:
          break;
      }
      pos += take;
      consumed_ += take;
    }
    return pos;
  }

  // Why the record is incomplete (for truncation errors).
  std::string whereIncomplete() const {
    switch (state_) {
      case State::kHeader:
        return "input ends inside the WARC header";
      case State::kBlock:
        return fmt::format("input ends inside the record block ({} of {} bytes missing)",
                           block_left_, content_length_);
      case State::kTrailer:
        return "input ends before the record's \\r\\n\\r\\n trailer";
      case State::kDone:
        break;
    }
    return "record complete";
  }

 private:
  enum class State { kHeader, kBlock, kTrailer, kDone };

  // line_ holds one complete line, '\n' included.
  Status endOfLine() {
    std::string_view line(line_);
    line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (lines_++ == 0) {
      if (!versionLineOk(line)) {
        return Status::invalidArgument("bad version line (want \"WARC/1.0\" or \"WARC/1.1\")");
      }
      return Status::ok();
    }
    if (line.empty()) {
      return endOfHeader();
    }
    if (line.front() == ' ' || line.front() == '\t') {
      if (!have_field_) {
        return Status::invalidArgument("continuation line before any header field");
      }
      if (last_value_ != nullptr) {
        *last_value_ += ' ';
        *last_value_ += trimSpaces(line);
      }
      return Status::ok();
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || trimSpaces(line.substr(0, colon)).empty()) {
      return Status::invalidArgument(
          fmt::format("malformed header line \"{}\"", line.substr(0, 80)));
    }
    const std::string_view name = trimSpaces(line.substr(0, colon));
    const std::string_view value = trimSpaces(line.substr(colon + 1));
    have_field_ = true;
    last_value_ = nullptr;
    if (asciiIEquals(name, "Content-Length")) {
      if (!content_length_str_.empty() && content_length_str_ != value) {
        return Status::invalidArgument("conflicting Content-Length fields");
      }
      content_length_str_ = value;
      last_value_ = &content_length_str_;
    } else if (asciiIEquals(name, "WARC-Type")) {
      if (!type_seen_) {  // the first one, as warcio and CDX indexers read it
        type_ = value;
        last_value_ = &type_;
        type_seen_ = true;
      }
    } else if (asciiIEquals(name, key_kind_ == WarcKey::kTargetUri ? "WARC-Target-URI"
                                                                : "WARC-Record-ID")) {
      if (!key_seen_) {  // the first one, so the row's key is a CDX line's
        key_ = value;
        last_value_ = &key_;
        key_seen_ = true;
      }
    }
    return Status::ok();
  }

  Status endOfHeader() {
    const std::string& cl = content_length_str_;
    if (cl.empty()) {
      return Status::invalidArgument("missing Content-Length");
    }
    if (cl.size() > 18 ||
        !std::all_of(cl.begin(), cl.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return Status::invalidArgument(
          fmt::format("invalid Content-Length \"{}\"", std::string_view(cl).substr(0, 40)));
    }
    // The type goes into every row and back out in x-granary-record-type: a WARC type is
    // a short token (as the batch insert of rows requires: at most 256 printable bytes).
    if (type_.size() > 256 || !std::all_of(type_.begin(), type_.end(), [](char c) {
          return (static_cast<unsigned char>(c) >= 0x20 || c == '\t') && c != 0x7f;
        })) {
      return Status::invalidArgument(fmt::format(
          "invalid WARC-Type \"{}\" (at most 256 bytes, no control characters but tab)",
          std::string_view(type_).substr(0, 40)));
    }
    content_length_ = 0;
    for (char c : cl) {
      content_length_ = content_length_ * 10 + static_cast<uint64_t>(c - '0');
    }
    std::string_view key = trimSpaces(key_);
    if (key_kind_ == WarcKey::kTargetUri && key.size() >= 2 && key.front() == '<' &&
        key.back() == '>') {
      key = trimSpaces(key.substr(1, key.size() - 2));
    }
    // A key that can be no row is kept cut, still too long to be one: a .warc.gz of 1 MB
    // URIs compresses each record to about a kilobyte, and a slice of upload would
    // otherwise hold hundreds of megabytes of them.
    key_ = std::string(key.substr(0, kMaxRecordKey + 1));
    block_left_ = content_length_;
    trailer_pos_ = 0;
    state_ = block_left_ == 0 ? State::kTrailer : State::kBlock;
    return Status::ok();
  }

  const size_t max_header_;
  const WarcKey key_kind_;
  State state_ = State::kHeader;
  std::string line_;  // the header line being read; keeps its capacity across records
  uint64_t header_bytes_ = 0;
  uint64_t lines_ = 0;
  uint64_t consumed_ = 0;
  std::string content_length_str_;
  std::string key_;
  std::string type_;
  bool key_seen_ = false;
  bool type_seen_ = false;
  std::string* last_value_ = nullptr;  // the field a continuation line extends, if tracked
  bool have_field_ = false;
  uint64_t content_length_ = 0;
  uint64_t block_left_ = 0;
  size_t trailer_pos_ = 0;
};

class WarcScanner final : public FormatScanner {
 public:
  explicit WarcScanner(const ParserOptions& o) : rec_(o) {}

  ContainerFormat format() const override { return ContainerFormat::kWarc; }

  Status feed(std::span<const uint8_t> data, std::vector<ParsedRecord>& out) override {
    while (!data.empty()) {
      auto n = rec_.consume(data);
      if (!n) {
        return Status::invalidArgument(fmt::format(
            "WARC record at byte offset {}: {}", start_, n.error().message()));
      }
      crc_ = ec::crc32c(data.first(*n), crc_);
      pos_ += *n;
      data = data.subspan(*n);
      if (rec_.done()) {
        if (!rec_.key().empty()) {
          out.push_back(ParsedRecord{rec_.key(), start_, pos_ - start_, crc_, rec_.type()});
        }
        rec_.reset();
        start_ = pos_;
        crc_ = 0;
      }
    }
    return Status::ok();
  }

  Status finish(std::vector<ParsedRecord>&) override {
    if (!rec_.idle()) {
      return Status::invalidArgument(fmt::format("truncated WARC record at byte offset {}: {}",
                                                 start_, rec_.whereIncomplete()));
    }
    return Status::ok();
  }

 private:
  WarcRecordScanner rec_;
  uint64_t pos_ = 0;
  uint64_t start_ = 0;
  uint32_t crc_ = 0;
};

class WarcGzScanner final : public FormatScanner {
 public:
  WarcGzScanner(const ParserOptions& o, bool sniffing)
      : rec_(o), max_inflated_(o.max_inflated_member), max_ratio_(o.max_inflate_ratio),
        sniffing_(sniffing),
        scratch_(std::make_unique_for_overwrite<uint8_t[]>(kInflateScratch)) {}

  ContainerFormat format() const override {
    return sniffing_ && !content_checked_ ? ContainerFormat::kAuto : ContainerFormat::kWarcGz;
  }

  Status feed(std::span<const uint8_t> data, std::vector<ParsedRecord>& out) override {
    while (true) {
      const auto st = inflater_.step(data, std::span(scratch_.get(), kInflateScratch));
      const auto in = data.first(st.consumed);
      crc_ = ec::crc32c(in, crc_);
      member_len_ += in.size();
      pos_ += in.size();
      data = data.subspan(in.size());
      GRANARY_RETURN_IF_ERROR(onInflated(std::span<const uint8_t>(scratch_.get(), st.produced)));
      if (!st.error.isOk()) {
        return where(st.error.message());
      }
      if (st.member_end) {
        GRANARY_RETURN_IF_ERROR(endOfMember(out));
      } else if (st.consumed == 0 && st.produced == 0) {
        return Status::ok();  // needs more input
      }
    }
  }

  Status finish(std::vector<ParsedRecord>&) override {
    if (member_len_ != 0) {
      return Status::invalidArgument(fmt::format(
          "truncated gzip member at byte offset {}: input ends after {} of its bytes",
          member_start_, member_len_));
    }
    return Status::ok();
  }

 private:
  Status where(std::string_view why) const {
    return Status::invalidArgument(
        fmt::format("gzip member at byte offset {}: {}", member_start_, why));
  }

  Status notWarc() const {
    if (sniffing_) {
      return notIndexable("gzip-compressed data that is not WARC (e.g. a .tgz) cannot be "
                          "read at offsets; upload the uncompressed tar");
    }
    return where("does not hold a WARC record");
  }

  Status onInflated(std::span<const uint8_t> bytes) {
    if (bytes.empty()) {
      return Status::ok();
    }
    inflated_ += bytes.size();
    if (inflated_ > max_inflated_) {
      return where(fmt::format("inflates to more than max_inflated_member ({} bytes)",
                               max_inflated_));
    }
    total_inflated_ += bytes.size();
    if (max_ratio_ != 0 && total_inflated_ > max_inflated_ &&
        total_inflated_ - max_inflated_ > max_ratio_ * pos_) {
      return notIndexable(fmt::format(
          "the container inflates to over {} times its compressed size (by byte offset {})",
          max_ratio_, member_start_));
    }
    if (!content_checked_) {  // the first member decides whether this is WARC at all
      const size_t n = std::min(kMagic.size() - magic_.size(), bytes.size());
      magic_.append(reinterpret_cast<const char*>(bytes.data()), n);
      if (!magicPrefixOk(magic_)) {
        return notWarc();
      }
      content_checked_ = magic_.size() == kMagic.size();
    }
    if (!rec_.done()) {
      auto n = rec_.consume(bytes);
      if (!n) {
        return where(fmt::format("WARC record: {}", n.error().message()));
      }
      bytes = bytes.subspan(*n);
    }
    if (!bytes.empty()) {  // inflated bytes after the record's trailer
      const size_t n = std::min(kMagic.size() - extra_.size(), bytes.size());
      extra_.append(reinterpret_cast<const char*>(bytes.data()), n);
      if (extra_ == kMagic) {
        return notIndexable(fmt::format(
            "the gzip member at byte offset {} holds more than one WARC record (whole-file "
            "compression); recompress with one gzip member per record", member_start_));
      }
      if (!magicPrefixOk(extra_)) {
        return where("unexpected bytes after the WARC record's trailer");
      }
    }
    return Status::ok();
  }

  Status endOfMember(std::vector<ParsedRecord>& out) {
    if (!content_checked_) {
      return notWarc();
    }
    if (!rec_.done()) {
      return where(rec_.idle() ? std::string("empty gzip member")
                               : "gzip member ends inside its WARC record: " +
                                     rec_.whereIncomplete());
    }
    if (!extra_.empty()) {
      return where("unexpected bytes after the WARC record's trailer");
    }
    if (!rec_.key().empty()) {
      out.push_back(ParsedRecord{rec_.key(), member_start_, member_len_, crc_, rec_.type()});
    }
    inflater_.reset();
    rec_.reset();
    member_start_ = pos_;
    member_len_ = 0;
    crc_ = 0;
    inflated_ = 0;
    return Status::ok();
  }

  GzipMemberInflater inflater_;
  WarcRecordScanner rec_;
  const uint64_t max_inflated_;
  const uint64_t max_ratio_;
  uint64_t total_inflated_ = 0;
  const bool sniffing_;
  std::unique_ptr<uint8_t[]> scratch_;  // inflated bytes, never read before written
  bool content_checked_ = false;
  std::string magic_;  // first inflated bytes of the first member, up to "WARC/"
  std::string extra_;  // inflated bytes after a record's trailer, up to "WARC/"
  uint64_t pos_ = 0;
  uint64_t member_start_ = 0;
  uint64_t member_len_ = 0;
  uint64_t inflated_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace

std::unique_ptr<FormatScanner> makeWarcScanner(const ParserOptions& options) {
  return std::make_unique<WarcScanner>(options);
}

std::unique_ptr<FormatScanner> makeWarcGzScanner(const ParserOptions& options, bool sniffing) {
  return std::make_unique<WarcGzScanner>(options, sniffing);
}

}  // namespace granary::index_kv

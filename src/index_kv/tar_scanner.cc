// Streaming tar scanner: ustar (POSIX), GNU and v7 headers, pax 'x'/'g' extended headers,
// GNU 'L'/'K' long names. Only header blocks and extension payloads are buffered; member
// data is skipped with its CRC32C computed on the way.
//
// Layout (POSIX.1-2001 ustar / pax, GNU tar manual "Basic Tar Format"): 512-byte header
// blocks; name[100] @0, size[12] @124, chksum[8] @148, typeflag @156, magic @257
// ("ustar\0" + "00" POSIX, "ustar  \0" GNU), prefix[155] @345 (POSIX only); data padded to
// 512; the archive ends with two zero blocks.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "granary/ec/erasure_code.h"
#include "index_kv/container_scanners.h"

namespace granary::index_kv {
namespace {

constexpr size_t kBlock = 512;

bool allZero(std::span<const uint8_t> b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t c) { return c == 0; });
}

// NUL-terminated (or full-width) string field.
std::string_view field(std::span<const uint8_t, kBlock> b, size_t off, size_t len) {
  const char* p = reinterpret_cast<const char*>(b.data() + off);
  return {p, strnlen(p, len)};
}

// Octal number field as GNU tar reads it: leading spaces, digits, then NUL or space; or
// GNU base-256 when the top bit of the first byte is set. nullopt if invalid.
std::optional<uint64_t> numberField(std::span<const uint8_t> f, bool allow_empty) {
  if (f[0] & 0x80) {
    if (f[0] & 0x40) {
      return std::nullopt;  // negative base-256
    }
    uint64_t v = f[0] & 0x3f;
    for (size_t i = 1; i < f.size(); ++i) {
      if (v > (UINT64_MAX >> 8)) {
        return std::nullopt;
      }
      v = (v << 8) | f[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < f.size() && f[i] == ' ') {
    ++i;
  }
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < f.size() && f[i] >= '0' && f[i] <= '7'; ++i, ++digits) {
    v = v * 8 + (f[i] - '0');  // at most 12 digits: no overflow
  }
  for (; i < f.size(); ++i) {
    if (f[i] != ' ' && f[i] != 0) {
      return std::nullopt;
    }
  }
  if (digits == 0 && !allow_empty) {
    return std::nullopt;
  }
  return v;
}

bool checksumOk(std::span<const uint8_t, kBlock> b) {
  auto stored = numberField(b.subspan(148, 8), false);
  if (!stored) {
    return false;
  }
  // The checksum field counts as eight spaces. Old tars summed signed chars: accept both.
  uint64_t usum = 8 * ' ';
  int64_t ssum = 8 * ' ';
  for (size_t i = 0; i < kBlock; ++i) {
    if (i >= 148 && i < 156) {
      continue;
    }
    usum += b[i];
    ssum += static_cast<int8_t>(b[i]);
  }
  return *stored == usum || static_cast<int64_t>(*stored) == ssum;
}

bool parseDecimal(std::string_view s, uint64_t& v) {
  if (s.empty() || s.size() > 19) {
    return false;
  }
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return false;
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

class TarScanner final : public FormatScanner {
 public:
  explicit TarScanner(const ParserOptions& o) : max_header_(o.max_header_bytes) {}

  ContainerFormat format() const override { return ContainerFormat::kTar; }

  Status feed(std::span<const uint8_t> data, std::vector<ParsedRecord>& out) override {
    while (!data.empty()) {
      size_t take = 0;
      switch (state_) {
        case State::kEnd:  // after the end-of-archive marker: ignored, as GNU tar does
          take = data.size();
          break;
        case State::kHeader:
          if (fill_ == 0 && data.size() >= kBlock) {
            header_offset_ = pos_;
            pos_ += kBlock;
            GRANARY_RETURN_IF_ERROR(onHeader(data.first<kBlock>(), out));
            data = data.subspan(kBlock);
            continue;
          }
          if (fill_ == 0) {
            header_offset_ = pos_;
          }
          take = std::min(kBlock - fill_, data.size());
          std::memcpy(block_.data() + fill_, data.data(), take);
          fill_ += take;
          if (fill_ == kBlock) {
            fill_ = 0;
            pos_ += take;
            data = data.subspan(take);
            GRANARY_RETURN_IF_ERROR(onHeader(block_, out));
            continue;
          }
          break;
        case State::kData: {
          take = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size()));
          auto bytes = data.first(take);
          if (is_row_) {
            row_.crc32c = ec::crc32c(bytes, row_.crc32c);
          } else if (collect_) {
            payload_.append(reinterpret_cast<const char*>(bytes.data()), take);
          }
          remaining_ -= take;
          if (remaining_ == 0) {
            pos_ += take;
            data = data.subspan(take);
            GRANARY_RETURN_IF_ERROR(endOfData(out));
            continue;
          }
          break;
        }
        case State::kPadding:
          take = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size()));
          remaining_ -= take;
          if (remaining_ == 0) {
            state_ = State::kHeader;
          }
          break;
      }
      pos_ += take;
      data = data.subspan(take);
    }
    return Status::ok();
  }

  Status finish(std::vector<ParsedRecord>&) override {
    switch (state_) {
      case State::kEnd:
        return Status::ok();
      case State::kHeader:
        if (fill_ != 0) {
          return truncated(fmt::format("inside the tar header at byte offset {} ({} of 512 "
                                       "bytes)", header_offset_, fill_));
        }
        if (pending_) {
          return truncated(fmt::format("after the extended header at byte offset {}, before "
                                       "the member it belongs to", ext_offset_));
        }
        if (sparse_ext_) {
          return truncated(fmt::format("inside the sparse map of member '{}'", shownName()));
        }
        return Status::ok();  // EOF at a member boundary (with or without one zero block)
      case State::kData:
        return truncated(fmt::format("inside the data of member '{}' (header at byte offset "
                                     "{}): {} bytes missing", shownName(), header_offset_,
                                     remaining_));
      case State::kPadding:
        return truncated(fmt::format("inside the padding after member '{}' (header at byte "
                                     "offset {})", shownName(), header_offset_));
    }
    return Status::ok();
  }

 private:
  enum class State { kHeader, kData, kPadding, kEnd };

  Status truncated(std::string_view where) const {
    return Status::invalidArgument(
        fmt::format("truncated tar: input ends at byte offset {} {}", pos_, where));
  }

  static Status malformed(uint64_t offset, std::string_view why) {
    return Status::invalidArgument(fmt::format("tar header at byte offset {}: {}", offset, why));
  }

  Status onHeader(std::span<const uint8_t, kBlock> b, std::vector<ParsedRecord>& out) {
    if (sparse_ext_) {
      // An old-GNU sparse member's extension block (21 more map entries), between its
      // header and its data; byte 504 says whether another one follows.
      if (b[504] != 0) return Status::ok();
      sparse_ext_ = false;
      return startData(sparse_size_, false, out);
    }
    if (allZero(b)) {
      if (pending_) {
        return malformed(header_offset_, "zero block right after an extended header");
      }
      if (++zero_blocks_ == 2) {
        state_ = State::kEnd;
      }
      return Status::ok();
    }
    if (zero_blocks_ != 0) {
      return malformed(header_offset_, "header after a lone zero block");
    }
    if (!checksumOk(b)) {
      return malformed(header_offset_, "bad header checksum (not a tar header)");
    }
    auto size_field = numberField(b.subspan(124, 12), true);
    if (!size_field) {
      return malformed(header_offset_, "invalid size field");
    }
    // Solaris tar's 'X' is a pax extended header by another name (tarfile, GNU tar and
    // libarchive read it as 'x').
    const char type = b[156] == 'X' ? 'x' : static_cast<char>(b[156]);
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
      if (*size_field > max_header_) {
        return malformed(header_offset_, fmt::format("extended header of {} bytes exceeds the "
                                                     "limit of {}", *size_field, max_header_));
      }
      // A global header ('g', as `git archive` writes first) belongs to no one member:
      // it may stand alone before the end of the archive.
      if (type != 'g') {
        if (!pending_) {
          ext_offset_ = header_offset_;
        }
        pending_ = true;
      }
      ext_type_ = type;
      name_ = fmt::format("(typeflag '{}' extended header)", type);
      collect_ = true;
      payload_.clear();
      return startData(*size_field, false, out);
    }

    std::string name = memberName(b);
    if (name.empty()) {
      return malformed(header_offset_, "member with an empty name");
    }
    uint64_t size = pax_size_.value_or(*size_field);
    bool row = type == '0' || type == '\0' || type == '7';
    if (row && (name.back() == '/' || pax_sparse_)) {
      row = false;  // an old-style directory, or a sparse file whose data is not contiguous
    }
    if ((type >= '1' && type <= '6') || (type == '\0' && name.back() == '/')) {
      // Links, devices, fifos and directories carry no data, an old-style (v7) directory
      // neither, whatever their size field says (as Python's tarfile reads them).
      size = 0;
    }
    pax_path_.reset();
    pax_size_.reset();
    long_name_.reset();
    pax_sparse_ = false;
    pending_ = false;
    collect_ = false;
    name_ = std::move(name);
    if (type == 'S' && b[482] != 0) {  // old-GNU sparse, its map continued in more blocks
      sparse_ext_ = true;
      sparse_size_ = size;
      return Status::ok();
    }
    return startData(size, row, out);
  }

  // Resolution order: pax path > GNU long name > POSIX prefix "/" name > name.
  std::string memberName(std::span<const uint8_t, kBlock> b) const {
    if (pax_path_ && !pax_path_->empty()) {
      return *pax_path_;
    }
    if (long_name_) {
      return *long_name_;
    }
    std::string name(field(b, 0, 100));
    const bool posix = std::memcmp(b.data() + 257, "ustar\0", 6) == 0;
    if (posix) {
      std::string_view prefix = field(b, 345, 155);
      if (!prefix.empty()) {
        return std::string(prefix) + "/" + name;
      }
    }
    return name;
  }

  Status startData(uint64_t size, bool row, std::vector<ParsedRecord>& out) {
    is_row_ = row;
    if (row) {
      row_ = ParsedRecord{name_, pos_, size, 0, ""};
    }
    remaining_ = size;
    padding_ = (kBlock - size % kBlock) % kBlock;
    state_ = State::kData;
    if (size == 0) {
      return endOfData(out);
    }
    return Status::ok();
  }

  Status endOfData(std::vector<ParsedRecord>& out) {
    if (is_row_) {
      out.push_back(std::move(row_));
      is_row_ = false;
    } else if (collect_) {
      collect_ = false;
      GRANARY_RETURN_IF_ERROR(applyExtension());
    }
    remaining_ = padding_;
    state_ = remaining_ == 0 ? State::kHeader : State::kPadding;
    return Status::ok();
  }

  Status applyExtension() {
    if (ext_type_ == 'L') {
      long_name_ = payload_.substr(0, strnlen(payload_.data(), payload_.size()));
      return Status::ok();
    }
    if (ext_type_ == 'K') {
      return Status::ok();  // long link target: links give no rows
    }
    // pax records: "<len> <key>=<value>\n", len counting the whole record.
    std::string_view rest(payload_);
    while (!rest.empty()) {
      if (allZero({reinterpret_cast<const uint8_t*>(rest.data()), rest.size()})) {
        break;  // NUL padding some writers leave after the records
      }
      const size_t sp = rest.find(' ');
      uint64_t len = 0;
      if (sp == std::string_view::npos || !parseDecimal(rest.substr(0, sp), len) ||
          len <= sp + 1 || len > rest.size() || rest[len - 1] != '\n') {
        return malformed(header_offset_, "malformed pax extended header record");
      }
      std::string_view kv = rest.substr(sp + 1, len - sp - 2);
      rest.remove_prefix(len);
      const size_t eq = kv.find('=');
      if (eq == 0 || eq == std::string_view::npos) {
        return malformed(header_offset_, "malformed pax extended header record");
      }
      if (ext_type_ != 'x') {
        continue;  // 'g' global header: checked, then ignored
      }
      std::string_view key = kv.substr(0, eq);
      std::string_view value = kv.substr(eq + 1);
      if (key == "path") {
        pax_path_ = std::string(value);
      } else if (key == "size") {
        uint64_t v = 0;
        if (!parseDecimal(value, v)) {
          return malformed(header_offset_, "invalid pax size");
        }
        pax_size_ = v;
      } else if (key.starts_with("GNU.sparse.")) {
        pax_sparse_ = true;
      }
    }
    return Status::ok();
  }

  const uint64_t max_header_;
  State state_ = State::kHeader;
  uint64_t pos_ = 0;            // container offset of the next byte
  uint64_t header_offset_ = 0;  // offset of the header being read or last read
  std::array<uint8_t, kBlock> block_{};
  size_t fill_ = 0;
  int zero_blocks_ = 0;

  uint64_t remaining_ = 0;  // data or padding bytes left
  uint64_t padding_ = 0;
  bool is_row_ = false;
  ParsedRecord row_;
  std::string name_;

  // Extension headers that apply to the next member.
  bool collect_ = false;
  bool pending_ = false;
  char ext_type_ = 0;
  uint64_t ext_offset_ = 0;
  std::string payload_;
  std::optional<std::string> pax_path_;
  std::optional<uint64_t> pax_size_;
  std::optional<std::string> long_name_;
  bool pax_sparse_ = false;
  // The member's name as a message shows it: names may be 1 MiB long, and the message is
  // stored with the container's record index (the WARC scanner cuts what it quotes too).
  std::string_view shownName() const { return std::string_view(name_).substr(0, 200); }

  bool sparse_ext_ = false;   // the next block is an old-GNU sparse extension block
  uint64_t sparse_size_ = 0;  // the data size of the sparse member whose map goes on
};

}  // namespace

bool looksLikeTarHeader(std::span<const uint8_t, 512> block) {
  return allZero(block) || checksumOk(block);
}

std::unique_ptr<FormatScanner> makeTarScanner(const ParserOptions& options) {
  return std::make_unique<TarScanner>(options);
}

}  // namespace granary::index_kv

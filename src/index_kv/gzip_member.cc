// ISA-L igzip inflation of single gzip members. See gzip_member.h for why the compressed
// boundaries it reports are exact.
#include "index_kv/gzip_member.h"

#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "granary/index_kv/container_parser.h"

namespace granary::index_kv {
namespace {

// avail_in / avail_out are uint32_t: feed ISA-L at most this much per call.
constexpr size_t kMaxIsalSpan = size_t{1} << 30;

std::string_view isalErrorName(int ret) {
  switch (ret) {
    case ISAL_INVALID_BLOCK: return "invalid deflate block";
    case ISAL_INVALID_SYMBOL: return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK: return "invalid deflate back-reference distance";
    case ISAL_INVALID_WRAPPER: return "not a gzip member (bad gzip header)";
    case ISAL_UNSUPPORTED_METHOD: return "unsupported gzip compression method";
    case ISAL_INCORRECT_CHECKSUM: return "gzip CRC32 or size mismatch (corrupt member)";
    case ISAL_NEED_DICT: return "deflate stream needs a preset dictionary";
    default: return "inflate failed";
  }
}

}  // namespace

// isal_inflate_init sets every field it reads; zeroing the ~50 KB state first would be waste.
GzipMemberInflater::GzipMemberInflater()
    : state_(std::make_unique_for_overwrite<inflate_state>()) {
  isal_inflate_init(state_.get());
  reset();
}

GzipMemberInflater::~GzipMemberInflater() = default;

void GzipMemberInflater::reset() {
  isal_inflate_reset(state_.get());
  // Raw deflate, then the gzip trailer (CRC32, ISIZE) checked by ISA-L; we read the header.
  state_->crc_flag = ISAL_GZIP_NO_HDR_VER;
  header_ = Header::kFixed;
  field_left_ = kFixedHeaderSize;
  fixed_fill_ = 0;
  flags_ = 0;
  header_crc_ = 0;
}

// RFC 1952 section 2.3: ID1 ID2 CM FLG MTIME(4) XFL OS, then optional FEXTRA (XLEN and
// XLEN bytes), FNAME and FCOMMENT (zero-terminated), FHCRC (CRC16 of the header so far).
Status GzipMemberInflater::readHeader(std::span<const uint8_t> in, size_t& used) {
  while (used < in.size() && header_ != Header::kDone) {
    const uint8_t* p = in.data() + used;
    const size_t avail = in.size() - used;
    size_t take = 0;
    switch (header_) {
      case Header::kFixed:
      case Header::kExtraLen:
      case Header::kHeaderCrc:
        take = std::min(field_left_, avail);
        std::memcpy(fixed_.data() + fixed_fill_, p, take);
        fixed_fill_ += take;
        field_left_ -= take;
        break;
      case Header::kExtra:
        take = std::min(field_left_, avail);
        field_left_ -= take;
        break;
      case Header::kName:
      case Header::kComment: {
        const void* nul = std::memchr(p, 0, avail);
        take = nul ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - p) + 1 : avail;
        field_left_ = nul ? 0 : 1;
        break;
      }
      case Header::kDone:
        break;
    }
    if (header_ != Header::kHeaderCrc) {
      header_crc_ = crc32_gzip_refl(header_crc_, p, take);
    }
    used += take;
    if (field_left_ != 0) {
      continue;  // the field goes on in the next input
    }
    switch (header_) {
      case Header::kFixed:
        if (fixed_[0] != 0x1f || fixed_[1] != 0x8b) {
          return Status::invalidArgument("not a gzip member (bad magic)");
        }
        if (fixed_[2] != 8) {
          return Status::invalidArgument("unsupported gzip compression method");
        }
        flags_ = fixed_[3];
        if (flags_ & 0xe0) {
          return Status::invalidArgument("reserved gzip header flags set");
        }
        break;
      case Header::kExtraLen:
        field_left_ = fixed_[kFixedHeaderSize] | (size_t{fixed_[kFixedHeaderSize + 1]} << 8);
        break;
      case Header::kHeaderCrc:
        if ((fixed_[kFixedHeaderSize + 2] | (fixed_[kFixedHeaderSize + 3] << 8)) !=
            static_cast<int>(header_crc_ & 0xffff)) {
          return Status::invalidArgument("gzip header CRC16 mismatch");
        }
        break;
      default:
        break;
    }
    nextHeaderField();
  }
  return Status::ok();
}

// Moves to the next field present in this header (skipping empty FEXTRA data).
void GzipMemberInflater::nextHeaderField() {
  constexpr uint8_t kFHcrc = 2, kFExtra = 4, kFName = 8, kFComment = 16;
  while (true) {
    switch (header_) {
      case Header::kFixed:
        header_ = Header::kExtraLen;
        if (flags_ & kFExtra) {
          fixed_fill_ = kFixedHeaderSize;
          field_left_ = 2;
          return;
        }
        break;
      case Header::kExtraLen:
        header_ = Header::kExtra;
        if (field_left_ != 0) {
          return;  // XLEN bytes, set by the caller
        }
        break;
      case Header::kExtra:
        header_ = Header::kName;
        if (flags_ & kFName) {
          field_left_ = 1;
          return;
        }
        break;
      case Header::kName:
        header_ = Header::kComment;
        if (flags_ & kFComment) {
          field_left_ = 1;
          return;
        }
        break;
      case Header::kComment:
        header_ = Header::kHeaderCrc;
        if (flags_ & kFHcrc) {
          fixed_fill_ = kFixedHeaderSize + 2;
          field_left_ = 2;
          return;
        }
        break;
      case Header::kHeaderCrc:
      case Header::kDone:
        header_ = Header::kDone;
        return;
    }
  }
}

GzipMemberInflater::Step GzipMemberInflater::step(std::span<const uint8_t> in,
                                                  std::span<uint8_t> out) {
  Step s;
  if (state_->block_state == ISAL_BLOCK_FINISH) {
    s.member_end = true;  // caller forgot reset(); consume nothing beyond the member
    return s;
  }
  if (header_ != Header::kDone) {
    s.error = readHeader(in, s.consumed);
    if (!s.error.isOk() || header_ != Header::kDone) {
      return s;
    }
    in = in.subspan(s.consumed);
  }
  static uint8_t empty_input = 0;  // ISA-L wants a valid pointer even with avail_in == 0
  const uint32_t in_len = static_cast<uint32_t>(std::min(in.size(), kMaxIsalSpan));
  const uint32_t out_len = static_cast<uint32_t>(std::min(out.size(), kMaxIsalSpan));
  state_->next_in = in.empty() ? &empty_input : const_cast<uint8_t*>(in.data());
  state_->avail_in = in_len;
  state_->next_out = out.data();
  state_->avail_out = out_len;
  const int ret = isal_inflate(state_.get());
  s.consumed += in_len - state_->avail_in;
  s.produced = out_len - state_->avail_out;
  if (ret != ISAL_DECOMP_OK) {
    s.error = Status::invalidArgument(std::string(isalErrorName(ret)));
    return s;
  }
  s.member_end = state_->block_state == ISAL_BLOCK_FINISH;
  return s;
}

Result<std::string> inflateGzipMember(std::span<const uint8_t> member, size_t max_out) {
  GzipMemberInflater inflater;
  std::string out;
  // Never beyond max_out + 1 bytes (one byte more proves "too big"). The trailer's ISIZE
  // (the size mod 2^32, untrusted) sizes the buffer once; doubling covers a wrong one.
  // Deflate expands at most 1032:1, so a lying ISIZE cannot make us allocate (and zero)
  // more than the member could ever inflate to.
  const size_t cap = max_out == SIZE_MAX ? max_out : max_out + 1;
  size_t hint = 64 * 1024;
  if (member.size() >= 18) {
    const uint8_t* t = member.data() + member.size() - 4;
    hint = (size_t{t[0]} | size_t{t[1]} << 8 | size_t{t[2]} << 16 | size_t{t[3]} << 24) + 1;
    hint = std::min(hint, member.size() * kMaxDeflateRatio + 1);
  }
  out.resize(std::min(cap, std::max<size_t>(hint, 4096)));
  size_t used = 0;
  size_t pos = 0;
  while (true) {
    // used == cap cannot happen here: used > max_out returned below.
    if (used == out.size()) out.resize(std::min(cap, out.size() * 2));
    auto st = inflater.step(member.subspan(pos),
                            std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()) + used,
                                               out.size() - used));
    if (!st.error.isOk()) {
      return fail(Status::invalidArgument(
          fmt::format("gzip member: {} (at compressed byte {})", st.error.message(), pos)));
    }
    pos += st.consumed;
    used += st.produced;
    if (used > max_out) {
      return fail(Status::invalidArgument(
          fmt::format("gzip member inflates to more than {} bytes", max_out)));
    }
    if (st.member_end) {
      break;
    }
    if (st.consumed == 0 && st.produced == 0) {  // `out` had room: input is exhausted
      return fail(Status::invalidArgument(fmt::format(
          "truncated gzip member: input ends after {} bytes inside the member", member.size())));
    }
  }
  if (pos != member.size()) {
    return fail(Status::invalidArgument(
        fmt::format("{} trailing bytes after the gzip member (it ends at byte {})",
                    member.size() - pos, pos)));
  }
  out.resize(used);
  return out;
}

}  // namespace granary::index_kv

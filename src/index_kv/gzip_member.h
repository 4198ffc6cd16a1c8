// Streaming inflation of concatenated gzip members, one member at a time, with the exact
// compressed length of each (private to granary_containers).
//
// Why exact boundaries hold with ISA-L igzip (checked by container_parser_test against
// Python's zlib, with every chunking down to one byte): isal_inflate() buffers at most 64
// bits of input in state.read_in. When the final deflate block ends, those bits are the
// padding to a byte boundary plus fewer than 8 whole bytes, all of them part of the 8-byte
// gzip trailer; the trailer check (block_state ISAL_CHECKSUM_CHECK, then ISAL_BLOCK_FINISH)
// empties read_in and reads the rest of the trailer byte by byte. Partial block headers
// are copied to tmp_in_buffer only when the input runs out inside them. So when
// block_state reaches ISAL_BLOCK_FINISH, every input byte consumed belongs to the member
// and next_in points at the first byte after its trailer.
//
// We parse the gzip header ourselves and run ISA-L in ISAL_GZIP_NO_HDR_VER mode (raw
// deflate, then the trailer's CRC32 and ISIZE checked): ISA-L 2.30's own header parser
// (crc_flag ISAL_GZIP) keeps the header flags in a local variable of isal_inflate(), so a
// header with optional fields (FEXTRA, FNAME, FCOMMENT, FHCRC) split across two calls
// loses them: e.g. FNAME|FHCRC cut inside the name skips the CRC16 and inflates garbage
// (ISAL_INCORRECT_CHECKSUM, or worse). The stress and synthetic fixtures cover this.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "granary/common/status.h"

struct inflate_state;  // <isa-l/igzip_lib.h>, kept out of this header

namespace granary::index_kv {

class GzipMemberInflater {
 public:
  GzipMemberInflater();
  ~GzipMemberInflater();
  GzipMemberInflater(const GzipMemberInflater&) = delete;
  GzipMemberInflater& operator=(const GzipMemberInflater&) = delete;

  struct Step {
    size_t consumed = 0;      // input bytes taken; all of them belong to the current member
    size_t produced = 0;      // bytes written to `out` (also when `error` is set)
    bool member_end = false;  // the member ended (trailer read, CRC and size checked)
    // kInvalidArgument naming the problem, not the position (the caller knows it). Use the
    // `produced` bytes first: they precede the error, and a caller fed smaller pieces would
    // have seen them before it, so this keeps outcomes independent of chunking.
    Status error;
  };

  // Inflates from `in` into `out` until either runs out or the member ends. Call again
  // while a call consumes or produces anything: output can be pending with no input left.
  // After an error the inflater must be reset() before further use.
  Step step(std::span<const uint8_t> in, std::span<uint8_t> out);

  // Forgets the current member; the next step() expects a gzip header.
  void reset();

 private:
  enum class Header { kFixed, kExtraLen, kExtra, kName, kComment, kHeaderCrc, kDone };
  static constexpr size_t kFixedHeaderSize = 10;

  // Consumes gzip header bytes from in[used...], advancing `used`.
  Status readHeader(std::span<const uint8_t> in, size_t& used);
  void nextHeaderField();

  std::unique_ptr<inflate_state> state_;
  Header header_ = Header::kFixed;
  size_t field_left_ = 0;  // bytes left in the current field (1 = "until NUL" for strings)
  std::array<uint8_t, kFixedHeaderSize + 4> fixed_{};  // fixed part, XLEN, CRC16
  size_t fixed_fill_ = 0;
  uint8_t flags_ = 0;
  uint32_t header_crc_ = 0;  // CRC32 of the header bytes so far (FHCRC keeps its low 16 bits)
};

}  // namespace granary::index_kv

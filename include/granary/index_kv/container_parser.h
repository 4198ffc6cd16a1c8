// Streaming parsers for AI data containers (tar shards, WARC, per-record-gzip WARC), for the
// record index: they turn the bytes of an upload into rows "key -> byte range of the object".
//
// Contract:
//   - A ContainerParser is fed the container's bytes in order, in chunks of any size; rows and
//     outcome do not depend on the chunking (one byte at a time gives what all at once
//     gives). One exception, in the message only: for corrupt deflate data in a warc.gz,
//     ISA-L hands over more or less of the garbage it decoded before it notices, so the
//     error may name the deflate failure or a WARC-structure failure in that garbage.
//   - It never holds the whole container: it buffers the first 512 bytes while sniffing, then
//     at most one header piece (a 512-byte tar block, a pax or GNU long-name payload, or one
//     WARC header line; ParserOptions::max_header_bytes bounds them), plus a fixed 256 KiB
//     scratch buffer for inflating warc.gz. Member data is skipped, with its CRC32C computed
//     as the bytes go past.
//   - Not thread-safe: one parser per upload stream. Rows are values, owned by the caller.
//   - Errors are Status values, never exceptions. Every error uses code kInvalidArgument, and
//     its message says where (a byte offset of the container) and why. Two classes:
//       * malformed or truncated input ("tar header at byte offset 1024: bad checksum"),
//       * well-formed input that cannot be read at offsets, whose message starts with
//         "not indexable: " (see isNotIndexable()): a gzip-compressed tar (.tgz), a .warc.gz
//         whose gzip member holds more than one record, or (auto mode) neither tar nor WARC.
//     After an error the parser is stuck: feed() and finish() return the same error again.
//
// Row semantics (ParsedRecord) per format:
//   tar      key = member name (pax `path` > GNU long name 'L' > ustar prefix "/" name);
//            [offset, offset+length) = the member's data, without the header or padding.
//            Rows only for regular files (typeflag '0', '\0', '7', name not ending in '/');
//            directories, links, devices, fifos and sparse members give none. Two zero
//            blocks end the archive (later bytes are ignored); end of input at a member
//            boundary is accepted too. Header checksums are verified (unsigned or signed).
//            A pax header of typeflag 'X' (Solaris) is read as 'x'; an old-style directory
//            (typeflag '\0', name ending in '/') has no data whatever its size field says.
//   warc     key = WARC-Target-URI (trimmed, <...> removed) or WARC-Record-ID (trimmed);
//            the range is the whole record: "WARC/1.x" line, headers, block, "\r\n\r\n".
//            Records without the key (e.g. warcinfo) give no row but are checked. Of a
//            repeated key or WARC-Type field, the first counts (as warcio reads it). A key
//            over kMaxRecordKey bytes is given cut to kMaxRecordKey + 1: no row either way.
//   warc.gz  key as for warc; the range is the gzip member that holds exactly one record
//            (Common Crawl layout), so a reader fetches it and calls inflateGzipMember().
// crc32c is always CRC32C of exactly the container bytes [offset, offset+length).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/status.h"

namespace granary::index_kv {

enum class ContainerFormat { kAuto, kTar, kWarc, kWarcGz };

// "auto", "tar", "warc", "warc.gz".
std::string_view containerFormatName(ContainerFormat f);
// Inverse of containerFormatName(); nullopt for an unknown name.
std::optional<ContainerFormat> parseContainerFormat(std::string_view name);

// Which WARC header becomes the row key.
enum class WarcKey { kTargetUri, kRecordId };
// "uri" or "record-id"; nullopt for an unknown name.
std::optional<WarcKey> parseWarcKey(std::string_view name);

// One addressable unit of a container.
struct ParsedRecord {
  std::string key;      // see the row semantics above
  uint64_t offset = 0;  // tar: first data byte; warc: the record's "W"; warc.gz: member start
  uint64_t length = 0;  // tar: data size; warc: the whole record; warc.gz: compressed size
  uint32_t crc32c = 0;  // CRC32C of exactly the container bytes [offset, offset+length)
  std::string type;     // WARC-Type value ("response", "request", ...); "" for tar
  bool operator==(const ParsedRecord&) const = default;
};

struct ParserOptions {
  ContainerFormat format = ContainerFormat::kAuto;  // kAuto: sniff the first bytes
  WarcKey warc_key = WarcKey::kTargetUri;
  // A tar pax / GNU long-name payload or a WARC header block above this is malformed.
  size_t max_header_bytes = 1 << 20;
  // warc.gz: a gzip member inflating to more than this is refused (zip bomb).
  uint64_t max_inflated_member = 1ull << 32;
  // warc.gz: the whole container inflating to more than this many times its compressed
  // bytes read so far, plus max_inflated_member, is not indexable: a stream of members
  // each just under the limit would otherwise keep a CPU inflating terabytes (deflate goes
  // up to 1032:1; web content stays well under 100:1). 0: no limit.
  uint64_t max_inflate_ratio = 256;
};

// True for the "well-formed but cannot be indexed" class of errors (message prefix
// "not indexable: "); false for ok and for malformed input.
bool isNotIndexable(const Status& status);

class ContainerParser {
 public:
  explicit ContainerParser(const ParserOptions& options);
  ~ContainerParser();
  ContainerParser(const ContainerParser&) = delete;
  ContainerParser& operator=(const ContainerParser&) = delete;

  // Feeds the next bytes of the container, in order, any chunking. Appends every record
  // completed by these bytes to `out`. After an error returns that same error again and
  // ignores the input.
  Status feed(std::span<const uint8_t> data, std::vector<ParsedRecord>& out);

  // End of the container. Error if it is truncated (inside a header, member data, gzip
  // member or before a WARC record's trailer) or was never recognized. Appends remaining
  // records. Calling it twice returns the first result again.
  Status finish(std::vector<ParsedRecord>& out);

  // The detected (or given) format; kAuto while still sniffing.
  ContainerFormat format() const;
  // Bytes passed to feed() so far, including the call that failed; calls made after an
  // error are not counted.
  uint64_t bytesFed() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Deflate's largest expansion: a 258-byte match costs at least 2 bits, so about 1032:1. No
// gzip member inflates to more than its size times this.
inline constexpr size_t kMaxDeflateRatio = 1032;

// Inflates one gzip member (the bytes of one warc.gz row) with ISA-L igzip. kInvalidArgument
// if `member` is not exactly one complete gzip member (trailing bytes, truncated, bad CRC,
// bad deflate data) or inflates to more than max_out bytes.
Result<std::string> inflateGzipMember(std::span<const uint8_t> member, size_t max_out);

}  // namespace granary::index_kv

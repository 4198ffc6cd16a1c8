// Fuzz target: ContainerParser (tar, WARC, warc.gz) and inflateGzipMember.
// Properties checked on every input:
//  - no crash, hang or sanitizer report, whatever the bytes;
//  - feeding the input in two pieces (split where the first byte says) gives the same rows
//    and the same outcome class as feeding it whole;
//  - every row lies inside the input and its CRC32C is the CRC32C of those bytes;
//  - for warc.gz rows, the member inflates (the row is a whole, valid gzip member).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "granary/ec/erasure_code.h"
#include "granary/index_kv/container_parser.h"

using namespace granary;
using namespace granary::index_kv;

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "container_parser_fuzz: property violated: %s\n", what);
  std::abort();
}

struct Outcome {
  std::vector<ParsedRecord> rows;
  int cls = 0;  // 0 ok, 1 malformed, 2 not indexable
  ContainerFormat format = ContainerFormat::kAuto;
};

Outcome parse(std::span<const uint8_t> data, size_t split, ContainerFormat format) {
  ParserOptions options;
  options.format = format;
  options.max_header_bytes = 64 * 1024;
  options.max_inflated_member = 4u << 20;
  ContainerParser parser(options);
  Outcome out;
  Status st = parser.feed(data.first(split), out.rows);
  if (st.isOk()) st = parser.feed(data.subspan(split), out.rows);
  if (st.isOk()) st = parser.finish(out.rows);
  out.cls = st.isOk() ? 0 : (isNotIndexable(st) ? 2 : 1);
  out.format = parser.format();
  if (!st.isOk()) out.rows.clear();  // rows of a failed container are never published
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  const ContainerFormat formats[] = {ContainerFormat::kAuto, ContainerFormat::kTar,
                                     ContainerFormat::kWarc, ContainerFormat::kWarcGz};
  const ContainerFormat format = size > 0 ? formats[data[0] % 4] : ContainerFormat::kAuto;
  const size_t split = size > 1 ? (size_t(data[1]) * 257 + data[0]) % (size + 1) : 0;
  Outcome whole = parse(in, size, format);
  Outcome pieces = parse(in, split, format);
  if (whole.cls != pieces.cls) die("outcome depends on chunking");
  if (whole.rows != pieces.rows) die("rows depend on chunking");
  for (const ParsedRecord& r : whole.rows) {
    if (r.offset > size || r.length > size - r.offset) die("row outside the input");
    if (ec::crc32c(in.subspan(r.offset, r.length)) != r.crc32c) die("row CRC32C is wrong");
    if (whole.format == ContainerFormat::kWarcGz &&
        !inflateGzipMember(in.subspan(r.offset, r.length), 8u << 20)) {
      die("warc.gz row is not one valid gzip member");
    }
  }
  (void)inflateGzipMember(in, 1u << 20);  // must not crash on anything
  return 0;
}

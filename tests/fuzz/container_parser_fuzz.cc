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
#include <iterator>
#include <span>
#include <string>
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

namespace {

constexpr ContainerFormat kFormats[] = {ContainerFormat::kAuto, ContainerFormat::kTar,
                                        ContainerFormat::kWarc, ContainerFormat::kWarcGz};
// Inputs that gave rows, per requested format: proof that the row checks below ran for
// each parser (see GranaryFuzzSelfCheck).
uint64_t g_inputs_with_rows[std::size(kFormats)] = {};

void checkOne(std::span<const uint8_t> in, size_t split, size_t format_index) {
  const ContainerFormat format = kFormats[format_index];
  Outcome whole = parse(in, in.size(), format);
  Outcome pieces = parse(in, split, format);
  // Success or failure never depends on chunking. The kind of failure may, for gzip data
  // that does not inflate: ISA-L emits a different amount of output before reporting a
  // corrupt stream depending on where the input was cut, and the bytes it did emit may
  // already show "not WARC" (not indexable) before the corruption (malformed) is seen.
  const bool gzip = in.size() >= 2 && in[0] == 0x1f && in[1] == 0x8b;
  if ((whole.cls == 0) != (pieces.cls == 0)) die("outcome depends on chunking");
  if (!gzip && whole.cls != pieces.cls) die("kind of failure depends on chunking");
  if (whole.rows != pieces.rows) die("rows depend on chunking");
  if (!whole.rows.empty()) ++g_inputs_with_rows[format_index];
  for (const ParsedRecord& r : whole.rows) {
    if (r.offset > in.size() || r.length > in.size() - r.offset) die("row outside the input");
    if (ec::crc32c(in.subspan(r.offset, r.length)) != r.crc32c) die("row CRC32C is wrong");
    if (whole.format == ContainerFormat::kWarcGz &&
        !inflateGzipMember(in.subspan(r.offset, r.length), 8u << 20)) {
      die("warc.gz row is not one valid gzip member");
    }
  }
}

}  // namespace

// Every input is parsed as each format (sniffed, tar, WARC, warc.gz): a format picked from
// the input's bytes left whole seed files (a WARC starts with 'W') never reaching their
// own parser.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  const size_t split = size > 1 ? (size_t(data[1]) * 257 + data[0]) % (size + 1) : 0;
  for (size_t f = 0; f < std::size(kFormats); ++f) checkOne(in, split, f);
  (void)inflateGzipMember(in, 1u << 20);  // must not crash on anything
  return 0;
}

// Called by replay_main.cc after a replay (libFuzzer never calls it): fails unless every
// format's parser produced rows for some input, so the row checks cannot pass by never
// running.
extern "C" int GranaryFuzzSelfCheck() {
  for (size_t f = 0; f < std::size(kFormats); ++f) {
    std::printf("format %s: %llu inputs gave rows\n",
                std::string(containerFormatName(kFormats[f])).c_str(),
                static_cast<unsigned long long>(g_inputs_with_rows[f]));
    if (g_inputs_with_rows[f] == 0) return 1;
  }
  return 0;
}

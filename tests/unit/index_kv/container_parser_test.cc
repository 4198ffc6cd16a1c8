// Tests of the streaming tar / WARC / warc.gz parsers. Expected rows for real files come
// from testdata/gen_expected.py (Python tarfile, zlib and a CRC32C table), never from the
// code under test; every input is parsed whole, byte by byte and in random chunks, and the
// results must be identical.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "granary/ec/erasure_code.h"
#include "granary/index_kv/container_parser.h"
#include "granary/index_kv/index.h"

using namespace granary;
using namespace granary::index_kv;

namespace granary::index_kv {
std::ostream& operator<<(std::ostream& os, const ParsedRecord& r) {
  return os << "{" << r.key << ", " << r.offset << ", " << r.length << ", " << std::hex
            << r.crc32c << std::dec << ", " << r.type << "}";
}
}  // namespace granary::index_kv

namespace {

using Bytes = std::vector<uint8_t>;

Bytes readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

Bytes shared(const std::string& rel) { return readFile(std::string(GRANARY_TESTDATA_DIR) + "/" + rel); }
Bytes fixture(const std::string& name) {
  return readFile(std::string(GRANARY_CONTAINER_FIXTURES) + "/" + name);
}
Bytes bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }

// testdata/<name>.expected: key \t offset \t length \t crc32c-hex \t type
std::vector<ParsedRecord> expected(const std::string& name) {
  std::ifstream in(std::string(GRANARY_CONTAINER_FIXTURES) + "/" + name + ".expected");
  REQUIRE(in.good());
  std::vector<ParsedRecord> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string part; std::getline(ss, part, '\t');) {
      f.push_back(part);
    }
    if (f.size() == 4) {
      f.emplace_back();  // empty type (tar)
    }
    REQUIRE(f.size() == 5);
    rows.push_back({f[0], std::stoull(f[1]), std::stoull(f[2]),
                    static_cast<uint32_t>(std::stoul(f[3], nullptr, 16)), f[4]});
  }
  REQUIRE(!rows.empty());
  return rows;
}

struct Outcome {
  Status status;
  std::vector<ParsedRecord> rows;
  ContainerFormat format = ContainerFormat::kAuto;
  uint64_t fed = 0;
};

// Feeds `data` in pieces: chunk 0 = all at once, otherwise pieces of `chunk` bytes, or of
// random sizes when `seed` != 0. Stops at the first error.
Outcome parseWith(std::span<const uint8_t> data, const ParserOptions& options, size_t chunk,
                  uint32_t seed = 0) {
  ContainerParser parser(options);
  Outcome o;
  std::mt19937 rng(seed);
  size_t pos = 0;
  while (pos < data.size() && o.status.isOk()) {
    size_t n = data.size() - pos;
    if (seed != 0) {
      const size_t limit = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 70000 : 700;
      n = std::min(n, std::uniform_int_distribution<size_t>(1, limit)(rng));
    } else if (chunk != 0) {
      n = std::min(n, chunk);
    }
    o.status = parser.feed(data.subspan(pos, n), o.rows);
    pos += n;
  }
  if (o.status.isOk()) {
    o.status = parser.finish(o.rows);
  }
  o.format = parser.format();
  o.fed = parser.bytesFed();
  return o;
}

// All chunkings must agree; returns the all-at-once outcome.
Outcome parseAllWays(std::span<const uint8_t> data, const ParserOptions& options = {}) {
  Outcome whole = parseWith(data, options, 0);
  std::vector<Outcome> others;
  others.push_back(parseWith(data, options, 1));
  others.push_back(parseWith(data, options, 511));
  for (uint32_t seed : {1u, 7u, 42u}) {
    others.push_back(parseWith(data, options, 0, seed));
  }
  for (const auto& o : others) {
    CHECK(o.status.code() == whole.status.code());
    CHECK(o.status.message() == whole.status.message());
    CHECK(o.rows == whole.rows);
    CHECK(o.format == whole.format);
  }
  return whole;
}

ParserOptions withFormat(ContainerFormat f, WarcKey key = WarcKey::kTargetUri) {
  ParserOptions o;
  o.format = f;
  o.warc_key = key;
  return o;
}

void checkFile(const Bytes& data, const std::string& expected_name, ContainerFormat format,
               WarcKey key = WarcKey::kTargetUri) {
  INFO(expected_name);
  const auto want = expected(expected_name);
  for (ContainerFormat given : {ContainerFormat::kAuto, format}) {
    Outcome o = parseAllWays(data, withFormat(given, key));
    REQUIRE(o.status.isOk());
    CHECK(o.rows == want);
    CHECK(o.format == format);
    CHECK(o.fed == data.size());
    // The parsed rows' CRCs match the bytes they point at (the parser's, not the fixture's).
    for (const auto& r : o.rows) {
      REQUIRE(r.offset + r.length <= data.size());
      CHECK(ec::crc32c(std::span(data).subspan(r.offset, r.length)) == r.crc32c);
    }
  }
}

bool isMalformed(const Status& s) {
  return s.code() == Status::Code::kInvalidArgument && !isNotIndexable(s);
}

// ---- a tiny tar writer, for headers Python's tarfile will not write --------------------

struct TarHeader {
  std::string name;
  char type = '0';
  uint64_t size = 0;
  std::string prefix = {};
  bool base256 = false;
  bool v7 = false;          // no ustar magic
  bool signed_sum = false;  // checksum over signed chars (old tars)
  bool bad_sum = false;
};

Bytes tarHeader(const TarHeader& h) {
  Bytes b(512, 0);
  std::memcpy(b.data(), h.name.data(), std::min<size_t>(h.name.size(), 100));
  std::memcpy(&b[100], "0000644", 7);
  if (h.base256) {
    b[124] = 0x80;
    for (int i = 0; i < 8; ++i) {
      b[135 - i] = static_cast<uint8_t>(h.size >> (8 * i));
    }
  } else {
    std::snprintf(reinterpret_cast<char*>(&b[124]), 12, "%011llo",
                  static_cast<unsigned long long>(h.size));
  }
  std::memcpy(&b[136], "14707054132", 11);
  b[156] = static_cast<uint8_t>(h.type);
  if (!h.v7) {
    std::memcpy(&b[257], "ustar\0" "00", 8);
    std::memcpy(&b[345], h.prefix.data(), std::min<size_t>(h.prefix.size(), 155));
  }
  std::memset(&b[148], ' ', 8);
  int64_t sum = 0;
  for (uint8_t c : b) {
    sum += h.signed_sum ? static_cast<int8_t>(c) : c;
  }
  if (h.bad_sum) {
    sum += 1;
  }
  std::snprintf(reinterpret_cast<char*>(&b[148]), 8, "%06llo", static_cast<long long>(sum));
  return b;
}

void append(Bytes& out, const Bytes& more) { out.insert(out.end(), more.begin(), more.end()); }

// Appends a member; returns its row as the parser must report it.
ParsedRecord addMember(Bytes& tar, const TarHeader& h, std::string_view data) {
  append(tar, tarHeader(h));
  ParsedRecord r{h.prefix.empty() ? h.name : h.prefix + "/" + h.name, tar.size(), data.size(),
                 ec::crc32c({reinterpret_cast<const uint8_t*>(data.data()), data.size()}), ""};
  append(tar, bytes(data));
  tar.resize((tar.size() + 511) / 512 * 512, 0);
  return r;
}

Bytes paxPayload(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string out;
  for (const auto& [k, v] : kv) {
    const std::string body = " " + k + "=" + v + "\n";
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) {
      ++len;
    }
    out += std::to_string(len) + body;
  }
  return bytes(out);
}

void endArchive(Bytes& tar) { tar.resize(tar.size() + 1024, 0); }

std::string warcRecord(std::string_view headers, std::string_view block) {
  return "WARC/1.0\r\n" + std::string(headers) + "Content-Length: " +
         std::to_string(block.size()) + "\r\n\r\n" + std::string(block) + "\r\n\r\n";
}

}  // namespace

TEST_CASE("Format and WARC key names round-trip, unknown names are refused") {
  for (auto f : {ContainerFormat::kAuto, ContainerFormat::kTar, ContainerFormat::kWarc,
                 ContainerFormat::kWarcGz}) {
    CHECK(parseContainerFormat(containerFormatName(f)) == f);
  }
  CHECK(containerFormatName(ContainerFormat::kWarcGz) == "warc.gz");
  CHECK_FALSE(parseContainerFormat("tgz").has_value());
  CHECK(parseWarcKey("uri") == WarcKey::kTargetUri);
  CHECK(parseWarcKey("record-id") == WarcKey::kRecordId);
  CHECK_FALSE(parseWarcKey("URI").has_value());
  CHECK_FALSE(isNotIndexable(Status::ok()));
  CHECK_FALSE(isNotIndexable(Status::invalidArgument("bad")));
  CHECK(isNotIndexable(Status::invalidArgument("not indexable: x")));
  CHECK_FALSE(isNotIndexable(Status::corruption("not indexable: x")));
}

TEST_CASE("WebDataset tar shards give one row per regular member, as Python's tarfile") {
  checkFile(shared("webdataset/tendata.tar"), "tendata.tar", ContainerFormat::kTar);
  checkFile(shared("webdataset/mpdata.tar"), "mpdata.tar", ContainerFormat::kTar);
  // compressed.tar starts with a directory entry: no row for it.
  checkFile(shared("webdataset/compressed.tar"), "compressed.tar", ContainerFormat::kTar);
}

TEST_CASE("Pax path (300 chars), GNU long names, links and directories follow tarfile") {
  checkFile(fixture("synthetic_pax.tar"), "synthetic_pax.tar", ContainerFormat::kTar);
  checkFile(fixture("synthetic_gnu.tar"), "synthetic_gnu.tar", ContainerFormat::kTar);
  // An old-GNU sparse member whose map goes on in an extension block: no row for it (its
  // data is not contiguous), and the member after it where tarfile finds it.
  checkFile(fixture("gnu_sparse.tar"), "gnu_sparse.tar", ContainerFormat::kTar);
  Outcome pax = parseAllWays(fixture("synthetic_pax.tar"));
  REQUIRE(pax.status.isOk());
  REQUIRE_FALSE(pax.rows.empty());
  CHECK(pax.rows[0].key.size() == 300);  // the parser took the pax path, not the ustar name
}

TEST_CASE("A gzip-compressed tar is not indexable in auto mode and malformed when named") {
  const Bytes tgz = shared("webdataset/sample.tgz");
  Outcome o = parseAllWays(tgz);
  CHECK(isNotIndexable(o.status));
  CHECK_THAT(o.status.message(), Catch::Contains(".tgz"));
  CHECK(o.rows.empty());
  CHECK(isMalformed(parseAllWays(tgz, withFormat(ContainerFormat::kTar)).status));
  CHECK(isMalformed(parseAllWays(tgz, withFormat(ContainerFormat::kWarcGz)).status));
}

TEST_CASE("Plain WARC files give one row per record with the key, whole record ranges") {
  checkFile(shared("warc/example.warc"), "example.warc", ContainerFormat::kWarc);
  checkFile(shared("warc/example-iana.org-chunked.warc"), "example-iana.org-chunked.warc",
            ContainerFormat::kWarc);
  // Keyed by WARC-Record-ID, warcinfo records get rows too.
  checkFile(shared("warc/example.warc"), "example.warc.record-id", ContainerFormat::kWarc,
            WarcKey::kRecordId);
}

TEST_CASE("A truncated WARC file is malformed, at any cut that is not a record boundary") {
  CHECK(isMalformed(parseAllWays(shared("warc/example-trunc.warc")).status));

  const Bytes full = shared("warc/example.warc");
  const auto all = expected("example.warc.record-id");
  ParserOptions o = withFormat(ContainerFormat::kWarc, WarcKey::kRecordId);
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    std::vector<ParsedRecord> want;
    bool boundary = cut == 0;
    for (const auto& r : all) {
      if (r.offset + r.length <= cut) {
        want.push_back(r);
      }
      boundary = boundary || r.offset + r.length == cut;
    }
    Outcome got = parseWith(std::span(full).first(cut), o, 0);
    INFO("cut at " << cut << ": " << got.status.toString());
    REQUIRE(got.status.isOk() == boundary);
    if (boundary) {
      CHECK(got.rows == want);
    } else {
      CHECK(isMalformed(got.status));
    }
  }
}

TEST_CASE("warc.gz files give one row per gzip member, boundaries as zlib finds them") {
  for (std::string name : {"example.warc.gz", "example-resource.warc.gz",
                           "example-space-in-target-uri.warc.gz",
                           "example-wget-bad-target-uri.warc.gz", "post-test.warc.gz"}) {
    checkFile(shared("warc/" + name), name, ContainerFormat::kWarcGz);
  }
  checkFile(shared("warc/example.warc.gz"), "example.warc.gz.record-id",
            ContainerFormat::kWarcGz, WarcKey::kRecordId);
  // Hand-written members: stored blocks, FEXTRA/FNAME/FCOMMENT/FHCRC headers, many sizes.
  checkFile(fixture("synthetic_members.warc.gz"), "synthetic_members.warc.gz",
            ContainerFormat::kWarcGz);
  checkFile(fixture("stress.warc.gz"), "stress.warc.gz", ContainerFormat::kWarcGz);
  // Every small chunk size, so that chunk ends fall in every part of gzip headers, deflate
  // blocks and trailers (ISA-L 2.30 itself mis-parses a gzip header split across calls).
  const Bytes stress = fixture("stress.warc.gz");
  const auto want = expected("stress.warc.gz");
  for (size_t chunk = 1; chunk <= 64; ++chunk) {
    INFO("chunk " << chunk);
    Outcome o = parseWith(stress, withFormat(ContainerFormat::kWarcGz), chunk);
    REQUIRE(o.status.isOk());
    CHECK(o.rows == want);
  }
}

TEST_CASE("Each warc.gz row inflates on its own to exactly one WARC record") {
  for (std::string name : {"example.warc.gz", "post-test.warc.gz",
                           "example-wget-bad-target-uri.warc.gz"}) {
    const Bytes file = shared("warc/" + name);
    Outcome o = parseAllWays(file, withFormat(ContainerFormat::kWarcGz, WarcKey::kRecordId));
    REQUIRE(o.status.isOk());
    REQUIRE(!o.rows.empty());
    for (const auto& r : o.rows) {
      auto rec = inflateGzipMember(std::span(file).subspan(r.offset, r.length), 1 << 20);
      REQUIRE(rec.has_value());
      CHECK(rec->starts_with("WARC/1.0"));
      CHECK(rec->ends_with("\r\n\r\n"));
      Outcome plain = parseAllWays(bytes(*rec), withFormat(ContainerFormat::kWarc,
                                                           WarcKey::kRecordId));
      REQUIRE(plain.status.isOk());
      REQUIRE(plain.rows.size() == 1);
      CHECK(plain.rows[0].key == r.key);
      CHECK(plain.rows[0].type == r.type);
      CHECK(plain.rows[0].length == rec->size());
    }
  }
}

TEST_CASE("A warc.gz whose one gzip member holds several records is not indexable") {
  const Bytes file = shared("warc/example-bad-non-chunked.warc.gz");
  for (auto f : {ContainerFormat::kAuto, ContainerFormat::kWarcGz}) {
    Outcome o = parseAllWays(file, withFormat(f));
    CHECK(isNotIndexable(o.status));
    CHECK_THAT(o.status.message(), Catch::Contains("more than one WARC record"));
  }
}

TEST_CASE("inflateGzipMember rejects truncation, trailing bytes, bad CRC and oversize") {
  const Bytes file = shared("warc/example.warc.gz");
  const auto rows = expected("example.warc.gz.record-id");
  const auto member = std::span(file).subspan(rows[2].offset, rows[2].length);
  auto ok = inflateGzipMember(member, 1 << 20);
  REQUIRE(ok.has_value());
  for (size_t cut = 0; cut < member.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK_FALSE(inflateGzipMember(member.first(cut), 1 << 20).has_value());
  }
  // Trailing bytes: the next member, or one stray byte.
  CHECK_FALSE(inflateGzipMember(std::span(file).subspan(rows[2].offset, rows[2].length + 1),
                                1 << 20).has_value());
  Bytes corrupt(member.begin(), member.end());
  corrupt[corrupt.size() - 6] ^= 0x01;  // inside the CRC32 of the trailer
  auto bad = inflateGzipMember(corrupt, 1 << 20);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code() == Status::Code::kInvalidArgument);
  CHECK(inflateGzipMember(member, ok->size()).has_value());
  CHECK_FALSE(inflateGzipMember(member, ok->size() - 1).has_value());
}

TEST_CASE("A container of members each under max_inflated_member is bounded as a whole") {
  // Two bombs of 32 MiB from 32 KiB each: under a 40 MiB member limit, but 64 MiB in all
  // is over 40 MiB + 256 times the 64 KiB read.
  const Bytes bomb = fixture("bomb.warc.gz");
  Bytes two = bomb;
  append(two, bomb);
  ParserOptions o = withFormat(ContainerFormat::kWarcGz);
  o.max_inflated_member = 40 << 20;
  Outcome bounded = parseAllWays(two, o);
  CHECK(isNotIndexable(bounded.status));
  CHECK_THAT(bounded.status.message(),
             Catch::Contains("inflates to over 256 times its compressed size (by byte offset " +
                             std::to_string(bomb.size()) + ")"));
  o.max_inflate_ratio = 0;
  Outcome unbounded = parseAllWays(two, o);
  REQUIRE(unbounded.status.isOk());
  CHECK(unbounded.rows.size() == 2);
}

TEST_CASE("A zip bomb member is refused above max_inflated_member") {
  const Bytes bomb = fixture("bomb.warc.gz");
  checkFile(bomb, "bomb.warc.gz", ContainerFormat::kWarcGz);  // 32 MiB: fine by default
  ParserOptions small = withFormat(ContainerFormat::kWarcGz);
  small.max_inflated_member = 1 << 20;
  Outcome o = parseAllWays(bomb, small);
  CHECK(isMalformed(o.status));
  CHECK_THAT(o.status.message(), Catch::Contains("max_inflated_member"));
  CHECK_FALSE(inflateGzipMember(bomb, 1 << 20).has_value());
  auto full = inflateGzipMember(bomb, 64 << 20);
  REQUIRE(full.has_value());
  CHECK(full->size() > (32u << 20));
}

TEST_CASE("Truncated warc.gz and garbage between members are malformed") {
  const Bytes file = shared("warc/example.warc.gz");
  const auto rows = expected("example.warc.gz.record-id");
  Outcome cut = parseAllWays(std::span(file).first(rows[3].offset + 10),
                             withFormat(ContainerFormat::kWarcGz));
  CHECK(isMalformed(cut.status));
  CHECK_THAT(cut.status.message(), Catch::Contains("truncated gzip member"));
  Bytes junk(file.begin(), file.begin() + rows[1].offset);
  append(junk, bytes("junk"));
  CHECK(isMalformed(parseAllWays(junk).status));
}

TEST_CASE("Synthesized tars: base-256 size, v7 and signed checksums, prefix, pax, 'g'") {
  Bytes tar;
  std::vector<ParsedRecord> want;
  append(tar, tarHeader({.name = "dir/", .type = '5'}));
  want.push_back(addMember(tar, {.name = "b256.bin", .size = 1000, .base256 = true},
                           std::string(1000, 'q')));
  want.push_back(addMember(tar, {.name = "old.txt", .type = '\0', .size = 3, .v7 = true},
                           "v7!"));
  want.push_back(addMember(tar, {.name = "caf\xc3\xa9.txt", .size = 2, .signed_sum = true},
                           "hi"));
  want.push_back(addMember(tar, {.name = "name.txt", .size = 4, .prefix = "the/prefix"},
                           "abcd"));
  want.push_back(addMember(tar, {.name = "empty", .size = 0}, ""));
  append(tar, tarHeader({.name = "link", .type = '2'}));
  // A global header's path applies to no member; an 'x' header's path and size do.
  Bytes g = paxPayload({{"path", "global/ignored"}, {"comment", "x"}});
  addMember(tar, {.name = "pax_global_header", .type = 'g', .size = g.size()},
            std::string(g.begin(), g.end()));
  Bytes x = paxPayload({{"path", "pax/overrides/the/name.bin"}, {"size", "5"}});
  addMember(tar, {.name = "PaxHeaders/x", .type = 'x', .size = x.size()},
            std::string(x.begin(), x.end()));
  auto pax = addMember(tar, {.name = "short-name", .size = 0}, "");
  append(tar, bytes("12345"));
  tar.resize((tar.size() + 511) / 512 * 512, 0);
  want.push_back({"pax/overrides/the/name.bin", pax.offset, 5,
                  ec::crc32c(bytes("12345")), ""});
  want.push_back(addMember(tar, {.name = "after-pax", .size = 1}, "z"));
  const size_t boundary = tar.size();
  endArchive(tar);
  append(tar, bytes("anything after the end marker is ignored"));

  Outcome o = parseAllWays(tar);
  REQUIRE(o.status.isOk());
  CHECK(o.format == ContainerFormat::kTar);
  CHECK(o.rows == want);
  CHECK(o.rows[4].crc32c == 0);

  // EOF at a member boundary without the end marker is accepted...
  Outcome no_end = parseAllWays(std::span(tar).first(boundary));
  REQUIRE(no_end.status.isOk());
  CHECK(no_end.rows == want);
  // ...any other cut is not.
  // Cuts: in the last member's padding, in its header, in data, in padding, in a header.
  for (size_t cut : {boundary - 511, boundary - 512 - 100, want[0].offset + 10,
                     want[0].offset + 1000 + 5, size_t{100}}) {
    INFO("cut at " << cut);
    Outcome t = parseAllWays(std::span(tar).first(cut), withFormat(ContainerFormat::kTar));
    CHECK(isMalformed(t.status));
  }
}

TEST_CASE("A tar whose only or last header is a global pax header is well formed") {
  // `git archive` of an empty tree: a 'g' header (the commit id), then the end marker.
  Bytes g = paxPayload({{"comment", "0123456789abcdef0123456789abcdef01234567"}});
  Bytes tar;
  addMember(tar, {.name = "pax_global_header", .type = 'g', .size = g.size()},
            std::string(g.begin(), g.end()));
  const size_t boundary = tar.size();
  endArchive(tar);
  Outcome o = parseAllWays(tar, withFormat(ContainerFormat::kTar));
  REQUIRE(o.status.isOk());
  CHECK(o.rows.empty());
  CHECK(parseAllWays(std::span(tar).first(boundary), withFormat(ContainerFormat::kTar))
            .status.isOk());
  // After a member, and before an 'x' header whose member starts at the 'x' header.
  Bytes more;
  std::vector<ParsedRecord> want;
  want.push_back(addMember(more, {.name = "a", .size = 1}, "a"));
  addMember(more, {.name = "pax_global_header", .type = 'g', .size = g.size()},
            std::string(g.begin(), g.end()));
  Bytes x = paxPayload({{"path", "long/name.bin"}});
  addMember(more, {.name = "PaxHeaders/x", .type = 'x', .size = x.size()},
            std::string(x.begin(), x.end()));
  auto named = addMember(more, {.name = "short", .size = 2}, "bc");
  want.push_back({"long/name.bin", named.offset, 2, ec::crc32c(bytes("bc")), ""});
  addMember(more, {.name = "pax_global_header", .type = 'g', .size = g.size()},
            std::string(g.begin(), g.end()));
  endArchive(more);
  Outcome m = parseAllWays(more, withFormat(ContainerFormat::kTar));
  REQUIRE(m.status.isOk());
  CHECK(m.rows == want);
  // An 'x' header still needs its member.
  Bytes lone_x;
  addMember(lone_x, {.name = "PaxHeaders/x", .type = 'x', .size = x.size()},
            std::string(x.begin(), x.end()));
  endArchive(lone_x);
  CHECK(isMalformed(parseAllWays(lone_x, withFormat(ContainerFormat::kTar)).status));
}

TEST_CASE("Malformed tars: bad checksum, empty name, lone zero block, oversized pax") {
  Bytes good;
  addMember(good, {.name = "a", .size = 1}, "a");

  Bytes bad_sum = good;
  addMember(bad_sum, {.name = "b", .size = 1, .bad_sum = true}, "b");
  Outcome o = parseAllWays(bad_sum, withFormat(ContainerFormat::kTar));
  CHECK(isMalformed(o.status));
  CHECK_THAT(o.status.message(), Catch::Contains("byte offset 1024") &&
                                     Catch::Contains("checksum"));
  CHECK(o.rows.size() == 1);  // the member before it was reported

  Bytes empty_name = good;
  addMember(empty_name, {.name = "", .size = 1}, "b");
  CHECK(isMalformed(parseAllWays(empty_name).status));

  Bytes lone_zero = good;
  lone_zero.resize(lone_zero.size() + 512, 0);
  addMember(lone_zero, {.name = "c", .size = 1}, "c");
  CHECK(isMalformed(parseAllWays(lone_zero).status));

  Bytes big_pax;
  Bytes x = paxPayload({{"path", std::string(3000, 'p')}});
  addMember(big_pax, {.name = "x", .type = 'x', .size = x.size()}, std::string(x.begin(), x.end()));
  addMember(big_pax, {.name = "f", .size = 1}, "f");
  ParserOptions small = withFormat(ContainerFormat::kTar);
  small.max_header_bytes = 1024;
  CHECK(isMalformed(parseAllWays(big_pax, small).status));
  Outcome fine = parseAllWays(big_pax);
  REQUIRE(fine.status.isOk());
  CHECK(fine.rows.at(0).key == std::string(3000, 'p'));

  Bytes bad_pax;
  Bytes junk = bytes("99 path=x\n");
  addMember(bad_pax, {.name = "x", .type = 'x', .size = junk.size()},
            std::string(junk.begin(), junk.end()));
  addMember(bad_pax, {.name = "f", .size = 1}, "f");
  CHECK(isMalformed(parseAllWays(bad_pax).status));
}

TEST_CASE("Auto mode: a tar whose first member is named WARC/ is a tar, junk is not indexable") {
  Bytes tar;
  auto r = addMember(tar, {.name = "WARC/1.0/record.warc", .size = 3}, "abc");
  endArchive(tar);
  Outcome o = parseAllWays(tar);
  REQUIRE(o.status.isOk());
  CHECK(o.format == ContainerFormat::kTar);
  CHECK(o.rows == std::vector<ParsedRecord>{r});

  Bytes junk(4096);
  std::mt19937 rng(3);
  for (auto& b : junk) {
    b = static_cast<uint8_t>(rng() | 0x01);  // never all zero, never gzip magic
  }
  junk[0] = 'J';
  CHECK(isNotIndexable(parseAllWays(junk).status));
  CHECK(isNotIndexable(parseAllWays(Bytes{}).status));
  CHECK(isNotIndexable(parseAllWays(bytes("WAR")).status));
  // A first block of zeros is an empty tar only if everything is zeros: an ISO image starts
  // with 32 KiB of them, then its volume descriptor.
  Bytes iso(32768 + 2048, 0);
  std::memcpy(&iso[32769], "CD001", 5);
  CHECK(isNotIndexable(parseAllWays(iso).status));
  Bytes empty_tar(10240, 0);
  Outcome empty = parseAllWays(empty_tar);
  REQUIRE(empty.status.isOk());
  CHECK(empty.format == ContainerFormat::kTar);
  CHECK(empty.rows.empty());
  // An explicit format that does not match is malformed, not "not indexable".
  CHECK(isMalformed(parseAllWays(junk, withFormat(ContainerFormat::kWarc)).status));
  CHECK(isMalformed(parseAllWays(tar, withFormat(ContainerFormat::kWarc)).status));
  CHECK(isMalformed(parseAllWays(shared("warc/example.warc"),
                                 withFormat(ContainerFormat::kWarcGz)).status));
  CHECK(isMalformed(parseAllWays(shared("warc/example.warc"),
                                 withFormat(ContainerFormat::kTar)).status));
  // Explicit formats accept an empty container.
  CHECK(parseAllWays(Bytes{}, withFormat(ContainerFormat::kTar)).status.isOk());
}

TEST_CASE("WARC headers: bare LF, any name case, folding, <uri>, records without key") {
  std::string w = warcRecord("WARC-Type: warcinfo\r\n", "software: test\r\n");
  const uint64_t second = w.size();
  std::string rec2 = "WARC/1.1\nwarc-type: response\nwarc-target-uri:   <http://a.example/x>  \n"
                     "X-Folded: one\n two\ncontent-LENGTH: 3\n\nabc\r\n\r\n";
  w += rec2;
  const uint64_t third = w.size();
  std::string rec3 = warcRecord("WARC-Type: resource\r\nWARC-Target-URI: http://b.example/\r\n"
                                " continued\r\n", "");
  w += rec3;
  Outcome o = parseAllWays(bytes(w));
  REQUIRE(o.status.isOk());
  CHECK(o.format == ContainerFormat::kWarc);
  const auto crc = [](std::string_view s) {
    return ec::crc32c({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  };
  CHECK(o.rows == std::vector<ParsedRecord>{
                      {"http://a.example/x", second, rec2.size(), crc(rec2), "response"},
                      {"http://b.example/ continued", third, rec3.size(), crc(rec3), "resource"}});
}

TEST_CASE("Malformed WARC: no or bad Content-Length, missing trailer, oversized header") {
  const auto malformed = [](std::string text, ParserOptions o = withFormat(ContainerFormat::kWarc)) {
    Outcome out = parseAllWays(bytes(text), o);
    INFO(text << " -> " << out.status.toString());
    CHECK(isMalformed(out.status));
    return out.status.message();
  };
  malformed("WARC/1.0\r\nWARC-Type: resource\r\n\r\n\r\n\r\n");
  CHECK_THAT(malformed("WARC/1.0\r\nContent-Length: 1x\r\n\r\nab\r\n\r\n"),
             Catch::Contains("Content-Length"));
  CHECK_THAT(malformed("WARC/1.0\r\nContent-Length: 2\r\n\r\nab\r\nXX"),
             Catch::Contains("\\r\\n\\r\\n"));
  malformed("WARC/1.0\r\nContent-Length: 2\r\n\r\nab\r\n");    // truncated trailer
  malformed("WARC/1.0\r\nContent-Length: 10\r\n\r\nab");        // truncated block
  malformed("WARC/1.0\r\nContent-Length: 1\r\n");               // truncated header
  malformed("WARC/x\r\nContent-Length: 0\r\n\r\n\r\n\r\n");     // version line
  malformed("WARC/1.0\r\nno colon here\r\nContent-Length: 0\r\n\r\n\r\n\r\n");
  malformed(warcRecord("", "x") + "GARBAGE");
  // A type is a short token: it is stored in every row and sent back as a header.
  CHECK_THAT(malformed(warcRecord("WARC-Type: resp\ronse\r\n", "x")),
             Catch::Contains("WARC-Type"));
  CHECK_THAT(malformed(warcRecord("WARC-Type: " + std::string(300, 'r') + "\r\n", "x")),
             Catch::Contains("WARC-Type"));
  CHECK(parseAllWays(bytes(warcRecord("WARC-Type: " + std::string(256, 'r') + "\r\n", "x")),
                     withFormat(ContainerFormat::kWarc))
            .status.isOk());
  ParserOptions small = withFormat(ContainerFormat::kWarc);
  small.max_header_bytes = 64;
  CHECK_THAT(malformed(warcRecord("WARC-Target-URI: http://" + std::string(100, 'a') + "/\r\n",
                                  "x"), small),
             Catch::Contains("limit"));
}

TEST_CASE("After an error the parser repeats it and ignores input, format is known early") {
  ContainerParser p(ParserOptions{});
  std::vector<ParsedRecord> rows;
  CHECK(p.format() == ContainerFormat::kAuto);
  REQUIRE(p.feed(bytes("WARC/1.0\r\n"), rows).isOk());
  CHECK(p.format() == ContainerFormat::kAuto);  // could still be a tar named "WARC/..."
  Bytes junk = bytes("no colon here\r\n");
  junk.resize(600, 'x');
  Status first = p.feed(junk, rows);
  REQUIRE(isMalformed(first));
  CHECK(p.format() == ContainerFormat::kWarc);
  const uint64_t fed = p.bytesFed();
  CHECK(fed == 610);
  Status again = p.feed(bytes("WARC/1.0\r\n"), rows);
  CHECK(again.message() == first.message());
  CHECK(p.finish(rows).message() == first.message());
  CHECK(p.bytesFed() == fed);
  CHECK(rows.empty());

  ContainerParser gz(ParserOptions{});
  const Bytes file = shared("warc/example.warc.gz");
  REQUIRE(gz.feed(std::span(file).first(2), rows).isOk());
  CHECK(gz.format() == ContainerFormat::kAuto);  // gzip, but of what?
  REQUIRE(gz.feed(std::span(file).subspan(2), rows).isOk());
  CHECK(gz.format() == ContainerFormat::kWarcGz);
  REQUIRE(gz.finish(rows).isOk());
  CHECK(rows.size() == expected("example.warc.gz").size());
}

// For corrupt deflate data the message may differ with chunking: ISA-L delivers a different
// amount of the garbage it decoded before it detects the corruption, so either the deflate
// error or a WARC-structure error in that garbage is named first. The class and the rows
// must not differ, nor anything for uncompressed containers.
TEST_CASE("Corrupted containers give ok or kInvalidArgument, the same for every chunking") {
  std::vector<Bytes> inputs = {shared("warc/example.warc.gz"), shared("warc/example.warc"),
                               fixture("synthetic_pax.tar"), fixture("synthetic_gnu.tar"),
                               fixture("synthetic_members.warc.gz")};
  std::mt19937 rng(12345);
  for (const Bytes& original : inputs) {
    for (int round = 0; round < 150; ++round) {
      Bytes data = original;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < flips; ++i) {
        data[rng() % data.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      }
      if (rng() % 4 == 0) {
        data.resize(rng() % data.size());
      }
      Outcome whole = parseWith(data, {}, 0);
      INFO("round " << round << ": " << whole.status.toString());
      CHECK((whole.status.isOk() || whole.status.code() == Status::Code::kInvalidArgument));
      for (Outcome other : {parseWith(data, {}, 1), parseWith(data, {}, 0, round + 1)}) {
        CHECK(other.status.code() == whole.status.code());
        CHECK(isNotIndexable(other.status) == isNotIndexable(whole.status));
        CHECK(other.rows == whole.rows);
        if (original[0] != 0x1f) {
          CHECK(other.status.message() == whole.status.message());
        }
      }
    }
  }
}

TEST_CASE("Solaris 'X' pax headers and v7 directories with a size are read as tarfile does") {
  Bytes tar;
  std::vector<ParsedRecord> want;
  const std::string long_path = "deep/" + std::string(300, 'p') + ".txt";
  Bytes x = paxPayload({{"path", long_path}});
  addMember(tar, {.name = "PaxHeaders/X", .type = 'X', .size = x.size()},
            std::string(x.begin(), x.end()));
  auto named = addMember(tar, {.name = "short", .size = 3}, "abc");
  named.key = long_path;
  want.push_back(named);
  // An old-style directory whose size field says 4096: no data follows it.
  append(tar, tarHeader({.name = "dir/", .type = '\0', .size = 4096, .v7 = true}));
  want.push_back(addMember(tar, {.name = "dir/a", .size = 1}, "a"));
  want.push_back(addMember(tar, {.name = "dir/b", .size = 2}, "bb"));
  endArchive(tar);
  Outcome o = parseAllWays(tar);
  REQUIRE(o.status.isOk());
  CHECK(o.rows == want);
}

TEST_CASE("WARC: of a repeated key or WARC-Type field the first counts, as warcio reads it") {
  const std::string rec = warcRecord(
      "WARC-Type: response\r\nWARC-Target-URI: http://first.example/\r\n"
      "WARC-Type: request\r\nWARC-Target-URI: http://second.example/\r\n continued\r\n",
      "abc");
  Outcome o = parseAllWays(bytes(rec));
  REQUIRE(o.status.isOk());
  REQUIRE(o.rows.size() == 1);
  CHECK(o.rows[0].key == "http://first.example/");
  CHECK(o.rows[0].type == "response");
}

TEST_CASE("A WARC key too long to be a row is given cut, still too long, not whole") {
  // A .warc.gz of 1 MB URIs compresses each record to about a kilobyte: whole keys would
  // make a slice of upload hold hundreds of megabytes of keys that are no rows.
  const std::string huge(200'000, 'u');
  const std::string fits(kMaxRecordKey, 'f');
  std::string w = warcRecord("WARC-Type: response\r\nWARC-Target-URI: " + huge + "\r\n", "x");
  w += warcRecord("WARC-Type: response\r\nWARC-Target-URI: " + fits + "\r\n", "y");
  Outcome o = parseAllWays(bytes(w));
  REQUIRE(o.status.isOk());
  REQUIRE(o.rows.size() == 2);
  CHECK(o.rows[0].key == huge.substr(0, kMaxRecordKey + 1));
  CHECK(o.rows[1].key == fits);  // a key of the largest size a row takes is whole
}

// The header and index-record encodings, tested without I/O.
#include <catch2/catch.hpp>

#include "blob_format.h"
#include "test_util.h"

using namespace granary;
using namespace granary::chunkstore;
using namespace granary::chunkstore::testing;

TEST_CASE("A blob header decodes to what was encoded, CRC table included") {
  auto desc = descriptor(makeId(42, 3, 5));
  auto payload = randomBytes(10'000, 1);
  auto blob = encodeBlob(desc, payload, 4096, -17);
  REQUIRE(blob.has_value());
  CHECK(blob->header_region_len == 4096);
  CHECK(blob->bytes.size() == 4096 + 12288);
  auto hdr = decodeHeader(blob->bytes.span().first(blob->header_region_len));
  REQUIRE(hdr.has_value());
  CHECK(hdr->id == desc.id);
  CHECK(hdr->ec == desc.ec);
  CHECK(hdr->stripe_data_len == desc.stripe_data_len);
  CHECK(hdr->bucket == desc.bucket);
  CHECK(hdr->key == desc.key);
  CHECK(hdr->payload_len == 10'000);
  CHECK(hdr->block_size == 4096);
  CHECK(hdr->created_unix_nanos == -17);
  REQUIRE(hdr->blocks == 3);
  CHECK(hdr->blockCrc(2) == ec::crc32c(std::span<const uint8_t>(payload).subspan(8192)));
  CHECK(std::equal(payload.begin(), payload.end(), blob->bytes.data() + 4096));
  // Fixed offsets documented in docs/chunkstore-format.md.
  CHECK(std::string(reinterpret_cast<const char*>(blob->bytes.data()), 8) == "GRNYBLOB");
  CHECK(getLe(blob->bytes.data() + 8, 2) == 1);
  CHECK(getLe(blob->bytes.data() + 52, 8) == 10'000);
}

TEST_CASE("A large page-aligned payload of whole blocks is left in place, others are copied") {
  const auto data = randomBytes(128 << 10, 5);
  auto aligned = pageAlignedCopy(data);
  auto blob = encodeBlob(descriptor(makeId(1)), aligned.span(), 4096, 0, PayloadCopy::kIfUnsuited);
  REQUIRE(blob.has_value());
  CHECK(blob->bytes.size() == 4096);  // the header region alone
  CHECK(blob->payload.data() == aligned.span().data());
  CHECK(blob->payload.size() == data.size());
  CHECK(blob->diskLen() == 4096 + data.size());
  auto hdr = decodeHeader(blob->bytes.span());
  REQUIRE(hdr.has_value());
  CHECK(hdr->payload_len == data.size());
  CHECK(hdr->blockCrc(31) == ec::crc32c(std::span<const uint8_t>(data).subspan(31 * 4096)));

  // The same bytes by default, or not page-aligned: one image, payload copied after the
  // header region.
  auto copied = encodeBlob(descriptor(makeId(1)), aligned.span(), 4096, 0);
  REQUIRE(copied.has_value());
  CHECK(copied->payload.empty());
  CHECK(copied->diskLen() == 4096 + data.size());
  CHECK(std::equal(data.begin(), data.end(), copied->bytes.data() + 4096));
  CHECK(std::equal(blob->bytes.data(), blob->bytes.data() + 4096, copied->bytes.data()));
  auto unaligned = encodeBlob(descriptor(makeId(1)), aligned.span().subspan(512), 4096, 0,
                              PayloadCopy::kIfUnsuited);
  REQUIRE(unaligned.has_value());
  CHECK(unaligned->payload.empty());
  CHECK(unaligned->bytes.size() == 4096 + data.size());  // 512 bytes short: padded up
}

TEST_CASE("Large CRC tables grow the header region in 4 KiB steps") {
  auto payload = randomBytes(8 << 20, 2);  // 2048 blocks -> 8 KiB of CRCs
  auto blob = encodeBlob(descriptor(makeId(1)), payload, 4096, 0);
  REQUIRE(blob.has_value());
  CHECK(blob->header_region_len == 12288);
  CHECK(decodeHeader(blob->bytes.span().first(12288)).has_value());
}

TEST_CASE("Header decoding rejects wrong versions, lengths and any flipped byte") {
  auto blob = encodeBlob(descriptor(makeId(1)), randomBytes(5000, 3), 4096, 0);
  REQUIRE(blob.has_value());
  auto region = blob->bytes.span().first(4096);
  SECTION("unknown format version") {
    region[8] = 2;
    auto h = decodeHeader(region);
    REQUIRE_FALSE(h.has_value());
    CHECK(h.error().message().find("version") != std::string::npos);
  }
  SECTION("region shorter than recorded") {
    CHECK(decodeHeader(region.first(1024)).error().code() == Status::Code::kCorruption);
  }
  SECTION("absurd key length") {
    region[70 + 13] = 0xff;
    region[70 + 14] = 0xff;
    CHECK(decodeHeader(region).error().code() == Status::Code::kCorruption);
  }
  SECTION("absurd payload length") {
    putLe(region.data() + 52, UINT64_MAX, 8);
    CHECK(decodeHeader(region).error().code() == Status::Code::kCorruption);
  }
  SECTION("every byte of the encoded header is covered by the CRC") {
    size_t header_len = 72 + 13 + 21 + 4 * 2 + 4;
    for (size_t i = 0; i < header_len; ++i) {
      region[i] ^= 0x01;
      CHECK_FALSE(decodeHeader(region).has_value());
      region[i] ^= 0x01;
    }
    CHECK(decodeHeader(region).has_value());
  }
}

TEST_CASE("Index records round-trip and reject malformed values") {
  IndexRecord r{7, 1ull << 33, 8192, 123'456'789'012ull, 65536, -5};
  auto v = encodeIndexRecord(r);
  CHECK(v.size() == 37);
  CHECK(v[0] == 1);
  auto d = decodeIndexRecord(v);
  REQUIRE(d.has_value());
  CHECK(d->extent == 7);
  CHECK(d->offset == 1ull << 33);
  CHECK(d->header_region_len == 8192);
  CHECK(d->payload_len == 123'456'789'012ull);
  CHECK(d->block_size == 65536);
  CHECK(d->created_unix_nanos == -5);
  CHECK_FALSE(decodeIndexRecord(std::span<const uint8_t>(v).first(36)).has_value());
  v[0] = 9;
  CHECK(decodeIndexRecord(v).error().code() == Status::Code::kCorruption);
}

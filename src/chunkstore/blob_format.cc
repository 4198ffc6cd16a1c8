// Blob header and index record encoding; the layout is docs/chunkstore-format.md.
#include "blob_format.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/core.h>

#include "granary/ec/erasure_code.h"

namespace granary::chunkstore {

size_t BlobIdHash::operator()(const BlobId& id) const noexcept {
  // A version's bytes are its creation time and random bits: mix the random half with the
  // stripe and fragment (splitmix64's finalizer).
  uint64_t v = 0;
  std::memcpy(&v, id.version.bytes.data() + 8, sizeof v);
  uint64_t z = v ^ (uint64_t(id.stripe) << 16) ^ id.fragment;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<size_t>(z ^ (z >> 31));
}

namespace {

// Field offsets in the fixed part of the header.
constexpr size_t kOffVersion = 8;
constexpr size_t kOffRegionLen = 10;
constexpr size_t kOffFlags = 14;
constexpr size_t kOffBlobId = 16;
constexpr size_t kOffEcK = 38;
constexpr size_t kOffEcM = 39;
constexpr size_t kOffStripeDataLen = 40;
constexpr size_t kOffBlockSize = 48;
constexpr size_t kOffPayloadLen = 52;
constexpr size_t kOffCreated = 60;
constexpr size_t kOffBucketLen = 68;
constexpr size_t kOffBucket = 70;

}  // namespace

Result<EncodedBlob> encodeBlob(const BlobDescriptor& desc, std::span<const uint8_t> payload,
                               uint32_t block_size, int64_t created_unix_nanos,
                               PayloadCopy copy) {
  if (desc.bucket.size() > kMaxBucketLen) {
    return fail(Status::invalidArgument(
        fmt::format("bucket name of {} bytes exceeds {}", desc.bucket.size(), kMaxBucketLen)));
  }
  if (desc.key.size() > kMaxKeyLen) {
    return fail(Status::invalidArgument(
        fmt::format("object key of {} bytes exceeds {}", desc.key.size(), kMaxKeyLen)));
  }
  if (block_size == 0) return fail(Status::invalidArgument("block size must not be 0"));
  const uint64_t payload_len = payload.size();
  const uint64_t blocks = blockCount(payload_len, block_size);
  const uint64_t header_len = kHeaderFixedLen + desc.bucket.size() + desc.key.size() +
                              4 * blocks + 4;
  const uint64_t region_len = alignUp(header_len, kIoAlign);
  if (region_len > std::numeric_limits<uint32_t>::max()) {
    return fail(Status::invalidArgument(
        fmt::format("payload of {} bytes needs a header over 4 GiB", payload_len)));
  }
  EncodedBlob blob;
  blob.header_region_len = static_cast<uint32_t>(region_len);
  const bool aligned = reinterpret_cast<uintptr_t>(payload.data()) % kIoAlign == 0;
  if (copy == PayloadCopy::kIfUnsuited && payload_len >= kInPlaceMin &&
      payload_len % kIoAlign == 0 && aligned) {
    blob.payload = payload;
  }
  const uint64_t image_len =
      region_len + (blob.payload.empty() ? alignUp(payload_len, kIoAlign) : 0);
  blob.bytes = AlignedBuffer(image_len, AlignedBuffer::Fill::kUninitialized,
                             // freed on the engine's completion thread once written
                             AlignedBuffer::Reuse::kShared);
  if (!blob.bytes.valid()) {
    return fail(Status::unavailable(fmt::format("cannot allocate {} bytes for a blob", image_len)));
  }

  uint8_t* h = blob.bytes.data();
  // Zero what is not written below: the header region (flags, padding) and the payload's
  // padding to kIoAlign. The payload itself is copied over, unless it stays in place.
  std::memset(h, 0, region_len);
  if (blob.payload.empty()) {
    std::memset(h + region_len + payload_len, 0, blob.bytes.size() - region_len - payload_len);
  }
  std::memcpy(h, kBlobMagic.data(), kBlobMagic.size());
  putLe(h + kOffVersion, kBlobFormatVersion, 2);
  putLe(h + kOffRegionLen, region_len, 4);
  putLe(h + kOffFlags, desc.flags, 2);
  auto id = desc.id.encode();
  std::memcpy(h + kOffBlobId, id.data(), id.size());
  h[kOffEcK] = desc.ec.k;
  h[kOffEcM] = desc.ec.m;
  putLe(h + kOffStripeDataLen, desc.stripe_data_len, 8);
  putLe(h + kOffBlockSize, block_size, 4);
  putLe(h + kOffPayloadLen, payload_len, 8);
  putLe(h + kOffCreated, static_cast<uint64_t>(created_unix_nanos), 8);
  size_t pos = kOffBucketLen;
  putLe(h + pos, desc.bucket.size(), 2);
  pos += 2;
  std::memcpy(h + pos, desc.bucket.data(), desc.bucket.size());
  pos += desc.bucket.size();
  putLe(h + pos, desc.key.size(), 2);
  pos += 2;
  std::memcpy(h + pos, desc.key.data(), desc.key.size());
  pos += desc.key.size();
  for (uint64_t b = 0; b < blocks; ++b) {
    uint64_t start = b * block_size;
    uint64_t len = std::min<uint64_t>(block_size, payload_len - start);
    putLe(h + pos, ec::crc32c(payload.subspan(start, len)), 4);
    pos += 4;
  }
  putLe(h + pos, ec::crc32c({h, pos}), 4);

  if (blob.payload.empty() && payload_len > 0) {
    std::memcpy(h + region_len, payload.data(), payload_len);
  }
  return blob;
}

Result<BlobHeader> decodeHeader(std::span<const uint8_t> region) {
  const uint8_t* h = region.data();
  const size_t size = region.size();
  if (size < kHeaderFixedLen + 4) return fail(Status::corruption("header region too short"));
  if (!std::equal(kBlobMagic.begin(), kBlobMagic.end(), h)) {
    return fail(Status::corruption("bad blob magic"));
  }
  auto version = static_cast<uint16_t>(getLe(h + kOffVersion, 2));
  if (version != kBlobFormatVersion) {
    return fail(Status::corruption(fmt::format("unsupported blob format version {}", version)));
  }
  uint64_t region_len = getLe(h + kOffRegionLen, 4);
  if (region_len != size) {
    return fail(Status::corruption(
        fmt::format("header region length {} does not match the index ({})", region_len, size)));
  }
  BlobHeader hdr;
  hdr.flags = static_cast<uint16_t>(getLe(h + kOffFlags, 2));
  auto id = BlobId::decode(region.subspan(kOffBlobId, BlobId::kEncodedSize));
  if (!id) return fail(id.error());
  hdr.id = *id;
  hdr.ec.k = h[kOffEcK];
  hdr.ec.m = h[kOffEcM];
  hdr.stripe_data_len = getLe(h + kOffStripeDataLen, 8);
  hdr.block_size = static_cast<uint32_t>(getLe(h + kOffBlockSize, 4));
  hdr.payload_len = getLe(h + kOffPayloadLen, 8);
  hdr.created_unix_nanos = static_cast<int64_t>(getLe(h + kOffCreated, 8));
  if (hdr.block_size == 0) return fail(Status::corruption("header block size is 0"));

  size_t pos = kOffBucketLen;
  size_t bucket_len = getLe(h + pos, 2);
  pos += 2;
  // kHeaderFixedLen + 4 <= size, so the bucket length field and a key length field right
  // after an empty bucket are in bounds; check every variable part before reading it.
  if (bucket_len > kMaxBucketLen || pos + bucket_len + 2 > size) {
    return fail(Status::corruption(fmt::format("bad bucket length {}", bucket_len)));
  }
  hdr.bucket.assign(reinterpret_cast<const char*>(h + pos), bucket_len);
  pos += bucket_len;
  size_t key_len = getLe(h + pos, 2);
  pos += 2;
  if (key_len > kMaxKeyLen || pos + key_len > size) {
    return fail(Status::corruption(fmt::format("bad key length {}", key_len)));
  }
  hdr.key.assign(reinterpret_cast<const char*>(h + pos), key_len);
  pos += key_len;
  hdr.blocks = blockCount(hdr.payload_len, hdr.block_size);
  if (hdr.blocks > (size - pos) / 4 || pos + 4 * hdr.blocks + 4 > size) {
    return fail(Status::corruption(fmt::format(
        "CRC table of {} blocks does not fit the header region", hdr.blocks)));
  }
  hdr.crc_table = region.subspan(pos, 4 * hdr.blocks);
  pos += 4 * hdr.blocks;
  auto stored = static_cast<uint32_t>(getLe(h + pos, 4));
  uint32_t actual = ec::crc32c(region.first(pos));
  if (stored != actual) {
    return fail(Status::corruption(
        fmt::format("header CRC mismatch (stored {:08x}, computed {:08x})", stored, actual)));
  }
  return hdr;
}

std::array<uint8_t, kIndexRecordLen> encodeIndexRecord(const IndexRecord& r) {
  std::array<uint8_t, kIndexRecordLen> v{};
  v[0] = kIndexRecordFormat;
  putLe(&v[1], r.extent, 4);
  putLe(&v[5], r.offset, 8);
  putLe(&v[13], r.header_region_len, 4);
  putLe(&v[17], r.payload_len, 8);
  putLe(&v[25], r.block_size, 4);
  putLe(&v[29], static_cast<uint64_t>(r.created_unix_nanos), 8);
  return v;
}

Result<IndexRecord> decodeIndexRecord(std::span<const uint8_t> v) {
  if (v.size() != kIndexRecordLen) {
    return fail(Status::corruption(fmt::format("index record of {} bytes", v.size())));
  }
  if (v[0] != kIndexRecordFormat) {
    return fail(Status::corruption(fmt::format("unknown index record format {}", v[0])));
  }
  IndexRecord r;
  r.extent = static_cast<uint32_t>(getLe(&v[1], 4));
  r.offset = getLe(&v[5], 8);
  r.header_region_len = static_cast<uint32_t>(getLe(&v[13], 4));
  r.payload_len = getLe(&v[17], 8);
  r.block_size = static_cast<uint32_t>(getLe(&v[25], 4));
  r.created_unix_nanos = static_cast<int64_t>(getLe(&v[29], 8));
  if (r.block_size == 0 || r.header_region_len == 0 || r.header_region_len % kIoAlign != 0 ||
      r.offset % kIoAlign != 0) {
    return fail(Status::corruption("index record with impossible lengths or offset"));
  }
  return r;
}

}  // namespace granary::chunkstore

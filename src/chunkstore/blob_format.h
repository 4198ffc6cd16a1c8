// Encoding of the chunk store's on-disk structures: the blob header and the index record.
// The byte layout is specified in docs/chunkstore-format.md; keep the two in step.
// Pure functions on buffers: no I/O, thread safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "aligned_buffer.h"
#include "granary/chunkstore/chunk_store.h"
#include "granary/common/ids.h"
#include "granary/common/status.h"

namespace granary::chunkstore {

inline constexpr std::array<uint8_t, 8> kBlobMagic = {'G', 'R', 'N', 'Y', 'B', 'L', 'O', 'B'};
inline constexpr uint16_t kBlobFormatVersion = 1;
inline constexpr size_t kMaxBucketLen = 255;
inline constexpr size_t kMaxKeyLen = 1024;
// Fixed part of the header: everything but the bucket, key, CRC table and header CRC.
inline constexpr size_t kHeaderFixedLen = 72;
inline constexpr uint8_t kIndexRecordFormat = 1;
inline constexpr size_t kIndexRecordLen = 37;

// Little-endian fixed-width helpers (every on-disk integer of the chunk store but the
// blob id is little-endian).
inline void putLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) { p[i] = static_cast<uint8_t>(v >> (8 * i)); }
}
inline uint64_t getLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) { v = (v << 8) | p[i]; }
  return v;
}

// A blob id's hash for unordered containers.
struct BlobIdHash {
  size_t operator()(const BlobId& id) const noexcept;
};

inline uint64_t blockCount(uint64_t payload_len, uint32_t block_size) {
  return payload_len / block_size + (payload_len % block_size != 0 ? 1 : 0);
}

// Where encodeBlob puts the payload.
enum class PayloadCopy {
  kAlways,     // into the image, after the header region
  kIfUnsuited  // leave it in place when it can be written from there (kInPlaceMin)
};
// A payload at least this long, 4 KiB aligned in memory and of whole 4 KiB blocks, can be
// written from the caller's memory by O_DIRECT (one writev with the header region):
// copying it costs more than the second part of that write.
inline constexpr uint64_t kInPlaceMin = 64 << 10;

// A blob ready to be written: its on-disk image is the header region followed by the
// payload padded to kIoAlign. `bytes` holds the header region, and the payload after it
// unless encodeBlob left it in place: `payload` then points at the caller's bytes, which
// follow the header region on disk as they are (whole 4 KiB blocks, no padding).
struct EncodedBlob {
  AlignedBuffer bytes;
  uint32_t header_region_len = 0;    // multiple of kIoAlign
  std::span<const uint8_t> payload;  // empty when the payload was copied into `bytes`
  // The blob's whole on-disk length.
  uint64_t diskLen() const { return bytes.size() + payload.size(); }
};

// Builds the on-disk image of a blob. kInvalidArgument for an over-long bucket or key,
// kUnavailable if memory for the buffer cannot be had.
Result<EncodedBlob> encodeBlob(const BlobDescriptor& desc, std::span<const uint8_t> payload,
                               uint32_t block_size, int64_t created_unix_nanos,
                               PayloadCopy copy = PayloadCopy::kAlways);

// A verified header, decoded from the header region it points into (which must outlive it).
struct BlobHeader {
  uint16_t flags = 0;
  BlobId id;
  ec::EcProfile ec;
  uint64_t stripe_data_len = 0;
  uint32_t block_size = 0;
  uint64_t payload_len = 0;
  int64_t created_unix_nanos = 0;
  std::string bucket;
  std::string key;
  uint64_t blocks = 0;
  std::span<const uint8_t> crc_table;  // blocks * 4 bytes, little-endian CRC32C values

  uint32_t blockCrc(uint64_t block) const {
    return static_cast<uint32_t>(getLe(crc_table.data() + 4 * block, 4));
  }
};

// Parses and verifies a whole header region (magic, format version, region length, field
// bounds, header CRC). Any failure is kCorruption; the message does not name the blob.
Result<BlobHeader> decodeHeader(std::span<const uint8_t> region);

// The RocksDB value of one blob: where it lives and how to read it.
struct IndexRecord {
  uint32_t extent = 0;
  uint64_t offset = 0;             // byte offset of the blob in the extent file
  uint32_t header_region_len = 0;  // multiple of kIoAlign; the payload starts after it
  uint64_t payload_len = 0;
  uint32_t block_size = 0;
  int64_t created_unix_nanos = 0;

  // Bytes the blob occupies in its extent (header region + padded payload).
  uint64_t diskLen() const { return header_region_len + alignUp(payload_len, kIoAlign); }
};

std::array<uint8_t, kIndexRecordLen> encodeIndexRecord(const IndexRecord& r);
Result<IndexRecord> decodeIndexRecord(std::span<const uint8_t> value);

}  // namespace granary::chunkstore

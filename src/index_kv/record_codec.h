// Key and value encodings of the record index's column families (docs/index-format.md,
// "Record index"), and the liveness read of a record set. Decoders return kCorruption on bad bytes and never throw.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "granary/common/ids.h"
#include "granary/common/status.h"
#include "granary/index_kv/index.h"
#include "index_kv/column_families.h"

namespace granary::index_kv {

// records CF: bucket "/" record key "\0" container key "\0" set (16) be64(offset).
// Neither key holds a NUL (record keys are checked on insert, object keys by the
// gateway), so rows sort by (record key, container, set, offset) and the rows of one
// record key are the range starting with recordKeyPrefix(bucket, key).
inline constexpr size_t kRecordKeyTail = 1 + 16 + 8;  // "\0" set offset
std::string recordRowKey(std::string_view bucket, std::string_view record_key,
                         std::string_view container, const VersionId& set, uint64_t offset);
// bucket "/" key "\0", and with a container: bucket "/" key "\0" container "\0".
std::string recordKeyPrefix(std::string_view bucket, std::string_view record_key);
std::string recordContainerPrefix(std::string_view bucket, std::string_view record_key,
                                  std::string_view container);
struct RecordKeyParts {
  std::string_view record_key;
  std::string_view container;
  VersionId set;
  uint64_t offset = 0;
};
// `row_key` must start with bucket "/" (the caller's iteration range guarantees it).
Result<RecordKeyParts> parseRecordRowKey(std::string_view row_key, size_t bucket_len);

// Row value: be64(length) be32(crc32c) type bytes.
std::string encodeRecordValue(const RecordRow& row);
// Fills length, crc32c, type of `row`.
Status decodeRecordValue(std::string_view value, RecordRow& row);

// record_order CF: set (16) be64(offset) record key -> empty. The record key is part of the
// key so two rows at one offset (inserted under two keys) both stay listed and removable.
std::string recordOrderKey(const VersionId& set, uint64_t offset, std::string_view record_key = {});
struct RecordOrderParts {
  uint64_t offset = 0;
  std::string_view record_key;
};
Result<RecordOrderParts> parseRecordOrderKey(std::string_view key);

// record_sets CF: set (16) -> CBOR {b: bucket, c: container, t: last write unix nanos}.
struct RecordSetMeta {
  std::string bucket;
  std::string container;
  int64_t touched_unix_nanos = 0;
};
// CBOR, like every other index value: defined in codec.cc next to them.
std::string encodeRecordSetMeta(const RecordSetMeta& meta);
Result<RecordSetMeta> decodeRecordSetMeta(std::string_view value);

// The one read that says whether a set is live: its record_sets row, or nullopt when the
// set is dead (a record_gc row) or has none (never created, or removed).
Result<std::optional<RecordSetMeta>> readLiveRecordSet(rocksdb::DB* db,
                                                       const ColumnFamilies& cfs,
                                                       const VersionId& set);

}  // namespace granary::index_kv

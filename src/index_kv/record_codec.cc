// Encodings of the record index: see record_codec.h and docs/index-format.md.
#include "index_kv/record_codec.h"

#include <algorithm>

#include "granary/common/hex.h"
#include "index_kv/codec.h"

namespace granary::index_kv {

Status checkRecordKey(std::string_view key) {
  if (key.empty()) return Status::invalidArgument("record key is empty");
  if (key.size() > kMaxRecordKey) return Status::invalidArgument("record key is over 8 KiB");
  if (key.find('\0') != std::string_view::npos) {
    return Status::invalidArgument("record key contains NUL");
  }
  return Status::ok();
}

uint64_t recordRowBytes(std::string_view bucket, const RecordRow& row) {
  const uint64_t row_key = bucket.size() + 1 + row.key.size() + 1 + row.container.size() +
                           kRecordKeyTail;
  const uint64_t value = 12 + row.type.size();
  const uint64_t order_key = 24 + row.key.size();
  return row_key + value + order_key;
}

std::string recordKeyPrefix(std::string_view bucket, std::string_view record_key) {
  std::string out;
  out.reserve(bucket.size() + record_key.size() + 2);
  out.append(bucket).push_back('/');
  out.append(record_key).push_back('\0');
  return out;
}

std::string recordContainerPrefix(std::string_view bucket, std::string_view record_key,
                                  std::string_view container) {
  std::string out = recordKeyPrefix(bucket, record_key);
  out.append(container).push_back('\0');
  return out;
}

std::string recordRowKey(std::string_view bucket, std::string_view record_key,
                         std::string_view container, const VersionId& set, uint64_t offset) {
  std::string out = recordContainerPrefix(bucket, record_key, container);
  out.append(reinterpret_cast<const char*>(set.bytes.data()), set.bytes.size());
  uint8_t be[8];
  putBe64(be, offset);
  out.append(reinterpret_cast<const char*>(be), 8);
  return out;
}

Result<RecordKeyParts> parseRecordRowKey(std::string_view row_key, size_t bucket_len) {
  if (row_key.size() < bucket_len + 1 + 1 + kRecordKeyTail) {
    return fail(Status::corruption("index: record row key too short"));
  }
  std::string_view rest = row_key.substr(bucket_len + 1);
  size_t nul = rest.find('\0');
  const size_t tail_at = rest.size() - (16 + 8);
  if (nul == std::string_view::npos || nul >= tail_at || rest[tail_at - 1] != '\0') {
    return fail(Status::corruption("index: bad record row key"));
  }
  RecordKeyParts parts;
  parts.record_key = rest.substr(0, nul);
  parts.container = rest.substr(nul + 1, tail_at - 1 - (nul + 1));
  const auto* tail = reinterpret_cast<const uint8_t*>(rest.data() + tail_at);
  std::copy(tail, tail + 16, parts.set.bytes.begin());
  parts.offset = getBe64(tail + 16);
  return parts;
}

std::string encodeRecordValue(const RecordRow& row) {
  std::string out(12, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  putBe64(p, row.length);
  putBe32(p + 8, row.crc32c);
  out.append(row.type);
  return out;
}

Status decodeRecordValue(std::string_view value, RecordRow& row) {
  if (value.size() < 12) return Status::corruption("index: record value too short");
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  row.length = getBe64(p);
  row.crc32c = getBe32(p + 8);
  row.type = std::string(value.substr(12));
  return Status::ok();
}

std::string recordOrderKey(const VersionId& set, uint64_t offset, std::string_view record_key) {
  std::string out(reinterpret_cast<const char*>(set.bytes.data()), set.bytes.size());
  uint8_t be[8];
  putBe64(be, offset);
  out.append(reinterpret_cast<const char*>(be), 8);
  out.append(record_key);
  return out;
}

Result<RecordOrderParts> parseRecordOrderKey(std::string_view key) {
  if (key.size() <= 24) return fail(Status::corruption("index: bad record order key"));
  return RecordOrderParts{getBe64(reinterpret_cast<const uint8_t*>(key.data() + 16)),
                          key.substr(24)};
}

Result<std::optional<RecordSetMeta>> readLiveRecordSet(rocksdb::DB* db,
                                                       const ColumnFamilies& cfs,
                                                       const VersionId& set) {
  const std::string key = versionKey(set);
  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), cfs.record_gc, key, &value);
  if (s.ok()) return std::optional<RecordSetMeta>();
  if (!s.IsNotFound()) return fail(fromRocks(s, "index: reading record gc"));
  s = db->Get(rocksdb::ReadOptions(), cfs.record_sets, key, &value);
  if (s.IsNotFound()) return std::optional<RecordSetMeta>();
  if (!s.ok()) return fail(fromRocks(s, "index: reading record set"));
  auto meta = decodeRecordSetMeta(value);
  if (!meta) return fail(meta.error());
  return std::optional<RecordSetMeta>(std::move(*meta));
}

}  // namespace granary::index_kv

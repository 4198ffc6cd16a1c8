// Listing: see docs/index-format.md, "Listing". The invariant: the result is the ordered
// sequence of entries (object keys, and common prefixes standing for every key under
// them) that sort after start_after, and a common prefix is never stepped through: after
// emitting it, the iterator seeks to the prefix's successor.
#include "index_kv/listing.h"

#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <memory>
#include <string>

#include "index_kv/codec.h"
#include "index_kv/column_families.h"

namespace granary::index_kv {
namespace {

// The first key (relative to the bucket) the listing may return, or nullopt when no key
// can follow start_after.
std::optional<std::string> firstCandidate(const ListRequest& req) {
  const std::string& prefix = req.prefix;
  const std::string& after = req.start_after;
  if (after.empty() || after < prefix) return prefix;
  // The smallest string greater than start_after.
  std::string start = after;
  start.push_back('\0');
  if (!req.delimiter.empty() && after.starts_with(prefix)) {
    size_t pos = after.find(req.delimiter, prefix.size());
    if (pos != std::string::npos) {
      // start_after lies in (or is) a common prefix: that prefix sorts at or before
      // start_after, so it was already returned; skip every key under it.
      std::string successor = prefixSuccessor(after.substr(0, pos + req.delimiter.size()));
      if (successor.empty()) return std::nullopt;
      start = std::move(successor);
    }
  }
  return std::max(start, prefix);
}

}  // namespace

Result<ListResult> listObjectsIn(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* objects,
                                 std::string_view bucket, const ListRequest& req) {
  ListResult out;
  if (req.max_keys == 0) return out;
  std::optional<std::string> first = firstCandidate(req);
  if (!first) return out;

  const std::string base = bucketBegin(bucket);
  const std::string prefix_end = prefixSuccessor(req.prefix);
  const std::string upper =
      prefix_end.empty() ? bucketEnd(bucket) : base + prefix_end;
  const std::string start = base + *first;
  if (start >= upper) return out;

  rocksdb::ReadOptions options;
  rocksdb::Slice upper_slice(upper);
  options.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(options, objects));

  const std::string& prefix = req.prefix;
  const std::string& delim = req.delimiter;
  size_t entries = 0;
  std::string last;
  for (it->Seek(start); it->Valid();) {
    ++out.keys_examined;
    std::string_view full = it->key().ToStringView();
    if (!full.starts_with(base)) break;  // cannot happen inside the bounds
    std::string_view key = full.substr(base.size());
    if (!key.starts_with(prefix)) break;  // past the prefix: nothing further matches
    size_t pos = delim.empty() ? std::string_view::npos : key.find(delim, prefix.size());
    if (entries == req.max_keys) {
      out.truncated = true;
      break;
    }
    ++entries;
    if (pos != std::string_view::npos) {
      std::string common(key.substr(0, pos + delim.size()));
      std::string successor = prefixSuccessor(common);
      last = common;
      out.common_prefixes.push_back(std::move(common));
      if (successor.empty()) break;
      it->Seek(base + successor);
      continue;
    }
    auto summary = decodeSummary(key, it->value().ToStringView());
    if (!summary) return fail(summary.error());
    last = std::string(key);
    out.objects.push_back(std::move(*summary));
    it->Next();
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: listing"));
  if (out.truncated) out.next_start_after = std::move(last);
  return out;
}

}  // namespace granary::index_kv

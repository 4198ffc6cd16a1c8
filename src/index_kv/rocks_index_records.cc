// RocksIndex: the record index (docs/record-index.md; formats in docs/index-format.md).
// Row writes and the removal of dead sets' rows go straight to RocksDB without a sync:
// rows are invisible until a commit through the CommitQueue names their set, and that
// synced commit makes every earlier WAL write durable with it. Removal is idempotent and
// its record_gc entry is only dropped (through the queue) once all rows are gone.
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <map>

#include "granary/common/clock.h"
#include "granary/common/hex.h"
#include "granary/common/log.h"
#include "index_kv/codec.h"
#include "index_kv/record_codec.h"
#include "index_kv/rocks_index.h"

namespace granary::index_kv {
namespace {

constexpr size_t kRemoveBatch = 2048;

Status checkContainer(std::string_view bucket, std::string_view container) {
  GRANARY_RETURN_IF_ERROR(checkBucketName(bucket));
  if (container.empty() || container.find('\0') != std::string_view::npos) {
    return Status::invalidArgument("index: bad container key");
  }
  return Status::ok();
}

}  // namespace

Status RocksIndex::createRecordSet(std::string_view bucket, std::string_view container,
                                   const VersionId& set) {
  GRANARY_RETURN_IF_ERROR(checkContainer(bucket, container));
  if (set.isZero()) return Status::invalidArgument("index: record set id is zero");
  const std::string set_key = versionKey(set);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.record_sets, set_key, &value);
  if (s.ok()) return Status::alreadyExists("index: record set exists");
  if (!s.IsNotFound()) return fromRocks(s, "index: reading record set");
  // Synced, as the rows are (putRecordRows).
  rocksdb::WriteOptions options;
  options.sync = true;
  return fromRocks(db_->Put(options, cfs_.record_sets, set_key,
                            encodeRecordSetMeta({std::string(bucket), std::string(container),
                                                 clock_.nowUnixNanos()})),
                   "index: creating record set");
}

Status RocksIndex::putRecordRows(std::string_view bucket, std::string_view container,
                                 const VersionId& set, const std::vector<RecordRow>& rows) {
  GRANARY_RETURN_IF_ERROR(checkContainer(bucket, container));
  if (set.isZero()) return Status::invalidArgument("index: record set id is zero");
  // Only into a live set: one swept as an orphan (an indexing run that stalled past the
  // orphan grace) must not come back with some of its rows already removed. The check and
  // the write are one step as far as the sweep is concerned (record_sweep_mu_).
  std::shared_lock sweep(record_sweep_mu_);
  auto live = readLiveRecordSet(db_.get(), cfs_, set);
  if (!live) return live.error();
  if (!live->has_value()) return Status::preconditionFailed("index: the record set is dead or gone");
  if ((*live)->bucket != bucket || (*live)->container != container) {
    return Status::invalidArgument("index: the record set belongs to another container");
  }
  rocksdb::WriteBatch batch;
  const std::string set_key = versionKey(set);
  auto put = [&](rocksdb::ColumnFamilyHandle* cf, const rocksdb::Slice& k,
                 const rocksdb::Slice& v) {
    return fromRocks(batch.Put(cf, k, v), "index: staging record rows");
  };
  GRANARY_RETURN_IF_ERROR(put(cfs_.record_sets, set_key,
                              encodeRecordSetMeta({std::string(bucket), std::string(container),
                                                   clock_.nowUnixNanos()})));
  for (const RecordRow& row : rows) {
    GRANARY_RETURN_IF_ERROR(checkRecordKey(row.key));  // index.h
    if (row.container != container || row.set != set) {
      return Status::invalidArgument("index: record row of another container or set");
    }
    GRANARY_RETURN_IF_ERROR(put(cfs_.records,
                                recordRowKey(bucket, row.key, container, set, row.offset),
                                encodeRecordValue(row)));
    GRANARY_RETURN_IF_ERROR(
        put(cfs_.record_order, recordOrderKey(set, row.offset, row.key), rocksdb::Slice()));
  }
  // Synced: the commit that publishes the set checks only that the set lives, so rows
  // lost to a power cut of the index host while the gateway (another host) went on would
  // be published missing, under a 200. A sync per batch of thousands of rows.
  rocksdb::WriteOptions options;
  options.sync = true;
  GRANARY_RETURN_IF_ERROR(fromRocks(db_->Write(options, &batch), "index: writing record rows"));
  // The committer marks a set dead without this lock (a container overwritten while rows
  // are added to its set). Rows written after that mark may land behind the GC's iterator,
  // which then deletes the set's entry and leaves them unreachable: look again, and take
  // back what this call wrote into a set that died meanwhile. (Rows written before the mark
  // are seen by the GC, whose listing starts after it.)
  live = readLiveRecordSet(db_.get(), cfs_, set);
  if (!live) return live.error();
  if (live->has_value()) return Status::ok();
  rocksdb::WriteBatch undo;
  for (const RecordRow& row : rows) {
    (void)undo.Delete(cfs_.records, recordRowKey(bucket, row.key, container, set, row.offset));
    (void)undo.Delete(cfs_.record_order, recordOrderKey(set, row.offset, row.key));
  }
  // Synced as the rows were: the GC's end of the set may be durable already.
  GRANARY_RETURN_IF_ERROR(fromRocks(db_->Write(options, &undo),
                                    "index: removing rows of a dead record set"));
  return Status::preconditionFailed("index: the record set died while its rows were written");
}

Result<RecordIndexInfo> RocksIndex::attachRecords(std::string_view bucket,
                                                  std::string_view container,
                                                  const VersionId& version,
                                                  const RecordIndexInfo& info) {
  GRANARY_RETURN_IF_ERROR_RESULT(checkContainer(bucket, container));
  CommitRequest req;
  req.kind = CommitRequest::Kind::kAttachRecords;
  req.bucket = std::string(bucket);
  req.key = std::string(container);
  req.container_version = version;
  req.record_info = info;
  if (Status st = submit(req); !st.isOk()) return fail(st);
  if (!req.record_lost.empty()) return fail(Status::preconditionFailed(req.record_lost));
  return req.record_result;
}

Status RocksIndex::abandonRecords(const VersionId& set) {
  CommitRequest req;
  req.kind = CommitRequest::Kind::kAbandonRecords;
  req.record_info.set = set;
  return submit(req);
}

Result<RecordPage> RocksIndex::listRecords(std::string_view bucket, const RecordQuery& q) {
  GRANARY_RETURN_IF_ERROR_RESULT(checkBucketName(bucket));
  std::string begin;
  if (q.key) {
    GRANARY_RETURN_IF_ERROR_RESULT(checkRecordKey(*q.key));
    begin = q.container.empty() ? recordKeyPrefix(bucket, *q.key)
                                : recordContainerPrefix(bucket, *q.key, q.container);
  } else {
    begin = std::string(bucket) + "/" + q.prefix;
  }
  const std::string end = prefixSuccessor(begin);
  if (q.offset && (!q.key || q.container.empty())) {
    return fail(Status::invalidArgument("a record offset needs its key and container"));
  }
  const std::string bucket_prefix = std::string(bucket) + "/";
  const std::string start_after =
      q.start_after.empty() ? std::string() : bucket_prefix + q.start_after;
  std::string seek = start_after > begin ? start_after : begin;

  Snapshot snap(db_.get());
  rocksdb::ReadOptions& options = snap.options();
  rocksdb::Slice upper(end);
  if (!end.empty()) options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.records));
  struct Container {
    VersionId set;  // zero: no visible rows
    VersionId version;
    int64_t mtime = 0;
  };
  std::map<std::string, Container, std::less<>> containers;
  auto containerOf = [&](std::string_view name) -> Result<const Container*> {
    if (auto found = containers.find(name); found != containers.end()) return &found->second;
    Container c;
    std::string value;
    rocksdb::Status s = db_->Get(options, cfs_.objects, objectKey(bucket, name), &value);
    if (s.ok()) {
      auto summary = decodeSummary(name, value);
      if (!summary) return fail(summary.error());
      c.set = summary->record_set;
      c.version = summary->version;
      c.mtime = summary->mtime_unix_nanos;
    } else if (!s.IsNotFound()) {
      return fail(fromRocks(s, "index: reading container"));
    }
    return &containers.emplace(std::string(name), c).first->second;
  };

  std::string point;  // with an offset: the one row key it can be
  if (q.offset) {
    auto c = containerOf(q.container);
    if (!c) return fail(c.error());
    if ((*c)->set.isZero()) return RecordPage{};
    point = recordRowKey(bucket, *q.key, q.container, (*c)->set, *q.offset);
    if (point <= start_after) return RecordPage{};
    seek = point;
  }

  RecordPage page;
  size_t examined = 0;
  Status error;
  for (it->Seek(seek); it->Valid(); it->Next()) {
    std::string_view row_key = it->key().ToStringView();
    if (!point.empty() && row_key != point) break;
    if (row_key == start_after) continue;
    if (page.records.size() >= q.limit || examined >= q.max_examined) {
      page.truncated = true;
      break;
    }
    ++examined;
    page.next.assign(row_key.substr(bucket_prefix.size()));
    auto parts = parseRecordRowKey(row_key, bucket.size());
    if (!parts) {
      log::warn("index: skipping bad record row: {}", parts.error().toString());
      continue;
    }
    if (!q.container.empty() && parts->container != q.container) continue;
    // Visibility first (from the key alone): invisible rows are not decoded.
    auto c = containerOf(parts->container);
    if (!c) {
      error = c.error();
      break;
    }
    if ((*c)->set.isZero() || (*c)->set != parts->set) continue;
    RecordRow row;
    if (Status st = decodeRecordValue(it->value().ToStringView(), row); !st.isOk()) {
      log::warn("index: skipping bad record row: {}", st.toString());
      continue;
    }
    if (!q.type.empty() && !row.type.empty() && row.type != q.type) continue;
    row.key = std::string(parts->record_key);
    row.container = std::string(parts->container);
    row.set = parts->set;
    row.offset = parts->offset;
    page.records.push_back(RecordLocation{std::move(row), (*c)->version, (*c)->mtime});
  }
  if (error.isOk() && !it->status().ok()) error = fromRocks(it->status(), "index: listing records");
  if (!error.isOk()) return fail(error);
  if (!page.truncated) page.next.clear();
  return page;
}

Result<std::vector<RecordRow>> RocksIndex::setRecords(const VersionId& set,
                                                      const std::optional<RecordCursor>& after,
                                                      size_t limit) {
  std::vector<RecordRow> out;
  std::string meta_value;
  Snapshot snap(db_.get());
  rocksdb::ReadOptions& options = snap.options();
  rocksdb::Status s = db_->Get(options, cfs_.record_sets, versionKey(set), &meta_value);
  if (s.IsNotFound()) return out;
  if (!s.ok()) return fail(fromRocks(s, "index: reading record set"));
  auto meta = decodeRecordSetMeta(meta_value);
  if (!meta) return fail(meta.error());
  const std::string begin = versionKey(set);
  const std::string end = prefixSuccessor(begin);
  rocksdb::Slice upper(end);
  options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.record_order));
  if (after && after->key.empty()) {
    if (after->offset == UINT64_MAX) return out;
    it->Seek(recordOrderKey(set, after->offset + 1));
  } else if (after) {
    const std::string from = recordOrderKey(set, after->offset, after->key);
    it->Seek(from);
    if (it->Valid() && it->key() == rocksdb::Slice(from)) it->Next();
  } else {
    it->Seek(begin);
  }
  for (; it->Valid() && out.size() < limit; it->Next()) {
    auto parts = parseRecordOrderKey(it->key().ToStringView());
    if (!parts) return fail(parts.error());
    RecordRow row;
    row.key = std::string(parts->record_key);
    row.container = meta->container;
    row.set = set;
    row.offset = parts->offset;
    std::string value;
    s = db_->Get(options, cfs_.records,
                 recordRowKey(meta->bucket, row.key, row.container, set, row.offset), &value);
    if (s.IsNotFound()) continue;  // being removed
    if (!s.ok()) return fail(fromRocks(s, "index: reading record row"));
    GRANARY_RETURN_IF_ERROR_RESULT(decodeRecordValue(value, row));
    out.push_back(std::move(row));
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: listing record set"));
  return out;
}

Status RocksIndex::markOrphanSets(int64_t orphan_before_unix_nanos) {
  // Stale sets that their container's current version names are published, not orphans:
  // filtered here with a read, so only candidates cost a trip through the committer.
  std::vector<std::pair<VersionId, RecordSetMeta>> stale;
  {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), cfs_.record_sets));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto set = parseVersionKey(it->key().ToStringView());
      auto meta = decodeRecordSetMeta(it->value().ToStringView());
      if (!set || !meta) {
        log::warn("index: unreadable record set row");
        continue;
      }
      if (meta->touched_unix_nanos >= orphan_before_unix_nanos) continue;
      std::string summary_value;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.objects,
                                   objectKey(meta->bucket, meta->container), &summary_value);
      if (s.ok()) {
        auto summary = decodeSummary(meta->container, summary_value);
        if (summary && summary->record_set == *set) continue;
      } else if (!s.IsNotFound()) {
        return fromRocks(s, "index: reading container");
      }
      // Dead already, its rows being removed over passes: marking it again would take the
      // sweep lock exclusively and a trip through the committer for nothing, every pass.
      s = db_->Get(rocksdb::ReadOptions(), cfs_.record_gc, it->key(), &summary_value);
      if (s.ok()) continue;
      if (!s.IsNotFound()) return fromRocks(s, "index: reading record gc");
      stale.emplace_back(*set, std::move(*meta));
    }
    if (!it->status().ok()) return fromRocks(it->status(), "index: listing record sets");
  }
  for (const auto& [set, meta] : stale) {
    // No rows can be written to the set from this fresh look at its touch time until it is
    // marked dead (putRecordRows takes this lock shared).
    std::unique_lock sweep(record_sweep_mu_);
    std::string meta_value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.record_sets, versionKey(set),
                                 &meta_value);
    if (s.IsNotFound()) continue;
    if (!s.ok()) return fromRocks(s, "index: reading record set");
    auto fresh = decodeRecordSetMeta(meta_value);
    if (fresh && fresh->touched_unix_nanos >= orphan_before_unix_nanos) continue;  // in use
    // Whether the container's version names it is checked again on the committer, where no
    // commit can name the set in between.
    CommitRequest req;
    req.kind = CommitRequest::Kind::kAbandonRecords;
    req.record_info.set = set;
    req.bucket = meta.bucket;
    req.key = meta.container;
    GRANARY_RETURN_IF_ERROR(submit(req));
  }
  return Status::ok();
}

Status RocksIndex::removeDeadSet(const VersionId& set, const std::string& gc_value,
                                 size_t& budget, RecordGcStats& stats) {
  const std::string set_key = versionKey(set);
  std::string meta_value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.record_sets, set_key, &meta_value);
  if (!s.ok() && !s.IsNotFound()) return fromRocks(s, "index: reading record set");
  if (s.ok()) {
    auto meta = decodeRecordSetMeta(meta_value);
    if (!meta) return meta.error();
    const std::string end = prefixSuccessor(set_key);
    // Each pass resumes after the last key it deleted: seeking from the set's start again
    // would walk over every deletion marker of the passes before.
    std::string resume = set_key;
    for (;;) {
      rocksdb::ReadOptions options;
      rocksdb::Slice upper(end);
      options.iterate_upper_bound = &upper;
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.record_order));
      rocksdb::WriteBatch batch;
      size_t n = 0;
      for (it->Seek(resume); it->Valid() && n < kRemoveBatch && n < budget; it->Next(), ++n) {
        std::string_view k = it->key().ToStringView();
        resume.assign(k);
        resume.push_back('\0');  // the smallest key after k
        auto parts = parseRecordOrderKey(k);
        if (!parts) return parts.error();
        (void)batch.Delete(cfs_.records, recordRowKey(meta->bucket, parts->record_key,
                                                      meta->container, set, parts->offset));
        (void)batch.Delete(cfs_.record_order, k);
      }
      const bool more = it->Valid();
      if (!it->status().ok()) return fromRocks(it->status(), "index: listing record set");
      it.reset();
      if (n > 0) {
        GRANARY_RETURN_IF_ERROR(
            fromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "index: removing records"));
        stats.rows_removed += n;
        budget -= n;
      }
      if (!more) break;
      if (budget == 0) return Status::ok();  // the rest next time
    }
  }
  CommitRequest req;
  req.kind = CommitRequest::Kind::kRecordGcDone;
  req.record_info.set = set;
  req.record_gc_value = gc_value;
  {
    // A putRecordRows between its liveness check and its re-check (it holds this lock
    // shared through both) finishes first, seeing the set dead and taking its rows back;
    // one after sees the set gone. Without it, one whose check came before the mark and
    // whose write came after this commit would bring the set back, rows and all.
    std::unique_lock sweep(record_sweep_mu_);
    GRANARY_RETURN_IF_ERROR(submit(req));
  }
  ++stats.sets_removed;
  return Status::ok();
}

Result<RecordGcStats> RocksIndex::collectRecordGarbage(size_t max_rows,
                                                       int64_t orphan_before_unix_nanos) {
  if (orphan_before_unix_nanos > 0) {
    GRANARY_RETURN_IF_ERROR_RESULT(markOrphanSets(orphan_before_unix_nanos));
  }
  std::vector<std::pair<VersionId, std::string>> dead;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cfs_.record_gc));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto set = parseVersionKey(it->key().ToStringView());
      if (!set) continue;
      dead.emplace_back(*set, it->value().ToString());
    }
    if (!it->status().ok()) return fail(fromRocks(it->status(), "index: listing record gc"));
  }
  RecordGcStats stats;
  size_t budget = max_rows;
  for (const auto& [set, value] : dead) {
    if (budget == 0) break;
    GRANARY_RETURN_IF_ERROR_RESULT(removeDeadSet(set, value, budget, stats));
  }
  return stats;
}

Result<RecordIndexStats> RocksIndex::recordIndexStats() {
  auto prop = [&](rocksdb::ColumnFamilyHandle* cf, const char* name) {
    uint64_t v = 0;
    return db_->GetIntProperty(cf, name, &v) ? v : 0;
  };
  RecordIndexStats s;
  s.rows = prop(cfs_.records, "rocksdb.estimate-num-keys");
  for (auto* cf : {cfs_.records, cfs_.record_order, cfs_.record_sets, cfs_.record_gc}) {
    s.bytes += prop(cf, "rocksdb.estimate-live-data-size") +
               prop(cf, "rocksdb.cur-size-all-mem-tables");
  }
  s.sets = prop(cfs_.record_sets, "rocksdb.estimate-num-keys");
  s.dead_sets = prop(cfs_.record_gc, "rocksdb.estimate-num-keys");
  return s;
}

Result<IndexStorageStats> RocksIndex::storageStats() {
  auto total = [&](const char* name) {
    uint64_t v = 0;
    return db_->GetAggregatedIntProperty(name, &v) ? v : 0;
  };
  IndexStorageStats s;
  s.sst_bytes = total("rocksdb.total-sst-files-size");
  s.memtable_bytes = total("rocksdb.cur-size-all-mem-tables");
  s.live_data_bytes = total("rocksdb.estimate-live-data-size");
  return s;
}

Status RocksIndex::checkpoint(const std::string& dir) {
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_.get(), &raw);
  if (!s.ok()) return fromRocks(s, "index: checkpoint");
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  // log_size_for_flush 0: memtables are flushed first, so the copy needs no WAL replay.
  s = cp->CreateCheckpoint(dir, /*log_size_for_flush=*/0);
  return s.ok() ? Status::ok() : fromRocks(s, "index: checkpoint into " + dir);
}

}  // namespace granary::index_kv

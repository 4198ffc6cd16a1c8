// Commit-queue operations of the record index: publishing a record set on a container
// version, marking sets dead, and finishing the removal of a dead set.
// Formats: docs/index-format.md, "Record index".
#include <rocksdb/options.h>

#include "granary/common/hex.h"
#include "index_kv/codec.h"
#include "index_kv/commit_queue.h"
#include "index_kv/commit_staging.h"
#include "index_kv/record_codec.h"

namespace granary::index_kv {

Status BatchBuilder::markRecordSetDead(const VersionId& set) {
  if (dead_sets_.contains(set)) return Status::ok();
  uint8_t be[8];
  putBe64(be, static_cast<uint64_t>(clock_.nowUnixNanos()));
  GRANARY_STAGE(batch_.Put(cfs_.record_gc, versionKey(set),
                           rocksdb::Slice(reinterpret_cast<const char*>(be), 8)));
  dead_sets_.insert(set);
  dead_added_.push_back(set);
  return Status::ok();
}

Result<bool> BatchBuilder::recordSetAlive(const VersionId& set) {
  if (dead_sets_.contains(set)) return false;
  auto live = readLiveRecordSet(db_, cfs_, set);
  if (!live) return fail(live.error());
  return live->has_value();
}

Status BatchBuilder::attachRecords(CommitRequest& req) {
  const RecordIndexInfo& add = req.record_info;
  if (add.set.isZero() || add.status != "indexed") {
    return Status::invalidArgument("index: attachRecords needs an indexed record set");
  }
  auto alive = recordSetAlive(add.set);
  if (!alive) return alive.error();
  if (!*alive) return Status::preconditionFailed("index: record set is gone");
  const std::string okey = objectKey(req.bucket, req.key);
  auto current = currentVersion(okey);
  if (!current) return current.error();
  auto lose = [&](std::string why) -> Status {
    // The rows can never become visible: mark the set dead. This request succeeds so the
    // mark is committed; the caller reports the precondition failure.
    GRANARY_RETURN_IF_ERROR(markRecordSetDead(add.set));
    req.record_lost = std::move(why);
    return Status::ok();
  };
  if (!current->has_value() || **current != req.container_version) {
    return lose("the container's version changed");
  }
  auto loaded = loadManifest(req.container_version);
  if (!loaded) return loaded.error();
  if (!loaded->has_value()) return Status::corruption("index: current version has no manifest");
  auto m = std::make_unique<Manifest>(std::move(**loaded));
  if (m->records.set.isZero()) {
    m->records = add;
  } else if (m->records.set == add.set) {
    m->records.rows += add.rows;
    m->records.row_bytes += add.row_bytes;
  } else {
    return lose("the container version has another record set");
  }
  GRANARY_STAGE(batch_.Put(cfs_.manifests, versionKey(m->version), encodeManifest(*m)));
  GRANARY_STAGE(batch_.Put(cfs_.objects, okey, encodeSummary(summaryOf(*m))));
  req.record_result = m->records;
  // Owned first: a push_back that throws must not leave the overlay pointing at a freed
  // manifest for the rest of the batch.
  const VersionId version = m->version;
  owned_manifests_.push_back(std::move(m));
  manifests_[version] = owned_manifests_.back().get();
  return Status::ok();
}

Status BatchBuilder::abandonRecords(CommitRequest& req) {
  if (!req.key.empty()) {
    // The orphan sweep: only a set that the container's current version does not name.
    auto current = currentVersion(objectKey(req.bucket, req.key));
    if (!current) return current.error();
    if (current->has_value()) {
      auto m = loadManifest(**current);
      if (!m) return m.error();
      if (m->has_value() && (*m)->records.set == req.record_info.set) return Status::ok();
    }
  }
  return markRecordSetDead(req.record_info.set);
}

Status BatchBuilder::recordGcDone(CommitRequest& req) {
  const std::string key = versionKey(req.record_info.set);
  if (dead_sets_.contains(req.record_info.set)) return Status::ok();  // re-marked meanwhile
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.record_gc, key, &value);
  if (s.IsNotFound()) return Status::ok();
  if (!s.ok()) return fromRocks(s, "index: reading record gc");
  if (value != req.record_gc_value) return Status::ok();  // re-marked: another pass
  GRANARY_STAGE(batch_.Delete(cfs_.record_gc, key));
  GRANARY_STAGE(batch_.Delete(cfs_.record_sets, key));
  return Status::ok();
}

}  // namespace granary::index_kv

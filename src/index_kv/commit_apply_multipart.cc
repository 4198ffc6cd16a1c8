// Commit requests of multipart uploads: create, put part, complete, abort. Formats and the
// completion batch: docs/index-format.md ("Multipart uploads").
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "index_kv/codec.h"
#include "index_kv/commit_queue.h"
#include "index_kv/commit_staging.h"

namespace granary::index_kv {

// ---- overlay-aware reads -------------------------------------------------------------

Result<bool> BatchBuilder::uploadExists(const std::string& upload_key) {
  if (auto it = uploads_.find(upload_key); it != uploads_.end()) return it->second;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.uploads, upload_key, &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return fail(fromRocks(s, "index: reading upload"));
  return true;
}

Result<bool> BatchBuilder::uploadIdTaken(const std::string& upload_id) {
  if (auto it = upload_ids_.find(upload_id); it != upload_ids_.end()) return it->second;
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), cfs_.parts, partKey(upload_id, 0), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return fail(fromRocks(s, "index: reading upload id"));
  return true;
}

Result<bool> BatchBuilder::bucketHasUploads(const std::string& bucket) {
  const std::string begin = bucketBegin(bucket);
  const std::string end = bucketEnd(bucket);
  for (auto it = uploads_.lower_bound(begin); it != uploads_.end() && it->first < end; ++it) {
    if (it->second) return true;
  }
  rocksdb::ReadOptions options;
  rocksdb::Slice upper(end);
  options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.uploads));
  for (it->Seek(begin); it->Valid(); it->Next()) {
    auto o = uploads_.find(it->key().ToString());
    if (o == uploads_.end() || o->second) return true;
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: scanning uploads"));
  return false;
}

Result<std::optional<PartInfo>> BatchBuilder::loadPart(const std::string& part_key) {
  if (auto it = parts_.find(part_key); it != parts_.end()) return it->second;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_.parts, part_key, &value);
  if (s.IsNotFound()) return std::optional<PartInfo>();
  if (!s.ok()) return fail(fromRocks(s, "index: reading part"));
  auto part = decodePart(value);
  if (!part) return fail(part.error());
  return std::optional<PartInfo>(std::move(*part));
}

Result<std::map<std::string, PartInfo>> BatchBuilder::loadParts(const std::string& upload_id) {
  const std::string begin = partKey(upload_id, 1);  // after the owner row
  const std::string end = partsEnd(upload_id);
  std::map<std::string, PartInfo> out;
  rocksdb::ReadOptions options;
  rocksdb::Slice upper(end);
  options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, cfs_.parts));
  for (it->Seek(begin); it->Valid(); it->Next()) {
    std::string key = it->key().ToString();
    if (parts_.contains(key)) continue;  // the overlay's row wins (below)
    auto part = decodePart(it->value().ToStringView());
    if (!part) return fail(part.error());
    out.emplace(std::move(key), std::move(*part));
  }
  if (!it->status().ok()) return fail(fromRocks(it->status(), "index: scanning parts"));
  for (auto o = parts_.lower_bound(begin); o != parts_.end() && o->first < end; ++o) {
    if (o->second.has_value()) out.insert_or_assign(o->first, *o->second);
  }
  return out;
}

// ---- staging -------------------------------------------------------------------------

Status BatchBuilder::retireParts(const std::map<std::string, PartInfo>& parts,
                                 const Manifest* keep) {
  std::set<BlobId> kept;
  if (keep != nullptr) {
    for (const BlobRef& b : manifestBlobs(*keep)) kept.insert(b.id);
  }
  for (const auto& [key, part] : parts) {
    GRANARY_STAGE(batch_.Delete(cfs_.parts, key));
    GRANARY_STAGE(batch_.Delete(cfs_.blobrefs, blobRefPartKey(part.version, key)));
    std::vector<BlobRef> blobs = partBlobs(part);
    std::erase_if(blobs, [&](const BlobRef& b) { return kept.contains(b.id); });
    auto queued = enqueueGc(part.version, std::move(blobs));
    if (!queued) return queued.error();
  }
  return Status::ok();
}

Status BatchBuilder::createUpload(CommitRequest& req) {
  GRANARY_RETURN_IF_ERROR(requireBucket(req.bucket, req.pre.bucket_created_unix_nanos));
  // Upload ids are unique across keys (parts rows are keyed by the id alone): the owner
  // row partKey(id, 0) says the id is taken.
  auto taken = uploadIdTaken(req.upload_id);
  if (!taken) return taken.error();
  if (*taken) return Status::alreadyExists("upload " + req.upload_id + " exists");
  const std::string ukey = uploadKey(req.bucket, req.key, req.upload_id);
  GRANARY_STAGE(batch_.Put(cfs_.uploads, ukey, req.upload_value));
  GRANARY_STAGE(batch_.Put(cfs_.parts, partKey(req.upload_id, 0), ukey));
  uploads_[ukey] = true;
  upload_ids_[req.upload_id] = true;
  return Status::ok();
}

Status BatchBuilder::putPart(CommitRequest& req) {
  const PartInfo& part = *req.part;
  auto exists = uploadExists(uploadKey(req.bucket, req.key, req.upload_id));
  if (!exists) return exists.error();
  if (!*exists) return Status::notFound("no upload " + req.upload_id);
  GRANARY_RETURN_IF_ERROR(requireNotDead(part.version));
  const std::string pkey = partKey(req.upload_id, part.part_number);
  auto old = loadPart(pkey);
  if (!old) return old.error();
  if (old->has_value()) {
    const PartInfo& o = **old;
    GRANARY_STAGE(batch_.Delete(cfs_.blobrefs, blobRefPartKey(o.version, pkey)));
    // A re-put of the same blobs (same version) must not reclaim them.
    std::set<BlobId> kept;
    for (const BlobRef& b : partBlobs(part)) kept.insert(b.id);
    std::vector<BlobRef> blobs = partBlobs(o);
    std::erase_if(blobs, [&](const BlobRef& b) { return kept.contains(b.id); });
    auto queued = enqueueGc(o.version, std::move(blobs));
    if (!queued) return queued.error();
  }
  GRANARY_STAGE(batch_.Put(cfs_.parts, pkey, req.part_value));
  GRANARY_STAGE(batch_.Put(cfs_.blobrefs, blobRefPartKey(part.version, pkey), rocksdb::Slice()));
  if (old->has_value()) req.replaced = (*old)->version;
  parts_[pkey] = part;
  return Status::ok();
}

Status BatchBuilder::replacePart(CommitRequest& req) {
  const PartInfo& part = *req.part;
  auto exists = uploadExists(uploadKey(req.bucket, req.key, req.upload_id));
  if (!exists) return exists.error();
  if (!*exists) return Status::notFound("no upload " + req.upload_id);
  const std::string pkey = partKey(req.upload_id, part.part_number);
  auto old = loadPart(pkey);
  if (!old) return old.error();
  if (!old->has_value() || **old != *req.expected_part) {
    return Status::preconditionFailed("the part changed since it was read");
  }
  // The same version and blob ids: its blobrefs row stays. The locations left go.
  auto queued = enqueueGc(part.version, blobsNotIn(partBlobs(**old), partBlobs(part)));
  if (!queued) return queued.error();
  GRANARY_STAGE(batch_.Put(cfs_.parts, pkey, req.part_value));
  parts_[pkey] = part;
  return Status::ok();
}

// A repair may have moved a fragment of a part since the caller listed the parts, and the
// place it left is on the GC queue: the object records where the part row says the
// fragment is now (req.relocated), never the old place.
Status BatchBuilder::takeCurrentLocations(CommitRequest& req,
                                          const std::map<std::string, PartInfo>& parts) {
  std::map<std::pair<VersionId, uint32_t>, std::pair<const PartInfo*, const StripeLayout*>> at;
  for (const auto& entry : parts) {
    for (const StripeLayout& s : entry.second.stripes) {
      at[{s.blob_version, s.blob_stripe}] = {&entry.second, &s};
    }
  }
  const Manifest& given = *req.manifest;
  for (size_t i = 0; i < given.stripes.size(); ++i) {
    const StripeLayout& s = given.stripes[i];
    auto it = at.find({s.blob_version, s.blob_stripe});
    if (it == at.end() || it->second.second->drives.size() != s.drives.size()) {
      return Status::invalidArgument("index: manifest's stripe " + std::to_string(i) +
                                     " is not a stripe of its part");
    }
    const auto [part, stripe] = it->second;
    for (size_t j = 0; j < s.drives.size(); ++j) {
      const std::string& now = part->drives[stripe->drives[j]];
      const Manifest& m = req.relocated ? *req.relocated : given;
      if (m.drives[m.stripes[i].drives[j]] == now) continue;
      if (!req.relocated) req.relocated = given;
      Manifest& r = *req.relocated;
      auto pos = std::find(r.drives.begin(), r.drives.end(), now);
      if (pos == r.drives.end()) pos = r.drives.insert(r.drives.end(), now);
      r.stripes[i].drives[j] = static_cast<uint16_t>(pos - r.drives.begin());
    }
  }
  if (req.relocated) {
    req.manifest = &*req.relocated;
    req.manifest_value = encodeManifest(*req.relocated);  // the summary does not change
  }
  return Status::ok();
}

Status BatchBuilder::completeUpload(CommitRequest& req) {
  const std::string ukey = uploadKey(req.bucket, req.key, req.upload_id);
  auto exists = uploadExists(ukey);
  if (!exists) return exists.error();
  if (!*exists) return Status::notFound("no upload " + req.upload_id);
  auto parts = loadParts(req.upload_id);
  if (!parts) return parts.error();
  // The caller built the manifest from a listParts read; a part replaced since then has
  // its old blobs on the GC queue already, so a manifest still using them would lose data.
  // Its profile must be the one each part's stripes were written with (when the part
  // recorded it): the object is decoded with it.
  std::map<VersionId, ec::EcProfile> part_versions;
  for (const auto& entry : *parts) part_versions.emplace(entry.second.version, entry.second.ec);
  for (const StripeLayout& s : req.manifest->stripes) {
    auto it = part_versions.find(s.blob_version);
    if (it == part_versions.end()) {
      return Status::invalidArgument("index: manifest uses blob version " +
                                     s.blob_version.toHex() +
                                     ", not a current part of upload " + req.upload_id);
    }
    if (it->second.k > 0 && it->second != req.manifest->ec) {
      return Status::invalidArgument("index: manifest's EC profile is not that of the part "
                                     "with blob version " + s.blob_version.toHex());
    }
  }
  GRANARY_RETURN_IF_ERROR(takeCurrentLocations(req, *parts));
  const std::string okey = objectKey(req.bucket, req.key);
  auto current = checkPut(req, okey);
  if (!current) return current.error();
  // Everything fallible that touches more than the GC overlay happens before stagePut,
  // which updates the object overlay last.
  GRANARY_RETURN_IF_ERROR(retireParts(*parts, req.manifest));
  GRANARY_STAGE(batch_.Delete(cfs_.uploads, ukey));
  GRANARY_STAGE(batch_.Delete(cfs_.parts, partKey(req.upload_id, 0)));
  GRANARY_RETURN_IF_ERROR(stagePut(req, okey, *current));
  uploads_[ukey] = false;
  upload_ids_[req.upload_id] = false;
  for (const auto& entry : *parts) parts_[entry.first] = std::nullopt;
  return Status::ok();
}

Status BatchBuilder::abortUpload(CommitRequest& req) {
  const std::string ukey = uploadKey(req.bucket, req.key, req.upload_id);
  auto exists = uploadExists(ukey);
  if (!exists) return exists.error();
  if (!*exists) return Status::notFound("no upload " + req.upload_id);
  auto parts = loadParts(req.upload_id);
  if (!parts) return parts.error();
  GRANARY_RETURN_IF_ERROR(retireParts(*parts, nullptr));
  GRANARY_STAGE(batch_.Delete(cfs_.uploads, ukey));
  GRANARY_STAGE(batch_.Delete(cfs_.parts, partKey(req.upload_id, 0)));
  uploads_[ukey] = false;
  upload_ids_[req.upload_id] = false;
  for (const auto& entry : *parts) parts_[entry.first] = std::nullopt;
  return Status::ok();
}

}  // namespace granary::index_kv

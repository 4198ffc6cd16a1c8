// Repairer (repairer.h): one pass = every object, every stripe, every fragment.
#include "granary/gateway/repairer.h"

#include <fmt/core.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "granary/chunkstore/chunk_client.h"
#include "granary/common/clock.h"
#include "granary/common/log.h"
#include "granary/ec/erasure_code.h"
#include "granary/gateway/index_recovery.h"
#include "granary/index_kv/index.h"
#include "granary/index_kv/manifest_blobs.h"
#include "granary/placement/cluster_map.h"
#include "granary/placement/placement.h"

namespace granary::gateway {

RepairStats& RepairStats::operator+=(const RepairStats& o) {
  objects += o.objects;
  parts += o.parts;
  stripes += o.stripes;
  fragments_missing += o.fragments_missing;
  fragments_corrupt += o.fragments_corrupt;
  fragments_unreachable += o.fragments_unreachable;
  fragments_stacked += o.fragments_stacked;
  fragments_rebuilt += o.fragments_rebuilt;
  fragments_moved += o.fragments_moved;
  fragments_misplaced += o.fragments_misplaced;
  fragments_rebalanced += o.fragments_rebalanced;
  fragments_draining += o.fragments_draining;
  fragments_drained += o.fragments_drained;
  unrecoverable_stripes += o.unrecoverable_stripes;
  conflicts += o.conflicts;
  errors += o.errors;
  return *this;
}

namespace {

constexpr size_t kListPage = 1000;

enum class State { kOk, kMissing, kCorrupt, kUnreachable, kUnknown };

// One fragment of the stripe being repaired.
struct Fragment {
  std::string drive;
  State state = State::kUnknown;
  std::vector<uint8_t> bytes;  // read (kOk) or rebuilt contents, when needed
  bool loaded = false;
  bool fix = false;       // missing or corrupt: rebuild
  bool move = false;      // stacked: copy to a domain of its own
  bool relocate = false;  // rebalance: healthy, but off the stripe's current placement
  bool drain = false;     // healthy, on a draining drive: copy it elsewhere
  std::string target;     // where it goes
};

}  // namespace

struct Repairer::Impl {
  Impl(index_kv::Index& i, chunkstore::ChunkClient& c, const placement::ClusterMap& m,
       const Clock& cl, prometheus::Registry& registry, RepairOptions o)
      : index(i),
        chunks(c),
        map(m),
        clock(cl),
        options(o),
        fragments(prometheus::BuildCounter()
                      .Name("granary_repair_fragments_total")
                      .Help("Fragments the repairer found (missing, corrupt, unreachable, "
                            "stacked, draining) and fixed (rebuilt, moved, drained, "
                            "rebalanced)")
                      .Register(registry)),
        passes(prometheus::BuildCounter()
                   .Name("granary_repair_passes_total")
                   .Help("Repair passes completed")
                   .Register(registry)
                   .Add({})),
        objects(prometheus::BuildCounter()
                    .Name("granary_repair_objects_total")
                    .Help("Objects examined by repair passes")
                    .Register(registry)
                    .Add({})),
        unrecoverable(prometheus::BuildCounter()
                          .Name("granary_repair_unrecoverable_stripes_total")
                          .Help("Stripes found with fewer than k healthy fragments")
                          .Register(registry)
                          .Add({})),
        errors(prometheus::BuildCounter()
                   .Name("granary_repair_errors_total")
                   .Help("Repair failures: a fragment that could not be read, decoded, "
                         "written or committed, a listing that failed (retried next pass)")
                   .Register(registry)
                   .Add({})),
        conflicts(prometheus::BuildCounter()
                      .Name("granary_repair_conflicts_total")
                      .Help("Repairs whose commit lost to a write of the object meanwhile "
                            "(their copies removed; the next pass looks again)")
                      .Register(registry)
                      .Add({})),
        last_pass(prometheus::BuildGauge()
                      .Name("granary_repair_last_pass_timestamp_seconds")
                      .Help("When the last repair pass ended (Unix time)")
                      .Register(registry)
                      .Add({})) {
    // Every outcome shown from the start, at 0: a query over one gets data before the
    // first pass found any.
    for (const auto& o : outcomes(RepairStats{})) fragments.Add({{"outcome", o.first}});
  }

  bool usable(const placement::Drive& d) const {
    return chunks.reachable(d.id) && chunks.writable(d.id);
  }

  // What the drive says about fragment `id` (reads it whole when verifying).
  State probe(Fragment& f, const BlobId& id, uint32_t fragment_len) {
    if (map.findDrive(f.drive) == nullptr) return State::kMissing;
    if (!chunks.reachable(f.drive)) return State::kUnreachable;
    // Verifying, or the drive saw this fragment fail its CRC (a read or the scrubber).
    if (options.verify || suspects.contains({f.drive, id})) {
      Status st = load(f, id, fragment_len);
      if (st.isOk()) return State::kOk;
      if (st.isNotFound()) return State::kMissing;
      if (st.code() == Status::Code::kCorruption) return State::kCorrupt;
      // Unreadable is as lost as corrupt, but only the drive can tell it from a failed
      // exchange (a proxy's 502, a malformed answer): rebuilt when the drive listed it
      // among its corrupt_ids (a read of it failed there, as this one did).
      if (chunkstore::unreadableBlob(st) && suspects.contains({f.drive, id})) {
        return State::kCorrupt;
      }
      if (st.code() == Status::Code::kUnavailable) return State::kUnreachable;
      return State::kUnknown;
    }
    auto info = chunks.stat(f.drive, id);
    if (info) return info->length == fragment_len ? State::kOk : State::kCorrupt;
    if (info.error().isNotFound()) return State::kMissing;
    if (info.error().code() == Status::Code::kUnavailable) return State::kUnreachable;
    return State::kUnknown;
  }

  Status load(Fragment& f, const BlobId& id, uint32_t fragment_len) {
    if (f.loaded) return Status::ok();
    f.bytes.resize(fragment_len);
    Status st = chunks.read(f.drive, id, 0, f.bytes);
    f.loaded = st.isOk();
    return st;
  }

  // Repairs one stripe of `m` in place (new drive indices); true if it changed.
  bool repairStripe(const std::string& bucket, const std::string& key, index_kv::Manifest& m,
                    size_t index_in_manifest, bool dry_run, RepairStats& stats) {
    index_kv::StripeLayout& s = m.stripes[index_in_manifest];
    const int k = m.ec.k;
    const int n = m.ec.total();
    if (static_cast<int>(s.drives.size()) != n) return false;
    ++stats.stripes;
    std::vector<Fragment> f(n);
    auto idOf = [&](int j) { return BlobId{s.blob_version, s.blob_stripe, static_cast<uint16_t>(j)}; };
    for (int j = 0; j < n; ++j) {
      f[j].drive = m.drives[s.drives[j]];
      f[j].state = probe(f[j], idOf(j), s.fragment_len);
    }
    // Which fragments stay where they are: fragments per domain (a second one is moved),
    // and the drive of each fragment held (then of each target as it is given).
    // Every fragment on a draining drive counts as draining, whatever its state (a dry run
    // reports none only once no manifest names the drive), and each healthy one leaves it
    // (`drain`, below); one leaving makes no other fragment of its domain stacked.
    std::map<std::string, int> domain_load;
    std::vector<std::string> holding;  // a drive per fragment held, then per target given
    int healthy = 0;
    for (int j = 0; j < n; ++j) {
      const State st = f[j].state;
      const placement::Drive* d = map.findDrive(f[j].drive);
      const bool draining = d != nullptr && d->draining;
      if (draining) ++stats.fragments_draining;
      if (st == State::kMissing) ++stats.fragments_missing;
      if (st == State::kCorrupt) ++stats.fragments_corrupt;
      if (st == State::kUnreachable) ++stats.fragments_unreachable;
      if (st == State::kMissing || st == State::kCorrupt) {
        f[j].fix = true;
        continue;
      }
      if (st == State::kOk) ++healthy;
      holding.push_back(f[j].drive);
      if (draining) {
        f[j].drain = st == State::kOk;
        continue;
      }
      if (++domain_load[std::string(map.domainOf(f[j].drive))] > 1 && st == State::kOk) {
        f[j].move = true;  // a second fragment in this domain
        ++stats.fragments_stacked;
      }
    }
    const std::string stripe_key = fmt::format("{}:{}", s.blob_version.toHex(), s.blob_stripe);
    // Rebalance: healthy fragments that are not where the current map would place the
    // stripe (a drive was added, a weight changed) go to the placement's drives. Drained
    // ones go there too where they can.
    std::vector<size_t> placed;
    const bool any_drain =
        std::any_of(f.begin(), f.end(), [](const Fragment& x) { return x.drain; });
    if (rebalancing || any_drain) {
      auto chosen = placement::chooseDrives(map, stripe_key, n,
                                            [this](const placement::Drive& d) { return usable(d); });
      if (chosen) placed = *chosen;
      if (chosen && rebalancing) {
        std::set<std::string> ids;
        for (size_t idx : placed) ids.insert(map.drives[idx].id);
        for (auto& x : f) {
          if (x.state == State::kOk && !x.move && !x.drain && !ids.contains(x.drive)) {
            x.relocate = true;
            ++stats.fragments_misplaced;
          }
        }
      }
    }
    const bool any_fix = std::any_of(f.begin(), f.end(), [](const Fragment& x) { return x.fix; });
    const bool any_move =
        std::any_of(f.begin(), f.end(), [](const Fragment& x) { return x.move || x.drain; });
    const bool any_relocate =
        std::any_of(f.begin(), f.end(), [](const Fragment& x) { return x.relocate; });
    if (!any_fix && !any_move && !any_relocate) return false;
    if (any_fix && healthy < k) {
      ++stats.unrecoverable_stripes;
      log::error("repair: {}/{} stripe {} has {} readable healthy fragments, needs {}: "
                 "cannot repair it now", bucket, key, index_in_manifest, healthy, k);
      return false;
    }
    if (dry_run) return false;

    // Targets, best first in this stripe's own rendezvous order: a usable drive in a
    // domain the stripe does not hold; for a fragment that must be rebuilt or drained, if
    // no domain is free, the domain holding the fewest (a third in a domain of two would
    // leave k - 1 when it goes), onto a drive without another fragment of the stripe if
    // that domain has one (placement's degraded rule). Never onto a drive that holds this blob id
    // already (a copy waiting for GC).
    std::set<std::string> taken;  // drives given a fragment by this repair
    auto absent = [&](const placement::Drive& d, int j) {
      // A corrupt copy is worth nothing: its drive may take the rebuilt one, which replaces
      // it once the rebuild has succeeded (below).
      if (f[j].state == State::kCorrupt && d.id == f[j].drive) return true;
      auto there = chunks.stat(d.id, idOf(j));
      return !there && there.error().isNotFound();
    };
    auto pick = [&](int j, bool any_domain) -> const placement::Drive* {
      // A draining fragment's own place does not count: it is leaving. It goes where the
      // map now places the stripe if such a drive is free (as a rebalance moves the
      // others), else where chooseAnotherDrive says.
      std::vector<std::string> others = holding;
      if (f[j].drain) {
        if (auto own = std::find(others.begin(), others.end(), f[j].drive); own != others.end()) {
          others.erase(own);
        }
        for (size_t idx : placed) {
          const placement::Drive& d = map.drives[idx];
          const bool domain_held = std::any_of(others.begin(), others.end(), [&](const auto& id) {
            return map.domainOf(id) == d.domain;
          });
          if (!domain_held && !taken.contains(d.id) && usable(d) && absent(d, j)) return &d;
        }
      }
      auto idx = placement::chooseAnotherDrive(
          map, stripe_key, others,
          [&](const placement::Drive& d) {
            return !taken.contains(d.id) && usable(d) && absent(d, j);
          },
          any_domain);
      return idx ? &map.drives[*idx] : nullptr;
    };
    for (int pass = 0; pass < 2; ++pass) {  // rebuilds first, then moves (and drains)
      for (int j = 0; j < n; ++j) {
        if (!(pass == 0 ? f[j].fix : f[j].move || f[j].drain)) continue;
        const placement::Drive* d = pick(j, f[j].fix || f[j].drain);
        if (d == nullptr) continue;  // a move waits for a free domain
        if (f[j].drain) {
          // Degraded, but never worse than a degraded write: else it stays, still counted.
          std::vector<std::string> after = holding;
          after.erase(std::find(after.begin(), after.end(), f[j].drive));
          after.push_back(d->id);
          if (!placement::spreadLikeChooseDrives(map, after, n, k)) continue;
        }
        f[j].target = d->id;
        taken.insert(d->id);
        holding.push_back(d->id);  // a drained fragment's source stays counted until it is gone
      }
    }
    if (any_relocate) {
      // The placement's drives that no staying fragment occupies, in its order; never into
      // a domain another fragment holds. A relocating fragment keeps its own domain
      // reserved: should its copy fail, it stays where it is, and nothing may have moved in
      // beside it (what this leaves out, the next pass moves).
      auto domainOf = [&](const std::string& drive) { return std::string(map.domainOf(drive)); };
      std::set<std::string> occupied = taken;
      std::map<std::string, int> holders;  // fragments per domain, staying or arriving
      for (int j = 0; j < n; ++j) {
        if (!f[j].target.empty()) ++holders[domainOf(f[j].target)];
        if (f[j].fix || f[j].move) continue;  // a drained one keeps its domain, as relocating
        occupied.insert(f[j].drive);
        ++holders[domainOf(f[j].drive)];
      }
      for (int j = 0; j < n; ++j) {
        if (!f[j].relocate) continue;
        const std::string own = domainOf(f[j].drive);
        for (size_t idx : placed) {
          const placement::Drive& d = map.drives[idx];
          const int others = holders[d.domain] - (d.domain == own ? 1 : 0);
          if (occupied.contains(d.id) || others > 0 || !absent(d, j)) continue;
          f[j].target = d.id;
          occupied.insert(d.id);
          ++holders[d.domain];
          break;
        }
      }
    }

    // The bytes: every healthy fragment read whole, the missing ones decoded from them.
    std::vector<uint8_t*> ptrs(n);
    bool present[ec::kMaxFragments] = {};
    for (int j = 0; j < n; ++j) {
      if (f[j].state == State::kOk && load(f[j], idOf(j), s.fragment_len).isOk()) {
        present[j] = true;
      } else {
        f[j].bytes.assign(s.fragment_len, 0);
      }
      ptrs[j] = f[j].bytes.data();
    }
    if (any_fix) {
      auto code = ec::ErasureCode::create(m.ec);
      if (!code) {
        ++stats.errors;
        return false;
      }
      Status st = (*code)->reconstruct(s.fragment_len, ptrs, std::span<const bool>(present, n));
      if (!st.isOk()) {
        ++stats.errors;
        log::warn("repair: {}/{} stripe {}: {}", bucket, key, index_in_manifest, st.toString());
        return false;
      }
    }

    bool changed = false;
    for (int j = 0; j < n; ++j) {
      if (f[j].target.empty()) continue;
      if ((f[j].move || f[j].relocate || f[j].drain) && !present[j]) continue;  // next pass
      chunkstore::BlobDescriptor desc;
      desc.id = idOf(j);
      desc.ec = m.ec;
      desc.stripe_data_len = s.data_len;
      desc.bucket = bucket;
      desc.key = key;
      desc.flags = stripeFlags(m, index_in_manifest);
      if (f[j].state == State::kCorrupt && f[j].target == f[j].drive) {
        // Only now, with the stripe decoded: removed before, a rebuild that then failed
        // (another fragment unreadable, no drive to take it) lost the stripe a fragment.
        // Rebuilt elsewhere, the corrupt copy goes with the GC entry of the commit.
        Status removed = chunks.remove(f[j].drive, desc.id);
        if (!removed.isOk() && !removed.isNotFound()) {
          ++stats.errors;
          log::warn("repair: removing corrupt {} on {}: {}", desc.id.toString(), f[j].drive,
                    removed.toString());
          continue;
        }
      }
      Status st = chunks.put(f[j].target, desc, f[j].bytes);
      if (st.code() == Status::Code::kAlreadyExists) {
        // Another pass (a gateway's, draining the same drive from the same map) put it there
        // since this one looked: not this pass's copy, so not its to commit or remove. It
        // stays where it is; that pass commits, or the next one sees the copy and goes on.
        log::info("repair: {} on {} was put there meanwhile", desc.id.toString(), f[j].target);
        continue;
      }
      if (!st.isOk()) {
        ++stats.errors;
        log::warn("repair: writing {} to {}: {}", desc.id.toString(), f[j].target, st.toString());
        continue;
      }
      written.emplace_back(f[j].target, desc.id);
      auto pos = std::find(m.drives.begin(), m.drives.end(), f[j].target);
      if (pos == m.drives.end()) pos = m.drives.insert(m.drives.end(), f[j].target);
      s.drives[j] = static_cast<uint16_t>(pos - m.drives.begin());
      (f[j].fix     ? stats.fragments_rebuilt
       : f[j].move  ? stats.fragments_moved
       : f[j].drain ? stats.fragments_drained
                    : stats.fragments_rebalanced) += 1;
      changed = true;
    }
    return changed;
  }

  // Removes the copies this pass wrote.
  void removeCopies() {
    for (const auto& [drive, id] : written) {
      Status removed = chunks.remove(drive, id);
      if (!removed.isOk() && !removed.isNotFound()) {
        log::warn("repair: removing unused copy {} on {}: {}", id.toString(), drive,
                  removed.toString());
      }
    }
  }
  // Whether `now` (the blobs the index names now; nullopt: unknown) holds every copy this
  // pass wrote.
  bool namesCopies(const std::optional<std::vector<index_kv::BlobRef>>& now) {
    if (!now) return false;
    std::set<std::pair<std::string, BlobId>> used;
    for (const auto& blob : *now) used.emplace(blob.drive, blob.id);
    return std::ranges::all_of(written, [&](const auto& copy) { return used.contains(copy); });
  }

  // Commits the copies of one object or part: `commit` is the index's compare-and-swap on
  // what the pass read, `now` reads the blobs the index names after it.
  template <typename Commit, typename Now>
  void commitCopies(const std::string& what, Commit commit, Now now, RepairStats& found) {
    Status st = commit();
    const auto refused = [](const Status& s) {
      return s.code() == Status::Code::kPreconditionFailed || s.isNotFound();
    };
    bool committed = st.isOk();
    if (!committed && refused(st)) {
      // Refused (a final answer): the copies this pass wrote (a put never overwrites, so
      // they are its own) are referenced by no manifest. The orphan sweep would not take
      // them while the version lives, so they go now.
      ++found.conflicts;
      removeCopies();
    } else if (!committed) {
      // An error leaves the outcome unknown: the commit may still apply (queued behind a
      // slow sync). The same compare-and-swap sent again commits it, or is refused
      // because the first applied (its answer lost: the index names the copies) or
      // because the manifest changed. That refusal is not final for the first request
      // (the manifest can become `expected` again: tags set back), so the copies stay.
      log::warn("repair: committing {}: {}", what, st.toString());
      Status again = commit();
      committed = again.isOk() || (refused(again) && namesCopies(now()));
      if (!committed) ++found.errors;
    }
    if (!committed) {
      found.fragments_rebuilt = found.fragments_moved = found.fragments_rebalanced =
          found.fragments_drained = 0;
    }
  }

  void repairObject(const std::string& bucket, const index_kv::ObjectSummary& summary,
                    bool dry_run, RepairStats& stats) {
    auto manifest = index.getObject(bucket, summary.key);
    if (!manifest) {
      if (!manifest.error().isNotFound()) ++stats.errors;
      return;
    }
    if (manifest->is_inline || manifest->stripes.empty()) return;
    ++stats.objects;
    index_kv::Manifest updated = *manifest;
    written.clear();
    RepairStats found;
    bool changed = false;
    for (size_t i = 0; i < updated.stripes.size() && !stopping; ++i) {
      changed |= repairStripe(bucket, summary.key, updated, i, dry_run, found);
    }
    if (changed) {
      commitCopies(
          bucket + "/" + summary.key,
          [&] { return index.relocateFragments(bucket, summary.key, *manifest, updated); },
          [&]() -> std::optional<std::vector<index_kv::BlobRef>> {
            auto now = index.getObject(bucket, summary.key);
            if (!now) return std::nullopt;
            return index_kv::manifestBlobs(*now);
          },
          found);
    }
    stats += found;
  }

  // A part of an upload in progress, as an object: its stripes are repaired (or drained)
  // the same way, through a manifest that has its stripes (and no version of its own, so
  // that the copies carry the part flag a part's fragments have).
  void repairPart(const std::string& bucket, const index_kv::MultipartUpload& upload,
                  const index_kv::PartInfo& part, bool dry_run, RepairStats& stats) {
    if (part.stripes.empty()) return;
    if (part.ec.k <= 0) {
      // A part stored before parts recorded their code: neither decoded nor moved here (a
      // wrong profile decodes wrong bytes). Its fragments on draining drives still count,
      // so that a drain does not look done while they are there.
      for (const auto& s : part.stripes) {
        for (uint16_t d : s.drives) {
          const placement::Drive* drive = map.findDrive(part.drives.at(d));
          if (drive != nullptr && drive->draining) ++stats.fragments_draining;
        }
      }
      return;
    }
    ++stats.parts;
    index_kv::Manifest view;
    view.ec = part.ec;
    view.drives = part.drives;
    view.stripes = part.stripes;
    written.clear();
    RepairStats found;
    bool changed = false;
    for (size_t i = 0; i < view.stripes.size() && !stopping; ++i) {
      changed |= repairStripe(bucket, upload.key, view, i, dry_run, found);
    }
    if (changed) {
      index_kv::PartInfo updated = part;
      updated.drives = std::move(view.drives);
      updated.stripes = std::move(view.stripes);
      commitCopies(
          fmt::format("{}/{} upload {} part {}", bucket, upload.key, upload.upload_id,
                      part.part_number),
          [&] {
            return index.relocatePartFragments(bucket, upload.key, upload.upload_id, part,
                                               updated);
          },
          [&]() -> std::optional<std::vector<index_kv::BlobRef>> {
            auto now = index.listParts(bucket, upload.key, upload.upload_id,
                                       part.part_number - 1, 1);
            if (!now || now->empty() || now->front().part_number != part.part_number) {
              return std::nullopt;
            }
            return index_kv::partBlobs(now->front());
          },
          found);
    }
    stats += found;
  }

  // Every part of every upload in progress in `bucket`: a drive drained while an upload
  // runs must not keep its fragments, nor may a lost fragment wait for the Complete.
  void repairUploads(const std::string& bucket, bool dry_run, RepairStats& stats) {
    index_kv::ListUploadsRequest req;
    req.max_uploads = kListPage;
    for (;;) {
      if (halted()) return;
      auto page = index.listUploads(bucket, req);
      if (!page) {
        if (!page.error().isNotFound()) ++stats.errors;
        return;
      }
      for (const auto& upload : page->uploads) {
        uint32_t after = 0;
        for (;;) {
          if (halted()) return;
          auto parts = index.listParts(bucket, upload.key, upload.upload_id, after, kListPage);
          if (!parts) {
            if (!parts.error().isNotFound()) ++stats.errors;  // completed meanwhile
            break;
          }
          for (const auto& part : *parts) repairPart(bucket, upload, part, dry_run, stats);
          if (parts->size() < kListPage) break;
          after = parts->back().part_number;
        }
      }
      if (!page->truncated || page->uploads.empty()) return;
      req.key_marker = page->uploads.back().key;
      req.upload_id_marker = page->uploads.back().upload_id;
    }
  }

  // `go_on`, when given (the background pass: `leading`), is asked before each object: a
  // gateway that lost the lease mid-pass stops there, so that two passes do not repair
  // the same stripe at once (one could remove a copy the other just rebuilt).
  Result<RepairStats> runPass(bool dry_run, bool rebalance, bool wait,
                              std::function<bool()> go_on = {}) {
    std::unique_lock pass(pass_mu, std::defer_lock);
    if (wait) {
      pass.lock();
    } else if (!pass.try_lock()) {
      return fail(Status::unavailable("a repair pass is already running; try again later"));
    }
    rebalancing = rebalance;
    pass_go_on = std::move(go_on);
    RepairStats stats;
    // Fragments the drives found corrupt since they opened: read whole, not just stat'ed.
    suspects.clear();
    for (const auto& d : map.drives) {
      if (!chunks.reachable(d.id)) continue;
      auto st = chunks.stats(d.id);
      if (!st) continue;
      for (const auto& id : st->corrupt_ids) suspects.emplace(d.id, id);
    }
    auto buckets = index.listBuckets();
    if (!buckets) return fail(buckets.error());
    for (const auto& bucket : *buckets) {
      index_kv::ListRequest req;
      req.max_keys = kListPage;
      for (;;) {
        if (halted()) return stats;
        auto page = index.listObjects(bucket.name, req);
        if (!page) {
          if (!page.error().isNotFound()) ++stats.errors;  // a bucket deleted meanwhile
          break;
        }
        for (const auto& summary : page->objects) {
          if (halted()) return stats;
          repairObject(bucket.name, summary, dry_run, stats);
        }
        if (!page->truncated) break;
        req.start_after = page->next_start_after;
      }
      repairUploads(bucket.name, dry_run, stats);
    }
    if (!dry_run) record(stats);
    return stats;
  }

  // The fragment counts of a pass, by the label granary_repair_fragments_total gives them.
  static std::array<std::pair<const char*, uint64_t>, 9> outcomes(const RepairStats& s) {
    return {{{"missing", s.fragments_missing},
             {"corrupt", s.fragments_corrupt},
             {"unreachable", s.fragments_unreachable},
             {"stacked", s.fragments_stacked},
             {"rebuilt", s.fragments_rebuilt},
             {"moved", s.fragments_moved},
             {"rebalanced", s.fragments_rebalanced},
             {"draining", s.fragments_draining},
             {"drained", s.fragments_drained}}};
  }

  void record(const RepairStats& s) {
    for (auto [outcome, n] : outcomes(s)) {
      fragments.Add({{"outcome", outcome}}).Increment(static_cast<double>(n));
    }
    passes.Increment();
    objects.Increment(static_cast<double>(s.objects));
    unrecoverable.Increment(static_cast<double>(s.unrecoverable_stripes));
    errors.Increment(static_cast<double>(s.errors));
    conflicts.Increment(static_cast<double>(s.conflicts));
    last_pass.Set(static_cast<double>(clock.nowUnixNanos()) / 1e9);
  }

  index_kv::Index& index;
  chunkstore::ChunkClient& chunks;
  const placement::ClusterMap& map;
  const Clock& clock;
  const RepairOptions options;
  std::mutex pass_mu;
  std::atomic<bool> stopping{false};
  std::function<bool()> pass_go_on;  // the current pass's (guarded by pass_mu)
  // The pass ends: stop() was called, or its gateway no longer leads.
  bool halted() const { return stopping || (pass_go_on && !pass_go_on()); }
  bool rebalancing = false;  // this pass also rebalances (guarded by pass_mu)
  std::set<std::pair<std::string, BlobId>> suspects;  // (guarded by pass_mu)
  // The copies the current object's repair wrote (guarded by pass_mu).
  std::vector<std::pair<std::string, BlobId>> written;
  prometheus::Family<prometheus::Counter>& fragments;
  prometheus::Counter& passes;
  prometheus::Counter& objects;
  prometheus::Counter& unrecoverable;
  prometheus::Counter& errors;
  prometheus::Counter& conflicts;
  prometheus::Gauge& last_pass;
};

Repairer::Repairer(index_kv::Index& index, chunkstore::ChunkClient& chunks,
                   const placement::ClusterMap& map, const Clock& clock,
                   prometheus::Registry& registry, RepairOptions options)
    : impl_(std::make_unique<Impl>(index, chunks, map, clock, registry, options)) {}

Repairer::~Repairer() { stop(); }

Result<RepairStats> Repairer::runPass(bool dry_run, bool rebalance) {
  return impl_->runPass(dry_run, rebalance, /*wait=*/false);
}

void Repairer::start() {
  if (impl_->options.interval.count() <= 0) return;
  impl_->stopping = false;
  // The first pass at a random point of the second half of the first interval: gateways
  // restarted together (a new cluster map: a drain) do not all walk every object at once.
  const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(
      impl_->options.interval);
  std::uniform_int_distribution<int64_t> half(interval.count() / 2, interval.count());
  // Seeded from the clock and this object: random_device may throw, and this needs no more.
  std::mt19937_64 pick(static_cast<uint64_t>(impl_->clock.nowUnixNanos()) ^
                       reinterpret_cast<uintptr_t>(this));
  const std::chrono::milliseconds first(half(pick));
  thread_.start(interval, [this] {
    if (impl_->options.leading && !impl_->options.leading()) return;  // another gateway's
    auto stats = impl_->runPass(false, false, /*wait=*/true, impl_->options.leading);
    if (!stats) {
      log::warn("repair pass: {}", stats.error().toString());
    } else if (stats->fragments_rebuilt + stats->fragments_moved + stats->fragments_draining +
                   stats->unrecoverable_stripes + stats->errors > 0) {
      log::info("repair pass: {} objects, {} fragments rebuilt, {} moved, {} drained (of {} "
                "found on draining drives), {} unrecoverable stripes, {} errors",
                stats->objects, stats->fragments_rebuilt, stats->fragments_moved,
                stats->fragments_drained, stats->fragments_draining,
                stats->unrecoverable_stripes, stats->errors);
    }
  }, first);
}

void Repairer::stop() {
  impl_->stopping = true;
  thread_.stop();
}

}  // namespace granary::gateway

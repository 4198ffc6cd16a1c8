// Index checkpoints on the chunk servers, their restore, and the index rebuild from
// fragment headers (index_recovery.h).
#include "granary/gateway/index_recovery.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "digest.h"
#include "granary/chunkstore/chunk_client.h"
#include "granary/common/clock.h"
#include "granary/common/durable_dirs.h"
#include "granary/common/hex.h"
#include "granary/common/log.h"
#include "granary/common/random.h"
#include "granary/ec/erasure_code.h"
#include "granary/index_kv/index.h"
#include "granary/placement/cluster_map.h"
#include "granary/placement/placement.h"

namespace granary::gateway {

namespace fs = std::filesystem;

namespace {

constexpr size_t kListPage = 1000;
constexpr int kCatalogFormat = 1;
constexpr std::string_view kSystemBucket = ".granary";  // not a valid S3 bucket name

// The smallest blob id of a system version: listing after it yields system blobs only.
BlobId systemStart() {
  BlobId id;
  std::fill(id.version.bytes.begin(), id.version.bytes.begin() + 4, uint8_t{0xff});
  return id;
}

VersionId newCheckpointId(int64_t now, Random& random) {
  VersionId id;
  std::fill(id.bytes.begin(), id.bytes.begin() + 4, uint8_t{0xff});
  putBe64(id.bytes.data() + 4, static_cast<uint64_t>(now));
  random.fill(std::span<uint8_t>(id.bytes.data() + 12, 4));
  return id;
}

// When checkpoint `id` was made (newCheckpointId).
int64_t checkpointTime(const VersionId& id) {
  return static_cast<int64_t>(getBe64(id.bytes.data() + 4));
}

// Where the blobs of every checkpoint are: blob id -> (drive -> payload length).
using SystemBlobs = std::map<BlobId, std::map<std::string, uint64_t>>;

// Every system blob on every drive. A drive that does not answer is skipped with a
// warning, or with `strict` fails the call (kUnavailable).
Result<SystemBlobs> listSystemBlobs(chunkstore::ChunkClient& chunks,
                                    const placement::ClusterMap& map, bool strict) {
  SystemBlobs out;
  for (const auto& drive : map.drives) {
    std::optional<BlobId> after = systemStart();
    for (;;) {
      auto page = chunks.list(drive.id, after, kListPage);
      if (!page) {
        if (strict) {
          return fail(Status::unavailable(fmt::format(
              "drive {} does not answer ({}): it may hold the newest checkpoint", drive.id,
              page.error().toString())));
        }
        log::warn("checkpoints: cannot list {}: {}", drive.id, page.error().toString());
        break;
      }
      for (const auto& b : *page) {
        if (b.id.version.isSystem()) out[b.id][drive.id] = b.length;
      }
      if (page->size() < kListPage) break;
      after = page->back().id;
    }
  }
  return out;
}

struct CatalogFile {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32c = 0;
  uint32_t pieces = 0;
};

struct Catalog {
  int64_t created_unix_nanos = 0;
  std::vector<CatalogFile> files;
};

std::string encodeCatalog(const Catalog& c) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : c.files) {
    files.push_back({{"name", f.name}, {"size", f.size}, {"crc32c", f.crc32c}, {"pieces", f.pieces}});
  }
  return nlohmann::json{{"format", kCatalogFormat},
                        {"created_ns", c.created_unix_nanos},
                        {"files", std::move(files)}}
      .dump();
}

Result<Catalog> decodeCatalog(std::string_view text) {
  try {
    auto j = nlohmann::json::parse(text);
    if (j.at("format").get<int>() != kCatalogFormat) {
      return fail(Status::corruption("checkpoint catalog of an unknown format"));
    }
    Catalog c;
    c.created_unix_nanos = j.at("created_ns").get<int64_t>();
    for (const auto& f : j.at("files")) {
      CatalogFile file{f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                       f.at("crc32c").get<uint32_t>(), f.at("pieces").get<uint32_t>()};
      // Names come from the drives: never let one leave the target directory.
      const bool control = std::any_of(file.name.begin(), file.name.end(),
                                       [](char ch) { return static_cast<unsigned char>(ch) < 0x20; });
      if (file.name.empty() || control || file.name.find('/') != std::string::npos ||
          file.name == "." || file.name == "..") {
        return fail(Status::corruption("checkpoint catalog names a bad file '" + file.name + "'"));
      }
      c.files.push_back(std::move(file));
    }
    return c;
  } catch (const std::exception& e) {
    return fail(Status::corruption(std::string("malformed checkpoint catalog: ") + e.what()));
  }
}

// Whether a failure to read a checkpoint says its bytes are gone (missing, corrupt, a
// medium error), rather than that a drive did not serve them now.
bool unreadable(const Status& st) {
  return st.isNotFound() || st.isCorruption() ||
         (st.code() == Status::Code::kIoError && !st.retryable());
}

// Reads a whole blob from the first of `where` that returns it. A copy a drive failed to
// serve now outweighs copies that are gone: the blob is not then taken for lost.
Result<std::vector<uint8_t>> readAnyCopy(chunkstore::ChunkClient& chunks, const BlobId& id,
                                         const std::map<std::string, uint64_t>& where) {
  Status last = Status::notFound("blob " + id.toString() + " is on no drive");
  for (const auto& [drive, len] : where) {
    std::vector<uint8_t> bytes(len);
    Status st = chunks.read(drive, id, 0, bytes);
    if (st.isOk()) return bytes;
    log::warn("checkpoints: reading {} on {}: {}", id.toString(), drive, st.toString());
    if (unreadable(last)) last = st;
  }
  return fail(last);
}

}  // namespace

// --- IndexCheckpointer ---------------------------------------------------------------

struct IndexCheckpointer::Impl {
  Impl(index_kv::Index& index, chunkstore::ChunkClient& chunks, const placement::ClusterMap& map,
       const Clock& clock, Random& random, prometheus::Registry& registry,
       CheckpointOptions options)
      : index(index),
        chunks(chunks),
        map(map),
        clock(clock),
        random(random),
        options(std::move(options)),
        runs(prometheus::BuildCounter()
                 .Name("granary_index_checkpoints_total")
                 .Help("Index checkpoints attempted, by result")
                 .Register(registry)),
        last_success(prometheus::BuildGauge()
                         .Name("granary_index_checkpoint_last_success_timestamp_seconds")
                         .Help("When the last complete index checkpoint was made")
                         .Register(registry)
                         .Add({})),
        last_bytes(prometheus::BuildGauge()
                       .Name("granary_index_checkpoint_bytes")
                       .Help("Bytes of the last complete index checkpoint (one copy)")
                       .Register(registry)
                       .Add({})) {}

  // The drives that take the copies: the first writable drive (not draining) of each
  // failure domain in rendezvous order of the checkpoint, m + 1 domains at most.
  std::vector<std::string> copyDrives(const VersionId& id) {
    std::vector<std::string> out;
    std::set<std::string> domains;
    const size_t want = static_cast<size_t>(map.ec.m) + 1;
    for (size_t d : placement::rankDrives(map, "index-checkpoint:" + id.toHex())) {
      const auto& drive = map.drives[d];
      if (drive.draining || domains.contains(drive.domain) || !chunks.writable(drive.id)) {
        continue;
      }
      domains.insert(drive.domain);
      out.push_back(drive.id);
      if (out.size() == want) break;
    }
    return out;
  }

  // Writes one blob to every drive of `drives`, dropping the drives that fail.
  void putAll(std::vector<std::string>& drives, const chunkstore::BlobDescriptor& desc,
              std::span<const uint8_t> bytes) {
    std::erase_if(drives, [&](const std::string& drive) {
      Status st = chunks.put(drive, desc, bytes);
      if (st.isOk()) return false;
      log::warn("checkpoint: writing {} to {}: {}", desc.id.toString(), drive, st.toString());
      return true;
    });
  }

  Result<CheckpointInfo> run() {
    std::lock_guard lock(mu);
    CheckpointInfo info;
    info.created_unix_nanos = clock.nowUnixNanos();
    info.id = newCheckpointId(info.created_unix_nanos, random);
    const fs::path local = fs::path(options.work_dir) / ("checkpoint-" + info.id.toHex());
    std::error_code ec;
    fs::create_directories(options.work_dir, ec);
    // Leftovers of a run that crashed hold hard links to old table files: drop them.
    for (const auto& entry : fs::directory_iterator(options.work_dir, ec)) {
      if (entry.path().filename().string().starts_with("checkpoint-")) {
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
      }
    }
    GRANARY_RETURN_IF_ERROR_RESULT(index.checkpoint(local.string()));
    struct Cleanup {
      fs::path dir;
      ~Cleanup() {
        std::error_code e;
        fs::remove_all(dir, e);
      }
    } cleanup{local};

    std::vector<std::string> drives = copyDrives(info.id);
    if (drives.empty()) return fail(Status::unavailable("checkpoint: no writable drive"));
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(local, ec)) {
      if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
    }
    if (ec) return fail(Status::fromErrno(ec.value(), "listing " + local.string()));
    std::sort(names.begin(), names.end());

    Catalog catalog;
    catalog.created_unix_nanos = info.created_unix_nanos;
    std::vector<uint8_t> piece(options.piece_bytes);
    for (size_t f = 0; f < names.size() && !drives.empty(); ++f) {
      std::ifstream in(local / names[f], std::ios::binary);
      if (!in) return fail(Status::ioError("checkpoint: cannot open " + names[f]));
      CatalogFile file{names[f], 0, 0, 0};
      for (;;) {
        in.read(reinterpret_cast<char*>(piece.data()), static_cast<std::streamsize>(piece.size()));
        const size_t n = static_cast<size_t>(in.gcount());
        if (n == 0 && file.pieces > 0) break;
        std::span<const uint8_t> bytes(piece.data(), n);
        file.crc32c = ec::crc32c(bytes, file.crc32c);
        file.size += n;
        chunkstore::BlobDescriptor desc;
        desc.id = BlobId{info.id, static_cast<uint32_t>(f + 1), static_cast<uint16_t>(file.pieces)};
        desc.ec = {1, 0};
        desc.stripe_data_len = n;
        desc.bucket = std::string(kSystemBucket);
        desc.key = "index-checkpoint/" + info.id.toHex() + "/" + names[f];
        desc.flags = chunkstore::kBlobFlagSystem;
        putAll(drives, desc, bytes);
        if (++file.pieces > 0x10000) return fail(Status::invalidArgument("checkpoint file too large"));
        if (n < piece.size()) break;
      }
      if (in.bad()) return fail(Status::ioError("checkpoint: reading " + names[f]));
      info.bytes += file.size;
      catalog.files.push_back(std::move(file));
    }
    info.files = catalog.files.size();
    std::string text = encodeCatalog(catalog);
    chunkstore::BlobDescriptor desc;
    desc.id = BlobId{info.id, 0, 0};
    desc.ec = {1, 0};
    desc.stripe_data_len = text.size();
    desc.bucket = std::string(kSystemBucket);
    desc.key = "index-checkpoint/" + info.id.toHex();
    desc.flags = chunkstore::kBlobFlagSystem;
    if (!drives.empty()) {
      putAll(drives, desc, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
    }
    info.copies = drives.size();
    if (info.copies == 0) {
      // What this attempt wrote goes with the next successful checkpoint's pruning.
      return fail(Status::unavailable("checkpoint: no drive took a complete copy"));
    }
    if (info.copies < static_cast<size_t>(map.ec.m) + 1) {
      log::warn("checkpoint {}: only {} copies (want {}); the older whole ones are kept",
                info.id.toHex(), info.copies, map.ec.m + 1);
      thin_made.insert(info.id);
    }
    info.removed = prune(info.id);
    return info;
  }

  // Keeps `made`, the newest `keep` whole complete checkpoints (a catalog on m + 1 drives;
  // `made` counts if it is whole), any checkpoint newer than `made` (another index's, in
  // progress), and every complete one made before this index was (an index that replaced
  // a lost one must not prune the checkpoints that could restore it); removes every other
  // checkpoint blob (older ones, thin ones, failed attempts). A thin `made` (drives down)
  // so prunes no whole one, and thin ones do not pile up. While a drive does not answer
  // its list, its copies cannot be counted (a whole checkpoint could look thin): only
  // checkpoints seen whole on the drives that answer, and the thin ones this checkpointer
  // made, go (a copy left on the silent drive goes with a later pruning). Returns the
  // blobs removed.
  size_t prune(const VersionId& made) {
    auto index_created = index.createdUnixNanos();
    if (!index_created) {
      log::warn("checkpoint: not pruning: {}", index_created.error().toString());
      return 0;
    }
    auto listed = listSystemBlobs(chunks, map, /*strict=*/true);
    const bool every_drive = listed.has_value();
    if (!every_drive) {
      log::warn("checkpoint: pruning only checkpoints seen whole and thin ones made here: {}",
                listed.error().toString());
    }
    SystemBlobs blobs = every_drive ? std::move(*listed)
                                    : std::move(*listSystemBlobs(chunks, map, /*strict=*/false));
    std::map<VersionId, size_t, std::greater<>> complete;  // catalog copies
    for (const auto& [id, where] : blobs) {
      if (id.stripe == 0 && id.fragment == 0) complete[id.version] = where.size();
    }
    auto whole = [this, &complete](const VersionId& v) {
      auto it = complete.find(v);
      return it != complete.end() && it->second >= static_cast<size_t>(map.ec.m) + 1;
    };
    std::set<VersionId> kept = {made};  // even if the clock stepped back
    size_t newest = whole(made) ? 1 : 0;
    for (const auto& [v, copies] : complete) {
      if (kept.contains(v)) continue;
      if (checkpointTime(v) < *index_created) {
        kept.insert(v);
      } else if (whole(v) && newest < std::max<size_t>(options.keep, 1)) {
        kept.insert(v);
        ++newest;
      }
    }
    size_t removed = 0;
    for (const auto& [id, where] : blobs) {
      if (kept.contains(id.version) || id.version > made) continue;
      if (!every_drive && !whole(id.version) && !thin_made.contains(id.version)) continue;
      for (const auto& [drive, len] : where) {
        if (chunks.remove(drive, id).isOk()) ++removed;
      }
    }
    std::erase_if(thin_made, [&kept](const VersionId& v) { return !kept.contains(v); });
    return removed;
  }

  void record(bool ok, const CheckpointInfo* info) {
    runs.Add({{"result", ok ? "ok" : "failed"}}).Increment();
    if (ok && info) {
      last_success.Set(static_cast<double>(info->created_unix_nanos) / 1e9);
      last_bytes.Set(static_cast<double>(info->bytes));
    }
  }

  index_kv::Index& index;
  chunkstore::ChunkClient& chunks;
  const placement::ClusterMap& map;
  const Clock& clock;
  Random& random;
  const CheckpointOptions options;
  std::mutex mu;
  std::set<VersionId> thin_made;  // checkpoints this one made on fewer than m + 1 drives
  prometheus::Family<prometheus::Counter>& runs;
  prometheus::Gauge& last_success;
  prometheus::Gauge& last_bytes;
};

IndexCheckpointer::IndexCheckpointer(index_kv::Index& index, chunkstore::ChunkClient& chunks,
                                     const placement::ClusterMap& map, const Clock& clock,
                                     Random& random, prometheus::Registry& registry,
                                     CheckpointOptions options)
    : impl_(std::make_unique<Impl>(index, chunks, map, clock, random, registry,
                                   std::move(options))) {}

IndexCheckpointer::~IndexCheckpointer() { stop(); }

Result<CheckpointInfo> IndexCheckpointer::runOnce() {
  auto info = impl_->run();
  impl_->record(info.has_value(), info ? &*info : nullptr);
  return info;
}

void IndexCheckpointer::start() {
  // Without an interval the thread still runs, for trigger().
  const auto interval = impl_->options.interval.count() > 0
                            ? std::chrono::milliseconds(impl_->options.interval)
                            : std::chrono::milliseconds(std::chrono::hours(24 * 365));
  thread_.start(interval, [this] {
    auto info = runOnce();
    if (!info) {
      log::warn("index checkpoint failed: {}", info.error().toString());
    } else {
      log::info("index checkpoint {}: {} files, {} bytes, {} copies, {} old blobs removed",
                info->id.toHex(), info->files, info->bytes, info->copies, info->removed);
    }
  });
}

void IndexCheckpointer::trigger() { thread_.trigger(); }

void IndexCheckpointer::stop() { thread_.stop(); }

// --- restore ---------------------------------------------------------------------------

namespace {

// Checkpoint `version`'s catalog, read from any copy; `info` gets what the catalog says.
Result<Catalog> readCatalog(chunkstore::ChunkClient& chunks, const SystemBlobs& blobs,
                            const VersionId& version, CheckpointInfo& info) {
  auto where = blobs.find(BlobId{version, 0, 0});
  if (where == blobs.end()) return fail(Status::notFound("incomplete checkpoint"));
  auto text = readAnyCopy(chunks, where->first, where->second);
  if (!text) return fail(text.error());
  auto catalog = decodeCatalog({reinterpret_cast<const char*>(text->data()), text->size()});
  if (!catalog) return fail(catalog.error());
  info = CheckpointInfo{};
  info.id = version;
  info.created_unix_nanos = catalog->created_unix_nanos;
  info.copies = where->second.size();
  return catalog;
}

// Restores checkpoint `version` into `dir` (which exists and is empty).
Result<CheckpointInfo> restoreOne(chunkstore::ChunkClient& chunks, const SystemBlobs& blobs,
                                  const VersionId& version, const fs::path& dir) {
  CheckpointInfo info;
  auto catalog = readCatalog(chunks, blobs, version, info);
  if (!catalog) return fail(catalog.error());
  for (size_t f = 0; f < catalog->files.size(); ++f) {
    const auto& file = catalog->files[f];
    std::ofstream out(dir / file.name, std::ios::binary | std::ios::trunc);
    // Local failures are kInternal, not kIoError: unreadable() would take them for the
    // checkpoint's bytes gone and restore an older one (a full disk fits a smaller one).
    if (!out) return fail(Status::internal("cannot create " + (dir / file.name).string()));
    uint64_t size = 0;
    uint32_t crc = 0;
    for (uint32_t p = 0; p < file.pieces; ++p) {
      BlobId id{version, static_cast<uint32_t>(f + 1), static_cast<uint16_t>(p)};
      auto at = blobs.find(id);
      if (at == blobs.end()) return fail(Status::notFound("piece " + id.toString() + " is lost"));
      auto bytes = readAnyCopy(chunks, id, at->second);
      if (!bytes) return fail(bytes.error());
      crc = ec::crc32c(*bytes, crc);
      size += bytes->size();
      out.write(reinterpret_cast<const char*>(bytes->data()),
                static_cast<std::streamsize>(bytes->size()));
    }
    out.flush();
    if (!out) return fail(Status::internal("writing " + (dir / file.name).string()));
    if (size != file.size || crc != file.crc32c) {
      return fail(Status::corruption(fmt::format("checkpoint file {}: {} bytes, CRC32C {:08x}; "
                                                 "the catalog says {} bytes, {:08x}",
                                                 file.name, size, crc, file.size, file.crc32c)));
    }
    ++info.files;
    info.bytes += size;
  }
  return info;
}

// fsync of every file restored into `dir`, then of `dir`.
Status syncRestored(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file()) GRANARY_RETURN_IF_ERROR(fsyncPath(entry.path()));
  }
  if (ec) return Status::fromErrno(ec.value(), "listing " + dir.string());
  // (The directory's own entry was synced into its parent when it was made.)
  return fsyncPath(dir);
}

}  // namespace

Result<CheckpointInfo> restoreLatestCheckpoint(chunkstore::ChunkClient& chunks,
                                               const placement::ClusterMap& map,
                                               const std::string& dir,
                                               const std::optional<VersionId>& only) {
  const fs::path target(dir);
  std::error_code ec;
  if (fs::exists(target, ec) && !fs::is_empty(target, ec)) {
    return fail(Status::invalidArgument(dir + " is not empty"));
  }
  auto listed = listSystemBlobs(chunks, map, /*strict=*/true);
  if (!listed) return fail(listed.error());
  const SystemBlobs& blobs = *listed;
  std::set<VersionId, std::greater<>> versions;
  for (const auto& [id, where] : blobs) {
    if (id.stripe == 0 && id.fragment == 0) versions.insert(id.version);
  }
  if (only) {
    if (!versions.contains(*only)) {
      return fail(Status::notFound("checkpoint " + only->toHex() +
                                   " is not on the drives, or has no catalog"));
    }
    versions = {*only};
  }
  for (const auto& v : versions) {
    fs::remove_all(target, ec);
    GRANARY_RETURN_IF_ERROR_RESULT(createDirectoriesDurably(target));
    auto info = restoreOne(chunks, blobs, v, target);
    if (info) {
      // The index started on it acknowledges writes at once: its files must be on disk.
      Status synced = syncRestored(target);
      if (synced.isOk()) return info;
      fs::remove_all(target, ec);
      return fail(synced);
    }
    // Only a checkpoint that is not on the drives whole, or does not read back right, is
    // passed over: one a drive failed to serve now (a timeout, a server down) may be the
    // newest and readable, and an older one would drop what was acknowledged since.
    const Status& why = info.error();
    if (!unreadable(why)) {
      fs::remove_all(target, ec);
      return fail(Status(why.code(),
                         "checkpoint " + v.toHex() + " could not be read (" + why.message() +
                             "); not falling back to an older one: retry, or name one with "
                             "--checkpoint",
                         why.retryable()));
    }
    log::warn("checkpoint {} cannot be restored: {}", v.toHex(), why.toString());
  }
  fs::remove_all(target, ec);
  if (only) {
    return fail(Status::notFound("checkpoint " + only->toHex() + " does not read back whole"));
  }
  return fail(Status::notFound("no complete index checkpoint on the drives"));
}

Result<std::vector<CheckpointInfo>> listCheckpoints(chunkstore::ChunkClient& chunks,
                                                    const placement::ClusterMap& map) {
  auto listed = listSystemBlobs(chunks, map, /*strict=*/true);
  if (!listed) return fail(listed.error());
  std::vector<CheckpointInfo> out;
  for (const auto& [id, where] : *listed) {
    if (id.stripe != 0 || id.fragment != 0) continue;
    CheckpointInfo info;
    auto catalog = readCatalog(chunks, *listed, id.version, info);
    if (!catalog) {
      // A catalog that may read later (a drive that timed out) fails the listing: left
      // out, the checkpoint would not be the newest listed, and an operator who took the
      // first line would restore an older one.
      if (!unreadable(catalog.error())) return fail(catalog.error());
      log::warn("checkpoint {}: catalog unreadable: {}", id.version.toHex(),
                catalog.error().toString());
      continue;
    }
    for (const CatalogFile& file : catalog->files) {
      ++info.files;
      info.bytes += file.size;
    }
    out.push_back(info);
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return b.id < a.id; });
  return out;
}

// --- rebuild ---------------------------------------------------------------------------

namespace {

// Where the fragments of every object version are, from the drives' blob lists.
struct FragmentCopies {
  uint64_t length = 0;             // payload bytes (the stripe's fragment length)
  std::vector<std::string> drives;  // every drive holding it
};
using StripeFragments = std::map<uint16_t, FragmentCopies>;
using VersionStripes = std::map<uint32_t, StripeFragments>;

class Rebuilder {
 public:
  Rebuilder(index_kv::Index& index, chunkstore::ChunkClient& chunks,
            const placement::ClusterMap& map, RebuildOptions options)
      : index_(index), chunks_(chunks), map_(map), options_(std::move(options)) {}

  Result<RebuildStats> run() {
    GRANARY_RETURN_IF_ERROR_RESULT(scan());
    GRANARY_RETURN_IF_ERROR_RESULT(checkManifests());
    for (const auto& [version, stripes] : versions_) {
      if (known_.contains(version)) continue;
      rebuildVersion(version, stripes);
    }
    return stats_;
  }

 private:
  Status scan() {
    for (const auto& drive : map_.drives) {
      ++stats_.drives;
      std::optional<BlobId> after;
      for (;;) {
        auto page = chunks_.list(drive.id, after, kListPage);
        if (!page) {
          return Status::unavailable(fmt::format(
              "drive {} does not answer ({}): a rebuild needs every drive of the map",
              drive.id, page.error().toString()));
        }
        bool system = false;
        for (const auto& b : *page) {
          if (b.id.version.isSystem()) {
            system = true;  // checkpoints sort last: nothing of objects' after them
            break;
          }
          ++stats_.blobs_scanned;
          auto& copies = versions_[b.id.version][b.id.stripe][b.id.fragment];
          copies.length = b.length;
          copies.drives.push_back(drive.id);
        }
        if (system || page->size() < kListPage) break;
        after = page->back().id;
      }
    }
    return Status::ok();
  }

  // The fragments of `stripe` on the drives, whole (of the stripe's fragment length).
  const FragmentCopies* fragment(const index_kv::StripeLayout& stripe, size_t j) const {
    const auto* copies =
        find(BlobId{stripe.blob_version, stripe.blob_stripe, static_cast<uint16_t>(j)});
    return copies && copies->length == stripe.fragment_len ? copies : nullptr;
  }
  int present(const index_kv::StripeLayout& stripe) const {
    int n = 0;
    for (size_t j = 0; j < stripe.drives.size(); ++j) n += fragment(stripe, j) != nullptr;
    return n;
  }

  const FragmentCopies* find(const BlobId& id) const {
    auto v = versions_.find(id.version);
    if (v == versions_.end()) return nullptr;
    auto s = v->second.find(id.stripe);
    if (s == v->second.end()) return nullptr;
    auto f = s->second.find(id.fragment);
    return f == s->second.end() ? nullptr : &f->second;
  }

  // Every manifest of the index: point moved fragments at their drives, remove objects
  // that lost a stripe.
  Status checkManifests() {
    auto buckets = index_.listBuckets();
    if (!buckets) return buckets.error();
    for (const auto& bucket : *buckets) {
      index_kv::ListRequest req;
      for (;;) {
        auto page = index_.listObjects(bucket.name, req);
        if (!page) return page.error();
        for (const auto& obj : page->objects) checkObject(bucket.name, obj.key);
        if (!page->truncated) break;
        req.start_after = page->next_start_after;
      }
      GRANARY_RETURN_IF_ERROR(checkUploads(bucket.name));
    }
    return Status::ok();
  }

  // Every upload in progress of `bucket`: one whose part lost a stripe (a part replaced
  // after the checkpoint: the restored row names the replaced blobs, which GC took) is
  // aborted, so that a Complete answers NoSuchUpload rather than 200 for an object that
  // cannot be read. A part whose fragments a repair moved after the checkpoint is pointed
  // at where they are, as an object is.
  Status checkUploads(const std::string& bucket) {
    index_kv::ListUploadsRequest req;
    for (;;) {
      auto page = index_.listUploads(bucket, req);
      if (!page) return page.error();
      for (const auto& up : page->uploads) checkUpload(bucket, up);
      if (!page->truncated || page->uploads.empty()) break;
      req.key_marker = page->uploads.back().key;
      req.upload_id_marker = page->uploads.back().upload_id;
    }
    return Status::ok();
  }

  void checkUpload(const std::string& bucket, const index_kv::MultipartUpload& up) {
    ++stats_.uploads_checked;
    bool lost = false;
    std::vector<std::pair<index_kv::PartInfo, index_kv::PartInfo>> moved;  // (read, updated)
    uint32_t after = 0;
    for (;;) {
      auto parts = index_.listParts(bucket, up.key, up.upload_id, after, kListPage);
      if (!parts) {
        if (!parts.error().isNotFound()) ++stats_.errors;
        return;
      }
      for (const auto& part : *parts) {
        const int k = part.ec.k > 0 ? part.ec.k : map_.ec.k;
        for (const auto& stripe : part.stripes) lost = lost || present(stripe) < k;
        index_kv::PartInfo updated = part;
        if (pointAtCopies(updated.drives, updated.stripes)) moved.emplace_back(part, updated);
      }
      if (parts->size() < kListPage) break;
      after = parts->back().part_number;
    }
    if (!lost) {
      for (const auto& [part, updated] : moved) {
        Status st = index_.relocatePartFragments(bucket, up.key, up.upload_id, part, updated);
        st.isOk() ? ++stats_.parts_relocated : ++stats_.errors;
      }
      return;
    }
    Status st = index_.abortUpload(bucket, up.key, up.upload_id);
    if (st.isOk() || st.isNotFound()) {
      ++stats_.uploads_aborted;
      log::warn("rebuild: upload {} of {}/{} has a part that lost a stripe (replaced after "
                "the checkpoint?): aborted", up.upload_id, bucket, up.key);
    } else {
      ++stats_.errors;
    }
  }

  void checkObject(const std::string& bucket, const std::string& key) {
    auto m = index_.getObject(bucket, key);
    if (!m) {
      if (!m.error().isNotFound()) ++stats_.errors;
      return;
    }
    ++stats_.objects_checked;
    index_kv::Manifest updated = *m;
    const bool moved = pointAtCopies(updated.drives, updated.stripes);
    bool lost = false;
    for (const auto& stripe : updated.stripes) {
      known_.insert(stripe.blob_version);
      if (present(stripe) < updated.ec.k) lost = true;
    }
    if (lost) {
      auto st = index_.deleteObject(bucket, key, index_kv::Precondition::mustMatch(m->version));
      if (st) {
        ++stats_.objects_dropped;
        log::warn("rebuild: {}/{} lost a stripe (deleted after the checkpoint?): removed",
                  bucket, key);
      } else {
        ++stats_.errors;
      }
    } else if (moved) {
      Status st = index_.relocateFragments(bucket, key, *m, updated);
      st.isOk() ? ++stats_.objects_relocated : ++stats_.errors;
    }
  }

  // Points each fragment of `stripes` found on the drives, but not on the drive recorded
  // for it (a repair or drain moved it), at a drive that holds it; true if one moved.
  bool pointAtCopies(std::vector<std::string>& drives,
                     std::vector<index_kv::StripeLayout>& stripes) const {
    bool moved = false;
    for (auto& stripe : stripes) {
      for (size_t j = 0; j < stripe.drives.size(); ++j) {
        const auto* copies = fragment(stripe, j);
        if (!copies) continue;
        const std::string& recorded = drives[stripe.drives[j]];
        if (std::find(copies->drives.begin(), copies->drives.end(), recorded) !=
            copies->drives.end()) {
          continue;
        }
        stripe.drives[j] = driveIndex(drives, copies->drives.front());
        moved = true;
      }
    }
    return moved;
  }

  static uint16_t driveIndex(std::vector<std::string>& drives, const std::string& drive) {
    auto it = std::find(drives.begin(), drives.end(), drive);
    if (it != drives.end()) return static_cast<uint16_t>(it - drives.begin());
    drives.push_back(drive);
    return static_cast<uint16_t>(drives.size() - 1);
  }

  // The descriptor of a stripe, from the first fragment copy that describes itself; with
  // `every`, every copy is asked and their flags OR-ed (a fragment a repair wrote before
  // repairs kept flags has none). `unsure` is set when a copy did not answer now (a
  // retryable error: unavailable, timed out) where its answer counts: with `every`, or
  // when no copy answered. A copy gone or corrupt is lost, as a missing one.
  // The version is then an error of the rebuild, not incomplete: an error keeps the new
  // index's guard against the orphan sweep, "incomplete" would let it take the fragments.
  std::optional<chunkstore::BlobDescriptor> describe(const VersionId& version, uint32_t stripe,
                                                     const StripeFragments& fragments,
                                                     bool every, bool& unsure) {
    std::optional<chunkstore::BlobDescriptor> out;
    bool failed = false;
    unsure = false;
    for (const auto& [j, copies] : fragments) {
      for (const auto& drive : copies.drives) {
        auto d = chunks_.describe(drive, BlobId{version, stripe, j});
        if (!d) {
          log::warn("rebuild: describing {} on {}: {}", BlobId{version, stripe, j}.toString(),
                    drive, d.error().toString());
          if (d.error().retryable()) failed = true;
          continue;
        }
        if (out) {
          out->flags |= d->flags;
        } else {
          out = std::move(*d);
        }
        if (!every) return out;
      }
    }
    unsure = failed;  // with `every`, or (without) no copy answered
    return out;
  }

  void rebuildVersion(const VersionId& version, const VersionStripes& stripes) {
    auto referenced = index_.isBlobVersionReferenced(version);
    if (!referenced) {
      ++stats_.errors;
      return;
    }
    if (*referenced) return;  // an upload's part, or waiting on the GC queue
    const uint32_t first_number = stripes.begin()->first;
    bool unsure = false;
    auto first = describe(version, first_number, stripes.begin()->second, /*every=*/true, unsure);
    if (!first || unsure) {
      ++stats_.errors;
      return;
    }
    if (first->flags & chunkstore::kBlobFlagSystem) return;
    if (first->flags & chunkstore::kBlobFlagPart) {
      ++stats_.part_versions_skipped;
      return;
    }
    const int64_t created = version.createdUnixNanos();
    if (committedBeforeCheckpoint(version) && !beforeCheckpointGuard(version)) {
      ++stats_.versions_stale;  // an orphan of a write that failed before the checkpoint
      return;
    }
    index_kv::Manifest m;
    m.version = version;
    m.ec = first->ec;
    m.mtime_unix_nanos = created;
    m.content_type = "binary/octet-stream";
    auto code = ec::ErasureCode::create(m.ec);
    // Stripes 0..n-1, all there, the last one (only) marked, each with k fragments of one
    // length that holds the stripe's bytes.
    bool complete = code.has_value() && first_number == 0;
    uint32_t expect = 0;
    for (auto it = stripes.begin(); complete && it != stripes.end(); ++it) {
      const auto& [number, fragments] = *it;
      const bool final_listed = std::next(it) == stripes.end();
      auto desc = number == first_number
                      ? first
                      : describe(version, number, fragments, final_listed, unsure);
      if (unsure) {
        ++stats_.errors;
        return;
      }
      if (!desc || number != expect++ || desc->ec != m.ec || desc->bucket != first->bucket ||
          desc->key != first->key || fragments.size() < static_cast<size_t>(m.ec.k)) {
        complete = false;
        break;
      }
      if (((desc->flags & chunkstore::kBlobFlagLastStripe) != 0) != final_listed) {
        complete = false;
        break;
      }
      const uint64_t fl = fragments.begin()->second.length;
      bool shape_ok = fl > 0 && desc->stripe_data_len <= uint64_t(m.ec.k) * fl &&
                      desc->stripe_data_len > 0;
      for (const auto& [j, copies] : fragments) {
        if (j >= m.ec.total() || copies.length != fl) shape_ok = false;
      }
      if (!shape_ok) {
        complete = false;
        break;
      }
      index_kv::StripeLayout layout;
      layout.blob_version = version;
      layout.blob_stripe = number;
      layout.data_len = desc->stripe_data_len;
      layout.fragment_len = static_cast<uint32_t>(fl);
      for (int j = 0; j < m.ec.total(); ++j) {
        auto f = fragments.find(static_cast<uint16_t>(j));
        // A lost fragment keeps a place on a drive of the stripe; repair rebuilds it.
        const std::string& drive =
            f != fragments.end() ? f->second.drives.front() : fragments.begin()->second.drives.front();
        layout.drives.push_back(driveIndex(m.drives, drive));
      }
      m.size += layout.data_len;
      m.stripes.push_back(std::move(layout));
    }
    if (!complete) {
      ++stats_.versions_incomplete;
      log::warn("rebuild: version {} of {}/{} is incomplete on the drives: not rebuilt",
                version.toHex(), first->bucket, first->key);
      return;
    }
    auto etag = md5Of(m, stripes, **code);
    if (!etag) {
      ++stats_.errors;
      log::warn("rebuild: reading {}/{} ({}): {}", first->bucket, first->key, version.toHex(),
                etag.error().toString());
      return;
    }
    m.etag = *etag;
    commit(first->bucket, first->key, m);
  }

  // The MD5 of the object's bytes, decoding stripes whose data fragments fail.
  Result<std::string> md5Of(const index_kv::Manifest& m, const VersionStripes& stripes,
                            const ec::ErasureCode& code) {
    Digest md5(Digest::Kind::kMd5);
    const int n = m.ec.total();
    for (const auto& layout : m.stripes) {
      const auto& fragments = stripes.at(layout.blob_stripe);
      const size_t fl = layout.fragment_len;
      std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(fl));
      std::vector<uint8_t*> ptrs(n);
      bool present[ec::kMaxFragments] = {};
      int have = 0;
      auto load = [&](int j) {
        auto f = fragments.find(static_cast<uint16_t>(j));
        if (f == fragments.end()) return;
        for (const auto& drive : f->second.drives) {
          BlobId id{m.version, layout.blob_stripe, static_cast<uint16_t>(j)};
          if (chunks_.read(drive, id, 0, bufs[j]).isOk()) {
            present[j] = true;
            ++have;
            return;
          }
        }
      };
      for (int j = 0; j < m.ec.k; ++j) load(j);
      for (int j = m.ec.k; j < n && have < m.ec.k; ++j) load(j);
      for (int j = 0; j < n; ++j) ptrs[j] = bufs[j].data();
      bool all_data = std::all_of(present, present + m.ec.k, [](bool p) { return p; });
      if (!all_data) {
        GRANARY_RETURN_IF_ERROR_RESULT(
            code.reconstruct(fl, ptrs, std::span<const bool>(present, n)));
      }
      uint64_t left = layout.data_len;
      for (int j = 0; j < m.ec.k && left > 0; ++j) {
        const uint64_t take = std::min<uint64_t>(left, fl);
        md5.update(std::span<const uint8_t>(bufs[j].data(), take));
        left -= take;
      }
    }
    return toHex(md5.finish());
  }

  // A version too old to have been committed after the restored checkpoint was made
  // (RebuildOptions::checkpoint_unix_nanos).
  bool committedBeforeCheckpoint(const VersionId& version) const {
    const int64_t oldest_committable =
        options_.checkpoint_unix_nanos -
        std::chrono::duration_cast<std::chrono::nanoseconds>(options_.max_put +
                                                             options_.clock_margin)
            .count();
    return options_.checkpoint_unix_nanos > 0 &&
           version.createdUnixNanos() < oldest_committable;
  }

  // A version the restored checkpoint's index may never have known (RebuildOptions::
  // checkpoint_guard_unix_nanos).
  bool beforeCheckpointGuard(const VersionId& version) const {
    return version.createdUnixNanos() < options_.checkpoint_guard_unix_nanos;
  }

  void commit(const std::string& bucket, const std::string& key, const index_kv::Manifest& m) {
    auto b = index_.getBucket(bucket);
    if (!b && b.error().isNotFound()) {
      index_kv::BucketInfo info;
      info.name = bucket;
      info.owner = options_.owner;
      info.created_unix_nanos = m.mtime_unix_nanos;
      Status st = index_.createBucket(info);
      if (st.isOk()) {
        ++stats_.buckets_created;
        log::info("rebuild: created bucket {} (owner {})", bucket, options_.owner);
      } else if (st.code() != Status::Code::kAlreadyExists) {
        ++stats_.errors;
        return;
      }
    } else if (!b) {
      ++stats_.errors;
      return;
    }
    auto current = index_.getObject(bucket, key);
    index_kv::Precondition pre = index_kv::Precondition::mustNotExist();
    if (current) {
      // A manifest of the checkpoint was committed before it, so before any version found
      // on the drives was (if that one was at all); one this rebuild committed was created
      // before or after this one: the later start wins.
      const bool from_checkpoint = !rebuilt_.contains(current->version);
      // A version the checkpoint's index may never have known (beforeCheckpointGuard: one
      // a lost predecessor index committed) is no later than the checkpoint's manifest just
      // for being found: there too, the later start wins.
      const bool later_start_wins = !from_checkpoint || beforeCheckpointGuard(m.version);
      if (later_start_wins &&
          current->version.createdUnixNanos() >= m.version.createdUnixNanos()) {
        ++stats_.versions_superseded;
        return;
      }
      log::info("rebuild: {}/{}: version {} replaces {}{}", bucket, key, m.version.toHex(),
                current->version.toHex(), from_checkpoint ? " (of the checkpoint)" : "");
      pre = index_kv::Precondition::mustMatch(current->version);
    } else if (!current.error().isNotFound()) {
      ++stats_.errors;
      return;
    }
    auto put = index_.putObject(bucket, key, m, pre);
    if (!put && put.error().code() == Status::Code::kTimeout) {
      // The orphan sweep marked the version dead (a local index has no other timeout): a
      // PUT that outlived the orphan grace, whose fragments a sweep had begun to take.
      ++stats_.versions_stale;
      log::info("rebuild: {}/{}: version {} was swept as an orphan", bucket, key,
                m.version.toHex());
      return;
    }
    if (!put) {
      ++stats_.errors;
      log::warn("rebuild: committing {}/{}: {}", bucket, key, put.error().toString());
      return;
    }
    ++stats_.objects_rebuilt;
    rebuilt_.insert(m.version);
    log::info("rebuild: {}/{} ({} bytes, version {})", bucket, key, m.size, m.version.toHex());
  }

  index_kv::Index& index_;
  chunkstore::ChunkClient& chunks_;
  const placement::ClusterMap& map_;
  const RebuildOptions options_;
  std::map<VersionId, VersionStripes> versions_;
  std::set<VersionId> known_;  // blob versions the index's manifests use
  std::set<VersionId> rebuilt_;  // versions this rebuild committed
  RebuildStats stats_;
};

}  // namespace

Result<RebuildStats> rebuildIndex(index_kv::Index& index, chunkstore::ChunkClient& chunks,
                                  const placement::ClusterMap& map, const RebuildOptions& options) {
  return Rebuilder(index, chunks, map, options).run();
}

uint16_t stripeFlags(const index_kv::Manifest& m, size_t i) {
  const auto& s = m.stripes.at(i);
  uint16_t flags = s.blob_version != m.version ? chunkstore::kBlobFlagPart : 0;
  if (i + 1 == m.stripes.size() || m.stripes[i + 1].blob_version != s.blob_version) {
    flags |= chunkstore::kBlobFlagLastStripe;
  }
  return flags;
}

}  // namespace granary::gateway

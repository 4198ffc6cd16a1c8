// Surviving the loss of the index (docs/operations.md, "Index loss").
//
// IndexCheckpointer, run by `granary index --cluster ...`: every `interval` it makes a
// consistent RocksDB checkpoint of the index (Index::checkpoint), copies each of its files
// onto m + 1 drives of distinct failure domains as system blobs, and then keeps only the
// newest `keep` complete checkpoints on the drives.
//
// On the drives a checkpoint is a system version C (VersionId::isSystem; its bytes 4..11
// are the creation time, so checkpoints sort by age): blob {C, 0, 0} is the catalog (JSON:
// file names, sizes, CRC32Cs), blobs {C, f, p} for f >= 1 are the pieces of file f. The
// catalog is written last, so a checkpoint without one is incomplete and never restored.
//
// restoreLatestCheckpoint (`granary admin rebuild-index`) writes the newest complete
// checkpoint that reads back whole (every file's size and CRC32C check) into a directory.
//
// rebuildIndex then brings an index (restored, or empty) up to date with the drives:
//  - a committed manifest whose fragments moved (repair) is pointed at where they are; one
//    with a stripe of fewer than k fragments left (deleted after the checkpoint, its blobs
//    collected) is removed;
//  - every object version found on the drives that the index does not know (written after
//    the checkpoint) is committed from its fragment headers (bucket, key, EC profile,
//    stripe lengths, the last-stripe mark) if all its stripes are there and decodable and
//    it is newer than the key's current version; its ETag is the MD5 of its bytes, read
//    back. Buckets named by such objects are created, owned by `owner`.
// What a rebuild cannot recover is listed in RebuildStats and docs/operations.md: inline
// objects, multipart completions, metadata, users and record indexes written after the
// checkpoint; and an object deleted after it whose blobs are not collected yet reappears.
//
// Thread safety: IndexCheckpointer::runOnce may be called from any thread, one run at a
// time; the free functions are blocking and single-threaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "granary/common/ids.h"
#include "granary/common/periodic_thread.h"
#include "granary/common/status.h"

namespace prometheus {
class Registry;
}
namespace granary {
class Clock;
class Random;
}  // namespace granary
namespace granary::chunkstore {
class ChunkClient;
}
namespace granary::index_kv {
class Index;
struct Manifest;
}
namespace granary::placement {
struct ClusterMap;
}

namespace granary::gateway {

struct CheckpointOptions {
  std::string work_dir;                 // where the local checkpoint is made (index's fs)
  std::chrono::seconds interval{900};   // between checkpoints; 0: only runOnce
  size_t keep = 3;                      // complete checkpoints kept on the drives
  uint64_t piece_bytes = 16ull << 20;   // files are cut into blobs of this size
};

struct CheckpointInfo {
  VersionId id;
  int64_t created_unix_nanos = 0;
  uint64_t files = 0;
  uint64_t bytes = 0;
  size_t copies = 0;     // drives holding every piece and the catalog
  size_t removed = 0;    // older checkpoints' blobs removed by this run
};

class IndexCheckpointer {
 public:
  // Registers granary_index_checkpoint_* metrics. Everything passed must outlive it.
  IndexCheckpointer(index_kv::Index& index, chunkstore::ChunkClient& chunks,
                    const placement::ClusterMap& map, const Clock& clock, Random& random,
                    prometheus::Registry& registry, CheckpointOptions options);
  ~IndexCheckpointer();
  // One checkpoint: made, copied, older ones pruned. kUnavailable if no drive took a
  // complete copy.
  Result<CheckpointInfo> runOnce();
  void start();    // a checkpoint every options.interval (if > 0), and on trigger()
  void trigger();  // a checkpoint now, on the background thread (after start())
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PeriodicThread thread_;
};

// Finds the newest complete checkpoint on the map's drives and writes its files into
// `dir` (created; must not exist or be empty). kNotFound if there is none that reads back;
// kUnavailable if a drive does not answer (the newest checkpoint might be there). A
// checkpoint is passed over for an older one only when its bytes are gone (a piece or
// catalog missing, corrupt, or a medium error on every copy): a read a drive failed to
// serve now (a timeout, a server down, a local write error) fails the restore instead.
// `only`: that checkpoint and no other (kNotFound if it is not on the drives, is
// incomplete, or does not read back whole): an operator's choice when the newest is not
// the one wanted (one made by an index started empty after a loss).
Result<CheckpointInfo> restoreLatestCheckpoint(chunkstore::ChunkClient& chunks,
                                               const placement::ClusterMap& map,
                                               const std::string& dir,
                                               const std::optional<VersionId>& only = {});

// The checkpoints on the map's drives that have a catalog, newest first, from their
// catalogs alone (their files are not read: a listed one may still not read back whole).
// `removed` is 0. kUnavailable if a drive does not answer.
Result<std::vector<CheckpointInfo>> listCheckpoints(chunkstore::ChunkClient& chunks,
                                                    const placement::ClusterMap& map);

struct RebuildStats {
  uint64_t drives = 0;
  uint64_t blobs_scanned = 0;
  uint64_t objects_checked = 0;        // manifests already in the index
  uint64_t objects_relocated = 0;      // their fragments found elsewhere: manifest updated
  uint64_t objects_dropped = 0;        // a stripe with fewer than k fragments left: removed
  uint64_t uploads_checked = 0;        // multipart uploads in progress in the index
  uint64_t uploads_aborted = 0;        // a part's stripe with fewer than k fragments left
  uint64_t parts_relocated = 0;        // their fragments found elsewhere: part row updated
  uint64_t objects_rebuilt = 0;        // committed from fragment headers
  uint64_t versions_superseded = 0;    // found, but the key has a newer version
  uint64_t versions_stale = 0;         // too old to have been committed after the checkpoint
  uint64_t versions_incomplete = 0;    // a stripe, the last-stripe mark or k fragments missing
  uint64_t part_versions_skipped = 0;  // multipart parts: cannot be rebuilt
  uint64_t buckets_created = 0;
  uint64_t errors = 0;                 // reads or commits that failed (logged)
};

struct RebuildOptions {
  std::string owner;                  // owns the buckets the rebuild creates (root's key)
  // When the restored checkpoint was made (0: the index started empty). A version the
  // index does not reference, created before checkpoint - max_put, cannot have been
  // committed after the checkpoint (a PUT that old fails: the orphan grace): not rebuilt.
  int64_t checkpoint_unix_nanos = 0;
  std::chrono::seconds max_put{1800};
  // Taken off that cutoff as well: versions are stamped by the gateways' clocks, the
  // checkpoint by the index host's (the internal API accepts 15 minutes of skew), and a
  // commit may land a moment after its gateway last checked the PUT's age. A PUT
  // acknowledged after the checkpoint must never count as stale; the cost is that failed
  // PUTs of the margin's minutes before the cutoff come back.
  std::chrono::seconds clock_margin{16 * 60};
  // The restored checkpoint's own guard (Index::createdUnixNanos of the index it was made
  // from; 0: that index knew every blob). Non-zero when that index started empty (a new
  // cluster's, or one started in place of a lost index) or was a rebuild that finished
  // with errors: it may never have known the versions created before its guard. Such a
  // version is not stale by the cutoff above, and against the checkpoint's manifest of its
  // key the later start wins, as among versions found (that index may have committed its
  // manifest after the version was, or inherited an older one from a restore). A new
  // cluster's failed PUTs of its first minutes come back.
  int64_t checkpoint_guard_unix_nanos = 0;
};

// Which versions win: a version found on the drives was committed, if at all, after the
// checkpoint, so it replaces the checkpoint's manifest of its key; among versions found,
// the one created last wins. Needs every drive of the map to answer its blob list
// (kUnavailable otherwise: a fragment on a silent drive would look lost).
Result<RebuildStats> rebuildIndex(index_kv::Index& index, chunkstore::ChunkClient& chunks,
                                  const placement::ClusterMap& map, const RebuildOptions& options);

// The header flags ObjectWriter gave the fragments of stripe `i` of `m` (repair and
// rebalance write them again): kBlobFlagPart when the stripe is another blob version's
// than the manifest's (a multipart completion's parts), kBlobFlagLastStripe when it is
// the last stripe of its blob version in the manifest.
uint16_t stripeFlags(const index_kv::Manifest& m, size_t i);

}  // namespace granary::gateway

// Private helpers of the internal chunk API (docs/internal-api.md), shared by ChunkServer
// and RemoteChunkClient: paths, blob descriptor headers and the JSON bodies. Signing and
// errors are the shared rpc/wire.h's (brought into this namespace). No Beast and no I/O.
//
// Change docs/internal-api.md together with this file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "granary/chunkstore/chunk_store.h"
#include "granary/chunkstore/remote_chunk_client.h"
#include "granary/common/ids.h"
#include "granary/common/status.h"
#include "granary/rpc/wire.h"

namespace granary::chunkstore::internal {

using namespace granary::rpc;  // the shared wire format: signing, errors, parsing

// Request headers of a blob PUT (names are lower case).
inline constexpr std::string_view kEcHeader = "x-granary-ec";
inline constexpr std::string_view kStripeLenHeader = "x-granary-stripe-len";
inline constexpr std::string_view kBucketHeader = "x-granary-bucket";
inline constexpr std::string_view kKeyHeader = "x-granary-key";
inline constexpr std::string_view kFlagsHeader = "x-granary-flags";  // optional, default 0
// Response headers.
inline constexpr std::string_view kBlobLengthHeader = "x-granary-blob-length";
inline constexpr std::string_view kCreatedHeader = "x-granary-created-ns";

// A blob id on the wire: the 44 lower-case hex digits of BlobId::encode().
std::string blobIdHex(const BlobId& id);
Result<BlobId> parseBlobIdHex(std::string_view hex);

// Paths (already encoded, ready for a request target).
std::string drivesPath();
std::string healthPath();
std::string statsPath(std::string_view drive);
std::string blobListPath(std::string_view drive);
std::string blobPath(std::string_view drive, const BlobId& id);

struct Route {
  enum class Kind { kHealth, kDrives, kStats, kBlobList, kBlob };
  Kind kind = Kind::kHealth;
  std::string drive;  // decoded
  BlobId id;          // kBlob only
};
// Parses the path part of a request target; an unknown path is kInvalidArgument.
Result<Route> parseRoute(std::string_view path);
// Descriptor fields (all but the id, which is in the path) as request headers (and as the
// answer headers of a HEAD with ?header=1).
Headers descriptorHeaders(const BlobDescriptor& desc);
Result<BlobDescriptor> parseDescriptor(const BlobId& id, const Headers& headers);

// JSON bodies.
std::string encodeBlobList(const std::vector<BlobInfo>& blobs);
Result<std::vector<BlobInfo>> decodeBlobList(std::string_view json);
std::string encodeStats(const DriveStats& stats);
Result<DriveStats> decodeStats(std::string_view json);
std::string encodeDrives(const std::vector<DriveState>& drives);
Result<std::vector<DriveState>> decodeDrives(std::string_view json);


}  // namespace granary::chunkstore::internal

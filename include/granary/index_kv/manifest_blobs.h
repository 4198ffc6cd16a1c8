// The fragments a manifest (or a part) references, for the index (GC queue entries, references) and
// for the gateway's reclaimer and repairer (which of their blobs a manifest still uses).
#pragma once

#include <vector>

#include "granary/index_kv/index.h"

namespace granary::index_kv {

// Every fragment of every stripe: {drives[stripe.drives[i]], {blob_version, blob_stripe,
// i}} for i in 0..k+m-1. Entries with out-of-range drive indices are skipped.
std::vector<BlobRef> manifestBlobs(const Manifest& manifest);
// The same for a part of a multipart upload.
std::vector<BlobRef> partBlobs(const PartInfo& part);

}  // namespace granary::index_kv

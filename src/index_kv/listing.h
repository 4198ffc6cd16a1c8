// ListObjects over the objects column family with prefix, delimiter and start_after,
// seeking past whole common prefixes (docs/index-format.md, "Listing").
#pragma once

#include <rocksdb/db.h>

#include <string_view>

#include "granary/common/status.h"
#include "granary/index_kv/index.h"

namespace granary::index_kv {

// Lists `bucket` (which must not contain '/') as of one implicit snapshot.
Result<ListResult> listObjectsIn(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* objects,
                                 std::string_view bucket, const ListRequest& req);

}  // namespace granary::index_kv

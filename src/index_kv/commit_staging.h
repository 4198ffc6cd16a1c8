// Helpers for staging writes into a BatchBuilder's WriteBatch (commit_apply*.cc).
#pragma once

#include <rocksdb/status.h>

#include "granary/common/status.h"
#include "index_kv/column_families.h"

namespace granary::index_kv {

// A RocksDB write into the batch failing means the batch is unusable (e.g. too large).
inline Status staged(const rocksdb::Status& s) {
  return s.ok() ? Status::ok() : fromRocks(s, "index: staging a write");
}

}  // namespace granary::index_kv

#define GRANARY_STAGE(expr) GRANARY_RETURN_IF_ERROR(::granary::index_kv::staged(expr))
// The same, in functions returning Result<T>.
#define GRANARY_STAGE_OR_FAIL(expr)                                 \
  do {                                                              \
    ::granary::Status _staged = ::granary::index_kv::staged(expr);  \
    if (!_staged.isOk()) return fail(_staged);                      \
  } while (0)

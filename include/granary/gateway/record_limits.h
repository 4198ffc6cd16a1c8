// The record API's request limits (docs/record-index.md), shared by the gateway that
// enforces them and the clients that split their requests to fit.
#pragma once

#include <cstddef>

namespace granary::gateway {

// POST /b/k?records-batch: at most this many record keys, in a body of at most this size.
inline constexpr size_t kMaxBatchGetKeys = 10000;
inline constexpr size_t kMaxBatchGetBody = 8u << 20;

}  // namespace granary::gateway

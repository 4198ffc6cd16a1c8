// HTTP Range header for GET (RFC 9110 section 14, as S3 applies it): one range only.
#pragma once

#include <cstdint>
#include <string_view>

namespace granary::gateway {

struct ByteRange {
  uint64_t first = 0;
  uint64_t length = 0;  // bytes [first, first + length)
};

struct RangeResult {
  enum class Kind {
    kNone,           // no header, or a header S3 ignores (malformed, multiple ranges):
                     // serve the whole object with 200
    kSatisfiable,    // 206 with Content-Range
    kUnsatisfiable,  // 416 InvalidRange
  } kind = Kind::kNone;
  ByteRange range;
};

// `header` is the Range header value ("" when absent): "bytes=a-b", "bytes=a-", "bytes=-n".
RangeResult parseRange(std::string_view header, uint64_t object_size);

}  // namespace granary::gateway

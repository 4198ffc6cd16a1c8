// Local ends of record transfers for `granary records`: where record bytes are written, and
// the reader of the records-batch framing (docs/record-index.md, "Batch get").
//
// No network here: FrameReader is fed whatever the transport delivers, split anywhere, so
// it can be tested on byte strings. Not thread safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "granary/common/status.h"

namespace granary::cli {

// Where record bytes go: standard output, or a file created on first write (or by
// finish(), for an empty record). A regular file (or a new one) is written under a
// temporary name beside it and renamed over it by finish(), so a failed transfer leaves
// what was there before; discard() (or destruction without finish()) removes the
// temporary file. Anything else (/dev/null, a pipe) is written in place.
class Output {
 public:
  explicit Output(std::string path);  // empty: standard output
  ~Output();
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  Status write(std::string_view bytes);
  // Flushes, creates the file if nothing was written, and closes it.
  Status finish();
  // Removes the file, if one was created; later finish() calls do nothing.
  void discard();

 private:
  Status open();

  std::string path_;
  std::string writing_;  // the file written: path_, or the temporary name beside it
  FILE* file_ = nullptr;
  bool discarded_ = false;
};

// Reads the records-batch stream: per record a line of JSON with a `size`, then exactly
// `size` bytes of record data; then an {"end": true, ...} line. Errors (a header that is not
// a JSON object or has no size, a line over 1 MiB, bytes after the end line) are
// kCorruption and sticky in effect: the caller abandons the stream.
class FrameReader {
 public:
  // The parsed header and its line as received (without the newline).
  using HeaderFn = std::function<Status(const nlohmann::json&, std::string_view)>;
  // Record bytes of the last header, in pieces.
  using DataFn = std::function<Status(std::string_view)>;
  FrameReader(HeaderFn on_header, DataFn on_data);

  // Consumes `in`, calling the callbacks; their errors are returned.
  Status feed(std::string_view in);
  // Whether the end line was read: a stream that stops before it was cut.
  bool ended() const { return ended_; }
  // Whether the last header's record data is still incomplete.
  bool midRecord() const { return remaining_ > 0; }

 private:
  HeaderFn on_header_;
  DataFn on_data_;
  std::string line_;
  uint64_t remaining_ = 0;
  bool ended_ = false;
};

}  // namespace granary::cli

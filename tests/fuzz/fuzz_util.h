// Helpers shared by the fuzz targets: reading structured values out of a fuzz input, and
// failing loudly, with the input, when a property does not hold.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace granary::fuzz {

// Prints which property failed and (the start of) the input, escaped, then aborts: the
// replay driver and libFuzzer both report an abort as a failure of that input.
[[noreturn]] inline void fail(const char* target, const char* what, std::string_view input) {
  static constexpr char kHex[] = "0123456789abcdef";
  constexpr size_t kShown = 512;
  std::string shown;
  for (char ch : input.substr(0, kShown)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      shown.push_back(ch);
    } else {
      shown.append("\\x");
      shown.push_back(kHex[c >> 4]);
      shown.push_back(kHex[c & 0xF]);
    }
  }
  std::fprintf(stderr, "%s: property violated: %s\n  input (%zu bytes): \"%s\"%s\n", target, what,
               input.size(), shown.c_str(), input.size() > kShown ? "..." : "");
  std::abort();
}

// Reads bytes, numbers and strings from the fuzz input, front to back. Once the input is
// used up every read returns zeros or nothing, so any input gives a complete value.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  size_t remaining() const { return data_.size() - pos_; }

  uint8_t byte() { return pos_ < data_.size() ? static_cast<uint8_t>(data_[pos_++]) : 0; }

  bool bit() { return (byte() & 1) != 0; }

  // A value in [0, n) (0 when n <= 1), from one byte, or two when n > 256.
  size_t below(size_t n) {
    if (n <= 1) return 0;
    size_t v = byte();
    if (n > 256) v = (v << 8) | byte();
    return v % n;
  }

  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }

  // Up to `max_len` raw bytes (the length from the input; fewer when the input runs out).
  std::string_view take(size_t max_len) {
    const size_t wanted = below(max_len + 1);  // before remaining(): it reads bytes
    const size_t n = std::min(wanted, remaining());
    std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace granary::fuzz

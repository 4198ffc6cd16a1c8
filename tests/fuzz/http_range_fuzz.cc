// Fuzz target: parseRange (src/gateway/http_range.h), the Range header of GET and HEAD.
// The input is the header value. It is evaluated for many object sizes: fixed ones (0, 1,
// ..., 2^64-1) and every number the header names, minus one, itself and plus one, so each
// boundary the header can touch is tried. Properties checked:
//  - a satisfiable range is non-empty and lies inside the object;
//  - whether the header is ignored (kNone) depends on the header alone, never on the
//    size of a non-empty object (an empty one also reads whole for a non-zero suffix);
//  - a larger object never turns a satisfiable range unsatisfiable or shorter, and the
//    range keeps its first byte ("a-b", "a-") or keeps ending at the object's end ("-n");
//  - the unit is case-insensitive: the header with the case of every ASCII letter flipped
//    gets the same answer (a letter anywhere else makes the header malformed either way);
//  - a header in one of RFC 9110's exact forms "bytes=a-b", "bytes=a-", "bytes=-n" (decimal
//    digits, no spaces, values below 2^64) gets RFC 9110's answer, computed here on its
//    own: "a-b" with b < a is ignored; a first byte at or past the end, or a zero-length
//    suffix, is unsatisfiable, and so is every other range of an empty object, whose
//    non-zero suffix reads it whole (as S3 answers: 200, no bytes); otherwise the range
//    is clipped to the object.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "http_range.h"

using granary::gateway::parseRange;
using granary::gateway::RangeResult;

namespace {

using Kind = RangeResult::Kind;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

std::string_view g_input;  // for failure reports

[[noreturn]] void fail(const char* what) {
  granary::fuzz::fail("http_range_fuzz", what, g_input);
}

// Evaluations per result kind, and headers compared with the RFC 9110 model: proof that
// each check below ran (see GranaryFuzzSelfCheck).
uint64_t g_kinds[3] = {};
uint64_t g_model_checked = 0;

size_t kindIndex(Kind kind) {
  switch (kind) {
    case Kind::kNone: return 0;
    case Kind::kSatisfiable: return 1;
    case Kind::kUnsatisfiable: return 2;
  }
  return 0;
}

bool sameAnswer(const RangeResult& a, const RangeResult& b) {
  if (a.kind != b.kind) return false;
  return a.kind != Kind::kSatisfiable ||
         (a.range.first == b.range.first && a.range.length == b.range.length);
}

// Decimal digits that fit in 64 bits.
bool exactDecimal(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const auto d = static_cast<uint64_t>(c - '0');
    if (v > (kMax - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

// "bytes=a-b", "bytes=a-" or "bytes=-n", exactly.
struct StrictRange {
  bool valid = false;
  bool suffix = false;    // "-n", n in `last`
  uint64_t first = 0;
  bool has_last = false;  // false in "a-"
  uint64_t last = 0;
};

StrictRange strictForm(std::string_view h) {
  constexpr std::string_view kPrefix = "bytes=";
  StrictRange r;
  if (!h.starts_with(kPrefix)) return r;
  h.remove_prefix(kPrefix.size());
  const size_t dash = h.find('-');
  if (dash == std::string_view::npos) return r;
  const std::string_view first_text = h.substr(0, dash);
  const std::string_view last_text = h.substr(dash + 1);
  if (first_text.empty()) {
    r.suffix = true;
    r.has_last = true;
    r.valid = exactDecimal(last_text, r.last);
    return r;
  }
  if (!exactDecimal(first_text, r.first)) return r;
  if (!last_text.empty()) {
    r.has_last = true;
    if (!exactDecimal(last_text, r.last)) return r;
  }
  r.valid = true;
  return r;
}

RangeResult satisfiable(uint64_t first, uint64_t length) {
  RangeResult r;
  r.kind = Kind::kSatisfiable;
  r.range.first = first;
  r.range.length = length;
  return r;
}

RangeResult unsatisfiable() {
  RangeResult r;
  r.kind = Kind::kUnsatisfiable;
  return r;
}

// RFC 9110 section 14.1.2 for one range-spec, with S3's answer for empty objects.
RangeResult rfcAnswer(const StrictRange& s, uint64_t size) {
  if (s.suffix) {
    if (s.last == 0) return unsatisfiable();
    if (size == 0) return RangeResult{};  // the whole (empty) object
    const uint64_t length = std::min(s.last, size);
    return satisfiable(size - length, length);
  }
  if (s.has_last && s.last < s.first) return RangeResult{};  // invalid range-spec: ignored
  if (s.first >= size) return unsatisfiable();
  const uint64_t last = s.has_last ? std::min(s.last, size - 1) : size - 1;
  return satisfiable(s.first, last - s.first + 1);
}

// Every run of decimal digits in the header (at most 8), saturated at 2^64-1.
std::vector<uint64_t> numbersIn(std::string_view h) {
  std::vector<uint64_t> out;
  size_t i = 0;
  while (i < h.size() && out.size() < 8) {
    if (h[i] < '0' || h[i] > '9') {
      ++i;
      continue;
    }
    uint64_t v = 0;
    for (; i < h.size() && h[i] >= '0' && h[i] <= '9'; ++i) {
      const auto d = static_cast<uint64_t>(h[i] - '0');
      v = v > (kMax - d) / 10 ? kMax : v * 10 + d;
    }
    out.push_back(v);
  }
  return out;
}

std::vector<uint64_t> objectSizes(std::string_view header) {
  std::vector<uint64_t> sizes = {0,          1,          2,          9,        10,  11, 1000,
                                 1ull << 20, 1ull << 40, 1ull << 63, kMax - 1, kMax};
  for (uint64_t n : numbersIn(header)) {
    sizes.push_back(n);
    if (n > 0) sizes.push_back(n - 1);
    if (n < kMax) sizes.push_back(n + 1);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view header(reinterpret_cast<const char*>(data), size);
  g_input = header;
  std::string flipped(header);
  for (char& c : flipped) {
    if (c >= 'a' && c <= 'z') {
      c = static_cast<char>(c - 'a' + 'A');
    } else if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  const StrictRange strict = strictForm(header);
  if (strict.valid) ++g_model_checked;

  bool first_size = true;
  bool first_nonempty = true;
  bool ignored = false;  // kNone at the first non-empty size
  RangeResult previous;  // at the previous (smaller) size, unless first_size
  uint64_t previous_size = 0;
  for (uint64_t object_size : objectSizes(header)) {
    const RangeResult r = parseRange(header, object_size);
    ++g_kinds[kindIndex(r.kind)];
    if (r.kind == Kind::kSatisfiable) {
      if (r.range.length == 0) fail("a satisfiable range is empty");
      if (r.range.first >= object_size) fail("a satisfiable range starts past the object's end");
      if (r.range.length > object_size - r.range.first) {
        fail("a satisfiable range runs past the object's end");
      }
    }
    const bool is_none = r.kind == Kind::kNone;
    if (object_size > 0) {
      if (first_nonempty) {
        ignored = is_none;
        first_nonempty = false;
      } else if (ignored != is_none) {
        fail("whether the header is ignored depends on the object's size");
      }
    }
    if (!sameAnswer(r, parseRange(flipped, object_size))) {
      fail("the answer depends on the case of letters");
    }
    if (strict.valid && !sameAnswer(r, rfcAnswer(strict, object_size))) {
      fail("the answer to an exact RFC 9110 range differs from RFC 9110's");
    }
    if (!first_size && previous.kind == Kind::kSatisfiable) {
      if (r.kind != Kind::kSatisfiable) {
        fail("a larger object made a satisfiable range unsatisfiable");
      }
      if (r.range.length < previous.range.length) {
        fail("a larger object made a range shorter");
      }
      const bool same_first = r.range.first == previous.range.first;
      const bool both_end_at_end =
          previous.range.first + previous.range.length == previous_size &&
          r.range.first + r.range.length == object_size;
      if (!same_first && !both_end_at_end) {
        fail("a larger object moved a range that is not a suffix");
      }
    }
    previous = r;
    previous_size = object_size;
    first_size = false;
  }
  return 0;
}

// Called by replay_main.cc after a replay (libFuzzer never calls it): fails unless every
// kind of answer came up and some headers were compared with the RFC 9110 model.
extern "C" int GranaryFuzzSelfCheck() {
  static constexpr const char* kNames[] = {"ignored", "satisfiable", "unsatisfiable"};
  int failed = 0;
  for (size_t k = 0; k < std::size(g_kinds); ++k) {
    std::printf("%s: %llu evaluations\n", kNames[k], static_cast<unsigned long long>(g_kinds[k]));
    if (g_kinds[k] == 0) failed = 1;
  }
  std::printf("exact RFC 9110 forms checked against the model: %llu\n",
              static_cast<unsigned long long>(g_model_checked));
  if (g_model_checked == 0) failed = 1;
  return failed;
}

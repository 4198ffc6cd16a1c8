#include "md5_lanes.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>
#include <vector>

namespace granary::gateway {

namespace {

static_assert(std::endian::native == std::endian::little, "MD5 words are little-endian");

// RFC 1321: the sine table and the per-step rotations.
constexpr uint32_t kK[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391};
constexpr int kS[64] = {7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22,
                        5,  9,  14, 20, 5,  9,  14, 20, 5,  9,  14, 20, 5,  9,  14, 20,
                        4,  11, 16, 23, 4,  11, 16, 23, 4,  11, 16, 23, 4,  11, 16, 23,
                        6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21};
// The message word step i adds.
constexpr int word(int i) {
  if (i < 16) return i;
  if (i < 32) return (5 * i + 1) & 15;
  if (i < 48) return (3 * i + 5) & 15;
  return (7 * i) & 15;
}

// Blocks a hasher hashes before it looks for new streams to hash beside them: 16 KiB a lane.
constexpr size_t kSlice = 256;

// One stream's 64-byte blocks.
void compress(uint32_t h[4], const uint8_t* p, size_t blocks) {
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
  for (size_t n = 0; n < blocks; ++n, p += 64) {
    uint32_t m[16];
    std::memcpy(m, p, 64);
    const uint32_t a0 = a, b0 = b, c0 = c, d0 = d;
#pragma GCC unroll 64
    for (int i = 0; i < 64; ++i) {
      uint32_t f;
      if (i < 16) {
        f = d ^ (b & (c ^ d));
      } else if (i < 32) {
        f = c ^ (d & (b ^ c));
      } else if (i < 48) {
        f = b ^ c ^ d;
      } else {
        f = c ^ (b | ~d);
      }
      const uint32_t t = a + f + kK[i] + m[word(i)];
      a = d;
      d = c;
      c = b;
      b += std::rotl(t, kS[i]);
    }
    a += a0;
    b += b0;
    c += c0;
    d += d0;
  }
  h[0] = a;
  h[1] = b;
  h[2] = c;
  h[3] = d;
}

// Two streams' blocks, interleaved step by step. One stream is a serial chain (each step
// waits for the last: ~5 cycles a step); a second independent chain fills the ALU ports
// the first leaves idle, so two streams take little longer than one. The same steps as
// compress(), on purpose: one template over the number of streams kept two streams' rate
// (1.32 GB/s) but cost one stream 8% (0.73 -> 0.67 GB/s in md5_bench: g++ 12 spills a
// state word in the one-stream instance).
void compress2(uint32_t* h0, const uint8_t* p0, uint32_t* h1, const uint8_t* p1,
               size_t blocks) {
  uint32_t a[2] = {h0[0], h1[0]}, b[2] = {h0[1], h1[1]}, c[2] = {h0[2], h1[2]},
           d[2] = {h0[3], h1[3]};
  for (size_t n = 0; n < blocks; ++n, p0 += 64, p1 += 64) {
    uint32_t m[2][16];
    std::memcpy(m[0], p0, 64);
    std::memcpy(m[1], p1, 64);
    const uint32_t a0[2] = {a[0], a[1]}, b0[2] = {b[0], b[1]}, c0[2] = {c[0], c[1]},
                   d0[2] = {d[0], d[1]};
#pragma GCC unroll 64
    for (int i = 0; i < 64; ++i) {
#pragma GCC unroll 2
      for (int s = 0; s < 2; ++s) {
        uint32_t f;
        if (i < 16) {
          f = d[s] ^ (b[s] & (c[s] ^ d[s]));
        } else if (i < 32) {
          f = c[s] ^ (d[s] & (b[s] ^ c[s]));
        } else if (i < 48) {
          f = b[s] ^ c[s] ^ d[s];
        } else {
          f = c[s] ^ (b[s] | ~d[s]);
        }
        const uint32_t t = a[s] + f + kK[i] + m[s][word(i)];
        a[s] = d[s];
        d[s] = c[s];
        c[s] = b[s];
        b[s] += std::rotl(t, kS[i]);
      }
    }
    for (int s = 0; s < 2; ++s) {
      a[s] += a0[s];
      b[s] += b0[s];
      c[s] += c0[s];
      d[s] += d0[s];
    }
  }
  h0[0] = a[0], h0[1] = b[0], h0[2] = c[0], h0[3] = d[0];
  h1[0] = a[1], h1[1] = b[1], h1[2] = c[1], h1[3] = d[1];
}

// Sixteen lanes' states: st[0] holds A of every lane, st[1] B, and so on.
using LaneStates = uint32_t[4][Md5Lanes::kLanes];

// One pass over the 16 lanes takes as long as 2.0 (AVX-512) to 2.4 (AVX2) blocks hashed
// one stream at a time (`build/bench/md5_bench` on this project's 2-core VM: 5.8 and
// 4.9 GB/s against 0.73), and two streams interleaved as long as 1.2 blocks (1.24 GB/s):
// fewer than 3 streams are hashed two by two.
constexpr size_t kFewestForLanes = 3;

// What an idle lane hashes: never read back.
alignas(64) const uint8_t kIdleLane[kSlice * 64] = {};

}  // namespace

// The AVX-512 kernel, compiled for that target alone: nothing else in this file may use
// AVX-512, since best() runs it only on CPUs that have it.
#pragma GCC push_options
#pragma GCC target("avx512f")
// g++ 12's AVX-512 intrinsics start some results from _mm512_undefined_epi32(), a
// self-initialised variable that -Wmaybe-uninitialized reports at -O3: a false alarm.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {

// Turns 16 rows of 16 words (lane l's block in row l) into 16 columns (word w of every
// lane in row w).
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(u[i], u[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_i32x4(u[i], u[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xdd);
  }
}

// One MD5 step in every lane. The round functions are single ternary-logic instructions:
// 0xCA is x ? y : z, 0x96 is x ^ y ^ z, 0x39 is y ^ (x | ~z).
template <int i>
inline __attribute__((always_inline)) void step(__m512i& a, __m512i& b, __m512i& c,
                                                __m512i& d, const __m512i* m) {
  __m512i f;
  if constexpr (i < 16) {
    f = _mm512_ternarylogic_epi32(b, c, d, 0xCA);
  } else if constexpr (i < 32) {
    f = _mm512_ternarylogic_epi32(d, b, c, 0xCA);
  } else if constexpr (i < 48) {
    f = _mm512_ternarylogic_epi32(b, c, d, 0x96);
  } else {
    f = _mm512_ternarylogic_epi32(b, c, d, 0x39);
  }
  __m512i t = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(int(kK[i]))), m[word(i)]);
  constexpr int kRotate = kS[i];  // an immediate operand, also in unoptimised builds
  t = _mm512_rol_epi32(_mm512_add_epi32(t, f), kRotate);
  a = d;
  d = c;
  c = b;
  b = _mm512_add_epi32(b, t);
}

template <int... I>
inline __attribute__((always_inline)) void steps(__m512i& a, __m512i& b, __m512i& c,
                                                 __m512i& d, const __m512i* m,
                                                 std::integer_sequence<int, I...>) {
  (step<I>(a, b, c, d, m), ...);
}

void compress16Avx512(LaneStates st, const uint8_t* const p[Md5Lanes::kLanes],
                      size_t blocks) {
  __m512i a = _mm512_loadu_si512(st[0]);
  __m512i b = _mm512_loadu_si512(st[1]);
  __m512i c = _mm512_loadu_si512(st[2]);
  __m512i d = _mm512_loadu_si512(st[3]);
  for (size_t n = 0; n < blocks; ++n) {
    __m512i m[16];
    for (size_t l = 0; l < Md5Lanes::kLanes; ++l) m[l] = _mm512_loadu_si512(p[l] + n * 64);
    transpose16(m);
    const __m512i a0 = a, b0 = b, c0 = c, d0 = d;
    steps(a, b, c, d, m, std::make_integer_sequence<int, 64>{});
    a = _mm512_add_epi32(a, a0);
    b = _mm512_add_epi32(b, b0);
    c = _mm512_add_epi32(c, c0);
    d = _mm512_add_epi32(d, d0);
  }
  _mm512_storeu_si512(st[0], a);
  _mm512_storeu_si512(st[1], b);
  _mm512_storeu_si512(st[2], c);
  _mm512_storeu_si512(st[3], d);
}

}  // namespace
#pragma GCC diagnostic pop
#pragma GCC pop_options

// The AVX2 kernel, for CPUs without AVX-512: the 16 lanes as two groups of 8, whose
// independent chains the CPU interleaves. Compiled for AVX2 alone, as above.
#pragma GCC push_options
#pragma GCC target("avx2")
namespace {

// 8 rows of 8 words into 8 columns.
inline void transpose8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
  }
}

struct Group8 {
  __m256i a, b, c, d;
  __m256i m[16];  // word w of each of the group's 8 lanes
};

template <int i>
inline __attribute__((always_inline)) void step8(Group8& g) {
  __m256i f;
  if constexpr (i < 16) {
    f = _mm256_xor_si256(g.d, _mm256_and_si256(g.b, _mm256_xor_si256(g.c, g.d)));
  } else if constexpr (i < 32) {
    f = _mm256_xor_si256(g.c, _mm256_and_si256(g.d, _mm256_xor_si256(g.b, g.c)));
  } else if constexpr (i < 48) {
    f = _mm256_xor_si256(_mm256_xor_si256(g.b, g.c), g.d);
  } else {
    f = _mm256_xor_si256(g.c, _mm256_or_si256(g.b, _mm256_xor_si256(g.d, _mm256_set1_epi32(-1))));
  }
  __m256i t = _mm256_add_epi32(_mm256_add_epi32(g.a, _mm256_set1_epi32(int(kK[i]))),
                               g.m[word(i)]);
  t = _mm256_add_epi32(t, f);
  constexpr int kRotate = kS[i];
  t = _mm256_or_si256(_mm256_slli_epi32(t, kRotate), _mm256_srli_epi32(t, 32 - kRotate));
  g.a = g.d;
  g.d = g.c;
  g.c = g.b;
  g.b = _mm256_add_epi32(g.b, t);
}

template <int... I>
inline __attribute__((always_inline)) void steps8(Group8& lo, Group8& hi,
                                                  std::integer_sequence<int, I...>) {
  ((step8<I>(lo), step8<I>(hi)), ...);
}

void compress16Avx2(LaneStates st, const uint8_t* const p[Md5Lanes::kLanes], size_t blocks) {
  Group8 g[2];
  for (int h = 0; h < 2; ++h) {
    g[h].a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st[0] + 8 * h));
    g[h].b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st[1] + 8 * h));
    g[h].c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st[2] + 8 * h));
    g[h].d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st[3] + 8 * h));
  }
  for (size_t n = 0; n < blocks; ++n) {
    __m256i s0[2][4];
    for (int h = 0; h < 2; ++h) {
      // Words 0-7 of the group's 8 lanes, then words 8-15.
      for (int half = 0; half < 2; ++half) {
        __m256i* r = g[h].m + 8 * half;
        for (int l = 0; l < 8; ++l) {
          r[l] = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(p[8 * h + l] + n * 64 + 32 * half));
        }
        transpose8(r);
      }
      s0[h][0] = g[h].a;
      s0[h][1] = g[h].b;
      s0[h][2] = g[h].c;
      s0[h][3] = g[h].d;
    }
    steps8(g[0], g[1], std::make_integer_sequence<int, 64>{});
    for (int h = 0; h < 2; ++h) {
      g[h].a = _mm256_add_epi32(g[h].a, s0[h][0]);
      g[h].b = _mm256_add_epi32(g[h].b, s0[h][1]);
      g[h].c = _mm256_add_epi32(g[h].c, s0[h][2]);
      g[h].d = _mm256_add_epi32(g[h].d, s0[h][3]);
    }
  }
  for (int h = 0; h < 2; ++h) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(st[0] + 8 * h), g[h].a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(st[1] + 8 * h), g[h].b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(st[2] + 8 * h), g[h].c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(st[3] + 8 * h), g[h].d);
  }
}

}  // namespace
#pragma GCC pop_options

Md5Stream::Md5Stream() : h_{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}, tail_{} {}

std::span<const uint8_t> Md5Stream::take(std::span<const uint8_t> data) {
  if (data.empty()) return {};  // its data() may be null, which memcpy must not see
  length_ += data.size();
  if (tail_len_ > 0) {
    const size_t n = std::min(data.size(), sizeof(tail_) - tail_len_);
    std::memcpy(tail_ + tail_len_, data.data(), n);
    tail_len_ += n;
    data = data.subspan(n);
    if (tail_len_ < sizeof(tail_)) return {};
    compress(h_, tail_, 1);
    tail_len_ = 0;
  }
  const size_t whole = data.size() / 64 * 64;
  std::memcpy(tail_, data.data() + whole, data.size() - whole);
  tail_len_ = data.size() - whole;
  return data.first(whole);
}

void Md5Stream::update(std::span<const uint8_t> data) {
  auto blocks = take(data);
  compress(h_, blocks.data(), blocks.size() / 64);
}

std::array<uint8_t, 16> Md5Stream::finish() {
  uint8_t last[128] = {};
  std::memcpy(last, tail_, tail_len_);
  last[tail_len_] = 0x80;
  const size_t len = tail_len_ < 56 ? 64 : 128;
  const uint64_t bits = length_ * 8;
  std::memcpy(last + len - 8, &bits, 8);
  compress(h_, last, len / 64);
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), h_, 16);
  return out;
}

bool Md5Lanes::supported(Kernel kernel) {
  switch (kernel) {
    case Kernel::kAvx512: return __builtin_cpu_supports("avx512f");
    case Kernel::kAvx2: return __builtin_cpu_supports("avx2");
    case Kernel::kPortable: return true;
  }
  return false;
}

std::optional<Md5Lanes::Kernel> Md5Lanes::best() {
  for (Kernel k : {Kernel::kAvx512, Kernel::kAvx2}) {
    if (supported(k)) return k;
  }
  return std::nullopt;
}

Md5Lanes::Md5Lanes(Kernel kernel, std::chrono::microseconds linger)
    : kernel_(kernel), linger_(linger) {}

Md5Lanes::~Md5Lanes() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return !hashing_ && queue_.empty(); });
}

Md5Lanes::Member::Member(Md5Lanes* lanes) : lanes_(lanes) {
  if (!lanes_) return;
  std::lock_guard lock(lanes_->mu_);
  ++lanes_->members_;
}

Md5Lanes::Member::~Member() {
  if (!lanes_) return;
  std::lock_guard lock(lanes_->mu_);
  --lanes_->members_;
  lanes_->arrived_.notify_one();  // a lingering hasher may now wait for nobody
}

uint64_t Md5Lanes::sharedBlocks() const {
  std::lock_guard lock(mu_);
  return shared_blocks_;
}

uint64_t Md5Lanes::pairedBlocks() const {
  std::lock_guard lock(mu_);
  return paired_blocks_;
}

void Md5Lanes::update(Md5Stream& stream, std::span<const uint8_t> data, Done done) {
  auto blocks = stream.take(data);
  if (blocks.empty()) {
    done();
    return;
  }
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Job{stream.h_, blocks.data(), blocks.size() / 64, std::move(done),
                         std::chrono::steady_clock::now()});
    if (hashing_) {
      arrived_.notify_one();  // a lingering hasher takes it at once
      return;
    }
    hashing_ = true;
  }
  hash();
}

void Md5Lanes::hash() {
  std::optional<Job> lanes[kLanes];
  size_t active = 0;
  std::vector<Done> finished;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      auto fill = [&] {
        for (auto& lane : lanes) {
          if (lane || queue_.empty()) continue;
          lane.emplace(std::move(queue_.front()));
          queue_.pop_front();
          ++active;
        }
      };
      fill();
      // Too few streams for a pass over the lanes: wait for more while members enough for
      // a pass exist and some may still hand blocks in, and no stream has waited for
      // company longer than linger_.
      while (active > 0 && active < kFewestForLanes && queue_.empty() && members_ > active &&
             members_ >= kFewestForLanes && linger_.count() > 0) {
        auto oldest = std::chrono::steady_clock::time_point::max();
        for (const auto& lane : lanes) {
          if (lane) oldest = std::min(oldest, lane->since);
        }
        if (arrived_.wait_until(lock, oldest + linger_) == std::cv_status::timeout) break;
        fill();
      }
      if (active == 0) {
        hashing_ = false;
        idle_.notify_all();
        return;
      }
    }
    // Every lane moves on by the same number of blocks: the fewest any lane has left.
    size_t n = kSlice;
    for (const auto& lane : lanes) {
      if (lane) n = std::min(n, lane->blocks);
    }
    const bool side_by_side = active >= kFewestForLanes;
    uint64_t paired = 0;
    if (side_by_side && kernel_ != Kernel::kPortable) {
      LaneStates st = {};
      const uint8_t* p[kLanes];
      for (size_t l = 0; l < kLanes; ++l) {
        p[l] = lanes[l] ? lanes[l]->next : kIdleLane;
        if (!lanes[l]) continue;
        for (int w = 0; w < 4; ++w) st[w][l] = lanes[l]->h[w];
      }
      if (kernel_ == Kernel::kAvx512) {
        compress16Avx512(st, p, n);
      } else {
        compress16Avx2(st, p, n);
      }
      for (size_t l = 0; l < kLanes; ++l) {
        if (!lanes[l]) continue;
        for (int w = 0; w < 4; ++w) lanes[l]->h[w] = st[w][l];
      }
    } else {
      // Fewer streams run faster two by two than in a pass over all sixteen lanes.
      Job* pending = nullptr;
      for (auto& lane : lanes) {
        if (!lane) continue;
        if (!pending) {
          pending = &*lane;
          continue;
        }
        compress2(pending->h, pending->next, lane->h, lane->next, n);
        paired += 2 * n;
        pending = nullptr;
      }
      if (pending) compress(pending->h, pending->next, n);
    }
    if (side_by_side || paired > 0) {
      std::lock_guard lock(mu_);
      if (side_by_side) {
        shared_blocks_ += n * active;  // the portable kernel's pairs count here alone
      } else {
        paired_blocks_ += paired;
      }
    }
    for (auto& lane : lanes) {
      if (!lane) continue;
      lane->next += n * 64;
      lane->blocks -= n;
      if (lane->blocks > 0) continue;
      finished.push_back(std::move(lane->done));
      lane.reset();
      --active;
    }
    for (auto& done : finished) done();
    finished.clear();
  }
}

}  // namespace granary::gateway

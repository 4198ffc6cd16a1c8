#include "stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>


namespace granary::bench {

namespace {
uint32_t clampUs(uint64_t micros) { return static_cast<uint32_t>(std::min<uint64_t>(micros, UINT32_MAX)); }
void append(std::vector<uint32_t>& to, const std::vector<uint32_t>& from) {
  to.insert(to.end(), from.begin(), from.end());
}
}  // namespace

void OpStats::record(uint64_t micros, uint64_t payload_bytes, uint64_t listed,
                     const LatencyPhases& phases) {
  ++ops;
  bytes += payload_bytes;
  items += listed;
  latency_us.push_back(clampUs(micros));
  wait_us.push_back(clampUs(phases.wait_us));
  to_head_us.push_back(clampUs(phases.to_head_us));
  body_us.push_back(clampUs(phases.body_us));
}

void OpStats::merge(const OpStats& other) {
  ops += other.ops;
  errors += other.errors;
  bytes += other.bytes;
  items += other.items;
  append(latency_us, other.latency_us);
  append(wait_us, other.wait_us);
  append(to_head_us, other.to_head_us);
  append(body_us, other.body_us);
}

LatencySummary summarize(std::vector<uint32_t>& samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double q) {
    // Nearest rank: the smallest sample with at least q of all samples at or below it.
    size_t r = static_cast<size_t>(std::ceil(q * static_cast<double>(samples.size())));
    return samples[std::clamp<size_t>(r, 1, samples.size()) - 1] / 1000.0;
  };
  double total = std::accumulate(samples.begin(), samples.end(), 0.0);
  s.mean_ms = total / static_cast<double>(samples.size()) / 1000.0;
  s.p50_ms = rank(0.50);
  s.p90_ms = rank(0.90);
  s.p99_ms = rank(0.99);
  s.p999_ms = rank(0.999);
  s.max_ms = samples.back() / 1000.0;
  return s;
}

Payload::Payload(size_t pattern_bytes, uint64_t seed) : pattern_(pattern_bytes) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= pattern_.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(pattern_.data() + i, &v, 8);
  }
  for (; i < pattern_.size(); ++i) pattern_[i] = static_cast<char>(rng());
}

uint64_t Payload::seedFor(std::string_view key) const {
  // FNV-1a, then a splitmix64 finaliser: fixed (any build of the bench agrees), and cheap.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h % pattern_.size();
}

bool Payload::matches(uint64_t seed, uint64_t offset, std::span<const char> data) const {
  bool same = true;
  size_t done = 0;
  forEachPiece(seed, offset, data.size(), SIZE_MAX, [&](std::span<const char> piece) {
    if (same && std::memcmp(piece.data(), data.data() + done, piece.size()) != 0) same = false;
    done += piece.size();
  });
  return same;
}

}  // namespace granary::bench

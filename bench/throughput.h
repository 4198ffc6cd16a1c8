// What the micro-benchmarks (ec_bench, md5_bench) share: how fast a call runs.
#pragma once

#include <chrono>
#include <cstddef>

namespace granary::bench {

// Bytes a second of fn(), which handles `bytes_per_call`, called again and again for
// `seconds`.
template <typename F>
double bytesPerSecond(double seconds, size_t bytes_per_call, F&& fn) {
  using Clock = std::chrono::steady_clock;
  size_t calls = 0;
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    fn();
    ++calls;
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return double(calls) * double(bytes_per_call) / elapsed;
}

}  // namespace granary::bench

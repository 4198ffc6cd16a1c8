// ec_bench: erasure-coding and CRC32C throughput of the ec component on this machine.
// Prints what it ran and its figures. Usage: ec_bench [k] [m] [fragment_bytes] [seconds]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "throughput.h"

#include "granary/ec/erasure_code.h"

using namespace granary;
using bench::bytesPerSecond;

int main(int argc, char** argv) {
  int k = argc > 1 ? std::atoi(argv[1]) : 4;
  int m = argc > 2 ? std::atoi(argv[2]) : 2;
  size_t len = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : (1u << 20);
  double seconds = argc > 4 ? std::atof(argv[4]) : 2.0;
  auto code = ec::ErasureCode::create({static_cast<uint8_t>(k), static_cast<uint8_t>(m)});
  if (!code) {
    std::fprintf(stderr, "bad profile: %s\n", code.error().toString().c_str());
    return 1;
  }
  std::vector<std::vector<uint8_t>> frags(k + m, std::vector<uint8_t>(len));
  std::mt19937_64 rng(1);
  for (int j = 0; j < k; ++j) {
    for (auto& b : frags[j]) b = static_cast<uint8_t>(rng());
  }
  std::vector<const uint8_t*> data(k);
  std::vector<uint8_t*> parity(m), all(k + m);
  for (int j = 0; j < k; ++j) data[j] = frags[j].data();
  for (int j = 0; j < m; ++j) parity[j] = frags[k + j].data();
  for (int j = 0; j < k + m; ++j) all[j] = frags[j].data();

  std::printf("ec_bench: RS %d+%d, fragment %zu bytes, %.1f s per figure, 1 thread\n", k, m,
              len, seconds);
  // The machine's own limit for touching these bytes once: memcpy of the k data fragments.
  std::vector<uint8_t> copy(size_t(k) * len);
  double mem = bytesPerSecond(seconds, size_t(k) * len, [&] {
    for (int j = 0; j < k; ++j) std::memcpy(copy.data() + size_t(j) * len, data[j], len);
  });
  std::printf("  memcpy (reference) %8.2f GB/s\n", mem / 1e9);
  double enc = bytesPerSecond(seconds, size_t(k) * len,
                              [&] { (*code)->encode(len, data, parity); });
  std::printf("  encode            %8.2f GB/s of data  (%.2fx memcpy)\n", enc / 1e9, enc / mem);

  std::unique_ptr<bool[]> present(new bool[k + m]);
  for (int j = 0; j < k + m; ++j) present[j] = j >= std::min(m, k) ? true : false;
  double dec = bytesPerSecond(seconds, size_t(k) * len, [&] {
    Status st = (*code)->reconstruct(len, all, std::span<const bool>(present.get(), k + m));
    if (!st.isOk()) std::abort();
  });
  std::printf("  reconstruct (%d lost data fragments) %8.2f GB/s of data  (%.2fx memcpy)\n",
              std::min(m, k), dec / 1e9, dec / mem);

  uint32_t sink = 0;
  double crc = bytesPerSecond(seconds, len, [&] { sink = ec::crc32c(frags[0]); });
  std::printf("  crc32c            %8.2f GB/s  (%.2fx memcpy; last value %08x)\n", crc / 1e9,
              crc / mem, sink);
  return 0;
}

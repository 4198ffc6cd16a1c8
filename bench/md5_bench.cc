// md5_bench: the MD5 throughput behind uploads' ETags on this machine. Prints what it ran
// and its figures: OpenSSL's MD5 (one stream), Md5Stream (the same, our code), and
// Md5Lanes with two streams (hashed two by two, interleaved), and with every multi-lane
// kernel this CPU has, 16 streams hashed side by side.
// Usage: md5_bench [stream_bytes] [seconds]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "throughput.h"

#include "digest.h"
#include "md5_lanes.h"

using namespace granary::gateway;
using granary::bench::bytesPerSecond;

namespace {


const char* kernelName(Md5Lanes::Kernel k) {
  switch (k) {
    case Md5Lanes::Kernel::kAvx512: return "AVX-512";
    case Md5Lanes::Kernel::kAvx2: return "AVX2";
    case Md5Lanes::Kernel::kPortable: return "portable";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1 << 20;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  std::vector<std::vector<uint8_t>> streams(Md5Lanes::kLanes);
  for (size_t i = 0; i < streams.size(); ++i) streams[i].assign(bytes, uint8_t(i * 37 + 1));
  std::printf("md5_bench: streams of %zu bytes, %.1f s a figure\n", bytes, seconds);

  auto gbs = [](double bps) { return bps / 1e9; };
  std::printf("  %-40s %6.2f GB/s\n", "OpenSSL MD5, one stream",
              gbs(bytesPerSecond(seconds, bytes, [&] {
                Digest d(Digest::Kind::kMd5);
                d.update(streams[0]);
                (void)d.finish();
              })));
  std::printf("  %-40s %6.2f GB/s\n", "Md5Stream, one stream",
              gbs(bytesPerSecond(seconds, bytes, [&] {
                Md5Stream s;
                s.update(streams[0]);
                (void)s.finish();
              })));
  {
    // Two uploads: too few for a pass over the lanes, hashed two by two on one thread.
    Md5Lanes lanes(Md5Lanes::Kernel::kPortable);
    const double bps = bytesPerSecond(seconds, bytes * 2, [&] {
      Md5Stream s[2], starter;
      lanes.update(starter, std::span(streams[0]).first(64), [&] {
        for (size_t i = 0; i < 2; ++i) lanes.update(s[i], streams[i], [] {});
      });
      for (auto& one : s) (void)one.finish();
    });
    std::printf("  %-40s %6.2f GB/s\n", "Md5Lanes, 2 streams together", gbs(bps));
  }
  for (auto kernel : {Md5Lanes::Kernel::kAvx512, Md5Lanes::Kernel::kAvx2}) {
    if (!Md5Lanes::supported(kernel)) {
      std::printf("  Md5Lanes %-31s not on this CPU\n", kernelName(kernel));
      continue;
    }
    Md5Lanes lanes(kernel);
    // The 16 streams are handed in while a one-block starter is being hashed (its
    // completion hands them in), so that they share the lanes as concurrent uploads do.
    const double bps = bytesPerSecond(seconds, bytes * streams.size(), [&] {
      std::vector<Md5Stream> s(streams.size());
      Md5Stream starter;
      lanes.update(starter, std::span(streams[0]).first(64), [&] {
        for (size_t i = 0; i < streams.size(); ++i) lanes.update(s[i], streams[i], [] {});
      });
      for (auto& one : s) (void)one.finish();
    });
    char name[64];
    std::snprintf(name, sizeof name, "Md5Lanes %s, 16 streams together", kernelName(kernel));
    std::printf("  %-40s %6.2f GB/s\n", name, gbs(bps));
  }
  return 0;
}

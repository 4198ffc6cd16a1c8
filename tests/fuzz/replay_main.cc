// Runs a libFuzzer target without libFuzzer (g++ builds, ctest): every file of the seed
// corpus directories given on the command line, then --mutations deterministic mutants of
// them (bit flips, byte overwrites, truncations, insertions, splices of two seeds).
// A target file also links with libFuzzer unchanged, given a compiler that builds the code.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional: a target's own check after the replay (nonzero fails it), e.g. that its
// assertions were reached at all.
extern "C" int GranaryFuzzSelfCheck() __attribute__((weak));

int main(int argc, char** argv) {
  std::vector<std::string> seeds;
  long mutations = 2000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc) {
      mutations = std::atol(argv[++i]);
      continue;
    }
    for (const auto& e : std::filesystem::recursive_directory_iterator(a)) {
      if (!e.is_regular_file() || e.file_size() > (4u << 20)) continue;
      std::ifstream f(e.path(), std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds\n");
    return 2;
  }
  auto run = [](const std::string& s) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  for (const auto& s : seeds) run(s);
  std::mt19937_64 rng(20261122);
  for (long n = 0; n < mutations; ++n) {
    std::string s = seeds[rng() % seeds.size()];
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = s.empty() ? 0 : rng() % s.size();
      switch (rng() % 5) {
        case 0: if (!s.empty()) s[at] ^= char(1u << (rng() % 8)); break;
        case 1: if (!s.empty()) s[at] = char(rng()); break;
        case 2: s.resize(at); break;
        case 3: s.insert(at, std::string(1 + rng() % 16, char(rng()))); break;
        case 4: {
          const std::string& o = seeds[rng() % seeds.size()];
          const size_t from = o.empty() ? 0 : rng() % o.size();
          s = s.substr(0, at) + o.substr(from, rng() % 4096);
          break;
        }
      }
    }
    // The first two bytes pick the split: vary them too.
    std::string variant = s;
    if (variant.size() >= 2) {
      variant[0] = char(rng());
      variant[1] = char(rng());
    }
    run(s);
    run(variant);
  }
  std::printf("replayed %zu seeds and %ld mutants (x2)\n", seeds.size(), mutations);
  if (GranaryFuzzSelfCheck && GranaryFuzzSelfCheck() != 0) {
    std::fprintf(stderr, "the target's self-check failed\n");
    return 1;
  }
  return 0;
}

// Md5Stream and Md5Lanes against OpenSSL's MD5 (through Digest): every length around the
// block and padding edges, split at every kind of boundary, and many streams hashed side by
// side by both lane kernels, from several threads at once.
#include <atomic>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "digest.h"
#include "md5_lanes.h"

namespace granary::gateway {
namespace {

std::vector<uint8_t> randomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::vector<uint8_t> opensslMd5(std::span<const uint8_t> data) {
  Digest d(Digest::Kind::kMd5);
  d.update(data);
  return d.finish();
}

std::vector<uint8_t> bytes(const std::array<uint8_t, 16>& a) { return {a.begin(), a.end()}; }

// The kernels this machine can run: the portable one always, AVX2 and AVX-512 where the
// CPU has them (a kernel it lacks is named in a warning, not passed silently).
std::vector<Md5Lanes::Kernel> kernels() {
  std::vector<Md5Lanes::Kernel> out{Md5Lanes::Kernel::kPortable};
  for (auto [kernel, name] : {std::pair{Md5Lanes::Kernel::kAvx2, "AVX2"},
                              std::pair{Md5Lanes::Kernel::kAvx512, "AVX-512"}}) {
    if (Md5Lanes::supported(kernel)) {
      out.push_back(kernel);
    } else {
      WARN("this CPU has no " << name << ": that MD5 kernel is not tested here");
    }
  }
  return out;
}

TEST_CASE("Md5Stream matches OpenSSL's MD5 for every length across the padding edges") {
  // RFC 1321's own test vector first.
  Md5Stream abc;
  abc.update({reinterpret_cast<const uint8_t*>("abc"), 3});
  CHECK(bytes(abc.finish()) == std::vector<uint8_t>{0x90, 0x01, 0x50, 0x98, 0x3c, 0xd2, 0x4f,
                                                    0xb0, 0xd6, 0x96, 0x3f, 0x7d, 0x28, 0xe1,
                                                    0x7f, 0x72});
  // Empty updates, a null span among them, change nothing.
  Md5Stream empty;
  empty.update({});
  empty.update({reinterpret_cast<const uint8_t*>("x"), 0});
  CHECK(bytes(empty.finish()) == opensslMd5({}));
  const auto data = randomBytes(300, 1);
  for (size_t len = 0; len <= data.size(); ++len) {
    std::span<const uint8_t> all(data.data(), len);
    Md5Stream whole;
    whole.update(all);
    CHECK(bytes(whole.finish()) == opensslMd5(all));
    // The same bytes in pieces of 1, 7, 63, 64 and 65 bytes.
    for (size_t piece : {1, 7, 63, 64, 65}) {
      Md5Stream split;
      for (size_t off = 0; off < len; off += piece) {
        split.update(all.subspan(off, std::min(piece, len - off)));
      }
      INFO("length " << len << ", pieces of " << piece);
      CHECK(bytes(split.finish()) == opensslMd5(all));
    }
  }
}

TEST_CASE("Md5Lanes hashes one stream like Md5Stream, partial blocks included") {
  for (auto kernel : kernels()) {
    Md5Lanes lanes(kernel);
    const auto data = randomBytes(100'000, 2);
    // Pieces that leave partial blocks behind, then one that completes them.
    Md5Stream s;
    bool empty_done = false;
    lanes.update(s, {}, [&] { empty_done = true; });
    CHECK(empty_done);
    size_t off = 0;
    for (size_t piece : {10, 54, 64, 1000, 33, 65'536, 31}) {
      bool called = false;
      lanes.update(s, std::span(data).subspan(off, piece), [&] { called = true; });
      CHECK(called);  // nobody else was hashing: this thread did it all before returning
      off += piece;
    }
    s.update(std::span(data).subspan(off));
    CHECK(bytes(s.finish()) == opensslMd5(data));
  }
}

TEST_CASE("Md5Lanes hashes many streams side by side, fed from many threads") {
  for (auto kernel : kernels()) {
    INFO("kernel " << static_cast<int>(kernel));
    Md5Lanes lanes(kernel);
    constexpr int kThreads = 24;  // more streams than lanes
    std::vector<std::vector<uint8_t>> inputs;
    for (int t = 0; t < kThreads; ++t) {
      // Different lengths, so lanes finish at different blocks and are refilled.
      inputs.push_back(randomBytes(200'000 + 4'099 * t, 100 + t));
    }
    std::vector<std::array<uint8_t, 16>> got(kThreads);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        Md5Stream s;
        std::span<const uint8_t> in(inputs[t]);
        // Pieces of 64 KiB + 3 bytes: each leaves a partial block for the next.
        for (size_t off = 0; off < in.size(); off += 65'539) {
          std::atomic<bool> done{false};
          lanes.update(s, in.subspan(off, std::min<size_t>(65'539, in.size() - off)),
                       [&] { done.store(true); });
          while (!done.load()) std::this_thread::yield();
        }
        got[t] = s.finish();
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      INFO("stream " << t);
      CHECK(bytes(got[t]) == opensslMd5(inputs[t]));
    }
  }
}

TEST_CASE("Md5Lanes puts the streams that arrive while it hashes into lanes side by side") {
  for (auto kernel : kernels()) {
    INFO("kernel " << static_cast<int>(kernel));
    Md5Lanes lanes(kernel);
    // The first stream's completion runs on the hashing thread, while it still hashes:
    // the streams it hands in then wait in line and are hashed together, 16 at a time.
    constexpr int kStreams = 20;
    std::vector<std::vector<uint8_t>> inputs;
    for (int i = 0; i < kStreams; ++i) inputs.push_back(randomBytes(50'000 + 6'400 * i, 7 + i));
    std::vector<Md5Stream> streams(kStreams);
    int done = 0;
    lanes.update(streams[0], inputs[0], [&] {
      ++done;
      for (int i = 1; i < kStreams; ++i) lanes.update(streams[i], inputs[i], [&] { ++done; });
    });
    CHECK(done == kStreams);
    for (int i = 0; i < kStreams; ++i) {
      INFO("stream " << i);
      CHECK(bytes(streams[i].finish()) == opensslMd5(inputs[i]));
    }
    // 19 streams of at least 781 blocks each went through the lanes together.
    CHECK(lanes.sharedBlocks() >= 19 * 781);
  }
}

TEST_CASE("Md5Lanes hashes two streams two by two, interleaved on one thread") {
  for (auto kernel : kernels()) {
    INFO("kernel " << static_cast<int>(kernel));
    Md5Lanes lanes(kernel);
    // Handed in by the first stream's completion, the two wait in line together and are
    // hashed as a pair until the shorter ends (its last partial block is its own).
    const auto first = randomBytes(1'000, 40);
    const auto a = randomBytes(300'000 + 17, 41);
    const auto b = randomBytes(200'000 + 3, 42);
    Md5Stream s0, sa, sb;
    int done = 0;
    lanes.update(s0, first, [&] {
      ++done;
      lanes.update(sa, a, [&] { ++done; });
      lanes.update(sb, b, [&] { ++done; });
    });
    CHECK(done == 3);
    CHECK(bytes(s0.finish()) == opensslMd5(first));
    CHECK(bytes(sa.finish()) == opensslMd5(a));
    CHECK(bytes(sb.finish()) == opensslMd5(b));
    CHECK(lanes.pairedBlocks() == 2 * (200'000 / 64));  // b's whole blocks, beside a's
    CHECK(lanes.sharedBlocks() == 0);
  }
}

TEST_CASE("Md5Lanes lets a member's blocks wait for the other members' to share a pass") {
  for (auto kernel : kernels()) {
    INFO("kernel " << static_cast<int>(kernel));
    // A long linger: the first stream waits until the other two arrive, however late.
    Md5Lanes lanes(kernel, std::chrono::seconds(10));
    Md5Lanes::Member a(&lanes), b(&lanes), c(&lanes);
    const auto in_a = randomBytes(64 * 100, 31), in_b = randomBytes(64 * 100, 32),
               in_c = randomBytes(64 * 100, 33);
    Md5Stream sa, sb, sc;
    std::atomic<int> done{0};
    std::thread first([&] { lanes.update(sa, in_a, [&] { done.fetch_add(1); }); });
    std::thread second([&] { lanes.update(sb, in_b, [&] { done.fetch_add(1); }); });
    lanes.update(sc, in_c, [&] { done.fetch_add(1); });
    first.join();
    second.join();
    CHECK(done.load() == 3);
    CHECK(lanes.sharedBlocks() == 3 * 100);  // one pass of all three: none hashed alone
    CHECK(bytes(sa.finish()) == opensslMd5(in_a));
    CHECK(bytes(sb.finish()) == opensslMd5(in_b));
    CHECK(bytes(sc.finish()) == opensslMd5(in_c));
  }
}

TEST_CASE("Md5Lanes keeps no stream waiting when no pass over the lanes can follow") {
  const auto kernel = Md5Lanes::Kernel::kPortable;
  const auto linger = std::chrono::seconds(10);
  const auto in = randomBytes(64 * 10, 41);
  SECTION("one or two members: too few for a pass over the lanes") {
    const int members = GENERATE(1, 2);
    INFO(members << " members");
    Md5Lanes lanes(kernel, linger);
    std::vector<std::optional<Md5Lanes::Member>> held(members);
    for (auto& m : held) m.emplace(&lanes);
    Md5Stream s;
    const auto start = std::chrono::steady_clock::now();
    bool done = false;
    lanes.update(s, in, [&] { done = true; });
    CHECK(done);
    CHECK(std::chrono::steady_clock::now() - start < linger / 2);
    CHECK(bytes(s.finish()) == opensslMd5(in));
  }
  SECTION("the other members leave while the stream waits for them") {
    Md5Lanes lanes(kernel, linger);
    Md5Lanes::Member stays(&lanes);
    std::optional<Md5Lanes::Member> leaves(&lanes), leaves_too(&lanes);
    Md5Stream s;
    std::atomic<bool> done{false};
    const auto start = std::chrono::steady_clock::now();
    std::thread hasher([&] { lanes.update(s, in, [&] { done.store(true); }); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the hasher waits
    CHECK_FALSE(done.load());
    leaves.reset();
    leaves_too.reset();
    hasher.join();
    CHECK(done.load());
    CHECK(std::chrono::steady_clock::now() - start < linger / 2);
    CHECK(bytes(s.finish()) == opensslMd5(in));
  }
}

}  // namespace
}  // namespace granary::gateway

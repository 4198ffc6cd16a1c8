// AlignedBuffer's shared pool: a buffer made with Reuse::kShared and freed on another
// thread (a put's image is freed on the engine's completion thread) is reused.
#include "aligned_buffer.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace granary::chunkstore {
namespace {

// Frees `buffers` on a thread of its own, whose cache ends with the thread.
void freeOnAnotherThread(std::vector<AlignedBuffer> buffers) {
  std::thread([b = std::move(buffers)]() mutable { b.clear(); }).join();
}

}  // namespace

// The body of the first test, on a fresh thread: its own cache starts empty.
static void reuseAcrossThreads() {
  constexpr size_t kSize = (1 << 20) + 4096;  // a 1 MiB blob's image
  std::vector<AlignedBuffer> made;
  constexpr auto kShared = AlignedBuffer::Reuse::kShared;
  made.emplace_back(kSize, AlignedBuffer::Fill::kZero, kShared);
  uint8_t* first = made[0].data();
  std::fill_n(first, kSize, uint8_t{0xab});
  freeOnAnotherThread(std::move(made));
  AlignedBuffer again(kSize, AlignedBuffer::Fill::kZero, kShared);
  CHECK(again.data() == first);
  CHECK(again.size() == kSize);
  // Reused memory is still zeroed when asked for.
  CHECK(std::all_of(again.data(), again.data() + kSize, [](uint8_t b) { return b == 0; }));

  // A buffer less than half the size of the pooled ones does not take one.
  std::vector<AlignedBuffer> big;
  big.emplace_back(kSize, AlignedBuffer::Fill::kZero, kShared);
  uint8_t* pooled = big[0].data();
  freeOnAnotherThread(std::move(big));
  AlignedBuffer small(256 << 10, AlignedBuffer::Fill::kUninitialized, kShared);
  CHECK(small.data() != pooled);
  // A buffer without kShared never takes one from the pool.
  AlignedBuffer own(kSize, AlignedBuffer::Fill::kUninitialized);
  CHECK(own.data() != pooled);
  AlignedBuffer fits(kSize, AlignedBuffer::Fill::kUninitialized, kShared);
  CHECK(fits.data() == pooled);
}

TEST_CASE("A large buffer freed on another thread is reused by the next allocation") {
  std::thread(reuseAcrossThreads).join();
}

TEST_CASE("The shared buffer pool keeps a bounded amount of idle memory") {
  auto& pool = detail::SharedBufferPool::instance();
  std::vector<AlignedBuffer> many;
  for (int i = 0; i < 48; ++i) {
    many.emplace_back(1 << 20, AlignedBuffer::Fill::kUninitialized, AlignedBuffer::Reuse::kShared);
  }
  freeOnAnotherThread(std::move(many));
  CHECK(pool.idleBytes() <= detail::SharedBufferPool::kMaxIdleBytes);
  CHECK(pool.idleBytes() >= detail::SharedBufferPool::kMaxIdleBytes - (1 << 20));
  // Small buffers are left to malloc.
  std::vector<AlignedBuffer> small;
  const size_t before = pool.idleBytes();
  for (int i = 0; i < 4; ++i) small.emplace_back(4096, AlignedBuffer::Fill::kZero, AlignedBuffer::Reuse::kShared);
  freeOnAnotherThread(std::move(small));
  CHECK(pool.idleBytes() == before);
}

}  // namespace granary::chunkstore

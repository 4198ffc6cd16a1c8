// AlignedBuffer: a zero-filled heap buffer whose start and length are multiples of
// kIoAlign, as O_DIRECT requires. Move-only; not thread safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>
#include <utility>

namespace granary::chunkstore {

// Alignment of every blob offset, header region and payload region on disk, and of every
// buffer and transfer the store hands to the IoEngine (docs/chunkstore-format.md).
inline constexpr uint64_t kIoAlign = 4096;

inline constexpr uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline constexpr uint64_t alignDown(uint64_t v, uint64_t a) { return v / a * a; }

namespace detail {
// One recently freed buffer per thread, reused by the next allocation it fits: a blob
// put or read allocates and frees a ~1 MiB buffer each time, and glibc serves those with
// mmap/munmap (or trims its heap), whose page faults and zeroing of fresh pages grow with
// the core count.
struct ThreadBufferCache {
  static constexpr size_t kMaxBytes = 4u << 20;  // bounds idle memory per thread
  uint8_t* data = nullptr;
  size_t capacity = 0;
  ~ThreadBufferCache() { std::free(data); }
};
inline thread_local ThreadBufferCache t_buffer_cache;

// Large buffers freed recently, shared by all threads, for AlignedBuffer::Reuse::kShared.
// A put's blob image is allocated by the putting thread and freed on the engine's
// completion thread, so a per-thread cache alone never hands it back to a thread that
// allocates: every 1 MiB put faulted in and zeroed 256 fresh pages.
class SharedBufferPool {
 public:
  static constexpr size_t kMinBytes = 64u << 10;  // smaller ones: malloc's own caches
  static constexpr size_t kMaxBytes = ThreadBufferCache::kMaxBytes;
  static constexpr size_t kMaxIdleBytes = 32u << 20;  // bounds the idle memory kept

  static SharedBufferPool& instance() {
    // Never destroyed: threads may free buffers during static destruction.
    static auto* pool = new SharedBufferPool;
    return *pool;
  }
  // A buffer whose capacity is in [cap, 2 * cap] (the most recently given), or nullptr.
  uint8_t* take(size_t cap, size_t* capacity) {
    if (cap < kMinBytes || cap > kMaxBytes) return nullptr;
    std::lock_guard lock(mu_);
    for (size_t i = count_; i-- > 0;) {
      if (entries_[i].capacity >= cap && entries_[i].capacity / 2 <= cap) {
        Entry e = entries_[i];
        entries_[i] = entries_[--count_];
        idle_bytes_ -= e.capacity;
        *capacity = e.capacity;
        return e.data;
      }
    }
    return nullptr;
  }
  size_t idleBytes() {
    std::lock_guard lock(mu_);
    return idle_bytes_;
  }
  // Keeps the buffer if it is in range and there is room, else frees it.
  void give(uint8_t* data, size_t capacity) {
    if (capacity >= kMinBytes && capacity <= kMaxBytes) {
      std::lock_guard lock(mu_);
      if (count_ < kMaxEntries && idle_bytes_ + capacity <= kMaxIdleBytes) {
        entries_[count_++] = {data, capacity};
        idle_bytes_ += capacity;
        return;
      }
    }
    std::free(data);
  }

 private:
  struct Entry {
    uint8_t* data;
    size_t capacity;
  };
  static constexpr size_t kMaxEntries = kMaxIdleBytes / kMinBytes;
  std::mutex mu_;
  Entry entries_[kMaxEntries] = {};
  size_t count_ = 0;
  size_t idle_bytes_ = 0;
};
}  // namespace detail

class AlignedBuffer {
 public:
  enum class Fill { kZero, kUninitialized };
  // kShared: for buffers freed on another thread than the one that allocates them (a
  // put's blob image): they come from and go back to SharedBufferPool, never the thread's
  // cache. Not for read buffers: with pooled buffers, chunkstore_bench's O_DIRECT 1 MiB
  // reads measured 15-25% slower (not understood yet; docs/benchmarks.md).
  enum class Reuse { kThread, kShared };

  AlignedBuffer() = default;
  // alignUp(size, kIoAlign) bytes, zeroed unless kUninitialized (for buffers that a read
  // fills completely); check valid() (allocation may fail).
  explicit AlignedBuffer(size_t size, Fill fill = Fill::kZero, Reuse reuse = Reuse::kThread)
      : shared_(reuse == Reuse::kShared) {
    size_t cap = alignUp(size, kIoAlign);
    if (cap == 0) return;
    auto& cache = detail::t_buffer_cache;
    if (shared_) {
      data_ = detail::SharedBufferPool::instance().take(cap, &capacity_);
    } else if (cache.data != nullptr && cache.capacity >= cap && cache.capacity / 2 <= cap) {
      data_ = std::exchange(cache.data, nullptr);
      capacity_ = std::exchange(cache.capacity, 0);
    }
    if (data_ == nullptr) {
      void* p = nullptr;
      if (posix_memalign(&p, kIoAlign, cap) != 0) return;
      data_ = static_cast<uint8_t*>(p);
      capacity_ = cap;
    }
    size_ = cap;
    if (fill == Fill::kZero) std::memset(data_, 0, cap);
  }
  ~AlignedBuffer() { release(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)),
        shared_(o.shared_) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
      shared_ = o.shared_;
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  bool valid() const { return data_ != nullptr; }
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<uint8_t> span() { return {data_, size_}; }
  std::span<const uint8_t> span() const { return {data_, size_}; }

 private:
  // A shared buffer goes back to the pool (which frees it if it has no room); any other
  // keeps the larger of it and the thread's cached one (within the bound).
  void release() {
    if (data_ == nullptr) return;
    auto& cache = detail::t_buffer_cache;
    if (shared_) {
      detail::SharedBufferPool::instance().give(data_, capacity_);
    } else if (capacity_ <= detail::ThreadBufferCache::kMaxBytes &&
               capacity_ > cache.capacity) {
      std::free(cache.data);
      cache.data = data_;
      cache.capacity = capacity_;
    } else {
      std::free(data_);
    }
    data_ = nullptr;
    size_ = capacity_ = 0;
  }

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;  // of the allocation, which may exceed size_ when reused
  bool shared_ = false;
};

}  // namespace granary::chunkstore

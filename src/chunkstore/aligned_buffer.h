// AlignedBuffer: a zero-filled heap buffer whose start and length are multiples of
// kIoAlign, as O_DIRECT requires. Move-only; not thread safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
// mmap/munmap, whose page faults and TLB shootdowns grow with the core count.
struct ThreadBufferCache {
  static constexpr size_t kMaxBytes = 4u << 20;  // bounds idle memory per thread
  uint8_t* data = nullptr;
  size_t capacity = 0;
  ~ThreadBufferCache() { std::free(data); }
};
inline thread_local ThreadBufferCache t_buffer_cache;
}  // namespace detail

class AlignedBuffer {
 public:
  enum class Fill { kZero, kUninitialized };

  AlignedBuffer() = default;
  // alignUp(size, kIoAlign) bytes, zeroed unless kUninitialized (for buffers that a read
  // fills completely); check valid() (allocation may fail).
  explicit AlignedBuffer(size_t size, Fill fill = Fill::kZero) {
    size_t cap = alignUp(size, kIoAlign);
    if (cap == 0) return;
    auto& cache = detail::t_buffer_cache;
    if (cache.data != nullptr && cache.capacity >= cap && cache.capacity / 2 <= cap) {
      data_ = std::exchange(cache.data, nullptr);
      capacity_ = std::exchange(cache.capacity, 0);
    } else {
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
        capacity_(std::exchange(o.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
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
  // Keeps the larger of this buffer and the thread's cached one (within the bound).
  void release() {
    if (data_ == nullptr) return;
    auto& cache = detail::t_buffer_cache;
    if (capacity_ <= detail::ThreadBufferCache::kMaxBytes && capacity_ > cache.capacity) {
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
};

}  // namespace granary::chunkstore

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

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Allocates alignUp(size, kIoAlign) zeroed bytes; check valid() (allocation may fail).
  explicit AlignedBuffer(size_t size) {
    size_t cap = alignUp(size, kIoAlign);
    if (cap == 0) return;
    void* p = nullptr;
    if (posix_memalign(&p, kIoAlign, cap) != 0) return;
    std::memset(p, 0, cap);
    data_ = static_cast<uint8_t*>(p);
    size_ = cap;
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
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
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace granary::chunkstore

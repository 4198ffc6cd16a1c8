// AlignedBytes: heap bytes at a 4 KiB-aligned address, not zeroed, as O_DIRECT wants them:
// a chunk store writes a payload from them in place (ChunkStore::putAsync) and reads
// whole blocks straight into them (ChunkStore::read). Move-only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <utility>

namespace granary {

class AlignedBytes {
 public:
  static constexpr std::align_val_t kAlign{4096};
  AlignedBytes() = default;
  explicit AlignedBytes(size_t size)
      : data_(static_cast<uint8_t*>(::operator new[](std::max<size_t>(size, 1), kAlign))),
        size_(size) {}
  AlignedBytes(AlignedBytes&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBytes& operator=(AlignedBytes&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~AlignedBytes() {
    if (data_ != nullptr) ::operator delete[](data_, kAlign);
  }
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }
  std::span<uint8_t> span() { return {data_, size_}; }
  std::span<const uint8_t> span() const { return {data_, size_}; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace granary

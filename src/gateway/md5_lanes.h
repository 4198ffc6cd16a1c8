// MD5 for the ETags of uploads, hashed many uploads at a time.
//
// A 1 MiB PUT spent 37% of the server's CPU in OpenSSL's MD5, which hashes one stream at a
// time (MD5 is a serial chain of 32-bit operations: one core, ~750 MB/s here). Md5Lanes
// hashes up to 16 uploads at once, one per 32-bit lane of an AVX-512 register, as
// isa-l_crypto's md5_mb and MinIO's md5-simd do; neither exists as a C/C++ library in
// Debian 12, hence this file. Two uploads, too few for the lanes, are hashed two by two:
// their chains interleaved on one thread, ~1.7x one stream's rate. Md5Stream is an
// incremental MD5 (RFC 1321) whose state lives here, so that the lanes can pick it up;
// alone it runs at ~0.95 of OpenSSL's speed.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>

namespace granary::gateway {

class Md5Stream {
 public:
  Md5Stream();
  // Hashes `data` on the calling thread.
  void update(std::span<const uint8_t> data);
  // The digest of everything passed to update() (and to Md5Lanes::update). Once.
  std::array<uint8_t, 16> finish();

 private:
  friend class Md5Lanes;
  // Counts `data` in, completes a partial block with its first bytes, keeps its last
  // partial block in tail_, and returns the whole blocks between, for the caller to hash.
  std::span<const uint8_t> take(std::span<const uint8_t> data);

  uint32_t h_[4];
  uint64_t length_ = 0;  // bytes passed in so far
  uint8_t tail_[64];     // a partial block: bytes not hashed yet
  size_t tail_len_ = 0;
};

// Thread safe; owns no threads: the caller of update() that finds nobody hashing becomes
// the hasher until no work is left, and the other callers' work joins its lanes meanwhile.
// With a linger, the hasher may wait (at most the linger) for other pool tasks to hand
// work in: the one bounded exception to TaskGroup's rule that pool tasks never wait for
// each other, which is why the gateway lingers only with a pool of 4 threads or more.
class Md5Lanes {
 public:
  enum class Kernel {
    kAvx512,    // 16 lanes in one register each for A, B, C and D
    kAvx2,      // 16 lanes as two groups of 8, for CPUs without AVX-512
    kPortable,  // the same scheduling, lanes hashed two by two with scalar code (tests)
  };
  static bool supported(Kernel kernel);  // this CPU can run it
  // The multi-lane kernel this CPU runs best, nullopt if none beats one stream at a time.
  static std::optional<Kernel> best();

  // `linger`: how long a stream's blocks may wait for other streams to hash beside them
  // before they are hashed on their own (see Member). Worth it only where the hash holds
  // nothing up: ingest hashes a chunk while the chunk is written.
  explicit Md5Lanes(Kernel kernel, std::chrono::microseconds linger = {});

  // Held by an upload for as long as it may hand in blocks: blocks wait for company only
  // while more uploads hold one than have blocks in the lanes, and enough for a pass over
  // the lanes (3), so one or two uploads never wait.
  class Member {
   public:
    explicit Member(Md5Lanes* lanes);  // null: no lanes, nothing to do
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    Md5Lanes* lanes_;
  };
  Md5Lanes(const Md5Lanes&) = delete;
  Md5Lanes& operator=(const Md5Lanes&) = delete;
  ~Md5Lanes();  // waits for the hasher to finish

  using Done = std::move_only_function<void()>;
  // Hashes `data` into `stream`, then calls `done` on the thread that hashed the last of it
  // (maybe this one, before update returns). `stream` and `data` must stay valid until
  // then, and the stream gets no other update or finish() meanwhile.
  void update(Md5Stream& stream, std::span<const uint8_t> data, Done done);

  // Blocks hashed in passes over all lanes, with at least 3 streams side by side (tests).
  uint64_t sharedBlocks() const;
  // Blocks of fewer streams than a pass needs, hashed two at a time, interleaved on one
  // thread (tests).
  uint64_t pairedBlocks() const;

  static constexpr size_t kLanes = 16;

 private:
  struct Job {
    uint32_t* h;  // the stream's state
    const uint8_t* next;
    size_t blocks;  // 64-byte blocks left
    Done done;
    std::chrono::steady_clock::time_point since;  // handed in
  };
  void hash();  // the hasher's loop

  const Kernel kernel_;
  const std::chrono::microseconds linger_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::condition_variable arrived_;  // a stream was queued, or a member left
  size_t members_ = 0;
  std::deque<Job> queue_;
  bool hashing_ = false;
  uint64_t shared_blocks_ = 0;
  uint64_t paired_blocks_ = 0;
};

}  // namespace granary::gateway

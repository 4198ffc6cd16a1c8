// PowerLossEngine: an IoEngine wrapper that remembers everything not yet durable and, on
// powerLoss(), throws it away, as LevelDB's FaultInjectionTestEnv and RocksDB's
// FaultInjectionTestFS do. `kill -9` cannot catch a missing fdatasync (the page cache
// survives it); this can:
//  - bytes written (or holes punched, or sizes changed) since the file's last fdatasync are
//    restored to what they were before the change (saved at change time), and the file
//    size with them;
//  - files created since their directory's last fsync are deleted, and renames since then
//    undone (its fdatasync does not count: it promises nothing about entries);
//  - a removal (unlink) is durable at once: a power cut may also undo one, but the store
//    only removes what it would remove again at its next open (orphans, spares).
// crash() simulates the process dying: from then on every call fails with EIO (close still
// releases the descriptor) until powerLoss() has been applied.
//
// RocksDB files do not go through the IoEngine: the blob index relies on RocksDB's synced
// WAL writes, and every index write of the chunk store is synced.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "granary/chunkstore/io_engine.h"

namespace granary::chunkstore::testing {

class PowerLossEngine final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;

  // Simulates the process dying now.
  void crash() {
    std::lock_guard lock(mu_);
    dead_ = true;
  }

  // Drops every change not made durable, and revives the engine. With `torn`, each
  // unsynced write keeps a prefix of its new bytes (a multiple of 512, chosen from
  // `seed`), as a power cut in the middle of a large write leaves it.
  void powerLoss(bool torn = false, uint64_t seed = 1) {
    std::lock_guard lock(mu_);
    for (auto& [path, undos] : undo_) {
      int fd = ::open(path.c_str(), O_RDWR);
      if (fd < 0) continue;  // the file itself is not durable: removed below
      for (auto it = undos.rbegin(); it != undos.rend(); ++it) {
        uint64_t keep = 0;  // bytes of the new data that survive
        if (torn && it->new_len > 0) {
          seed = seed * 6364136223846793005ull + 1442695040888963407ull;
          keep = ((seed >> 33) % (it->new_len / 512 + 1)) * 512;
        }
        if (keep < it->old.size() &&
            ::pwrite(fd, it->old.data() + keep, it->old.size() - keep,
                     static_cast<off_t>(it->offset + keep)) !=
                static_cast<ssize_t>(it->old.size() - keep)) {
          throw std::runtime_error("PowerLossEngine: cannot restore " + path);
        }
        const uint64_t size = std::max(it->old_size, std::min(it->offset + keep,
                                                               it->offset + it->new_len));
        // Never below what a sync made durable: a write submitted earlier than a synced
        // one (asynchronous writes) saw a smaller file, but cannot shrink it.
        const uint64_t durable = durable_size_[path];
        if (::ftruncate(fd, static_cast<off_t>(std::max(keep > 0 ? size : it->old_size,
                                                        durable))) != 0) {
          throw std::runtime_error("PowerLossEngine: cannot truncate " + path);
        }
      }
      ::fsync(fd);
      ::close(fd);
      ++reverted_files_;
    }
    undo_.clear();
    // Files created since their directory's fsync first, then renames, latest first: a
    // rename's old name may since have been taken by such a file.
    for (const auto& path : unsynced_entries_) {
      std::filesystem::remove(path);
      durable_size_.erase(path);
      ++removed_files_;
    }
    unsynced_entries_.clear();
    for (auto it = unsynced_renames_.rbegin(); it != unsynced_renames_.rend(); ++it) {
      std::filesystem::rename(it->second, it->first);
      moveKey(durable_size_, it->second, it->first);
    }
    unsynced_renames_.clear();
    dead_ = false;
  }

  int revertedFiles() const { return reverted_files_; }
  int removedFiles() const { return removed_files_; }
  int syncs() const { return syncs_; }

  Result<int> open(const std::string& path, int flags, mode_t mode) override {
    std::lock_guard lock(mu_);
    if (dead_) return fail(Status::ioError("dead: open " + path));
    const bool existed = std::filesystem::exists(path);
    auto fd = target_->open(path, flags, mode);
    if (fd) {
      paths_[*fd] = path;
      if (!existed) {
        unsynced_entries_.insert(path);
        durable_size_.erase(path);
      }
    }
    return fd;
  }
  Status close(int fd) override {
    std::lock_guard lock(mu_);
    paths_.erase(fd);
    return target_->close(fd);
  }
  Status pwrite(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    std::lock_guard lock(mu_);
    if (dead_) return Status::ioError("dead: pwrite");
    saveUndo(fd, offset, data.size());
    return target_->pwrite(fd, data, offset);
  }
  // The target's asynchronous write, so the store's real asynchronous path runs. Its undo
  // is saved before it is submitted and kept by any fdatasync that starts before it
  // completes: such a sync does not cover it.
  void writeAsync(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                  uint64_t offset, IoDone done) override {
    uint64_t seq = 0;
    {
      std::lock_guard lock(mu_);
      if (dead_) return done(Status::ioError("dead: writeAsync"));
      seq = saveUndo(fd, offset, head.size() + tail.size());
      in_flight_.insert(seq);
    }
    target_->writeAsync(fd, head, tail, offset, [this, seq, done = std::move(done)](Status st) mutable {
      {
        std::lock_guard lock(mu_);
        in_flight_.erase(seq);
      }
      done(std::move(st));
    });
  }
  Status pread(int fd, std::span<uint8_t> out, uint64_t offset) override {
    if (dead_) return Status::ioError("dead: pread");
    return target_->pread(fd, out, offset);
  }
  Status fdatasync(int fd) override { return sync(fd, false); }
  Status fsync(int fd) override { return sync(fd, true); }
  // fdatasync makes a file's data durable, fsync a directory's entries too: an fdatasync
  // of a directory promises nothing about them (POSIX; ext4 may skip a rename's).
  Status sync(int fd, bool full) {
    std::lock_guard lock(mu_);
    if (dead_) return Status::ioError("dead: fdatasync");
    Status st = full ? target_->fsync(fd) : target_->fdatasync(fd);
    if (!st) return st;
    ++syncs_;
    const std::string& path = paths_[fd];
    if (std::filesystem::is_directory(path)) {
      if (!full) return st;
      // Entries of this directory are durable now.
      const auto inDir = [&](const std::string& p) {
        return std::filesystem::path(p).parent_path() == std::filesystem::path(path);
      };
      std::erase_if(unsynced_entries_, inDir);
      std::erase_if(unsynced_renames_, [&](const auto& r) { return inDir(r.second); });
    } else {
      uint64_t& durable = durable_size_[path];
      std::erase_if(undo_[path], [&](const Undo& u) {
        if (in_flight_.contains(u.seq)) return false;
        durable = std::max({durable, u.old_size, u.offset + u.new_len});
        return true;
      });
    }
    return st;
  }
  Status punchHole(int fd, uint64_t offset, uint64_t len) override {
    std::lock_guard lock(mu_);
    if (dead_) return Status::ioError("dead: punchHole");
    saveUndo(fd, offset, len);
    return target_->punchHole(fd, offset, len);
  }
  // The file's unsynced changes move with it. A file created since its directory's last
  // fsync still vanishes at a power loss (under its new name); any other rename is undone.
  // (Engines never rename over an existing file, so there is no replaced file to model.)
  Status rename(const std::string& from, const std::string& to) override {
    std::lock_guard lock(mu_);
    if (dead_) return Status::ioError("dead: rename " + from);
    Status st = target_->rename(from, to);
    if (!st) return st;
    for (auto& [fd, path] : paths_) {
      if (path == from) path = to;
    }
    moveKey(undo_, from, to);
    moveKey(durable_size_, from, to);
    if (unsynced_entries_.erase(from) > 0) {
      unsynced_entries_.insert(to);
    } else {
      unsynced_renames_.emplace_back(from, to);
    }
    return st;
  }
  Status remove(const std::string& path) override {
    std::lock_guard lock(mu_);
    if (dead_) return Status::ioError("dead: remove " + path);
    Status st = target_->remove(path);
    if (!st) return st;
    undo_.erase(path);
    durable_size_.erase(path);
    unsynced_entries_.erase(path);
    // A renamed file that is gone has no rename left to undo.
    std::erase_if(unsynced_renames_, [&](const auto& r) { return r.second == path; });
    return st;
  }
  // A size change is undone like a write over the bytes between the old and new sizes.
  Status resize(int fd, uint64_t size) override {
    std::lock_guard lock(mu_);
    if (dead_) return Status::ioError("dead: resize");
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw std::runtime_error("PowerLossEngine: cannot stat");
    const uint64_t old_size = static_cast<uint64_t>(st.st_size);
    if (size >= old_size) {
      saveUndo(fd, old_size, size - old_size);
    } else {
      // A cut saves the bytes it drops only up to their last data: a presized extent's
      // tail is a hole of up to a GiB, and a hole reads back as zeros either way.
      uint64_t data_end = size;
      for (off_t at = static_cast<off_t>(size);;) {
        off_t data = ::lseek(fd, at, SEEK_DATA);
        if (data < 0) break;
        off_t hole = ::lseek(fd, data, SEEK_HOLE);
        if (hole < 0) break;
        data_end = static_cast<uint64_t>(hole);
        at = hole;
      }
      saveUndo(fd, size, old_size - size, data_end - size);
    }
    return target_->resize(fd, size);
  }

 private:
  struct Undo {
    uint64_t offset = 0;
    std::vector<uint8_t> old;  // previous contents of the range (clipped to the file size)
    uint64_t old_size = 0;     // previous file size
    uint64_t new_len = 0;      // bytes the change covered
    uint64_t seq = 0;          // unique per change
  };

  // Moves map[from] to map[to], replacing what `to` held; drops map[to] if `from` has none.
  template <typename Map>
  static void moveKey(Map& map, const std::string& from, const std::string& to) {
    map.erase(to);
    if (auto node = map.extract(from)) {
      node.key() = to;
      map.insert(std::move(node));
    }
  }

  // Returns the change's seq. Saves at most `save` of the old bytes (the rest must be a
  // hole, which reads back as zeros after the file size is restored).
  uint64_t saveUndo(int fd, uint64_t offset, uint64_t len, uint64_t save = UINT64_MAX) {
    const std::string& path = paths_[fd];
    int rfd = ::open(path.c_str(), O_RDONLY);
    if (rfd < 0) throw std::runtime_error("PowerLossEngine: cannot open " + path);
    struct stat st {};
    ::fstat(rfd, &st);
    Undo u;
    u.offset = offset;
    u.new_len = len;
    u.seq = ++next_seq_;
    u.old_size = static_cast<uint64_t>(st.st_size);
    if (offset < u.old_size) {
      u.old.resize(std::min<uint64_t>({len, u.old_size - offset, save}));
      if (::pread(rfd, u.old.data(), u.old.size(), static_cast<off_t>(offset)) !=
          static_cast<ssize_t>(u.old.size())) {
        ::close(rfd);
        throw std::runtime_error("PowerLossEngine: cannot save " + path);
      }
    }
    ::close(rfd);
    undo_[path].push_back(std::move(u));
    return next_seq_;
  }

  std::mutex mu_;
  std::atomic<bool> dead_{false};
  std::map<int, std::string> paths_;
  std::set<uint64_t> in_flight_;  // seqs of asynchronous writes not yet completed
  std::map<std::string, uint64_t> durable_size_;  // per file: the size its syncs made durable
  uint64_t next_seq_ = 0;
  std::map<std::string, std::vector<Undo>> undo_;  // per file, since its last fdatasync
  std::set<std::string> unsynced_entries_;         // created since their dir's last fsync
  std::vector<std::pair<std::string, std::string>> unsynced_renames_;  // (from, to), in order
  int reverted_files_ = 0;
  int removed_files_ = 0;
  int syncs_ = 0;
};

}  // namespace granary::chunkstore::testing

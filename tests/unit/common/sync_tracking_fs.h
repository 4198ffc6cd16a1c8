// A RocksDB file system that counts the WAL bytes appended and not yet synced: what a
// power cut of the machine would take with the page cache. A test asks it whether a
// write it was told is durable left any. While `fail_syncs` is set, WAL syncs fail with an
// I/O error (a disk answering EIO to fsync).
#pragma once

#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>
#include <string>

namespace granary::testing {

class SyncTrackingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  std::atomic<bool> fail_syncs{false};

  SyncTrackingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "SyncTrackingFileSystem"; }

  // WAL bytes appended since their file's last Sync/Fsync, all files together.
  int64_t unsyncedWalBytes() const { return unsynced_.load(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    auto st = target()->NewWritableFile(name, options, result, dbg);
    if (st.ok() && name.ends_with(".log")) {
      *result = std::make_unique<File>(std::move(*result), unsynced_, fail_syncs);
    }
    return st;
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, std::atomic<int64_t>& unsynced,
         const std::atomic<bool>& fail_syncs)
        : FSWritableFileOwnerWrapper(std::move(f)), unsynced_(unsynced), fail_(fail_syncs) {}
    ~File() override { unsynced_ -= pending_; }  // closed: no longer this file's to lose
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      added(data.size());
      return target()->Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      added(data.size());
      return target()->Append(data, options, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
      if (fail_) return rocksdb::IOStatus::IOError("fsync failed (test)");
      auto st = target()->Sync(options, dbg);
      if (st.ok()) synced();
      return st;
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      if (fail_) return rocksdb::IOStatus::IOError("fsync failed (test)");
      auto st = target()->Fsync(options, dbg);
      if (st.ok()) synced();
      return st;
    }

   private:
    void added(size_t n) {
      pending_ += static_cast<int64_t>(n);
      unsynced_ += static_cast<int64_t>(n);
    }
    void synced() {
      unsynced_ -= pending_;
      pending_ = 0;
    }
    std::atomic<int64_t>& unsynced_;
    const std::atomic<bool>& fail_;
    int64_t pending_ = 0;
  };

  std::atomic<int64_t> unsynced_{0};
};

}  // namespace granary::testing

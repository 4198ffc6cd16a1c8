// A RocksDB file system whose writes fail with "no space" while it is full: the WAL and
// table files of an instance on a disk that fills up and then has room again.
#pragma once

#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>
#include <string>

namespace granary::testing {

class FillingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  enum Full { kNone, kAll, kTables };  // kTables: only .sst files (flushes, compactions)
  std::atomic<Full> full{kNone};

  FillingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FillingFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    auto st = target()->NewWritableFile(name, options, result, dbg);
    const bool table = name.ends_with(".sst");
    if (st.ok()) *result = std::make_unique<File>(std::move(*result), full, table);
    return st;
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, const std::atomic<Full>& full, bool table)
        : FSWritableFileOwnerWrapper(std::move(f)), full_(full), table_(table) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (isFull()) return rocksdb::IOStatus::NoSpace("disk full (test)");
      return target()->Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (isFull()) return rocksdb::IOStatus::NoSpace("disk full (test)");
      return target()->Append(data, options, info, dbg);
    }

   private:
    bool isFull() const {
      const Full f = full_.load();
      return f == kAll || (f == kTables && table_);
    }
    const std::atomic<Full>& full_;
    bool table_;
  };
};

}  // namespace granary::testing

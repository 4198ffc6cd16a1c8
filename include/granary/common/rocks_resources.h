// RocksResources: the block cache and write-buffer manager shared by every RocksDB
// instance in one process (the index and each drive's blob index), so that the process
// stays within one documented memory budget however many drives it serves.
#pragma once

#include <rocksdb/cache.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/write_buffer_manager.h>

#include <cstddef>
#include <memory>

namespace granary {

struct RocksBudget {
  size_t block_cache_bytes = 256ull << 20;   // shared LRU block cache
  size_t write_buffer_bytes = 128ull << 20;  // all memtables of all instances together
  // Table files holding many deletions are compacted soon after they are written, so that
  // scans (listings, the GC queue) stop walking the tombstones of a bulk delete. Off only
  // to measure it (bench/index_bench.cc).
  bool compact_on_deletion = true;
};

class RocksResources {
 public:
  // `fs`: where every instance's files go (tests: a file system that fails); null: the
  // default one.
  explicit RocksResources(RocksBudget budget = {},
                          std::shared_ptr<rocksdb::FileSystem> fs = nullptr);

  // Options with the shared cache, the shared write-buffer manager and our defaults.
  rocksdb::Options baseOptions() const;
  // Table options (block cache, bloom filter) for one column family.
  rocksdb::ColumnFamilyOptions columnFamilyOptions() const;
  const RocksBudget& budget() const { return budget_; }

 private:
  RocksBudget budget_;
  std::shared_ptr<rocksdb::FileSystem> fs_;
  std::unique_ptr<rocksdb::Env> env_;  // over fs_, when given
  std::shared_ptr<rocksdb::Cache> cache_;
  std::shared_ptr<rocksdb::WriteBufferManager> write_buffers_;
};

}  // namespace granary

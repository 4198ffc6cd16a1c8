#include "granary/common/rocks_resources.h"

#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/table_properties_collectors.h>

namespace granary {

RocksResources::RocksResources(RocksBudget budget, std::shared_ptr<rocksdb::FileSystem> fs)
    : budget_(budget),
      fs_(fs ? std::move(fs) : rocksdb::FileSystem::Default()),
      env_(fs_ != rocksdb::FileSystem::Default() ? rocksdb::NewCompositeEnv(fs_) : nullptr),
      cache_(rocksdb::NewLRUCache(budget.block_cache_bytes)),
      // Memtable memory is charged to the block cache so the two share one budget.
      write_buffers_(std::make_shared<rocksdb::WriteBufferManager>(budget.write_buffer_bytes,
                                                                   cache_)) {}

rocksdb::Options RocksResources::baseOptions() const {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.write_buffer_manager = write_buffers_;
  if (env_) options.env = env_.get();
  // A WAL write or flush that finds the disk full stops the instance's writes; RocksDB
  // (7.8) retries every second (bgerror_resume_retry_interval) and resumes them once there
  // is room (tests/unit/common/common_test.cc, chunk_store_test.cc).
  options.max_background_jobs = 2;
  options.bytes_per_sync = 1 << 20;
  options.max_open_files = 512;
  options.keep_log_file_num = 4;
  options.max_log_file_size = 8 << 20;
  static_cast<rocksdb::ColumnFamilyOptions&>(options) = columnFamilyOptions();
  return options;
}

rocksdb::ColumnFamilyOptions RocksResources::columnFamilyOptions() const {
  rocksdb::ColumnFamilyOptions cf;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache_;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.cache_index_and_filter_blocks = true;
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  cf.write_buffer_size = 32 << 20;
  if (budget_.compact_on_deletion) {
    // A file is marked for compaction when any 128K consecutive entries hold 16K
    // deletions (RocksDB's suggested use for queues and bulk deletes).
    cf.table_properties_collector_factories.push_back(
        rocksdb::NewCompactOnDeletionCollectorFactory(128 * 1024, 16 * 1024));
  }
  return cf;
}

}  // namespace granary

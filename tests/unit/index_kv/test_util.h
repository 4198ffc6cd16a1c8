// Shared fixture for the index tests: a temporary directory, a manual clock, a seeded
// random source and an open index, plus manifest builders.
//
// Built with GRANARY_INDEX_OVER_RPC (the index_kv_rpc_test binary), `index` is the remote
// Index of cluster mode, talking to the RocksDB index through serveIndex() on loopback:
// every index test then also proves that the wire carries each call and its exact answer.
#pragma once

#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <rocksdb/db.h>
#include <fmt/core.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "granary/common/clock.h"
#include "granary/common/ids.h"
#include "granary/common/random.h"
#include "granary/common/rocks_resources.h"
#include "granary/index_kv/index.h"
#ifdef GRANARY_INDEX_OVER_RPC
#include <thread>

#include "granary/common/worker_pool.h"
#include "granary/index_kv/index_service.h"
#endif

namespace granary::index_kv::testing {

using granary::test_support::TempDir;

inline constexpr int64_t kStartNanos = 1'700'000'000'000'000'000;

// A bucket with default settings.
inline BucketInfo bucketInfo(std::string name, std::string owner, int64_t created_unix_nanos) {
  BucketInfo b;
  b.name = std::move(name);
  b.owner = std::move(owner);
  b.created_unix_nanos = created_unix_nanos;
  return b;
}

// A ManualClock that can run a hook once: on the next wall-clock reading made by the
// thread that armed it (the code under test, called from the test thread), so that a test
// can act between two steps of a call, e.g. a check and the write it guards.
class HookClock final : public Clock {
 public:
  explicit HookClock(int64_t unix_nanos) : inner_(unix_nanos) {}
  int64_t nowUnixNanos() const override {
    if (armed_.load(std::memory_order_acquire) && std::this_thread::get_id() == thread_) {
      armed_.store(false);
      auto hook = std::move(hook_);
      hook();
    }
    return inner_.nowUnixNanos();
  }
  int64_t monotonicNanos() const override { return inner_.monotonicNanos(); }
  void advance(int64_t nanos) { inner_.advance(nanos); }
  void set(int64_t unix_nanos) { inner_.set(unix_nanos); }
  void armOnce(std::function<void()> hook) {
    hook_ = std::move(hook);
    thread_ = std::this_thread::get_id();
    armed_.store(true, std::memory_order_release);
  }

 private:
  ManualClock inner_;
  mutable std::atomic<bool> armed_{false};
  mutable std::function<void()> hook_;
  std::thread::id thread_;
};

using RawHandles = std::vector<rocksdb::ColumnFamilyHandle*>;

// Opens the RocksDB in `dir` directly (no index on it), with column families `names`
// (made if missing, as the base options say), runs `fn` on it, and closes it.
inline void withRawDb(const std::string& dir, RocksResources& resources,
                      const std::vector<std::string>& names,
                      const std::function<void(rocksdb::DB&, const RawHandles&)>& fn) {
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& name : names) {
    descriptors.emplace_back(name, resources.columnFamilyOptions());
  }
  RawHandles handles;
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(rocksdb::DBOptions(resources.baseOptions()), dir, descriptors,
                            &handles, &raw)
              .ok());
  fn(*raw, handles);
  for (rocksdb::ColumnFamilyHandle* h : handles) REQUIRE(raw->DestroyColumnFamilyHandle(h).ok());
  REQUIRE(raw->Close().ok());
  delete raw;
}

struct IndexFixture {
  TempDir dir;
  RocksResources resources{RocksBudget{16ull << 20, 16ull << 20}};
  HookClock clock{kStartNanos};
  SeededRandom random{12345};
  std::unique_ptr<Index> index;

  // `gc_page_blobs`: IndexOptions::gc_page_blobs; `fs`: where RocksDB's files go (a file
  // system that fails), null for the real one.
  explicit IndexFixture(size_t gc_page_blobs = IndexOptions{}.gc_page_blobs,
                        std::shared_ptr<rocksdb::FileSystem> fs = nullptr)
      : resources(RocksBudget{16ull << 20, 16ull << 20}, std::move(fs)),
        gc_page_blobs_(gc_page_blobs) {
    reopen();
  }
  ~IndexFixture() { close(); }

  void reopen() {
    close();
    // No margin for gateway clocks: versions minted right after the index opened are its.
    auto opened = openIndex(
        IndexOptions{.dir = dir.path(),
                     .max_batch = 512,
                     .new_index_margin = {},
                     .gc_page_blobs = gc_page_blobs_},
        resources, clock);
    REQUIRE(opened.has_value());
#ifdef GRANARY_INDEX_OVER_RPC
    backing_ = std::move(*opened);
    rpc::ServerOptions options;
    options.cluster_secret = "index-test-secret";
    auto server = serveIndex(options, *backing_, pool_, clock);
    REQUIRE(server.has_value());
    server_ = std::move(*server);
    serving_ = std::jthread([s = server_.get()] { s->run(); });
    index = makeRemoteIndex("127.0.0.1:" + std::to_string(server_->port()),
                            options.cluster_secret, RemoteIndexOptions{}, clock);
#else
    index = std::move(*opened);
#endif
  }

  // The RocksDB index itself (white-box tests): `index`, or the one behind the server.
  Index& backing() {
#ifdef GRANARY_INDEX_OVER_RPC
    return *backing_;
#else
    return *index;
#endif
  }

  // Writes `rows` (key, value) into column family `cf` of the index's RocksDB directly,
  // as damage on disk would: the index is closed meanwhile and reopened after.
  void putRaw(const std::string& cf,
              const std::vector<std::pair<std::string, std::string>>& rows) {
    close();
    std::vector<std::string> names;
    REQUIRE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir.path(), &names).ok());
    const auto at = std::find(names.begin(), names.end(), cf) - names.begin();
    REQUIRE(static_cast<size_t>(at) < names.size());
    withRawDb(dir.path(), resources, names, [&](rocksdb::DB& db, const RawHandles& handles) {
      for (const auto& [key, value] : rows) {
        REQUIRE(db.Put(rocksdb::WriteOptions(), handles[at], key, value).ok());
      }
    });
    reopen();
  }

  void close() {
    index.reset();
#ifdef GRANARY_INDEX_OVER_RPC
    if (server_) server_->stop();
    if (serving_.joinable()) serving_.join();
    server_.reset();
    backing_.reset();
#endif
  }

#ifdef GRANARY_INDEX_OVER_RPC
  // As many threads as the concurrency tests have callers: a commit waits in its thread.
  WorkerPool pool_{16, "index-rpc-test"};
  std::unique_ptr<Index> backing_;
  std::unique_ptr<rpc::Server> server_;
  std::jthread serving_;
#endif

  size_t gc_page_blobs_;

  void makeBucket(const std::string& name) {
    REQUIRE(index->createBucket(bucketInfo(name, "owner", clock.nowUnixNanos())).isOk());
  }

  VersionId newVersion() {
    clock.advance(1000);
    return VersionId::generate(clock, random);
  }

  Manifest inlineManifest(const std::string& body) {
    Manifest m;
    m.version = newVersion();
    m.size = body.size();
    m.etag = fmt::format("etag-{}", m.version.toHex().substr(0, 8));
    m.mtime_unix_nanos = clock.nowUnixNanos();
    m.content_type = "text/plain";
    m.is_inline = true;
    m.inline_data = body;
    return m;
  }

  // `stripes` stripes of a 4+2 object over drives d0..d7.
  Manifest stripedManifest(uint32_t stripes) {
    Manifest m;
    m.version = newVersion();
    m.ec = ec::EcProfile{4, 2};
    m.etag = fmt::format("striped-{}", m.version.toHex().substr(0, 8));
    m.mtime_unix_nanos = clock.nowUnixNanos();
    m.drives = eightDrives();
    m.stripes = stripeLayouts(m.version, stripes, 0);
    m.size = uint64_t{stripes} * (4u << 20);
    return m;
  }

  static std::vector<std::string> eightDrives() {
    std::vector<std::string> out;
    for (int d = 0; d < 8; ++d) out.push_back(fmt::format("d{}", d));
    return out;
  }

  // `stripes` full 4+2 stripes of `version` over d0..d7, fragment i of stripe s on drive
  // (s + i + rotate) % 8.
  static std::vector<StripeLayout> stripeLayouts(const VersionId& version, uint32_t stripes,
                                                 uint32_t rotate) {
    std::vector<StripeLayout> out;
    for (uint32_t s = 0; s < stripes; ++s) {
      StripeLayout layout;
      layout.blob_version = version;
      layout.blob_stripe = s;
      layout.data_len = 4u << 20;
      layout.fragment_len = 1u << 20;
      for (uint16_t i = 0; i < 6; ++i) {
        layout.drives.push_back(static_cast<uint16_t>((s + i + rotate) % 8));
      }
      out.push_back(layout);
    }
    return out;
  }
};

// The BlobRefs a striped manifest owns, as the GC queue must list them.
// Every GC queue entry, due or not.
inline std::vector<GcEntry> allGc(Index& index) {
  auto due = index.gcDue(std::numeric_limits<int64_t>::max(), 1'000'000);
  REQUIRE(due.has_value());
  return *due;
}

// Every fragment of every stripe, computed here rather than by the code under test.
inline std::vector<BlobRef> expectedBlobs(const std::vector<std::string>& drives,
                                          const std::vector<StripeLayout>& stripes) {
  std::vector<BlobRef> out;
  for (const StripeLayout& s : stripes) {
    for (uint16_t i = 0; i < s.drives.size(); ++i) {
      out.push_back(BlobRef{drives[s.drives[i]], BlobId{s.blob_version, s.blob_stripe, i}});
    }
  }
  return out;
}
// Every location of `a` and `b`, as a set (the order and repeats of a list aside).
inline std::set<std::pair<std::string, BlobId>> locations(const std::vector<BlobRef>& a,
                                                          const std::vector<BlobRef>& b = {}) {
  std::set<std::pair<std::string, BlobId>> out;
  for (const auto* list : {&a, &b}) {
    for (const BlobRef& r : *list) out.emplace(r.drive, r.id);
  }
  return out;
}
// `a` then `b`.
inline std::vector<BlobRef> concat(std::vector<BlobRef> a, const std::vector<BlobRef>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline std::vector<BlobRef> expectedBlobs(const Manifest& m) {
  return expectedBlobs(m.drives, m.stripes);
}
inline std::vector<BlobRef> expectedBlobs(const PartInfo& p) {
  return expectedBlobs(p.drives, p.stripes);
}

}  // namespace granary::index_kv::testing

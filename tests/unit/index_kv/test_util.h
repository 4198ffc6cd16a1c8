// Shared fixture for the index tests: a temporary directory, a ManualClock, a seeded
// random source and an open index, plus manifest builders.
#pragma once

#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <fmt/core.h>
#include <stdlib.h>

#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "granary/common/clock.h"
#include "granary/common/ids.h"
#include "granary/common/random.h"
#include "granary/common/rocks_resources.h"
#include "granary/index_kv/index.h"

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

struct IndexFixture {
  TempDir dir;
  RocksResources resources{RocksBudget{16ull << 20, 16ull << 20}};
  ManualClock clock{kStartNanos};
  SeededRandom random{12345};
  std::unique_ptr<Index> index;

  IndexFixture() { reopen(); }

  void reopen() {
    index.reset();
    auto opened = openIndex(IndexOptions{dir.path(), 512}, resources, clock);
    REQUIRE(opened.has_value());
    index = std::move(*opened);
  }

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
inline std::vector<BlobRef> expectedBlobs(const Manifest& m) {
  return expectedBlobs(m.drives, m.stripes);
}
inline std::vector<BlobRef> expectedBlobs(const PartInfo& p) {
  return expectedBlobs(p.drives, p.stripes);
}

}  // namespace granary::index_kv::testing

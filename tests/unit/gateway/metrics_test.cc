// GatewayMetrics: what the scrape-time statistics of drives, the index and the buffer budget
// look like to Prometheus. Counts "since open" are counters that never go back, across
// their source's restarts too.
#include "metrics.h"

#include <catch2/catch.hpp>

#include <optional>
#include <string>

namespace granary::gateway {
namespace {

struct Series {
  prometheus::MetricType type;
  double value;
};

// The series of family `name` labelled `label`="`value`" (or unlabelled), if shown.
std::optional<Series> seriesOf(prometheus::Registry& registry, const std::string& name,
                               const std::string& label = "", const std::string& value = "") {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      const bool match = label.empty() ? m.label.empty()
                                       : m.label.size() == 1 && m.label[0].name == label &&
                                             m.label[0].value == value;
      if (!match) continue;
      const double v = family.type == prometheus::MetricType::Counter ? m.counter.value
                                                                      : m.gauge.value;
      return Series{family.type, v};
    }
  }
  return std::nullopt;
}

// The value of a series that must be shown.
double valueOf(prometheus::Registry& registry, const std::string& name,
               const std::string& label = "", const std::string& value = "") {
  auto s = seriesOf(registry, name, label, value);
  REQUIRE(s);
  return s->value;
}

double driveCount(prometheus::Registry& registry, const std::string& name) {
  auto s = seriesOf(registry, name, "drive", "d0");
  REQUIRE(s);
  CHECK(s->type == prometheus::MetricType::Counter);
  return s->value;
}

}  // namespace

TEST_CASE("A drive's counts since open are counters, its levels gauges") {
  prometheus::Registry registry;
  GatewayMetrics metrics(registry);
  chunkstore::DriveStats stats;
  stats.opened_unix_nanos = 1000;
  stats.commit_batches = 5;
  stats.committed_puts = 12;
  stats.blobs = 7;
  metrics.setDrive("d0", stats, metrics.beginScrape());
  CHECK(driveCount(registry, "granary_drive_group_commits_total") == 5);
  CHECK(driveCount(registry, "granary_drive_committed_puts_total") == 12);
  auto blobs = seriesOf(registry, "granary_drive_blobs", "drive", "d0");
  REQUIRE(blobs);
  CHECK(blobs->type == prometheus::MetricType::Gauge);
  CHECK(blobs->value == 7);
  // No gauge of the old names is left: a since-open count has one series, a counter.
  CHECK_FALSE(seriesOf(registry, "granary_drive_group_commits", "drive", "d0"));

  SECTION("a lower count of the same opening, read out of order, is not shown") {
    stats.commit_batches = 4;
    stats.blobs = 6;
    metrics.setDrive("d0", stats, metrics.beginScrape());
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 5);
    CHECK(valueOf(registry, "granary_drive_blobs", "drive", "d0") == 6);
    stats.commit_batches = 9;
    metrics.setDrive("d0", stats, metrics.beginScrape());
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 9);
  }
  SECTION("figures of a scrape older than those shown are not shown at all") {
    const uint64_t older = metrics.beginScrape();
    const uint64_t newer = metrics.beginScrape();
    stats.commit_batches = 8;
    metrics.setDrive("d0", stats, newer);
    metrics.setDrive("d0", fail(Status::unavailable("timed out")), older);
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 8);
    CHECK(valueOf(registry, "granary_drive_up", "drive", "d0") == 1);
  }
  SECTION("a drive opened again counts on from what was shown") {
    stats.opened_unix_nanos = 2000;
    stats.commit_batches = 2;
    stats.committed_puts = 3;
    metrics.setDrive("d0", stats, metrics.beginScrape());
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 5 + 2);
    CHECK(driveCount(registry, "granary_drive_committed_puts_total") == 12 + 3);
    stats.commit_batches = 6;
    metrics.setDrive("d0", stats, metrics.beginScrape());
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 5 + 6);
    // Opened again at an earlier time (its clock set back): another opening all the same.
    stats.opened_unix_nanos = 500;
    stats.commit_batches = 1;
    stats.blobs = 99;
    metrics.setDrive("d0", stats, metrics.beginScrape());
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 5 + 6 + 1);
    CHECK(valueOf(registry, "granary_drive_blobs", "drive", "d0") == 99);
    // A later scrape's figures from a process replaced since (its read reached the old
    // one): not shown at all, though newer by their scrape.
    stats.opened_unix_nanos = 2000;
    stats.commit_batches = 1000;
    stats.blobs = 1;
    metrics.setDrive("d0", stats, metrics.beginScrape());
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 5 + 6 + 1);
    CHECK(valueOf(registry, "granary_drive_blobs", "drive", "d0") == 99);
  }
  SECTION("a drive that does not answer shows no series but granary_drive_up 0") {
    metrics.setDrive("d0", fail(Status::unavailable("down")), metrics.beginScrape());
    CHECK_FALSE(seriesOf(registry, "granary_drive_group_commits_total", "drive", "d0"));
    CHECK_FALSE(seriesOf(registry, "granary_drive_blobs", "drive", "d0"));
    CHECK(valueOf(registry, "granary_drive_up", "drive", "d0") == 0);
    // Back, the same opening, a count read out of order: not lower than shown before.
    stats.commit_batches = 3;
    metrics.setDrive("d0", stats, metrics.beginScrape());
    CHECK(driveCount(registry, "granary_drive_group_commits_total") == 5);
    CHECK(valueOf(registry, "granary_drive_up", "drive", "d0") == 1);
  }
}

TEST_CASE("The index's group commit counts are counters") {
  prometheus::Registry registry;
  GatewayMetrics metrics(registry);
  const index_kv::RecordIndexStats records;
  const index_kv::IndexStorageStats storage;
  auto shown = [&] {
    auto b = seriesOf(registry, "granary_index_group_commits_total");
    auto r = seriesOf(registry, "granary_index_committed_requests_total");
    REQUIRE(b);
    REQUIRE(r);
    CHECK(b->type == prometheus::MetricType::Counter);
    CHECK(r->type == prometheus::MetricType::Counter);
    return std::pair{b->value, r->value};
  };
  auto commits = [&](uint64_t batches, uint64_t requests, uint64_t opened, uint64_t scrape) {
    metrics.setIndex(records, storage, index_kv::IndexCommitStats{batches, requests, opened},
                     scrape);
    return shown();
  };
  CHECK(commits(10, 30, 500, metrics.beginScrape()) == std::pair{10.0, 30.0});
  CHECK(commits(9, 29, 500, metrics.beginScrape()) == std::pair{10.0, 30.0});  // out of order
  CHECK(commits(1, 4, 600, metrics.beginScrape()) == std::pair{11.0, 34.0});  // restarted
  const uint64_t stale = metrics.beginScrape();
  CHECK(commits(2, 6, 600, metrics.beginScrape()) == std::pair{12.0, 36.0});
  CHECK(commits(50, 90, 500, stale) == std::pair{12.0, 36.0});  // read before the restart
  CHECK(commits(60, 95, 500, metrics.beginScrape()) == std::pair{12.0, 36.0});  // ditto, later
  // Not answering: the counters keep their value.
  metrics.setIndex(records, storage, fail(Status::unavailable("down")), metrics.beginScrape());
  CHECK(shown() == std::pair{12.0, 36.0});
  CHECK(valueOf(registry, "granary_index_up") == 0);
}

TEST_CASE("An index whose commit writes fail is shown failing, and their count a counter") {
  prometheus::Registry registry;
  GatewayMetrics metrics(registry);
  const index_kv::RecordIndexStats records;
  const index_kv::IndexStorageStats storage;
  auto show = [&](uint64_t failed, bool failing, uint64_t opened) {
    metrics.setIndex(records, storage, index_kv::IndexCommitStats{10, 30, opened, failed, failing},
                     metrics.beginScrape());
    auto f = seriesOf(registry, "granary_index_failed_commits_total");
    REQUIRE(f);
    CHECK(f->type == prometheus::MetricType::Counter);
    return std::pair{f->value, valueOf(registry, "granary_index_commits_failing")};
  };
  CHECK(show(0, false, 500) == std::pair{0.0, 0.0});
  CHECK(show(2, true, 500) == std::pair{2.0, 1.0});
  CHECK(show(1, false, 600) == std::pair{3.0, 0.0});  // restarted: counted on, no longer failing
}

TEST_CASE("The buffer budget's counts are counters") {
  prometheus::Registry registry;
  GatewayMetrics metrics(registry);
  BufferBudget::Stats stats{};
  stats.waits = 3;
  stats.refusals = 1;
  metrics.setBufferBudget(stats, metrics.beginScrape());
  CHECK(valueOf(registry, "granary_buffer_budget_waits_total") == 3);
  CHECK(valueOf(registry, "granary_buffer_budget_refusals_total") == 1);
  CHECK(valueOf(registry, "granary_buffer_budget_overdrafts_total") == 0);
  stats.waits = 2;  // an older reading
  metrics.setBufferBudget(stats, metrics.beginScrape());
  CHECK(valueOf(registry, "granary_buffer_budget_waits_total") == 3);
  stats.waits = 7;
  metrics.setBufferBudget(stats, metrics.beginScrape());
  CHECK(valueOf(registry, "granary_buffer_budget_waits_total") == 7);
}

}  // namespace granary::gateway

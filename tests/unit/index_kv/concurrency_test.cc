#include <catch2/catch.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

#include "index_kv/rocks_index.h"
#include "test_util.h"

using namespace granary;
using namespace granary::index_kv;
using granary::index_kv::testing::IndexFixture;

namespace {

IndexCommitStats statsOf(Index& index) {
  auto* rocks = dynamic_cast<RocksIndex*>(&index);
  REQUIRE(rocks != nullptr);
  return rocks->commitStats().value();
}

// Runs body(thread) on `threads` threads released together.
template <typename F>
void concurrently(int threads, F body) {
  std::latch start(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  }
  for (auto& w : workers) w.join();
}

}  // namespace

TEST_CASE("Concurrent puts of distinct keys are group-committed into few synced batches") {
  IndexFixture f;
  f.makeBucket("b");
  constexpr int kThreads = 16;
  constexpr int kPerThread = 200;
  std::vector<std::vector<Manifest>> manifests(kThreads);
  for (auto& list : manifests) {
    for (int i = 0; i < kPerThread; ++i) list.push_back(f.inlineManifest("body"));
  }
  IndexCommitStats before = statsOf(f.backing());
  std::atomic<int> failures{0};
  concurrently(kThreads, [&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      auto r = f.index->putObject("b", fmt::format("t{:02}/k{:04}", t, i), manifests[t][i],
                                  Precondition::mustNotExist());
      if (!r || r->has_value()) ++failures;
    }
  });
  CHECK(failures == 0);
  IndexCommitStats after = statsOf(f.backing());
  const uint64_t requests = after.requests - before.requests;
  const uint64_t batches = after.batches - before.batches;
  CHECK(requests == kThreads * kPerThread);
  CHECK(batches < requests);
#ifdef GRANARY_INDEX_OVER_RPC
  // Over the wire, on 2 cores, HTTP and CBOR work spreads the commits out (under ASan
  // the most: 1.8 per sync measured, fewer when another process takes CPU, which slows
  // the requests and not the syncs), but they must still share syncs.
  CHECK(batches <= requests * 9 / 10);
#else
  CHECK(batches <= requests / 4);  // 16 writers: batches of ~16 in steady state
#endif
  WARN("group commit: " << requests << " commits in " << batches << " synced batches ("
                        << static_cast<double>(requests) / static_cast<double>(batches)
                        << " commits per fsync)");
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; i += 37) {
      auto got = f.index->getObject("b", fmt::format("t{:02}/k{:04}", t, i));
      REQUIRE(got.has_value());
      CHECK(got->version == manifests[t][i].version);
    }
  }
  auto list = f.index->listObjects("b", ListRequest{"", "", "", 100000});
  CHECK(list->objects.size() == kThreads * kPerThread);
}

TEST_CASE("Concurrent puts of one key all succeed and every replaced version is queued") {
  IndexFixture f;
  f.makeBucket("b");
  constexpr int kThreads = 16;
  constexpr int kRounds = 4;
  std::vector<Manifest> manifests;
  for (int i = 0; i < kThreads * kRounds; ++i) manifests.push_back(f.stripedManifest(1));
  std::vector<std::optional<VersionId>> replaced(manifests.size());
  std::atomic<int> failures{0};
  concurrently(kThreads, [&](int t) {
    for (int r = 0; r < kRounds; ++r) {
      size_t i = static_cast<size_t>(r * kThreads + t);
      auto put = f.index->putObject("b", "hot", manifests[i], Precondition::none());
      if (!put) {
        ++failures;
      } else {
        replaced[i] = *put;
      }
    }
  });
  REQUIRE(failures == 0);
  auto final_manifest = f.index->getObject("b", "hot");
  REQUIRE(final_manifest.has_value());
  std::set<VersionId> all;
  for (const auto& m : manifests) all.insert(m.version);
  CHECK(all.contains(final_manifest->version));
  // The replaced versions form one chain: every version but the final one was replaced
  // exactly once, and exactly one put replaced nothing.
  std::set<VersionId> losers;
  int firsts = 0;
  for (const auto& r : replaced) {
    if (r.has_value()) {
      CHECK(losers.insert(*r).second);
    } else {
      ++firsts;
    }
  }
  CHECK(firsts == 1);
  std::set<VersionId> expected_losers = all;
  expected_losers.erase(final_manifest->version);
  CHECK(losers == expected_losers);
  auto gc = f.index->gcDue(std::numeric_limits<int64_t>::max(), 100000);
  REQUIRE(gc.has_value());
  REQUIRE(gc->size() == manifests.size() - 1);
  std::set<VersionId> queued;
  for (const auto& e : *gc) {
    queued.insert(e.version);
    CHECK(e.blobs.size() == 6);
  }
  CHECK(queued == expected_losers);
}

TEST_CASE("Racing mustNotExist puts of one key: exactly one wins") {
  IndexFixture f;
  f.makeBucket("b");
  constexpr int kThreads = 16;
  std::vector<Manifest> manifests;
  for (int i = 0; i < kThreads; ++i) manifests.push_back(f.inlineManifest("x"));
  std::atomic<int> wins{0};
  std::atomic<int> lost{0};
  concurrently(kThreads, [&](int t) {
    auto put = f.index->putObject("b", "once", manifests[t], Precondition::mustNotExist());
    if (put) {
      ++wins;
    } else if (put.error().code() == Status::Code::kPreconditionFailed) {
      ++lost;
    }
  });
  CHECK(wins == 1);
  CHECK(lost == kThreads - 1);
}

TEST_CASE("Racing mustMatch puts form a chain: each version is replaced at most once") {
  IndexFixture f;
  f.makeBucket("b");
  Manifest base = f.inlineManifest("base");
  REQUIRE(f.index->putObject("b", "cas", base, Precondition::none()));
  constexpr int kThreads = 8;
  constexpr int kAttempts = 30;
  std::vector<std::vector<Manifest>> manifests(kThreads);
  for (auto& list : manifests) {
    for (int i = 0; i < kAttempts; ++i) list.push_back(f.inlineManifest("v"));
  }
  std::vector<std::vector<VersionId>> replaced(kThreads);
  std::atomic<int> wrong{0};
  concurrently(kThreads, [&](int t) {
    for (int i = 0; i < kAttempts; ++i) {
      auto current = f.index->getObject("b", "cas");
      if (!current) continue;
      auto put = f.index->putObject("b", "cas", manifests[t][i],
                                    Precondition::mustMatch(current->version));
      if (put) {
        if (!put->has_value() || **put != current->version) ++wrong;  // no Catch off-thread
        replaced[t].push_back(current->version);
      }
    }
  });
  std::set<VersionId> unique;
  size_t wins = 0;
  for (const auto& list : replaced) {
    wins += list.size();
    unique.insert(list.begin(), list.end());
  }
  CHECK(wins >= 1);
  CHECK(unique.size() == wins);  // no version was replaced twice
  CHECK(unique.contains(base.version));
  CHECK(wrong == 0);
}

TEST_CASE("Every acknowledged concurrent commit survives reopening the index") {
  IndexFixture f;
  f.makeBucket("b");
  std::vector<Manifest> manifests;
  for (int i = 0; i < 64; ++i) manifests.push_back(f.inlineManifest("x"));
  std::atomic<int> ok{0};
  concurrently(8, [&](int t) {
    for (int i = t; i < 64; i += 8) {
      if (f.index->putObject("b", fmt::format("k{}", i), manifests[i], Precondition::none())) {
        ++ok;
      }
    }
  });
  f.reopen();
  CHECK(ok == 64);
  CHECK(f.index->listObjects("b", ListRequest{})->objects.size() == 64);
}

namespace {

// Collects the answers of asynchronous puts, and the threads they came on.
struct AsyncAnswers {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result<std::optional<VersionId>>> answers;
  std::set<std::thread::id> threads;

  Index::CommitDone collector() {
    return [this](Result<std::optional<VersionId>> r) {
      std::lock_guard lock(mu);
      answers.push_back(std::move(r));
      threads.insert(std::this_thread::get_id());
      cv.notify_all();
    };
  }
  void waitFor(size_t n) {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return answers.size() >= n; }));
  }
};

}  // namespace

TEST_CASE("Asynchronous puts and deletes from one thread share synced batches and survive "
          "reopening") {
  // Before the fixture: an index that is torn down with answers owed (a failed wait)
  // still gives them to a live collector.
  AsyncAnswers got;
  AsyncAnswers deleted;
  IndexFixture f;
  f.makeBucket("b");
  constexpr size_t kPuts = 400;
  std::vector<Manifest> manifests;
  for (size_t i = 0; i < kPuts; ++i) manifests.push_back(f.inlineManifest("body"));
  IndexCommitStats before = statsOf(f.backing());
  for (size_t i = 0; i < kPuts; ++i) {
    f.index->putObjectAsync("b", fmt::format("k{:04}", i), manifests[i],
                            Precondition::mustNotExist(), got.collector());
  }
  got.waitFor(kPuts);
  for (const auto& r : got.answers) {
    REQUIRE(r.has_value());
    CHECK(!r->has_value());  // new keys: nothing replaced
  }
  const IndexCommitStats after = statsOf(f.backing());
  CHECK(after.requests - before.requests == kPuts);
#ifndef GRANARY_INDEX_OVER_RPC
  // The committer's thread answers, not the caller's, and no caller waits for a batch's
  // sync: the queue holds what one thread submitted meanwhile, so batches are large.
  REQUIRE(f.index->asyncCommits());
  CHECK(!got.threads.contains(std::this_thread::get_id()));
  CHECK(got.threads.size() == 1);
  // At least two a sync (5 measured under ASan on 2 cores, more in a release build).
  const uint64_t batches = after.batches - before.batches;
  CHECK(batches <= kPuts / 2);
  WARN("asynchronous puts: " << kPuts << " in " << batches << " synced batches");
#else
  // The remote index commits synchronously: putObjectAsync is putObject, then `done`.
  CHECK(!f.index->asyncCommits());
  CHECK(got.threads == std::set<std::thread::id>{std::this_thread::get_id()});
#endif
  // Deletes of every other key, queued the same way.
  for (size_t i = 1; i < kPuts; i += 2) {
    f.index->deleteObjectAsync("b", fmt::format("k{:04}", i), Precondition::none(),
                               deleted.collector());
  }
  deleted.waitFor(kPuts / 2);
  for (size_t n = 0; n < kPuts / 2; ++n) {
    REQUIRE(deleted.answers[n].has_value());
    CHECK(deleted.answers[n]->has_value());  // each removed a version
  }
  f.reopen();
  auto list = f.index->listObjects("b", ListRequest{"", "", "", 100000});
  REQUIRE(list.has_value());
  CHECK(list->objects.size() == kPuts / 2);
  for (size_t i = 0; i < kPuts; i += 42) {
    auto m = f.index->getObject("b", fmt::format("k{:04}", i));
    REQUIRE(m.has_value());
    CHECK(m->version == manifests[i].version);
    CHECK(m->inline_data == "body");
    CHECK(f.index->getObject("b", fmt::format("k{:04}", i + 1)).error().isNotFound());
  }
}

TEST_CASE("Asynchronous puts and deletes answer what putObject and deleteObject answer") {
  AsyncAnswers got;  // before the fixture, as above
  AsyncAnswers del;
  IndexFixture f;
  f.makeBucket("b");
  Manifest first = f.inlineManifest("one");
  Manifest second = f.inlineManifest("two");
  REQUIRE(f.index->putObject("b", "k", first, Precondition::none()).has_value());
  // One at a time, each answered before the next is sent.
  auto put = [&](std::string_view bucket, std::string_view key, const Manifest& m,
                 Precondition pre) {
    const size_t before = got.answers.size();
    f.index->putObjectAsync(bucket, key, m, pre, got.collector());
    got.waitFor(before + 1);
  };
  // In order: a replacing put, a refused precondition, a missing bucket, a bad bucket name
  // (refused before it is queued), an empty key.
  put("b", "k", second, Precondition::mustMatch(first.version));
  put("b", "k", f.inlineManifest("three"), Precondition::mustNotExist());
  put("nope", "k", f.inlineManifest("four"), Precondition::none());
  put("a/b", "k", f.inlineManifest("five"), Precondition::none());
  put("b", "", f.inlineManifest("six"), Precondition::none());
  REQUIRE(got.answers.size() == 5);
  REQUIRE(got.answers[0].has_value());
  CHECK(*got.answers[0] == std::optional<VersionId>(first.version));
  REQUIRE(!got.answers[1].has_value());
  CHECK(got.answers[1].error().code() == Status::Code::kPreconditionFailed);
  REQUIRE(!got.answers[2].has_value());
  CHECK(got.answers[2].error().isNotFound());
  REQUIRE(!got.answers[3].has_value());
  CHECK(got.answers[3].error().code() == Status::Code::kInvalidArgument);
  REQUIRE(!got.answers[4].has_value());
  CHECK(got.answers[4].error().code() == Status::Code::kInvalidArgument);
  auto current = f.index->getObject("b", "k");
  REQUIRE(current.has_value());
  CHECK(current->version == second.version);
  CHECK(current->inline_data == "two");

  // Deletes: of the key (its version removed), of it again (nothing: S3 DELETE of a
  // missing key succeeds), in a missing bucket, under a bad bucket name.
  for (const char* bucket : {"b", "b", "nope", "a/b"}) {
    const size_t before = del.answers.size();
    f.index->deleteObjectAsync(bucket, "k", Precondition::none(), del.collector());
    del.waitFor(before + 1);
  }
  REQUIRE(del.answers.size() == 4);
  REQUIRE(del.answers[0].has_value());
  CHECK(*del.answers[0] == std::optional<VersionId>(second.version));
  REQUIRE(del.answers[1].has_value());
  CHECK(!del.answers[1]->has_value());
  REQUIRE(!del.answers[2].has_value());
  CHECK(del.answers[2].error().isNotFound());
  REQUIRE(!del.answers[3].has_value());
  CHECK(del.answers[3].error().code() == Status::Code::kInvalidArgument);
  CHECK(f.index->getObject("b", "k").error().isNotFound());
}

#ifndef GRANARY_INDEX_OVER_RPC
TEST_CASE("A commit queue that takes no requests answers an asynchronous one at once") {
  // Never started (as when its thread could not be created): nothing reaches the DB.
  ManualClock clock{0};
  CommitQueue queue(nullptr, ColumnFamilies{}, clock, 16, 1024);
  CommitRequest req;
  req.kind = CommitRequest::Kind::kPutObject;
  std::thread::id answered_on;
  int answers = 0;
  req.on_done = [&] {
    ++answers;
    answered_on = std::this_thread::get_id();
  };
  queue.submitAsync(req);
  CHECK(answers == 1);
  CHECK(answered_on == std::this_thread::get_id());
  CHECK(req.status.code() == Status::Code::kUnavailable);
}
#endif

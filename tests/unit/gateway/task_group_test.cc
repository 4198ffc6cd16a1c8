// TaskGroup and offload(): blocking work on a WorkerPool, awaited from a coroutine that
// runs on an io_context driven by the test thread.
#include "run_task.h"
#include "asio.h"

#include <atomic>
#include <new>
#include <stdexcept>
#include <catch2/catch.hpp>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "granary/common/worker_pool.h"
#include "task_group.h"

namespace granary::gateway {
namespace {

struct Observed {
  Status status;
  std::thread::id resumed_on;
  std::vector<std::thread::id> ran_on;
};

// Starts `n` tasks with start(group, i, ran_on[i]) and waits for them all.
template <typename Start>
Task<Observed> startAndWait(WorkerPool& pool, int n, Start start) {
  Observed obs;
  obs.ran_on.resize(n);
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  TaskGroup group(pool, ex);
  for (int i = 0; i < n; ++i) start(group, i, obs.ran_on[i]);
  obs.status = co_await group.wait();
  obs.resumed_on = std::this_thread::get_id();
  co_return obs;
}

// Spawns `n` tasks; task i fails with `failures[i]` when that entry is not ok.
Task<Observed> spawnAndWait(WorkerPool& pool, int n, std::vector<Status>& failures,
                            std::atomic<int>& finished) {
  return startAndWait(pool, n, [&failures, &finished](TaskGroup& group, int i,
                                                       std::thread::id& ran_on) {
    group.spawn([i, &ran_on, &failures, &finished] {
      ran_on = std::this_thread::get_id();
      finished.fetch_add(1);
      return i < static_cast<int>(failures.size()) ? failures[i] : Status::ok();
    });
  });
}

TEST_CASE("TaskGroup runs tasks on the pool and resumes the waiter on its executor thread") {
  WorkerPool pool(3, "tg-test");
  asio::io_context io;
  std::vector<Status> failures;
  std::atomic<int> finished{0};
  Observed obs = runTask(io, spawnAndWait(pool, 8, failures, finished));
  CHECK(obs.status.isOk());
  CHECK(finished.load() == 8);
  CHECK(obs.resumed_on == std::this_thread::get_id());
  for (const auto& id : obs.ran_on) CHECK(id != std::this_thread::get_id());
}

TEST_CASE("TaskGroup::wait with nothing spawned returns ok at once") {
  WorkerPool pool(1, "tg-test");
  asio::io_context io;
  std::vector<Status> failures;
  std::atomic<int> finished{0};
  Observed obs = runTask(io, spawnAndWait(pool, 0, failures, finished));
  CHECK(obs.status.isOk());
  CHECK(obs.resumed_on == std::this_thread::get_id());
}

TEST_CASE("TaskGroup::wait reports the first error of its tasks") {
  asio::io_context io;
  std::atomic<int> finished{0};
  SECTION("one worker: the first failing task in submission order wins") {
    WorkerPool pool(1, "tg-test");
    std::vector<Status> failures = {Status::ok(), Status::ioError("first"), Status::ok(),
                                    Status::corruption("second")};
    Observed obs = runTask(io, spawnAndWait(pool, 6, failures, finished));
    CHECK(obs.status.code() == Status::Code::kIoError);
    CHECK(obs.status.message() == "first");
    CHECK(finished.load() == 6);  // an error does not cancel the other tasks
  }
  SECTION("many workers: one of the errors, never ok") {
    WorkerPool pool(4, "tg-test");
    std::vector<Status> failures(64, Status::ok());
    failures[10] = Status::ioError("a");
    failures[50] = Status::corruption("b");
    Observed obs = runTask(io, spawnAndWait(pool, 64, failures, finished));
    CHECK_FALSE(obs.status.isOk());
    CHECK((obs.status.message() == "a" || obs.status.message() == "b"));
    CHECK(finished.load() == 64);
  }
}

// Two rounds on one group: the error of round one is reported once, then cleared.
Task<std::vector<Status>> twoRounds(WorkerPool& pool, std::atomic<int>& counter) {
  std::vector<Status> out;
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  TaskGroup group(pool, ex);
  group.spawn([] { return Status::unavailable("round one"); });
  out.push_back(co_await group.wait());
  CHECK(group.idle());
  for (int i = 0; i < 1000; ++i) {
    group.spawn([&counter] {
      counter.fetch_add(1);
      return Status::ok();
    });
  }
  out.push_back(co_await group.wait());
  CHECK(group.idle());
  co_return out;
}

TEST_CASE("TaskGroup is reusable: the error is reset after wait, many tasks all complete") {
  WorkerPool pool(4, "tg-test");
  asio::io_context io;
  std::atomic<int> counter{0};
  std::vector<Status> rounds = runTask(io, twoRounds(pool, counter));
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0].code() == Status::Code::kUnavailable);
  CHECK(rounds[1].isOk());
  CHECK(counter.load() == 1000);
}

struct OffloadResults {
  int number = 0;
  std::string text;
  std::unique_ptr<int> boxed;
  Result<std::string> failed;
  std::thread::id worker;
  std::thread::id resumed_on;
};

Task<OffloadResults> offloadSome(WorkerPool& pool) {
  OffloadResults r;
  r.number = co_await offload(pool, [] { return 6 * 7; });
  r.text = co_await offload(pool, [] { return std::string(1000, 'x'); });
  r.boxed = co_await offload(pool, [] { return std::make_unique<int>(17); });
  r.failed = co_await offload(
      pool, []() -> Result<std::string> { return fail(Status::notFound("nope")); });
  std::thread::id* worker = &r.worker;
  int ignored = co_await offload(pool, [worker] {
    *worker = std::this_thread::get_id();
    return 0;
  });
  (void)ignored;
  r.resumed_on = std::this_thread::get_id();
  co_return r;
}

TEST_CASE("offload returns the function's value on the awaiting coroutine's thread") {
  WorkerPool pool(2, "tg-test");
  asio::io_context io;
  OffloadResults r = runTask(io, offloadSome(pool));
  CHECK(r.number == 42);
  CHECK(r.text == std::string(1000, 'x'));
  REQUIRE(r.boxed != nullptr);
  CHECK(*r.boxed == 17);
  REQUIRE_FALSE(r.failed.has_value());
  CHECK(r.failed.error().isNotFound());
  CHECK(r.worker != std::thread::id());
  CHECK(r.worker != std::this_thread::get_id());
  CHECK(r.resumed_on == std::this_thread::get_id());
}

// Many coroutines on one io_context, each offloading: every one completes with its value.
Task<int> square(WorkerPool& pool, int i) {
  int v = co_await offload(pool, [i] { return i * i; });
  co_return v;
}

Task<int> throwsOnThePool(WorkerPool& pool) {
  int v = co_await offload(pool, []() -> int { throw std::runtime_error("injected"); });
  co_return v;
}

Task<Status> spawnThrowing(WorkerPool& pool) {
  TaskGroup group(pool, co_await asio::this_coro::executor);
  group.spawn([]() -> Status { throw std::bad_alloc(); });
  group.spawn([] { return Status::ok(); });
  co_return co_await group.wait();
}

TEST_CASE("What work on the pool throws reaches its coroutine, not the pool's thread") {
  // It used to escape WorkerPool::run and end the process.
  WorkerPool pool(2, "tg-test");
  asio::io_context io;
  CHECK_THROWS_WITH(runTask(io, throwsOnThePool(pool)), "injected");
  Status st = runTask(io, spawnThrowing(pool));
  CHECK(st.code() == Status::Code::kInternal);
  CHECK(st.message().find("bad_alloc") != std::string::npos);
  CHECK(runTask(io, square(pool, 3)) == 9);  // the pool goes on
}


TEST_CASE("Many concurrent coroutines offloading to a small pool all get their own result") {
  WorkerPool pool(2, "tg-test");
  asio::io_context io;
  constexpr int kCoroutines = 200;
  std::vector<int> results(kCoroutines, -1);
  int completed = 0;
  for (int i = 0; i < kCoroutines; ++i) {
    asio::co_spawn(io, square(pool, i), [&results, &completed, i](std::exception_ptr e, int v) {
      if (!e) results[i] = v;
      ++completed;
    });
  }
  io.run();
  CHECK(completed == kCoroutines);
  for (int i = 0; i < kCoroutines; ++i) CHECK(results[i] == i * i);
}

// Tasks that start on the waiter's own thread and end on others (an index committer).
Task<Observed> startHereAndWait(WorkerPool& pool, int n, std::vector<std::thread>& enders) {
  return startAndWait(pool, n, [&enders](TaskGroup& group, int i, std::thread::id& ran_on) {
    group.startHere([i, &ran_on, &enders](TaskGroup::Done done) {
      ran_on = std::this_thread::get_id();
      enders.emplace_back([i, done = std::move(done)]() mutable {
        done(i == 2 ? Status::ioError("third") : Status::ok());
      });
    });
  });
}

TEST_CASE("TaskGroup::startHere starts on the calling thread, the waiter resumes when all end") {
  WorkerPool pool(1, "tg-test");
  asio::io_context io;
  std::vector<std::thread> enders;
  Observed obs = runTask(io, startHereAndWait(pool, 4, enders));
  for (auto& t : enders) t.join();
  CHECK(obs.status.code() == Status::Code::kIoError);
  CHECK(obs.resumed_on == std::this_thread::get_id());
  for (const auto& id : obs.ran_on) CHECK(id == std::this_thread::get_id());
}

}  // namespace
}  // namespace granary::gateway

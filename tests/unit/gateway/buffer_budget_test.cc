// BufferBudget: waits in arrival order without blocking the event loop, never lends more
// than its capacity, and wakes waiters as leases come back.
#include "buffer_budget.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "asio.h"

namespace granary::gateway {
namespace {

// Takes `bytes`, records its name when it got them, holds them for `hold` loop turns.
// A refused upload records "<name>:refused" instead.
Task<void> borrower(BufferBudget& budget, uint64_t bytes, std::string name,
                    std::vector<std::string>& order, int hold,
                    BufferBudget::Kind kind = BufferBudget::Kind::kRead,
                    BufferBudget::Holds holds = BufferBudget::Holds::kLease) {
  BufferBudget::Lease lease = co_await budget.acquire(bytes, kind, holds);
  order.push_back(lease.held() ? name : name + ":refused");
  for (int i = 0; i < hold; ++i) co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

// Takes `bytes` for a read through acquire(), on a loop of its own run until it is taken
// (a wait past the budget: its patience, then the overdraft or refusal).
BufferBudget::Lease acquireNow(BufferBudget& budget, uint64_t bytes, BufferBudget::Holds holds) {
  asio::io_context io;
  BufferBudget::Lease lease;
  auto take = [&]() -> Task<void> {
    lease = co_await budget.acquire(bytes, BufferBudget::Kind::kRead, holds);
  };
  asio::co_spawn(io, take(), asio::detached);
  io.run();
  return lease;
}

}  // namespace

TEST_CASE("BufferBudget lends up to its capacity, waiters get their bytes in arrival order") {
  asio::io_context io;
  BufferBudget budget(100);
  BufferBudget::Lease held = budget.tryAcquire(60);
  REQUIRE(held.held());
  CHECK_FALSE(budget.tryAcquire(50).held());  // 110 > 100
  std::vector<std::string> order;
  asio::co_spawn(io, borrower(budget, 50, "a", order, 1), asio::detached);
  asio::co_spawn(io, borrower(budget, 10, "b", order, 1), asio::detached);
  io.poll();
  // "b" would fit (70) but must not overtake "a"; nor may tryAcquire.
  CHECK(order.empty());
  CHECK(budget.stats().waiting == 2);
  CHECK_FALSE(budget.tryAcquire(1).held());

  held.reset();  // 0 used: a (50) and b (10) both fit now
  io.run();
  CHECK(order == std::vector<std::string>{"a", "b"});
  auto stats = budget.stats();
  CHECK(stats.used == 0);
  CHECK(stats.waiting == 0);
  CHECK(stats.peak == 60);
  CHECK(stats.waits == 2);
}

TEST_CASE("BufferBudget charges a request larger than itself the whole budget") {
  asio::io_context io;
  BufferBudget budget(100);
  std::vector<std::string> order;
  asio::co_spawn(io, borrower(budget, 1000, "big", order, 3), asio::detached);
  asio::co_spawn(io, borrower(budget, 1, "small", order, 0), asio::detached);
  io.run();
  CHECK(order == std::vector<std::string>{"big", "small"});
  CHECK(budget.stats().peak == 100);
  CHECK(budget.stats().used == 0);
}

TEST_CASE("A wait that runs out of patience goes ahead over the budget, and is counted") {
  asio::io_context io;
  BufferBudget budget(100, std::chrono::milliseconds(50));
  BufferBudget::Lease stuck = budget.tryAcquire(100);  // a client that stopped reading
  std::vector<std::string> order;
  asio::co_spawn(io, borrower(budget, 60, "patient", order, 0), asio::detached);
  const auto start = std::chrono::steady_clock::now();
  io.run();
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(50));
  CHECK(order == std::vector<std::string>{"patient"});
  auto stats = budget.stats();
  CHECK(stats.overdrafts == 1);
  CHECK(stats.peak == 160);
  CHECK(stats.used == 100);  // the overdraft was given back; the stuck lease is still out
  stuck.reset();
  CHECK(budget.stats().used == 0);
}

TEST_CASE("An admission wait that runs out gets no bytes, is counted, and lets the next in") {
  asio::io_context io;
  BufferBudget budget(100, std::chrono::seconds(60), std::chrono::milliseconds(50));
  BufferBudget::Lease held = budget.tryAcquire(20, BufferBudget::Kind::kUpload);
  std::vector<std::string> order;
  // Taken before io.poll() starts the waits: their 50 ms count from there.
  const auto start = std::chrono::steady_clock::now();
  // Uploads may hold 50: "upload" (40) does not fit and heads the queue; "small" (10)
  // would fit but must not overtake it, until the upload gives up.
  asio::co_spawn(io, borrower(budget, 40, "upload", order, 0, BufferBudget::Kind::kUpload),
                 asio::detached);
  asio::co_spawn(io, borrower(budget, 10, "small", order, 0, BufferBudget::Kind::kUpload),
                 asio::detached);
  io.poll();
  CHECK(order.empty());
  io.run();
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(50));
  CHECK(order == std::vector<std::string>{"upload:refused", "small"});
  auto stats = budget.stats();
  CHECK(stats.refusals == 1);
  CHECK(stats.overdrafts == 0);
  CHECK(stats.peak == 30);  // never over what uploads may hold
  CHECK(stats.used == 20);
  CHECK(stats.uploads == 20);
  CHECK(stats.waiting == 0);
}

TEST_CASE("Uploads have half the budget of their own, reads use the rest and borrow the idle half") {
  asio::io_context io;
  BufferBudget budget(100, std::chrono::seconds(60), std::chrono::seconds(60));
  BufferBudget::Lease upload = budget.tryAcquire(30, BufferBudget::Kind::kUpload);
  REQUIRE(upload.held());
  // 70 bytes are free, but uploads already hold 30 of their 50.
  CHECK_FALSE(budget.tryAcquire(30, BufferBudget::Kind::kUpload).held());
  BufferBudget::Lease read = budget.tryAcquire(70);  // 20 of them borrowed from the uploads
  REQUIRE(read.held());
  CHECK_FALSE(budget.tryAcquire(1).held());
  // An upload does not wait for reads to give back what they borrowed...
  BufferBudget::Lease second = budget.tryAcquire(20, BufferBudget::Kind::kUpload);
  REQUIRE(second.held());
  CHECK(budget.stats().used == 120);
  CHECK(budget.stats().uploads == 50);
  // ...and reads take nothing more until they have: a new read waits.
  std::vector<std::string> order;
  asio::co_spawn(io, borrower(budget, 10, "rd", order, 0), asio::detached);
  io.poll();
  CHECK(order.empty());
  read.reset();  // 50 used: the waiting read fits
  io.run();
  CHECK(order == std::vector<std::string>{"rd"});
  auto stats = budget.stats();
  CHECK(stats.peak == 120);
  CHECK(stats.used == 50);
  CHECK(stats.overdrafts == 0);
  // An upload larger than the uploads' half is charged that much.
  upload.reset();
  second.reset();
  BufferBudget::Lease big = budget.tryAcquire(1000, BufferBudget::Kind::kUpload);
  REQUIRE(big.held());
  CHECK(big.bytes() == 50);
}

TEST_CASE("An admission wait granted before it runs out is not refused") {
  asio::io_context io;
  BufferBudget budget(100, std::chrono::seconds(60), std::chrono::seconds(60));
  BufferBudget::Lease held = budget.tryAcquire(50, BufferBudget::Kind::kUpload);
  std::vector<std::string> order;
  asio::co_spawn(io, borrower(budget, 50, "upload", order, 0, BufferBudget::Kind::kUpload),
                 asio::detached);
  io.poll();
  CHECK(order.empty());
  held.reset();
  io.run();  // returns at once: the granted wait cancelled its timer
  CHECK(order == std::vector<std::string>{"upload"});
  CHECK(budget.stats().refusals == 0);
  CHECK(budget.stats().used == 0);
}

TEST_CASE("A read holding nothing overdraws only to twice the budget, then is refused") {
  asio::io_context io;
  BufferBudget budget(100, std::chrono::milliseconds(20), std::chrono::seconds(1));
  // Clients that stopped reading hold the budget and as much again in overdrafts.
  BufferBudget::Lease stuck = budget.tryAcquire(100);
  std::vector<std::string> order;
  asio::co_spawn(io, borrower(budget, 60, "first", order, 0, BufferBudget::Kind::kRead,
                              BufferBudget::Holds::kNothing),
                 asio::detached);
  io.run_for(std::chrono::milliseconds(100));  // past the patience: 160 <= 200, granted
  CHECK(order == std::vector<std::string>{"first"});
  BufferBudget::Lease overdrawn = budget.tryAcquire(1);  // none: the budget is spent
  CHECK_FALSE(overdrawn.held());
  // Now 100 are out and a stuck overdraft of 100 more: a read holding nothing waits on
  // past its patience, and is refused at its admission wait; one holding a lease (decode
  // space under its slice) goes ahead, or it could wait on itself.
  BufferBudget::Lease stuck_overdraft =
      acquireNow(budget, 100, BufferBudget::Holds::kNothing);
  REQUIRE(stuck_overdraft.held());
  CHECK(budget.stats().used == 200);
  order.clear();
  io.restart();
  const auto start = std::chrono::steady_clock::now();
  asio::co_spawn(io, borrower(budget, 10, "nothing", order, 0, BufferBudget::Kind::kRead,
                              BufferBudget::Holds::kNothing),
                 asio::detached);
  io.run_for(std::chrono::milliseconds(200));
  CHECK(order.empty());  // past its patience, still waiting
  io.run();
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::seconds(1));
  CHECK(order == std::vector<std::string>{"nothing:refused"});
  CHECK(budget.stats().refusals == 1);
  io.restart();
  asio::co_spawn(io, borrower(budget, 10, "holding", order, 0), asio::detached);
  io.run();
  CHECK(order == std::vector<std::string>{"nothing:refused", "holding"});
  CHECK(budget.stats().peak == 210);
  CHECK(budget.stats().overdrafts == 3);
}

TEST_CASE("A read holding nothing that waits past its patience goes once bytes return") {
  asio::io_context io;
  BufferBudget budget(100, std::chrono::milliseconds(10), std::chrono::seconds(60));
  BufferBudget::Lease stuck = budget.tryAcquire(100);
  // An overdraft of 100 more, still out.
  BufferBudget::Lease over = acquireNow(budget, 100, BufferBudget::Holds::kNothing);
  REQUIRE(over.held());
  std::vector<std::string> order;
  // 200 + 50 > 200: it waits on after its patience, looking again each patience.
  asio::co_spawn(io, borrower(budget, 50, "late", order, 0, BufferBudget::Kind::kRead,
                              BufferBudget::Holds::kNothing),
                 asio::detached);
  io.run_for(std::chrono::milliseconds(60));
  CHECK(order.empty());
  over.reset();  // 100 + 50 <= 200 now: its next look overdraws
  io.run();
  CHECK(order == std::vector<std::string>{"late"});
  CHECK(budget.stats().refusals == 0);
  CHECK(budget.stats().overdrafts == 2);
  CHECK(budget.stats().used == 100);
}

TEST_CASE("A read holding nothing does not overdraw ahead of one such read queued before it") {
  asio::io_context io;
  BufferBudget budget(100, std::chrono::milliseconds(10), std::chrono::seconds(60));
  BufferBudget::Lease stuck = budget.tryAcquire(100);
  // An overdraft of 50, taken holding a lease: 150 lent.
  BufferBudget::Lease over = acquireNow(budget, 50, BufferBudget::Holds::kLease);
  REQUIRE(over.held());
  std::vector<std::string> order;
  // "big" would take 250 > 200; "small" would fit (160) but came after it.
  asio::co_spawn(io, borrower(budget, 100, "big", order, 0, BufferBudget::Kind::kRead,
                              BufferBudget::Holds::kNothing),
                 asio::detached);
  asio::co_spawn(io, borrower(budget, 10, "small", order, 0, BufferBudget::Kind::kRead,
                              BufferBudget::Holds::kNothing),
                 asio::detached);
  io.run_for(std::chrono::milliseconds(100));  // many patiences: each looked again
  CHECK(order.empty());
  over.reset();
  stuck.reset();
  io.run();
  CHECK(order == std::vector<std::string>{"big", "small"});
  CHECK(budget.stats().refusals == 0);
}

TEST_CASE("BufferBudget::dropWaiters destroys waiting coroutines without resuming them") {
  asio::io_context io;
  BufferBudget budget(10);
  BufferBudget::Lease held = budget.tryAcquire(10);
  std::vector<std::string> order;
  asio::co_spawn(io, borrower(budget, 5, "never", order, 0), asio::detached);
  io.poll();
  CHECK(budget.stats().waiting == 1);
  budget.dropWaiters();
  held.reset();
  io.run();
  CHECK(order.empty());
  CHECK(budget.stats().waiting == 0);
}

}  // namespace granary::gateway

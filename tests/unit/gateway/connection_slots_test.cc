// ConnectionSlots: the total cap and the cap per remote address, slots given back when
// they go (moved ones once), and IPv4-mapped IPv6 counted as its IPv4 address.
#include "connection_slots.h"

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

namespace granary::gateway {
namespace {

using boost::asio::ip::make_address;
using Refused = ConnectionSlots::Refused;

TEST_CASE("Connection slots: the total cap, without a cap per address") {
  ConnectionSlots slots(3, 0);
  std::vector<ConnectionSlots::Slot> held;
  for (int i = 0; i < 3; ++i) {
    auto [slot, refused] = slots.acquire(make_address("10.0.0.1"));
    REQUIRE(slot);
    CHECK(refused == Refused::kNone);
    held.push_back(std::move(slot));
  }
  auto [over, why] = slots.acquire(make_address("10.0.0.2"));
  CHECK_FALSE(over);
  CHECK(why == Refused::kTotal);
  CHECK(slots.open() == 3);
  CHECK(slots.addresses() == 0);  // not counted without the cap
  held.pop_back();
  CHECK(slots.open() == 2);
  CHECK(slots.acquire(make_address("10.0.0.2")).first);  // taken and given back at once
  CHECK(slots.open() == 2);
}

TEST_CASE("Connection slots: one address cannot take more than its share") {
  ConnectionSlots slots(10, 2);
  auto a1 = slots.acquire(make_address("10.0.0.1")).first;
  auto a2 = slots.acquire(make_address("::ffff:10.0.0.1")).first;  // the same host
  REQUIRE(a1);
  REQUIRE(a2);
  auto [a3, why] = slots.acquire(make_address("10.0.0.1"));
  CHECK_FALSE(a3);
  CHECK(why == Refused::kAddress);
  CHECK(slots.open() == 2);  // a refusal holds nothing
  auto b1 = slots.acquire(make_address("10.0.0.2")).first;
  auto c1 = slots.acquire(make_address("2001:db8::1")).first;
  CHECK(b1);
  CHECK(c1);
  CHECK(slots.addresses() == 3);
  {  // an IPv6 host counts as its /64: a new source address per connection gains nothing
    auto c2 = slots.acquire(make_address("2001:db8::ffff:2")).first;
    CHECK(c2);
    auto [c3, c3_why] = slots.acquire(make_address("2001:db8:0:0:1:2:3:4"));
    CHECK_FALSE(c3);
    CHECK(c3_why == Refused::kAddress);
    CHECK(slots.acquire(make_address("2001:db8:0:1::1")).first);  // another /64
  }
  CHECK(slots.addresses() == 3);
  {
    ConnectionSlots::Slot moved = std::move(a1);  // given back once, by the new owner
    CHECK_FALSE(a1);
    CHECK(slots.open() == 4);
  }
  CHECK(slots.open() == 3);
  CHECK(slots.acquire(make_address("10.0.0.1")).first);
  a2 = ConnectionSlots::Slot();  // assigning over a slot gives it back
  CHECK(slots.open() == 2);
  CHECK(slots.addresses() == 2);  // 10.0.0.1 holds none: forgotten
}

TEST_CASE("Connection slots: the total cap applies before the cap per address") {
  ConnectionSlots slots(2, 5);
  auto a = slots.acquire(make_address("10.0.0.1")).first;
  auto b = slots.acquire(make_address("10.0.0.2")).first;
  auto [c, why] = slots.acquire(make_address("10.0.0.3"));
  CHECK_FALSE(c);
  CHECK(why == Refused::kTotal);
  CHECK(slots.addresses() == 2);
}

}  // namespace
}  // namespace granary::gateway

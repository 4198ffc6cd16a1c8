// The gateway's connection caps: open client connections at most, all together
// (--max-connections) and from one remote address (--max-connections-per-address), so that
// one host (a slow or hostile client holding connections open) cannot take every slot.
#pragma once

#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace granary::gateway {

class ConnectionSlots {
 public:
  enum class Refused { kNone, kTotal, kAddress };

  // A connection's place under the caps, given back when it goes.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& o) noexcept
        : slots_(std::exchange(o.slots_, nullptr)), address_(std::move(o.address_)) {}
    Slot& operator=(Slot&& o) noexcept {
      if (this != &o) {
        release();
        slots_ = std::exchange(o.slots_, nullptr);
        address_ = std::move(o.address_);
      }
      return *this;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { release(); }
    explicit operator bool() const { return slots_ != nullptr; }

   private:
    friend class ConnectionSlots;
    Slot(ConnectionSlots* slots, std::string address)
        : slots_(slots), address_(std::move(address)) {}
    void release() {
      if (slots_ != nullptr) std::exchange(slots_, nullptr)->release(address_);
    }
    ConnectionSlots* slots_ = nullptr;
    std::string address_;  // empty when addresses are not counted
  };

  // `per_address` 0: no cap per address.
  ConnectionSlots(size_t total, size_t per_address) : total_(total), per_address_(per_address) {}
  ConnectionSlots(const ConnectionSlots&) = delete;
  ConnectionSlots& operator=(const ConnectionSlots&) = delete;

  // A slot for a connection from `from`, or none and which cap refused it. An IPv4 address
  // mapped into IPv6 counts as the IPv4 address; an IPv6 address counts as its /64 (one
  // host is usually given a whole /64, and could pick a new source address per connection).
  std::pair<Slot, Refused> acquire(const boost::asio::ip::address& from) {
    if (open_.fetch_add(1, std::memory_order_relaxed) >= total_) {
      open_.fetch_sub(1, std::memory_order_relaxed);
      return {Slot(), Refused::kTotal};
    }
    if (per_address_ == 0) return {Slot(this, {}), Refused::kNone};
    std::string address = canonical(from);
    {
      std::lock_guard lock(mu_);
      size_t& n = by_address_[address];
      if (n >= per_address_) {
        open_.fetch_sub(1, std::memory_order_relaxed);
        return {Slot(), Refused::kAddress};
      }
      ++n;
    }
    return {Slot(this, std::move(address)), Refused::kNone};
  }

  size_t open() const { return open_.load(std::memory_order_relaxed); }
  // Addresses holding at least one connection (counted only with a cap per address).
  size_t addresses() const {
    std::lock_guard lock(mu_);
    return by_address_.size();
  }

 private:
  static std::string canonical(const boost::asio::ip::address& a) {
    if (!a.is_v6()) return a.to_string();
    const boost::asio::ip::address_v6 v6 = a.to_v6();
    if (v6.is_v4_mapped()) {
      return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6).to_string();
    }
    boost::asio::ip::address_v6::bytes_type bytes = v6.to_bytes();
    std::fill(bytes.begin() + 8, bytes.end(), 0);
    return boost::asio::ip::address_v6(bytes).to_string() + "/64";
  }
  void release(const std::string& address) {
    if (!address.empty()) {
      std::lock_guard lock(mu_);
      auto it = by_address_.find(address);
      if (it != by_address_.end() && --it->second == 0) by_address_.erase(it);
    }
    open_.fetch_sub(1, std::memory_order_relaxed);
  }

  const size_t total_;
  const size_t per_address_;
  std::atomic<size_t> open_{0};
  mutable std::mutex mu_;
  std::unordered_map<std::string, size_t> by_address_;  // guarded by mu_
};

}  // namespace granary::gateway

// Runs a gateway coroutine to completion on an io_context in the calling thread.
#pragma once

#include <catch2/catch.hpp>

#include <exception>
#include <optional>

#include "asio.h"

namespace granary::gateway {

// Returns the task's value; rethrows an exception that escaped it.
template <typename T>
T runTask(asio::io_context& io, Task<T> task) {
  std::optional<T> out;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
    error = e;
    if (!e) out.emplace(std::move(value));
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  REQUIRE(out.has_value());
  return std::move(*out);
}

}  // namespace granary::gateway

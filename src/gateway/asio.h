// Include Asio through this header: Boost 1.74's awaitable.hpp misses <utility> under g++ 12.
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace granary::gateway {
namespace asio = boost::asio;
template <typename T>
using Task = asio::awaitable<T>;
}  // namespace granary::gateway

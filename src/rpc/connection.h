// Connection: one client TCP connection of rpc::Client, usable as a Beast
// SyncReadStream and SyncWriteStream, whose every read and write waits at most io_timeout.
//
// Why not asio::ip::tcp::socket: Asio's synchronous calls ignore SO_RCVTIMEO (on EAGAIN
// they poll() with no timeout), so a hung server would hang the calling thread forever.
// Here the fd is non-blocking and each wait is a poll() with the timeout; a timeout is
// beast::error::timeout. Private to src/rpc; not thread safe (one user at a time).
#pragma once

#include <utility>  // before Asio: Boost 1.74's headers miss it under g++ 12

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "granary/common/status.h"

namespace granary::rpc::detail {

// A connection failure: kUnavailable, retryable unless said otherwise.
inline Status connectionFailure(std::string message, bool retryable = true) {
  return Status(Status::Code::kUnavailable, std::move(message), retryable);
}

// One TCP connection, usable as a Beast SyncReadStream and SyncWriteStream.
class Connection {
 public:
  using Millis = std::chrono::milliseconds;

  // Resolves and connects to "HOST:PORT" ("[v6]:PORT"); failures are connectionFailure().
  static Result<std::unique_ptr<Connection>> open(std::string_view endpoint, Millis connect,
                                                  Millis io) {
    size_t colon = endpoint.rfind(':');
    if (colon == std::string_view::npos) {
      return fail(Status::invalidArgument("endpoint must be HOST:PORT: " + std::string(endpoint)));
    }
    std::string host(endpoint.substr(0, colon));
    std::string port(endpoint.substr(colon + 1));
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
      return fail(connectionFailure("cannot resolve " + std::string(endpoint) + ": " +
                                    ::gai_strerror(rc)));
    }
    Status last = connectionFailure("no address for " + std::string(endpoint));
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
      if (fd < 0) {
        last = Status::fromErrno(errno, "socket");
        continue;
      }
      auto conn = std::unique_ptr<Connection>(new Connection(fd, io));
      last = conn->connectTo(ai->ai_addr, ai->ai_addrlen, connect, endpoint);
      if (last.isOk()) {
        ::freeaddrinfo(res);
        return conn;
      }
    }
    ::freeaddrinfo(res);
    return fail(last);
  }

  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // A pooled connection may be reused only if the server has not closed it (nothing to
  // read, no hang-up) and no stray bytes are buffered.
  std::chrono::steady_clock::time_point idle_since;  // when it was last pooled

  bool reusable() const {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    return buffer.size() == 0 && ::poll(&p, 1, 0) == 0;
  }

  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, boost::beast::error_code& ec) {
    iovec iov[16];
    int n = fill(buffers, iov);
    for (;;) {
      ssize_t r = ::readv(fd_, iov, n);
      if (r > 0) {
        ec = {};
        return static_cast<size_t>(r);
      }
      if (r == 0) {
        ec = boost::asio::error::eof;
        return 0;
      }
      if (!retryOrWait(POLLIN, ec)) return 0;
    }
  }

  template <typename ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, boost::beast::error_code& ec) {
    iovec iov[16];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(fill(buffers, iov));
    for (;;) {
      ssize_t r = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (r >= 0) {
        ec = {};
        bytes_sent += static_cast<uint64_t>(r);
        return static_cast<size_t>(r);
      }
      if (!retryOrWait(POLLOUT, ec)) return 0;
    }
  }

  // The throwing overloads the stream concepts require (we only call the others).
  template <typename Buffers>
  size_t read_some(const Buffers& buffers) {
    return orThrow([&](boost::beast::error_code& ec) { return read_some(buffers, ec); });
  }
  template <typename Buffers>
  size_t write_some(const Buffers& buffers) {
    return orThrow([&](boost::beast::error_code& ec) { return write_some(buffers, ec); });
  }

  boost::beast::flat_buffer buffer;
  uint64_t bytes_sent = 0;  // of the current request

 private:
  Connection(int fd, Millis io) : fd_(fd), io_(io) { buffer.reserve(256 * 1024); }

  Status connectTo(const sockaddr* addr, socklen_t len, Millis timeout,
                   std::string_view endpoint) {
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string where = " " + std::string(endpoint);
    if (::connect(fd_, addr, len) == 0) return Status::ok();
    if (errno != EINPROGRESS) return connectionFailure(std::strerror(errno) + where);
    pollfd p{fd_, POLLOUT, 0};
    int r = pollFor(p, timeout);
    if (r == 0) return connectionFailure("connect timeout" + where, /*retryable=*/false);
    int err = 0;
    socklen_t elen = sizeof err;
    if (r < 0 || ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
    if (err != 0) return connectionFailure(std::strerror(err) + where);
    return Status::ok();
  }

  // poll(2) on one descriptor for at most `timeout` in all: an EINTR resumes with the time
  // left, not a fresh timeout.
  static int pollFor(pollfd& p, Millis timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
      int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
      if (r >= 0 || errno != EINTR) return r;
    }
  }

  template <typename F>
  static size_t orThrow(F op) {
    boost::beast::error_code ec;
    size_t n = op(ec);
    if (ec) throw boost::beast::system_error(ec);
    return n;
  }

  template <typename Buffers>
  static int fill(const Buffers& buffers, iovec (&iov)[16]) {
    int n = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && n < 16; ++it) {
      boost::asio::const_buffer b(*it);
      if (b.size() == 0) continue;
      iov[n].iov_base = const_cast<void*>(b.data());
      iov[n].iov_len = b.size();
      ++n;
    }
    return n;
  }

  // After a failed call: true to try again (EINTR, or the fd became ready in time).
  bool retryOrWait(short events, boost::beast::error_code& ec) {
    int err = errno;
    if (err == EINTR) return true;
    if (err != EAGAIN && err != EWOULDBLOCK) {
      ec = boost::beast::error_code(err, boost::system::system_category());
      return false;
    }
    pollfd p{fd_, events, 0};
    int r = pollFor(p, io_);
    if (r == 0) {
      ec = boost::beast::error::timeout;
      return false;
    }
    if (r < 0) {
      ec = boost::beast::error_code(errno, boost::system::system_category());
      return false;
    }
    return true;  // ready, or an error condition the next call reports
  }

  int fd_;
  Millis io_;
};

}  // namespace granary::rpc::detail

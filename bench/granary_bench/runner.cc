// granary-bench's network side (runner.h): Beast coroutines, one per connection.
#include "runner.h"

// clang-format off
#include <utility>  // before any Asio header: see TOOLCHAIN.md
// clang-format on

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fmt/core.h>
#include <memory>
#include <mutex>
#include <openssl/evp.h>
#include <pugixml.hpp>
#include <pthread.h>
#include <random>
#include <thread>
#include <unistd.h>

#include "sigv4.h"

namespace granary::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = size_t{256} << 10;   // response body bytes per read
constexpr size_t kWritePiece = size_t{1} << 20;    // request body bytes per write
constexpr size_t kCollectLimit = size_t{64} << 20;  // LIST pages and error bodies
constexpr size_t kMaxErrorSamples = 8;
constexpr uint64_t kDeleteBatch = 1000;             // keys per DeleteObjects

struct Shared {
  const RunConfig& cfg;
  tcp::resolver::results_type endpoints;
  gateway::SigningKeyCache keys;
  Payload payload;
};

// One request. The body is either `body_len` bytes of an object (from the payload pattern)
// or `text` (signed with its SHA-256).
struct Request {
  std::string_view method;
  std::string target;
  cli::HeaderList extra;  // lower-case names
  uint64_t body_len = 0;
  uint64_t body_seed = 0;
  std::optional<std::string> text;
  enum class Body { kDiscard, kVerify, kCollect } response = Body::kDiscard;
  uint64_t verify_seed = 0;
  uint64_t verify_offset = 0;
};

struct Reply {
  std::string error;  // transport or verification failure; empty: the exchange worked
  unsigned status = 0;
  std::optional<uint64_t> content_length;
  uint64_t body_bytes = 0;
  std::string body;  // kCollect, and error (non-2xx) bodies
  Clock::time_point sent_at, head_at;  // sending began; the response head was read
};

class Connection {
 public:
  Connection(const asio::any_io_executor& ex, Shared& shared) : stream_(ex), shared_(shared) {
    buffer_.reserve(64 << 10);  // else Beast reads 512 bytes per call
    chunk_.resize(kReadChunk);
  }

  asio::awaitable<Reply> exchange(const Request& r) {
    Reply out;
    out.sent_at = Clock::now();  // a connect, when needed, counts as sending
    beast::error_code ec;
    auto token = asio::redirect_error(asio::use_awaitable, ec);
    const auto timeout = std::chrono::milliseconds(
        static_cast<int64_t>(shared_.cfg.timeout_s * 1000));
    if (!open_) {
      stream_.expires_after(timeout);
      co_await stream_.async_connect(shared_.endpoints, token);
      if (ec) {
        out.error = "connect: " + ec.message();
        close();
        co_return out;
      }
      stream_.socket().set_option(tcp::no_delay(true), ec);
      buffer_.clear();
      open_ = true;
    }

    const std::string payload_hash =
        r.text ? gateway::sha256Hex(*r.text) : std::string("UNSIGNED-PAYLOAD");
    http::request<http::buffer_body> req;
    req.version(11);
    req.method_string(beast::string_view(r.method.data(), r.method.size()));
    req.target(r.target);
    for (const auto& [name, value] :
         cli::signedHeaders(r.method, r.target, shared_.cfg.endpoint.host_header, r.extra,
                            payload_hash, shared_.cfg.creds, &shared_.keys)) {
      req.set(name, value);
    }
    req.set(http::field::user_agent, "granary-bench");
    const uint64_t len = r.text ? r.text->size() : r.body_len;
    if (len > 0 || r.method == "PUT" || r.method == "POST") req.content_length(len);

    // The serializer sends the header with the first body piece, then asks for more.
    uint64_t sent = 0;
    auto next_piece = [&] {
      auto& body = req.body();
      if (sent < len) {
        std::span<const char> piece =
            r.text ? std::span<const char>(r.text->data(), r.text->size())
                   : shared_.payload.piece(r.body_seed, sent, std::min<uint64_t>(len - sent, kWritePiece));
        body.data = const_cast<char*>(piece.data());  // only read by the serializer
        body.size = piece.size();
        sent += piece.size();
        body.more = sent < len;
      } else {
        body.data = nullptr;
        body.size = 0;
        body.more = false;
      }
    };
    next_piece();
    http::request_serializer<http::buffer_body> sr(req);
    while (true) {
      stream_.expires_after(timeout);
      co_await http::async_write(stream_, sr, token);
      if (ec != http::error::need_buffer) break;
      ec = {};
      next_piece();
    }
    if (ec) {
      out.error = "sending: " + ec.message();
      close();
      co_return out;
    }

    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<uint64_t>::max());  // boost::none is broken in 1.74
    parser.skip(r.method == "HEAD");
    stream_.expires_after(timeout);
    co_await http::async_read_header(stream_, buffer_, parser, token);
    if (ec) {
      out.error = "reading the response: " + ec.message();
      close();
      co_return out;
    }
    out.head_at = Clock::now();
    out.status = parser.get().result_int();
    if (auto n = parser.content_length()) out.content_length = *n;
    const bool ok_status = out.status >= 200 && out.status < 300;
    const bool collect = r.response == Request::Body::kCollect || !ok_status;
    const bool verify = r.response == Request::Body::kVerify && ok_status;
    std::optional<uint64_t> mismatch_at;
    if (collect && out.content_length) {
      out.body.reserve(std::min<uint64_t>(*out.content_length, kCollectLimit));
    }
    while (!parser.is_done()) {
      parser.get().body().data = chunk_.data();
      parser.get().body().size = chunk_.size();
      stream_.expires_after(timeout);
      co_await http::async_read(stream_, buffer_, parser, token);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        out.error = "reading the response body: " + ec.message();
        close();
        co_return out;
      }
      const size_t n = chunk_.size() - parser.get().body().size;
      std::span<const char> got(chunk_.data(), n);
      if (collect) {
        if (out.body.size() + n > kCollectLimit) {
          out.error = "response body too large";
          close();
          co_return out;
        }
        out.body.append(got.data(), got.size());
      } else if (verify && !mismatch_at &&
                 !shared_.payload.matches(r.verify_seed, r.verify_offset + out.body_bytes, got)) {
        mismatch_at = r.verify_offset + out.body_bytes;
      }
      out.body_bytes += n;
    }
    if (!parser.get().keep_alive()) close();
    if (mismatch_at) {
      out.error = fmt::format("wrong bytes in the chunk at offset {}", *mismatch_at);
    }
    co_return out;
  }

 private:
  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    open_ = false;
  }

  beast::tcp_stream stream_;
  Shared& shared_;
  beast::flat_buffer buffer_;
  std::vector<char> chunk_;
  bool open_ = false;
};

std::string objectKey(std::string_view prefix, uint64_t index) {
  return fmt::format("{}obj-{:08d}", prefix, index);
}

// "503 SlowDown: message" from a non-2xx reply.
std::string describe(std::string_view what, const Reply& reply) {
  if (!reply.error.empty()) return fmt::format("{}: {}", what, reply.error);
  cli::S3ErrorBody err = cli::parseErrorBody(reply.body);
  if (err.code.empty()) return fmt::format("{}: HTTP {}", what, reply.status);
  return fmt::format("{}: {} {}: {}", what, reply.status, err.code, err.message);
}

// The state of one workload while it runs.
struct WorkloadRun {
  explicit WorkloadRun(const WorkloadSpec& s) : spec(s) {
    for (const MixEntry& e : spec.mix) {
      mix_total += e.weight;
      mix_bounds.push_back(mix_total);
    }
    next_put = spec.op ? 0 : spec.objects;  // a mix's PUTs never touch prepared objects
    put_start = next_put;
  }

  const WorkloadSpec& spec;
  std::vector<unsigned> mix_bounds;
  unsigned mix_total = 0;
  uint64_t put_start = 0;
  std::atomic<uint64_t> tickets{0};
  std::atomic<uint64_t> next_due{0};  // a paced workload's next operation (spec.rate)
  std::atomic<uint64_t> next_put{0};
  std::atomic<uint64_t> next_delete{0};
  std::atomic<bool> exhausted{false};  // op=delete ran out of objects
  // Live figures for the progress line.
  std::atomic<uint64_t> live_ops{0}, live_bytes{0}, live_errors{0};
  std::atomic<unsigned> workers_left{0};
  Clock::time_point start, end;

  std::mutex mu;  // guards what follows
  std::deque<uint64_t> deletable;  // keys a mix PUT, that its DELETEs may remove
  WorkloadStats stats;
  std::vector<std::string> errors;

  void noteError(std::string what) {
    std::lock_guard lock(mu);
    if (errors.size() < kMaxErrorSamples) errors.push_back(std::move(what));
  }
  Op pick(std::mt19937_64& rng) const {
    if (spec.op) return *spec.op;
    unsigned r = static_cast<unsigned>(rng() % mix_total);
    size_t i = 0;
    while (r >= mix_bounds[i]) ++i;
    return spec.mix[i].op;
  }
};

struct Outcome {
  Op op = Op::kGet;
  bool ok = false;
  uint64_t bytes = 0;
  uint64_t items = 0;
  std::string error;
  bool skip = false;  // nothing done (op=delete out of objects)
  Clock::time_point sent_at, head_at;  // the exchange's (Reply)
};

struct ListState {
  std::string token;
  uint64_t pass_keys = 0;
};

std::string bucketPath(const RunConfig& cfg, std::vector<std::pair<std::string, std::optional<std::string>>> query = {}) {
  cli::S3Request r;
  r.bucket = cfg.bucket;
  r.query = std::move(query);
  return cli::requestTarget(r);
}

std::string objectPath(const RunConfig& cfg, const std::string& key) {
  cli::S3Request r;
  r.bucket = cfg.bucket;
  r.key = key;
  return cli::requestTarget(r);
}

asio::awaitable<Outcome> doOp(Op op, Connection& conn, Shared& sh, WorkloadRun& w,
                              std::mt19937_64& rng, ListState& list) {
  const WorkloadSpec& spec = w.spec;
  Outcome out;
  out.op = op;
  Request req;
  std::string key;
  if (op == Op::kDelete && !spec.op) {  // a mix deletes what it put, else puts
    std::lock_guard lock(w.mu);
    if (w.deletable.empty()) {
      op = out.op = Op::kPut;
    } else {
      key = objectKey(w.spec.prefix, w.deletable.front());
      w.deletable.pop_front();
    }
  }
  uint64_t put_index = 0;
  uint64_t range_len = 0;
  switch (op) {
    case Op::kPut: {
      put_index = w.next_put.fetch_add(1);
      key = objectKey(w.spec.prefix, spec.op && spec.objects ? put_index % spec.objects : put_index);
      req.method = "PUT";
      req.body_len = spec.size;
      req.body_seed = sh.payload.seedFor(key);
      break;
    }
    case Op::kGet:
    case Op::kHead: {
      key = objectKey(w.spec.prefix, rng() % spec.objects);
      req.method = op == Op::kGet ? "GET" : "HEAD";
      req.response = Request::Body::kVerify;
      req.verify_seed = sh.payload.seedFor(key);
      break;
    }
    case Op::kRange: {
      key = objectKey(w.spec.prefix, rng() % spec.objects);
      uint64_t hi = std::min(spec.range_max, spec.size);
      uint64_t len = spec.range_min + rng() % (hi - spec.range_min + 1);
      uint64_t off = rng() % (spec.size - len + 1);
      req.method = "GET";
      req.extra.emplace_back("range", fmt::format("bytes={}-{}", off, off + len - 1));
      req.response = Request::Body::kVerify;
      req.verify_seed = sh.payload.seedFor(key);
      req.verify_offset = off;
      range_len = len;
      break;
    }
    case Op::kDelete: {
      if (key.empty()) {
        uint64_t i = w.next_delete.fetch_add(1);
        if (i >= spec.objects) {
          w.exhausted = true;
          out.skip = true;
          co_return out;
        }
        key = objectKey(w.spec.prefix, i);
      }
      req.method = "DELETE";
      break;
    }
    case Op::kList: {
      std::vector<std::pair<std::string, std::optional<std::string>>> query = {
          {"list-type", "2"}, {"max-keys", std::to_string(spec.list_page)}, {"prefix", w.spec.prefix}};
      if (!list.token.empty()) query.emplace_back("continuation-token", list.token);
      req.method = "GET";
      req.target = bucketPath(sh.cfg, std::move(query));
      req.response = Request::Body::kCollect;
      break;
    }
  }
  if (req.target.empty()) req.target = objectPath(sh.cfg, key);

  Reply reply = co_await conn.exchange(req);
  out.sent_at = reply.sent_at;
  out.head_at = reply.head_at;
  const std::string what = fmt::format("{} {}", opName(op), key.empty() ? w.spec.prefix : key);
  if (!reply.error.empty()) {
    out.error = describe(what, reply);
    co_return out;
  }
  switch (op) {
    case Op::kPut:
      out.ok = reply.status == 200;
      out.bytes = spec.size;
      if (out.ok && !spec.op) {
        std::lock_guard lock(w.mu);
        w.deletable.push_back(put_index);
      }
      break;
    case Op::kGet:
      out.ok = reply.status == 200 && reply.body_bytes == spec.size;
      out.bytes = reply.body_bytes;
      if (reply.status == 200 && !out.ok) {
        out.error = fmt::format("{}: {} bytes, expected {}", what, reply.body_bytes, spec.size);
      }
      break;
    case Op::kRange:
      out.ok = reply.status == 206 && reply.body_bytes == range_len;
      out.bytes = reply.body_bytes;
      if (reply.status == 206 && !out.ok) {
        out.error = fmt::format("{}: {} bytes, expected {}", what, reply.body_bytes, range_len);
      }
      break;
    case Op::kHead:
      out.ok = reply.status == 200 && reply.content_length == spec.size;
      if (reply.status == 200 && !out.ok) out.error = what + ": wrong Content-Length";
      break;
    case Op::kDelete:
      out.ok = reply.status == 204 || reply.status == 200;
      break;
    case Op::kList: {
      if (reply.status != 200) break;
      pugi::xml_document doc;
      pugi::xml_node root;
      // In place: the page is parsed where it was read, not copied first.
      if (doc.load_buffer_inplace(reply.body.data(), reply.body.size())) {
        root = doc.child("ListBucketResult");
      }
      if (!root) {
        out.error = what + ": the response is not a ListBucketResult";
        break;
      }
      for (auto c = root.child("Contents"); c; c = c.next_sibling("Contents")) ++out.items;
      list.pass_keys += out.items;
      out.bytes = reply.body_bytes;
      out.ok = true;
      if (std::string_view(root.child_value("IsTruncated")) == "true") {
        list.token = root.child_value("NextContinuationToken");
        if (list.token.empty()) {
          out.ok = false;
          out.error = what + ": truncated listing without a NextContinuationToken";
        }
      } else {  // a full pass: it must have seen every object
        if (list.pass_keys != spec.objects) {
          out.ok = false;
          out.error = fmt::format("{}: a full listing returned {} keys, expected {}", what,
                                  list.pass_keys, spec.objects);
        }
        list = {};
      }
      break;
    }
  }
  if (!out.ok && out.error.empty()) out.error = describe(what, reply);
  co_return out;
}

asio::awaitable<void> worker(Shared& sh, WorkloadRun& w, unsigned id, Clock::time_point deadline) {
  Connection conn(co_await asio::this_coro::executor, sh);
  std::mt19937_64 rng(std::hash<std::string>{}(w.spec.name) ^ (0x9E3779B97F4A7C15ull * (id + 1)));
  WorkloadStats local;
  ListState list;
  asio::steady_timer pace(co_await asio::this_coro::executor);
  while (Clock::now() < deadline && !w.exhausted) {
    if (w.spec.count && w.tickets.fetch_add(1) >= w.spec.count) break;
    Clock::time_point t0 = Clock::now();
    if (w.spec.rate > 0) {
      // Operation i is due at start + i / rate. A connection that finds it overdue sends
      // it at once, and its latency counts from when it was due: waiting for a connection
      // is part of what a reader at this pace sees (no coordinated omission, as in wrk2).
      const uint64_t i = w.next_due.fetch_add(1);
      const auto due = w.start + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(static_cast<double>(i) /
                                                                   w.spec.rate));
      if (due >= deadline) break;
      if (due > t0) {
        pace.expires_at(due);
        beast::error_code ignored;
        co_await pace.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      }
      t0 = due;
    }
    Op op = w.pick(rng);
    Outcome o = co_await doOp(op, conn, sh, w, rng, list);
    if (o.skip) break;
    const auto end = Clock::now();
    auto us = [](Clock::duration d) {
      return static_cast<uint64_t>(
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
    };
    OpStats& s = local[static_cast<size_t>(o.op)];
    if (o.ok) {
      s.record(us(end - t0), o.bytes, o.items,
               {us(o.sent_at - t0), us(o.head_at - o.sent_at), us(end - o.head_at)});
      w.live_ops.fetch_add(1, std::memory_order_relaxed);
      w.live_bytes.fetch_add(o.bytes, std::memory_order_relaxed);
    } else {
      ++s.errors;
      w.live_errors.fetch_add(1, std::memory_order_relaxed);
      w.noteError(std::move(o.error));
      // Back off a little after a failure, so a dead endpoint is not hammered.
      asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(10));
      beast::error_code ignored;
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
  }
  std::lock_guard lock(w.mu);
  for (size_t i = 0; i < kOpCount; ++i) w.stats[i].merge(local[i]);
  if (--w.workers_left == 0) w.end = Clock::now();
}

// Runs coroutines spawned by `spawn(loop)` until all finish, calling tick() about once a
// second meanwhile. Each group of connections (named in `groups`) has `threads` threads of
// its own, named "gb-<group>": `loop(g)` gives group g's threads in turn. Workloads are
// groups of their own, so that one class's work (a checkpoint's large bodies) never holds
// up another's connections in this process: in use they are separate clients.
template <typename Spawn, typename Tick>
void runPhase(unsigned threads, const std::vector<std::string>& groups, Spawn&& spawn,
              Tick&& tick) {
  std::vector<std::unique_ptr<asio::io_context>> loops;
  for (size_t i = 0; i < threads * groups.size(); ++i) {
    loops.push_back(std::make_unique<asio::io_context>(1));
  }
  std::vector<unsigned> next(groups.size(), 0);
  spawn([&](size_t g) -> asio::io_context& { return *loops[g * threads + next[g]++ % threads]; });
  std::atomic<size_t> running{loops.size()};
  std::vector<std::thread> pool;
  for (size_t i = 0; i < loops.size(); ++i) {
    pool.emplace_back([&running, &loop = *loops[i]] {
      loop.run();
      --running;
    });
    // For per-thread CPU figures (top -H, bench/cpu_share.sh); at most 15 characters.
    const std::string name = ("gb-" + groups[i / threads]).substr(0, 15);
    pthread_setname_np(pool.back().native_handle(), name.c_str());
  }
  auto last = Clock::now();
  while (running > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (Clock::now() - last >= std::chrono::seconds(1)) {
      last += std::chrono::seconds(1);
      tick();
    }
  }
  for (auto& t : pool) t.join();
}

// One exchange outside the workloads (bucket creation).
Reply oneExchange(Shared& sh, const Request& req) {
  asio::io_context ioc(1);
  Reply reply;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        Connection conn(co_await asio::this_coro::executor, sh);
        reply = co_await conn.exchange(req);
      },
      asio::detached);
  ioc.run();
  return reply;
}

std::string contentMd5(std::string_view body) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(body.data(), body.size(), md, &n, EVP_md5(), nullptr);
  unsigned char out[64];
  int len = EVP_EncodeBlock(out, md, static_cast<int>(n));
  return std::string(reinterpret_cast<char*>(out), static_cast<size_t>(len));
}

std::string deleteObjectsBody(const std::string& prefix, uint64_t first, uint64_t last) {
  pugi::xml_document doc;
  pugi::xml_node del = doc.append_child("Delete");
  del.append_child("Quiet").text().set("true");
  for (uint64_t i = first; i < last; ++i) {
    del.append_child("Object").append_child("Key").text().set(objectKey(prefix, i).c_str());
  }
  std::ostringstream out;
  doc.save(out, "", pugi::format_raw);
  return out.str();
}

// Deletes keys [first, last) of each prefix with DeleteObjects, 1000 a request.
struct CleanupRange {
  std::string prefix;
  uint64_t first, last;
};
uint64_t cleanup(Shared& sh, const std::vector<CleanupRange>& ranges, std::vector<std::string>& errors) {
  struct Batch {
    const std::string* prefix;
    uint64_t first, last;
  };
  std::vector<Batch> batches;
  for (const auto& r : ranges) {
    for (uint64_t i = r.first; i < r.last; i += kDeleteBatch) {
      batches.push_back({&r.prefix, i, std::min(r.last, i + kDeleteBatch)});
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> failed{0};
  std::mutex mu;
  auto deleter = [&]() -> asio::awaitable<void> {
    Connection conn(co_await asio::this_coro::executor, sh);
    for (size_t b; (b = next.fetch_add(1)) < batches.size();) {
      Request req;
      req.method = "POST";
      req.target = bucketPath(sh.cfg, {{"delete", std::nullopt}});
      req.text = deleteObjectsBody(*batches[b].prefix, batches[b].first, batches[b].last);
      req.extra.emplace_back("content-md5", contentMd5(*req.text));
      req.response = Request::Body::kCollect;
      Reply reply = co_await conn.exchange(req);
      const bool key_errors = reply.body.find("<Error>") != std::string::npos;
      if (!reply.error.empty() || reply.status != 200 || key_errors) {
        failed += batches[b].last - batches[b].first;
        std::lock_guard lock(mu);
        if (errors.size() < kMaxErrorSamples) errors.push_back(describe("cleanup", reply));
      }
    }
  };
  runPhase(
      sh.cfg.threads, {"cleanup"},
      [&](auto loop) {
        for (unsigned i = 0; i < std::min<size_t>(8, batches.size()); ++i) {
          asio::co_spawn(loop(0), deleter(), asio::detached);
        }
      },
      [] {});
  return failed;
}

void printProgress(double elapsed, std::vector<std::unique_ptr<WorkloadRun>>& runs,
                   std::vector<std::array<uint64_t, 2>>& last) {
  std::string line = fmt::format("{:6.0f}s", elapsed);
  for (size_t i = 0; i < runs.size(); ++i) {
    auto& w = *runs[i];
    uint64_t ops = w.live_ops.load(), bytes = w.live_bytes.load();
    line += fmt::format(" | {} {:.0f} op/s {:.1f} MB/s err {}", w.spec.name,
                        static_cast<double>(ops - last[i][0]),
                        static_cast<double>(bytes - last[i][1]) / 1e6, w.live_errors.load());
    last[i] = {ops, bytes};
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

Result<RunResult> run(RunConfig cfg) {
  if (cfg.threads == 0) cfg.threads = 1;
  RunResult result;
  Shared sh{cfg, {}, {}, Payload()};
  {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    sh.endpoints = resolver.resolve(cfg.endpoint.host, cfg.endpoint.port, ec);
    if (ec) return fail(Status::unavailable("cannot resolve " + cfg.endpoint.host + ": " + ec.message()));
  }

  // The bucket: created unless it exists and is ours.
  if (cfg.create_bucket) {
    Request mb;
    mb.method = "PUT";
    mb.target = bucketPath(cfg);
    Reply made = oneExchange(sh, mb);
    if (!made.error.empty() ||
        (made.status != 200 && cli::parseErrorBody(made.body).code != "BucketAlreadyOwnedByYou")) {
      return fail(Status::unavailable(describe("creating bucket " + cfg.bucket, made)));
    }
  }

  std::vector<std::unique_ptr<WorkloadRun>> runs;
  for (const WorkloadSpec& spec : cfg.workloads) {
    if (spec.prefix.empty()) {
      return fail(Status::invalidArgument("workload " + spec.name + " has no key prefix"));
    }
    runs.push_back(std::make_unique<WorkloadRun>(spec));
  }

  // Prepare: PUT objects [0, objects) of each workload that reads them.
  std::vector<WorkloadSpec> prep_specs;
  prep_specs.reserve(runs.size());  // WorkloadRun keeps a reference to its spec
  std::vector<std::unique_ptr<WorkloadRun>> preps;
  for (const auto& w : runs) {
    if (!w->spec.needsObjects() || !w->spec.prepare) continue;
    WorkloadSpec& p = prep_specs.emplace_back();
    p.name = w->spec.name + ".prepare";
    p.op = Op::kPut;
    p.size = w->spec.op == Op::kList ? 0 : w->spec.size;
    p.count = w->spec.objects;
    p.prefix = w->spec.prefix;
    preps.push_back(std::make_unique<WorkloadRun>(p));
  }
  if (!preps.empty()) {
    auto t0 = Clock::now();
    std::vector<std::array<uint64_t, 2>> last(preps.size());
    runPhase(
        cfg.threads, {"prepare"},
        [&](auto loop) {
          for (auto& p : preps) {
            unsigned n = static_cast<unsigned>(
                std::min<uint64_t>(cfg.prepare_concurrency, std::max<uint64_t>(p->spec.count, 1)));
            p->workers_left = n;
            for (unsigned i = 0; i < n; ++i) {
              asio::co_spawn(loop(0), worker(sh, *p, i, Clock::time_point::max()), asio::detached);
            }
          }
        },
        [&] {
          if (cfg.progress) {
            printProgress(std::chrono::duration<double>(Clock::now() - t0).count(), preps, last);
          }
        });
    const double prepare_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    uint64_t prepared = 0;
    for (auto& p : preps) {
      const OpStats& s = p->stats[static_cast<size_t>(Op::kPut)];
      prepared += s.ops;
      if (s.errors) {
        return fail(Status::unavailable(fmt::format(
            "preparing {}: {} of {} PUTs failed; first: {}", p->spec.name, s.errors, p->spec.count,
            p->errors.empty() ? "?" : p->errors.front())));
      }
    }
    // Printed now, not with the results: bench/perf_get.sh waits for it to know that the
    // measured phase has begun.
    std::printf("prepared %llu objects in %.1fs\n", static_cast<unsigned long long>(prepared),
                prepare_seconds);
    std::fflush(stdout);
  }

  // The measured phase: every workload at once.
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(cfg.duration_s * 1000));
  std::vector<std::array<uint64_t, 2>> last(runs.size());
  std::vector<std::string> names;
  for (const auto& w : runs) names.push_back(w->spec.name);
  runPhase(
      cfg.threads, names,
      [&](auto loop) {
        for (size_t g = 0; g < runs.size(); ++g) {
          WorkloadRun* w = runs[g].get();
          w->start = start;
          w->end = start;
          w->workers_left = w->spec.concurrency;
          for (unsigned i = 0; i < w->spec.concurrency; ++i) {
            asio::co_spawn(loop(g), worker(sh, *w, i, deadline), asio::detached);
          }
        }
      },
      [&] {
        if (cfg.progress) {
          printProgress(std::chrono::duration<double>(Clock::now() - start).count(), runs, last);
        }
      });

  // Clean up what the run created.
  std::vector<CleanupRange> ranges;
  for (auto& w : runs) {
    if (!w->spec.cleanup) continue;
    if (w->spec.needsObjects() && w->spec.prepare) ranges.push_back({w->spec.prefix, 0, w->spec.objects});
    uint64_t put_end = w->next_put.load();
    if (w->spec.op == Op::kPut && w->spec.objects) put_end = std::min(put_end, w->spec.objects);
    if (put_end > w->put_start) ranges.push_back({w->spec.prefix, w->put_start, put_end});
  }
  std::vector<std::string> cleanup_errors;
  uint64_t not_deleted = ranges.empty() ? 0 : cleanup(sh, ranges, cleanup_errors);
  if (not_deleted) {
    std::fprintf(stderr, "granary-bench: cleanup left up to %llu keys behind; first error: %s\n",
                 static_cast<unsigned long long>(not_deleted),
                 cleanup_errors.empty() ? "?" : cleanup_errors.front().c_str());
  }

  for (auto& w : runs) {
    WorkloadResult r;
    r.spec = w->spec;
    r.stats = std::move(w->stats);
    r.seconds = std::chrono::duration<double>(w->end - w->start).count();
    r.error_samples = std::move(w->errors);
    result.workloads.push_back(std::move(r));
  }
  return result;
}

}  // namespace granary::bench

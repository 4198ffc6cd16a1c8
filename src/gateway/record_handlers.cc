// The record index's HTTP API (docs/record-index.md): record GET/HEAD by key, listing by
// key prefix, streamed batch GET, batch insert of externally built rows, and the rows of
// one container in order. Authentication and errors are the S3 API's.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include "granary/common/base64.h"
#include "granary/common/clock.h"
#include "granary/common/strings.h"
#include "granary/ec/erasure_code.h"
#include "granary/gateway/record_limits.h"
#include "handlers.h"
#include "http_text.h"
#include "records.h"

namespace granary::gateway {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxInsertBody = 64u << 20;
// Held in memory until the insert ends (~130 bytes each, besides the body): 64 MiB of the
// shortest rows would be 1.9 million.
constexpr size_t kMaxInsertRows = 1u << 20;
constexpr size_t kInsertChunk = 8192;
constexpr uint64_t kMaxInsertCrcBytes = 1ull << 30;
constexpr uint64_t kMaxInsertCrcSpans = 10000;


// readSmallBody's "too large" names XML's limit; JSON bodies say what they are.
S3Error bodyError(const S3Error& e, size_t limit) {
  if (e.code != S3ErrorCode::kMaxMessageLengthExceeded) return e;
  return {S3ErrorCode::kInvalidArgument, fmt::format("The request body is over {} bytes.", limit)};
}

std::string crcHex(uint32_t crc) { return fmt::format("{:08x}", crc); }

// A record key in a JSON answer. Keys are bytes (a Latin-1 tar member name, a raw byte in
// a WARC URI) and JSON strings are UTF-8: "key" is the key with invalid UTF-8 replaced
// (U+FFFD) for reading, and such a key also comes as "key_b64", its bytes exactly.
void putKey(Json& j, const std::string& key) {
  j["key"] = key;
  if (!strictUtf8(key)) j["key_b64"] = base64Encode(key);
}

// A record key in a JSON request: "key", or "key_b64" for a key that is not UTF-8.
// kInvalidArgument names what is wrong; nullopt: neither is given.
std::optional<S3Result<std::string>> requestKey(const Json& e) {
  auto key = e.find("key");
  auto b64 = e.find("key_b64");
  if (key != e.end() && b64 != e.end()) {
    return s3fail(S3ErrorCode::kInvalidArgument, "Give key or key_b64, not both.");
  }
  if (b64 != e.end()) {
    auto bytes = b64->is_string() ? base64Decode(b64->get_ref<const std::string&>())
                                  : std::nullopt;
    if (!bytes) return s3fail(S3ErrorCode::kInvalidArgument, "key_b64 must be base64.");
    return std::string(bytes->begin(), bytes->end());
  }
  if (key == e.end()) return std::nullopt;
  if (!key->is_string()) return s3fail(S3ErrorCode::kInvalidArgument, "key must be a string.");
  return key->get<std::string>();
}

Json locationJson(const index_kv::RecordLocation& l) {
  Json j = Json::object();
  putKey(j, l.row.key);
  j["container"] = l.row.container;
  j["offset"] = l.row.offset;
  j["length"] = l.row.length;
  j["crc32c"] = crcHex(l.row.crc32c);
  if (!l.row.type.empty()) j["type"] = l.row.type;
  j["container_version"] = l.container_version.toHex();
  return j;
}

void locationHeaders(S3Response& res, const index_kv::RecordLocation& l) {
  res.set("x-granary-record-container", l.row.container);
  res.set("x-granary-record-offset", std::to_string(l.row.offset));
  res.set("x-granary-record-length", std::to_string(l.row.length));
  res.set("x-granary-record-crc32c", crcHex(l.row.crc32c));
  res.set("x-granary-record-container-version", l.container_version.toHex());
  if (!l.row.type.empty()) res.set("x-granary-record-type", l.row.type);
}

std::string contentTypeOf(const RecordData& d, bool raw) {
  if (d.format == "warc") return "application/warc";
  if (d.format == "warc.gz") return raw ? "application/gzip" : "application/warc";
  return "application/octet-stream";
}

// A flag of the query: absent, "0" or "false" (any case) is false; present bare, "1" or
// "true" is true; anything else ("yes", a typo) is refused rather than read as false.
S3Result<bool> queryFlag(const S3Request& req, std::string_view name) {
  const auto v = req.queryValue(name);
  if (!v) return false;
  const std::string lower = asciiLower(*v);
  if (lower.empty() || lower == "1" || lower == "true") return true;
  if (lower == "0" || lower == "false") return false;
  return s3fail(S3ErrorCode::kInvalidArgument,
                fmt::format("{} must be true or false", name));
}

S3Result<size_t> maxRecordsOf(const S3Request& req, size_t dflt, size_t cap) {
  auto v = req.queryValue("max-records");
  if (!v) return dflt;
  const auto n = parseDecimalU64(*v);
  if (!n || *n == 0) {
    return s3fail(S3ErrorCode::kInvalidArgument, "max-records must be a positive integer");
  }
  return static_cast<size_t>(std::min<uint64_t>(*n, cap));
}

Task<std::optional<S3Error>> checkBucket(GatewayContext& ctx, const S3Request& req) {
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b) co_return fromStatus(b.error(), S3ErrorCode::kNoSuchBucket);
  co_return std::nullopt;
}

// An offset selects one row of a named container (records.h).
std::optional<S3Error> checkOffset(const RecordSelector& s) {
  if (s.offset && s.container.empty()) {
    return S3Error{S3ErrorCode::kInvalidArgument, "An offset needs the container it is in."};
  }
  return std::nullopt;
}

S3Result<RecordSelector> selectorOf(const S3Request& req) {
  RecordSelector s;
  s.key = std::string(req.queryValue("key").value_or(""));
  s.container = std::string(req.queryValue("container").value_or(""));
  if (auto t = req.queryValue("type")) s.type = std::string(*t);
  auto raw = queryFlag(req, "raw");
  if (!raw) return std::unexpected(raw.error());
  s.raw = *raw;
  if (auto o = req.queryValue("offset")) {
    s.offset = parseDecimalU64(*o);
    if (!s.offset) {
      return s3fail(S3ErrorCode::kInvalidArgument, "offset must be a non-negative integer");
    }
  }
  if (auto bad = checkOffset(s)) return std::unexpected(*bad);
  return s;
}

}  // namespace

Task<S3Response> getRecord(GatewayContext& ctx, const S3Request& req, BodySink& sink,
                           bool head_only) {
  auto parsed = selectorOf(req);
  if (!parsed) co_return errorResponse(parsed.error(), req);
  RecordSelector selector = std::move(*parsed);
  if (selector.key.empty()) {
    co_return errorResponse({S3ErrorCode::kInvalidArgument, "The key parameter is required."}, req);
  }
  if (auto err = co_await checkBucket(ctx, req)) co_return errorResponse(*err, req);
  auto record = co_await readRecord(ctx, req.bucket, selector);
  if (!record) co_return errorResponse(record.error(), req);
  S3Response res;
  res.set("Content-Type", contentTypeOf(*record, selector.raw));
  locationHeaders(res, record->location);
  if (head_only) {
    res.streamed = true;
    Status st = co_await sink.writeHead(res, record->body.size());
    if (!st.isOk()) res.close = true;
    co_return res;
  }
  res.streamed = true;
  Status st = co_await sink.writeHead(res, record->body.size());
  if (st.isOk()) st = co_await writeInPieces(sink, record->body);
  if (!st.isOk()) res.close = true;
  ctx.metrics.bytesOut(record->body.size());
  co_return res;
}

Task<S3Response> listRecords(GatewayContext& ctx, const S3Request& req) {
  index_kv::RecordQuery q;
  if (auto k = req.queryValue("key")) {
    if (req.queryValue("prefix")) {
      co_return errorResponse(
          {S3ErrorCode::kInvalidArgument, "Give either key or prefix, not both."}, req);
    }
    q.key = std::string(*k);
    if (q.key->empty()) {
      co_return errorResponse({S3ErrorCode::kInvalidArgument, "The key parameter is empty."}, req);
    }
  }
  q.prefix = std::string(req.queryValue("prefix").value_or(""));
  q.container = std::string(req.queryValue("container").value_or(""));
  q.type = std::string(req.queryValue("type").value_or(""));
  if (q.type == "*") q.type.clear();
  auto max = maxRecordsOf(req, 1000, 1000);
  if (!max) co_return errorResponse(max.error(), req);
  q.limit = *max;
  if (auto token = req.queryValue("continuation-token")) {
    auto raw = base64Decode(*token);
    if (!raw || raw->empty()) {
      co_return errorResponse(
          {S3ErrorCode::kInvalidArgument, "The continuation token provided is incorrect"}, req);
    }
    q.start_after.assign(raw->begin(), raw->end());
  }
  if (auto err = co_await checkBucket(ctx, req)) co_return errorResponse(*err, req);
  auto page = co_await offload(ctx.pool(), [&] { return ctx.index().listRecords(req.bucket, q); });
  if (!page) co_return errorResponse(fromStatus(page.error(), S3ErrorCode::kNoSuchBucket), req);
  Json out = Json::object();
  out["bucket"] = req.bucket;
  Json records = Json::array();
  for (const auto& l : page->records) records.push_back(locationJson(l));
  out["records"] = std::move(records);
  out["is_truncated"] = page->truncated;
  if (page->truncated) {
    out["next_continuation_token"] = base64Encode(
        {reinterpret_cast<const uint8_t*>(page->next.data()), page->next.size()});
  }
  co_return jsonResponse(out);
}

Task<S3Response> batchGetRecords(GatewayContext& ctx, const S3Request& req, BodySource& body,
                                 BodySink& sink) {
  auto text = co_await readSmallBody(req, body, kMaxBatchGetBody);
  if (!text) co_return errorResponse(bodyError(text.error(), kMaxBatchGetBody), req, body);
  // Parsed on the pool (8 MiB of JSON takes a while), counting the values inside the
  // top-level object's members as they are read: an 8 MiB body of `"a",` is two million
  // entries, and those past the limit are dropped unbuilt.
  bool too_many = false;
  Json j = co_await offload(ctx.pool(), [&] {
    size_t entries = 0;
    return Json::parse(
        *text,
        [&](int depth, Json::parse_event_t event, Json&) {
          if (depth != 2 || (event != Json::parse_event_t::value &&
                             event != Json::parse_event_t::object_start &&
                             event != Json::parse_event_t::array_start)) {
            return true;
          }
          too_many = too_many || ++entries > kMaxBatchGetKeys;
          return !too_many;
        },
        /*allow_exceptions=*/false);
  });
  if (too_many) {
    co_return errorResponse({S3ErrorCode::kInvalidArgument,
                             fmt::format("At most {} records per batch.", kMaxBatchGetKeys)},
                            req);
  }
  if (j.is_discarded() || !j.is_object() || !j.contains("records") || !j["records"].is_array()) {
    co_return errorResponse({S3ErrorCode::kInvalidArgument,
                             "The body must be a JSON object with a \"records\" array."},
                            req);
  }
  std::string type = "response";
  bool raw = false;
  if (auto it = j.find("type"); it != j.end()) {
    if (!it->is_string()) co_return errorResponse({S3ErrorCode::kInvalidArgument, "type must be a string"}, req);
    type = it->get<std::string>();
  }
  if (auto it = j.find("raw"); it != j.end()) {
    if (!it->is_boolean()) co_return errorResponse({S3ErrorCode::kInvalidArgument, "raw must be a boolean"}, req);
    raw = it->get<bool>();
  }
  std::vector<RecordSelector> wanted;
  for (const Json& e : j["records"]) {
    RecordSelector s;
    s.type = type;
    s.raw = raw;
    std::optional<S3Result<std::string>> key;
    if (e.is_object()) key = requestKey(e);
    if (e.is_string()) {
      s.key = e.get<std::string>();
    } else if (key) {
      if (!*key) co_return errorResponse(key->error(), req);
      s.key = std::move(**key);
      if (auto c = e.find("container"); c != e.end()) {
        if (!c->is_string()) co_return errorResponse({S3ErrorCode::kInvalidArgument, "container must be a string"}, req);
        s.container = c->get<std::string>();
      }
      if (auto o = e.find("offset"); o != e.end()) {
        if (!o->is_number_unsigned()) {
          co_return errorResponse({S3ErrorCode::kInvalidArgument,
                                   "offset must be a non-negative integer"},
                                  req);
        }
        s.offset = o->get<uint64_t>();
      }
      if (auto bad = checkOffset(s)) co_return errorResponse(*bad, req);
    } else {
      co_return errorResponse({S3ErrorCode::kInvalidArgument,
                               "Each record is a key string or {\"key\" (or \"key_b64\"): "
                               "..., \"container\": ..., \"offset\": ...}."},
                              req);
    }
    if (s.key.empty()) co_return errorResponse({S3ErrorCode::kInvalidArgument, "A record key is empty."}, req);
    wanted.push_back(std::move(s));
  }
  if (auto err = co_await checkBucket(ctx, req)) co_return errorResponse(*err, req);

  // Every lookup, then each container's manifest once, in parts on the pool at once:
  // with the index a service, each is a round trip, and 10,000 of them one after another
  // kept the first record waiting for seconds. A part is a task: the pool's queue gets a
  // few, not thousands ahead of other requests' work.
  // Up to a quarter of the workers (8 at most): two large batches leave the others free.
  const size_t parts = std::clamp<size_t>(ctx.pool().threads() / 4, 1, 8);
  const asio::any_io_executor ex = co_await asio::this_coro::executor;
  auto inParts = [&](size_t n, auto&& fn) -> Task<void> {
    const size_t per = std::max<size_t>(16, (n + parts - 1) / parts);
    TaskGroup group(ctx.pool(), ex);
    IdleBeforeFreed idle(group);  // the parts use this frame's vectors
    for (size_t begin = 0; begin < n; begin += per) {
      group.spawn([&fn, begin, end = std::min(n, begin + per)] {
        for (size_t i = begin; i < end; ++i) fn(i);
        return Status::ok();
      });
    }
    (void)co_await group.wait();
  };
  using Found = Result<std::optional<index_kv::RecordLocation>>;
  std::vector<Found> found(wanted.size());
  // A selector asked again is looked up once (type and raw are the batch's): a batch of
  // one key 10,000 times must not scan its locations 10,000 times.
  std::map<std::tuple<std::string_view, std::string_view, std::optional<uint64_t>>, size_t>
      first_asked;
  std::vector<size_t> same_as(wanted.size());
  std::vector<size_t> distinct;
  for (size_t i = 0; i < wanted.size(); ++i) {
    auto [it, fresh] =
        first_asked.try_emplace({wanted[i].key, wanted[i].container, wanted[i].offset}, i);
    same_as[i] = it->second;
    if (fresh) distinct.push_back(i);
  }
  co_await inParts(distinct.size(), [&](size_t j) {
    found[distinct[j]] = findRecord(ctx.index(), req.bucket, wanted[distinct[j]]);
  });
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (same_as[i] != i) found[i] = found[same_as[i]];
  }
  std::map<std::string, Result<index_kv::Manifest>> manifests;
  for (const Found& f : found) {
    if (f && f->has_value()) manifests.try_emplace((*f)->row.container);
  }
  std::vector<std::pair<const std::string, Result<index_kv::Manifest>>*> fetch;
  for (auto& entry : manifests) fetch.push_back(&entry);
  co_await inParts(fetch.size(), [&](size_t i) {
    fetch[i]->second = ctx.index().getObject(req.bucket, fetch[i]->first);
  });
  // The manifest a found record is read through, or why it cannot be.
  auto manifestOf = [&](size_t i) -> S3Result<const index_kv::Manifest*> {
    if (!found[i]) return std::unexpected(fromStatus(found[i].error(), S3ErrorCode::kNoSuchBucket));
    if (!found[i]->has_value()) {
      return s3fail(S3ErrorCode::kNoSuchKey, "The specified record does not exist.");
    }
    const index_kv::RecordLocation& loc = **found[i];
    return currentContainer(loc, manifests.at(loc.row.container));
  };
  // Records are read a window at a time (up to kReadWindow records and kWindowBytes of
  // stored bytes), concurrently on the worker pool, straight from their data fragments:
  // small reads are latency-bound, this overlaps them. A record whose direct read fails is
  // read again through readRecordAt, which decodes from parity. warc.gz members are
  // inflated one at a time as they are sent, each charged to the buffer budget (its
  // ISIZE, which inflation never passes) until sent, so memory stays bounded.
  constexpr size_t kReadWindow = 32;
  constexpr uint64_t kWindowBytes = 32ull << 20;
  struct Fetched {
    std::optional<S3Result<std::string>> body;  // verified stored bytes; nullopt: slow path
  };
  std::vector<Fetched> window;
  // The window's stored bytes, charged to the buffer budget as a GET stream's are.
  BufferBudget::Lease window_lease;
  // The window from `begin`: its end, and the stored bytes it reads (records over
  // kMaxRecordBytes are refused, not read).
  auto windowEnd = [&](size_t begin) {
    size_t end = begin;
    uint64_t bytes = 0;
    while (end < wanted.size() && end - begin < kReadWindow) {
      uint64_t len = (found[end] && found[end]->has_value()) ? (*found[end])->row.length : 0;
      if (len > kMaxRecordBytes) len = 0;
      if (end > begin && bytes + len > kWindowBytes) break;
      bytes += len;
      ++end;
    }
    return std::pair{end, bytes};
  };
  auto fetchWindow = [&](size_t begin, size_t end, uint64_t bytes) -> Task<void> {
    window.assign(end - begin, Fetched{});
    window_lease.reset();  // the last window's, before waiting for this one's
    // Nothing else is held here (a record's charges end with its iteration): refused
    // when twice the budget stays lent, and then each record of the window says so.
    BufferBudget::Lease got = co_await ctx.data.budget().acquire(
        bytes, BufferBudget::Kind::kRead, BufferBudget::Holds::kNothing);
    if (!got.held()) {
      for (auto& w : window) w.body = std::unexpected(fromStatus(BufferBudget::spent()));
      co_return;
    }
    window_lease = std::move(got);
    asio::any_io_executor ex = co_await asio::this_coro::executor;
    TaskGroup group(ctx.pool(), ex);
    for (size_t i = begin; i < end; ++i) {
      auto m = manifestOf(i);
      if (!m) {
        window[i - begin].body = std::unexpected(m.error());
        continue;
      }
      const index_kv::RecordRow& row = (*found[i])->row;
      if (row.length > kMaxRecordBytes) continue;  // readRecordAt explains
      group.spawn([&, i, begin, m = *m] {
        const index_kv::RecordRow& r = (*found[i])->row;
        std::string bytes;
        if (m->is_inline) {
          bytes = m->inline_data.substr(r.offset, r.length);
        } else {
          bytes.resize(r.length);
          if (!readRangeDirect(ctx.data, *m, r.offset, r.length,
                               reinterpret_cast<uint8_t*>(bytes.data()))
                   .isOk()) {
            return Status::ok();  // slow path
          }
        }
        window[i - begin].body = recordBody(req.bucket, r, m->records.format, std::move(bytes),
                                            /*raw=*/true);
        return Status::ok();
      });
    }
    (void)co_await group.wait();
  };
  // `charge`, `more`: hold what the body costs, until the caller sent it.
  auto readOne = [&](size_t i, size_t begin, BufferBudget::Lease& charge,
                     BufferBudget::Lease& more) -> Task<S3Result<std::string>> {
    if (window[i - begin].body) {
      S3Result<std::string> stored = std::move(*window[i - begin].body);
      if (!stored || wanted[i].raw || (*manifestOf(i))->records.format != "warc.gz") {
        co_return stored;
      }
      // A read's acquire, bounded by the budget's patience: safe under the window's lease.
      BufferBudget::Lease got = co_await ctx.data.budget().acquire(inflatedBound(*stored));
      charge = std::move(got);
      co_return co_await offload(ctx.pool(), [&] { return inflateRecord(*stored); });
    }
    auto m = manifestOf(i);
    if (!m) co_return std::unexpected(m.error());
    auto record = co_await readRecordAt(ctx, req.bucket, **found[i], wanted[i].raw, **m,
                                        BufferBudget::Holds::kLease);  // the window's
    if (!record) co_return std::unexpected(record.error());
    charge = std::move(record->charge);  // its stored and inflated bytes, until sent
    more = std::move(record->inflated_charge);
    co_return std::move(record->body);
  };

  S3Response res;
  res.set("Content-Type", "application/x-granary-records");
  res.streamed = true;
  Status st = co_await sink.writeHead(res, BodySink::kUnknownLength);
  size_t errors = 0;
  uint64_t sent = 0;
  size_t begin = 0, end = 0;
  for (size_t i = 0; i < wanted.size() && st.isOk(); ++i) {
    if (i == end) {
      begin = i;
      uint64_t bytes = 0;
      std::tie(end, bytes) = windowEnd(begin);
      co_await fetchWindow(begin, end, bytes);
    }
    // A record's stored and inflated bytes (one read outside the window), until it is sent.
    BufferBudget::Lease record_charge, inflated_charge;
    auto record = co_await readOne(i, begin, record_charge, inflated_charge);
    Json head = Json::object();
    head["index"] = i;
    putKey(head, wanted[i].key);
    std::string frame;
    if (record) {
      Json loc = locationJson(**found[i]);
      head["status"] = 200;
      for (auto it = loc.begin(); it != loc.end(); ++it) {
        if (!head.contains(it.key())) head[it.key()] = it.value();
      }
      head["size"] = record->size();
      frame = head.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
      if (record->size() <= 64 * 1024) {
        frame += *record;  // small records: one write with their header
      } else {
        st = co_await sink.write({reinterpret_cast<const uint8_t*>(frame.data()), frame.size()});
        if (st.isOk()) st = co_await writeInPieces(sink, *record);
        frame.clear();
      }
      sent += record->size();
    } else {
      ++errors;
      head["status"] = httpStatus(record.error().code);
      head["code"] = std::string(errorName(record.error().code));
      head["message"] = record.error().message;
      head["size"] = 0;
      frame = head.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    }
    if (st.isOk() && !frame.empty()) {
      st = co_await sink.write({reinterpret_cast<const uint8_t*>(frame.data()), frame.size()});
    }
  }
  if (st.isOk()) {
    Json end = Json::object();
    end["end"] = true;
    end["records"] = wanted.size();
    end["errors"] = errors;
    std::string frame = end.dump() + "\n";
    st = co_await sink.write({reinterpret_cast<const uint8_t*>(frame.data()), frame.size()});
  }
  if (st.isOk()) st = co_await sink.finish();
  if (!st.isOk()) res.close = true;
  ctx.metrics.bytesOut(sent);
  co_return res;
}

namespace {

struct PendingRow {
  index_kv::RecordRow row;
  bool has_crc = false;
};

// Parses and validates a batch insert body (JSON lines) against a container of
// `container_size` bytes. Blocking (up to 64 MiB of JSON): run it on the pool. The rows'
// container is left empty: the writer sets it per chunk (a 1 KiB key copied into each of a
// million rows was a gigabyte).
S3Result<std::vector<PendingRow>> parseRows(std::string_view text, uint64_t container_size) {
  std::vector<PendingRow> rows;
  // No row is under 32 bytes (`{"key":"a","offset":0,"length":0}`): a body of newlines
  // reserves nothing much.
  rows.reserve(std::min<size_t>(kMaxInsertRows, text.size() / 32 + 1));
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto bad = [&](std::string why) {
      return s3fail(S3ErrorCode::kInvalidArgument, fmt::format("Row on line {}: {}", line_no, why));
    };
    if (rows.size() == kMaxInsertRows) {
      return bad(fmt::format("over {} rows in one request: split the insert", kMaxInsertRows));
    }
    Json r = Json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object()) return bad("not a JSON object");
    auto key = requestKey(r);
    auto off = r.find("offset");
    auto len = r.find("length");
    if (!key) return bad("key (or key_b64) is missing");
    if (!*key) return bad(key->error().message);
    if (off == r.end() || !off->is_number_unsigned()) return bad("offset must be a non-negative integer");
    if (len == r.end() || !len->is_number_unsigned()) return bad("length must be a non-negative integer");
    PendingRow p;
    p.row.key = std::move(**key);
    p.row.offset = off->get<uint64_t>();
    p.row.length = len->get<uint64_t>();
    if (!index_kv::checkRecordKey(p.row.key).isOk()) {
      return bad("key must be 1 to 8192 bytes without NUL");
    }
    if (p.row.offset > container_size || p.row.length > container_size - p.row.offset) {
      return bad(fmt::format("bytes {}+{} lie outside the container ({} bytes)", p.row.offset,
                             p.row.length, container_size));
    }
    if (auto t = r.find("type"); t != r.end()) {
      if (!t->is_string()) return bad("type must be a string");
      p.row.type = t->get<std::string>();
      // Sent back in x-granary-record-type.
      if (p.row.type.size() > 256 || !headerValueText(p.row.type)) {
        return bad("type must be at most 256 characters, none of them a control character");
      }
    }
    if (auto c = r.find("crc32c"); c != r.end()) {
      std::string hex = c->is_string() ? c->get<std::string>() : "";
      uint32_t v = 0;
      auto [ptr, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
      if (hex.empty() || hex.size() > 8 || ec != std::errc() || ptr != hex.data() + hex.size()) {
        return bad("crc32c must be 1 to 8 hex digits");
      }
      p.row.crc32c = v;
      p.has_crc = true;
    }
    rows.push_back(std::move(p));
  }
  if (rows.empty()) return s3fail(S3ErrorCode::kInvalidArgument, "No rows in the body.");
  return rows;
}

}  // namespace

Task<S3Response> putRecordRows(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  auto text = co_await readSmallBody(req, body, kMaxInsertBody);
  if (!text) co_return errorResponse(bodyError(text.error(), kMaxInsertBody), req, body);
  std::string format = std::string(req.queryValue("format").value_or(""));
  if (!format.empty() && format != "tar" && format != "warc" && format != "warc.gz" &&
      format != "raw") {
    co_return errorResponse({S3ErrorCode::kInvalidArgument, "format must be tar, warc, warc.gz or raw"}, req);
  }
  auto manifest = co_await loadObject(ctx, req.bucket, req.key);
  if (!manifest) co_return errorResponse(manifest.error(), req);
  // The body came after authorization: the bucket may have been re-made by another since.
  // Asked after the read: a bucket re-made later cannot hold the manifest's version, which
  // attachRecords requires.
  if (auto gone = co_await bucketStillJudged(ctx, req)) co_return errorResponse(*gone, req);
  // Every row is validated before any is written.
  auto parsed = co_await offload(ctx.pool(), [&] { return parseRows(*text, manifest->size); });
  if (!parsed) co_return errorResponse(parsed.error(), req);
  std::vector<PendingRow>& rows = *parsed;

  // Rows without a CRC32C get one computed from the container's bytes, read once in
  // spans (planCrcs), bounded per request: the bytes the CRCs cover, the bytes read and
  // the reads made (two million tiny rows far apart were two million reads).
  std::vector<ByteRange> need;
  std::vector<size_t> needing;
  uint64_t covered = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].has_crc) continue;
    need.push_back({rows[i].row.offset, rows[i].row.length});
    needing.push_back(i);
    covered += rows[i].row.length;
  }
  // Sorts up to a million rows: on the pool.
  const CrcPlan plan = co_await offload(ctx.pool(), [&] { return planCrcs(need); });
  if (covered > kMaxInsertCrcBytes || plan.bytes > kMaxInsertCrcBytes ||
      plan.spans.size() > kMaxInsertCrcSpans) {
    co_return errorResponse(
        {S3ErrorCode::kInvalidArgument,
         fmt::format("The rows without crc32c cover {} bytes, {} bytes to read in {} separate "
                     "ranges: over the {} bytes and {} ranges a request may make the server "
                     "read. Give crc32c.",
                     covered, plan.bytes, plan.spans.size(), kMaxInsertCrcBytes,
                     kMaxInsertCrcSpans)},
        req);
  }
  if (!need.empty()) {
    auto crcs = co_await crc32cOfRanges(ctx.data, *manifest, need, plan);
    if (!crcs) co_return errorResponse(fromStatus(crcs.error()), req);
    for (size_t j = 0; j < needing.size(); ++j) rows[needing[j]].row.crc32c = (*crcs)[j];
  }

  const bool new_set = manifest->records.set.isZero();
  const VersionId set = new_set ? VersionId::generate(ctx.deps.clock, ctx.deps.random)
                                : manifest->records.set;
  index_kv::RecordIndexInfo add;
  add.status = "indexed";
  add.set = set;
  // A set's rows are served one way: an existing set, or an indexed container, keeps its
  // format; a new set of a container stored plainly (or not indexable, or malformed: the
  // format its indexing tried says nothing) takes the request's.
  const index_kv::RecordIndexInfo& had = manifest->records;
  const bool keeps = !new_set || had.status == "indexed";
  add.format = keeps && !had.format.empty() ? had.format : (format.empty() ? "raw" : format);
  auto result = co_await offload(ctx.pool(), [&]() -> Result<index_kv::RecordIndexInfo> {
    if (new_set) {
      if (Status st = ctx.index().createRecordSet(req.bucket, req.key, set); !st.isOk()) {
        return fail(st);
      }
    }
    std::vector<index_kv::RecordRow> chunk;
    for (size_t i = 0; i < rows.size(); ++i) {
      index_kv::RecordRow& r = rows[i].row;
      r.set = set;
      r.container = req.key;
      add.row_bytes += index_kv::recordRowBytes(req.bucket, r);
      chunk.push_back(std::move(r));
      if (chunk.size() == kInsertChunk || i + 1 == rows.size()) {
        Status st = ctx.index().putRecordRows(req.bucket, req.key, set, chunk);
        if (!st.isOk()) {
          // A set of our own goes; the container's published set stays (the rows written
          // so far are visible, and counted only when a later insert attaches).
          if (new_set) (void)ctx.index().abandonRecords(set);
          return fail(st);
        }
        chunk.clear();
      }
    }
    add.rows = rows.size();
    return ctx.index().attachRecords(req.bucket, req.key, manifest->version, add);
  });
  if (!result) {
    if (result.error().code() == Status::Code::kPreconditionFailed) {
      co_return errorResponse({S3ErrorCode::kPreconditionFailed,
                               "The container was replaced, or indexed by another request, "
                               "while its rows were inserted: retry."},
                              req);
    }
    co_return errorResponse(fromStatus(result.error()), req);
  }
  Json out = Json::object();
  out["inserted"] = rows.size();
  out["rows"] = result->rows;
  out["container_version"] = manifest->version.toHex();
  co_return jsonResponse(out);
}

Task<S3Response> bucketRecordIndex(GatewayContext& ctx, const S3Request& req, BodySource& body) {
  auto bucket = co_await lookupBucket(ctx, req.bucket);
  if (!bucket) {
    co_return errorResponse(fromStatus(bucket.error(), S3ErrorCode::kNoSuchBucket), req, body);
  }
  if (req.method == "PUT" || req.method == "DELETE") {
    std::string format;  // empty: off
    std::string key_name;
    if (req.method == "PUT") {
      auto text = co_await readSmallBody(req, body, 64 * 1024);
      if (!text) co_return errorResponse(bodyError(text.error(), 64 * 1024), req, body);
      Json j = Json::parse(*text, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("index") || !j["index"].is_string() ||
          (j.contains("index_key") && !j["index_key"].is_string())) {
        co_return errorResponse({S3ErrorCode::kInvalidArgument,
                                 "The body must be {\"index\": \"auto\"|\"tar\"|\"warc\"|"
                                 "\"warc.gz\"|\"off\", \"index_key\": \"uri\"|\"record-id\"}."},
                                req);
      }
      std::optional<std::string> key;
      if (j.contains("index_key")) key = j["index_key"].get<std::string>();
      auto parsed = indexRequestOf(j["index"].get<std::string>(),
                                   key ? std::optional<std::string_view>(*key) : std::nullopt);
      if (!parsed) co_return errorResponse(parsed.error(), req);
      format = (*parsed)->format_name;
      key_name = (*parsed)->key_name;
    }
    auto changed = co_await changeBucket(ctx, req, [&](index_kv::BucketInfo& b) {
      b.index_format = format;
      b.index_key = key_name;
    });
    if (!changed) co_return errorResponse(changed.error(), req);
    *bucket = std::move(*changed);
  }
  Json out = Json::object();
  out["bucket"] = bucket->name;
  out["index"] = bucket->index_format.empty() ? "off" : bucket->index_format;
  out["index_key"] = bucket->index_key.empty() ? "uri" : bucket->index_key;
  co_return jsonResponse(out);
}

namespace {

// `after` of a container-order listing: an offset (rows past every one at it), or the
// next_after of a page, "OFFSET~" and the base64 of the last row's key (rows that share
// an offset are ordered by key, and a page can end between them).
std::optional<index_kv::RecordCursor> parseRecordCursor(std::string_view text) {
  const size_t tilde = text.find('~');
  const std::string_view digits = text.substr(0, tilde);
  const auto offset = parseDecimalU64(digits);
  if (!offset) return std::nullopt;
  index_kv::RecordCursor cursor;
  cursor.offset = *offset;
  if (tilde == std::string_view::npos) return cursor;
  auto key = base64Decode(text.substr(tilde + 1));
  if (!key || key->empty()) return std::nullopt;
  cursor.key.assign(key->begin(), key->end());
  return cursor;
}

}  // namespace

constexpr size_t kMaxContainerPageKeyBytes = 4u << 20;
constexpr size_t kContainerPageSlice = 512;  // rows asked of the index at a time

Task<S3Response> listContainerRecords(GatewayContext& ctx, const S3Request& req) {
  auto max = maxRecordsOf(req, 1000, 10000);
  if (!max) co_return errorResponse(max.error(), req);
  std::optional<index_kv::RecordCursor> after;
  if (auto a = req.queryValue("after")) {
    after = parseRecordCursor(*a);
    if (!after) {
      co_return errorResponse({S3ErrorCode::kInvalidArgument,
                               "after must be an offset or a next_after value"},
                              req);
    }
  }
  auto manifest = co_await loadObject(ctx, req.bucket, req.key);
  if (!manifest) co_return errorResponse(manifest.error(), req);
  // A page also ends once its keys reach kMaxContainerPageKeyBytes (with one row at
  // least): 10,000 rows of 8 KiB keys, escaped in JSON, would be hundreds of megabytes,
  // built in memory outside the buffer budget. Up to max + 1 rows (the one past the page
  // says it is truncated), read in slices that stop once the keys pass the cap, so that
  // the rows read are bounded too.
  std::vector<index_kv::RecordRow> rows;
  if (!manifest->records.set.isZero()) {
    const VersionId set = manifest->records.set;
    auto got = co_await offload(ctx.pool(), [&]() -> Status {
      std::optional<index_kv::RecordCursor> cursor = after;
      size_t key_bytes = 0;
      while (rows.size() < *max + 1) {
        const size_t want = std::min(kContainerPageSlice, *max + 1 - rows.size());
        auto slice = ctx.index().setRecords(set, cursor, want);
        if (!slice) return slice.error();
        for (index_kv::RecordRow& r : *slice) {
          key_bytes += r.key.size();
          rows.push_back(std::move(r));
        }
        if (slice->size() < want || key_bytes > kMaxContainerPageKeyBytes) break;
        cursor = index_kv::RecordCursor{rows.back().offset, rows.back().key};
      }
      return Status::ok();
    });
    if (!got.isOk()) co_return errorResponse(fromStatus(got), req);
  }
  size_t page = std::min<size_t>(*max, rows.size());
  size_t key_bytes = 0;
  for (size_t i = 0; i < page; ++i) {
    key_bytes += rows[i].key.size();
    if (i > 0 && key_bytes > kMaxContainerPageKeyBytes) page = i;
  }
  const bool truncated = rows.size() > page;
  // Where the next page starts: the bare offset (a number, as gateways before 2026-11-30
  // and typed clients take it) unless the next row shares the last one's offset; then
  // "OFFSET~" and the base64 of the last row's key.
  Json next_after;
  if (truncated) {
    const index_kv::RecordRow& last = rows[page - 1];
    if (rows[page].offset != last.offset) {
      next_after = last.offset;
    } else {
      next_after = fmt::format(
          "{}~{}", last.offset,
          base64Encode({reinterpret_cast<const uint8_t*>(last.key.data()), last.key.size()}));
    }
    rows.resize(page);
  }
  Json out = Json::object();
  out["container"] = req.key;
  out["container_version"] = manifest->version.toHex();
  out["format"] = manifest->records.format;
  out["status"] = manifest->records.status;
  if (!manifest->records.message.empty()) out["message"] = manifest->records.message;
  if (truncated) out["next_after"] = std::move(next_after);
  Json records = Json::array();
  for (index_kv::RecordRow& r : rows) {
    records.push_back(locationJson(index_kv::RecordLocation{std::move(r), manifest->version,
                                                            manifest->mtime_unix_nanos}));
  }
  out["records"] = std::move(records);
  out["is_truncated"] = truncated;
  co_return jsonResponse(out);
}

}  // namespace granary::gateway

// The record index in the gateway: streaming indexing and verified record reads.
// See records.h and docs/record-index.md.
#include "records.h"

#include <fmt/core.h>

#include <algorithm>

#include "granary/common/log.h"
#include "granary/ec/erasure_code.h"

namespace granary::gateway {
namespace {

using index_kv::ContainerFormat;
using index_kv::RecordIndexInfo;

// Rows written to the index per batch while a container streams in, at most.
constexpr size_t kFlushRows = 8192;
constexpr size_t kFlushBytes = 8u << 20;
// 256 KiB holds at most ~3,500 WARC records (the smallest are about 75 bytes) and 256 tar
// members: a flush is at most a few thousand rows past kFlushRows.
constexpr size_t kFeedSlice = 256u << 10;
// A warc.gz member inflating to more than this is not served inflated.
constexpr size_t kMaxInflated = kMaxRecordBytes;

std::optional<std::string_view> headerOrQuery(const S3Request& req, std::string_view name) {
  if (auto h = req.header(name)) return h;
  return req.queryValue(name);
}

}  // namespace

S3Result<std::optional<IndexRequest>> indexRequestOf(const S3Request& req) {
  auto format = headerOrQuery(req, "x-granary-index");
  auto key = headerOrQuery(req, "x-granary-index-key");
  if (!format) {
    if (key) {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "x-granary-index-key needs x-granary-index");
    }
    return std::optional<IndexRequest>();
  }
  return indexRequestOf(*format, key);
}

Task<S3Result<std::optional<IndexRequest>>> resolveIndexRequest(GatewayContext& ctx,
                                                                const S3Request& req) {
  auto own = indexRequestOf(req);
  if (!own || *own) co_return own;
  auto bucket = co_await lookupBucket(ctx, req.bucket);
  if (!bucket || bucket->index_format.empty()) co_return std::optional<IndexRequest>();
  co_return indexRequestOf(bucket->index_format,
                           bucket->index_key.empty()
                               ? std::nullopt
                               : std::optional<std::string_view>(bucket->index_key));
}

S3Result<std::optional<IndexRequest>> indexRequestOf(std::string_view format_name,
                                                     std::optional<std::string_view> key) {
  IndexRequest out;
  if (format_name == "off") return std::optional<IndexRequest>(std::move(out));
  auto f = index_kv::parseContainerFormat(format_name);
  if (!f) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "x-granary-index must be auto, tar, warc, warc.gz or off");
  }
  out.format = *f;
  out.format_name = std::string(format_name);
  if (key) {
    auto k = index_kv::parseWarcKey(*key);
    if (!k) return s3fail(S3ErrorCode::kInvalidArgument, "x-granary-index-key must be uri or record-id");
    out.warc_key = *k;
    out.key_name = std::string(*key);
  }
  return std::optional<IndexRequest>(std::move(out));
}

std::optional<IndexRequest> indexRequestOf(const index_kv::MultipartUpload& upload) {
  if (upload.index_format.empty()) return std::nullopt;
  IndexRequest out;
  out.format = index_kv::parseContainerFormat(upload.index_format).value_or(ContainerFormat::kAuto);
  out.format_name = upload.index_format;
  if (!upload.index_key.empty()) {
    out.warc_key = index_kv::parseWarcKey(upload.index_key).value_or(index_kv::WarcKey::kTargetUri);
    out.key_name = upload.index_key;
  }
  return out;
}

namespace {
index_kv::ParserOptions parserOptions(const IndexRequest& request) {
  index_kv::ParserOptions o;
  o.format = request.format;
  o.warc_key = request.warc_key;
  return o;
}
}  // namespace

RecordIndexer::RecordIndexer(index_kv::Index& index, std::string bucket, std::string container,
                             VersionId set, const IndexRequest& request,
                             std::chrono::seconds max_duration)
    : index_(index),
      bucket_(std::move(bucket)),
      container_(std::move(container)),
      set_(set),
      parser_(parserOptions(request)),
      deadline_(std::chrono::steady_clock::now() + max_duration),
      last_write_(std::chrono::steady_clock::now()) {}

RecordIndexer::~RecordIndexer() = default;

bool RecordIndexer::stopped() const { return !error_.isOk() || !write_error_.isOk(); }

void RecordIndexer::feed(std::span<const uint8_t> data) {
  // In slices, so that the rows are flushed in batches of about kFlushRows whatever the
  // size of the reads (a stripe of the smallest WARC records held 60,000 rows, each with
  // its own copy of the container's key, in one batch).
  while (data.size() > kFeedSlice && !stopped()) {
    feedSlice(data.first(kFeedSlice));
    data = data.subspan(kFeedSlice);
  }
  feedSlice(data);
}

void RecordIndexer::feedSlice(std::span<const uint8_t> data) {
  if (stopped()) return;
  const size_t before = parsed_.size();
  error_ = parser_.feed(data, parsed_);
  // Keys that cannot be rows go at once, so a container of huge names holds no memory:
  // the string's storage goes too (clear() would keep it).
  for (size_t i = before; i < parsed_.size(); ++i) {
    const std::string& key = parsed_[i].key;
    if (!index_kv::checkRecordKey(key).isOk()) {
      std::string().swap(parsed_[i].key);  // skipped by flush: not addressable (documented)
      continue;
    }
    parsed_bytes_ += key.size() + parsed_[i].type.size();
  }
  const auto now = std::chrono::steady_clock::now();
  if (now > deadline_) {
    write_error_ = Status::timeout("indexing took longer than the server's maximum PUT duration");
    return;
  }
  // Flush by count, by bytes, and at least every minute so the set's last-write time
  // keeps it from looking like an orphan.
  if (parsed_.size() >= kFlushRows || parsed_bytes_ >= kFlushBytes ||
      (wrote_ && now - last_write_ > std::chrono::seconds(60))) {
    flush();
  }
}

void RecordIndexer::flush() {
  if (!write_error_.isOk()) return;
  std::vector<index_kv::RecordRow> rows;
  rows.reserve(parsed_.size());
  for (index_kv::ParsedRecord& p : parsed_) {
    if (p.key.empty()) continue;
    rows.push_back(index_kv::RecordRow{std::move(p.key), container_, set_, p.offset, p.length,
                                       p.crc32c, std::move(p.type)});
    row_bytes_ += index_kv::recordRowBytes(bucket_, rows.back());
  }
  parsed_.clear();
  parsed_bytes_ = 0;
  if (rows.empty() && !wrote_) return;
  if (!wrote_) {
    write_error_ = index_.createRecordSet(bucket_, container_, set_);
    if (!write_error_.isOk()) return;
    wrote_ = true;
  }
  write_error_ = index_.putRecordRows(bucket_, container_, set_, rows);
  last_write_ = std::chrono::steady_clock::now();
  if (write_error_.isOk()) rows_ += rows.size();
}

RecordIndexInfo RecordIndexer::finish() {
  // After a write error the parser was fed no more: its "truncated" would blame the data.
  if (error_.isOk() && write_error_.isOk()) error_ = parser_.finish(parsed_);
  if (error_.isOk()) flush();
  RecordIndexInfo info;
  const ContainerFormat format = parser_.format();
  if (format != ContainerFormat::kAuto) info.format = std::string(index_kv::containerFormatName(format));
  if (error_.isOk() && write_error_.isOk()) {
    info.status = "indexed";
    info.rows = rows_;
    info.row_bytes = row_bytes_;
    if (rows_ > 0) info.set = set_;
    return info;
  }
  if (!error_.isOk()) {
    info.status = index_kv::isNotIndexable(error_) ? "not-indexable" : "malformed";
    info.message = error_.message();
  } else {
    info.status = "failed";
    info.message = "indexing failed: " + write_error_.message();
    log::warn("record index of {}/{} failed: {}", bucket_, container_, write_error_.toString());
  }
  abandon();
  return info;
}

void RecordIndexer::abandon() {
  if (!wrote_) return;
  wrote_ = false;
  if (Status st = index_.abandonRecords(set_); !st.isOk()) {
    // The orphan sweep removes them later.
    log::warn("abandoning record set {}: {}", set_.toHex(), st.toString());
  }
}

namespace {
// Feeds an object's bytes to an indexer, on the worker pool, as readObjectRange delivers.
class IndexingSink final : public BodySink {
 public:
  IndexingSink(WorkerPool& pool, RecordIndexer& indexer, KeepAlive* keep_alive)
      : pool_(pool), indexer_(indexer), keep_alive_(keep_alive) {}
  Task<Status> writeHead(const S3Response&, uint64_t) override { co_return Status::ok(); }
  Task<Status> write(std::span<const uint8_t> data) override {
    co_await offload(pool_, [&] {
      indexer_.feed(data);
      return 0;
    });
    // Stop reading the object once the outcome is known (not a container, malformed...).
    if (indexer_.stopped()) co_return Status::unavailable("indexing stopped");
    if (keep_alive_ != nullptr) co_await keep_alive_->tick();
    co_return Status::ok();
  }

 private:
  WorkerPool& pool_;
  RecordIndexer& indexer_;
  KeepAlive* keep_alive_;
};
}  // namespace

Task<std::unique_ptr<RecordIndexer>> indexStoredObject(GatewayContext& ctx,
                                                       const std::string& bucket,
                                                       const std::string& key,
                                                       const index_kv::Manifest& manifest,
                                                       const IndexRequest& request,
                                                       RecordIndexInfo& info,
                                                       KeepAlive* keep_alive) {
  auto indexer = std::make_unique<RecordIndexer>(
      ctx.index(), bucket, key, VersionId::generate(ctx.deps.clock, ctx.deps.random), request,
      std::chrono::seconds(ctx.options.max_put_seconds));
  // Its one caller is CompleteMultipartUpload, whose manifests are always striped.
  IndexingSink sink(ctx.pool(), *indexer, keep_alive);
  Status st = co_await readObjectRange(ctx.data, manifest, 0, manifest.size, sink,
                                       /*prepaid=*/false, BufferBudget::Holds::kNothing);
  if (!st.isOk() && !indexer->stopped()) {
    co_await offload(ctx.pool(), [&] {
      indexer->abandon();
      return 0;
    });
    info = RecordIndexInfo{};
    info.status = "failed";
    info.message = "reading the object to index it failed: " + st.message();
    co_return indexer;
  }
  info = co_await offload(ctx.pool(), [&] { return indexer->finish(); });
  co_return indexer;
}

std::optional<RecordIndexInfo> retryWithoutRecords(const RecordIndexInfo& info,
                                                   const Status& commit_error) {
  if (info.set.isZero() || commit_error.code() != Status::Code::kPreconditionFailed) {
    return std::nullopt;
  }
  RecordIndexInfo out;
  out.format = info.format;
  out.status = "failed";
  out.message = "the rows were removed before the commit (indexing ran too long)";
  return out;
}

void setRecordIndexHeaders(S3Response& res, const RecordIndexInfo& info) {
  if (info.status.empty()) return;
  res.set("x-granary-record-index", info.status);
  if (!info.format.empty()) res.set("x-granary-record-format", info.format);
  if (info.status == "indexed") {
    res.set("x-granary-record-count", std::to_string(info.rows));
    res.set("x-granary-record-index-bytes", std::to_string(info.row_bytes));
  }
  if (!info.message.empty()) {
    // Header values must stay one printable line.
    std::string msg = info.message.substr(0, 300);
    std::replace_if(msg.begin(), msg.end(), [](char c) { return c < 0x20 || c == 0x7f; }, ' ');
    res.set("x-granary-record-index-message", msg);
  }
}

S3Result<const index_kv::Manifest*> currentContainer(const index_kv::RecordLocation& loc,
                                                     const Result<index_kv::Manifest>& manifest) {
  if (!manifest && !manifest.error().isNotFound()) {
    return std::unexpected(fromStatus(manifest.error()));
  }
  if (!manifest || manifest->version != loc.container_version ||
      manifest->records.set != loc.row.set) {
    return s3fail(S3ErrorCode::kNoSuchKey, "The record's container was replaced or deleted.");
  }
  return &*manifest;
}

Task<S3Result<RecordData>> readRecordAt(GatewayContext& ctx, const std::string& bucket,
                                        const index_kv::RecordLocation& loc, bool raw,
                                        const index_kv::Manifest& m, BufferBudget::Holds holds) {
  const index_kv::RecordRow& row = loc.row;
  if (row.length > kMaxRecordBytes) {
    co_return s3fail(S3ErrorCode::kInvalidRequest,
                     fmt::format("The record is {} bytes, over the {} byte limit of record reads; "
                                 "read bytes {}-{} of the container with a ranged GET.",
                                 row.length, kMaxRecordBytes, row.offset,
                                 row.offset + row.length - 1));
  }
  RecordData out;
  out.location = loc;
  out.format = m.records.format;
  // The record's bytes, and inflated ones, are charged to the buffer budget as a GET
  // stream's stripes are (a read waits for room at most the budget's patience, then goes
  // over), until the body is sent: dozens of 64 MiB records read at once must not run the
  // server out of memory. The stored bytes are charged before they are read, and the
  // read's stripe buffers are not charged again (prepaid: they would wait behind this
  // lease); the inflated bytes once the member says how many.
  BufferBudget::Lease got =
      co_await ctx.data.budget().acquire(row.length, BufferBudget::Kind::kRead, holds);
  if (!got.held()) co_return std::unexpected(fromStatus(BufferBudget::spent()));
  out.charge = std::move(got);
  auto read = co_await readObjectBytes(ctx.data, m, row.offset, row.length, /*prepaid=*/true);
  if (!read) co_return std::unexpected(fromStatus(read.error()));
  if (out.format == "warc.gz" && !raw) {
    BufferBudget::Lease more = co_await ctx.data.budget().acquire(inflatedBound(*read));
    out.inflated_charge = std::move(more);
  }
  auto body = co_await offload(ctx.pool(), [&] {
    return recordBody(bucket, row, out.format, std::move(*read), raw);
  });
  if (!body) co_return std::unexpected(body.error());
  out.body = std::move(*body);
  co_return out;
}

S3Result<std::string> recordBody(const std::string& bucket, const index_kv::RecordRow& row,
                                 const std::string& format, std::string bytes, bool raw) {
  const uint32_t crc =
      ec::crc32c({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  if (bytes.size() != row.length || crc != row.crc32c) {
    log::error("record {} in {}/{} at {}: CRC32C {:08x}, index says {:08x}", row.key, bucket,
               row.container, row.offset, crc, row.crc32c);
    return s3fail(S3ErrorCode::kInternalError,
                  "The record's bytes do not match the CRC32C in its index row.");
  }
  if (format != "warc.gz" || raw) return bytes;
  return inflateRecord(bytes);
}

uint64_t inflatedBound(std::string_view member) {
  if (member.size() < 4) return 0;
  // A gzip member ends with ISIZE, the inflated size mod 2^32 (little-endian); inflateRecord
  // goes no further, and never past kMaxInflated.
  const auto* tail = reinterpret_cast<const uint8_t*>(member.data() + member.size() - 4);
  const uint64_t isize = uint64_t{tail[0]} | uint64_t{tail[1]} << 8 |
                         uint64_t{tail[2]} << 16 | uint64_t{tail[3]} << 24;
  // Nor past what deflate can expand the member to: a small member claiming a large ISIZE
  // must not hold the buffer budget's bytes (it fails when it inflates).
  return std::min({isize, kMaxInflated, uint64_t{member.size()} * index_kv::kMaxDeflateRatio});
}

S3Result<std::string> inflateRecord(std::string_view member) {
  // Never past what its ISIZE says (what callers charge to the buffer budget): under 4 GiB
  // ISIZE is the exact size, so a member that inflates to more is not valid gzip.
  auto inflated = index_kv::inflateGzipMember(
      {reinterpret_cast<const uint8_t*>(member.data()), member.size()}, inflatedBound(member));
  if (!inflated) {
    return s3fail(S3ErrorCode::kInternalError,
                  "The record's gzip member does not inflate to the size its trailer states "
                  "(at most 64 MiB): " + inflated.error().message());
  }
  return std::move(*inflated);
}

Task<Status> writeInPieces(BodySink& sink, std::string_view data) {
  constexpr size_t kPiece = 1u << 20;  // each piece gets the sink's own write deadline
  for (size_t at = 0; at < data.size(); at += kPiece) {
    const size_t n = std::min(kPiece, data.size() - at);
    Status st = co_await sink.write({reinterpret_cast<const uint8_t*>(data.data()) + at, n});
    if (!st.isOk()) co_return st;
  }
  co_return Status::ok();
}

Result<std::optional<index_kv::RecordLocation>> findRecord(index_kv::Index& index,
                                                           const std::string& bucket,
                                                           const RecordSelector& selector) {
  index_kv::RecordQuery q;
  q.key = selector.key;
  q.container = selector.container;
  q.type = selector.type == "*" ? std::string() : selector.type;
  q.offset = selector.offset;  // one row, looked up directly (checkOffset: with a container)
  q.limit = 1000;
  std::optional<index_kv::RecordLocation> newest;
  for (int pages = 0;; ++pages) {
    if (pages == 10) {
      return fail(Status::invalidArgument(
          "The record key has too many locations to pick the newest: name its container."));
    }
    auto page = index.listRecords(bucket, q);
    if (!page) return fail(page.error());
    for (index_kv::RecordLocation& l : page->records) {
      if (selector.offset && l.row.offset != *selector.offset) continue;
      if (!newest || std::tie(l.container_mtime_unix_nanos, l.row.offset) >=
                         std::tie(newest->container_mtime_unix_nanos, newest->row.offset)) {
        newest = std::move(l);
      }
    }
    if (!page->truncated) break;
    q.start_after = page->next;
  }
  return newest;
}

Task<S3Result<RecordData>> readRecord(GatewayContext& ctx, const std::string& bucket,
                                      const RecordSelector& selector) {
  auto best = co_await offload(ctx.pool(), [&] { return findRecord(ctx.index(), bucket, selector); });
  if (!best) co_return std::unexpected(fromStatus(best.error(), S3ErrorCode::kNoSuchBucket));
  if (!best->has_value()) {
    co_return s3fail(S3ErrorCode::kNoSuchKey, "The specified record does not exist.");
  }
  const index_kv::RecordLocation& loc = **best;
  auto manifest = co_await lookupObject(ctx, bucket, loc.row.container);
  auto m = currentContainer(loc, manifest);
  if (!m) co_return std::unexpected(m.error());
  co_return co_await readRecordAt(ctx, bucket, loc, selector.raw, **m,
                                  BufferBudget::Holds::kNothing);
}

}  // namespace granary::gateway

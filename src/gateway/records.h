// The record index in the gateway (docs/record-index.md): indexing a container while its
// bytes stream in (RecordIndexer), and reading one record back, verified (readRecord).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "buffer_budget.h"
#include "granary/index_kv/container_parser.h"
#include "granary/index_kv/index.h"
#include "handlers.h"
#include "keep_alive.h"

namespace granary::gateway {

// What a PUT / CreateMultipartUpload asked for: x-granary-index (auto, tar, warc,
// warc.gz) and x-granary-index-key (uri, record-id; WARC only), as headers or query
// parameters of the same names.
struct IndexRequest {
  index_kv::ContainerFormat format = index_kv::ContainerFormat::kAuto;
  index_kv::WarcKey warc_key = index_kv::WarcKey::kTargetUri;
  std::string format_name;  // as stored on a multipart upload
  std::string key_name;
};
// From a request's own x-granary-index (nullopt: it says nothing; "off": an empty
// format_name) or a bucket's stored setting. InvalidArgument for a bad value.
S3Result<std::optional<IndexRequest>> indexRequestOf(const S3Request& req);
S3Result<std::optional<IndexRequest>> indexRequestOf(std::string_view format,
                                                     std::optional<std::string_view> key);
// What a PUT / CreateMultipartUpload indexes: the request's choice, else its bucket's.
Task<S3Result<std::optional<IndexRequest>>> resolveIndexRequest(GatewayContext& ctx,
                                                                const S3Request& req);
// From a multipart upload's stored index_format / index_key.
std::optional<IndexRequest> indexRequestOf(const index_kv::MultipartUpload& upload);

// Parses a container as its bytes go by and writes its rows, invisible, in batches.
// feed() and finish() block (parsing, RocksDB): call them on the worker pool, in order,
// from one task at a time.
class RecordIndexer {
 public:
  // Indexing that runs past `max_duration` stops with status "failed" (an indexing run
  // must publish well before the orphan sweep would take its rows).
  RecordIndexer(index_kv::Index& index, std::string bucket, std::string container,
                VersionId set, const IndexRequest& request, std::chrono::seconds max_duration);
  ~RecordIndexer();

  void feed(std::span<const uint8_t> data);
  // The outcome is known before the end: more bytes change nothing.
  bool stopped() const;
  // The container's RecordIndexInfo for its manifest: "indexed" (naming the set when it
  // has rows) or "malformed" / "not-indexable" with the reason, in which case rows
  // written so far are abandoned.
  index_kv::RecordIndexInfo finish();
  // The manifest naming the set was not committed: abandon the rows written.
  void abandon();

 private:
  void feedSlice(std::span<const uint8_t> data);
  void flush();

  index_kv::Index& index_;
  std::string bucket_;
  std::string container_;
  VersionId set_;
  index_kv::ContainerParser parser_;
  std::vector<index_kv::ParsedRecord> parsed_;
  Status error_;             // a parse error (the container is kept, unindexed)
  Status write_error_;       // the index refused the rows
  bool wrote_ = false;       // the set was created in the index
  size_t parsed_bytes_ = 0;  // key and type bytes waiting in parsed_
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::steady_clock::time_point last_write_;
  uint64_t rows_ = 0;
  uint64_t row_bytes_ = 0;
};

// Indexes an object stored under a striped `manifest` (a multipart upload being completed) by
// reading its bytes once, in order. Sets `info` for the manifest; returns the indexer so
// the caller can abandon its rows if the commit fails. `keep_alive` (if any) is ticked
// as the bytes are read.
Task<std::unique_ptr<RecordIndexer>> indexStoredObject(GatewayContext& ctx,
                                                       const std::string& bucket,
                                                       const std::string& key,
                                                       const index_kv::Manifest& manifest,
                                                       const IndexRequest& request,
                                                       index_kv::RecordIndexInfo& info,
                                                       KeepAlive* keep_alive = nullptr);

// After a commit naming the indexer's set failed with kPreconditionFailed: the set may
// have been swept (it is refused then), or the request's own precondition failed. Either
// way the rows are abandoned; returns the record info to retry the commit with (the
// object stored unindexed), or nullopt when there was no set to blame.
std::optional<index_kv::RecordIndexInfo> retryWithoutRecords(const index_kv::RecordIndexInfo& info,
                                                             const Status& commit_error);

// Response headers describing an object's record index (HEAD/GET object, PUT, Complete).
void setRecordIndexHeaders(S3Response& res, const index_kv::RecordIndexInfo& info);

// A visible record and its verified bytes.
struct RecordData {
  index_kv::RecordLocation location;
  std::string format;  // the container's records.format
  std::string body;    // the unit's bytes; inflated for warc.gz unless raw
  // The body's charge to the buffer budget (its stored bytes, and inflated ones): held
  // until the body is sent.
  BufferBudget::Lease charge;
  BufferBudget::Lease inflated_charge;
};

struct RecordSelector {
  std::string key;
  std::string container;      // empty: the newest location among all containers
  // The row at this offset of `container` (set only with a container): one of several
  // records of the same key in it (a tar appended to, WARC records of one URI).
  std::optional<uint64_t> offset;
  std::string type = "response";  // WARC rows; "*" or empty: any
  bool raw = false;           // warc.gz: the gzip member as stored
};

// Finds the newest visible location of a record (newest container, then the last
// occurrence in it; or the one at selector.offset), reads its bytes from the container
// version named by the row, verifies the CRC32C and inflates a warc.gz member unless raw. NoSuchKey when there is
// no such record; InternalError on a CRC mismatch.
Task<S3Result<RecordData>> readRecord(GatewayContext& ctx, const std::string& bucket,
                                      const RecordSelector& selector);
// The newest visible location of a record (blocking: call on the worker pool). nullopt
// when there is none.
Result<std::optional<index_kv::RecordLocation>> findRecord(index_kv::Index& index,
                                                           const std::string& bucket,
                                                           const RecordSelector& selector);
// The container manifest `manifest` (getObject of the row's container) if it is still the
// version that holds `location`'s rows; NoSuchKey if it was replaced or deleted since.
S3Result<const index_kv::Manifest*> currentContainer(const index_kv::RecordLocation& location,
                                                     const Result<index_kv::Manifest>& manifest);
// Reads a known location from its container's manifest (checked by currentContainer; a
// batch reuses one manifest across its records). `holds`: whether the caller holds a
// buffer-budget lease meanwhile (a batch's window), as BufferBudget::acquire takes it.
Task<S3Result<RecordData>> readRecordAt(GatewayContext& ctx, const std::string& bucket,
                                        const index_kv::RecordLocation& location, bool raw,
                                        const index_kv::Manifest& manifest,
                                        BufferBudget::Holds holds);

// Blocking: verifies a record's container bytes against its row's CRC32C and inflates a
// warc.gz member unless `raw`; the body to send.
S3Result<std::string> recordBody(const std::string& bucket, const index_kv::RecordRow& row,
                                 const std::string& format, std::string bytes, bool raw);

// What inflating warc.gz member `member` may allocate: its ISIZE, at most kMaxRecordBytes.
uint64_t inflatedBound(std::string_view member);
// Blocking: a verified warc.gz member, inflated: at most inflatedBound(member) bytes (more
// is an error), so a caller that charged that much charged it all.
S3Result<std::string> inflateRecord(std::string_view member);
// Writes a body in 1 MiB pieces, so a slow client's deadline applies per piece.
Task<Status> writeInPieces(BodySink& sink, std::string_view data);

// Largest record readRecord serves (it buffers the record to verify it before sending).
inline constexpr uint64_t kMaxRecordBytes = 64ull << 20;

}  // namespace granary::gateway

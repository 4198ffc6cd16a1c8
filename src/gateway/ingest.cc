// Body ingestion for PutObject and UploadPart (ingest.h).
#include "ingest.h"
#include "granary/common/strings.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "digest.h"
#include "s3_xml.h"
#include "granary/common/clock.h"
#include "granary/common/hex.h"
#include "granary/common/log.h"

namespace granary::gateway {

namespace {

constexpr size_t kRawReadSize = 256 * 1024;
constexpr size_t kMaxUserMetadata = 2 * 1024;  // AWS: 2 KB of x-amz-meta-* names + values
constexpr size_t kOffloadHashAbove = 256 * 1024;

// The object bytes of a request body: plain, or decoded from aws-chunked framing.
class PayloadStream {
 public:
  PayloadStream(BodySource& body, std::unique_ptr<AwsChunkedDecoder> decoder)
      : body_(body), decoder_(std::move(decoder)) {}

  // The framing is read to the body's end (its Content-Length) before the payload counts
  // as complete: whatever follows the final chunk is judged whole, however the bytes were
  // split into reads (unsigned trailer lines may end without their blank line).
  Task<S3Result<size_t>> read(std::span<uint8_t> out) {
    if (!decoder_) co_return co_await body_.read(out);
    while (pos_ == pending_.size()) {
      pending_.clear();
      pos_ = 0;
      if (raw_ended_) co_return 0;
      raw_.resize(kRawReadSize);
      auto n = co_await body_.read({reinterpret_cast<uint8_t*>(raw_.data()), raw_.size()});
      if (!n) co_return std::unexpected(n.error());
      if (*n == 0) {
        if (!decoder_->done()) {
          co_return s3fail(S3ErrorCode::kIncompleteBody,
                           "The request body terminated unexpectedly");
        }
        raw_ended_ = true;
        co_return 0;
      }
      auto fed = decoder_->feed(std::string_view(raw_.data(), *n), pending_);
      if (!fed) co_return std::unexpected(fed.error());
    }
    size_t n = std::min(out.size(), pending_.size() - pos_);
    std::memcpy(out.data(), pending_.data() + pos_, n);
    pos_ += n;
    co_return n;
  }

  // Trailing headers of an aws-chunked body (empty for plain bodies).
  const std::map<std::string, std::string>& trailers() const {
    static const std::map<std::string, std::string> kNone;
    return decoder_ ? decoder_->trailers() : kNone;
  }

  // Reads until `out` is full or the payload ends.
  Task<S3Result<size_t>> readFull(std::span<uint8_t> out) {
    size_t got = 0;
    while (got < out.size()) {
      auto n = co_await read(out.subspan(got));
      if (!n) co_return std::unexpected(n.error());
      if (*n == 0) break;
      got += *n;
    }
    co_return got;
  }

 private:
  BodySource& body_;
  std::unique_ptr<AwsChunkedDecoder> decoder_;
  std::string raw_;
  std::string pending_;
  size_t pos_ = 0;
  bool raw_ended_ = false;
};

struct PayloadMode {
  std::unique_ptr<AwsChunkedDecoder> decoder;
  std::optional<std::string> expected_sha256;  // hex, for a signed single-chunk payload
};

S3Result<PayloadMode> payloadMode(const S3Request& req, const RequestAuth& auth) {
  PayloadMode mode;
  std::string_view hash = auth.info ? std::string_view(auth.info->payload_hash) : "";
  if (hash.empty() || hash == "UNSIGNED-PAYLOAD") {
    // Unsigned (anonymous, SigV2, a presigned URL): the header still says how the body is
    // framed, and a body stored with its aws-chunked framing would be corrupt for good.
    const std::string_view framing = req.header("x-amz-content-sha256").value_or("");
    if (framing == "STREAMING-UNSIGNED-PAYLOAD-TRAILER") {
      mode.decoder = std::make_unique<AwsChunkedDecoder>(std::nullopt, /*trailer=*/true);
    } else if (framing.starts_with("STREAMING-")) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "Signed aws-chunked payloads need a SigV4-signed Authorization header.");
    }
    return mode;
  }
  bool signed_chunks = hash == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" ||
                       hash == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
  bool trailer = hash == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" ||
                 hash == "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
  if (signed_chunks || trailer) {
    std::optional<AwsChunkedDecoder::Signing> signing;
    if (signed_chunks) {
      signing = AwsChunkedDecoder::Signing{auth.signing_key, auth.info->amz_date,
                                           auth.info->scope(), auth.info->signature};
    }
    mode.decoder = std::make_unique<AwsChunkedDecoder>(std::move(signing), trailer);
    return mode;
  }
  auto raw = fromHex(hash);
  if (!raw || raw->size() != 32) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-..., or a valid "
                  "sha256 value.");
  }
  mode.expected_sha256 = asciiLower(hash);
  return mode;
}

S3Result<uint64_t> payloadSize(const S3Request& req, bool chunked, uint64_t max) {
  std::optional<uint64_t> size;
  if (chunked) {
    if (auto d = req.header("x-amz-decoded-content-length")) size = parseDecimalU64(*d);
  } else {
    size = req.content_length;
  }
  if (!size) {
    return s3fail(S3ErrorCode::kMissingContentLength,
                  "You must provide the Content-Length HTTP header.");
  }
  if (*size > max) {
    return s3fail(S3ErrorCode::kEntityTooLarge,
                  "Your proposed upload exceeds the maximum allowed object size.");
  }
  return *size;
}

// Everything computed over the payload as it streams: the ETag's MD5, the signed payload
// hash, and the additional checksum the client asked for.
class Hashes {
 public:
  Hashes(bool sha256, std::optional<ChecksumAlgorithm> checksum) {
    if (sha256) sha256_.emplace(Digest::Kind::kSha256);
    if (checksum) checksum_.emplace(*checksum);
  }
  void update(std::span<const uint8_t> data) {
    md5_.update(data);
    updateOthers(data);
  }
  // What update() does but the MD5, for a caller that hashes md5Stream() elsewhere.
  bool hasOthers() const { return sha256_ || checksum_; }
  void updateOthers(std::span<const uint8_t> data) {
    if (sha256_) sha256_->update(data);
    if (checksum_) checksum_->update(data);
  }
  Md5Stream& md5Stream() { return md5_; }

  std::vector<uint8_t> md5() {
    auto digest = md5_.finish();
    return {digest.begin(), digest.end()};
  }
  std::string sha256Hex() { return sha256_ ? toHex(sha256_->finish()) : std::string(); }
  std::string checksum() { return checksum_ ? checksum_->value() : std::string(); }

 private:
  Md5Stream md5_;
  std::optional<Digest> sha256_;
  std::optional<Checksummer> checksum_;
};

// Starts hashing a large chunk off the event loop, as tasks of `group`: its MD5 (in the
// lanes shared by all uploads when the CPU has them), and beside it the other hashes and
// the observer.
void hashOffLoop(GatewayContext& ctx, TaskGroup& group, Hashes& hashes,
                 std::span<const uint8_t> chunk,
                 const std::function<void(std::span<const uint8_t>)>& observe) {
  if (ctx.md5_lanes) {
    // On the pool: whoever calls update() may end up hashing everybody's chunks.
    group.spawnAsync([&ctx, &hashes, chunk](TaskGroup::Done done) {
      ctx.md5_lanes->update(hashes.md5Stream(), chunk,
                            [done = std::move(done)]() mutable { done(Status::ok()); });
    });
  } else {
    group.spawn([&hashes, chunk] {
      hashes.md5Stream().update(chunk);
      return Status::ok();
    });
  }
  if (hashes.hasOthers() || observe) {
    group.spawn([&hashes, &observe, chunk] {
      hashes.updateOthers(chunk);
      if (observe) observe(chunk);
      return Status::ok();
    });
  }
}

}  // namespace

S3Result<void> collectMetadata(const S3Request& req, index_kv::Manifest& m) {
  size_t meta_bytes = 0;
  for (const auto& [name, value] : req.headers) {
    if (name.starts_with("x-amz-meta-")) {
      std::string short_name = name.substr(11);
      meta_bytes += short_name.size() + value.size();
      m.metadata[short_name] = value;
    } else if (name == "content-encoding") {
      std::string kept;
      size_t start = 0;
      while (start <= value.size()) {
        size_t comma = value.find(',', start);
        std::string part = value.substr(start, comma == std::string::npos ? std::string::npos
                                                                           : comma - start);
        part.erase(0, part.find_first_not_of(' '));
        part.erase(part.find_last_not_of(' ') + 1);
        if (!part.empty() && part != "aws-chunked") kept += (kept.empty() ? "" : ",") + part;
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (!kept.empty()) m.headers["Content-Encoding"] = kept;
    } else if (name == "content-disposition") {
      m.headers["Content-Disposition"] = value;
    } else if (name == "cache-control") {
      m.headers["Cache-Control"] = value;
    } else if (name == "content-language") {
      m.headers["Content-Language"] = value;
    } else if (name == "expires") {
      m.headers["Expires"] = value;
    }
  }
  if (meta_bytes > kMaxUserMetadata) {
    return s3fail(S3ErrorCode::kMetadataTooLarge,
                  "Your metadata headers exceed the maximum allowed metadata size.");
  }
  m.content_type = std::string(req.header("content-type").value_or("binary/octet-stream"));
  return {};
}

S3Result<void> collectTags(const S3Request& req, index_kv::Manifest& m) {
  m.tags.clear();
  if (auto header = req.header("x-amz-tagging")) {
    auto tags = parseTaggingHeader(*header);
    if (!tags) return std::unexpected(tags.error());
    m.tags = std::move(*tags);
  }
  return {};
}

Task<std::expected<IngestResult, IngestFailure>> ingestBody(GatewayContext& ctx,
                                                            const S3Request& req,
                                                            const RequestAuth& auth,
                                                            BodySource& body,
                                                            const IngestOptions& options) {
  using Outcome = std::expected<IngestResult, IngestFailure>;
  auto refuse = [](const S3Error& e) { return Outcome(std::unexpect, IngestFailure{e, false}); };
  auto mode = payloadMode(req, auth);
  if (!mode) co_return refuse(mode.error());
  const bool chunked = mode->decoder != nullptr;
  auto size = payloadSize(req, chunked, options.max_size);
  if (!size) co_return refuse(size.error());

  auto checksum = requestedChecksum(req);
  if (!checksum) co_return refuse(checksum.error());
  std::optional<ChecksumAlgorithm> algorithm;
  if (*checksum) {
    algorithm = (*checksum)->algorithm;
  } else {
    auto sdk = sdkChecksumAlgorithm(req);
    if (!sdk) co_return refuse(sdk.error());
    algorithm = *sdk;
  }
  if (options.required_checksum) {
    if (!algorithm) {
      algorithm = options.required_checksum;
    } else if (*algorithm != *options.required_checksum) {
      co_return refuse({S3ErrorCode::kInvalidRequest,
                        "Checksum Type mismatch occurred, expected checksum Type: " +
                            std::string(checksumName(*options.required_checksum)) +
                            ", actual checksum Type: " + std::string(checksumName(*algorithm))});
    }
  }
  if (options.check_headers) {
    if (auto err = options.check_headers()) co_return refuse(*err);
  }
  auto content_md5 = requestedContentMd5(req);
  if (!content_md5) co_return refuse(content_md5.error());
  // The headers are good: now the client may send the body (Route::ingests_body), which
  // must come within the longest a PUT may take (a slow trickle would hold its buffer).
  co_await body.invite();
  body.setDeadline(std::chrono::steady_clock::now() +
                   std::chrono::seconds(ctx.options.max_put_seconds));

  const auto& clock = ctx.deps.clock;
  IngestResult out;
  out.version = VersionId::generate(clock, ctx.deps.random);
  PayloadStream payload(body, std::move(mode->decoder));
  Hashes hashes(mode->expected_sha256.has_value(), algorithm);
  uint64_t total = 0;
  std::unique_ptr<ObjectWriter> writer;

  // A chunk is hashed while the writer writes it; the hash must end before the chunk's
  // buffer is filled again or given back.
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  TaskGroup hashing(ctx.bulkPool(), ex);
  std::span<const uint8_t> hashed;  // the chunk being hashed, if any
  // Every path out awaits the hash, but this frame can also be destroyed while suspended
  // on a socket read with a hash in flight (its io_context destroyed at shutdown): the
  // hash reads the writer's buffer and writes `hashes`, declared before this.
  IdleBeforeFreed hashed_before_freed(hashing);

  auto failWith = [&](const S3Error& e) -> Task<Outcome> {
    (void)co_await hashing.wait();
    if (writer) co_await writer->abandon();
    co_return Outcome(std::unexpect, IngestFailure{e, !body.done()});
  };

  if (options.allow_inline && *size <= ctx.options.inline_threshold) {
    out.is_inline = true;
    out.inline_data.resize(*size + 1);  // one spare byte detects an over-long body
    auto n = co_await payload.readFull(
        {reinterpret_cast<uint8_t*>(out.inline_data.data()), out.inline_data.size()});
    if (!n) {
      S3Error err = n.error();
      co_return co_await failWith(err);
    }
    total = *n;
    ctx.metrics.bytesIn(total);
    out.inline_data.resize(std::min<uint64_t>(total, *size));
    std::span<const uint8_t> all{reinterpret_cast<const uint8_t*>(out.inline_data.data()),
                                 out.inline_data.size()};
    hashes.update(all);
    if (options.observe) {
      co_await offload(ctx.pool(), [&] {
        options.observe(all);
        return 0;
      });
    }
  } else {
    writer = std::make_unique<ObjectWriter>(ctx.data, out.version, req.bucket, req.key, ex,
                                            *size, options.part);
    // Nothing of the body is read before the writer has its buffer: an upload that waits
    // for buffer memory holds back its client through TCP.
    if (Status st = co_await writer->start(); !st.isOk()) {
      writer.reset();  // nothing written: nothing to abandon
      S3Error err = dataPathError(st);
      co_return co_await failWith(err);
    }
    // A member while it may hand chunks to the MD5 lanes: until the last one is read.
    std::optional<Md5Lanes::Member> lanes_member;
    if (*size > kOffloadHashAbove) lanes_member.emplace(ctx.md5_lanes.get());
    for (;;) {
      auto buf = writer->buffer();
      if (buf.data() == hashed.data()) (void)co_await hashing.wait();
      auto n = co_await payload.readFull(buf);
      if (!n) {
        S3Error err = n.error();
        co_return co_await failWith(err);
      }
      if (*n == 0) break;
      total += *n;
      ctx.metrics.bytesIn(*n);  // as it arrives: a long upload shows on dashboards at once
      if (auto length = body.finalLength(); length && *length < *size && *length >= total) {
        *size = *length;  // known before the stripe that ends it is written
        writer->shrinkTo(*length);
      }
      if (total > *size) break;
      auto chunk = buf.first(*n);
      (void)co_await hashing.wait();  // the chunk before this one: MD5 is a serial chain
      hashed = {};
      if (chunk.size() > kOffloadHashAbove || options.observe) {
        hashed = chunk;
        hashOffLoop(ctx, hashing, hashes, chunk, options.observe);
      } else {
        hashes.update(chunk);
      }
      Status st = co_await writer->flush(*n);
      if (!st.isOk()) {
        S3Error err = dataPathError(st);
        co_return co_await failWith(err);
      }
      if (*n < buf.size()) break;
    }
    lanes_member.reset();
    (void)co_await hashing.wait();
    Status st = co_await writer->finish();
    if (!st.isOk()) {
      S3Error err = dataPathError(st);
      co_return co_await failWith(err);
    }
  }
  out.md5 = hashes.md5();
  const std::string computed_checksum = hashes.checksum();
  std::optional<S3Error> invalid;
  if (total < *size) {
    invalid = S3Error{S3ErrorCode::kIncompleteBody,
                      "You did not provide the number of bytes specified by the "
                      "Content-Length HTTP header."};
  } else if (total > *size) {
    invalid = S3Error{S3ErrorCode::kInvalidRequest,
                      "The request body is longer than its declared length."};
  } else if (mode->expected_sha256 && hashes.sha256Hex() != *mode->expected_sha256) {
    invalid = S3Error{S3ErrorCode::kXAmzContentSHA256Mismatch,
                      "The provided 'x-amz-content-sha256' header does not match what was "
                      "computed."};
  } else if (*content_md5 && **content_md5 != out.md5) {
    invalid = S3Error{S3ErrorCode::kBadDigest,
                      "The Content-MD5 you specified did not match what we received."};
  } else {
    invalid = checkChecksum(*checksum, computed_checksum, payload.trailers());
  }
  if (!invalid) invalid = writeOverdue(ctx, out.version);
  if (invalid) co_return co_await failWith(*invalid);

  out.size = total;
  if (algorithm) {
    out.checksum_algorithm = *algorithm;
    out.checksum = computed_checksum;
  }
  if (writer) {
    out.drives = writer->drives();
    out.stripes = writer->stripes();
  }
  co_return out;
}

std::optional<S3Error> writeOverdue(const GatewayContext& ctx, const VersionId& version) {
  const int64_t elapsed_ns = ctx.deps.clock.nowUnixNanos() - version.createdUnixNanos();
  if (elapsed_ns <= int64_t(ctx.options.max_put_seconds) * 1'000'000'000) return std::nullopt;
  return S3Error{S3ErrorCode::kRequestTimeout,
                 "The write took longer than the server's maximum PUT duration."};
}

bool commitRefused(const Status& st) {
  switch (st.code()) {
    case Status::Code::kPreconditionFailed:
    case Status::Code::kNotFound:
    case Status::Code::kInvalidArgument:
    case Status::Code::kAlreadyExists:
    case Status::Code::kNotEmpty:
    case Status::Code::kPermissionDenied:
      return true;
    case Status::Code::kUnavailable:
      // Retryable: it never reached the index (refused, nothing sent). Not retryable: the
      // connection failed after the request went out, the outcome is unknown.
      return st.retryable();
    default:
      return false;  // a timeout, an I/O error: it may have committed
  }
}

Task<void> removeBlobs(GatewayContext& ctx, const Status& commit_error,
                       const std::vector<std::string>& drives,
                       const std::vector<index_kv::StripeLayout>& stripes) {
  if (!commitRefused(commit_error)) {
    log::warn("commit outcome unknown ({}): its blobs are left to the orphan sweep",
              commit_error.toString());
    co_return;
  }
  co_await removeFragments(ctx.data, co_await asio::this_coro::executor, drives, stripes,
                           "cleanup");
}

}  // namespace granary::gateway

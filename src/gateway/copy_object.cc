// CopyObject: PUT /bucket/key with x-amz-copy-source. The bytes are read through the normal
// data path (verified, decoded if degraded) and written as new stripes of the destination
// version: the copy owns its blobs, so GC of the source can never free them.
#include <fmt/core.h>

#include <cstring>

#include "copy_source.h"
#include "digest.h"
#include "granary/common/clock.h"
#include "granary/common/hex.h"
#include "granary/common/log.h"
#include "handlers.h"
#include "ingest.h"
#include "s3_xml.h"
#include "time_format.h"
#include "uri.h"

namespace granary::gateway {

S3Result<CopySource> parseCopySource(std::string_view header) {
  size_t q = header.find('?');
  const bool version = q != std::string_view::npos;
  if (version) {
    std::string_view query = header.substr(q + 1);
    // Every object's one version is "null": another id names no version (as a GET's).
    if (query.starts_with("versionId=") && query != "versionId=null") {
      return std::unexpected(invalidVersionId());
    }
    if (query != "versionId=null") {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "Only ?versionId= may follow the key in x-amz-copy-source (a '?' in a "
                    "key is sent as %3F).");
    }
    header = header.substr(0, q);
  }
  auto decoded = percentDecode(header, /*plus_is_space=*/false);
  if (!decoded) return s3fail(S3ErrorCode::kInvalidArgument, "Invalid copy source encoding");
  std::string_view path = *decoded;
  if (path.starts_with('/')) path.remove_prefix(1);
  size_t slash = path.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == path.size()) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "Copy Source must mention the source bucket and key: sourcebucket/sourcekey");
  }
  // Checked as a request's bucket and key are (router.cc), not merely looked up.
  const std::string_view bucket = path.substr(0, slash);
  const std::string_view key = path.substr(slash + 1);
  if (!plausibleBucketName(bucket)) {
    return s3fail(S3ErrorCode::kInvalidArgument, "Invalid copy source bucket name");
  }
  if (auto checked = checkObjectKey(key); !checked) return std::unexpected(checked.error());
  return CopySource{std::string(bucket), std::string(key), version};
}

Task<Status> CopySink::write(std::span<const uint8_t> data) {
  while (!data.empty()) {
    auto buf = writer_.buffer();
    size_t n = std::min(data.size(), buf.size() - used_);
    std::memcpy(buf.data() + used_, data.data(), n);
    used_ += n;
    data = data.subspan(n);
    if (used_ == buf.size()) {
      Status st = co_await flush();
      if (!st.isOk()) co_return st;
    }
  }
  co_return Status::ok();
}

Task<Status> CopySink::flush() {
  if (used_ == 0) co_return Status::ok();
  auto chunk = writer_.buffer().first(used_);
  co_await offload(ctx_.pool(), [&] {
    md5_.update(chunk);
    if (checksum_) checksum_->update(chunk);
    if (check_) check_->update(chunk);
    return 0;
  });
  Status st = co_await writer_.flush(used_);
  used_ = 0;
  if (keep_alive_ != nullptr) co_await keep_alive_->tick();
  co_return st;
}

index_kv::ObjectChecksum CopySink::checksum() {
  if (!checksum_) return {};
  if (!checksum_value_) {
    checksum_value_ = index_kv::ObjectChecksum{std::string(checksumName(checksum_->algorithm())),
                                               checksum_->value(), "FULL_OBJECT"};
  }
  return *checksum_value_;
}

std::string CopySink::checkValue() {
  if (!check_) return checksum_ ? checksum().value : std::string();
  if (!check_value_) check_value_ = check_->value();
  return *check_value_;
}

CopyCheck::CopyCheck(const index_kv::Manifest& src, bool whole) {
  if (!whole) return;
  // A single-part object's ETag is its MD5; a multipart one's ends in "-N".
  if (src.etag.size() == 32 && src.etag.find('-') == std::string::npos) etag_ = src.etag;
  const index_kv::ObjectChecksum& sum = src.checksum;
  if (sum.type == "COMPOSITE" || sum.value.find('-') != std::string::npos) return;
  algorithm_ = checksumFromName(sum.algorithm);
  if (algorithm_) value_ = sum.value;
}

std::string CopyCheck::mismatch(std::string_view md5_hex, std::string_view checksum) const {
  if (!etag_.empty() && md5_hex != etag_) {
    return fmt::format("MD5 {} != the source's ETag {}", md5_hex, etag_);
  }
  if (algorithm_ && checksum != value_) {
    return fmt::format("{} {} != the source's {}", checksumName(*algorithm_), checksum, value_);
  }
  return {};
}

S3Response copyMismatchResponse(const S3Request& req, const CopySource& source,
                                std::string_view what) {
  log::error("copy of {}/{} to {}/{}: {}", source.bucket, source.key, req.bucket, req.key, what);
  return errorResponse({S3ErrorCode::kInternalError,
                        "The bytes read from the source object do not match its stored ETag "
                        "or checksum: the copy was refused and nothing was written."},
                       req);
}

Task<S3Result<index_kv::Manifest>> loadCopySource(GatewayContext& ctx, const S3Request& req,
                                                  const CopySource& source) {
  if (auto denied =
          co_await authorizeRead(ctx, req, source.bucket, source.key, source.version)) {
    co_return std::unexpected(*denied);
  }
  auto src = co_await loadObject(ctx, source.bucket, source.key);
  if (!src) co_return std::unexpected(src.error());
  if (evaluateConditions(req, *src, "x-amz-copy-source-")) {
    // A failed copy-source condition is 412 whichever header failed (AWS).
    co_return s3fail(S3ErrorCode::kPreconditionFailed,
                     "At least one of the pre-conditions you specified did not hold");
  }
  co_return std::move(*src);
}

namespace {

Task<S3Response> copyObjectKeptAlive(GatewayContext& ctx, const S3Request& req,
                                     KeepAlive& keep_alive) {
  auto source = parseCopySource(*req.header("x-amz-copy-source"));
  if (!source) co_return errorResponse(source.error(), req);
  if (source->version) keep_alive.set("x-amz-copy-source-version-id", "null");
  std::string directive(req.header("x-amz-metadata-directive").value_or("COPY"));
  if (directive != "COPY" && directive != "REPLACE") {
    co_return errorResponse({S3ErrorCode::kInvalidArgument,
                             "Unknown metadata directive."},
                            req);
  }
  const std::string tagging(req.header("x-amz-tagging-directive").value_or("COPY"));
  if (tagging != "COPY" && tagging != "REPLACE") {
    co_return errorResponse({S3ErrorCode::kInvalidArgument, "Unknown tagging directive."}, req);
  }
  auto checksum_named = checksumAlgorithmHeader(req);
  if (!checksum_named) co_return errorResponse(checksum_named.error(), req);
  // Not after copying up to 5 GiB.
  if (auto missing = co_await missingBucketOfRoot(ctx, req)) {
    co_return errorResponse(*missing, req);
  }
  auto src = co_await loadCopySource(ctx, req, *source);
  if (!src) co_return errorResponse(src.error(), req);
  if (src->size > kMaxCopySource) {
    co_return errorResponse({S3ErrorCode::kInvalidRequest,
                             "The specified copy source is larger than the maximum allowable "
                             "size for a copy source: 5368709120"},
                            req);
  }
  // Onto itself, a copy must change something: its metadata or tags, or the storage class,
  // website redirect or encryption it names (headers Granary accepts and ignores, so such
  // a copy rewrites the object as it is: `aws s3 cp s3://b/k s3://b/k --storage-class
  // ...`). A source naming its version is S3's way to restore that version, and needs no
  // change.
  const bool same_object = source->bucket == req.bucket && source->key == req.key;
  const bool names_a_change =
      directive == "REPLACE" || tagging == "REPLACE" || req.header("x-amz-storage-class") ||
      req.header("x-amz-website-redirect-location") ||
      req.header("x-amz-server-side-encryption") ||
      req.header("x-amz-server-side-encryption-customer-algorithm");
  if (same_object && !source->version && !names_a_change) {
    co_return errorResponse({S3ErrorCode::kInvalidRequest,
                             "This copy request is illegal because it is trying to copy an "
                             "object to itself without changing the object's metadata, storage "
                             "class, website redirect location or encryption attributes."},
                            req);
  }
  auto precondition = co_await writePrecondition(ctx, req);
  if (!precondition) co_return errorResponse(precondition.error(), req);

  index_kv::Manifest m;
  if (directive == "REPLACE") {
    if (auto st = collectMetadata(req, m); !st) co_return errorResponse(st.error(), req);
  } else {
    m.content_type = src->content_type;
    m.metadata = src->metadata;
    m.headers = src->headers;
  }
  if (tagging == "REPLACE") {
    if (auto st = collectTags(req, m); !st) co_return errorResponse(st.error(), req);
  } else {
    m.tags = src->tags;
  }
  m.version = VersionId::generate(ctx.deps.clock, ctx.deps.random);
  m.ec = ctx.data.code().profile();
  m.size = src->size;
  // The copy's checksum (AWS): of the algorithm x-amz-checksum-algorithm names, else of the
  // source's, computed over the bytes as they are copied. The source's MD5 ETag and
  // full-object checksum must come out again (CopyCheck): they vouch for the copy end to
  // end.
  std::optional<ChecksumAlgorithm> checksum_alg = *checksum_named;
  if (!checksum_alg) checksum_alg = checksumFromName(src->checksum.algorithm);
  const CopyCheck check(*src, /*whole=*/true);

  if (src->is_inline || src->size <= ctx.options.inline_threshold) {
    m.is_inline = true;
    if (src->is_inline) {
      m.inline_data = src->inline_data;
    } else {
      // A small striped source (e.g. a small multipart object) becomes inline.
      auto bytes = co_await readObjectBytes(ctx.data, *src, 0, src->size);
      if (!bytes) co_return errorResponse(fromStatus(bytes.error()), req);
      m.inline_data = std::move(*bytes);
    }
    Digest md5(Digest::Kind::kMd5);
    md5.update(m.inline_data);
    m.etag = toHex(md5.finish());
    const std::span<const uint8_t> bytes(
        reinterpret_cast<const uint8_t*>(m.inline_data.data()), m.inline_data.size());
    auto checksumOf = [&](ChecksumAlgorithm alg) {
      Checksummer sum(alg);
      sum.update(bytes);
      return sum.value();
    };
    if (checksum_alg) {
      m.checksum = {std::string(checksumName(*checksum_alg)), checksumOf(*checksum_alg),
                    "FULL_OBJECT"};
    }
    const auto alg = check.algorithm();
    const std::string vouching = !alg                 ? std::string()
                                 : alg == checksum_alg ? m.checksum.value
                                                       : checksumOf(*alg);
    if (auto what = check.mismatch(m.etag, vouching); !what.empty()) {
      co_return copyMismatchResponse(req, *source, what);
    }
  } else {
    asio::any_io_executor ex = co_await asio::this_coro::executor;
    ObjectWriter writer(ctx.data, m.version, req.bucket, req.key, ex, src->size, false);
    if (Status st = co_await writer.start(); !st.isOk()) {
      co_return errorResponse(dataPathError(st), req);
    }
    CopySink sink(ctx, writer, &keep_alive, checksum_alg, check.algorithm());
    Status st = co_await readObjectRange(ctx.data, *src, 0, src->size, sink, /*prepaid=*/false,
                                         BufferBudget::Holds::kLease);
    if (st.isOk()) st = co_await sink.flush();
    if (st.isOk()) st = co_await writer.finish();
    if (!st.isOk()) {
      co_await writer.abandon();
      co_return errorResponse(dataPathError(st), req);
    }
    if (auto overdue = writeOverdue(ctx, m.version)) {
      co_await writer.abandon();
      co_return errorResponse(*overdue, req);
    }
    m.etag = toHex(sink.md5());
    m.checksum = sink.checksum();
    if (auto what = check.mismatch(m.etag, sink.checkValue()); !what.empty()) {
      co_await writer.abandon();
      co_return copyMismatchResponse(req, *source, what);
    }
    m.drives = writer.drives();
    m.stripes = writer.stripes();
  }
  m.mtime_unix_nanos = ctx.deps.clock.nowUnixNanos();
  auto committed = co_await commitObject(ctx, req.bucket, req.key, m, *precondition);
  if (!committed) {
    // A commit's kNotFound is the bucket's (see putObject).
    S3Error err = writeCommitError(committed.error(), *precondition);
    co_await removeBlobs(ctx, committed.error(), m.drives, m.stripes);
    co_return errorResponse(err, req);
  }
  co_return xmlResponse(copyObjectResultXml(m.etag, m.mtime_unix_nanos, m.checksum));
}

}  // namespace

Task<S3Response> copyObject(GatewayContext& ctx, const S3Request& req, BodySink& sink) {
  KeepAlive keep_alive(sink, std::chrono::milliseconds(ctx.options.keepalive_after_ms));
  S3Response res = co_await copyObjectKeptAlive(ctx, req, keep_alive);
  co_return co_await keep_alive.answer(std::move(res));
}

}  // namespace granary::gateway

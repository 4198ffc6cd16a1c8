// GetObject, HeadObject (with Range) and DeleteObject.
#include "granary/common/clock.h"
#include "handlers.h"
#include "http_range.h"
#include "time_format.h"

namespace granary::gateway {

namespace {

void objectHeaders(const index_kv::Manifest& m, S3Response& res) {
  res.set("ETag", "\"" + m.etag + "\"");
  res.set("Last-Modified", httpDate(m.mtime_unix_nanos));
  res.set("Accept-Ranges", "bytes");
  res.set("Content-Type", m.content_type.empty() ? "binary/octet-stream" : m.content_type);
  for (const auto& [name, value] : m.headers) res.set(name, value);
  for (const auto& [name, value] : m.metadata) res.set("x-amz-meta-" + name, value);
}

}  // namespace

Task<S3Response> getObject(GatewayContext& ctx, const S3Request& req, BodySink& sink,
                           bool head_only) {
  auto manifest = co_await offload(ctx.pool(), [&] {
    return ctx.index().getObject(req.bucket, req.key);
  });
  if (!manifest) {
    S3Error err = co_await objectNotFound(ctx, req, manifest.error());
    co_return errorResponse(err, req);
  }
  const index_kv::Manifest& m = *manifest;

  S3Response res;
  objectHeaders(m, res);
  uint64_t first = 0, length = m.size;
  RangeResult range = parseRange(req.header("range").value_or(""), m.size);
  if (range.kind == RangeResult::Kind::kUnsatisfiable) {
    S3Response err = errorResponse({S3ErrorCode::kInvalidRange,
                                    "The requested range is not satisfiable"},
                                   req);
    err.set("Content-Range", "bytes */" + std::to_string(m.size));
    co_return err;
  }
  if (range.kind == RangeResult::Kind::kSatisfiable) {
    first = range.range.first;
    length = range.range.length;
    res.status = 206;
    res.set("Content-Range", "bytes " + std::to_string(first) + "-" +
                                 std::to_string(first + length - 1) + "/" +
                                 std::to_string(m.size));
  }
  if (head_only) {
    Status st = co_await sink.writeHead(res, length);
    res.streamed = true;
    res.close = !st.isOk();
    co_return res;
  }

  Status st = co_await sink.writeHead(res, length);
  if (st.isOk()) {
    if (m.is_inline) {
      if (m.inline_data.size() < first + length) {
        st = Status::corruption("inline body shorter than the object size");
      } else {
        st = co_await sink.write(
            {reinterpret_cast<const uint8_t*>(m.inline_data.data()) + first, length});
      }
    } else {
      st = co_await readObjectRange(ctx.data, m, first, length, sink);
    }
  }
  res.streamed = true;
  if (!st.isOk()) {
    // The status line is gone: the only honest signal left is a short body and a close.
    res.close = true;
  } else {
    ctx.metrics.bytesOut(length);
  }
  co_return res;
}

Task<S3Response> deleteObject(GatewayContext& ctx, const S3Request& req) {
  auto removed = co_await offload(ctx.pool(), [&] {
    return ctx.index().deleteObject(req.bucket, req.key, index_kv::Precondition::none());
  });
  if (!removed) {
    co_return errorResponse(fromStatus(removed.error(), S3ErrorCode::kNoSuchBucket), req);
  }
  S3Response res;
  res.status = 204;
  co_return res;
}

}  // namespace granary::gateway

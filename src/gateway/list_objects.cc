// ListObjects (v1, marker) and ListObjectsV2 (continuation tokens, start-after).
#include <charconv>

#include "granary/common/hex.h"
#include "handlers.h"
#include "s3_xml.h"

namespace granary::gateway {

namespace {

// Continuation tokens are opaque to clients: the hex of the last key or prefix returned.
std::string encodeToken(std::string_view last) {
  return toHex({reinterpret_cast<const uint8_t*>(last.data()), last.size()});
}

std::optional<std::string> decodeToken(std::string_view token) {
  auto raw = fromHex(token);
  if (!raw) return std::nullopt;
  return std::string(raw->begin(), raw->end());
}

}  // namespace

Task<S3Response> listObjects(GatewayContext& ctx, const S3Request& req) {
  ListObjectsParams p;
  p.version = req.queryValue("list-type") == std::optional<std::string_view>("2") ? 2 : 1;
  p.bucket = req.bucket;
  p.prefix = std::string(req.queryValue("prefix").value_or(""));
  p.delimiter = std::string(req.queryValue("delimiter").value_or(""));
  p.owner_id = req.principal;
  p.fetch_owner = req.queryValue("fetch-owner") == std::optional<std::string_view>("true");
  if (auto enc = req.queryValue("encoding-type")) {
    if (*enc != "url") {
      co_return errorResponse({S3ErrorCode::kInvalidArgument, "Invalid Encoding Method specified in Request"}, req);
    }
    p.url_encode = true;
  }
  if (auto mk = req.queryValue("max-keys")) {
    int64_t v = -1;
    auto [ptr, ec] = std::from_chars(mk->data(), mk->data() + mk->size(), v);
    if (ec != std::errc() || ptr != mk->data() + mk->size() || v < 0) {
      co_return errorResponse({S3ErrorCode::kInvalidArgument, "Provided max-keys not an integer or within integer range"}, req);
    }
    p.max_keys = static_cast<size_t>(std::min<int64_t>(v, 1000));
  }

  index_kv::ListRequest lr;
  lr.prefix = p.prefix;
  lr.delimiter = p.delimiter;
  lr.max_keys = p.max_keys;
  if (p.version == 2) {
    p.marker = std::string(req.queryValue("start-after").value_or(""));
    lr.start_after = p.marker;
    if (auto token = req.queryValue("continuation-token")) {
      auto decoded = decodeToken(*token);
      if (!decoded || token->empty()) {
        co_return errorResponse({S3ErrorCode::kInvalidArgument, "The continuation token provided is incorrect"}, req);
      }
      p.continuation_token = std::string(*token);
      lr.start_after = *decoded;
    }
  } else {
    p.marker = std::string(req.queryValue("marker").value_or(""));
    lr.start_after = p.marker;
  }

  // The index lists a missing bucket as empty; S3 answers NoSuchBucket.
  auto result = co_await offload(ctx.pool(), [&]() -> Result<index_kv::ListResult> {
    auto bucket = ctx.index().getBucket(req.bucket);
    if (!bucket) return fail(bucket.error());
    return ctx.index().listObjects(req.bucket, lr);
  });
  if (!result) co_return errorResponse(fromStatus(result.error(), S3ErrorCode::kNoSuchBucket), req);
  if (result->truncated) {
    p.next_token = p.version == 2 ? encodeToken(result->next_start_after) : result->next_start_after;
  }
  co_return xmlResponse(listObjectsXml(p, *result));
}

}  // namespace granary::gateway

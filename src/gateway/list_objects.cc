// ListObjects (v1, marker), ListObjectsV2 (continuation tokens, start-after) and
// ListObjectVersions (key and version-id markers; every object has the one version "null").
#include <fmt/core.h>


#include "granary/common/hex.h"
#include "granary/common/strings.h"
#include "handlers.h"
#include "s3_xml.h"

namespace granary::gateway {

std::string encodeToken(std::string_view last) {
  return toHex({reinterpret_cast<const uint8_t*>(last.data()), last.size()});
}

std::optional<std::string> decodeToken(std::string_view token) {
  auto raw = fromHex(token);
  if (!raw) return std::nullopt;
  return std::string(raw->begin(), raw->end());
}

std::optional<uint32_t> s3Integer(std::string_view text) {
  auto v = parseDecimalU64(text);
  if (!v || *v > uint64_t{INT32_MAX}) return std::nullopt;
  return static_cast<uint32_t>(*v);
}

S3Result<size_t> maxParam(const S3Request& req, std::string_view name) {
  constexpr size_t kMaxListed = 1000;
  auto v = req.queryValue(name);
  if (!v) return kMaxListed;
  auto n = s3Integer(*v);
  if (!n) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "Provided " + std::string(name) + " not an integer or within integer range");
  }
  return std::min<size_t>(*n, kMaxListed);
}

S3Result<void> checkListingParameters(const S3Request& req) {
  for (const char* name :
       {"prefix", "delimiter", "marker", "start-after", "key-marker", "upload-id-marker"}) {
    const auto value = req.queryValue(name);
    if (value && (value->find('\0') != std::string_view::npos || !validUtf8(*value))) {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    fmt::format("The {} parameter must be valid UTF-8 without NUL characters",
                                name));
    }
  }
  return {};
}

namespace {

ListKind listKind(const S3Request& req) {
  if (req.hasQuery("versions")) return ListKind::kVersions;
  return req.queryValue("list-type") == std::optional<std::string_view>("2") ? ListKind::kV2
                                                                            : ListKind::kV1;
}

// The parameters every listing reads, and where it starts: `p` and `lr` filled, or the
// error S3 answers for a bad one.
S3Result<void> parseListing(const S3Request& req, ListObjectsParams& p, index_kv::ListRequest& lr) {
  p.kind = listKind(req);
  p.bucket = req.bucket;
  p.prefix = std::string(req.queryValue("prefix").value_or(""));
  p.delimiter = std::string(req.queryValue("delimiter").value_or(""));
  p.fetch_owner = req.queryValue("fetch-owner") == std::optional<std::string_view>("true");
  if (auto enc = req.queryValue("encoding-type")) {
    if (*enc != "url") {
      return s3fail(S3ErrorCode::kInvalidArgument, "Invalid Encoding Method specified in Request");
    }
    p.url_encode = true;
  }
  if (auto bad = checkListingParameters(req); !bad) return bad;
  auto max_keys = maxParam(req, "max-keys");
  if (!max_keys) return std::unexpected(max_keys.error());
  p.max_keys = *max_keys;
  lr.prefix = p.prefix;
  lr.delimiter = p.delimiter;
  lr.max_keys = p.max_keys;
  switch (p.kind) {
    case ListKind::kV1:
      p.marker = std::string(req.queryValue("marker").value_or(""));
      lr.start_after = p.marker;
      break;
    case ListKind::kV2:
      p.marker = std::string(req.queryValue("start-after").value_or(""));
      lr.start_after = p.marker;
      if (auto token = req.queryValue("continuation-token")) {
        auto decoded = decodeToken(*token);
        if (!decoded || token->empty()) {
          return s3fail(S3ErrorCode::kInvalidArgument,
                        "The continuation token provided is incorrect");
        }
        p.continuation_token = std::string(*token);
        lr.start_after = *decoded;
      }
      break;
    case ListKind::kVersions:
      // A key has one version, "null": the versions after (key-marker, null) are the keys
      // after key-marker, as are the versions after key-marker itself.
      p.marker = std::string(req.queryValue("key-marker").value_or(""));
      p.version_id_marker = std::string(req.queryValue("version-id-marker").value_or(""));
      if (!p.version_id_marker.empty() && p.marker.empty()) {
        return s3fail(S3ErrorCode::kInvalidArgument,
                      "A version-id marker cannot be specified without a key marker.");
      }
      if (!p.version_id_marker.empty() && p.version_id_marker != "null") {
        return std::unexpected(invalidVersionId());
      }
      lr.start_after = p.marker;
      break;
  }
  return {};
}

}  // namespace

Task<S3Response> listObjects(GatewayContext& ctx, const S3Request& req) {
  ListObjectsParams p;
  index_kv::ListRequest lr;
  if (auto parsed = parseListing(req, p, lr); !parsed) {
    co_return errorResponse(parsed.error(), req);
  }
  // The index lists a missing bucket as empty; S3 answers NoSuchBucket.
  // The bucket's owner owns every object in it (the listing's <Owner>, not the caller).
  auto result = co_await offload(ctx.pool(), [&]() -> Result<index_kv::ListResult> {
    auto bucket = ctx.index().getBucket(req.bucket);
    if (!bucket) return fail(bucket.error());
    p.owner_id = ctx.credentials.ownerId(bucket->owner);
    return ctx.index().listObjects(req.bucket, lr);
  });
  if (!result) co_return errorResponse(fromStatus(result.error(), S3ErrorCode::kNoSuchBucket), req);
  if (result->truncated) {
    p.next_token = p.kind == ListKind::kV2 ? encodeToken(result->next_start_after)
                                           : result->next_start_after;
  }
  co_return xmlResponse(listObjectsXml(p, *result));
}

}  // namespace granary::gateway

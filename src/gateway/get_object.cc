// GetObject, HeadObject (with Range or partNumber) and DeleteObject.
#include <cctype>
#include <charconv>

#include "granary/common/clock.h"
#include "granary/common/strings.h"
#include "checksum.h"
#include "handlers.h"
#include "http_text.h"
#include "records.h"
#include "http_range.h"
#include "s3_xml.h"
#include "time_format.h"
#include "uri.h"

namespace granary::gateway {

namespace {

void objectHeaders(const index_kv::Manifest& m, S3Response& res) {
  res.set("ETag", "\"" + m.etag + "\"");
  res.set("Last-Modified", httpDate(m.mtime_unix_nanos));
  res.set("Accept-Ranges", "bytes");
  res.set("Content-Type", m.content_type.empty() ? "binary/octet-stream" : m.content_type);
  for (const auto& [name, value] : m.headers) res.set(name, value);
  for (const auto& [name, value] : m.metadata) res.set("x-amz-meta-" + name, value);
  if (!m.tags.empty()) res.set("x-amz-tagging-count", std::to_string(m.tags.size()));
  setRecordIndexHeaders(res, m.records);
}

// True if `header` (an If-Match / If-None-Match list) names `etag`, or is "*". RFC 9110
// 13.1.1/13.1.2: If-Match compares strongly (a weak tag, W/"...", never matches: the client
// holds bytes that may differ), If-None-Match weakly (`weak`).
bool etagListMatches(std::string_view header, std::string_view etag, bool weak) {
  size_t pos = 0;
  while (pos <= header.size()) {
    size_t comma = header.find(',', pos);
    std::string_view item = trimSpaces(header.substr(pos, comma == std::string_view::npos
                                                             ? std::string_view::npos
                                                             : comma - pos));
    const bool is_weak = item.starts_with("W/");
    if (is_weak) item.remove_prefix(2);
    if (is_weak && !weak) item = {};
    if (item.size() >= 2 && item.front() == '"' && item.back() == '"') {
      item = item.substr(1, item.size() - 2);
    }
    if (item == "*" || item == etag) return true;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return false;
}

// response-* query parameters override response headers on GET (signed requests only:
// access.cc refuses them on anonymous reads of public buckets). A value with a control
// character is InvalidArgument: CR or LF would split the response.
std::optional<S3Error> applyResponseOverrides(const S3Request& req, S3Response& res) {
  static constexpr std::pair<std::string_view, std::string_view> kOverrides[] = {
      {"response-content-type", "Content-Type"},
      {"response-content-language", "Content-Language"},
      {"response-expires", "Expires"},
      {"response-cache-control", "Cache-Control"},
      {"response-content-disposition", "Content-Disposition"},
      {"response-content-encoding", "Content-Encoding"},
  };
  for (const auto& [param, header] : kOverrides) {
    auto value = req.queryValue(param);
    if (!value) continue;
    if (!headerValueText(*value)) {
      std::string message(param);
      message.append(" may not contain control characters");
      return S3Error{S3ErrorCode::kInvalidArgument, std::move(message)};
    }
    std::erase_if(res.headers, [&](const auto& h) { return h.first == header; });
    res.set(std::string(header), std::string(*value));
  }
  return std::nullopt;
}

// GET and HEAD ?partNumber=N: the bytes of part N of a multipart object (the stripes of
// one part share their blob version, and the parts follow in order; N counts the parts
// the upload was completed with), or of a single PUT's object as its one part. `count`: the object's parts, 0 for a single PUT (whose answer
// carries no x-amz-mp-parts-count, as S3's does not).
struct PartRange {
  uint64_t first = 0;
  uint64_t length = 0;
  uint32_t count = 0;
};

S3Result<PartRange> partRange(const index_kv::Manifest& m, std::string_view number) {
  uint32_t part = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), part);
  if (ec != std::errc() || end != number.data() + number.size() || part < 1 || part > 10'000) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "Part number must be an integer between 1 and 10000, inclusive");
  }
  const auto not_satisfiable = [] {
    return s3fail(S3ErrorCode::kInvalidPartNumber, "The requested partnumber is not satisfiable");
  };
  PartRange out;
  const size_t dash = m.etag.rfind('-');
  if (dash == std::string::npos) {  // a single PUT (or a copy): one part, the object
    if (part != 1) return not_satisfiable();
    out.length = m.size;
    return out;
  }
  const char* const count_end = m.etag.data() + m.etag.size();
  if (auto [end, ec] = std::from_chars(m.etag.data() + dash + 1, count_end, out.count);
      ec != std::errc() || end != count_end || out.count == 0) {
    return s3fail(S3ErrorCode::kInternalError, "The object's ETag has no part count");
  }
  if (part > out.count) return not_satisfiable();
  uint32_t run = 0;  // the part of the stripe before this one, 1-based
  for (size_t i = 0; i < m.stripes.size(); ++i) {
    if (i == 0 || m.stripes[i].blob_version != m.stripes[i - 1].blob_version) ++run;
    if (run < part) {
      out.first += m.stripes[i].data_len;
    } else if (run == part) {
      out.length += m.stripes[i].data_len;
    }
  }
  if (run + 1 == out.count && part == out.count) {
    // An empty part has no stripes; only the last part may be under 5 MiB, so an object
    // with one run fewer than parts ends with an empty part (or is one: a 0-byte upload).
    out.first = m.size;
    out.length = 0;
  } else if (run != out.count && run + 1 != out.count) {
    return s3fail(S3ErrorCode::kInternalError,
                  "The object's stripes do not match its part count");
  }
  return out;
}

// If-Range (RFC 9110 13.1.5): the Range applies only while the object is the one the
// client has part of. An entity tag compares strongly (a weak one never matches), a date
// must equal Last-Modified; anything else does not match, so the whole object is sent
// rather than a range of other bytes spliced onto the client's.
bool ifRangeHolds(std::string_view value, const index_kv::Manifest& m) {
  value = trimSpaces(value);
  if (value.starts_with("W/")) return false;
  if (value.starts_with('"')) return value == "\"" + m.etag + "\"";
  auto t = parseHttpDate(value);
  return t && *t == m.mtime_unix_nanos / 1'000'000'000;
}

}  // namespace

std::optional<int> evaluateConditions(const S3Request& req, const index_kv::Manifest& m,
                                      std::string_view prefix) {
  auto header = [&](std::string_view name) {
    return req.header(std::string(prefix) + std::string(name));
  };
  const int64_t mtime = m.mtime_unix_nanos / 1'000'000'000;
  if (auto im = header("if-match")) {
    if (!etagListMatches(*im, m.etag, /*weak=*/false)) return 412;
  } else if (auto ius = header("if-unmodified-since")) {
    if (auto t = parseHttpDate(*ius); t && mtime > *t) return 412;
  }
  if (auto inm = header("if-none-match")) {
    if (etagListMatches(*inm, m.etag, /*weak=*/true)) return 304;
  } else if (auto ims = header("if-modified-since")) {
    if (auto t = parseHttpDate(*ims); t && mtime <= *t) return 304;
  }
  return std::nullopt;
}

Task<S3Response> getObject(GatewayContext& ctx, const S3Request& req, BodySink& sink,
                           bool head_only) {
  auto manifest = co_await loadObject(ctx, req.bucket, req.key);
  if (!manifest) co_return errorResponse(manifest.error(), req);
  const index_kv::Manifest& m = *manifest;

  S3Response res;
  objectHeaders(m, res);
  // The one version every object has, named: S3 says which version it served.
  if (req.queryValue("versionId")) res.set("x-amz-version-id", "null");
  // A part by number is a ranged GET of its bytes (206, Content-Range), as in S3; a bad
  // one is refused before the conditions are looked at.
  std::optional<PartRange> part;
  if (auto number = req.queryValue("partNumber")) {
    if (req.header("range")) {
      co_return errorResponse({S3ErrorCode::kInvalidRequest,
                               "Cannot specify both Range header and partNumber query "
                               "parameter."},
                              req);
    }
    auto found = partRange(m, *number);
    if (!found) co_return errorResponse(found.error(), req);
    part = *found;
  }
  if (auto status = evaluateConditions(req, m, "")) {
    if (*status == 412) {
      co_return errorResponse({S3ErrorCode::kPreconditionFailed,
                               "At least one of the pre-conditions you specified did not hold"},
                              req);
    }
    // 304: no body; the validators, and the caching headers a 200 would carry (RFC 9110
    // 15.4.5: a cache refreshes what it stored from them).
    S3Response not_modified;
    not_modified.status = 304;
    not_modified.set("ETag", "\"" + m.etag + "\"");
    not_modified.set("Last-Modified", httpDate(m.mtime_unix_nanos));
    for (const auto& [name, value] : m.headers) {
      if (asciiIEquals(name, "cache-control") || asciiIEquals(name, "expires")) {
        not_modified.set(name, value);
      }
    }
    co_return not_modified;
  }
  if (auto bad = applyResponseOverrides(req, res)) co_return errorResponse(*bad, req);
  uint64_t first = 0, length = m.size;
  if (part) {
    first = part->first;
    length = part->length;
    if (part->count > 0) res.set("x-amz-mp-parts-count", std::to_string(part->count));
    if (length > 0) {
      res.status = 206;
      res.set("Content-Range", "bytes " + std::to_string(first) + "-" +
                                   std::to_string(first + length - 1) + "/" +
                                   std::to_string(m.size));
    }
  }
  std::optional<std::string_view> range_header = req.header("range");
  if (auto if_range = req.header("if-range"); if_range && range_header &&
                                             !ifRangeHolds(*if_range, m)) {
    range_header.reset();
  }
  RangeResult range = parseRange(range_header.value_or(""), m.size);
  if (range.kind == RangeResult::Kind::kUnsatisfiable) {
    S3Response err = errorResponse({S3ErrorCode::kInvalidRange,
                                    "The requested range is not satisfiable",
                                    {{"RangeRequested", std::string(*range_header)},
                                     {"ActualObjectSize", std::to_string(m.size)}}},
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
  // Additional checksum: only on request, and only when the whole object is returned (S3
  // sends none when a Range header was given, whatever it covers).
  if (!m.checksum.empty() && !range_header && !req.hasQuery("partNumber")) {
    auto mode = req.header("x-amz-checksum-mode");
    if (mode && asciiIEquals(*mode, "ENABLED")) {
      if (auto alg = checksumFromName(m.checksum.algorithm)) {
        res.set(checksumHeader(*alg), m.checksum.value);
        res.set("x-amz-checksum-type",
                m.checksum.type.empty() ? std::string("FULL_OBJECT") : m.checksum.type);
      }
    }
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
      st = co_await readObjectRange(ctx.data, m, first, length, sink, /*prepaid=*/false,
                                    BufferBudget::Holds::kNothing);
    }
  }
  if (!st.isOk() && sink.withdrawHead()) {
    // Nothing sent yet (the first stripe could not be read): an error the client retries,
    // not a 200 whose body stops short.
    co_return errorResponse(dataPathError(st), req);
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

Task<S3Response> getObjectAttributes(GatewayContext& ctx, const S3Request& req) {
  ObjectAttributesRequest want;
  auto header = req.header("x-amz-object-attributes");
  bool any = false;
  for (std::string_view rest = header.value_or(""); !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view name = trimSpaces(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (name == "ETag") {
      want.etag = true;
    } else if (name == "Checksum") {
      want.checksum = true;
    } else if (name == "ObjectParts") {
      want.object_parts = true;
    } else if (name == "StorageClass") {
      want.storage_class = true;
    } else if (name == "ObjectSize") {
      want.object_size = true;
    } else {
      co_return errorResponse({S3ErrorCode::kInvalidArgument,
                               "Invalid attribute name specified."},
                              req);
    }
    any = true;
  }
  if (!any) {
    co_return errorResponse({S3ErrorCode::kInvalidArgument,
                             "The x-amz-object-attributes header specifying the attributes to "
                             "be retrieved is either missing or empty"},
                            req);
  }
  auto manifest = co_await loadObject(ctx, req.bucket, req.key);
  if (!manifest) co_return errorResponse(manifest.error(), req);
  S3Response res = xmlResponse(objectAttributesXml(want, *manifest));
  res.set("Last-Modified", httpDate(manifest->mtime_unix_nanos));
  co_return res;
}

Task<S3Response> deleteObject(GatewayContext& ctx, const S3Request& req) {
  auto pre = co_await deletePrecondition(ctx, req);
  if (!pre) co_return errorResponse(pre.error(), req);
  auto removed = co_await removeObject(ctx, req.bucket, req.key, std::move(*pre));
  if (!removed) {
    co_return errorResponse(fromStatus(removed.error(), S3ErrorCode::kNoSuchBucket), req);
  }
  S3Response res;
  res.status = 204;
  if (req.queryValue("versionId")) res.set("x-amz-version-id", "null");
  co_return res;
}

}  // namespace granary::gateway

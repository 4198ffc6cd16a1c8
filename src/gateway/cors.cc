// CORS: matching a browser's request against a bucket's rules (cors.h), the OPTIONS
// preflight, and the Access-Control-* headers on every other response to a browser.
#include "cors.h"

#include <fmt/format.h>

#include <algorithm>

#include "granary/common/strings.h"
#include "handlers.h"
#include "s3_xml.h"

namespace granary::gateway {

bool corsWildcardMatch(std::string_view pattern, std::string_view value, bool ignore_case) {
  const auto equal = [&](std::string_view a, std::string_view b) {
    return ignore_case ? asciiIEquals(a, b) : a == b;
  };
  const size_t star = pattern.find('*');
  if (star == std::string_view::npos) return equal(pattern, value);
  const std::string_view head = pattern.substr(0, star);
  const std::string_view tail = pattern.substr(star + 1);
  return value.size() >= head.size() + tail.size() &&
         equal(head, value.substr(0, head.size())) &&
         equal(tail, value.substr(value.size() - tail.size()));
}

std::vector<std::string> corsRequestHeaders(std::string_view value) {
  std::vector<std::string> out;
  while (!value.empty()) {
    const size_t comma = value.find(',');
    std::string_view name = trimSpaces(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view{} : value.substr(comma + 1);
    if (name.empty()) continue;
    std::string lower(name);
    std::ranges::transform(lower, lower.begin(),
                           [](char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; });
    out.push_back(std::move(lower));
  }
  return out;
}

const index_kv::CorsRule* matchCorsRule(const std::vector<index_kv::CorsRule>& rules,
                                        std::string_view origin, std::string_view method,
                                        const std::vector<std::string>& headers) {
  for (const index_kv::CorsRule& rule : rules) {
    const bool origin_ok = std::ranges::any_of(rule.allowed_origins, [&](const auto& p) {
      return corsWildcardMatch(p, origin, false);
    });
    const bool method_ok = std::ranges::find(rule.allowed_methods, method) !=
                           rule.allowed_methods.end();
    const bool headers_ok = std::ranges::all_of(headers, [&](const std::string& h) {
      return std::ranges::any_of(rule.allowed_headers, [&](const auto& p) {
        return corsWildcardMatch(p, h, true);
      });
    });
    if (origin_ok && method_ok && headers_ok) return &rule;
  }
  return nullptr;
}

HeaderList corsAllowHeaders(const index_kv::CorsRule& rule, std::string_view origin,
                            const std::vector<std::string>& headers) {
  const auto list = [](const std::vector<std::string>& v) {
    return fmt::format("{}", fmt::join(v, ", "));
  };
  HeaderList out;
  const bool any_origin =
      std::ranges::find(rule.allowed_origins, "*") != rule.allowed_origins.end();
  out.emplace_back("Access-Control-Allow-Origin", any_origin ? "*" : std::string(origin));
  if (!any_origin) out.emplace_back("Access-Control-Allow-Credentials", "true");
  out.emplace_back("Access-Control-Allow-Methods", list(rule.allowed_methods));
  if (!headers.empty()) out.emplace_back("Access-Control-Allow-Headers", list(headers));
  if (!rule.expose_headers.empty()) {
    out.emplace_back("Access-Control-Expose-Headers", list(rule.expose_headers));
  }
  if (rule.max_age_seconds) {
    out.emplace_back("Access-Control-Max-Age", std::to_string(*rule.max_age_seconds));
  }
  return out;
}

Task<S3Response> corsPreflight(GatewayContext& ctx, const S3Request& req) {
  const auto origin = req.header("origin");
  if (!origin) {
    co_return errorResponse({S3ErrorCode::kBadRequest,
                             "Insufficient information. Origin request header needed."},
                            req);
  }
  const std::string_view method = req.header("access-control-request-method").value_or("");
  if (!isCorsMethod(method)) {
    co_return errorResponse({S3ErrorCode::kBadRequest,
                             fmt::format("Invalid Access-Control-Request-Method: {}", method)},
                            req);
  }
  // A bucket that does not exist has no rules: an unauthenticated preflight does not
  // learn which buckets exist (as access.cc keeps that from anonymous requests).
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b && !b.error().isNotFound()) co_return errorResponse(fromStatus(b.error()), req);
  if (!b || b->cors.empty()) {
    co_return errorResponse({S3ErrorCode::kAccessForbidden,
                             "CORSResponse: CORS is not enabled for this bucket."},
                            req);
  }
  const auto headers =
      corsRequestHeaders(req.header("access-control-request-headers").value_or(""));
  const index_kv::CorsRule* rule = matchCorsRule(b->cors, *origin, method, headers);
  S3Response res;
  if (rule == nullptr) {
    res = errorResponse({S3ErrorCode::kAccessForbidden,
                         "CORSResponse: This CORS request is not allowed. This is usually "
                         "because the evaluation of Origin, request method / "
                         "Access-Control-Request-Method or Access-Control-Request-Headers "
                         "are not whitelisted by the resource's CORS spec."},
                        req);
  } else {
    res.headers = corsAllowHeaders(*rule, *origin, headers);
  }
  res.set("Vary", std::string(kCorsVary));
  co_return res;
}

Task<void> addCorsHeaders(GatewayContext& ctx, S3Request& req) {
  const auto origin = req.header("origin");
  if (!origin) co_return;
  // Vary whatever the bucket: sent only where there are rules, it would tell an anonymous
  // caller which bucket names exist and have rules.
  req.response_headers.emplace_back("Vary", kCorsVary);
  auto b = co_await lookupBucket(ctx, req.bucket);
  if (!b || b->cors.empty()) co_return;
  if (const auto* rule = matchCorsRule(b->cors, *origin, req.method, {})) {
    HeaderList allow = corsAllowHeaders(*rule, *origin, {});
    req.response_headers.insert(req.response_headers.end(), allow.begin(), allow.end());
  }
}

}  // namespace granary::gateway

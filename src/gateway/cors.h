// Cross-origin resource sharing (CORS) as S3 evaluates a bucket's rules: which rule allows
// a browser's request, and the Access-Control-* headers that say so. Pure functions; the
// handlers (PutBucketCors, the OPTIONS preflight, the headers on other requests) are in
// cors.cc and declared in handlers.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "granary/index_kv/index.h"
#include "s3_request.h"

namespace granary::gateway {

// `value` matches `pattern`, which holds at most one `*` standing for any run of
// characters (none included). ASCII case is ignored when `ignore_case` (header names);
// origins compare exactly.
bool corsWildcardMatch(std::string_view pattern, std::string_view value, bool ignore_case);

// The Access-Control-Request-Headers of a preflight: comma-separated names, trimmed and
// lower-cased; empty names are dropped.
std::vector<std::string> corsRequestHeaders(std::string_view value);

// The first rule (S3 takes the first) that allows `origin` to send `method` with every
// header of `headers` (lower-case names), or nullptr.
const index_kv::CorsRule* matchCorsRule(const std::vector<index_kv::CorsRule>& rules,
                                        std::string_view origin, std::string_view method,
                                        const std::vector<std::string>& headers);

// What a response allowed by `rule` carries: Access-Control-Allow-Origin (`*` when the
// rule allows every origin, else the origin, with Access-Control-Allow-Credentials),
// -Allow-Methods, -Expose-Headers and -Max-Age when the rule has them, and `headers` (the
// preflight's requested headers) as -Allow-Headers.
HeaderList corsAllowHeaders(const index_kv::CorsRule& rule, std::string_view origin,
                            const std::vector<std::string>& headers);

// Every response to a request from a browser (an Origin header) to a bucket varies with
// these request headers, matched or not.
inline constexpr std::string_view kCorsVary =
    "Origin, Access-Control-Request-Headers, Access-Control-Request-Method";

}  // namespace granary::gateway

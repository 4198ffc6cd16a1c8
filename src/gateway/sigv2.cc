// AWS Signature Version 2 for S3 (header and presigned-query forms): "Signing and
// authenticating REST requests" in the S3 developer guide. The published examples there
// are reproduced in tests/unit/gateway/sigv4_test.cc. S3 still accepts it, and boto3 and
// aws-cli v1 presign with it by default (region us-east-1, no signature_version set).
//
//   StringToSign = Method \n Content-MD5 \n Content-Type \n Date-or-Expires \n
//                  CanonicalizedAmzHeaders CanonicalizedResource
//   Signature    = base64(HMAC-SHA1(secret, StringToSign))
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>

#include "sigv4.h"
#include "time_format.h"
#include "uri.h"

namespace granary::gateway {
namespace {

constexpr int64_t kMaxSkewSeconds = 15 * 60;

// The query parameters a V2 signature covers (botocore's HmacV1Auth.QSAOfInterest: the
// sub-resources and response overrides); every other parameter is left out of it.
constexpr std::string_view kSignedSubresources[] = {
    "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete", "inventory",
    "lifecycle", "location", "logging", "metrics", "notification", "object-lock",
    "partNumber", "policy", "replication", "requestPayment", "response-cache-control",
    "response-content-disposition", "response-content-encoding", "response-content-language",
    "response-content-type", "response-expires", "restore", "select", "select-type",
    "storageClass", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning",
    "versions", "website",
};

// Parameters that choose an operation (router.cc) but that a V2 signature leaves out,
// being Granary's or newer than V2: one appended to a V2-signed URL would turn it into
// another operation under the signer's name, so V2 requests may not carry them.
constexpr std::string_view kUnsignableSelectors[] = {
    "attributes", "encryption", "ownershipControls", "policyStatus", "publicAccessBlock",
    "record", "record-index", "records", "records-batch",
};

bool signedSubresource(std::string_view name) {
  return std::find(std::begin(kSignedSubresources), std::end(kSignedSubresources), name) !=
         std::end(kSignedSubresources);
}

// The Date header as clients write it for V2: IMF-fixdate, or with a numeric "+0000" zone
// (the S3 guide's examples). nullopt if neither.
std::optional<int64_t> parseV2Date(std::string_view s) {
  s = trimSpaces(s);
  if (auto t = parseHttpDate(s)) return t;
  if (auto t = parseAmzDate(s)) return t;  // an x-amz-date in SigV4's form
  if (s.ends_with(" +0000")) {
    std::string gmt(s.substr(0, s.size() - 6));
    gmt += " GMT";
    return parseHttpDate(gmt);
  }
  return std::nullopt;
}

}  // namespace

S3Result<std::optional<AuthInfo>> parseAuthV2Header(std::string_view value) {
  // "AWS <access key>:<signature>"; the access key has no ':', base64 never does.
  std::string_view rest = trimSpaces(value.substr(4));
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size()) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "AWS authorization header is invalid.  Expected AwsAccessKeyId:signature");
  }
  AuthInfo auth;
  auth.version = 2;
  auth.access_key = std::string(rest.substr(0, colon));
  auth.signature = std::string(rest.substr(colon + 1));
  auth.payload_hash = "UNSIGNED-PAYLOAD";
  return std::optional<AuthInfo>(std::move(auth));
}

S3Result<std::optional<AuthInfo>> parseAuthV2Query(
    const std::vector<std::pair<std::string, std::string>>& params) {
  const std::string* access_key = nullptr;
  const std::string* signature = nullptr;
  const std::string* expires = nullptr;
  for (const auto& [name, value] : params) {
    if (name == "AWSAccessKeyId") access_key = &value;
    if (name == "Signature") signature = &value;
    if (name == "Expires") expires = &value;
  }
  if (access_key == nullptr || signature == nullptr || expires == nullptr ||
      access_key->empty() || signature->empty()) {
    return s3fail(S3ErrorCode::kAccessDenied,
                  "Query-string authentication requires the Signature, Expires and "
                  "AWSAccessKeyId parameters");
  }
  if (!allDigits(*expires) || expires->size() > 12) {
    return s3fail(S3ErrorCode::kAccessDenied, "Invalid date (should be seconds since epoch): " +
                                                  *expires);
  }
  AuthInfo auth;
  auth.version = 2;
  auth.presigned = true;
  auth.access_key = *access_key;
  auth.signature = *signature;
  auth.expires_seconds = std::strtoll(expires->c_str(), nullptr, 10);
  auth.payload_hash = "UNSIGNED-PAYLOAD";
  return std::optional<AuthInfo>(std::move(auth));
}

std::string stringToSignV2(const HttpRequestView& req, const AuthInfo& auth,
                           std::string_view path, V2DateLine date_line) {
  // A presigned URL carries its headers in the query (botocore's HmacV1QueryAuth moves
  // Content-Type, Content-MD5 and every x-amz-* header there): what it names there is
  // what was signed (router.cc makes them the request's headers once the signature holds).
  std::vector<std::pair<std::string, std::string>> from_query;
  if (auth.presigned) {
    for (auto& [name, v] : parseQuery(splitTarget(req.target).second)) {
      std::string lower = asciiLower(name);
      if (lower == "content-md5" || lower == "content-type" || isHoistedHeaderParameter(lower)) {
        from_query.emplace_back(std::move(lower), std::move(v));
      }
    }
  }
  auto value = [&](std::string_view name) {
    for (const auto& [n, v] : from_query) {
      if (n == name) return std::string(trimSpaces(v));
    }
    return std::string(trimSpaces(req.header(name).value_or("")));
  };
  std::string out;
  out.reserve(256);
  out.append(req.method).push_back('\n');
  out.append(value("content-md5")).push_back('\n');
  out.append(value("content-type")).push_back('\n');
  if (auth.presigned) {
    out.append(std::to_string(auth.expires_seconds)).push_back('\n');
  } else if (date_line == V2DateLine::kDateHeader) {
    out.append(value("date")).push_back('\n');
  } else {
    out.push_back('\n');
  }
  // x-amz-* headers: sorted by name, repeated ones joined with ',', values trimmed; one
  // the query names is the query's.
  std::map<std::string_view, std::string> amz;
  for (const auto& [name, v] : from_query) {
    if (name.starts_with("x-amz-")) amz[name] = trimSpaces(v);
  }
  for (const auto& [name, v] : req.headers) {
    if (!name.starts_with("x-amz-")) continue;
    if (std::any_of(from_query.begin(), from_query.end(),
                    [&](const auto& q) { return q.first == name; })) {
      continue;
    }
    std::string& joined = amz[name];
    if (!joined.empty()) joined.push_back(',');
    joined.append(trimSpaces(v));
  }
  for (const auto& [name, v] : amz) {
    out.append(name).push_back(':');
    out.append(v).push_back('\n');
  }
  // The resource: the bucket (also when the Host header names it), the path as sent, and
  // the signed sub-resources sorted by name, their values percent-decoded.
  if (!req.host_bucket.empty()) {
    out.push_back('/');
    out.append(req.host_bucket);
  }
  out.append(path.empty() && req.host_bucket.empty() ? std::string_view("/") : path);
  // "name" alone and "name=" sign differently: split the query as sent.
  std::vector<std::pair<std::string_view, std::optional<std::string>>> subresources;
  std::string_view query = splitTarget(req.target).second;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view segment = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = segment.find('=');
    const std::string_view name = segment.substr(0, eq);
    if (!signedSubresource(name)) continue;
    std::optional<std::string> v;
    if (eq != std::string_view::npos) {
      const std::string_view raw = segment.substr(eq + 1);
      v = percentDecode(raw, true).value_or(std::string(raw));  // as the router reads it
    }
    subresources.emplace_back(name, std::move(v));
  }
  std::stable_sort(subresources.begin(), subresources.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < subresources.size(); ++i) {
    out.push_back(i == 0 ? '?' : '&');
    out.append(subresources[i].first);
    if (subresources[i].second) out.append("=").append(*subresources[i].second);
  }
  return out;
}

std::string signV2(std::string_view secret, std::string_view string_to_sign) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> mac{};
  size_t len = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA1", nullptr, secret.data(), secret.size(),
                reinterpret_cast<const unsigned char*>(string_to_sign.data()),
                string_to_sign.size(), mac.data(), mac.size(), &len) == nullptr) {
    return {};  // never matches a signature
  }
  std::array<unsigned char, 4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1> text{};
  const int n = EVP_EncodeBlock(text.data(), mac.data(), static_cast<int>(len));
  return std::string(reinterpret_cast<const char*>(text.data()), static_cast<size_t>(n));
}

S3Result<void> verifyV2(const HttpRequestView& req, const AuthInfo& auth,
                        std::string_view secret, int64_t now_unix_seconds) {
  // Nor Granary's x-granary-* headers and parameters (x-granary-index would index an
  // upload), which a V2 signature does not cover either.
  auto unsignable = [](std::string_view what) {
    std::string message = "Signature Version 2 cannot sign ";
    message += what;
    message += "; sign the request with Signature Version 4";
    return s3fail(S3ErrorCode::kAccessDenied, std::move(message));
  };
  for (const auto& [name, value] : req.headers) {
    if (name.starts_with("x-granary-")) return unsignable(name);
  }
  // A parameter name written other than plainly ("%61cl", "a+b"): the signed sub-resources
  // are picked from the names as sent, the router decodes them, so "&%61cl" would turn a
  // signed request into an unsigned GetBucketAcl. No S3 parameter name needs encoding.
  for (const auto& [name, value] : parseQueryRaw(splitTarget(req.target).second)) {
    if (name.find_first_of("%+") != std::string::npos) {
      return unsignable("an encoded parameter name (" + name + ")");
    }
  }
  // Names as the router reads them (percent-decoded).
  for (const auto& [name, value] : parseQuery(splitTarget(req.target).second)) {
    if (name.starts_with("x-granary-") ||
        std::find(std::begin(kUnsignableSelectors), std::end(kUnsignableSelectors), name) !=
            std::end(kUnsignableSelectors)) {
      return unsignable(name);
    }
  }
  if (auth.presigned) {
    if (now_unix_seconds > auth.expires_seconds) {
      return s3fail(S3ErrorCode::kAccessDenied, "Request has expired");
    }
  } else {
    // x-amz-date, when sent, is the request's time (the Date line then signs whatever
    // Date header there is, usually none).
    std::optional<std::string_view> date = req.header("x-amz-date");
    if (!date) date = req.header("date");
    std::optional<int64_t> at = date ? parseV2Date(*date) : std::nullopt;
    if (!at) {
      return s3fail(S3ErrorCode::kAccessDenied,
                    "AWS authentication requires a valid Date or x-amz-date header");
    }
    if (*at - now_unix_seconds > kMaxSkewSeconds || now_unix_seconds - *at > kMaxSkewSeconds) {
      return s3fail(S3ErrorCode::kRequestTimeTooSkewed,
                    "The difference between the request time and the server's time is too "
                    "large.");
    }
  }
  auto matchWith = [&](V2DateLine date_line) -> S3Result<void> {
    auto sign = [&](std::string_view path) {
      return signV2(secret, stringToSignV2(req, auth, path, date_line));
    };
    const std::string_view path = splitTarget(req.target).first;
    // botocore signs a path-style bucket request ("/bucket") with the bucket's resource as
    // S3 writes it, "/bucket/".
    if (req.host_bucket.empty() && path.size() > 1 &&
        path.find('/', 1) == std::string_view::npos &&
        matchSignature(std::string(path) + "/", auth.signature, sign)) {
      return {};
    }
    return matchSignature(path, auth.signature, sign);
  };
  auto matched = matchWith(V2DateLine::kDateHeader);
  // With x-amz-date, S3 ignores the Date header and signs an empty Date line; botocore
  // signs the Date header it adds: both are taken.
  if (!matched && !auth.presigned && req.header("x-amz-date") && req.header("date")) {
    if (auto empty = matchWith(V2DateLine::kEmpty)) return empty;
  }
  return matched;
}

}  // namespace granary::gateway

// AWS Signature Version 4 for S3 (header and presigned-query forms). The wire formats are
// AWS's: "Authenticating Requests (AWS Signature Version 4)" in the S3 API reference; the
// published examples there are reproduced in tests/unit/gateway/sigv4_test.cc.
#include "sigv4.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "granary/common/hex.h"
#include "granary/common/strings.h"
#include "time_format.h"
#include "uri.h"

namespace granary::gateway {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr int64_t kMaxSkewSeconds = 15 * 60;
constexpr int64_t kMaxPresignedExpires = 7 * 24 * 3600;  // 604800
constexpr size_t kMaxCachedKeys = 4096;

// OpenSSL algorithm objects are fetched once per process: fetching is a locked name lookup
// that would otherwise be paid on every request. They are immutable and thread safe once
// fetched. Failing to fetch SHA-256 or HMAC cannot happen on a working OpenSSL 3 install
// and leaves nothing sensible to do: crash loudly.
[[noreturn]] void cryptoFailure(const char* what) {
  std::fprintf(stderr, "granary: OpenSSL failure: %s\n", what);
  std::abort();
}

EVP_MD* sha256Md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) {
    cryptoFailure("EVP_MD_fetch(SHA256)");
  }
  return md;
}

EVP_MAC* hmacMac() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) {
    cryptoFailure("EVP_MAC_fetch(HMAC)");
  }
  return mac;
}

// One HMAC-SHA256 context per thread, its digest set once: naming the digest on every
// init made OpenSSL fetch it again each time. EVP_MAC_init with a new key re-keys it.
EVP_MAC_CTX* threadHmacContext() {
  struct Holder {
    EVP_MAC_CTX* ctx = nullptr;
    Holder() {
      ctx = EVP_MAC_CTX_new(hmacMac());
      if (ctx == nullptr) cryptoFailure("EVP_MAC_CTX_new");
      char digest[] = "SHA256";
      OSSL_PARAM params[] = {
          OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
          OSSL_PARAM_construct_end(),
      };
      if (EVP_MAC_CTX_set_params(ctx, params) != 1) cryptoFailure("HMAC digest");
    }
    ~Holder() { EVP_MAC_CTX_free(ctx); }
  };
  thread_local Holder holder;
  return holder.ctx;
}

std::array<uint8_t, 32> hmacSha256(std::span<const uint8_t> key, std::string_view data) {
  std::array<uint8_t, 32> out{};
  EVP_MAC_CTX* ctx = threadHmacContext();
  size_t len = 0;
  if (EVP_MAC_init(ctx, key.data(), key.size(), nullptr) != 1 ||
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1 ||
      EVP_MAC_final(ctx, out.data(), &len, out.size()) != 1 || len != out.size()) {
    cryptoFailure("HMAC-SHA256");
  }
  return out;
}


bool isHex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}


std::vector<std::string> splitSignedHeaders(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    size_t semi = list.find(';');
    std::string_view name = trimSpaces(list.substr(0, semi));
    if (!name.empty()) {
      out.push_back(asciiLower(name));
    }
    list = semi == std::string_view::npos ? std::string_view() : list.substr(semi + 1);
  }
  return out;
}

bool validPayloadHash(std::string_view h) {
  static constexpr std::string_view kAllowed[] = {
      "UNSIGNED-PAYLOAD",
      "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
      "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
      "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
      "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
  };
  return isHex64(h) || std::find(std::begin(kAllowed), std::end(kAllowed), h) != std::end(kAllowed);
}

bool hasHost(const std::vector<std::string>& signed_headers) {
  return std::find(signed_headers.begin(), signed_headers.end(), "host") != signed_headers.end();
}

S3Result<std::optional<AuthInfo>> parseHeaderAuth(const HttpRequestView& req,
                                                  std::string_view value) {
  constexpr auto kMalformed = S3ErrorCode::kAuthorizationHeaderMalformed;
  AuthInfo auth;
  std::optional<std::string_view> credential, signed_headers, signature;
  // Components are "Key=value" separated by commas and/or spaces; values contain neither.
  std::string_view rest = value.substr(kAlgorithm.size());
  while (true) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == ',' || rest.front() == '\t')) {
      rest.remove_prefix(1);
    }
    if (rest.empty()) {
      break;
    }
    size_t end = rest.find_first_of(", \t");
    std::string_view component = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    size_t eq = component.find('=');
    if (eq == std::string_view::npos) {
      return s3fail(kMalformed,
                    "The authorization header is malformed; the authorization "
                    "component \"" +
                        std::string(component) + "\" is malformed.");
    }
    std::string_view key = component.substr(0, eq);
    std::string_view val = component.substr(eq + 1);
    std::optional<std::string_view>* slot = key == "Credential"      ? &credential
                                            : key == "SignedHeaders" ? &signed_headers
                                            : key == "Signature"     ? &signature
                                                                     : nullptr;
    if (slot == nullptr || slot->has_value()) {
      return s3fail(kMalformed,
                    "The authorization header is malformed; unexpected or repeated "
                    "component \"" +
                        std::string(key) + "\".");
    }
    *slot = val;
  }
  if (!credential || !signed_headers || !signature) {
    return s3fail(kMalformed,
                  "The authorization header is malformed; it must contain "
                  "Credential, SignedHeaders and Signature.");
  }
  if (!parseCredential(*credential, auth)) {
    return s3fail(kMalformed,
                  "The authorization header is malformed; the Credential is "
                  "mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/"
                  "aws4_request\".");
  }
  if (auth.service != "s3") {
    return s3fail(kMalformed, "The authorization header is malformed; incorrect service \"" +
                                  auth.service + "\". This endpoint belongs to \"s3\".");
  }
  auth.signed_headers = splitSignedHeaders(*signed_headers);
  if (!hasHost(auth.signed_headers)) {
    return s3fail(kMalformed,
                  "The authorization header is malformed; the host header must "
                  "be signed.");
  }
  if (!isHex64(*signature)) {
    return s3fail(kMalformed,
                  "The authorization header is malformed; the Signature must be "
                  "64 hexadecimal digits.");
  }
  auth.signature = asciiLower(*signature);

  if (auto amz_date = req.header("x-amz-date")) {
    auth.amz_date = std::string(trimSpaces(*amz_date));
  } else if (auto date = req.header("date")) {
    // The ISO 8601 basic form S3 asks of a Date header that signs alone, or an HTTP date.
    const std::string_view d = trimSpaces(*date);
    if (parseAmzDate(d)) {
      auth.amz_date = std::string(d);
    } else if (auto t = parseHttpDate(d)) {
      auth.amz_date = amzDate(*t);
    }
  }
  if (!parseAmzDate(auth.amz_date)) {
    return s3fail(S3ErrorCode::kAccessDenied,
                  "AWS authentication requires a valid Date or x-amz-date header");
  }
  if (auth.amz_date.compare(0, 8, auth.date) != 0) {
    return s3fail(kMalformed,
                  "The authorization header is malformed; Invalid credential date. "
                  "Date is not the same as X-Amz-Date.");
  }
  std::optional<std::string_view> payload = req.header("x-amz-content-sha256");
  if (!payload) {
    return s3fail(S3ErrorCode::kInvalidRequest,
                  "Missing required header for this request: x-amz-content-sha256");
  }
  auth.payload_hash = std::string(trimSpaces(*payload));
  if (!validPayloadHash(auth.payload_hash)) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-"
                  "PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-"
                  "PAYLOAD-TRAILER, or a valid sha256 value.");
  }
  return std::optional<AuthInfo>(std::move(auth));
}

S3Result<std::optional<AuthInfo>> parseQueryAuth(
    const std::vector<std::pair<std::string, std::string>>& params) {
  constexpr auto kQueryError = S3ErrorCode::kAuthorizationQueryParametersError;
  auto get = [&](std::string_view name) -> std::optional<std::string> {
    for (const auto& [n, v] : params) {
      if (n == name) {
        return v;
      }
    }
    return std::nullopt;
  };
  std::optional<std::string> algorithm = get("X-Amz-Algorithm");
  std::optional<std::string> credential = get("X-Amz-Credential");
  std::optional<std::string> amz_date = get("X-Amz-Date");
  std::optional<std::string> expires = get("X-Amz-Expires");
  std::optional<std::string> signed_headers = get("X-Amz-SignedHeaders");
  std::optional<std::string> signature = get("X-Amz-Signature");
  if (algorithm && *algorithm != kAlgorithm) {
    return s3fail(kQueryError, "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"");
  }
  if (!algorithm || !credential || !amz_date || !expires || !signed_headers || !signature) {
    return s3fail(kQueryError,
                  "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                  "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and "
                  "X-Amz-Expires parameters.");
  }
  AuthInfo auth;
  auth.presigned = true;
  if (!parseCredential(*credential, auth)) {
    return s3fail(kQueryError,
                  "Error parsing the X-Amz-Credential parameter; the Credential "
                  "is mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/"
                  "SERVICE/aws4_request\".");
  }
  if (auth.service != "s3") {
    return s3fail(kQueryError,
                  "Error parsing the X-Amz-Credential parameter; incorrect "
                  "service \"" +
                      auth.service +
                      "\". This endpoint belongs to "
                      "\"s3\".");
  }
  auth.amz_date = *amz_date;
  if (!parseAmzDate(auth.amz_date)) {
    return s3fail(kQueryError,
                  "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"");
  }
  if (auth.amz_date.compare(0, 8, auth.date) != 0) {
    return s3fail(kQueryError, "Invalid credential date. Date is not the same as X-Amz-Date.");
  }
  if (!allDigits(*expires) || expires->size() > 12) {
    return s3fail(kQueryError, "X-Amz-Expires should be a number between 0 and 604800");
  }
  auth.expires_seconds = std::strtoll(expires->c_str(), nullptr, 10);
  auth.signed_headers = splitSignedHeaders(*signed_headers);
  if (!hasHost(auth.signed_headers)) {
    return s3fail(kQueryError, "X-Amz-SignedHeaders must contain host");
  }
  if (!isHex64(*signature)) {
    return s3fail(kQueryError, "X-Amz-Signature must be 64 hexadecimal digits");
  }
  auth.signature = asciiLower(*signature);
  // Presigned URLs carry no body hash unless the signer put one in the query.
  auth.payload_hash = get("X-Amz-Content-Sha256").value_or("UNSIGNED-PAYLOAD");
  if (!validPayloadHash(auth.payload_hash)) {
    return s3fail(kQueryError,
                  "X-Amz-Content-Sha256 must be UNSIGNED-PAYLOAD, a STREAMING-* value or a "
                  "valid sha256 value.");
  }
  return std::optional<AuthInfo>(std::move(auth));
}

// Trimmed, each run of spaces (and of tabs with `fold_tabs`) one space. The SDKs differ on
// tabs inside a value: botocore (' '.join(value.split())) and the JS SDK (/\s+/g) fold
// them, the Go SDKs keep them; verify() tries both.
void appendCanonicalHeaderValue(std::string& out, std::string_view value, bool fold_tabs) {
  value = trimSpaces(value);
  bool in_space = false;
  for (char c : value) {
    if (c == ' ' || (fold_tabs && c == '\t')) {
      if (!in_space) {
        out.push_back(' ');
      }
      in_space = true;
    } else {
      out.push_back(c);
      in_space = false;
    }
  }
}

std::string canonicalQuery(std::string_view query, bool presigned) {
  std::vector<std::pair<std::string, std::string>> params;
  for (auto& [raw_name, raw_value] : parseQueryRaw(query)) {
    // Decoded as the router decodes them ('+' is a space): a name or value must mean to the
    // signature what it means to the handler ("a+b" signed as "a%2Bb" would be read as
    // "a b"). An undecodable escape is canonicalised as literal text; the signature will
    // not match whatever the client signed, which is the right outcome.
    std::optional<std::string> name = percentDecode(raw_name, true);
    std::optional<std::string> value = percentDecode(raw_value, true);
    std::string n = name ? std::move(*name) : raw_name;
    if (presigned && n == "X-Amz-Signature") {
      continue;
    }
    params.emplace_back(uriEncode(n, true), uriEncode(value ? *value : raw_value, true));
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [n, v] : params) {
    if (!out.empty()) {
      out.push_back('&');
    }
    out.append(n).append("=").append(v);
  }
  return out;
}

std::string buildCanonicalRequest(const HttpRequestView& req, const AuthInfo& auth,
                                  std::string_view canonical_uri, std::string_view query,
                                  bool fold_tabs = true) {
  std::string out;
  out.reserve(512);
  out.append(req.method).push_back('\n');
  out.append(canonical_uri.empty() ? std::string_view("/") : canonical_uri).push_back('\n');
  out.append(canonicalQuery(query, auth.presigned)).push_back('\n');
  for (const std::string& name : auth.signed_headers) {
    out.append(name).push_back(':');
    bool first = true;
    for (const auto& [n, v] : req.headers) {
      if (n == name) {
        if (!first) {
          out.push_back(',');
        }
        appendCanonicalHeaderValue(out, v, fold_tabs);
        first = false;
      }
    }
    out.push_back('\n');
  }
  out.push_back('\n');
  for (size_t i = 0; i < auth.signed_headers.size(); ++i) {
    if (i > 0) {
      out.push_back(';');
    }
    out.append(auth.signed_headers[i]);
  }
  out.push_back('\n');
  out.append(auth.payload_hash);
  return out;
}

}  // namespace

// Credential = <access key>/<yyyymmdd>/<region>/<service>/aws4_request. The access key is
// everything before the last four parts.
bool parseCredential(std::string_view credential, AuthInfo& auth) {
  std::string_view parts[4];
  std::string_view rest = credential;
  for (int i = 3; i >= 0; --i) {
    size_t slash = rest.rfind('/');
    if (slash == std::string_view::npos) {
      return false;
    }
    parts[i] = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  // Region and service name the signing key, which is cached: short names of ASCII letters,
  // digits, '-', '_' and '.' only, so that a caller cannot fill the cache with long ones.
  const auto name = [](std::string_view v) {
    return !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '-' || c == '_' || c == '.';
    });
  };
  if (rest.empty() || parts[0].size() != 8 || !allDigits(parts[0]) || !name(parts[1]) ||
      !name(parts[2]) || parts[3] != "aws4_request") {
    return false;
  }
  auth.access_key = std::string(rest);
  auth.date = std::string(parts[0]);
  auth.region = std::string(parts[1]);
  auth.service = std::string(parts[2]);
  return true;
}

std::optional<std::string_view> HttpRequestView::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) {
      return std::string_view(v);
    }
  }
  return std::nullopt;
}

std::string AuthInfo::scope() const {
  return date + "/" + region + "/" + service + "/aws4_request";
}

S3Result<std::optional<AuthInfo>> parseAuth(const HttpRequestView& req) {
  std::optional<std::string_view> header = req.header("authorization");
  if (header) {
    header = trimSpaces(*header);
  }
  bool has_header = header && !header->empty();

  auto [path, query] = splitTarget(req.target);
  std::vector<std::pair<std::string, std::string>> params;
  for (auto& [raw_name, raw_value] : parseQueryRaw(query)) {
    std::optional<std::string> name = percentDecode(raw_name, false);
    std::optional<std::string> value = percentDecode(raw_value, false);
    if (name && value) {
      params.emplace_back(std::move(*name), std::move(*value));
    }
  }
  auto has_param = [&](std::string_view name) {
    return std::any_of(params.begin(), params.end(),
                       [&](const auto& p) { return p.first == name; });
  };
  bool has_v4_query =
      has_param("X-Amz-Algorithm") || has_param("X-Amz-Credential") || has_param("X-Amz-Signature");
  bool has_v2_query = has_param("AWSAccessKeyId") || has_param("Signature");

  if (has_header && (has_v4_query || has_v2_query)) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
                  "Signature query string parameter or the Authorization header should be "
                  "specified");
  }
  if (has_header) {
    std::string_view v = *header;
    if (v.starts_with(kAlgorithm) &&
        (v.size() == kAlgorithm.size() || v[kAlgorithm.size()] == ' ' ||
         v[kAlgorithm.size()] == '\t')) {
      return parseHeaderAuth(req, v);
    }
    if (v.starts_with("AWS ")) {
      return parseAuthV2Header(v);
    }
    // As S3 answers it: 400, not 403 (the request is not understood, not refused).
    return s3fail(S3ErrorCode::kInvalidArgument, "Unsupported Authorization Type");
  }
  if (has_v4_query) {
    return parseQueryAuth(params);
  }
  if (has_v2_query) {
    return parseAuthV2Query(params);
  }
  return std::optional<AuthInfo>();
}

std::string canonicalRequest(const HttpRequestView& req, const AuthInfo& auth) {
  auto [path, query] = splitTarget(req.target);
  return buildCanonicalRequest(req, auth, path, query);
}

std::string stringToSign(const AuthInfo& auth, std::string_view canonical_request) {
  std::string out;
  out.reserve(160);
  out.append(kAlgorithm).push_back('\n');
  out.append(auth.amz_date).push_back('\n');
  out.append(auth.scope()).push_back('\n');
  out.append(sha256Hex(canonical_request));
  return out;
}

std::array<uint8_t, 32> deriveSigningKey(std::string_view secret, std::string_view date,
                                         std::string_view region, std::string_view service) {
  std::string k_secret = "AWS4";
  k_secret.append(secret);
  auto k_date = hmacSha256(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(k_secret.data()), k_secret.size()),
      date);
  OPENSSL_cleanse(k_secret.data(), k_secret.size());
  auto k_region = hmacSha256(k_date, region);
  auto k_service = hmacSha256(k_region, service);
  return hmacSha256(k_service, "aws4_request");
}

std::string hmacSha256Hex(const std::array<uint8_t, 32>& key, std::string_view data) {
  return toHex(hmacSha256(key, data));
}

std::string sha256Hex(std::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &len, sha256Md(), nullptr) != 1 ||
      len != out.size()) {
    cryptoFailure("SHA-256");
  }
  return toHex(out);
}

std::string SigningKeyCache::idOf(std::string_view secret, std::string_view date,
                                  std::string_view region, std::string_view service) {
  std::string id;
  id.reserve(secret.size() + date.size() + region.size() + service.size() + 3);
  id.append(secret)
      .append(1, '\0')
      .append(date)
      .append(1, '\0')
      .append(region)
      .append(1, '\0')
      .append(service);
  return id;
}

std::array<uint8_t, 32> SigningKeyCache::get(std::string_view secret, std::string_view date,
                                             std::string_view region, std::string_view service) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keys_.find(idOf(secret, date, region, service));
    if (it != keys_.end()) {
      return it->second;
    }
  }
  return deriveSigningKey(secret, date, region, service);
}

void SigningKeyCache::remember(std::string_view secret, std::string_view date,
                               std::string_view region, std::string_view service,
                               const std::array<uint8_t, 32>& key) {
  std::string id = idOf(secret, date, region, service);
  std::lock_guard<std::mutex> lock(mu_);
  if (keys_.contains(id)) return;
  // Keys are per day: a full cache is mostly yesterday's keys. Start over.
  if (keys_.size() >= kMaxCachedKeys) {
    keys_.clear();
  }
  keys_.emplace(std::move(id), key);
}

size_t SigningKeyCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.size();
}

S3Result<void> verify(const HttpRequestView& req, const AuthInfo& auth, std::string_view secret,
                      int64_t now_unix_seconds, SigningKeyCache& keys) {
  if (auth.version == 2) {
    return verifyV2(req, auth, secret, now_unix_seconds);
  }
  std::optional<int64_t> signed_at = parseAmzDate(auth.amz_date);
  if (!signed_at) {
    return s3fail(S3ErrorCode::kAccessDenied,
                  "AWS authentication requires a valid Date or x-amz-date header");
  }
  if (auth.presigned) {
    if (auth.expires_seconds < 0 || auth.expires_seconds > kMaxPresignedExpires) {
      return s3fail(S3ErrorCode::kAuthorizationQueryParametersError,
                    "X-Amz-Expires must be less than a week (in seconds) that is; 604800");
    }
    if (*signed_at - now_unix_seconds > kMaxSkewSeconds) {
      return s3fail(S3ErrorCode::kAccessDenied, "Request is not valid yet");
    }
    if (now_unix_seconds > *signed_at + auth.expires_seconds) {
      return s3fail(S3ErrorCode::kAccessDenied, "Request has expired");
    }
  } else if (*signed_at - now_unix_seconds > kMaxSkewSeconds ||
             now_unix_seconds - *signed_at > kMaxSkewSeconds) {
    return s3fail(S3ErrorCode::kRequestTimeTooSkewed,
                  "The difference between the request time and the server's time is too "
                  "large.");
  }
  if (!hasHost(auth.signed_headers)) {
    return s3fail(auth.presigned ? S3ErrorCode::kAuthorizationQueryParametersError
                                 : S3ErrorCode::kAuthorizationHeaderMalformed,
                  "The host header must be signed.");
  }
  // Every x-amz-* (and Granary's x-granary-*) header sent must be signed, as S3 requires:
  // an unsigned one could change what a presigned or captured request does
  // (x-amz-copy-source turns a PUT into a copy of something the signer may read). Not
  // x-amz-content-sha256, which S3 accepts unsigned: a header-signed request's canonical
  // request ends with its value, and a presigned one takes its payload hash from the query.
  for (const auto& [name, value] : req.headers) {
    if ((name.starts_with("x-amz-") || name.starts_with("x-granary-")) &&
        name != "x-amz-content-sha256" && std::find(auth.signed_headers.begin(),
                                                auth.signed_headers.end(),
                                                name) == auth.signed_headers.end()) {
      std::string message = "There were headers present in the request which were not signed: ";
      message += name;
      return s3fail(S3ErrorCode::kAccessDenied, std::move(message));
    }
  }

  std::array<uint8_t, 32> key = keys.get(secret, auth.date, auth.region, auth.service);
  const auto [path, query] = splitTarget(req.target);
  auto match = [&](bool fold_tabs) {
    return matchSignature(path, auth.signature, [&](std::string_view signed_path) {
      return hmacSha256Hex(key, stringToSign(auth, buildCanonicalRequest(req, auth, signed_path,
                                                                         query, fold_tabs)));
    });
  };
  auto matched = match(/*fold_tabs=*/true);
  // A signed value with a tab inside, from a signer that kept it (appendCanonicalHeaderValue):
  // looked for only once the usual form failed.
  auto tabbed = [&] {
    return std::any_of(req.headers.begin(), req.headers.end(), [&](const auto& h) {
      return trimSpaces(h.second).find('\t') != std::string_view::npos &&
             std::find(auth.signed_headers.begin(), auth.signed_headers.end(), h.first) !=
                 auth.signed_headers.end();
    });
  };
  if (!matched && tabbed() && match(/*fold_tabs=*/false)) matched = {};
  if (matched) keys.remember(secret, auth.date, auth.region, auth.service, key);
  return matched;
}

S3Result<void> matchSignature(std::string_view path, std::string_view provided,
                              const std::function<std::string(std::string_view)>& sign) {
  auto matches = [&](std::string_view p) {
    const std::string expected = sign(p);  // empty when signing failed: never a match
    return !expected.empty() && expected.size() == provided.size() &&
           CRYPTO_memcmp(expected.data(), provided.data(), expected.size()) == 0;
  };
  if (matches(path)) return {};
  if (std::optional<std::string> decoded = percentDecode(path, false)) {
    const std::string normalised = uriEncode(*decoded, false);
    if (normalised != path && matches(normalised)) return {};
  }
  return s3fail(S3ErrorCode::kSignatureDoesNotMatch,
                "The request signature we calculated does not match the signature you "
                "provided. Check your key and signing method.");
}

namespace {

// A SigV4 presigned URL's own parameters, as AWS names them.
constexpr std::array<std::string_view, 8> kSigV4QueryParameters = {
    "X-Amz-Algorithm",     "X-Amz-Credential", "X-Amz-Date",           "X-Amz-Expires",
    "X-Amz-SignedHeaders", "X-Amz-Signature",  "X-Amz-Security-Token", "X-Amz-Content-Sha256"};

}  // namespace

bool isAuthParameter(std::string_view name) {
  return std::find(kSigV4QueryParameters.begin(), kSigV4QueryParameters.end(), name) !=
             kSigV4QueryParameters.end() ||
         name == "AWSAccessKeyId" || name == "Signature" || name == "Expires";
}

bool isHoistedHeaderParameter(std::string_view name) {
  if (!asciiLower(name).starts_with("x-amz-")) return false;
  return std::none_of(kSigV4QueryParameters.begin(), kSigV4QueryParameters.end(),
                      [&](std::string_view p) { return asciiIEquals(p, name); });
}

}  // namespace granary::gateway

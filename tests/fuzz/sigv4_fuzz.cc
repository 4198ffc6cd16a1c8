// Fuzz target: SigV4 request authentication (src/gateway/sigv4.h: parseAuth, with
// canonicalRequest, stringToSign and verify on what it accepts) and the URI helpers the
// gateway reads requests with (src/gateway/uri.h).
// The input is an HTTP/1.1 request head: "METHOD target HTTP/1.1", then "Name: value" lines
// (names lower-cased, values trimmed, as the server hands them to parseAuth).
// parseAuth properties:
//  - a refusal is one of the S3 errors parseAuth answers with (AuthorizationHeaderMalformed,
//    AuthorizationQueryParametersError, AccessDenied, InvalidArgument, InvalidRequest);
//  - the request is anonymous (nullopt) exactly when it has no Authorization header and no
//    SigV4 or SigV2 query credentials (a SigV2 AWSAccessKeyId or Signature alone counts);
//    header and query credentials together are InvalidArgument;
//  - SigV2 credentials (checkV2) are well formed and sign-then-verify as SigV4's do;
//  - accepted credentials are well formed: presigned exactly when there is no Authorization
//    header; an access key and a region; service "s3"; an 8-digit date that begins the
//    16-character yyyymmddThhmmssZ signing time; a 64-digit lower-case signature; signed
//    header names that are lower-case, trimmed, free of ';' and include "host"; header
//    credentials come with a valid payload hash, presigned ones with 0 <= expiry < 10^12;
//    scope() is date/region/service/aws4_request;
//  - round trip: the Authorization header (or presigned query) written from the parsed
//    credentials parses back to the same credentials;
//  - the canonical request starts with the method and ends with the signed header list and
//    the payload hash;
//  - sign, then verify: the request signed (by this target) with the secret over its own
//    canonical request verifies at its own signing time (presigned URLs valid for more than
//    a week are refused, with AuthorizationQueryParametersError); with one hex digit of the
//    signature changed it is SignatureDoesNotMatch; the signature as sent verifies or is
//    SignatureDoesNotMatch.
// URI properties, on the whole input, the target and every header value:
//  - percentDecode refuses exactly the strings with a '%' not followed by two hex digits,
//    and otherwise returns 2 bytes fewer per '%' (never more bytes than it was given);
//    '+' decodes as "%20" does when plus_is_space, and as itself otherwise;
//  - uriEncode writes only unreserved characters, '/' (when kept) and %XX with upper-case
//    hex, and percentDecode gives back exactly what was encoded;
//  - parseQuery is parseQueryRaw with names and values percent-decoded where they decode;
//    no name holds '&' or '=', no value '&';
//  - splitTarget's path and query lie inside the target, the path holds no '?', and a
//    non-empty query follows a '?'.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "granary/common/strings.h"
#include "sigv4.h"
#include "time_format.h"
#include "uri.h"

using namespace granary::gateway;

namespace {

// AWS's example credentials (the S3 API reference's SigV4 examples): the seeds' signatures
// were made with them.
constexpr std::string_view kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr int64_t kMaxPresignedExpires = 7 * 24 * 3600;

std::string_view g_input;  // for failure reports

[[noreturn]] void fail(const char* what) { granary::fuzz::fail("sigv4_fuzz", what, g_input); }

// Proof that each kind of check ran (see GranaryFuzzSelfCheck).
uint64_t g_header_auth = 0;       // accepted Authorization headers
uint64_t g_presigned = 0;         // accepted presigned queries
uint64_t g_anonymous = 0;
uint64_t g_refused = 0;
uint64_t g_signed_verified = 0;   // requests signed here that verified
uint64_t g_sent_verified = 0;     // requests whose own signature verified
uint64_t g_unsigned_refused = 0;  // refused for what their signature cannot cover
uint64_t g_decoded = 0;           // percentDecode accepted
uint64_t g_undecodable = 0;       // percentDecode refused

struct Request {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;

  HttpRequestView view() const { return HttpRequestView{method, target, headers, {}}; }
};

std::string_view nextLine(std::string_view& rest) {
  const size_t nl = rest.find('\n');
  std::string_view line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

Request parseHead(std::string_view in) {
  Request req;
  std::string_view rest = in;
  const std::string_view request_line = nextLine(rest);
  const size_t sp = request_line.find(' ');
  req.method = std::string(request_line.substr(0, sp));
  if (sp != std::string_view::npos) {
    std::string_view target = request_line.substr(sp + 1);
    const size_t version = target.rfind(" HTTP/");
    if (version != std::string_view::npos) target = target.substr(0, version);
    req.target = std::string(target);
  }
  while (!rest.empty()) {
    const std::string_view line = nextLine(rest);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    req.headers.emplace_back(lower(granary::trimSpaces(line.substr(0, colon))),
                             std::string(granary::trimSpaces(line.substr(colon + 1))));
  }
  return req;
}

const std::string* firstHeader(const Request& req, std::string_view name) {
  for (const auto& [n, v] : req.headers) {
    if (n == name) return &v;
  }
  return nullptr;
}

bool isDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool isHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool isLowerHex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool validPayloadHash(std::string_view h) {
  static constexpr std::string_view kMarkers[] = {
      "UNSIGNED-PAYLOAD",
      "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
      "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
      "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
      "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
  };
  if (h.size() == 64 && std::all_of(h.begin(), h.end(), isHexDigit)) return true;
  return std::find(std::begin(kMarkers), std::end(kMarkers), h) != std::end(kMarkers);
}

std::string joinSignedHeaders(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out.push_back(';');
    out.append(n);
  }
  return out;
}

// "yyyymmddThhmmssZ" (already validated by parseAuth) -> seconds since the epoch.
int64_t unixTime(std::string_view amz_date) {
  auto number = [&](size_t at, size_t n) {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) v = v * 10 + (amz_date[i] - '0');
    return v;
  };
  using namespace std::chrono;
  const year_month_day ymd{year{number(0, 4)}, month{static_cast<unsigned>(number(4, 2))},
                           day{static_cast<unsigned>(number(6, 2))}};
  const int64_t days = sys_days(ymd).time_since_epoch().count();
  return days * 86400 + int64_t{number(9, 2)} * 3600 + int64_t{number(11, 2)} * 60 +
         int64_t{number(13, 2)};
}

// What parseAuth looks at in the query: SigV4 or SigV2 credentials among the parameters
// whose name and value both percent-decode.
struct QueryCredentials {
  bool v4 = false;
  bool v2 = false;
};

QueryCredentials queryCredentials(std::string_view target) {
  bool access_key_id = false;
  bool signature = false;
  QueryCredentials out;
  for (const auto& [raw_name, raw_value] : parseQueryRaw(splitTarget(target).second)) {
    std::optional<std::string> name = percentDecode(raw_name, false);
    if (!name || !percentDecode(raw_value, false)) continue;
    if (*name == "X-Amz-Algorithm" || *name == "X-Amz-Credential" || *name == "X-Amz-Signature") {
      out.v4 = true;
    }
    access_key_id = access_key_id || *name == "AWSAccessKeyId";
    signature = signature || *name == "Signature";
  }
  out.v2 = access_key_id || signature;
  return out;
}

bool sameAuth(const AuthInfo& a, const AuthInfo& b) {
  return a.presigned == b.presigned && a.access_key == b.access_key && a.date == b.date &&
         a.region == b.region && a.service == b.service && a.signed_headers == b.signed_headers &&
         a.signature == b.signature && a.amz_date == b.amz_date &&
         a.expires_seconds == b.expires_seconds && a.payload_hash == b.payload_hash;
}

void checkWellFormed(const AuthInfo& a, bool has_header) {
  if (a.presigned == has_header) fail("presigned does not match the absence of a header");
  if (a.access_key.empty()) fail("an empty access key");
  if (a.region.empty()) fail("an empty region");
  if (a.service != "s3") fail("a service other than s3");
  if (a.date.size() != 8 || !isDigits(a.date)) fail("the credential date is not 8 digits");
  const std::string_view t = a.amz_date;
  if (t.size() != 16 || t[8] != 'T' || t[15] != 'Z' || !isDigits(t.substr(0, 8)) ||
      !isDigits(t.substr(9, 6))) {
    fail("the signing time is not yyyymmddThhmmssZ");
  }
  if (!t.starts_with(a.date)) fail("the signing time is not on the credential date");
  if (!isLowerHex64(a.signature)) fail("the signature is not 64 lower-case hex digits");
  bool host = false;
  for (const std::string& name : a.signed_headers) {
    if (name.empty()) fail("an empty signed header name");
    if (name.find(';') != std::string::npos) fail("a signed header name holds ';'");
    if (lower(name) != name) fail("a signed header name is not lower-case");
    if (granary::trimSpaces(name) != name) fail("a signed header name is not trimmed");
    host = host || name == "host";
  }
  if (!host) fail("host is not signed");
  std::string scope = a.date;
  scope.append("/").append(a.region).append("/").append(a.service).append("/aws4_request");
  if (a.scope() != scope) fail("scope() is not date/region/service/aws4_request");
  if (a.presigned) {
    if (a.expires_seconds < 0 || a.expires_seconds >= 1'000'000'000'000) {
      fail("X-Amz-Expires out of range");
    }
  } else {
    if (a.expires_seconds != 0) fail("an expiry without a presigned URL");
    if (!validPayloadHash(a.payload_hash)) fail("an invalid payload hash was accepted");
  }
}

// Writes the credentials back in the form they came in, and parses that.
void roundTrip(const Request& req, const AuthInfo& a) {
  Request again = req;
  if (!a.presigned) {
    std::string value = "AWS4-HMAC-SHA256 Credential=";
    value.append(a.access_key).append("/").append(a.scope());
    value.append(", SignedHeaders=").append(joinSignedHeaders(a.signed_headers));
    value.append(", Signature=").append(a.signature);
    for (auto& [n, v] : again.headers) {
      if (n == "authorization") {
        v = value;
        break;
      }
    }
  } else {
    std::string credential = a.access_key;
    credential.append("/").append(a.scope());
    std::string target = "/?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=";
    target.append(uriEncode(credential, true));
    target.append("&X-Amz-Date=").append(uriEncode(a.amz_date, true));
    target.append("&X-Amz-Expires=").append(std::to_string(a.expires_seconds));
    target.append("&X-Amz-SignedHeaders=");
    target.append(uriEncode(joinSignedHeaders(a.signed_headers), true));
    target.append("&X-Amz-Signature=").append(a.signature);
    target.append("&X-Amz-Content-Sha256=").append(uriEncode(a.payload_hash, true));
    again.target = target;
  }
  S3Result<std::optional<AuthInfo>> parsed = parseAuth(again.view());
  if (!parsed || !parsed->has_value()) {
    fail("credentials written back from parsed ones are refused");
  }
  if (!sameAuth(**parsed, a)) fail("credentials written back parse to different ones");
}

SigningKeyCache& keyCache() {
  static SigningKeyCache cache;
  return cache;
}

void signAndVerify(const Request& req, const AuthInfo& a) {
  const HttpRequestView view = req.view();
  const std::string canonical = canonicalRequest(view, a);
  std::string head = req.method;
  head.push_back('\n');
  std::string tail = "\n";
  tail.append(joinSignedHeaders(a.signed_headers)).append("\n").append(a.payload_hash);
  if (!canonical.starts_with(head) || !canonical.ends_with(tail)) {
    fail("the canonical request does not start with the method or end with the signed headers "
         "and payload hash");
  }
  const bool too_long = a.presigned && a.expires_seconds > kMaxPresignedExpires;
  const int64_t now = unixTime(a.amz_date);
  // An x-amz-* or x-granary-* header outside SignedHeaders (x-amz-content-sha256 aside):
  // refused whatever the signature (after the expiry check), as S3 refuses it.
  const bool unsigned_amz =
      std::any_of(req.headers.begin(), req.headers.end(), [&](const auto& h) {
        return (h.first.starts_with("x-amz-") || h.first.starts_with("x-granary-")) &&
               h.first != "x-amz-content-sha256" &&
               std::find(a.signed_headers.begin(), a.signed_headers.end(), h.first) ==
                   a.signed_headers.end();
      });
  if (unsigned_amz && !too_long) {
    AuthInfo good = a;
    good.signature = hmacSha256Hex(deriveSigningKey(kSecret, a.date, a.region, a.service),
                                   stringToSign(a, canonical));
    for (const AuthInfo* attempt : std::initializer_list<const AuthInfo*>{&good, &a}) {
      S3Result<void> v = verify(view, *attempt, kSecret, now, keyCache());
      if (v || v.error().code != S3ErrorCode::kAccessDenied) {
        fail("a request with an unsigned x-amz-* header is not AccessDenied");
      }
    }
    ++g_unsigned_refused;
    return;
  }

  AuthInfo good = a;
  good.signature = hmacSha256Hex(deriveSigningKey(kSecret, a.date, a.region, a.service),
                                 stringToSign(a, canonical));
  S3Result<void> v = verify(view, good, kSecret, now, keyCache());
  if (too_long) {
    if (v || v.error().code != S3ErrorCode::kAuthorizationQueryParametersError) {
      fail("a presigned URL valid for more than a week is not refused");
    }
  } else if (!v) {
    fail("a request signed over its own canonical request does not verify");
  } else {
    ++g_signed_verified;
  }

  AuthInfo bad = good;
  bad.signature[0] = bad.signature[0] == '0' ? '1' : '0';
  S3Result<void> w = verify(view, bad, kSecret, now, keyCache());
  if (w) fail("a wrong signature verifies");
  if (!too_long && w.error().code != S3ErrorCode::kSignatureDoesNotMatch) {
    fail("a wrong signature is not SignatureDoesNotMatch");
  }

  S3Result<void> sent = verify(view, a, kSecret, now, keyCache());
  if (sent) {
    ++g_sent_verified;
  } else if (sent.error().code != (too_long ? S3ErrorCode::kAuthorizationQueryParametersError
                                            : S3ErrorCode::kSignatureDoesNotMatch)) {
    fail("the signature as sent fails with an unexpected error");
  }
}

// Signature Version 2: well formed, and signed by this target over its own string to
// sign it verifies (presigned: at its expiry instant; header: wherever its Date puts it,
// or it is refused for the time alone), and not with one character of the signature
// changed.
void checkV2(const Request& req, const AuthInfo& a, bool has_header) {
  if (a.presigned == has_header) fail("V2: presigned does not match the absence of a header");
  if (a.access_key.empty() || a.signature.empty()) fail("V2: an empty access key or signature");
  if (a.payload_hash != "UNSIGNED-PAYLOAD") fail("V2: a payload hash other than unsigned");
  if (!a.presigned && a.expires_seconds != 0) fail("V2: an expiry without a presigned URL");
  ++(a.presigned ? g_presigned : g_header_auth);
  const HttpRequestView view = req.view();
  AuthInfo good = a;
  good.signature = signV2(kSecret, stringToSignV2(view, a, splitTarget(req.target).first));
  if (good.signature.size() != 28) fail("V2: a signature is not 28 base64 characters");
  // A header-signed request is verified at its own time when its date parses in one of
  // the two forms every V2 client writes; otherwise only the time refusal is expected.
  std::optional<int64_t> at = a.expires_seconds;
  if (!a.presigned) {
    const std::string* date = firstHeader(req, "x-amz-date");
    if (date == nullptr) date = firstHeader(req, "date");
    at = date == nullptr ? std::nullopt : parseHttpDate(*date);
    if (!at && date != nullptr) at = parseAmzDate(*date);
  }
  const int64_t now = at.value_or(0);
  S3Result<void> v = verify(view, good, kSecret, now, keyCache());
  // A parameter that chooses an operation but that V2 cannot sign: refused first.
  const auto params = parseQuery(splitTarget(req.target).second);
  const bool granary_header = std::any_of(req.headers.begin(), req.headers.end(),
                                          [](const auto& h) {
                                            return h.first.starts_with("x-granary-");
                                          });
  // A name written encoded ("%61cl"): V2 signs names as sent, the router decodes them.
  const auto raw_params = parseQueryRaw(splitTarget(req.target).second);
  const bool encoded_name = std::any_of(raw_params.begin(), raw_params.end(), [](const auto& p) {
    return p.first.find_first_of("%+") != std::string::npos;
  });
  if (granary_header || encoded_name ||
      std::any_of(params.begin(), params.end(), [](const auto& p) {
        if (p.first.starts_with("x-granary-")) return true;
        // sigv2.cc's kUnsignableSelectors.
        for (const char* name : {"attributes", "encryption", "ownershipControls",
                                 "policyStatus", "publicAccessBlock", "record", "record-index",
                                 "records", "records-batch"}) {
          if (p.first == name) return true;
        }
        return false;
      })) {
    if (v || v.error().code != S3ErrorCode::kAccessDenied) {
      fail("V2: a request with a parameter V2 cannot sign is not AccessDenied");
    }
    ++g_unsigned_refused;
    return;
  }
  const bool timed_out = !v && !at &&
                         (v.error().code == S3ErrorCode::kAccessDenied ||
                          v.error().code == S3ErrorCode::kRequestTimeTooSkewed);
  if (!v && !timed_out) fail("V2: a request signed over its own string to sign does not verify");
  if (timed_out) return;
  ++g_signed_verified;
  AuthInfo bad = good;
  bad.signature[0] = bad.signature[0] == 'A' ? 'B' : 'A';
  S3Result<void> w = verify(view, bad, kSecret, now, keyCache());
  if (w || w.error().code != S3ErrorCode::kSignatureDoesNotMatch) {
    fail("V2: a wrong signature is not SignatureDoesNotMatch");
  }
}

void checkAuth(const Request& req) {
  const std::string* authorization = firstHeader(req, "authorization");
  const bool has_header = authorization != nullptr && !granary::trimSpaces(*authorization).empty();
  const QueryCredentials query = queryCredentials(req.target);

  S3Result<std::optional<AuthInfo>> parsed = parseAuth(req.view());
  if (!parsed) {
    ++g_refused;
    switch (parsed.error().code) {
      case S3ErrorCode::kAuthorizationHeaderMalformed:
      case S3ErrorCode::kAuthorizationQueryParametersError:
      case S3ErrorCode::kAccessDenied:
      case S3ErrorCode::kInvalidArgument:
      case S3ErrorCode::kInvalidRequest:
        break;
      default:
        fail("parseAuth refused with an unexpected error");
    }
    if (!has_header && !query.v4 && !query.v2) fail("a request without credentials is refused");
    if (has_header && (query.v4 || query.v2) &&
        parsed.error().code != S3ErrorCode::kInvalidArgument) {
      fail("header and query credentials together are not InvalidArgument");
    }
    return;
  }
  if (has_header && (query.v4 || query.v2)) fail("header and query credentials together accepted");
  if (!parsed->has_value()) {
    if (has_header || query.v4 || query.v2) fail("a request with credentials is anonymous");
    ++g_anonymous;
    return;
  }
  const AuthInfo& a = **parsed;
  if (a.version == 2) {
    checkV2(req, a, has_header);
    return;
  }
  checkWellFormed(a, has_header);
  ++(a.presigned ? g_presigned : g_header_auth);
  roundTrip(req, a);
  signAndVerify(req, a);
}

// ---- URI helpers.

bool inside(std::string_view outer, std::string_view part) {
  if (part.empty()) return true;
  const std::less_equal<const char*> le{};
  return le(outer.data(), part.data()) &&
         le(part.data() + part.size(), outer.data() + outer.size());
}

void checkEncoded(std::string_view encoded, bool encode_slash) {
  auto upperHex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  for (size_t i = 0; i < encoded.size(); ++i) {
    const char c = encoded[i];
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved || (c == '/' && !encode_slash)) continue;
    if (c != '%' || i + 2 >= encoded.size() || !upperHex(encoded[i + 1]) ||
        !upperHex(encoded[i + 2])) {
      fail("uriEncode wrote a character it must escape, or a malformed escape");
    }
    i += 2;
  }
}

void checkUri(std::string_view s) {
  // Well formed: every '%' starts %XX.
  bool well_formed = true;
  size_t percents = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') continue;
    ++percents;
    if (i + 2 >= s.size() || !isHexDigit(s[i + 1]) || !isHexDigit(s[i + 2])) {
      well_formed = false;
      break;
    }
    i += 2;
  }
  for (bool plus_is_space : {false, true}) {
    const std::optional<std::string> decoded = percentDecode(s, plus_is_space);
    if (decoded.has_value() != well_formed) {
      fail("percentDecode accepts a malformed escape or refuses a well-formed string");
    }
    if (!decoded) continue;
    if (decoded->size() != s.size() - 2 * percents) {
      fail("percentDecode output is not 2 bytes shorter per escape");
    }
    for (bool encode_slash : {false, true}) {
      const std::string encoded = uriEncode(*decoded, encode_slash);
      checkEncoded(encoded, encode_slash);
      const std::optional<std::string> back = percentDecode(encoded, plus_is_space);
      if (!back || *back != *decoded) fail("percentDecode(uriEncode(x)) is not x");
    }
  }
  ++(well_formed ? g_decoded : g_undecodable);

  // '+' is "%20" when plus_is_space, and '+' otherwise.
  std::string plus_as_space;
  std::string plus_as_plus;
  for (char c : s) {
    plus_as_space.append(c == '+' ? "%20" : std::string_view(&c, 1));
    plus_as_plus.append(c == '+' ? "%2B" : std::string_view(&c, 1));
  }
  if (percentDecode(s, true) != percentDecode(plus_as_space, false)) {
    fail("with plus_is_space, '+' does not decode as %20");
  }
  if (percentDecode(s, false) != percentDecode(plus_as_plus, true)) {
    fail("without plus_is_space, '+' does not decode as itself");
  }

  for (bool encode_slash : {false, true}) {
    const std::string encoded = uriEncode(s, encode_slash);
    checkEncoded(encoded, encode_slash);
    if (encoded.size() > 3 * s.size()) fail("uriEncode wrote more than 3 bytes per byte");
    const std::optional<std::string> back = percentDecode(encoded, false);
    if (!back || *back != s) fail("percentDecode(uriEncode(x)) is not x");
  }

  const std::vector<std::pair<std::string, std::string>> raw = parseQueryRaw(s);
  const std::vector<std::pair<std::string, std::string>> decoded = parseQuery(s);
  if (raw.size() != decoded.size()) fail("parseQuery and parseQueryRaw split differently");
  size_t bytes = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    const auto& [name, value] = raw[i];
    if (name.find_first_of("&=") != std::string::npos || value.find('&') != std::string::npos) {
      fail("a query name holds '&' or '=', or a value '&'");
    }
    bytes += name.size() + value.size();
    if (decoded[i].first != percentDecode(name, true).value_or(name) ||
        decoded[i].second != percentDecode(value, true).value_or(value)) {
      fail("parseQuery is not parseQueryRaw percent-decoded");
    }
  }
  if (bytes > s.size()) fail("parseQueryRaw returned more bytes than it was given");

  const auto [path, query] = splitTarget(s);
  if (!inside(s, path) || !inside(s, query)) fail("splitTarget returned text outside the target");
  if (path.find('?') != std::string_view::npos) fail("splitTarget left a '?' in the path");
  if (!query.empty() && (query.data() == s.data() || query.data()[-1] != '?')) {
    fail("splitTarget's query does not follow a '?'");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  g_input = in;
  const Request req = parseHead(in);
  checkAuth(req);
  checkUri(in);
  checkUri(req.target);
  for (const auto& header : req.headers) checkUri(header.second);
  return 0;
}

// Called by replay_main.cc after a replay (libFuzzer never calls it): fails unless header
// and presigned credentials were both accepted (so the round trips and the sign-and-verify
// checks ran), anonymous and refused requests came up, the seeds' own signatures verified,
// and percentDecode both accepted and refused inputs.
extern "C" int GranaryFuzzSelfCheck() {
  const std::pair<const char*, uint64_t> counts[] = {
      {"Authorization headers accepted", g_header_auth},
      {"presigned queries accepted", g_presigned},
      {"anonymous requests", g_anonymous},
      {"requests refused", g_refused},
      {"requests signed here that verified", g_signed_verified},
      {"requests whose own signature verified", g_sent_verified},
      {"requests refused for what their signature leaves out", g_unsigned_refused},
      {"strings percentDecode accepted", g_decoded},
      {"strings percentDecode refused", g_undecodable},
  };
  int failed = 0;
  for (const auto& [what, n] : counts) {
    std::printf("%s: %llu\n", what, static_cast<unsigned long long>(n));
    if (n == 0) failed = 1;
  }
  return failed;
}

// The shared internal wire format (docs/internal-api.md): everything but the sockets.
#include "granary/rpc/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "granary/common/hex.h"
#include "granary/common/strings.h"

namespace granary::rpc {

namespace {

bool unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_' || c == '~';
}

}  // namespace

std::optional<std::string_view> findHeader(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return std::string_view(v);
  }
  return std::nullopt;
}

std::string percentEncode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (unreserved(c)) {
      out += ch;
      continue;
    }
    uint8_t byte = c;
    out += '%';
    out += toHex({&byte, 1});
  }
  return out;
}

std::optional<std::string> percentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '%') {
      out += s[i++];
      continue;
    }
    if (s.size() - i < 3) return std::nullopt;
    auto byte = fromHex(s.substr(i + 1, 2));
    if (!byte) return std::nullopt;
    out += static_cast<char>((*byte)[0]);
    i += 3;
  }
  return out;
}

std::pair<std::string_view, std::string_view> splitTarget(std::string_view target) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

namespace {
std::vector<std::string_view> querySegments(std::string_view raw_query) {
  std::vector<std::string_view> out;
  while (!raw_query.empty()) {
    size_t amp = raw_query.find('&');
    std::string_view seg = raw_query.substr(0, amp);
    if (!seg.empty()) out.push_back(seg);
    if (amp == std::string_view::npos) break;
    raw_query.remove_prefix(amp + 1);
  }
  return out;
}
}  // namespace

std::optional<std::string_view> queryParam(std::string_view raw_query, std::string_view name) {
  for (std::string_view seg : querySegments(raw_query)) {
    size_t eq = seg.find('=');
    if (seg.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string_view() : seg.substr(eq + 1);
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> parseU64(std::string_view s) { return parseDecimalU64(s); }

std::string canonicalQuery(std::string_view raw_query) {
  auto segs = querySegments(raw_query);
  std::sort(segs.begin(), segs.end());
  std::string out;
  for (std::string_view seg : segs) {
    if (!out.empty()) out += '&';
    out += seg;
  }
  return out;
}

std::string crcHex(uint32_t crc) {
  uint8_t be[4];
  putBe32(be, crc);
  return toHex(be);
}

std::optional<uint32_t> parseCrcHex(std::string_view hex) {
  auto raw = fromHex(hex);
  if (!raw || raw->size() != 4) return std::nullopt;
  return getBe32(raw->data());
}

std::string signRequest(std::string_view secret, const SigningInput& in) {
  std::string to_sign;
  to_sign.reserve(in.path.size() + in.query.size() + 64);
  to_sign.append(in.method).append("\n");
  to_sign.append(in.path).append("\n");
  to_sign.append(canonicalQuery(in.query)).append("\n");
  to_sign.append(std::to_string(in.date_seconds)).append("\n");
  to_sign.append(std::to_string(in.content_length)).append("\n");
  to_sign.append(crcHex(in.body_crc32c));
  auto headers = in.headers;
  std::sort(headers.begin(), headers.end());
  for (const auto& [name, value] : headers) {
    to_sign.append("\n").append(name).append(":").append(value);
  }
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(to_sign.data()), to_sign.size(), mac, &len);
  return toHex({mac, len});
}

bool isSignedHeader(std::string_view name) {
  return name.starts_with("x-granary-") && name != kDateHeader && name != kCrcHeader &&
         name != kSignatureHeader;
}

Status verifyRequest(std::string_view secret, const SigningInput& in,
                     std::string_view signature_hex, int64_t now_seconds) {
  int64_t skew = now_seconds - in.date_seconds;
  if (skew > kMaxClockSkewSeconds || skew < -kMaxClockSkewSeconds) {
    return Status::permissionDenied("request date is more than 15 minutes from server time");
  }
  std::string expected = signRequest(secret, in);
  if (signature_hex.size() != expected.size() ||
      CRYPTO_memcmp(expected.data(), signature_hex.data(), expected.size()) != 0) {
    return Status::permissionDenied("bad request signature");
  }
  return Status::ok();
}

int httpStatusFor(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return 200;
    case Status::Code::kNotFound: return 404;
    case Status::Code::kAlreadyExists: return 409;
    case Status::Code::kInvalidArgument: return 400;
    case Status::Code::kCorruption: return 422;
    case Status::Code::kIoError: return 500;
    case Status::Code::kNoSpace: return 507;
    case Status::Code::kPreconditionFailed: return 412;
    case Status::Code::kNotEmpty: return 409;
    case Status::Code::kUnavailable: return 503;
    case Status::Code::kPermissionDenied: return 403;
    case Status::Code::kTimeout: return 504;
    case Status::Code::kInternal: return 500;
  }
  return 500;
}

std::string errorBody(const Status& status) {
  nlohmann::json j = {{"code", codeName(status.code())},
                      {"message", status.message()},
                      {"retryable", status.retryable()}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<Status::Code> codeFromName(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(Status::Code::kInternal); ++c) {
    auto code = static_cast<Status::Code>(c);
    if (codeName(code) == name) return code;
  }
  return std::nullopt;
}

Status statusFromError(int http_status, std::optional<std::string_view> code_header,
                       std::string_view body,
                       std::optional<std::string_view> retryable_header) {
  std::optional<Status::Code> code;
  if (code_header) code = codeFromName(*code_header);
  std::string message = "HTTP " + std::to_string(http_status);
  std::optional<bool> retryable;
  if (retryable_header == "true" || retryable_header == "false") {
    retryable = *retryable_header == "true";
  }
  try {
    auto j = nlohmann::json::parse(body);
    if (!code) code = codeFromName(j.at("code").get<std::string>());
    message = j.at("message").get<std::string>();
    if (auto r = j.find("retryable"); r != j.end() && r->is_boolean()) retryable = r->get<bool>();
  } catch (const std::exception&) {
    // No usable body (HEAD, or not from a chunk server): the headers or status decide.
  }
  if (!retryable) {
    retryable = code == Status::Code::kUnavailable || code == Status::Code::kTimeout;
  }
  if (!code || *code == Status::Code::kOk) {
    // Without our error code the answer is not from a chunk server's or the index's
    // handler (a proxy, or another service on that port): a bare 404 must not read as
    // "blob not found", which would make a gateway treat a live fragment as lost, nor any
    // other 4xx as a refusal, which would make it remove the blobs of a commit that may
    // have happened behind the proxy (commitRefused). Unavailable, not retryable: the
    // outcome is unknown.
    retryable = false;  // whatever a foreign body says
    code = http_status == 403 ? Status::Code::kPermissionDenied
           : http_status < 500 || http_status == 503 ? Status::Code::kUnavailable
                                                     : Status::Code::kIoError;
  }
  return Status(*code, std::move(message), *retryable);
}

}  // namespace granary::rpc

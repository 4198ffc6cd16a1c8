// The internal API's wire format (docs/internal-api.md): everything but the sockets.
#include "internal_http.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "granary/common/hex.h"

namespace granary::chunkstore::internal {

namespace {

constexpr std::string_view kDrivesSegment = "/drives/";

bool unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_' || c == '~';
}

// Runs `fn` on a parsed JSON document, turning any parse or type error into kIoError
// (a malformed body from the server is a transport-level failure).
template <typename T, typename F>
Result<T> fromJson(std::string_view text, F fn) {
  try {
    return fn(nlohmann::json::parse(text));
  } catch (const std::exception& e) {
    return fail(Status::ioError(std::string("malformed internal API body: ") + e.what()));
  }
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

std::string blobIdHex(const BlobId& id) { return toHex(id.encode()); }

Result<BlobId> parseBlobIdHex(std::string_view hex) {
  auto raw = fromHex(hex);
  if (!raw || raw->size() != BlobId::kEncodedSize) {
    return fail(Status::invalidArgument("bad blob id '" + std::string(hex) + "'"));
  }
  return BlobId::decode(*raw);
}

std::string drivesPath() { return std::string(kPrefix) + "/drives"; }
std::string healthPath() { return std::string(kPrefix) + "/health"; }
std::string statsPath(std::string_view drive) {
  return std::string(kPrefix) + std::string(kDrivesSegment) + percentEncode(drive) + "/stats";
}
std::string blobListPath(std::string_view drive) {
  return std::string(kPrefix) + std::string(kDrivesSegment) + percentEncode(drive) + "/blobs";
}
std::string blobPath(std::string_view drive, const BlobId& id) {
  return blobListPath(drive) + "/" + blobIdHex(id);
}

Result<Route> parseRoute(std::string_view path) {
  auto bad = [&] {
    return fail(Status::invalidArgument("no such internal API path '" + std::string(path) + "'"));
  };
  if (!path.starts_with(kPrefix)) return bad();
  std::string_view rest = path.substr(kPrefix.size());
  Route route;
  if (rest == "/health") return route;
  if (rest == "/drives") {
    route.kind = Route::Kind::kDrives;
    return route;
  }
  if (!rest.starts_with(kDrivesSegment)) return bad();
  rest.remove_prefix(kDrivesSegment.size());
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0) return bad();
  auto drive = percentDecode(rest.substr(0, slash));
  if (!drive) return bad();
  route.drive = std::move(*drive);
  rest.remove_prefix(slash);
  if (rest == "/stats") {
    route.kind = Route::Kind::kStats;
  } else if (rest == "/blobs") {
    route.kind = Route::Kind::kBlobList;
  } else if (rest.starts_with("/blobs/")) {
    auto id = parseBlobIdHex(rest.substr(7));
    if (!id) return fail(id.error());
    route.kind = Route::Kind::kBlob;
    route.id = *id;
  } else {
    return bad();
  }
  return route;
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

std::optional<uint64_t> parseU64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

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
                       std::string_view body) {
  std::optional<Status::Code> code;
  if (code_header) code = codeFromName(*code_header);
  std::string message = "HTTP " + std::to_string(http_status);
  bool retryable = false;
  try {
    auto j = nlohmann::json::parse(body);
    if (!code) code = codeFromName(j.at("code").get<std::string>());
    message = j.at("message").get<std::string>();
    retryable = j.value("retryable", false);
  } catch (const std::exception&) {
    // No usable body (HEAD, or not from a chunk server): the header or status decides.
  }
  if (!code || *code == Status::Code::kOk) {
    // Without our error code the answer is not from a chunk server's handler (a proxy, or
    // another service on that port): a bare 404 must not read as "blob not found", which
    // would make a gateway treat a live fragment as lost.
    code = http_status == 404   ? Status::Code::kUnavailable
           : http_status == 403 ? Status::Code::kPermissionDenied
           : http_status == 503 ? Status::Code::kUnavailable
           : http_status < 500  ? Status::Code::kInvalidArgument
                                : Status::Code::kIoError;
  }
  return Status(*code, std::move(message), retryable);
}

Headers descriptorHeaders(const BlobDescriptor& desc) {
  return {{std::string(kEcHeader), std::to_string(desc.ec.k) + "+" + std::to_string(desc.ec.m)},
          {std::string(kStripeLenHeader), std::to_string(desc.stripe_data_len)},
          {std::string(kBucketHeader), percentEncode(desc.bucket)},
          {std::string(kKeyHeader), percentEncode(desc.key)}};
}

Result<BlobDescriptor> parseDescriptor(const BlobId& id, const Headers& headers) {
  BlobDescriptor desc;
  desc.id = id;
  auto ec = findHeader(headers, kEcHeader);
  auto stripe = findHeader(headers, kStripeLenHeader);
  auto bucket = findHeader(headers, kBucketHeader);
  auto key = findHeader(headers, kKeyHeader);
  if (!ec || !stripe || !bucket || !key) {
    return fail(Status::invalidArgument("blob descriptor headers missing"));
  }
  size_t plus = ec->find('+');
  if (plus == std::string_view::npos) return fail(Status::invalidArgument("malformed x-granary-ec"));
  auto k = parseU64(ec->substr(0, plus));
  auto m = parseU64(ec->substr(plus + 1));
  auto len = parseU64(*stripe);
  auto b = percentDecode(*bucket);
  auto kk = percentDecode(*key);
  if (!k || !m || *k > 255 || *m > 255 || !len || !b || !kk) {
    return fail(Status::invalidArgument("malformed blob descriptor headers"));
  }
  desc.ec = {static_cast<uint8_t>(*k), static_cast<uint8_t>(*m)};
  desc.stripe_data_len = *len;
  desc.bucket = std::move(*b);
  desc.key = std::move(*kk);
  return desc;
}

std::string encodeBlobList(const std::vector<BlobInfo>& blobs) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& b : blobs) {
    arr.push_back({{"id", blobIdHex(b.id)}, {"length", b.length},
                   {"created_ns", b.created_unix_nanos}});
  }
  return nlohmann::json{{"blobs", std::move(arr)}}.dump();
}

Result<std::vector<BlobInfo>> decodeBlobList(std::string_view json) {
  return fromJson<std::vector<BlobInfo>>(json, [](const nlohmann::json& j) {
    std::vector<BlobInfo> out;
    for (const auto& e : j.at("blobs")) {
      auto id = parseBlobIdHex(e.at("id").get<std::string>());
      if (!id) throw std::runtime_error(id.error().message());
      out.push_back({*id, e.at("length").get<uint64_t>(), e.at("created_ns").get<int64_t>()});
    }
    return out;
  });
}

namespace {
// Every DriveStats field on the wire, by name: encode and decode share this one table.
constexpr std::pair<const char*, uint64_t DriveStats::*> kStatsFields[] = {
    {"blobs", &DriveStats::blobs},
    {"payload_bytes", &DriveStats::payload_bytes},
    {"disk_bytes", &DriveStats::disk_bytes},
    {"commit_batches", &DriveStats::commit_batches},
    {"committed_puts", &DriveStats::committed_puts},
    {"scrub_passes", &DriveStats::scrub_passes},
    {"scrubbed_bytes", &DriveStats::scrubbed_bytes},
    {"corrupt_blobs", &DriveStats::corrupt_blobs},
    {"capacity_bytes", &DriveStats::capacity_bytes},
    {"available_bytes", &DriveStats::available_bytes},
};
// A field added to DriveStats must be added to the table (and to docs/internal-api.md).
static_assert(sizeof(DriveStats) == std::size(kStatsFields) * sizeof(uint64_t));
}  // namespace

std::string encodeStats(const DriveStats& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, field] : kStatsFields) j[name] = s.*field;
  return j.dump();
}

Result<DriveStats> decodeStats(std::string_view json) {
  return fromJson<DriveStats>(json, [](const nlohmann::json& j) {
    DriveStats s;
    // A field an older server does not send stays 0.
    for (const auto& [name, field] : kStatsFields) s.*field = j.value(name, uint64_t{0});
    return s;
  });
}

std::string encodeDrives(const std::vector<DriveState>& drives) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& d : drives) arr.push_back({{"id", d.id}, {"writable", d.writable}});
  return nlohmann::json{{"drives", std::move(arr)}}.dump();
}

Result<std::vector<DriveState>> decodeDrives(std::string_view json) {
  return fromJson<std::vector<DriveState>>(json, [](const nlohmann::json& j) {
    std::vector<DriveState> out;
    for (const auto& e : j.at("drives")) {
      out.push_back({e.at("id").get<std::string>(), e.at("writable").get<bool>()});
    }
    return out;
  });
}

}  // namespace granary::chunkstore::internal

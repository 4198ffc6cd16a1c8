// POST Object forms: framing (RFC 7578 over RFC 2046's multipart), signatures and policies,
// as "Browser-based uploads using POST (AWS Signature Version 4)" in the S3 API reference
// and its SigV2 predecessor describe them.
#include "post_form.h"

#include <nlohmann/json.hpp>
#include <openssl/crypto.h>

#include <algorithm>

#include "granary/common/strings.h"
#include "time_format.h"

namespace granary::gateway {

namespace {

S3Error malformed(std::string message = "The body of your POST request is not well-formed "
                                        "multipart/form-data.") {
  return {S3ErrorCode::kMalformedPOSTRequest, std::move(message)};
}

// One parameter of a header value ("; name=value" or "; name=\"quoted\""), from `at`;
// advances `at` past it. nullopt when the value is malformed (an unclosed quote).
struct HeaderParam {
  std::string name;  // lower-case
  std::string value;
};
std::optional<HeaderParam> nextParam(std::string_view v, size_t& at) {
  HeaderParam p;
  size_t eq = v.find('=', at);
  size_t semi = v.find(';', at);
  if (eq == std::string_view::npos || (semi != std::string_view::npos && semi < eq)) {
    // A bare token ("form-data"): a parameter without a value.
    size_t end = semi == std::string_view::npos ? v.size() : semi;
    p.name = asciiLower(trimSpaces(v.substr(at, end - at)));
    at = end == v.size() ? end : end + 1;
    return p;
  }
  p.name = asciiLower(trimSpaces(v.substr(at, eq - at)));
  size_t i = eq + 1;
  while (i < v.size() && (v[i] == ' ' || v[i] == '\t')) ++i;
  if (i < v.size() && v[i] == '"') {
    ++i;
    for (;; ++i) {
      if (i >= v.size()) return std::nullopt;
      if (v[i] == '"') break;
      p.value.push_back(v[i]);  // no escapes: HTML forms percent-encode '"' and CR LF
    }
    ++i;
    while (i < v.size() && v[i] != ';') {
      if (v[i] != ' ' && v[i] != '\t') return std::nullopt;  // text after the quote
      ++i;
    }
  } else {
    size_t end = v.find(';', i);
    if (end == std::string_view::npos) end = v.size();
    p.value = std::string(trimSpaces(v.substr(i, end - i)));
    i = end;
  }
  at = i == v.size() ? i : i + 1;
  return p;
}

struct PartHeaders {
  std::string name;  // the form-data name, as sent
  std::optional<std::string> filename;
};

// The header block of one part (lines ending in CRLF, without the blank line).
S3Result<PartHeaders> parsePartHeaders(std::string_view block) {
  PartHeaders out;
  bool disposition = false;
  while (!block.empty()) {
    size_t eol = block.find("\r\n");
    std::string_view line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view() : block.substr(eol + 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return std::unexpected(malformed());
    const std::string name = asciiLower(trimSpaces(line.substr(0, colon)));
    std::string_view value = trimSpaces(line.substr(colon + 1));
    if (name == "content-disposition") {
      size_t at = 0;
      auto kind = nextParam(value, at);
      if (!kind || kind->name != "form-data" || !kind->value.empty()) {
        return std::unexpected(malformed());
      }
      bool named = false;
      while (at < value.size()) {
        auto p = nextParam(value, at);
        if (!p) return std::unexpected(malformed());
        if (p->name == "name") {
          out.name = p->value;
          named = true;
        } else if (p->name == "filename") {
          out.filename = p->value;
        }
      }
      if (!named) return std::unexpected(malformed());
      disposition = true;
    }
  }
  if (!disposition) return std::unexpected(malformed());
  return out;
}

// A browser sends the file's name as the user's system spelt it; S3 substitutes its last
// path component.
std::string baseName(std::string_view filename) {
  size_t slash = filename.find_last_of("/\\");
  return std::string(slash == std::string_view::npos ? filename : filename.substr(slash + 1));
}

S3Error policyDenied(std::string_view why) {
  return {S3ErrorCode::kAccessDenied, "Invalid according to Policy: " + std::string(why)};
}

S3Error invalidPolicy(std::string_view why) {
  return {S3ErrorCode::kInvalidPolicyDocument, "Invalid Policy: " + std::string(why)};
}

std::optional<uint64_t> lengthBound(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return static_cast<uint64_t>(i);
  }
  if (v.is_string()) {  // some SDKs write the bounds as strings
    return parseDecimalU64(v.get_ref<const std::string&>());
  }
  return std::nullopt;
}

// A Content-Type may list several types ("image/png, text/html", of which a browser takes
// the last it knows): each must start with the prefix, as S3 checks it.
bool startsWith(std::string_view field, std::string_view value, std::string_view prefix) {
  if (field != "content-type") return value.starts_with(prefix);
  for (;;) {
    const size_t comma = value.find(',');
    if (!trimSpaces(value.substr(0, comma)).starts_with(prefix)) return false;
    if (comma == std::string_view::npos) return true;
    value.remove_prefix(comma + 1);
  }
}

}  // namespace

bool unsignedFormField(std::string_view name) {
  return name == "policy" || name == "x-amz-signature" || name == "signature" ||
         name == "awsaccesskeyid" || name == "file" || name.starts_with("x-ignore-");
}

std::optional<std::string_view> FormHead::field(std::string_view lower_name) const {
  for (const auto& [name, value] : fields) {
    if (name == lower_name) return std::string_view(value);
  }
  return std::nullopt;
}

std::optional<std::string> formBoundary(std::string_view content_type) {
  size_t at = 0;
  auto kind = nextParam(content_type, at);
  if (!kind || kind->name != "multipart/form-data" || !kind->value.empty()) return std::nullopt;
  while (at < content_type.size()) {
    auto p = nextParam(content_type, at);
    if (!p) return std::nullopt;
    if (p->name == "boundary") {
      if (p->value.empty() || p->value.size() > 70) return std::nullopt;
      return p->value;
    }
  }
  return std::nullopt;
}

FormHeadParser::FormHeadParser(std::string_view boundary)
    : dash_("--" + std::string(boundary)), delimiter_("\r\n" + dash_) {}

S3Result<std::optional<FormHead>> FormHeadParser::parse(std::string_view in, bool complete) {
  using Out = S3Result<std::optional<FormHead>>;
  if (failed_) return std::unexpected(*failed_);
  const auto fail = [&](S3Error e) -> Out {
    failed_ = e;
    return std::unexpected(std::move(e));
  };
  const auto more = [&]() -> Out {
    if (complete) return fail(malformed());
    return std::optional<FormHead>();
  };
  // Where a search for `needle` may resume next time: its last bytes may begin a match.
  const auto resumeAt = [&](size_t from, std::string_view needle) {
    return std::max(from, in.size() < needle.size() ? 0 : in.size() - needle.size() + 1);
  };
  for (;;) {
    switch (state_) {
      case State::kPreamble: {
        // The first delimiter: at the very start, or after a preamble (ignored).
        if (in.starts_with(dash_)) {
          at_ = 0;
        } else {
          if (in.size() < dash_.size() && std::string_view(dash_).starts_with(in)) return more();
          const size_t found = in.find(delimiter_, search_);
          if (found == std::string_view::npos) {
            search_ = resumeAt(0, delimiter_);
            return more();
          }
          at_ = found + 2;
        }
        at_ += dash_.size();
        state_ = State::kDelimiter;
        break;
      }
      case State::kDelimiter: {
        // After "--boundary": "--" ends the form; else padding, then CRLF and a part.
        if (in.size() < at_ + 2) return more();
        if (in.substr(at_, 2) == "--" && !padded_) {
          return fail({S3ErrorCode::kIncorrectNumberOfFilesInPostRequest,
                       "POST requires exactly one file upload per request."});
        }
        while (at_ < in.size() && (in[at_] == ' ' || in[at_] == '\t')) {  // transport padding
          ++at_;
          padded_ = true;
        }
        if (in.size() < at_ + 2) return more();
        if (in.substr(at_, 2) != "\r\n") return fail(malformed());
        at_ += 2;
        search_ = at_;
        state_ = State::kHeaders;
        break;
      }
      case State::kHeaders: {
        // Headers end at a blank line (a part may have none: CRLF at once).
        size_t headers_end;
        if (in.size() < at_ + 2) return more();
        if (in.substr(at_, 2) == "\r\n") {
          headers_end = at_;
        } else {
          headers_end = in.find("\r\n\r\n", search_);
          if (headers_end == std::string_view::npos) {
            search_ = resumeAt(at_, "\r\n\r\n");
            return more();
          }
          headers_end += 2;
        }
        auto part = parsePartHeaders(in.substr(at_, headers_end - at_));
        if (!part) return fail(part.error());
        at_ = headers_end + 2;  // the part's first byte
        name_ = asciiLower(part->name);
        if (name_ == "file") {
          head_.filename = baseName(part->filename.value_or(""));
          head_.data_offset = at_;
          state_ = State::kDone;
          return std::optional<FormHead>(head_);
        }
        if (!names_.insert(name_).second) {
          return fail({S3ErrorCode::kInvalidArgument,
                       "The form field '" + name_ + "' appears twice."});
        }
        search_ = at_;
        state_ = State::kValue;
        break;
      }
      case State::kValue: {
        const size_t end = in.find(delimiter_, search_);
        if (end == std::string_view::npos) {
          search_ = resumeAt(at_, delimiter_);
          return more();
        }
        head_.fields.emplace_back(std::move(name_), std::string(in.substr(at_, end - at_)));
        at_ = end + delimiter_.size();
        padded_ = false;
        state_ = State::kDelimiter;
        break;
      }
      case State::kDone:
        return std::optional<FormHead>(head_);
    }
  }
}

S3Result<std::optional<FormHead>> parseFormHead(std::string_view in, std::string_view boundary,
                                                bool complete) {
  FormHeadParser parser(boundary);
  return parser.parse(in, complete);
}

S3Result<std::optional<AuthInfo>> parsePostAuth(const FormHead& form) {
  const auto missing = [](std::string_view name) {
    return std::unexpected(S3Error{S3ErrorCode::kInvalidArgument,
                                   "Bucket POST must contain a field named '" +
                                       std::string(name) + "'."});
  };
  const auto policy = form.field("policy");
  AuthInfo auth;
  if (auto algorithm = form.field("x-amz-algorithm")) {
    if (*algorithm != "AWS4-HMAC-SHA256") {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "The x-amz-algorithm field must be AWS4-HMAC-SHA256.");
    }
    for (const char* name : {"x-amz-credential", "x-amz-date", "x-amz-signature", "policy"}) {
      if (!form.field(name)) return missing(name);
    }
    if (!parseCredential(*form.field("x-amz-credential"), auth) || auth.service != "s3") {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "The x-amz-credential field is malformed: <access key>/<yyyymmdd>/"
                    "<region>/s3/aws4_request.");
    }
    auth.amz_date = std::string(*form.field("x-amz-date"));
    if (!parseAmzDate(auth.amz_date) || !auth.amz_date.starts_with(auth.date)) {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "The x-amz-date field must be the credential's day as yyyymmddThhmmssZ.");
    }
    auth.signature = asciiLower(*form.field("x-amz-signature"));
    auth.version = 4;
    return auth;
  }
  if (auto key = form.field("awsaccesskeyid")) {
    for (const char* name : {"signature", "policy"}) {
      if (!form.field(name)) return missing(name);
    }
    auth.version = 2;
    auth.access_key = std::string(*key);
    auth.signature = std::string(*form.field("signature"));
    return auth;
  }
  if (form.field("x-amz-signature") || form.field("x-amz-credential")) {
    return missing("x-amz-algorithm");
  }
  if (form.field("signature")) return missing("AWSAccessKeyId");
  if (policy) return missing("x-amz-signature");
  return std::optional<AuthInfo>();
}

S3Result<void> verifyPostSignature(const AuthInfo& auth, std::string_view policy,
                                   std::string_view secret, SigningKeyCache& keys) {
  std::string expected;
  std::array<uint8_t, 32> key{};
  if (auth.version == 4) {
    key = keys.get(secret, auth.date, auth.region, auth.service);
    expected = hmacSha256Hex(key, policy);
  } else {
    expected = signV2(secret, policy);
  }
  // An empty expected signature is a signing failure (signV2 returns one): it matches
  // nothing, not even an empty signature field.
  if (!expected.empty() && expected.size() == auth.signature.size() &&
      CRYPTO_memcmp(expected.data(), auth.signature.data(), expected.size()) == 0) {
    if (auth.version == 4) keys.remember(secret, auth.date, auth.region, auth.service, key);
    return {};
  }
  return s3fail(S3ErrorCode::kSignatureDoesNotMatch,
                "The request signature we calculated does not match the signature you "
                "provided. Check your key and signing method.");
}

S3Result<PostPolicy> parsePostPolicy(std::string_view json) {
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::unexpected(invalidPolicy("the policy is not a JSON object."));
  PostPolicy out;
  auto expiration = doc.find("expiration");
  if (expiration == doc.end() || !expiration->is_string()) {
    return std::unexpected(invalidPolicy("Policy missing expiration."));
  }
  auto when = parseIsoTimestamp(expiration->get_ref<const std::string&>());
  if (!when) return std::unexpected(invalidPolicy("Invalid 'expiration' value."));
  out.expiration = *when;
  auto conditions = doc.find("conditions");
  if (conditions == doc.end() || !conditions->is_array()) {
    return std::unexpected(invalidPolicy("Policy missing conditions."));
  }
  for (const nlohmann::json& c : *conditions) {
    // No condition holds an array or an object: refused before dump(), which recurses
    // once per level (a policy nested 30,000 deep fits in a form's 64 KiB).
    const auto structured = [](const nlohmann::json& v) { return v.is_structured(); };
    if (c.is_structured() && std::any_of(c.begin(), c.end(), structured)) {
      return std::unexpected(invalidPolicy("Invalid condition: it holds an array or object."));
    }
    PostPolicyCondition cond;
    cond.text = c.dump();
    if (c.is_object()) {
      if (c.size() != 1 || !c.begin().value().is_string()) {
        return std::unexpected(invalidPolicy("Invalid simple condition: " + cond.text));
      }
      cond.kind = PostPolicyCondition::Kind::kEq;
      cond.field = asciiLower(c.begin().key());
      cond.value = c.begin().value().get<std::string>();
    } else if (c.is_array() && c.size() == 3 && c[0].is_string()) {
      const std::string op = asciiLower(c[0].get<std::string>());
      if (op == "content-length-range") {
        auto lo = lengthBound(c[1]);
        auto hi = lengthBound(c[2]);
        if (!lo || !hi || *lo > *hi) {
          return std::unexpected(invalidPolicy("Invalid content-length-range: " + cond.text));
        }
        cond.kind = PostPolicyCondition::Kind::kLengthRange;
        cond.min = *lo;
        cond.max = *hi;
      } else if (op == "eq" || op == "starts-with") {
        if (!c[1].is_string() || !c[2].is_string() ||
            !c[1].get_ref<const std::string&>().starts_with("$")) {
          return std::unexpected(invalidPolicy("Invalid condition: " + cond.text));
        }
        cond.kind = op == "eq" ? PostPolicyCondition::Kind::kEq
                               : PostPolicyCondition::Kind::kStartsWith;
        cond.field = asciiLower(c[1].get_ref<const std::string&>().substr(1));
        cond.value = c[2].get<std::string>();
      } else {
        return std::unexpected(invalidPolicy("Unknown condition: " + cond.text));
      }
    } else {
      return std::unexpected(invalidPolicy("Invalid condition: " + cond.text));
    }
    out.conditions.push_back(std::move(cond));
  }
  return out;
}

S3Result<PostLengthRange> checkPostPolicy(const PostPolicy& policy, const FormFields& fields,
                                          std::string_view bucket, int64_t now_unix_seconds) {
  if (now_unix_seconds >= policy.expiration) {
    return std::unexpected(policyDenied("Policy expired."));
  }
  const auto value = [&](std::string_view name) -> std::string_view {
    for (const auto& [n, v] : fields) {
      if (n == name) return v;
    }
    return name == "bucket" ? bucket : std::string_view();
  };
  PostLengthRange range;
  std::vector<std::string_view> named;
  for (const PostPolicyCondition& c : policy.conditions) {
    switch (c.kind) {
      case PostPolicyCondition::Kind::kLengthRange:
        range.min = std::max(range.min, c.min);
        range.max = std::min(range.max, c.max);
        continue;
      case PostPolicyCondition::Kind::kEq:
        if (value(c.field) != c.value) {
          return std::unexpected(policyDenied("Policy Condition failed: " + c.text));
        }
        break;
      case PostPolicyCondition::Kind::kStartsWith:
        if (!startsWith(c.field, value(c.field), c.value)) {
          return std::unexpected(policyDenied("Policy Condition failed: " + c.text));
        }
        break;
    }
    named.push_back(c.field);
  }
  std::string extra;
  for (const auto& [name, v] : fields) {
    if (unsignedFormField(name) || std::find(named.begin(), named.end(), name) != named.end()) {
      continue;
    }
    if (!extra.empty()) extra.append(", ");
    extra.append(name);
  }
  if (!extra.empty()) return std::unexpected(policyDenied("Extra input fields: " + extra));
  return range;
}

}  // namespace granary::gateway

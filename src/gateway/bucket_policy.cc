#include "bucket_policy.h"

#include <arpa/inet.h>
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "granary/common/strings.h"
#include "policy_actions.h"

namespace granary::gateway {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kArnPrefix = "arn:aws:s3:::";

std::unexpected<S3Error> malformed(std::string message) {
  return s3fail(S3ErrorCode::kMalformedPolicy, std::move(message));
}

std::unexpected<S3Error> unsupported(std::string message) {
  return s3fail(S3ErrorCode::kNotImplemented, std::move(message));
}

// A string or a non-empty array of strings (Action, Resource, the AWS principal).
S3Result<std::vector<std::string>> stringList(const Json& j, std::string_view what) {
  std::vector<std::string> out;
  if (j.is_string()) {
    out.push_back(j.get<std::string>());
  } else if (j.is_array() && !j.empty()) {
    for (const Json& v : j) {
      if (!v.is_string()) return malformed(fmt::format("{} must be strings", what));
      out.push_back(v.get<std::string>());
    }
  } else {
    return malformed(fmt::format("{} must be a string or a list of strings", what));
  }
  for (const std::string& s : out) {
    if (s.empty()) return malformed(fmt::format("{} may not be empty", what));
  }
  return out;
}

// A condition value: strings, and booleans and numbers as their JSON text.
S3Result<std::vector<std::string>> conditionValues(const Json& j) {
  std::vector<std::string> out;
  auto one = [&](const Json& v) -> bool {
    if (v.is_string()) {
      out.push_back(v.get<std::string>());
    } else if (v.is_boolean() || v.is_number()) {
      out.push_back(v.dump());
    } else {
      return false;
    }
    return true;
  };
  bool ok = j.is_array() && !j.empty() ? std::all_of(j.begin(), j.end(), one) : one(j);
  if (!ok) return malformed("Condition values must be strings, numbers or booleans");
  return out;
}

// An IPv4 or IPv6 address as its bytes (4 or 16), or nothing.
std::optional<std::vector<uint8_t>> addressBytes(std::string_view text) {
  const std::string s(text);
  std::array<uint8_t, 16> buf{};
  if (inet_pton(AF_INET, s.c_str(), buf.data()) == 1) {
    return std::vector<uint8_t>(buf.begin(), buf.begin() + 4);
  }
  if (inet_pton(AF_INET6, s.c_str(), buf.data()) == 1) {
    return std::vector<uint8_t>(buf.begin(), buf.end());
  }
  return std::nullopt;
}

// "203.0.113.0/24", "2001:db8::/32" or a single address: its bytes and prefix length.
using Network = PolicyNetwork;
std::optional<Network> parseNetwork(std::string_view text) {
  const size_t slash = text.find('/');
  auto bytes = addressBytes(text.substr(0, slash));
  if (!bytes) return std::nullopt;
  Network n{std::move(*bytes), 0};
  n.prefix_bits = n.bytes.size() * 8;
  if (slash != std::string_view::npos) {
    std::string_view bits = text.substr(slash + 1);
    if (bits.empty() || bits.size() > 3 ||
        !std::all_of(bits.begin(), bits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    const size_t len = std::stoul(std::string(bits));
    if (len > n.prefix_bits) return std::nullopt;
    n.prefix_bits = len;
  }
  // An IPv4-mapped network (::ffff:a.b.c.d/96+) is the IPv4 network it maps: the server
  // sees IPv4 clients as IPv4 addresses, which a 16-byte network never matches.
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (n.bytes.size() == 16 && n.prefix_bits >= 96 &&
      std::equal(std::begin(kMapped), std::end(kMapped), n.bytes.begin())) {
    n.bytes.erase(n.bytes.begin(), n.bytes.begin() + 12);
    n.prefix_bits -= 96;
  }
  return n;
}

bool inNetwork(const Network& n, std::string_view address) {
  auto a = addressBytes(address);
  if (!a || a->size() != n.bytes.size()) return false;
  const size_t whole = n.prefix_bits / 8;
  if (!std::equal(a->begin(), a->begin() + static_cast<std::ptrdiff_t>(whole),
                  n.bytes.begin())) {
    return false;
  }
  const size_t rest = n.prefix_bits % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return ((*a)[whole] & mask) == (n.bytes[whole] & mask);
}

constexpr std::array kStringOps = {"stringequals", "stringnotequals",
                                   "stringequalsignorecase", "stringnotequalsignorecase",
                                   "stringlike", "stringnotlike"};
constexpr std::array kConditionKeys = {"aws:securetransport", "aws:sourceip", "aws:useragent",
                                       "aws:referer",         "aws:username", "s3:prefix",
                                       "s3:delimiter",        "s3:max-keys"};

bool isNegated(std::string_view op) {
  return op == "stringnotequals" || op == "stringnotequalsignorecase" ||
         op == "stringnotlike" || op == "notipaddress";
}

template <size_t N>
bool contains(const std::array<const char*, N>& list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// The value of a condition key in the request, or nullopt where the request has none.
std::optional<std::string_view> keyValue(std::string_view key, const PolicyQuery& q) {
  if (key == "aws:securetransport") return q.secure ? "true" : "false";
  if (key == "aws:sourceip") {
    return q.source_ip.empty() ? std::nullopt : std::optional(q.source_ip);
  }
  if (key == "aws:username") {
    return q.principal.empty() ? std::nullopt : std::optional(q.principal);
  }
  if (key == "aws:useragent") return q.user_agent;
  if (key == "aws:referer") return q.referer;
  if (key == "s3:prefix") return q.prefix;
  if (key == "s3:delimiter") return q.delimiter;
  if (key == "s3:max-keys") return q.max_keys;
  return std::nullopt;
}

bool valueMatches(std::string_view op, std::string_view pattern, std::string_view value) {
  if (op == "stringequals" || op == "stringnotequals") return pattern == value;
  if (op == "stringequalsignorecase" || op == "stringnotequalsignorecase") {
    return asciiLower(pattern) == asciiLower(value);
  }
  if (op == "stringlike" || op == "stringnotlike") return policyWildcardMatch(pattern, value);
  return op == "bool" && asciiLower(pattern) == value;
}

bool anyMatch(const std::vector<std::string>& patterns, std::string_view text) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return policyWildcardMatch(p, text); });
}

}  // namespace

namespace {

// Whether `segment` (no '*'; '?' matches any one character) matches `text` exactly.
bool segmentEquals(std::string_view segment, std::string_view text) {
  if (segment.size() != text.size()) return false;
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '?' && segment[i] != text[i]) return false;
  }
  return true;
}

// Where `segment` (non-empty, no '*') first matches in `text`, or npos. Shift-And: one
// pass over the text with a bit per segment position, so O(text x segment / 64) whatever
// the input (a naive search is O(text x segment) in word operations).
size_t findSegment(std::string_view segment, std::string_view text) {
  if (segment.size() > text.size()) return std::string_view::npos;
  const size_t words = (segment.size() + 63) / 64;
  // Masks (positions a character may stand at) for the characters the segment names, each
  // with the '?' positions; any other character may stand only where a '?' is (mask 0).
  // Built from the segment alone: a '?' costs one bit, not one per byte value.
  std::array<uint16_t, 256> slot{};  // 0: not named
  std::vector<uint64_t> masks(words, 0);
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '?') masks[i / 64] |= uint64_t{1} << (i % 64);
  }
  for (size_t i = 0; i < segment.size(); ++i) {
    const auto c = static_cast<unsigned char>(segment[i]);
    if (segment[i] == '?') continue;
    if (slot[c] == 0) {
      slot[c] = static_cast<uint16_t>(masks.size() / words);
      masks.resize(masks.size() + words);
      std::copy_n(masks.begin(), words, masks.end() - static_cast<ptrdiff_t>(words));
    }
    masks[slot[c] * words + i / 64] |= uint64_t{1} << (i % 64);
  }
  const size_t last = segment.size() - 1;
  std::vector<uint64_t> state(words, 0);  // bit i: segment[0..i] ends at this character
  for (size_t t = 0; t < text.size(); ++t) {
    const uint64_t* mask = &masks[slot[static_cast<unsigned char>(text[t])] * words];
    uint64_t carry = 1;  // a match may start here
    for (size_t w = 0; w < words; ++w) {
      const uint64_t shifted = (state[w] << 1) | carry;
      carry = state[w] >> 63;
      state[w] = shifted & mask[w];
    }
    if (state[last / 64] >> (last % 64) & 1) return t - last;
  }
  return std::string_view::npos;
}

}  // namespace

bool policyWildcardMatch(std::string_view pattern, std::string_view text) {
  // The pattern's pieces between '*'s: the first must begin the text, the last end it,
  // and each other one, in order, is matched where it first can (the leftmost choice
  // never loses a match). Linear in the text for each piece, so that a policy's patterns
  // against a 16 KiB User-Agent cannot hold an event loop (a backtracking matcher is
  // O(text x pattern) per pattern).
  const size_t first_star = pattern.find('*');
  if (first_star == std::string_view::npos) return segmentEquals(pattern, text);
  const size_t last_star = pattern.rfind('*');
  const std::string_view head = pattern.substr(0, first_star);
  const std::string_view tail = pattern.substr(last_star + 1);
  if (head.size() + tail.size() > text.size()) return false;
  if (!segmentEquals(head, text.substr(0, head.size()))) return false;
  if (!segmentEquals(tail, text.substr(text.size() - tail.size()))) return false;
  std::string_view rest = text.substr(head.size(), text.size() - head.size() - tail.size());
  std::string_view middle = pattern.substr(first_star + 1, last_star - first_star);
  while (!middle.empty()) {
    const size_t star = middle.find('*');
    const std::string_view segment = middle.substr(0, star);
    middle.remove_prefix(star + 1);
    if (segment.empty()) continue;
    const size_t at = findSegment(segment, rest);
    if (at == std::string_view::npos) return false;
    rest.remove_prefix(at + segment.size());
  }
  return true;
}

std::string bucketArn(std::string_view bucket) {
  std::string arn(kArnPrefix);
  arn += bucket;
  return arn;
}

std::string objectArn(std::string_view bucket, std::string_view key) {
  std::string arn = bucketArn(bucket);
  arn += '/';
  arn += key;
  return arn;
}

std::optional<bool> actionOnObjects(std::string_view lower_action) {
  auto same = [&](std::string_view action) {
    return !action.empty() && asciiLower(action) == lower_action;
  };
  for (const OperationAction& a : kActions) {
    if (same(a.action) || same(versionAction(a.action))) return a.on != On::kBucket;
    if (same(a.also) || same(versionAction(a.also))) {
      return !a.also_of_bucket && a.on != On::kBucket;
    }
  }
  return std::nullopt;
}

bool BucketPolicy::actionsApply(const Statement& st, std::string_view own) {
  if (st.not_action || st.not_resource) return true;
  for (const std::string& a : st.actions) {
    if (a.find_first_of("*?") != std::string::npos) return true;
    const std::optional<bool> on_objects = actionOnObjects(a);
    if (!on_objects) return true;  // an action Granary does not evaluate: AWS's to judge
    for (const std::string& r : st.resources) {
      const bool object = r.size() > own.size() && r.starts_with(own) && r[own.size()] == '/';
      if (object == *on_objects) return true;
    }
  }
  return false;
}

S3Result<void> BucketPolicy::parsePrincipal(const Json& value, Statement& st,
                                             bool being_set) {
  if (value == "*") {
    st.everyone = true;
    return {};
  }
  if (!value.is_object() || value.empty()) return malformed("Invalid principal in policy");
  for (const auto& [kind, who] : value.items()) {
    if (kind != "AWS") {
      return unsupported(fmt::format("Principals of type {} are not supported", kind));
    }
    auto names = stringList(who, "Principal");
    if (!names) return std::unexpected(names.error());
    for (const std::string& n : *names) {
      // arn:aws:iam::<account>:user/<name>: Granary's users have no accounts.
      constexpr std::string_view kIam = "arn:aws:iam::";
      const size_t user = n.find(":user/");
      // No wildcards but the whole "*": S3 refuses them in principals.
      const bool wild = n.find_first_of("*?") != std::string::npos;
      const bool account_id = n.size() == 12 && n.find_first_not_of("0123456789") == n.npos;
      if (n == "*") {
        st.everyone = true;
      } else if (!wild && n.starts_with(kIam) && user != std::string::npos &&
                 n.find(':', kIam.size()) == user && user + 6 < n.size()) {
        // An IAM path (user/ops/alice) names no Granary user (their names hold no '/'):
        // a Deny naming one would never apply, so a policy being set is refused. One
        // stored before this rule keeps reading (refused, it would deny the bucket to all
        // but its owner's policy requests): the principal matches no one, as it did.
        if (n.find('/', user + 6) != std::string::npos) {
          if (being_set) {
            return unsupported("User ARNs with an IAM path are not supported: " + n);
          }
          continue;
        }
        st.users.push_back(n.substr(user + 6));
      } else if (!wild && (account_id || n.starts_with(kIam))) {
        // An account (its id, or arn:aws:iam::<account>:root), a role, a group: valid
        // for AWS, and nothing Granary's users are.
        return unsupported("Principals other than \"*\" and named users are not supported");
      } else {
        return malformed("Invalid principal in policy");
      }
    }
  }
  return {};
}

S3Result<void> BucketPolicy::parseConditions(const Json& value, Statement& st) {
  if (!value.is_object()) return malformed("Condition must be an object");
  for (const auto& [op_name, keys] : value.items()) {
    if (op_name.find(':') != std::string::npos) {
      return unsupported(fmt::format("Condition set operators are not supported: {}", op_name));
    }
    std::string op = asciiLower(op_name);
    const bool if_exists = op.ends_with("ifexists") && op != "null";
    if (if_exists) op.resize(op.size() - 8);
    const bool ip_op = op == "ipaddress" || op == "notipaddress";
    if (!contains(kStringOps, op) && op != "bool" && op != "null" && !ip_op) {
      return unsupported(fmt::format("Condition operator {} is not supported", op_name));
    }
    if (!keys.is_object() || keys.empty()) {
      return malformed(fmt::format("Condition operator {} needs keys", op_name));
    }
    for (const auto& [key_name, values] : keys.items()) {
      Condition c{op, if_exists, asciiLower(key_name), {}, {}};
      if (!contains(kConditionKeys, c.key)) {
        return unsupported(fmt::format("Condition key {} is not supported", key_name));
      }
      if ((c.key == "aws:sourceip") != ip_op && op != "null") {
        return malformed(fmt::format("Invalid Condition type for key {}", key_name));
      }
      auto v = conditionValues(values);
      if (!v) return std::unexpected(v.error());
      for (const std::string& text : *v) {
        if (text.find("${") != std::string::npos) {
          return unsupported("Policy variables are not supported");
        }
        if (ip_op) {
          // Parsed once here, not on every request the condition is asked about.
          auto network = parseNetwork(text);
          if (!network) return malformed(fmt::format("Invalid IP address: {}", text));
          c.networks.push_back(std::move(*network));
        }
        if ((op == "bool" || op == "null") && text != "true" && text != "false") {
          return malformed(fmt::format("Invalid boolean value: {}", text));
        }
      }
      c.values = std::move(*v);
      st.conditions.push_back(std::move(c));
    }
  }
  return {};
}

S3Result<BucketPolicy> BucketPolicy::parse(std::string_view json, std::string_view bucket,
                                           bool being_set) {
  if (json.size() > kMaxBucketPolicyBytes) {
    return malformed("Policies must be no larger than 20 KB");
  }
  Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return malformed("This policy is not valid JSON");
  BucketPolicy policy;
  const Json* statements = nullptr;
  for (const auto& [name, value] : doc.items()) {
    if (name == "Version") {
      if (value != "2012-10-17" && value != "2008-10-17") {
        return malformed("Policy has an invalid Version");
      }
    } else if (name == "Statement") {
      statements = &value;
    } else if (name != "Id") {
      return malformed(fmt::format("Policy has an unknown field: {}", name));
    }
  }
  if (statements == nullptr) return malformed("Missing required field Statement");
  std::vector<const Json*> list;
  if (statements->is_object()) {
    list.push_back(statements);
  } else if (statements->is_array() && !statements->empty()) {
    for (const Json& s : *statements) list.push_back(&s);
  } else {
    return malformed("Statement must be a statement or a list of them");
  }

  const std::string own = bucketArn(bucket);
  policy.bucket_arn_ = own;
  for (const Json* sj : list) {
    if (!sj->is_object()) return malformed("Each Statement must be an object");
    Statement st;
    bool effect = false;
    bool principal = false;
    bool action = false;
    bool resource = false;
    for (const auto& [name, value] : sj->items()) {
      if (name == "Sid") {
        if (!value.is_string()) return malformed("Sid must be a string");
      } else if (name == "Effect") {
        if (value != "Allow" && value != "Deny") return malformed("Invalid effect");
        st.allow = value == "Allow";
        effect = true;
      } else if (name == "Principal") {
        principal = true;
        if (auto ok = parsePrincipal(value, st, being_set); !ok) {
          return std::unexpected(ok.error());
        }
      } else if (name == "NotPrincipal") {
        return unsupported("NotPrincipal is not supported");
      } else if (name == "Action" || name == "NotAction") {
        if (action) return malformed("A statement has both Action and NotAction");
        action = true;
        st.not_action = name == "NotAction";
        auto actions = stringList(value, name);
        if (!actions) return std::unexpected(actions.error());
        for (const std::string& a : *actions) {
          std::string lower = asciiLower(a);
          if (lower != "*" && !lower.starts_with("s3:")) {
            return malformed("Policy has invalid action");
          }
          st.actions.push_back(std::move(lower));
        }
      } else if (name == "Resource" || name == "NotResource") {
        if (resource) return malformed("A statement has both Resource and NotResource");
        resource = true;
        st.not_resource = name == "NotResource";
        auto resources = stringList(value, name);
        if (!resources) return std::unexpected(resources.error());
        for (const std::string& r : *resources) {
          if (r.find("${") != std::string::npos) {
            return unsupported("Policy variables are not supported");
          }
          if (r != own && !r.starts_with(own + "/")) {
            return malformed("Policy has invalid resource");
          }
          st.resources.push_back(r);
        }
      } else if (name == "Condition") {
        if (auto ok = parseConditions(value, st); !ok) return std::unexpected(ok.error());
      } else {
        return malformed(fmt::format("Statement has an unknown field: {}", name));
      }
    }
    if (!effect) return malformed("Missing required field Effect");
    if (!principal) return malformed("Missing required field Principal");
    if (!action) return malformed("Missing required field Action");
    if (!resource) return malformed("Missing required field Resource");
    if (being_set && !actionsApply(st, own)) {
      // S3's refusal too: a Deny of s3:DeleteObject on "arn:aws:s3:::bucket" (the "/*"
      // forgotten) would otherwise be stored and protect nothing.
      return malformed("Action does not apply to any resource(s) in statement");
    }
    policy.statements_.push_back(std::move(st));
  }
  return policy;
}

bool BucketPolicy::applies(const Statement& s, const PolicyQuery& q,
                           std::string_view action) const {
  if (!s.everyone) {
    if (q.principal.empty() ||
        std::find(s.users.begin(), s.users.end(), q.principal) == s.users.end()) {
      return false;
    }
  }
  if (anyMatch(s.actions, action) == s.not_action) return false;
  if (!resourceMatches(s, q)) return false;
  if (q.conditions_held != nullptr) {
    std::vector<int8_t>& held = *q.conditions_held;
    if (held.size() != statements_.size()) held.assign(statements_.size(), -1);
    int8_t& known = held[static_cast<size_t>(&s - statements_.data())];
    if (known < 0) known = conditionsHold(s, q) ? 1 : 0;
    return known == 1;
  }
  return conditionsHold(s, q);
}

bool BucketPolicy::conditionsHold(const Statement& s, const PolicyQuery& q) const {
  return std::all_of(s.conditions.begin(), s.conditions.end(), [&](const Condition& c) {
    std::optional<std::string_view> value = keyValue(c.key, q);
    if (c.op == "null") {
      const std::string_view want = value ? "false" : "true";
      return std::find(c.values.begin(), c.values.end(), want) != c.values.end();
    }
    // An unknown client address (the connection's peer could not be read) never lets a
    // statement grant, and always lets one deny: AWS would treat NotIpAddress as true.
    if (!value && c.key == "aws:sourceip") return !s.allow;
    if (!value) return c.if_exists || isNegated(c.op);
    const bool match =
        c.networks.empty()
            ? std::any_of(c.values.begin(), c.values.end(),
                          [&](const std::string& v) { return valueMatches(c.op, v, *value); })
            : std::any_of(c.networks.begin(), c.networks.end(),
                          [&](const Network& n) { return inNetwork(n, *value); });
    return match != isNegated(c.op);
  });
}

bool BucketPolicy::resourceMatches(const Statement& s, const PolicyQuery& q) const {
  if (!q.every_object) return anyMatch(s.resources, q.resource) != s.not_resource;
  // Every object: a Deny may name any of them; an Allow must name them all.
  if (!s.allow) return true;
  if (s.not_resource) return false;
  return std::any_of(s.resources.begin(), s.resources.end(), [&](const std::string& r) {
    return r.size() > bucket_arn_.size() + 1 && r.starts_with(bucket_arn_) &&
           r[bucket_arn_.size()] == '/' &&
           r.find_first_not_of('*', bucket_arn_.size() + 1) == std::string::npos;
  });
}

PolicyEffect BucketPolicy::evaluate(const PolicyQuery& q) const {
  PolicyEffect effect = PolicyEffect::kNone;
  const std::string action = asciiLower(q.action);
  for (const Statement& s : statements_) {
    if (!applies(s, q, action)) continue;
    if (!s.allow) return PolicyEffect::kDeny;
    effect = PolicyEffect::kAllow;
  }
  return effect;
}

bool BucketPolicy::isPublic() const {
  return std::any_of(statements_.begin(), statements_.end(), [](const Statement& s) {
    return s.allow && s.everyone && s.conditions.empty();
  });
}

bool BucketPolicy::mayAllow(std::string_view action, std::string_view principal) const {
  const std::string lower = asciiLower(action);
  return std::any_of(statements_.begin(), statements_.end(), [&](const Statement& s) {
    const bool who = s.everyone || (!principal.empty() && std::find(s.users.begin(),
                                                                    s.users.end(),
                                                                    principal) != s.users.end());
    return s.allow && who && anyMatch(s.actions, lower) != s.not_action;
  });
}

}  // namespace granary::gateway

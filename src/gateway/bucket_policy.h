// Bucket policies (PutBucketPolicy): the JSON access policy language of S3, the part of it
// Granary evaluates. Pure code: parsing and evaluation, no I/O (access.cc asks it).
//
// A policy grants (Allow) or refuses (Deny) S3 actions on the bucket and its objects to
// principals: everyone ("*", anonymous requests included) or named users
// ("arn:aws:iam::<account>:user/<name>"), under conditions on the request. What S3 accepts
// and Granary cannot evaluate (other principal kinds, NotPrincipal, policy variables,
// other condition keys and operators) is refused with NotImplemented when the policy is
// set, never stored and ignored: a Deny that cannot be evaluated must not pass silently.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "s3_error.h"

namespace granary::gateway {

// What a policy is asked about: one action of one request on one resource.
struct PolicyQuery {
  std::string_view action;     // "s3:GetObject"
  std::string_view resource;   // bucketArn() or objectArn()
  std::string_view principal;  // the user's name; empty: anonymous
  bool secure = false;         // aws:SecureTransport (the request came over TLS)
  std::string_view source_ip;  // aws:SourceIp; empty: unknown (no IpAddress matches)
  std::optional<std::string_view> user_agent;  // aws:UserAgent
  std::optional<std::string_view> referer;     // aws:Referer
  std::optional<std::string_view> prefix;      // s3:prefix (listings)
  std::optional<std::string_view> delimiter;   // s3:delimiter (listings)
  std::optional<std::string_view> max_keys;    // s3:max-keys (listings)
  // The request reads whichever objects of the bucket it finds (the record index's
  // bucket-wide reads, whose containers are known only after the lookup): a Deny statement
  // applies whatever its Resource names, an Allow only through a Resource that names every
  // object (`arn:aws:s3:::bucket/*`). `resource` is not used.
  bool every_object = false;
  // Per statement, whether its conditions held (-1: not judged yet), for a request asked
  // about many resources (DeleteObjects asks per key): conditions read the request alone,
  // never the resource, so they are judged once (a 15 KB User-Agent against long
  // patterns, again for each of 1000 keys, held an event loop for seconds). Null: none.
  std::vector<int8_t>* conditions_held = nullptr;
};

enum class PolicyEffect { kNone, kAllow, kDeny };

// An IpAddress condition's network: an address's bytes (4 or 16) and how many lead bits
// a client's address must share with them.
struct PolicyNetwork {
  std::vector<uint8_t> bytes;
  size_t prefix_bits = 0;
};

// S3's limit on a bucket policy document.
inline constexpr size_t kMaxBucketPolicyBytes = 20 * 1024;

class BucketPolicy {
 public:
  // The policy of `bucket`: MalformedPolicy for a document S3 refuses (not JSON, a
  // missing or unknown element, an action outside s3, a resource outside the bucket; and,
  // for a policy being set (`being_set`: PutBucketPolicy), a statement none of whose
  // actions applies to any of its resources), NotImplemented for what Granary cannot
  // evaluate. A stored policy is read without that last check: one stored before it
  // existed keeps working (such a statement matches no request).
  static S3Result<BucketPolicy> parse(std::string_view json, std::string_view bucket,
                                      bool being_set = false);

  // Deny if a Deny statement applies, else Allow if an Allow statement applies, else None.
  PolicyEffect evaluate(const PolicyQuery& q) const;
  // GetBucketPolicyStatus: an Allow statement for everyone, without conditions.
  bool isPublic() const;
  // Whether some Allow statement may grant `action` (an S3 action name) to `principal`
  // on some resource; DeleteObjects lets a request through on it and asks per key.
  bool mayAllow(std::string_view action, std::string_view principal) const;

 private:
  struct Condition {
    std::string op;   // lower case, without IfExists: "stringequals", "bool", "null", ...
    bool if_exists = false;
    std::string key;  // lower case: "aws:sourceip"
    std::vector<std::string> values;
    std::vector<PolicyNetwork> networks;  // IpAddress / NotIpAddress: `values` parsed
  };
  struct Statement {
    bool allow = false;
    bool everyone = false;            // Principal "*" or {"AWS": "*"}
    std::vector<std::string> users;   // named users
    bool not_action = false;
    std::vector<std::string> actions;  // lower case patterns
    bool not_resource = false;
    std::vector<std::string> resources;  // patterns
    std::vector<Condition> conditions;
  };
  static S3Result<void> parsePrincipal(const nlohmann::json& value, Statement& st,
                                       bool being_set);
  // False if no action of `st` can apply to any of its resources (object actions to
  // "<own>/...", bucket actions to `own`); wildcards, unknown actions and the Not* forms
  // are not judged.
  static bool actionsApply(const Statement& st, std::string_view own);
  static S3Result<void> parseConditions(const nlohmann::json& value, Statement& st);
  // `action`: q.action in lower case, as the statements hold actions.
  bool applies(const Statement& s, const PolicyQuery& q, std::string_view action) const;
  bool resourceMatches(const Statement& s, const PolicyQuery& q) const;
  bool conditionsHold(const Statement& s, const PolicyQuery& q) const;

  std::string bucket_arn_;
  std::vector<Statement> statements_;
};

std::string bucketArn(std::string_view bucket);
std::string objectArn(std::string_view bucket, std::string_view key);

// Whether an S3 action (lower case: "s3:getobject") applies to objects (true) or to a
// bucket (false); nullopt for one Granary does not evaluate (policy_actions.h).
std::optional<bool> actionOnObjects(std::string_view lower_action);

// The wildcards of the policy language: `*` any run of characters (none included), `?`
// exactly one; nothing else is special (fnmatch(3) would also take [] and \).
bool policyWildcardMatch(std::string_view pattern, std::string_view text);

}  // namespace granary::gateway

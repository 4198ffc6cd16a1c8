// Fuzz target: BucketPolicy::parse and evaluate (src/gateway/bucket_policy.h), the JSON a
// bucket's owner sends with PutBucketPolicy and every later request is judged by. The
// first byte chooses the check:
//  - 0: the rest is a policy of bucket "data". It parses, or is refused with
//    MalformedPolicy or NotImplemented and nothing else. A parsed policy is asked about
//    queries built from strings in the input (actions, resources, principals, addresses,
//    prefixes): a policy whose text has no "Deny" (nor a \u escape) never denies, one
//    without "Allow" never allows; mayAllow(action, principal) false means no query with
//    that action and principal is allowed; a read of every object (PolicyQuery::
//    every_object) is allowed only where each object's read is, and denied wherever one
//    is; isPublic means some statement allows everyone without conditions, so the text
//    names "*" and "Allow".
//  - 1: the rest is a wildcard pattern, a NUL, and a text: policyWildcardMatch agrees
//    with a plain recursive matcher of `*` and `?`.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "bucket_policy.h"
#include "fuzz_util.h"

using granary::gateway::BucketPolicy;
using granary::gateway::bucketArn;
using granary::gateway::objectArn;
using granary::gateway::PolicyEffect;
using granary::gateway::PolicyQuery;
using granary::gateway::policyWildcardMatch;
using granary::gateway::S3ErrorCode;

namespace {

std::string_view g_input;
uint64_t g_parsed = 0;
uint64_t g_allowed = 0;
uint64_t g_denied = 0;
uint64_t g_globs = 0;

[[noreturn]] void fail(const char* what) {
  granary::fuzz::fail("bucket_policy_fuzz", what, g_input);
}

// The reference: exponential in the worst case, so only given short inputs.
bool slowMatch(std::string_view p, std::string_view t) {
  if (p.empty()) return t.empty();
  if (p[0] == '*') return slowMatch(p.substr(1), t) || (!t.empty() && slowMatch(p, t.substr(1)));
  if (t.empty()) return false;
  return (p[0] == '?' || p[0] == t[0]) && slowMatch(p.substr(1), t.substr(1));
}

// The JSON strings of the input, unescaped naively: what a policy could name.
std::vector<std::string> quotedStrings(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (out.size() < 24) {
    const size_t a = text.find('"', pos);
    if (a == std::string_view::npos) break;
    const size_t b = text.find('"', a + 1);
    if (b == std::string_view::npos) break;
    out.emplace_back(text.substr(a + 1, b - a - 1));
    pos = b + 1;
  }
  return out;
}

void checkPolicy(std::string_view text) {
  auto first = BucketPolicy::parse(text, "data");
  if (!first) {
    const S3ErrorCode code = first.error().code;
    if (code != S3ErrorCode::kMalformedPolicy && code != S3ErrorCode::kNotImplemented) {
      fail("a refusal other than MalformedPolicy or NotImplemented");
    }
    if (first.error().message.empty()) fail("a refusal without a message");
    return;
  }
  ++g_parsed;
  // (JSON escapes can spell anything: the text properties hold for texts without them.)
  const bool escaped = text.find("\\u") != std::string_view::npos;
  if (first->isPublic() && !escaped &&
      (text.find("Allow") == std::string_view::npos || text.find('*') == std::string_view::npos)) {
    fail("public without an Allow of \"*\"");
  }
  const bool may_deny = escaped || text.find("Deny") != std::string_view::npos;
  const bool may_allow_any = escaped || text.find("Allow") != std::string_view::npos;

  std::vector<std::string> words = quotedStrings(text);
  std::vector<std::string> actions = {"s3:GetObject", "s3:PutObject", "s3:ListBucket",
                                      "s3:DeleteObject"};
  std::vector<std::string> resources = {bucketArn("data"), objectArn("data", "a/b")};
  std::vector<std::string> principals = {"", "alice"};
  std::vector<std::string> values = {"", "192.0.2.1", "2001:db8::1", "true"};
  for (const std::string& w : words) {
    if (w.starts_with("s3:") || w.starts_with("S3:")) actions.push_back(w);
    if (w.starts_with("arn:aws:s3:::")) resources.push_back(w);
    if (const size_t u = w.find(":user/"); u != std::string::npos) {
      principals.push_back(w.substr(u + 6));
    }
    values.push_back(w);
  }
  for (const std::string& action : actions) {
    for (const std::string& principal : principals) {
      const bool may_allow = first->mayAllow(action, principal);
      for (const std::string& resource : resources) {
        for (size_t v = 0; v < values.size(); v += 3) {
          PolicyQuery q;
          q.action = action;
          q.resource = resource;
          q.principal = principal;
          q.secure = (v & 1) != 0;
          q.source_ip = values[v];
          if (v + 1 < values.size()) q.prefix = values[v + 1];
          if (v + 2 < values.size()) q.user_agent = values[v + 2];
          const PolicyEffect e = first->evaluate(q);
          if (e == PolicyEffect::kDeny && !may_deny) fail("a Deny from a text without one");
          if (e == PolicyEffect::kAllow && !may_allow_any) fail("an Allow from a text without one");
          if (e == PolicyEffect::kAllow && !may_allow) fail("allowed where mayAllow said no");
          // Every object at once (record reads) is allowed only where each one would be,
          // and denied wherever one of them is.
          PolicyQuery all = q;
          all.every_object = true;
          const PolicyEffect every = first->evaluate(all);
          if (resource.starts_with(objectArn("data", ""))) {
            if (every == PolicyEffect::kAllow && e != PolicyEffect::kAllow) {
              fail("every object allowed, one of them not");
            }
            if (e == PolicyEffect::kDeny && every != PolicyEffect::kDeny) {
              fail("one object denied, every object not");
            }
          }
          if (e == PolicyEffect::kAllow) ++g_allowed;
          if (e == PolicyEffect::kDeny) ++g_denied;
        }
      }
    }
  }
}

void checkGlob(std::string_view in) {
  const size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return;
  const std::string_view pattern = in.substr(0, nul).substr(0, 12);
  const std::string_view text = in.substr(nul + 1).substr(0, 16);
  ++g_globs;
  if (policyWildcardMatch(pattern, text) != slowMatch(pattern, text)) {
    fail("policyWildcardMatch disagrees with the reference matcher");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  g_input = std::string_view(reinterpret_cast<const char*>(data), size);
  const std::string_view in = g_input.substr(1);
  if (data[0] % 2 == 0) {
    checkPolicy(in);
  } else {
    checkGlob(in);
  }
  return 0;
}

// The replay driver's proof that the checks above ran on something.
extern "C" int GranaryFuzzSelfCheck() {
  std::printf("policies parsed: %llu, queries allowed: %llu, denied: %llu, globs: %llu\n",
              static_cast<unsigned long long>(g_parsed),
              static_cast<unsigned long long>(g_allowed),
              static_cast<unsigned long long>(g_denied),
              static_cast<unsigned long long>(g_globs));
  return g_parsed == 0 || g_allowed == 0 || g_denied == 0 || g_globs == 0 ? 1 : 0;
}

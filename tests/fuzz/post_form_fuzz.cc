// Fuzz target: POST Object forms (src/gateway/post_form.h), what a browser form upload
// sends before any authentication: the multipart framing, the signature fields, the
// policy document and its conditions. The first input byte picks what the rest is:
//  0: a form with boundary "b" (parseFormHead, then parsePostAuth on what it accepts);
//  1: a policy document (parsePostPolicy, then checkPostPolicy);
//  2: a Content-Type header (formBoundary).
// Properties:
//  - parseFormHead refuses with MalformedPOSTRequest, IncorrectNumberOfFilesInPostRequest or
//    InvalidArgument only; what it accepts has its file's bytes inside the input, field
//    names lower-case, each once, never "file";
//  - reading more never changes an answer: for every prefix of the form, the answer without
//    `complete` is "more" or exactly the whole form's (the same head, or the same error),
//    and a FormHeadParser fed the prefixes one after another answers as a fresh one;
//  - parsePostAuth refuses with InvalidArgument only; a SigV4 signer has service "s3" and an
//    x-amz-date that is a valid time on its credential's day;
//  - parsePostPolicy refuses with InvalidPolicyDocument only; an accepted policy's
//    conditions name lower-case fields and its ranges have min <= max; checkPostPolicy
//    refuses with AccessDenied only, always once the policy has expired, and the range it
//    returns lies within every range condition;
//  - formBoundary returns 1 to 70 characters.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "post_form.h"
#include "time_format.h"

using namespace granary::gateway;

namespace {

uint64_t g_forms = 0;     // forms accepted
uint64_t g_signers = 0;   // signers read from them
uint64_t g_policies = 0;  // policies accepted

[[noreturn]] void fail(const char* what, std::string_view input) {
  granary::fuzz::fail("post_form_fuzz", what, input);
}

bool sameHead(const FormHead& a, const FormHead& b) {
  return a.fields == b.fields && a.filename == b.filename && a.data_offset == b.data_offset;
}

bool lowerCase(std::string_view s) {
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') return false;
  }
  return true;
}

void checkForm(std::string_view in) {
  auto whole = parseFormHead(in, "b", /*complete=*/true);
  if (!whole) {
    const S3ErrorCode c = whole.error().code;
    if (c != S3ErrorCode::kMalformedPOSTRequest &&
        c != S3ErrorCode::kIncorrectNumberOfFilesInPostRequest &&
        c != S3ErrorCode::kInvalidArgument) {
      fail("parseFormHead refused with an unexpected code", in);
    }
  } else {
    if (!*whole) fail("a complete form asked for more", in);
    const FormHead& head = **whole;
    if (head.data_offset > in.size()) fail("the file starts past the input", in);
    for (size_t i = 0; i < head.fields.size(); ++i) {
      if (!lowerCase(head.fields[i].first) || head.fields[i].first == "file") {
        fail("a field name is not lower-case, or is the file", in);
      }
      for (size_t j = 0; j < i; ++j) {
        if (head.fields[j].first == head.fields[i].first) fail("a field twice", in);
      }
    }
    ++g_forms;
    auto signer = parsePostAuth(head);
    if (!signer) {
      if (signer.error().code != S3ErrorCode::kInvalidArgument) {
        fail("parsePostAuth refused with an unexpected code", in);
      }
    } else if (*signer && (*signer)->version == 4) {
      const AuthInfo& a = **signer;
      if (a.service != "s3" || !parseAmzDate(a.amz_date) || !a.amz_date.starts_with(a.date)) {
        fail("a SigV4 signer with a bad scope or date", in);
      }
      ++g_signers;
    }
  }
  // Every prefix, from a fresh parser and from one parser fed a byte more each time:
  // "more", or the whole form's answer.
  FormHeadParser fed("b");
  for (size_t n = 0; n < in.size(); ++n) {
    auto resumed = fed.parse(in.substr(0, n), /*complete=*/false);
    auto part = parseFormHead(in.substr(0, n), "b", /*complete=*/false);
    if (resumed.has_value() != part.has_value() ||
        (resumed ? resumed->has_value() != part->has_value() ||
                       (*resumed && !sameHead(**resumed, **part))
                 : resumed.error().code != part.error().code)) {
      fail("a parser fed byte by byte answered otherwise than a fresh one", in);
    }
    if (part && !*part) continue;
    if (!part) {
      if (whole || whole.error().code != part.error().code) {
        fail("a prefix was refused where the whole form was not (or otherwise)", in);
      }
    } else if (!whole || !sameHead(**part, **whole)) {
      fail("a prefix parsed differently from the whole form", in);
    }
  }
}

void checkPolicy(std::string_view in) {
  auto policy = parsePostPolicy(in);
  if (!policy) {
    if (policy.error().code != S3ErrorCode::kInvalidPolicyDocument) {
      fail("parsePostPolicy refused with an unexpected code", in);
    }
    return;
  }
  ++g_policies;
  FormFields fields;
  for (const PostPolicyCondition& c : policy->conditions) {
    if (!lowerCase(c.field)) fail("a condition's field is not lower-case", in);
    if (c.kind == PostPolicyCondition::Kind::kLengthRange && c.min > c.max) {
      fail("a range with min > max", in);
    }
    if (c.kind != PostPolicyCondition::Kind::kLengthRange && !c.field.empty()) {
      fields.emplace_back(c.field, c.value);  // what the conditions ask for, each once
    }
  }
  auto expired = checkPostPolicy(*policy, fields, "bucket", policy->expiration);
  if (expired || expired.error().code != S3ErrorCode::kAccessDenied) {
    fail("an expired policy was not AccessDenied", in);
  }
  auto checked = checkPostPolicy(*policy, fields, "bucket", policy->expiration - 1);
  if (!checked) {
    if (checked.error().code != S3ErrorCode::kAccessDenied) {
      fail("checkPostPolicy refused with an unexpected code", in);
    }
    return;
  }
  for (const PostPolicyCondition& c : policy->conditions) {
    if (c.kind == PostPolicyCondition::Kind::kLengthRange &&
        (checked->min < c.min || checked->max > c.max)) {
      fail("the allowed range is not within a range condition", in);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      checkForm(in.substr(0, 4096));  // every prefix is parsed: keep it quadratic but small
      break;
    case 1:
      checkPolicy(in);
      break;
    default:
      if (auto b = formBoundary(in); b && (b->empty() || b->size() > 70)) {
        fail("a boundary of the wrong length", in);
      }
      break;
  }
  return 0;
}

// Called by replay_main.cc after a replay (libFuzzer never calls it): fails unless the
// seeds reached accepted forms, SigV4 signers and accepted policies.
extern "C" int GranaryFuzzSelfCheck() {
  std::printf("forms accepted: %llu, SigV4 signers: %llu, policies accepted: %llu\n",
              static_cast<unsigned long long>(g_forms),
              static_cast<unsigned long long>(g_signers),
              static_cast<unsigned long long>(g_policies));
  return g_forms == 0 || g_signers == 0 || g_policies == 0 ? 1 : 0;
}

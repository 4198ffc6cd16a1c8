// URI helpers for the S3 gateway: percent-decoding, AWS's UriEncode, and query splitting.
//
// Pure functions, no allocation beyond their results, thread safe. They never fail on
// hostile input: a malformed escape is reported (percentDecode) or kept verbatim
// (parseQuery), never trusted.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "granary/common/strings.h"

namespace granary::gateway {

using granary::asciiIEquals;  // granary/common/strings.h
using granary::trimSpaces;

// Decodes %XX escapes (either hex case). nullopt when a '%' is not followed by two hex
// digits. `plus_is_space`: '+' decodes to ' ' (form and query encoding), else stays '+'.
std::optional<std::string> percentDecode(std::string_view s, bool plus_is_space);

// AWS UriEncode: keeps A-Z a-z 0-9 - _ . ~ (and '/' when !encode_slash); every other byte
// becomes %XX with upper-case hex. UTF-8 is encoded byte by byte.
std::string uriEncode(std::string_view s, bool encode_slash);

// Splits a query string (without the leading '?') on '&'; '=' is optional (value "").
// Empty segments are skipped. Names and values are percent-decoded with '+' as space, as
// S3 reads its query parameters; a segment with a malformed escape keeps its raw text.
std::vector<std::pair<std::string, std::string>> parseQuery(std::string_view query);

// The same split, with names and values exactly as sent (what SigV4 canonicalisation
// starts from).
std::vector<std::pair<std::string, std::string>> parseQueryRaw(std::string_view query);

// Splits a request-target into path and query (the query without '?'). An absolute-form
// target ("http://host/p?q") is reduced to its path and query.
std::pair<std::string_view, std::string_view> splitTarget(std::string_view target);

}  // namespace granary::gateway

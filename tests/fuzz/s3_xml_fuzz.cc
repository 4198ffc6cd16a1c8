// Fuzz target: the S3 XML request-body parsers (src/gateway/s3_xml.h):
// parseCompleteMultipartUpload, parseDeleteObjects and parseCreateBucketConfiguration; and
// object tags (parseTagging, and parseTaggingHeader on the same input as a header value:
// refusals are MalformedXML / InvalidArgument or InvalidTag; an accepted set holds at most
// kMaxObjectTags tags, keys that are not empty and not "aws:"-prefixed, all valid UTF-8;
// taggingXml of it parses back to the same set); and CORS configurations
// (parseCorsConfiguration: refusals are MalformedXML or InvalidRequest; accepted rules keep
// S3's limits and parse back the same from corsConfigurationXml); and lifecycle
// configurations (parseLifecycleConfiguration: refusals of the documented kinds; accepted
// rules keep S3's rules and parse back the same from lifecycleConfigurationXml).
// Every input is used twice.
//  1. As a request body, given to each parser. Properties:
//     - a refusal is MalformedXML, the one error these parsers document;
//     - an accepted body holds what the parser promises: 1..kMaxDeleteObjects keys,
//       1..kMaxParts parts, checksum names that are neither "" nor "Type", no NUL in any
//       value;
//     - round trip: the parsed values, written back as XML by the writer below and parsed
//       again, come back identical (quiet flag and keys; part numbers, ETags and checksums;
//       location constraint).
//  2. As entropy for a body built here (keys, ETags, checksum values and part numbers from
//     the input's bytes; counts up to one past the limits; the layout and escaping of the
//     XML: declaration, namespace, indentation, entities, character references, CDATA):
//     the parser must give back exactly the values written, and refuse with MalformedXML
//     exactly when the body breaks a documented rule (no objects or parts, too many, a part
//     number that does not fit in 32 bits, another root element).
// s3_xml.h writes response bodies only, so request bodies are written here, by hand (not
// with pugixml, the parser's own library), the way SDKs send them.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "granary/common/strings.h"
#include "s3_xml.h"

using granary::fuzz::Reader;
using namespace granary::gateway;

namespace {

std::string_view g_input;  // for failure reports

[[noreturn]] void fail(const char* what) { granary::fuzz::fail("s3_xml_fuzz", what, g_input); }

enum Parser : size_t { kDelete, kComplete, kCreateBucket, kParsers };
constexpr const char* kParserNames[kParsers] = {"DeleteObjects", "CompleteMultipartUpload",
                                                "CreateBucketConfiguration"};
// Per parser: raw inputs accepted (and round-tripped), built bodies accepted with the values
// written, built bodies refused as they had to be; bodies built at a count limit.
uint64_t g_raw_ok[kParsers] = {};
uint64_t g_built_ok[kParsers] = {};
uint64_t g_built_refused[kParsers] = {};
uint64_t g_at_limit = 0;

void expectMalformed(const S3Error& error) {
  if (error.code != S3ErrorCode::kMalformedXML) fail("a refusal is not MalformedXML");
}

// ---- An XML writer for request bodies.

bool isXmlSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

enum class TextStyle { kPlain, kCharRefs, kCdata };

struct XmlStyle {
  bool declaration = false;  // <?xml version="1.0" encoding="UTF-8"?>
  bool xmlns = false;        // the S3 namespace on the root element
  bool pretty = false;       // newlines and indentation between elements
  TextStyle text = TextStyle::kPlain;
  bool hex_refs = false;     // &#xD; rather than &#13;
};

XmlStyle styleFrom(uint8_t b) {
  XmlStyle s;
  s.declaration = (b & 1) != 0;
  s.xmlns = (b & 2) != 0;
  s.pretty = (b & 4) != 0;
  switch ((b >> 3) & 3) {
    case 2: s.text = TextStyle::kCharRefs; break;
    case 3: s.text = TextStyle::kCdata; break;
    default: s.text = TextStyle::kPlain; break;
  }
  s.hex_refs = (b & 32) != 0;
  return s;
}

void appendCharRef(std::string& out, unsigned char c, bool hex) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  if (hex) {
    out.append("&#x");
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xF]);
  } else {
    out.append("&#");
    out.append(std::to_string(static_cast<unsigned>(c)));
  }
  out.push_back(';');
}

// Appends `value` as element text that an XML parser reads back as `value` (which holds no
// NUL): markup characters as entities; CR and the other control characters as character
// references (a parser turns a raw CR into LF); bytes from 0x80 as they are (UTF-8 or not:
// a reference would stand for a code point, not a byte). A value of whitespace only is
// written entirely as character references: pugixml, with the options the gateway uses,
// drops text that is only whitespace, so <Key> </Key> reads as the key "" (the gateway
// cannot tell a key of spaces from an empty one; the writer here avoids that case).
void appendText(std::string& out, std::string_view value, TextStyle style, bool hex_refs) {
  const bool all_space =
      !value.empty() && std::all_of(value.begin(), value.end(), isXmlSpace);
  if (style == TextStyle::kCdata && value.find("]]>") == std::string_view::npos &&
      value.find('\r') == std::string_view::npos) {
    out.append("<![CDATA[").append(value).append("]]>");
    return;
  }
  for (char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out.append("&amp;"); continue;
      case '<': out.append("&lt;"); continue;
      case '>': out.append("&gt;"); continue;
      case '"': out.append("&quot;"); continue;
      case '\'': out.append("&apos;"); continue;
      default: break;
    }
    const bool control = c < 0x20 && ch != '\t' && ch != '\n';
    if (control || all_space || (style == TextStyle::kCharRefs && c < 0x80)) {
      appendCharRef(out, c, hex_refs);
    } else {
      out.push_back(ch);
    }
  }
}

class XmlWriter {
 public:
  explicit XmlWriter(const XmlStyle& style) : style_(style) {
    if (style_.declaration) out_.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
  }

  void open(std::string_view name) {
    newline();
    out_.append("<").append(name);
    if (depth_ == 0 && style_.xmlns) out_.append(" xmlns=\"").append(kS3Namespace).append("\"");
    out_.append(">");
    ++depth_;
  }

  void close(std::string_view name) {
    --depth_;
    newline();
    out_.append("</").append(name).append(">");
  }

  void leaf(std::string_view name, std::string_view value) {
    newline();
    out_.append("<").append(name).append(">");
    appendText(out_, value, style_.text, style_.hex_refs);
    out_.append("</").append(name).append(">");
  }

  const std::string& str() const { return out_; }

 private:
  void newline() {
    if (!style_.pretty) return;
    if (!out_.empty()) out_.push_back('\n');
    out_.append(depth_ * 2, ' ');
  }

  XmlStyle style_;
  std::string out_;
  size_t depth_ = 0;
};

// ---- The three request bodies.

constexpr std::string_view kVersionId = "OYcLXagmS.WaD..oyH4KRguB95_YhLs7";
constexpr std::string_view kEtag = "\"9bb58f26192e4ba00f01e2e7b136bbd8\"";

std::string deleteXml(const char* quiet, const std::vector<ObjectIdentifier>& objects,
                      const XmlStyle& style) {
  XmlWriter w(style);
  w.open("Delete");
  if (quiet != nullptr) w.leaf("Quiet", quiet);
  for (const ObjectIdentifier& object : objects) {
    w.open("Object");
    w.leaf("Key", object.key);
    if (object.version_id) w.leaf("VersionId", *object.version_id);
    if (object.etag) w.leaf("ETag", *object.etag);
    w.close("Object");
  }
  w.close("Delete");
  return w.str();
}

struct PartXml {
  std::string number;  // PartNumber text as sent
  std::string etag;    // ETag text as sent (with its quotes, if quoted)
  std::map<std::string, std::string> checksums;  // "CRC32" -> value: <ChecksumCRC32>
  bool etag_first = false;
  bool extras = false;  // ChecksumType and an unknown element, both to be ignored
};

// `count` parts, cycling through `parts`.
std::string completeXml(const std::vector<PartXml>& parts, size_t count, const XmlStyle& style) {
  XmlWriter w(style);
  w.open("CompleteMultipartUpload");
  for (size_t i = 0; i < count; ++i) {
    const PartXml& p = parts[i % parts.size()];
    w.open("Part");
    if (p.etag_first) w.leaf("ETag", p.etag);
    w.leaf("PartNumber", p.number);
    if (!p.etag_first) w.leaf("ETag", p.etag);
    for (const auto& [algorithm, value] : p.checksums) {
      std::string element = "Checksum";
      element.append(algorithm);
      w.leaf(element, value);
    }
    if (p.extras) {
      w.leaf("ChecksumType", "COMPOSITE");
      w.leaf("Size", "5242880");
    }
    w.close("Part");
  }
  w.close("CompleteMultipartUpload");
  return w.str();
}

std::string createBucketXml(const std::optional<std::string>& location, bool directory_bucket,
                            const XmlStyle& style,
                            std::string_view root = "CreateBucketConfiguration") {
  XmlWriter w(style);
  w.open(root);
  if (location) w.leaf("LocationConstraint", *location);
  if (directory_bucket) {
    w.open("Location");
    w.leaf("Name", "usw2-az1");
    w.leaf("Type", "AvailabilityZone");
    w.close("Location");
    w.open("Bucket");
    w.leaf("DataRedundancy", "SingleAvailabilityZone");
    w.leaf("Type", "Directory");
    w.close("Bucket");
  }
  w.close(root);
  return w.str();
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  out.append(s).push_back('"');
  return out;
}

// What the parser makes of an ETag as sent: one pair of surrounding quotes removed.
std::string unquoted(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return std::string(s);
}

bool hasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// ---- 1. The input as a body.

void checkTags(const TagSet& tags) {
  if (tags.size() > kMaxObjectTags) fail("more than kMaxObjectTags tags accepted");
  for (const auto& [key, value] : tags) {
    if (key.empty() || key.rfind("aws:", 0) == 0 || key.rfind("AWS:", 0) == 0) {
      fail("an empty or aws:-prefixed tag key accepted");
    }
    if (!granary::validUtf8(key) || !granary::validUtf8(value)) fail("a tag is not UTF-8");
  }
  S3Result<TagSet> again = parseTagging(taggingXml(tags));
  if (!again || *again != tags) fail("tags written by taggingXml do not parse back the same");
}

void rawTagging(std::string_view in) {
  S3Result<TagSet> body = parseTagging(in);
  if (body) {
    checkTags(*body);
  } else if (body.error().code != S3ErrorCode::kMalformedXML &&
             body.error().code != S3ErrorCode::kInvalidTag) {
    fail("a Tagging refusal is neither MalformedXML nor InvalidTag");
  }
  S3Result<TagSet> header = parseTaggingHeader(in);
  if (header) {
    checkTags(*header);
  } else if (header.error().code != S3ErrorCode::kInvalidArgument &&
             header.error().code != S3ErrorCode::kInvalidTag) {
    fail("an x-amz-tagging refusal is neither InvalidArgument nor InvalidTag");
  }
}

uint64_t g_cors_ok = 0;  // CORS configurations accepted as given

// A CORS configuration (PutBucketCors): refused with MalformedXML or InvalidRequest only;
// an accepted one keeps S3's rules and parses back the same from corsConfigurationXml.
void rawCors(std::string_view in) {
  S3Result<std::vector<granary::index_kv::CorsRule>> rules = parseCorsConfiguration(in);
  if (!rules) {
    if (rules.error().code != S3ErrorCode::kMalformedXML &&
        rules.error().code != S3ErrorCode::kInvalidRequest) {
      fail("a CORS refusal is neither MalformedXML nor InvalidRequest");
    }
    return;
  }
  if (rules->empty() || rules->size() > kMaxCorsRules) fail("CORS rule count out of range");
  const auto stars = [](const std::string& v) { return std::count(v.begin(), v.end(), '*'); };
  for (const auto& rule : *rules) {
    if (rule.allowed_origins.empty() || rule.allowed_methods.empty()) {
      fail("a CORS rule without origins or methods accepted");
    }
    for (const auto& m : rule.allowed_methods) {
      if (!isCorsMethod(m)) fail("an unsupported CORS method accepted");
    }
    for (const auto& o : rule.allowed_origins) {
      if (o.empty() || stars(o) > 1) fail("an empty or two-wildcard origin accepted");
    }
    for (const auto& h : rule.allowed_headers) {
      if (stars(h) > 1) fail("a two-wildcard header accepted");
    }
  }
  auto again = parseCorsConfiguration(corsConfigurationXml(*rules));
  if (!again || *again != *rules) fail("CORS rules written back do not parse the same");
  ++g_cors_ok;
}

uint64_t g_lifecycle_ok = 0;  // lifecycle configurations accepted as given

// A lifecycle configuration (PutBucketLifecycleConfiguration): refused with MalformedXML,
// InvalidArgument, InvalidRequest, InvalidTag or NotImplemented only; an accepted one keeps S3's rules
// (an action in every rule, sizes in order, no tag or size filter beside an abort) and
// parses back the same from lifecycleConfigurationXml.
void rawLifecycle(std::string_view in) {
  auto rules = parseLifecycleConfiguration(in);
  if (!rules) {
    const S3ErrorCode code = rules.error().code;
    if (code != S3ErrorCode::kMalformedXML && code != S3ErrorCode::kInvalidArgument &&
        code != S3ErrorCode::kInvalidRequest && code != S3ErrorCode::kInvalidTag &&
        code != S3ErrorCode::kNotImplemented) {
      fail("a lifecycle refusal of an unexpected kind");
    }
    return;
  }
  if (rules->empty() || rules->size() > kMaxLifecycleRules) fail("lifecycle rule count");
  for (const auto& rule : *rules) {
    if (!rule.expiration_days && !rule.expiration_date_unix && !rule.abort_incomplete_days) {
      fail("a lifecycle rule without an action accepted");
    }
    if (rule.size_greater_than && rule.size_less_than &&
        *rule.size_greater_than >= *rule.size_less_than) {
      fail("lifecycle sizes out of order accepted");
    }
    if (rule.abort_incomplete_days &&
        (!rule.tags.empty() || rule.size_greater_than || rule.size_less_than)) {
      fail("a filtered abort rule accepted");
    }
  }
  auto again = parseLifecycleConfiguration(lifecycleConfigurationXml(*rules));
  if (!again || *again != *rules) fail("lifecycle rules written back do not parse the same");
  ++g_lifecycle_ok;
}

void rawDelete(std::string_view body, const XmlStyle& style) {
  S3Result<DeleteObjectsRequest> parsed = parseDeleteObjects(body);
  if (!parsed) {
    expectMalformed(parsed.error());
    return;
  }
  if (parsed->objects.empty() || parsed->objects.size() > kMaxDeleteObjects) {
    fail("DeleteObjects accepted no keys or too many");
  }
  for (const ObjectIdentifier& object : parsed->objects) {
    if (hasNul(object.key) || (object.version_id && hasNul(*object.version_id))) {
      fail("a parsed key or version id holds NUL");
    }
  }
  ++g_raw_ok[kDelete];
  const std::string xml = deleteXml(parsed->quiet ? "true" : nullptr, parsed->objects, style);
  S3Result<DeleteObjectsRequest> again = parseDeleteObjects(xml);
  if (!again) fail("DeleteObjects refuses the XML written from what it parsed");
  if (again->quiet != parsed->quiet || again->objects != parsed->objects) {
    fail("DeleteObjects round trip changed the quiet flag, the keys or the version ids");
  }
}

void rawComplete(std::string_view body, const XmlStyle& style) {
  S3Result<std::vector<CompletedPart>> parsed = parseCompleteMultipartUpload(body);
  if (!parsed) {
    expectMalformed(parsed.error());
    return;
  }
  if (parsed->empty() || parsed->size() > kMaxParts) {
    fail("CompleteMultipartUpload accepted no parts or too many");
  }
  std::vector<PartXml> parts;
  for (const CompletedPart& p : *parsed) {
    if (hasNul(p.etag)) fail("a parsed ETag holds NUL");
    for (const auto& [algorithm, value] : p.checksums) {
      if (algorithm.empty() || algorithm == "Type") fail("a checksum named \"\" or \"Type\"");
      if (hasNul(algorithm) || hasNul(value)) fail("a parsed checksum holds NUL");
    }
    PartXml x;
    x.number = std::to_string(p.part_number);
    x.etag = quoted(p.etag);
    x.checksums = p.checksums;
    parts.push_back(std::move(x));
  }
  ++g_raw_ok[kComplete];
  const std::string xml = completeXml(parts, parts.size(), style);
  S3Result<std::vector<CompletedPart>> again = parseCompleteMultipartUpload(xml);
  if (!again) fail("CompleteMultipartUpload refuses the XML written from what it parsed");
  if (again->size() != parsed->size()) fail("CompleteMultipartUpload round trip lost parts");
  for (size_t i = 0; i < parsed->size(); ++i) {
    const CompletedPart& a = (*parsed)[i];
    const CompletedPart& b = (*again)[i];
    if (a.part_number != b.part_number || a.etag != b.etag || a.checksums != b.checksums) {
      fail("CompleteMultipartUpload round trip changed a part");
    }
  }
}

void rawCreateBucket(std::string_view body, const XmlStyle& style) {
  S3Result<std::string> parsed = parseCreateBucketConfiguration(body);
  if (!parsed) {
    expectMalformed(parsed.error());
    return;
  }
  if (hasNul(*parsed)) fail("a parsed location constraint holds NUL");
  ++g_raw_ok[kCreateBucket];
  S3Result<std::string> again = parseCreateBucketConfiguration(
      createBucketXml(std::optional<std::string>(*parsed), false, style));
  if (!again) fail("CreateBucketConfiguration refuses the XML written from what it parsed");
  if (*again != *parsed) fail("CreateBucketConfiguration round trip changed the location");
}

// ---- 2. Bodies built from the input's bytes.

// Element text from the input: up to `max_len` bytes, NUL left out (no parsed value can
// hold NUL: pugixml's strings end at the first).
std::string textValue(Reader& r, size_t max_len) {
  std::string out;
  for (char c : r.take(max_len)) {
    if (c != '\0') out.push_back(c);
  }
  return out;
}

// A count from one byte: 0-4 mostly (0 breaks the "at least one" rule); 0xff gives the
// limit or one past it, from the next byte.
size_t countFrom(Reader& r, size_t limit) {
  const uint8_t b = r.byte();
  if (b != 0xff) return b % 5;
  ++g_at_limit;
  return limit + (r.byte() & 1);
}

// The '<' of a body, as the parsers' caps count them.
size_t tagsIn(std::string_view xml) {
  return static_cast<size_t>(std::count(xml.begin(), xml.end(), '<'));
}

void builtDelete(Reader& r) {
  const XmlStyle style = styleFrom(r.byte());
  const size_t count = countFrom(r, kMaxDeleteObjects);
  const uint8_t quiet_mode = r.byte() % 3;  // absent, "true", "false"
  const bool with_version_ids = r.bit();
  const bool with_etags = r.bit();
  std::vector<std::string> distinct;
  for (size_t i = 0; i < std::min<size_t>(count, 4); ++i) distinct.push_back(textValue(r, 40));
  std::vector<ObjectIdentifier> objects;
  objects.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    objects.push_back({distinct[i % distinct.size()],
                       with_version_ids ? std::optional<std::string>(kVersionId) : std::nullopt,
                       with_etags ? std::optional<std::string>(kEtag) : std::nullopt});
  }
  const char* quiet = quiet_mode == 0 ? nullptr : (quiet_mode == 1 ? "true" : "false");
  const std::string xml = deleteXml(quiet, objects, style);

  S3Result<DeleteObjectsRequest> parsed = parseDeleteObjects(xml);
  // Comments and CDATA sections count against the '<' cap too (a documented limit).
  const bool valid = count >= 1 && count <= kMaxDeleteObjects &&
                     tagsIn(xml) <= kMaxDeleteBodyTags;
  if (!valid) {
    if (parsed) fail("DeleteObjects accepted no objects or too many");
    expectMalformed(parsed.error());
    ++g_built_refused[kDelete];
    return;
  }
  if (!parsed) fail("DeleteObjects refuses a valid body");
  if (parsed->quiet != (quiet_mode == 1)) fail("DeleteObjects read Quiet wrong");
  if (parsed->objects != objects) {
    fail("DeleteObjects read keys, version ids or ETags other than those written");
  }
  ++g_built_ok[kDelete];
}

void builtComplete(Reader& r) {
  static constexpr const char* kAlgorithms[] = {"CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"};
  const XmlStyle style = styleFrom(r.byte());
  const size_t count = countFrom(r, kMaxParts);
  std::vector<PartXml> parts;
  std::vector<uint64_t> numbers;
  bool numbers_fit = true;
  for (size_t i = 0; i < std::min<size_t>(count, 4); ++i) {
    const uint8_t sel = r.byte();
    const uint64_t number =
        (sel & 0xc0) != 0xc0 ? 1 + r.below(10000) : r.u64() >> (r.byte() % 64);
    numbers_fit = numbers_fit && number <= std::numeric_limits<uint32_t>::max();
    numbers.push_back(number);
    PartXml p;
    if ((sel & 1) != 0) p.number = "00";  // leading zeros are still the same number
    p.number.append(std::to_string(number));
    const std::string etag = textValue(r, 40);
    p.etag = (sel & 2) != 0 ? quoted(etag) : etag;
    p.etag_first = (sel & 4) != 0;
    p.extras = (sel & 8) != 0;
    const uint8_t mask = r.byte();
    for (size_t a = 0; a < std::size(kAlgorithms); ++a) {
      if ((mask >> a) & 1) p.checksums[kAlgorithms[a]] = textValue(r, 48);
    }
    parts.push_back(std::move(p));
  }
  const std::string xml = completeXml(parts, count, style);

  S3Result<std::vector<CompletedPart>> parsed = parseCompleteMultipartUpload(xml);
  const bool valid = count >= 1 && count <= kMaxParts && numbers_fit &&
                     tagsIn(xml) <= kMaxCompleteBodyTags;
  if (!valid) {
    if (parsed) {
      fail("CompleteMultipartUpload accepted no parts, too many, a bad PartNumber or too "
           "many tags");
    }
    expectMalformed(parsed.error());
    ++g_built_refused[kComplete];
    return;
  }
  if (!parsed) fail("CompleteMultipartUpload refuses a valid body");
  if (parsed->size() != count) fail("CompleteMultipartUpload read another number of parts");
  for (size_t i = 0; i < count; ++i) {
    const CompletedPart& got = (*parsed)[i];
    const PartXml& sent = parts[i % parts.size()];
    if (got.part_number != numbers[i % numbers.size()]) fail("a PartNumber read wrong");
    if (got.etag != unquoted(sent.etag)) fail("an ETag read wrong");
    if (got.checksums != sent.checksums) fail("a part's checksums read wrong");
  }
  ++g_built_ok[kComplete];
}

void builtCreateBucket(Reader& r) {
  const XmlStyle style = styleFrom(r.byte());
  const uint8_t mode = r.byte() % 5;
  const std::string location = textValue(r, 24);
  std::string body;
  std::string expected;  // the location the parser must read
  bool refuse = false;   // MalformedXML instead
  switch (mode) {
    case 0:  // an empty body, or whitespace only: no configuration
      for (char c : location) body.push_back(" \t\r\n"[static_cast<unsigned char>(c) % 4]);
      break;
    case 1:  // no LocationConstraint
      body = createBucketXml(std::nullopt, false, style);
      break;
    case 2:
      body = createBucketXml(location, false, style);
      expected = location;
      break;
    case 3:  // a directory bucket's configuration as well
      body = createBucketXml(location, true, style);
      expected = location;
      break;
    default:  // another root element
      body = createBucketXml(location, false, style, "CreateBucketConfig");
      refuse = true;
      break;
  }
  S3Result<std::string> parsed = parseCreateBucketConfiguration(body);
  if (refuse) {
    if (parsed) fail("CreateBucketConfiguration accepted another root element");
    expectMalformed(parsed.error());
    ++g_built_refused[kCreateBucket];
    return;
  }
  if (!parsed) fail("CreateBucketConfiguration refuses a valid body");
  if (*parsed != expected) fail("CreateBucketConfiguration read another location");
  ++g_built_ok[kCreateBucket];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  g_input = in;
  // The round trips write in a style picked by the last byte.
  const XmlStyle style = styleFrom(size > 0 ? data[size - 1] : 0);
  rawDelete(in, style);
  rawComplete(in, style);
  rawCreateBucket(in, style);
  rawTagging(in);
  rawCors(in);
  rawLifecycle(in);

  Reader r(in);
  builtDelete(r);
  builtComplete(r);
  builtCreateBucket(r);
  return 0;
}

// Called by replay_main.cc after a replay (libFuzzer never calls it): fails unless every
// parser accepted some input as given (so the round trips ran), and both accepted and
// refused some of the bodies built here.
extern "C" int GranaryFuzzSelfCheck() {
  int failed = 0;
  for (size_t p = 0; p < kParsers; ++p) {
    std::printf("%s: %llu inputs accepted; built bodies: %llu read back, %llu refused\n",
                kParserNames[p], static_cast<unsigned long long>(g_raw_ok[p]),
                static_cast<unsigned long long>(g_built_ok[p]),
                static_cast<unsigned long long>(g_built_refused[p]));
    if (g_raw_ok[p] == 0 || g_built_ok[p] == 0 || g_built_refused[p] == 0) failed = 1;
  }
  std::printf("bodies built at a count limit: %llu\n", static_cast<unsigned long long>(g_at_limit));
  std::printf("CORS configurations accepted: %llu\n", static_cast<unsigned long long>(g_cors_ok));
  if (g_cors_ok == 0) failed = 1;
  std::printf("lifecycle configurations accepted: %llu\n",
              static_cast<unsigned long long>(g_lifecycle_ok));
  if (g_lifecycle_ok == 0) failed = 1;
  return failed;
}

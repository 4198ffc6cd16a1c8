#include "s3_xml.h"

#include <fmt/format.h>
#include <pugixml.hpp>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <ctime>
#include <set>

#include "granary/common/strings.h"
#include "http_text.h"
#include "sigv4.h"
#include "time_format.h"
#include "uri.h"

namespace granary::gateway {

namespace {

// <who><ID>id</ID><DisplayName>id</DisplayName></who>: an owner, initiator or grantee.
void identity(XmlWriter& x, std::string_view who, std::string_view id) {
  x.open(who).element("ID", id).element("DisplayName", id).close();
}

// The one MalformedXML answer for every request body the gateway parses.
std::unexpected<S3Error> malformedXml() {
  return s3fail(S3ErrorCode::kMalformedXML,
                "The XML you provided was not well-formed or did not validate against our "
                "published schema");
}

// A NUL in the body, raw or as a character reference (&#0;, &#x00;), or a reference past
// U+10FFFF: none is an XML character, and pugixml would end the value at the NUL
// (<Prefix>&#0;tmp/</Prefix> would read as the empty prefix, a lifecycle rule over the
// whole bucket). It adds a reference's digits up in 32 bits, so &#x100000000; is a NUL
// too: the value is kept here in 64 bits, capped.
bool holdsNul(std::string_view body) {
  if (body.find('\0') != std::string_view::npos) return true;
  for (size_t at = body.find("&#"); at != std::string_view::npos; at = body.find("&#", at + 2)) {
    size_t i = at + 2;
    const bool hex = i < body.size() && (body[i] == 'x' || body[i] == 'X');
    if (hex) ++i;
    uint64_t value = 0;
    size_t digits = 0;
    for (; i < body.size(); ++i, ++digits) {
      const char c = body[i];
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (hex && c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (hex && c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) break;
      value = std::min<uint64_t>(value * (hex ? 16 : 10) + d, uint64_t{1} << 32);
    }
    if (digits > 0 && i < body.size() && body[i] == ';' && (value == 0 || value > 0x10FFFF)) {
      return true;
    }
  }
  return false;
}

// The elements the parsers below read as values (their text), in every body they parse.
bool isValueElement(std::string_view name) {
  static const std::set<std::string_view> names = {
      "AllowedHeader", "AllowedMethod", "AllowedOrigin", "Date", "DaysAfterInitiation", "Days",
      "ETag", "ExpiredObjectDeleteMarker", "ExposeHeader", "ID", "Key", "LocationConstraint",
      "MaxAgeSeconds", "MfaDelete", "NewerNoncurrentVersions", "NoncurrentDays",
      "ObjectSizeGreaterThan", "ObjectSizeLessThan", "PartNumber", "Permission", "Prefix",
      "Quiet", "Status", "URI", "Value", "VersionId"};
  return names.contains(name) || name.starts_with("Checksum");
}

// Whether every element holds either elements or one text value, never text in pieces
// (split by a comment, a processing instruction or CDATA) nor text beside elements, and
// whether every value element holds no element: the parsers read a value as its
// element's first piece of text, so <Prefix>logs<!---->/old/</Prefix> would read as
// "logs" and <Prefix><Value>tmp/</Value></Prefix> as "", rules wider than written. S3's
// schemas have no mixed content.
bool valuesAreWhole(pugi::xml_document& doc) {
  struct Walker : pugi::xml_tree_walker {
    bool ok = true;
    bool for_each(pugi::xml_node& node) override {
      if (node.type() != pugi::node_element) return true;
      int texts = 0;
      int elements = 0;
      for (pugi::xml_node c : node.children()) {
        if (c.type() == pugi::node_pcdata || c.type() == pugi::node_cdata) ++texts;
        if (c.type() == pugi::node_element) ++elements;
      }
      ok = texts <= 1 && (texts == 0 || elements == 0) &&
           (elements == 0 || !isValueElement(node.name()));
      return ok;
    }
  } walker;
  doc.traverse(walker);
  return walker.ok;
}

// Whether an element of `node` is named twice: the parsers below take the first, so a
// second Filter, Prefix, Days or tag Key would otherwise be dropped unseen (S3: MalformedXML).
bool repeatsAChild(pugi::xml_node node) {
  std::set<std::string_view> seen;
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_element && !seen.insert(child.name()).second) return true;
  }
  return false;
}

// Whether `node` has more than one child element named `name`.
bool repeated(pugi::xml_node node, const char* name) {
  auto children = node.children(name);
  auto it = children.begin();
  return it != children.end() && ++it != children.end();
}

// Parses `body` into `doc` and returns its root element named `name`, or MalformedXML.
// `max_tags` bounds the '<' of the body (tags, comments...): pugixml's tree costs some 64
// bytes a node, so a 2 MiB body of "<a/>" would take 30 MiB and more to parse. A document
// type declaration is refused (S3 takes none).
S3Result<pugi::xml_node> parseRoot(pugi::xml_document& doc, std::string_view body,
                                   const char* name, size_t max_tags = SIZE_MAX) {
  // parse_ws_pcdata_single keeps a value that is only whitespace (<Key> </Key> names the
  // key " ", not "").
  constexpr unsigned kFlags =
      pugi::parse_default | pugi::parse_ws_pcdata_single | pugi::parse_doctype;
  if (holdsNul(body) || static_cast<size_t>(std::count(body.begin(), body.end(), '<')) > max_tags ||
      !doc.load_buffer(body.data(), body.size(), kFlags, pugi::encoding_utf8) ||
      !valuesAreWhole(doc)) {
    return malformedXml();
  }
  for (pugi::xml_node top : doc.children()) {
    if (top.type() == pugi::node_doctype) return malformedXml();
  }
  pugi::xml_node node = doc.child(name);
  if (!node) return malformedXml();
  return node;
}

}  // namespace

const std::string& hostId() {
  static const std::string id = [] {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "granary");
    return sha256Hex(name);
  }();
  return id;
}

std::string errorXml(const S3Error& error, std::string_view resource,
                     std::string_view request_id) {
  XmlWriter x("Error", /*s3_namespace=*/false);
  x.element("Code", errorName(error.code)).element("Message", error.message);
  for (const auto& [name, text] : error.details) x.element(name, text);
  x.element("Resource", resource)
      .element("RequestId", request_id)
      .element("HostId", hostId());
  return std::move(x).finish();
}

std::string listBucketsXml(const ListBucketsPage& page) {
  XmlWriter x("ListAllMyBucketsResult", true, 256 + page.buckets.size() * 160);
  identity(x, "Owner", page.owner_id);
  x.open("Buckets");
  for (const auto& b : page.buckets) {
    x.open("Bucket")
        .element("Name", b.name)
        .element("CreationDate", IsoTimestamp(b.created_unix_nanos).view())
        .element("BucketRegion", page.region)
        .close();
  }
  x.close();
  if (!page.continuation_token.empty()) {
    x.element("ContinuationToken", page.continuation_token);
  }
  if (!page.prefix.empty()) x.element("Prefix", page.prefix);
  return std::move(x).finish();
}

namespace {

// Keys, prefixes and markers as a listing writes them: as they are, or URI-encoded for
// encoding-type=url. The view lasts until the next call (the writer copies it at once).
class KeyText {
 public:
  explicit KeyText(bool url_encode) : url_encode_(url_encode) {}
  std::string_view operator()(std::string_view s) {
    if (!url_encode_) return s;
    encoded_ = uriEncode(s, /*encode_slash=*/false);
    return encoded_;
  }

 private:
  bool url_encode_;
  std::string encoded_;
};

}  // namespace

std::string listObjectsXml(const ListObjectsParams& p, const index_kv::ListResult& result) {
  KeyText enc{p.url_encode};
  const bool versions = p.kind == ListKind::kVersions;
  // About 250 bytes a key with its owner, 60 a common prefix.
  XmlWriter x(versions ? "ListVersionsResult" : "ListBucketResult", true,
              1024 + result.objects.size() * 320 + result.common_prefixes.size() * 64);
  x.element("Name", p.bucket).element("Prefix", enc(p.prefix));
  switch (p.kind) {
    case ListKind::kV1:
      x.element("Marker", enc(p.marker));
      // Only with a delimiter, as S3: without one a client resumes after the last Key.
      if (result.truncated && !p.next_token.empty() && !p.delimiter.empty()) {
        x.element("NextMarker", enc(p.next_token));
      }
      break;
    case ListKind::kV2:
      if (!p.marker.empty()) x.element("StartAfter", enc(p.marker));
      if (!p.continuation_token.empty()) x.element("ContinuationToken", p.continuation_token);
      if (result.truncated) x.element("NextContinuationToken", p.next_token);
      x.element("KeyCount", uint64_t{result.objects.size() + result.common_prefixes.size()});
      break;
    case ListKind::kVersions:
      x.element("KeyMarker", enc(p.marker)).element("VersionIdMarker", p.version_id_marker);
      if (result.truncated) {
        x.element("NextKeyMarker", enc(p.next_token)).element("NextVersionIdMarker", "null");
      }
      break;
  }
  x.element("MaxKeys", uint64_t{p.max_keys});
  if (!p.delimiter.empty()) x.element("Delimiter", enc(p.delimiter));
  if (p.url_encode) x.element("EncodingType", "url");
  x.element("IsTruncated", result.truncated ? "true" : "false");
  for (const auto& o : result.objects) {
    x.open(versions ? "Version" : "Contents").element("Key", enc(o.key));
    if (versions) x.element("VersionId", "null").element("IsLatest", "true");
    x.element("LastModified", IsoTimestamp(o.mtime_unix_nanos).view())
        .quotedElement("ETag", o.etag)
        .element("Size", uint64_t{o.size})
        .element("StorageClass", "STANDARD");
    if (p.fetch_owner || p.kind != ListKind::kV2) identity(x, "Owner", p.owner_id);
    x.close();
  }
  for (const auto& prefix : result.common_prefixes) {
    x.open("CommonPrefixes").element("Prefix", enc(prefix)).close();
  }
  return std::move(x).finish();
}

std::string copyObjectResultXml(std::string_view etag, int64_t mtime_unix_nanos,
                                const index_kv::ObjectChecksum& checksum) {
  XmlWriter x("CopyObjectResult");
  x.element("LastModified", IsoTimestamp(mtime_unix_nanos).view()).quotedElement("ETag", etag);
  if (!checksum.empty()) {
    x.element("ChecksumType", checksum.type)
        .element("Checksum" + checksum.algorithm, checksum.value);
  }
  return std::move(x).finish();
}

std::string copyPartResultXml(std::string_view etag, int64_t mtime_unix_nanos,
                              const index_kv::ObjectChecksum& checksum) {
  XmlWriter x("CopyPartResult");
  x.element("LastModified", IsoTimestamp(mtime_unix_nanos).view()).quotedElement("ETag", etag);
  if (!checksum.empty()) x.element("Checksum" + checksum.algorithm, checksum.value);
  return std::move(x).finish();
}

namespace {

size_t utf8Characters(std::string_view s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool allowedTagText(std::string_view s) {
  // Strict: tags are checked only when written, and go back in XML and JSON.
  if (!strictUtf8(s)) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x80 || std::isalnum(c) || std::string_view(" _.:/=+-@").find(ch) !=
                                                   std::string_view::npos;
  });
}

// One more tag into `tags`, or the error S3 answers with.
S3Result<void> addTag(TagSet& tags, std::string key, std::string value,
                      S3ErrorCode repeated_key, size_t max_tags = kMaxObjectTags) {
  if (key.empty() || !allowedTagText(key)) {
    return s3fail(S3ErrorCode::kInvalidTag, "The TagKey you have provided is invalid");
  }
  if (!allowedTagText(value)) {
    return s3fail(S3ErrorCode::kInvalidTag, "The TagValue you have provided is invalid");
  }
  if (utf8Characters(key) > 128) {
    return s3fail(S3ErrorCode::kInvalidTag, "The TagKey you have provided is too long, max 128");
  }
  if (utf8Characters(value) > 256) {
    return s3fail(S3ErrorCode::kInvalidTag,
                  "The TagValue you have provided is too long, max 256");
  }
  if (asciiIEquals(std::string_view(key).substr(0, 4), "aws:")) {
    return s3fail(S3ErrorCode::kInvalidTag, "Your TagKey cannot be prefixed with aws:");
  }
  if (!tags.emplace(std::move(key), std::move(value)).second) {
    return s3fail(repeated_key, "Cannot provide multiple Tags with the same key");
  }
  if (tags.size() > max_tags) {
    return s3fail(S3ErrorCode::kInvalidTag,
                  max_tags == kMaxObjectTags
                      ? std::string("Object tags cannot be greater than 10")
                      : fmt::format("Bucket tag count cannot be greater than {}", max_tags));
  }
  return {};
}

}  // namespace

S3Result<TagSet> parseTagging(std::string_view body, size_t max_tags) {
  pugi::xml_document doc;
  auto root = parseRoot(doc, body, "Tagging");
  if (!root) return std::unexpected(root.error());
  pugi::xml_node set = root->child("TagSet");
  if (!set) return malformedXml();
  TagSet tags;
  for (pugi::xml_node tag : set.children("Tag")) {
    pugi::xml_node key = tag.child("Key");
    pugi::xml_node value = tag.child("Value");
    if (!key || !value || repeatsAChild(tag)) return malformedXml();
    auto added = addTag(tags, key.text().as_string(), value.text().as_string(),
                        S3ErrorCode::kInvalidTag, max_tags);
    if (!added) return std::unexpected(added.error());
  }
  return tags;
}

S3Result<TagSet> parseTaggingHeader(std::string_view value) {
  TagSet tags;
  for (const auto& [raw_key, raw_value] : parseQueryRaw(value)) {
    auto key = percentDecode(raw_key, true);
    auto val = percentDecode(raw_value, true);
    if (!key || !val) {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL "
                    "query parameters without tag name duplicates.");
    }
    auto added = addTag(tags, std::move(*key), std::move(*val), S3ErrorCode::kInvalidArgument);
    if (!added) return std::unexpected(added.error());
  }
  return tags;
}

std::string taggingXml(const TagSet& tags) {
  XmlWriter x("Tagging");
  x.open("TagSet");
  for (const auto& [key, value] : tags) {
    x.open("Tag").element("Key", key).element("Value", value).close();
  }
  x.close();
  return std::move(x).finish();
}

std::string objectAttributesXml(const ObjectAttributesRequest& want,
                                const index_kv::Manifest& m) {
  XmlWriter x("GetObjectAttributesResponse");
  if (want.etag) x.element("ETag", m.etag);
  if (want.checksum && !m.checksum.empty()) {
    x.open("Checksum")
        .element("Checksum" + m.checksum.algorithm, m.checksum.value)
        .element("ChecksumType", m.checksum.type.empty() ? "FULL_OBJECT" : m.checksum.type)
        .close();
  }
  // A multipart object's ETag ends in "-<parts>": its part count (the parts themselves
  // are not kept apart once completed).
  if (size_t dash = m.etag.rfind('-'); want.object_parts && dash != std::string::npos) {
    x.open("ObjectParts").element("PartsCount", m.etag.substr(dash + 1)).close();
  }
  if (want.storage_class) x.element("StorageClass", "STANDARD");
  if (want.object_size) x.element("ObjectSize", uint64_t{m.size});
  return std::move(x).finish();
}

std::string locationXml(std::string_view region) {
  XmlWriter x("LocationConstraint");
  // us-east-1 is reported as an empty constraint, as AWS does.
  if (region != "us-east-1") x.text(region);
  return std::move(x).finish();
}

S3Result<bool> parseVersioningSuspended(std::string_view body) {
  pugi::xml_document doc;
  auto root = parseRoot(doc, body, "VersioningConfiguration");
  if (!root) return std::unexpected(root.error());
  int status_seen = 0, mfa_seen = 0;  // each at most once
  for (pugi::xml_node child : root->children()) {
    const std::string_view name = child.name();
    if (child.type() != pugi::node_element) return malformedXml();
    if (name == "Status") {
      ++status_seen;
    } else if (name == "MfaDelete") {
      ++mfa_seen;
    } else {
      return malformedXml();
    }
  }
  if (status_seen > 1 || mfa_seen > 1) return malformedXml();
  const std::string_view mfa = root->child("MfaDelete").text().as_string();
  if (root->child("MfaDelete") && mfa != "Disabled") {
    if (mfa != "Enabled") return malformedXml();
    return s3fail(S3ErrorCode::kNotImplemented, "MFA delete is not implemented");
  }
  const std::string_view status = root->child("Status").text().as_string();
  if (status == "Suspended") return true;
  if (status == "Enabled") {
    return s3fail(S3ErrorCode::kNotImplemented,
                  "Versioning cannot be enabled: Granary keeps one version of each object "
                  "(Suspended is accepted: every object is its version \"null\")");
  }
  return malformedXml();
}

std::string versioningXml(bool suspended) {
  XmlWriter x("VersioningConfiguration");
  if (suspended) x.element("Status", "Suspended");
  return std::move(x).finish();
}

std::string postResponseXml(std::string_view location, std::string_view bucket,
                            std::string_view key, std::string_view quoted_etag) {
  XmlWriter x("PostResponse", /*s3_namespace=*/false);
  x.element("Location", location).element("Bucket", bucket).element("Key", key);
  x.element("ETag", quoted_etag);
  return std::move(x).finish();
}

S3Result<std::string> parseCreateBucketConfiguration(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::string();
  pugi::xml_document doc;
  auto cfg = parseRoot(doc, body, "CreateBucketConfiguration");
  if (!cfg) return std::unexpected(cfg.error());
  return std::string(cfg->child("LocationConstraint").text().as_string());
}

S3Result<DeleteObjectsRequest> parseDeleteObjects(std::string_view body) {
  pugi::xml_document doc;
  auto root = parseRoot(doc, body, "Delete", kMaxDeleteBodyTags);
  if (!root) return std::unexpected(root.error());
  pugi::xml_node del = *root;
  DeleteObjectsRequest out;
  if (repeated(del, "Quiet")) return malformedXml();
  // xs:boolean, as S3 reads it.
  const std::string_view quiet = trimWhitespace(del.child("Quiet").text().as_string());
  if (quiet == "true" || quiet == "True" || quiet == "1") {
    out.quiet = true;
  } else if (!(quiet.empty() || quiet == "false" || quiet == "False" || quiet == "0")) {
    return malformedXml();
  }
  for (auto obj : del.children("Object")) {
    auto key = obj.child("Key");
    if (!key || repeatsAChild(obj)) return malformedXml();
    ObjectIdentifier id{key.text().as_string(), std::nullopt, std::nullopt};
    if (auto version = obj.child("VersionId")) id.version_id = version.text().as_string();
    if (auto etag = obj.child("ETag")) id.etag = etag.text().as_string();
    out.objects.push_back(std::move(id));
    if (out.objects.size() > kMaxDeleteObjects) return malformedXml();
  }
  if (out.objects.empty()) return malformedXml();
  return out;
}

std::string deleteResultXml(const std::vector<DeleteOutcome>& outcomes, bool quiet) {
  XmlWriter x("DeleteResult", true, 256 + outcomes.size() * 64);
  for (const auto& o : outcomes) {
    if (!o.error) {
      if (quiet) continue;
      x.open("Deleted").element("Key", o.key);
      if (o.version_id) x.element("VersionId", *o.version_id);
      x.close();
      continue;
    }
    x.open("Error").element("Key", o.key);
    if (o.version_id) x.element("VersionId", *o.version_id);
    x.element("Code", errorName(o.error->code))
        .element("Message", o.error->message)
        .close();
  }
  return std::move(x).finish();
}

std::string initiateMultipartUploadXml(std::string_view bucket, std::string_view key,
                                       std::string_view upload_id) {
  XmlWriter x("InitiateMultipartUploadResult");
  x.element("Bucket", bucket).element("Key", key).element("UploadId", upload_id);
  return std::move(x).finish();
}

S3Result<std::vector<CompletedPart>> parseCompleteMultipartUpload(std::string_view body) {
  pugi::xml_document doc;
  auto root = parseRoot(doc, body, "CompleteMultipartUpload", kMaxCompleteBodyTags);
  if (!root) return std::unexpected(root.error());
  pugi::xml_node complete = *root;
  std::vector<CompletedPart> parts;
  for (auto part : complete.children("Part")) {
    auto number = part.child("PartNumber");
    auto etag = part.child("ETag");
    if (!number || !etag || repeatsAChild(part)) return malformedXml();
    std::string n = number.text().as_string();
    CompletedPart p;
    auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), p.part_number);
    if (n.empty() || ec != std::errc() || ptr != n.data() + n.size()) return malformedXml();
    p.etag = etag.text().as_string();
    if (p.etag.size() >= 2 && p.etag.front() == '"' && p.etag.back() == '"') {
      p.etag = p.etag.substr(1, p.etag.size() - 2);
    }
    for (auto child : part.children()) {
      std::string_view name = child.name();
      if (name.starts_with("Checksum") && name != "ChecksumType" && name.size() > 8) {
        p.checksums[std::string(name.substr(8))] = child.text().as_string();
      }
    }
    parts.push_back(std::move(p));
    if (parts.size() > kMaxParts) return malformedXml();
  }
  if (parts.empty()) return malformedXml();
  return parts;
}

std::string completeMultipartUploadXml(std::string_view location, std::string_view bucket,
                                       std::string_view key, std::string_view etag,
                                       const index_kv::ObjectChecksum& checksum) {
  XmlWriter x("CompleteMultipartUploadResult");
  x.element("Location", location)
      .element("Bucket", bucket)
      .element("Key", key)
      .quotedElement("ETag", etag);
  if (!checksum.empty()) {
    x.element("Checksum" + checksum.algorithm, checksum.value)
        .element("ChecksumType", checksum.type);
  }
  return std::move(x).finish();
}

std::string listPartsXml(const ListPartsParams& p, const std::vector<index_kv::PartInfo>& parts) {
  XmlWriter x("ListPartsResult", true, 1024 + parts.size() * 200);
  x.element("Bucket", p.bucket).element("Key", p.key).element("UploadId", p.upload_id);
  for (const char* who : {"Initiator", "Owner"}) identity(x, who, p.owner_id);
  x.element("StorageClass", "STANDARD")
      .element("PartNumberMarker", uint64_t{p.part_number_marker});
  if (!parts.empty()) {
    x.element("NextPartNumberMarker", uint64_t{parts.back().part_number});
  }
  x.element("MaxParts", uint64_t{p.max_parts})
      .element("IsTruncated", p.truncated ? "true" : "false");
  if (!p.checksum_algorithm.empty()) x.element("ChecksumAlgorithm", p.checksum_algorithm);
  if (!p.checksum_type.empty()) x.element("ChecksumType", p.checksum_type);
  for (const auto& part : parts) {
    x.open("Part")
        .element("PartNumber", uint64_t{part.part_number})
        .element("LastModified", IsoTimestamp(part.mtime_unix_nanos).view())
        .quotedElement("ETag", part.etag)
        .element("Size", uint64_t{part.size});
    if (!part.checksum.empty()) {
      x.element("Checksum" + part.checksum.algorithm, part.checksum.value);
    }
    x.close();
  }
  return std::move(x).finish();
}

std::string listMultipartUploadsXml(const ListUploadsParams& p, const UploadsPage& page) {
  KeyText enc{p.url_encode};
  XmlWriter x("ListMultipartUploadsResult", true,
              1024 + page.uploads.size() * 400 + page.common_prefixes.size() * 64);
  x.element("Bucket", p.bucket)
      .element("KeyMarker", enc(p.key_marker))
      .element("UploadIdMarker", p.upload_id_marker);
  if (page.truncated) {
    x.element("NextKeyMarker", enc(page.next_key_marker))
        .element("NextUploadIdMarker", page.next_upload_id_marker);
  }
  x.element("Prefix", enc(p.prefix));
  if (!p.delimiter.empty()) x.element("Delimiter", enc(p.delimiter));
  x.element("MaxUploads", uint64_t{p.max_uploads});
  if (p.url_encode) x.element("EncodingType", "url");
  x.element("IsTruncated", page.truncated ? "true" : "false");
  for (const auto& u : page.uploads) {
    x.open("Upload").element("Key", enc(u.key)).element("UploadId", u.upload_id);
    for (const char* who : {"Initiator", "Owner"}) identity(x, who, u.owner);
    x.element("StorageClass", "STANDARD")
        .element("Initiated", IsoTimestamp(u.initiated_unix_nanos).view());
    if (!u.checksum_algorithm.empty()) x.element("ChecksumAlgorithm", u.checksum_algorithm);
    if (!u.checksum_type.empty()) x.element("ChecksumType", u.checksum_type);
    x.close();
  }
  for (const auto& prefix : page.common_prefixes) {
    x.open("CommonPrefixes").element("Prefix", enc(prefix)).close();
  }
  return std::move(x).finish();
}

// ---- bucket configuration ------------------------------------------------------------

namespace {

constexpr const char* kAllUsersUri = "http://acs.amazonaws.com/groups/global/AllUsers";

std::unexpected<S3Error> notImplemented(std::string message) {
  return s3fail(S3ErrorCode::kNotImplemented, std::move(message));
}

std::unexpected<S3Error> invalidArgument(std::string message) {
  return s3fail(S3ErrorCode::kInvalidArgument, std::move(message));
}

// A positive decimal count of days, at most 100,000 (so that days in nanoseconds cannot
// overflow int64).
std::optional<int64_t> parseDays(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v <= 0 || v > 100'000) {
    return std::nullopt;
  }
  return v;
}

// "2026-01-01T00:00:00Z" or "...00.000Z" (S3 requires midnight UTC): Unix seconds.
std::optional<int64_t> parseMidnightDate(std::string_view s) {
  if (!s.empty() && s.back() == 'Z') s.remove_suffix(1);
  if (s.ends_with(".000")) s.remove_suffix(4);
  if (s.size() == 10) {
    // A bare date is accepted too.
  } else if (s.size() != 19 || s.substr(10) != "T00:00:00") {
    return std::nullopt;
  }
  int y = 0, m = 0, d = 0;
  auto num = [&](size_t pos, size_t len, int& out) {
    auto [end, ec] = std::from_chars(s.data() + pos, s.data() + pos + len, out);
    return ec == std::errc() && end == s.data() + pos + len;
  };
  if (!num(0, 4, y) || s[4] != '-' || !num(5, 2, m) || s[7] != '-' || !num(8, 2, d)) {
    return std::nullopt;
  }
  if (y < 1970 || m < 1 || m > 12 || d < 1 || d > 31) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  std::tm check = tm;
  const time_t t = timegm(&check);
  if (check.tm_mday != d) return std::nullopt;  // 31 February and friends
  return static_cast<int64_t>(t);
}

std::string midnightDate(int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT00:00:00.000Z", &tm);
  return buf;
}

// One condition of a lifecycle rule's Filter (or of its And) into `rule`.
S3Result<void> addLifecycleFilter(index_kv::LifecycleRule& rule, pugi::xml_node f) {
  const std::string_view name = f.name();
  const std::string text = f.text().as_string();
  if (name == "Prefix") {
    rule.prefix = text;
    return {};
  }
  const auto invalidRequest = [](std::string message) {
    return s3fail(S3ErrorCode::kInvalidRequest, std::move(message));
  };
  if (name == "Tag") {
    if (!f.child("Key") || !f.child("Value") || repeatsAChild(f)) return malformedXml();
    auto added = addTag(rule.tags, f.child("Key").text().as_string(),
                        f.child("Value").text().as_string(), S3ErrorCode::kInvalidArgument,
                        kMaxLifecycleFilterTags);
    if (!added) return std::unexpected(added.error());
    return {};
  }
  if (name == "ObjectSizeGreaterThan" || name == "ObjectSizeLessThan") {
    const auto v = parseDecimalU64(text);
    // S3: sizes up to 5 TB; a "less than" of 0 would match nothing.
    constexpr uint64_t kMaxSize = 5'000'000'000'000;
    const uint64_t least = name == "ObjectSizeLessThan" ? 1 : 0;
    if (!v || *v < least || *v > kMaxSize) {
      return invalidRequest(fmt::format("'{}' should be between {} and 5 TB", name, least));
    }
    (name == "ObjectSizeGreaterThan" ? rule.size_greater_than : rule.size_less_than) = *v;
    return {};
  }
  return malformedXml();
}

S3Result<index_kv::LifecycleRule> parseLifecycleRule(pugi::xml_node node) {
  index_kv::LifecycleRule rule;
  for (pugi::xml_node child : node.children()) {
    if (child.type() != pugi::node_element) continue;
    const std::string_view name = child.name();
    if (name == "ID" || name == "Status" || name == "Prefix" || name == "Filter" ||
        name == "Expiration" || name == "AbortIncompleteMultipartUpload" ||
        name == "NoncurrentVersionExpiration") {
      continue;
    }
    if (name == "Transition" || name == "NoncurrentVersionTransition") {
      return notImplemented(std::string("Lifecycle action ") + child.name() +
                            " is not implemented (no storage classes)");
    }
    return malformedXml();
  }
  // A rule and each action hold every element once (a Filter's And holds several Tags).
  if (repeatsAChild(node)) return malformedXml();
  for (const char* action : {"Expiration", "AbortIncompleteMultipartUpload",
                             "NoncurrentVersionExpiration"}) {
    if (repeatsAChild(node.child(action))) return malformedXml();
  }
  rule.id = node.child("ID").text().as_string();
  if (utf8Characters(rule.id) > 255) {
    return invalidArgument("ID length should not exceed allowed limit of 255");
  }
  const std::string status = node.child("Status").text().as_string();
  if (status != "Enabled" && status != "Disabled") return malformedXml();
  rule.enabled = status == "Enabled";
  if (pugi::xml_node filter = node.child("Filter")) {
    if (node.child("Prefix")) return malformedXml();  // one or the other
    // One of Prefix, Tag, ObjectSizeGreaterThan, ObjectSizeLessThan, or And holding
    // several of them.
    pugi::xml_node only;
    for (pugi::xml_node f : filter.children()) {
      if (f.type() != pugi::node_element) continue;
      if (only) return malformedXml();
      only = f;
    }
    // Text where an element belongs (<Filter>logs/</Filter>) is no condition: refused,
    // never taken for "every object".
    const auto stray_text = [](pugi::xml_node n) {
      for (pugi::xml_node c : n.children()) {
        if (c.type() == pugi::node_pcdata || c.type() == pugi::node_cdata) {
          const std::string_view t = c.value();
          if (t.find_first_not_of(" \t\r\n") != std::string_view::npos) return true;
        }
      }
      return false;
    };
    if (stray_text(filter)) return malformedXml();
    if (only && std::string_view(only.name()) == "And") {
      if (stray_text(only)) return malformedXml();
      std::set<std::string_view> seen;
      for (pugi::xml_node f : only.children()) {
        if (f.type() != pugi::node_element) continue;
        const std::string_view n = f.name();
        // Each condition once (tags apart): a second Prefix must not widen the first.
        if (n == "And" || (!seen.insert(n).second && n != "Tag")) return malformedXml();
        if (auto added = addLifecycleFilter(rule, f); !added) {
          return std::unexpected(added.error());
        }
      }
      if (seen.empty()) return malformedXml();  // an empty And
    } else if (only) {
      if (auto added = addLifecycleFilter(rule, only); !added) {
        return std::unexpected(added.error());
      }
    }
    if (rule.size_greater_than && rule.size_less_than &&
        *rule.size_greater_than >= *rule.size_less_than) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "ObjectSizeGreaterThan must be less than ObjectSizeLessThan");
    }
  } else if (pugi::xml_node prefix = node.child("Prefix")) {
    rule.prefix = prefix.text().as_string();
  } else {
    return malformedXml();  // neither Filter nor Prefix: as S3, not the whole bucket
  }
  if (pugi::xml_node exp = node.child("Expiration")) {
    const bool has_days = exp.child("Days");
    const bool has_date = exp.child("Date");
    if (pugi::xml_node marker = exp.child("ExpiredObjectDeleteMarker")) {
      // Alone in its Expiration, and never with a tag filter (as S3 requires).
      const std::string_view v = marker.text().as_string();
      if (v != "true" && v != "false") return malformedXml();
      if (has_days || has_date) {
        return invalidArgument("ExpiredObjectDeleteMarker cannot be specified with Days or Date "
                               "in a Lifecycle Expiration Policy");
      }
      if (!rule.tags.empty()) {
        return invalidArgument("Tag-based filters cannot be used with ExpiredObjectDeleteMarker");
      }
      rule.expired_object_delete_marker = v == "true";
    } else if (has_days == has_date) {
      return malformedXml();
    } else if (has_days) {
      rule.expiration_days = parseDays(exp.child("Days").text().as_string());
      if (!rule.expiration_days) {
        return invalidArgument("'Days' for Expiration action must be a positive integer");
      }
    } else {
      rule.expiration_date_unix = parseMidnightDate(exp.child("Date").text().as_string());
      if (!rule.expiration_date_unix) {
        return invalidArgument("'Date' must be at midnight GMT");
      }
    }
  }
  if (pugi::xml_node abort = node.child("AbortIncompleteMultipartUpload")) {
    rule.abort_incomplete_days = parseDays(abort.child("DaysAfterInitiation").text().as_string());
    if (!rule.abort_incomplete_days) {
      return invalidArgument("'DaysAfterInitiation' for AbortIncompleteMultipartUpload action "
                             "must be a positive integer");
    }
  }
  if (pugi::xml_node noncurrent = node.child("NoncurrentVersionExpiration")) {
    rule.noncurrent_days = parseDays(noncurrent.child("NoncurrentDays").text().as_string());
    if (!rule.noncurrent_days) {
      return invalidArgument("'NoncurrentDays' for NoncurrentVersionExpiration action must be a "
                             "positive integer");
    }
    if (pugi::xml_node newer = noncurrent.child("NewerNoncurrentVersions")) {
      rule.newer_noncurrent_versions = parseDays(newer.text().as_string());
      if (!rule.newer_noncurrent_versions || *rule.newer_noncurrent_versions > 100) {
        return invalidArgument("'NewerNoncurrentVersions' must be between 1 and 100");
      }
    }
  }
  if (!rule.expiration_days && !rule.expiration_date_unix && !rule.abort_incomplete_days &&
      !rule.noncurrent_days && !rule.expired_object_delete_marker) {
    return invalidArgument("At least one action needs to be specified in a rule");
  }
  if (rule.abort_incomplete_days &&
      (!rule.tags.empty() || rule.size_greater_than || rule.size_less_than)) {
    return s3fail(S3ErrorCode::kInvalidRequest,
                  rule.tags.empty()
                      ? "AbortIncompleteMultipartUpload cannot be specified with Object Size."
                      : "AbortIncompleteMultipartUpload cannot be specified with Tags.");
  }
  return rule;
}

S3Result<index_kv::CorsRule> parseCorsRule(pugi::xml_node node) {
  index_kv::CorsRule rule;
  for (pugi::xml_node child : node.children()) {
    if (child.type() != pugi::node_element) continue;
    const std::string_view name = child.name();
    // Without the whitespace around it that pretty-printed XML leaves: an origin, method or
    // header name is compared with a request's, and an ExposeHeader is sent back.
    const std::string value(trimWhitespace(child.text().as_string()));
    const auto oneWildcard = [&](std::string_view what) -> S3Result<void> {
      if (std::count(value.begin(), value.end(), '*') > 1) {
        return s3fail(S3ErrorCode::kInvalidRequest,
                      fmt::format("{} \"{}\" can not have more than one wildcard.", what, value));
      }
      return {};
    };
    if ((name == "ID" || name == "MaxAgeSeconds") && repeated(node, child.name())) {
      return malformedXml();
    }
    if (name == "ID") {
      if (utf8Characters(value) > 255) {
        return s3fail(S3ErrorCode::kInvalidRequest, "The ID of a CORS rule is too long");
      }
      rule.id = value;
    } else if (name == "AllowedOrigin") {
      if (value.empty()) return malformedXml();
      if (auto ok = oneWildcard(name); !ok) return std::unexpected(ok.error());
      rule.allowed_origins.push_back(value);
    } else if (name == "AllowedMethod") {
      if (!isCorsMethod(value)) {
        return s3fail(S3ErrorCode::kInvalidRequest,
                      "Found unsupported HTTP method in CORS config. Unsupported method is " +
                          value);
      }
      rule.allowed_methods.push_back(value);
    } else if (name == "AllowedHeader") {
      if (auto ok = oneWildcard(name); !ok) return std::unexpected(ok.error());
      rule.allowed_headers.push_back(value);
    } else if (name == "ExposeHeader") {
      // Sent back in Access-Control-Expose-Headers: a header name (an HTTP token).
      if (value.size() > 256 || !headerToken(value)) {
        return s3fail(S3ErrorCode::kInvalidRequest, "ExposeHeader must be a header name");
      }
      rule.expose_headers.push_back(value);
    } else if (name == "MaxAgeSeconds") {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || end != value.data() + value.size() || v < 0) {
        return malformedXml();
      }
      rule.max_age_seconds = v;
    } else {
      return malformedXml();
    }
  }
  if (rule.allowed_origins.empty() || rule.allowed_methods.empty()) return malformedXml();
  return rule;
}

}  // namespace

S3Result<std::vector<index_kv::CorsRule>> parseCorsConfiguration(std::string_view body) {
  pugi::xml_document doc;
  auto cfg = parseRoot(doc, body, "CORSConfiguration");
  if (!cfg) return std::unexpected(cfg.error());
  std::vector<index_kv::CorsRule> rules;
  for (pugi::xml_node node : cfg->children()) {
    if (node.type() != pugi::node_element) continue;
    if (std::string_view(node.name()) != "CORSRule") return malformedXml();
    if (rules.size() == kMaxCorsRules) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "A CORS configuration has at most 100 rules");
    }
    auto rule = parseCorsRule(node);
    if (!rule) return std::unexpected(rule.error());
    rules.push_back(std::move(*rule));
  }
  if (rules.empty()) return malformedXml();
  return rules;
}

std::string corsConfigurationXml(const std::vector<index_kv::CorsRule>& rules) {
  XmlWriter x("CORSConfiguration");
  const auto each = [&](std::string_view name, const std::vector<std::string>& values) {
    for (const auto& v : values) x.element(name, v);
  };
  for (const auto& rule : rules) {
    x.open("CORSRule");
    if (!rule.id.empty()) x.element("ID", rule.id);
    each("AllowedHeader", rule.allowed_headers);
    each("AllowedMethod", rule.allowed_methods);
    each("AllowedOrigin", rule.allowed_origins);
    each("ExposeHeader", rule.expose_headers);
    if (rule.max_age_seconds) x.element("MaxAgeSeconds", std::to_string(*rule.max_age_seconds));
    x.close();
  }
  return std::move(x).finish();
}

std::string bucketAclXml(std::string_view owner_id, bool public_read) {
  XmlWriter x("AccessControlPolicy");
  identity(x, "Owner", owner_id);
  x.open("AccessControlList");
  // <Grant><Grantee xsi:type=...>`who`</Grantee><Permission>..</Permission></Grant>
  auto grant = [&](std::string_view type, auto who, std::string_view permission) {
    x.open("Grant")
        .open("Grantee")
        .attribute("xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance")
        .attribute("xsi:type", type);
    who();
    x.close().element("Permission", permission).close();
  };
  grant("CanonicalUser", [&] { x.element("ID", owner_id).element("DisplayName", owner_id); },
        "FULL_CONTROL");
  if (public_read) grant("Group", [&] { x.element("URI", kAllUsersUri); }, "READ");
  return std::move(x).finish();
}

S3Result<bool> parseAccessControlPolicy(std::string_view body) {
  pugi::xml_document doc;
  auto policy = parseRoot(doc, body, "AccessControlPolicy");
  if (!policy) return std::unexpected(policy.error());
  bool public_read = false;
  if (repeatsAChild(*policy)) return malformedXml();
  for (pugi::xml_node g : policy->child("AccessControlList").children("Grant")) {
    pugi::xml_node grantee = g.child("Grantee");
    const std::string_view permission = g.child("Permission").text().as_string();
    if (!grantee || permission.empty() || repeatsAChild(g) || repeatsAChild(grantee)) {
      return malformedXml();
    }
    const std::string_view uri = grantee.child("URI").text().as_string();
    if (uri == kAllUsersUri) {
      if (permission != "READ") {
        return notImplemented("Only READ can be granted to AllUsers (public-read)");
      }
      public_read = true;
    } else if (!uri.empty() || grantee.child("EmailAddress")) {
      return notImplemented("Grants to other groups or accounts are not implemented");
    } else if (permission != "FULL_CONTROL") {
      return notImplemented("Grants to other accounts are not implemented");
    }
  }
  return public_read;
}

S3Result<std::vector<index_kv::LifecycleRule>> parseLifecycleConfiguration(
    std::string_view body) {
  pugi::xml_document doc;
  auto cfg = parseRoot(doc, body, "LifecycleConfiguration");
  if (!cfg) return std::unexpected(cfg.error());
  std::vector<index_kv::LifecycleRule> rules;
  std::set<std::string> ids;
  for (pugi::xml_node node : cfg->children()) {
    if (node.type() != pugi::node_element) continue;
    if (std::string_view(node.name()) != "Rule") return malformedXml();
    if (rules.size() == kMaxLifecycleRules) {
      return invalidArgument("A lifecycle configuration has at most 1000 rules");
    }
    auto rule = parseLifecycleRule(node);
    if (!rule) return std::unexpected(rule.error());
    if (!rule->id.empty() && !ids.insert(rule->id).second) {
      return invalidArgument("Rule ID must be unique. Found same ID for more than one rule");
    }
    rules.push_back(std::move(*rule));
  }
  if (rules.empty()) return malformedXml();
  // Rules without an ID get one (as S3 does), none that an explicit ID already took.
  for (size_t i = 0, n = 1; i < rules.size(); ++i) {
    while (rules[i].id.empty()) {
      std::string id = "rule-" + std::to_string(n++);
      if (ids.insert(id).second) rules[i].id = std::move(id);
    }
  }
  return rules;
}

std::string lifecycleConfigurationXml(const std::vector<index_kv::LifecycleRule>& rules) {
  XmlWriter x("LifecycleConfiguration");
  for (const auto& rule : rules) {
    x.open("Rule").element("ID", rule.id).open("Filter");
    // One condition on its own, several in an And, as S3 writes them.
    const size_t conditions = (rule.prefix.empty() ? 0 : 1) + rule.tags.size() +
                              (rule.size_greater_than ? 1 : 0) + (rule.size_less_than ? 1 : 0);
    if (conditions > 1) x.open("And");
    if (!rule.prefix.empty() || conditions == 0) x.element("Prefix", rule.prefix);
    for (const auto& [key, value] : rule.tags) {
      x.open("Tag").element("Key", key).element("Value", value).close();
    }
    if (rule.size_greater_than) x.element("ObjectSizeGreaterThan", *rule.size_greater_than);
    if (rule.size_less_than) x.element("ObjectSizeLessThan", *rule.size_less_than);
    if (conditions > 1) x.close();
    x.close().element("Status", rule.enabled ? "Enabled" : "Disabled");
    if (rule.expiration_days || rule.expiration_date_unix) {
      x.open("Expiration");
      if (rule.expiration_days) {
        x.element("Days", std::to_string(*rule.expiration_days));
      } else {
        x.element("Date", midnightDate(*rule.expiration_date_unix));
      }
      x.close();
    } else if (rule.expired_object_delete_marker) {
      x.open("Expiration")
          .element("ExpiredObjectDeleteMarker", *rule.expired_object_delete_marker ? "true"
                                                                                   : "false")
          .close();
    }
    if (rule.noncurrent_days) {
      x.open("NoncurrentVersionExpiration");
      if (rule.newer_noncurrent_versions) {
        x.element("NewerNoncurrentVersions", std::to_string(*rule.newer_noncurrent_versions));
      }
      x.element("NoncurrentDays", std::to_string(*rule.noncurrent_days)).close();
    }
    if (rule.abort_incomplete_days) {
      x.open("AbortIncompleteMultipartUpload")
          .element("DaysAfterInitiation", std::to_string(*rule.abort_incomplete_days))
          .close();
    }
    x.close();
  }
  return std::move(x).finish();
}

}  // namespace granary::gateway

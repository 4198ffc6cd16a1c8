#include "s3_xml.h"

#include <fmt/format.h>
#include <pugixml.hpp>

#include <charconv>
#include <ctime>
#include <set>

#include "time_format.h"
#include "uri.h"

namespace granary::gateway {

namespace {

// Appends pugixml's output to a string (an ostringstream would copy it twice more).
class StringWriter final : public pugi::xml_writer {
 public:
  explicit StringWriter(std::string& out) : out_(out) {}
  void write(const void* data, size_t size) override {
    out_.append(static_cast<const char*>(data), size);
  }

 private:
  std::string& out_;
};

std::string serialize(const pugi::xml_document& doc) {
  std::string out;
  StringWriter writer(out);
  doc.save(writer, "", pugi::format_raw, pugi::encoding_utf8);
  return out;
}

pugi::xml_node root(pugi::xml_document& doc, const char* name, bool with_namespace = true) {
  auto decl = doc.append_child(pugi::node_declaration);
  decl.append_attribute("version") = "1.0";
  decl.append_attribute("encoding") = "UTF-8";
  auto node = doc.append_child(name);
  if (with_namespace) node.append_attribute("xmlns") = std::string(kS3Namespace).c_str();
  return node;
}

void text(pugi::xml_node parent, const char* name, std::string_view value) {
  parent.append_child(name).text().set(value.data(), value.size());
}

// <who><ID>id</ID><DisplayName>id</DisplayName></who>: an owner, initiator or grantee.
pugi::xml_node identity(pugi::xml_node parent, const char* who, std::string_view id) {
  auto node = parent.append_child(who);
  text(node, "ID", id);
  text(node, "DisplayName", id);
  return node;
}

// "\"etag\"" (built by appending: g++ 12 warns falsely on operator+ chains here).
std::string quoted(std::string_view etag) {
  std::string out;
  out.reserve(etag.size() + 2);
  out.push_back('"');
  out.append(etag);
  out.push_back('"');
  return out;
}

// The one MalformedXML answer for every request body the gateway parses.
std::unexpected<S3Error> malformedXml() {
  return s3fail(S3ErrorCode::kMalformedXML,
                "The XML you provided was not well-formed or did not validate against our "
                "published schema");
}

// Parses `body` into `doc` and returns its root element named `name`, or MalformedXML.
S3Result<pugi::xml_node> parseRoot(pugi::xml_document& doc, std::string_view body,
                                   const char* name) {
  // parse_ws_pcdata_single keeps a value that is only whitespace (<Key> </Key> names the
  // key " ", not "").
  if (!doc.load_buffer(body.data(), body.size(),
                       pugi::parse_default | pugi::parse_ws_pcdata_single, pugi::encoding_utf8)) {
    return malformedXml();
  }
  pugi::xml_node node = doc.child(name);
  if (!node) return malformedXml();
  return node;
}

}  // namespace

std::string errorXml(const S3Error& error, std::string_view resource,
                     std::string_view request_id) {
  pugi::xml_document doc;
  auto e = root(doc, "Error", false);
  text(e, "Code", errorName(error.code));
  text(e, "Message", error.message);
  text(e, "Resource", resource);
  text(e, "RequestId", request_id);
  return serialize(doc);
}

std::string listBucketsXml(const std::vector<index_kv::BucketInfo>& buckets,
                           std::string_view owner_id) {
  pugi::xml_document doc;
  auto r = root(doc, "ListAllMyBucketsResult");
  identity(r, "Owner", owner_id);
  auto list = r.append_child("Buckets");
  for (const auto& b : buckets) {
    auto node = list.append_child("Bucket");
    text(node, "Name", b.name);
    text(node, "CreationDate", isoTimestamp(b.created_unix_nanos));
  }
  return serialize(doc);
}

std::string listObjectsXml(const ListObjectsParams& p, const index_kv::ListResult& result) {
  std::string encoded;  // the last value enc() encoded; text() copies it at once
  auto enc = [&](std::string_view s) -> std::string_view {
    if (!p.url_encode) return s;
    encoded = uriEncode(s, /*encode_slash=*/false);
    return encoded;
  };
  pugi::xml_document doc;
  auto r = root(doc, "ListBucketResult");
  text(r, "Name", p.bucket);
  text(r, "Prefix", enc(p.prefix));
  if (p.version == 1) {
    text(r, "Marker", enc(p.marker));
    if (result.truncated && !p.next_token.empty()) text(r, "NextMarker", enc(p.next_token));
  } else {
    if (!p.marker.empty()) text(r, "StartAfter", enc(p.marker));
    if (!p.continuation_token.empty()) text(r, "ContinuationToken", p.continuation_token);
    if (result.truncated) text(r, "NextContinuationToken", p.next_token);
    text(r, "KeyCount", std::to_string(result.objects.size() + result.common_prefixes.size()));
  }
  text(r, "MaxKeys", std::to_string(p.max_keys));
  if (!p.delimiter.empty()) text(r, "Delimiter", enc(p.delimiter));
  if (p.url_encode) text(r, "EncodingType", "url");
  text(r, "IsTruncated", result.truncated ? "true" : "false");
  for (const auto& o : result.objects) {
    auto c = r.append_child("Contents");
    text(c, "Key", enc(o.key));
    text(c, "LastModified", isoTimestamp(o.mtime_unix_nanos));
    text(c, "ETag", quoted(o.etag));
    const fmt::format_int size(o.size);
    text(c, "Size", {size.data(), size.size()});
    text(c, "StorageClass", "STANDARD");
    if (p.fetch_owner || p.version == 1) {
      identity(c, "Owner", p.owner_id);
    }
  }
  for (const auto& prefix : result.common_prefixes) {
    text(r.append_child("CommonPrefixes"), "Prefix", enc(prefix));
  }
  return serialize(doc);
}

std::string copyObjectResultXml(std::string_view etag, int64_t mtime_unix_nanos) {
  pugi::xml_document doc;
  auto r = root(doc, "CopyObjectResult");
  text(r, "LastModified", isoTimestamp(mtime_unix_nanos));
  text(r, "ETag", quoted(etag));
  return serialize(doc);
}

std::string copyPartResultXml(std::string_view etag, int64_t mtime_unix_nanos) {
  pugi::xml_document doc;
  auto r = root(doc, "CopyPartResult");
  text(r, "LastModified", isoTimestamp(mtime_unix_nanos));
  text(r, "ETag", quoted(etag));
  return serialize(doc);
}

std::string emptyTaggingXml() {
  pugi::xml_document doc;
  auto r = root(doc, "Tagging");
  r.append_child("TagSet");
  return serialize(doc);
}

std::string objectAttributesXml(const ObjectAttributesRequest& want,
                                const index_kv::Manifest& m) {
  pugi::xml_document doc;
  auto r = root(doc, "GetObjectAttributesResponse");
  if (want.etag) text(r, "ETag", m.etag);
  if (want.checksum && !m.checksum.empty()) {
    auto c = r.append_child("Checksum");
    text(c, ("Checksum" + m.checksum.algorithm).c_str(), m.checksum.value);
    text(c, "ChecksumType", m.checksum.type.empty() ? "FULL_OBJECT" : m.checksum.type);
  }
  // A multipart object's ETag ends in "-<parts>": its part count (the parts themselves
  // are not kept apart once completed).
  if (size_t dash = m.etag.rfind('-'); want.object_parts && dash != std::string::npos) {
    text(r.append_child("ObjectParts"), "PartsCount", m.etag.substr(dash + 1));
  }
  if (want.storage_class) text(r, "StorageClass", "STANDARD");
  if (want.object_size) text(r, "ObjectSize", std::to_string(m.size));
  return serialize(doc);
}

std::string locationXml(std::string_view region) {
  pugi::xml_document doc;
  auto r = root(doc, "LocationConstraint");
  // us-east-1 is reported as an empty constraint, as AWS does.
  if (region != "us-east-1") r.text().set(std::string(region).c_str());
  return serialize(doc);
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
  auto root = parseRoot(doc, body, "Delete");
  if (!root) return std::unexpected(root.error());
  pugi::xml_node del = *root;
  DeleteObjectsRequest out;
  std::string quiet = del.child("Quiet").text().as_string();
  out.quiet = quiet == "true" || quiet == "True";
  for (auto obj : del.children("Object")) {
    auto key = obj.child("Key");
    if (!key) return malformedXml();
    out.keys.emplace_back(key.text().as_string());
    if (out.keys.size() > kMaxDeleteObjects) return malformedXml();
  }
  if (out.keys.empty()) return malformedXml();
  return out;
}

std::string deleteResultXml(const std::vector<DeleteOutcome>& outcomes, bool quiet) {
  pugi::xml_document doc;
  auto r = root(doc, "DeleteResult");
  for (const auto& o : outcomes) {
    if (!o.error) {
      if (!quiet) text(r.append_child("Deleted"), "Key", o.key);
      continue;
    }
    auto e = r.append_child("Error");
    text(e, "Key", o.key);
    text(e, "Code", errorName(o.error->code));
    text(e, "Message", o.error->message);
  }
  return serialize(doc);
}

std::string initiateMultipartUploadXml(std::string_view bucket, std::string_view key,
                                       std::string_view upload_id) {
  pugi::xml_document doc;
  auto r = root(doc, "InitiateMultipartUploadResult");
  text(r, "Bucket", bucket);
  text(r, "Key", key);
  text(r, "UploadId", upload_id);
  return serialize(doc);
}

S3Result<std::vector<CompletedPart>> parseCompleteMultipartUpload(std::string_view body) {
  pugi::xml_document doc;
  auto root = parseRoot(doc, body, "CompleteMultipartUpload");
  if (!root) return std::unexpected(root.error());
  pugi::xml_node complete = *root;
  std::vector<CompletedPart> parts;
  for (auto part : complete.children("Part")) {
    auto number = part.child("PartNumber");
    auto etag = part.child("ETag");
    if (!number || !etag) return malformedXml();
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
  pugi::xml_document doc;
  auto r = root(doc, "CompleteMultipartUploadResult");
  text(r, "Location", location);
  text(r, "Bucket", bucket);
  text(r, "Key", key);
  text(r, "ETag", quoted(etag));
  if (!checksum.empty()) {
    const std::string element = "Checksum" + checksum.algorithm;
    text(r, element.c_str(), checksum.value);
    text(r, "ChecksumType", checksum.type);
  }
  return serialize(doc);
}

std::string listPartsXml(const ListPartsParams& p, const std::vector<index_kv::PartInfo>& parts) {
  pugi::xml_document doc;
  auto r = root(doc, "ListPartsResult");
  text(r, "Bucket", p.bucket);
  text(r, "Key", p.key);
  text(r, "UploadId", p.upload_id);
  for (const char* who : {"Initiator", "Owner"}) identity(r, who, p.owner_id);
  text(r, "StorageClass", "STANDARD");
  text(r, "PartNumberMarker", std::to_string(p.part_number_marker));
  if (!parts.empty()) text(r, "NextPartNumberMarker", std::to_string(parts.back().part_number));
  text(r, "MaxParts", std::to_string(p.max_parts));
  text(r, "IsTruncated", p.truncated ? "true" : "false");
  for (const auto& part : parts) {
    auto c = r.append_child("Part");
    text(c, "PartNumber", std::to_string(part.part_number));
    text(c, "LastModified", isoTimestamp(part.mtime_unix_nanos));
    text(c, "ETag", quoted(part.etag));
    text(c, "Size", std::to_string(part.size));
    if (!part.checksum.empty()) {
      const std::string element = "Checksum" + part.checksum.algorithm;
      text(c, element.c_str(), part.checksum.value);
    }
  }
  return serialize(doc);
}

std::string listMultipartUploadsXml(const ListUploadsParams& p,
                                    const index_kv::ListUploadsResult& result) {
  pugi::xml_document doc;
  auto r = root(doc, "ListMultipartUploadsResult");
  text(r, "Bucket", p.bucket);
  text(r, "KeyMarker", p.key_marker);
  text(r, "UploadIdMarker", p.upload_id_marker);
  if (result.truncated && !result.uploads.empty()) {
    text(r, "NextKeyMarker", result.uploads.back().key);
    text(r, "NextUploadIdMarker", result.uploads.back().upload_id);
  }
  text(r, "Prefix", p.prefix);
  text(r, "MaxUploads", std::to_string(p.max_uploads));
  text(r, "IsTruncated", result.truncated ? "true" : "false");
  for (const auto& u : result.uploads) {
    auto c = r.append_child("Upload");
    text(c, "Key", u.key);
    text(c, "UploadId", u.upload_id);
    for (const char* who : {"Initiator", "Owner"}) identity(c, who, u.owner);
    text(c, "StorageClass", "STANDARD");
    text(c, "Initiated", isoTimestamp(u.initiated_unix_nanos));
  }
  return serialize(doc);
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

S3Result<index_kv::LifecycleRule> parseLifecycleRule(pugi::xml_node node, size_t ordinal) {
  index_kv::LifecycleRule rule;
  for (pugi::xml_node child : node.children()) {
    if (child.type() != pugi::node_element) continue;
    const std::string_view name = child.name();
    if (name == "ID" || name == "Status" || name == "Prefix" || name == "Filter" ||
        name == "Expiration" || name == "AbortIncompleteMultipartUpload") {
      continue;
    }
    if (name == "Transition" || name == "NoncurrentVersionTransition" ||
        name == "NoncurrentVersionExpiration") {
      return notImplemented(std::string("Lifecycle action ") + child.name() +
                            " is not implemented (no storage classes or versioning)");
    }
    return malformedXml();
  }
  rule.id = node.child("ID").text().as_string();
  if (rule.id.size() > 255) return invalidArgument("ID length should not exceed allowed limit of 255");
  if (rule.id.empty()) rule.id = "rule-" + std::to_string(ordinal + 1);
  const std::string status = node.child("Status").text().as_string();
  if (status != "Enabled" && status != "Disabled") return malformedXml();
  rule.enabled = status == "Enabled";
  if (pugi::xml_node filter = node.child("Filter")) {
    if (node.child("Prefix")) return malformedXml();  // one or the other
    for (pugi::xml_node f : filter.children()) {
      if (f.type() != pugi::node_element) continue;
      if (std::string_view(f.name()) != "Prefix") {
        return notImplemented(std::string("Lifecycle filter ") + f.name() +
                              " is not implemented (prefix filters only)");
      }
    }
    rule.prefix = filter.child("Prefix").text().as_string();
  } else {
    rule.prefix = node.child("Prefix").text().as_string();
  }
  if (pugi::xml_node exp = node.child("Expiration")) {
    if (exp.child("ExpiredObjectDeleteMarker")) {
      return notImplemented("ExpiredObjectDeleteMarker is not implemented (no versioning)");
    }
    const bool has_days = exp.child("Days");
    const bool has_date = exp.child("Date");
    if (has_days == has_date) return malformedXml();
    if (has_days) {
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
  if (!rule.expiration_days && !rule.expiration_date_unix && !rule.abort_incomplete_days) {
    return invalidArgument("At least one action needs to be specified in a rule");
  }
  return rule;
}

}  // namespace

std::string bucketAclXml(std::string_view owner_id, bool public_read) {
  pugi::xml_document doc;
  auto r = root(doc, "AccessControlPolicy");
  identity(r, "Owner", owner_id);
  auto list = r.append_child("AccessControlList");
  auto grant = [&](const char* type) {
    auto g = list.append_child("Grant");
    auto grantee = g.append_child("Grantee");
    grantee.append_attribute("xmlns:xsi") = "http://www.w3.org/2001/XMLSchema-instance";
    grantee.append_attribute("xsi:type") = type;
    return std::pair{g, grantee};
  };
  auto [full, owner_grantee] = grant("CanonicalUser");
  text(owner_grantee, "ID", owner_id);
  text(owner_grantee, "DisplayName", owner_id);
  text(full, "Permission", "FULL_CONTROL");
  if (public_read) {
    auto [read, all_users] = grant("Group");
    text(all_users, "URI", kAllUsersUri);
    text(read, "Permission", "READ");
  }
  return serialize(doc);
}

S3Result<bool> parseAccessControlPolicy(std::string_view body) {
  pugi::xml_document doc;
  auto policy = parseRoot(doc, body, "AccessControlPolicy");
  if (!policy) return std::unexpected(policy.error());
  bool public_read = false;
  for (pugi::xml_node g : policy->child("AccessControlList").children("Grant")) {
    pugi::xml_node grantee = g.child("Grantee");
    const std::string_view permission = g.child("Permission").text().as_string();
    if (!grantee || permission.empty()) return malformedXml();
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
    auto rule = parseLifecycleRule(node, rules.size());
    if (!rule) return std::unexpected(rule.error());
    if (!ids.insert(rule->id).second) {
      return invalidArgument("Rule ID must be unique. Found same ID for more than one rule");
    }
    rules.push_back(std::move(*rule));
  }
  if (rules.empty()) return malformedXml();
  return rules;
}

std::string lifecycleConfigurationXml(const std::vector<index_kv::LifecycleRule>& rules) {
  pugi::xml_document doc;
  auto r = root(doc, "LifecycleConfiguration");
  for (const auto& rule : rules) {
    auto node = r.append_child("Rule");
    text(node, "ID", rule.id);
    text(node.append_child("Filter"), "Prefix", rule.prefix);
    text(node, "Status", rule.enabled ? "Enabled" : "Disabled");
    if (rule.expiration_days || rule.expiration_date_unix) {
      auto exp = node.append_child("Expiration");
      if (rule.expiration_days) {
        text(exp, "Days", std::to_string(*rule.expiration_days));
      } else {
        text(exp, "Date", midnightDate(*rule.expiration_date_unix));
      }
    }
    if (rule.abort_incomplete_days) {
      text(node.append_child("AbortIncompleteMultipartUpload"), "DaysAfterInitiation",
           std::to_string(*rule.abort_incomplete_days));
    }
  }
  return serialize(doc);
}

}  // namespace granary::gateway

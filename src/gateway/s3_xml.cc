#include "s3_xml.h"

#include <pugixml.hpp>

#include <charconv>
#include <sstream>

#include "time_format.h"
#include "uri.h"

namespace granary::gateway {

namespace {

std::string serialize(const pugi::xml_document& doc) {
  std::ostringstream out;
  doc.save(out, "", pugi::format_raw, pugi::encoding_utf8);
  return out.str();
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
  parent.append_child(name).text().set(std::string(value).c_str());
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
  if (!doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8)) {
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
  auto owner = r.append_child("Owner");
  text(owner, "ID", owner_id);
  text(owner, "DisplayName", owner_id);
  auto list = r.append_child("Buckets");
  for (const auto& b : buckets) {
    auto node = list.append_child("Bucket");
    text(node, "Name", b.name);
    text(node, "CreationDate", isoTimestamp(b.created_unix_nanos));
  }
  return serialize(doc);
}

std::string listObjectsXml(const ListObjectsParams& p, const index_kv::ListResult& result) {
  auto enc = [&](std::string_view s) {
    return p.url_encode ? uriEncode(s, /*encode_slash=*/false) : std::string(s);
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
    text(c, "ETag", "\"" + o.etag + "\"");
    text(c, "Size", std::to_string(o.size));
    text(c, "StorageClass", "STANDARD");
    if (p.fetch_owner || p.version == 1) {
      auto owner = c.append_child("Owner");
      text(owner, "ID", p.owner_id);
      text(owner, "DisplayName", p.owner_id);
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
  for (const char* who : {"Initiator", "Owner"}) {
    auto owner = r.append_child(who);
    text(owner, "ID", p.owner_id);
    text(owner, "DisplayName", p.owner_id);
  }
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
    for (const char* who : {"Initiator", "Owner"}) {
      auto owner = c.append_child(who);
      text(owner, "ID", u.owner);
      text(owner, "DisplayName", u.owner);
    }
    text(c, "StorageClass", "STANDARD");
    text(c, "Initiated", isoTimestamp(u.initiated_unix_nanos));
  }
  return serialize(doc);
}

}  // namespace granary::gateway

// XmlWriter (granary_s3core): responses are written front to back; these tests hold its
// bytes to pugixml's, which wrote every response before it.
#include <catch2/catch.hpp>
#include <pugixml.hpp>

#include <string>

#include "xml_writer.h"

namespace granary::gateway {
namespace {

std::string pugiSave(const pugi::xml_document& doc) {
  struct Writer final : pugi::xml_writer {
    std::string out;
    void write(const void* data, size_t size) override {
      out.append(static_cast<const char*>(data), size);
    }
  } writer;
  doc.save(writer, "", pugi::format_raw | pugi::format_no_declaration, pugi::encoding_utf8);
  return writer.out;
}

constexpr std::string_view kDeclaration = R"(<?xml version="1.0" encoding="UTF-8"?>)";

// Every byte but NUL (which no S3 value may hold, and which pugixml cannot hold either).
std::string everyByte() {
  std::string all;
  for (int c = 1; c < 256; ++c) all.push_back(static_cast<char>(c));
  return all;
}

}  // namespace

TEST_CASE("XmlWriter escapes text and attributes as pugixml does, and CR in text too") {
  const std::string all = everyByte();
  pugi::xml_document doc;
  auto root = doc.append_child("R");
  root.append_attribute("a") = all.c_str();
  root.append_child("T").text().set(all.c_str());

  XmlWriter x("R", /*s3_namespace=*/false);
  x.attribute("a", all).element("T", all);
  const std::string ours = std::move(x).finish();

  REQUIRE(ours.starts_with(kDeclaration));
  // pugixml leaves CR raw in text (its only raw CR: in the attribute it is a reference).
  std::string want = pugiSave(doc);
  for (size_t at = want.find('\r'); at != std::string::npos; at = want.find('\r', at)) {
    want.replace(at, 1, "&#13;");
  }
  CHECK(ours.substr(kDeclaration.size()) == want);
  // The parts that matter, spelled out.
  CHECK(ours.find("&amp;") != std::string::npos);
  CHECK(ours.find("&lt;") != std::string::npos);
  CHECK(ours.find("&#01;") != std::string::npos);
}

TEST_CASE("XmlWriter nests, closes what is left open, and its output parses back") {
  const std::string hostile = "a&b<c>d\"e'f\tg\nh\x01i \xc3\xa9 ../x\ry\r\nz";
  XmlWriter x("ListBucketResult");
  x.element("Name", "bucket").element("KeyCount", uint64_t{18446744073709551615u});
  x.open("Contents").element("Key", hostile).quotedElement("ETag", "abc").close();
  x.open("CommonPrefixes").element("Prefix", "");
  x.open("Empty");
  const std::string body = std::move(x).finish();

  CHECK(body.ends_with("<Prefix></Prefix><Empty></Empty></CommonPrefixes></ListBucketResult>"));
  pugi::xml_document doc;
  REQUIRE(doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8));
  auto r = doc.child("ListBucketResult");
  CHECK(std::string_view(r.attribute("xmlns").value()) == kS3Namespace);
  CHECK(std::string_view(r.child("KeyCount").text().get()) == "18446744073709551615");
  CHECK(r.child("Contents").child("Key").text().get() == hostile);
  CHECK(std::string_view(r.child("Contents").child("ETag").text().get()) == "\"abc\"");
  CHECK(r.child("CommonPrefixes").child("Prefix"));
  CHECK(r.child("CommonPrefixes").child("Empty"));
}

TEST_CASE("XmlWriter writes an error body without the S3 namespace") {
  XmlWriter x("Error", /*s3_namespace=*/false);
  x.element("Code", "NoSuchKey");
  CHECK(std::move(x).finish() ==
        std::string(kDeclaration) + "<Error><Code>NoSuchKey</Code></Error>");
}

}  // namespace granary::gateway

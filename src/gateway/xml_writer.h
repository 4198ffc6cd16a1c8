// Writes an XML response body front to back, escaping text as it goes. Responses are built
// with this writer rather than a pugixml document: a listing of 1,000 keys spent a fifth of
// its server time building and saving the DOM (docs/benchmarks.md, LIST). Request bodies
// are still parsed with pugixml (s3_xml.cc).
//
// Text and attribute values are escaped as pugixml escapes them, so the bytes clients see
// did not change: `&` and `<` as entities, `>` in text and `"` in attributes too, control
// characters as two-digit numeric references ("&#01;"), except tab, newline and carriage
// return in text.
// Bytes >= 0x80 pass through: values are UTF-8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace granary::gateway {

inline constexpr std::string_view kS3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/";

class XmlWriter {
 public:
  // Writes the declaration and opens the root element, with the S3 namespace unless
  // `s3_namespace` is false. `reserve`: the expected size of the body.
  explicit XmlWriter(std::string_view root, bool s3_namespace = true, size_t reserve = 512);

  // Opens a child of the innermost open element.
  XmlWriter& open(std::string_view name);
  // An attribute of the element open() just opened; only before its content.
  XmlWriter& attribute(std::string_view name, std::string_view value);
  // Escaped text inside the innermost open element.
  XmlWriter& text(std::string_view value);
  // Closes the innermost open element.
  XmlWriter& close();
  // <name>value</name> inside the innermost open element.
  XmlWriter& element(std::string_view name, std::string_view value);
  XmlWriter& element(std::string_view name, uint64_t value);  // in decimal
  // <name>"value"</name>: an ETag.
  XmlWriter& quotedElement(std::string_view name, std::string_view value);

  // Closes every element still open and returns the body.
  std::string finish() &&;

 private:
  void endStartTag();  // writes the '>' of a start tag still open for attributes

  std::string out_;
  std::vector<std::string> open_;  // names of the open elements, outermost first
  bool in_start_tag_ = false;
};

// Appends `value` to `out`, escaped as element text (in_attribute false) or as an
// attribute value in double quotes.
void appendXmlEscaped(std::string& out, std::string_view value, bool in_attribute);

}  // namespace granary::gateway

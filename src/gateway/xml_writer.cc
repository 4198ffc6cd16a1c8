#include "xml_writer.h"

#include <fmt/format.h>

#include <array>
#include <cassert>

namespace granary::gateway {

namespace {

// Which bytes need escaping where, as pugixml escapes them, but for CR in text: a parser
// reads a raw CR (or CR LF) as LF (XML 1.0 2.11), so a key "a\rb" would list as "a\nb",
// a key that does not exist. As a reference it survives.
constexpr uint8_t kInText = 1, kInAttribute = 2;
constexpr std::array<uint8_t, 256> kEscape = [] {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 32; ++c) t[c] = kInText | kInAttribute;
  t['\t'] = t['\n'] = kInAttribute;
  t['&'] = t['<'] = kInText | kInAttribute;
  t['>'] = kInText;
  t['"'] = kInAttribute;
  return t;
}();

}  // namespace

void appendXmlEscaped(std::string& out, std::string_view value, bool in_attribute) {
  const uint8_t where = in_attribute ? kInAttribute : kInText;
  size_t plain = 0;  // start of the run not yet appended
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (!(kEscape[c] & where)) continue;
    out.append(value.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '&': out.append("&amp;"); break;
      case '<': out.append("&lt;"); break;
      case '>': out.append("&gt;"); break;
      case '"': out.append("&quot;"); break;
      default: {  // a control character
        const char ref[] = {'&', '#', static_cast<char>('0' + c / 10),
                            static_cast<char>('0' + c % 10), ';'};
        out.append(ref, sizeof ref);
      }
    }
  }
  out.append(value.data() + plain, value.size() - plain);
}

XmlWriter::XmlWriter(std::string_view root, bool s3_namespace, size_t reserve) {
  out_.reserve(reserve);
  out_.append(R"(<?xml version="1.0" encoding="UTF-8"?>)");
  open(root);
  if (s3_namespace) attribute("xmlns", kS3Namespace);
}

void XmlWriter::endStartTag() {
  if (!in_start_tag_) return;
  out_.push_back('>');
  in_start_tag_ = false;
}

XmlWriter& XmlWriter::open(std::string_view name) {
  endStartTag();
  out_.push_back('<');
  out_.append(name);
  open_.emplace_back(name);
  in_start_tag_ = true;
  return *this;
}

XmlWriter& XmlWriter::attribute(std::string_view name, std::string_view value) {
  assert(in_start_tag_ && "an attribute after the element's content");
  out_.push_back(' ');
  out_.append(name);
  out_.append("=\"");
  appendXmlEscaped(out_, value, /*in_attribute=*/true);
  out_.push_back('"');
  return *this;
}

XmlWriter& XmlWriter::text(std::string_view value) {
  endStartTag();
  appendXmlEscaped(out_, value, /*in_attribute=*/false);
  return *this;
}

XmlWriter& XmlWriter::close() {
  assert(!open_.empty() && "close() with no element open");
  endStartTag();
  out_.append("</");
  out_.append(open_.back());
  out_.push_back('>');
  open_.pop_back();
  return *this;
}

XmlWriter& XmlWriter::element(std::string_view name, std::string_view value) {
  return open(name).text(value).close();
}

XmlWriter& XmlWriter::element(std::string_view name, uint64_t value) {
  const fmt::format_int digits(value);
  return element(name, std::string_view(digits.data(), digits.size()));
}

XmlWriter& XmlWriter::quotedElement(std::string_view name, std::string_view value) {
  return open(name).text("\"").text(value).text("\"").close();
}

std::string XmlWriter::finish() && {
  while (!open_.empty()) close();
  return std::move(out_);
}

}  // namespace granary::gateway

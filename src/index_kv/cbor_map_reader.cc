#include "index_kv/cbor_map_reader.h"

#include <nlohmann/json.hpp>

#include <array>
#include <vector>

namespace granary::index_kv {
namespace {

using Json = nlohmann::json;

class Reader final : public nlohmann::json_sax<Json> {
 public:
  Reader(const CborSchema& schema, CborReceiver& out) : root_(schema), out_(out) {
    frames_.reserve(8);
  }

  std::optional<std::string>& error() { return error_; }

  bool null() override { return other(); }
  bool boolean(bool v) override {
    const Slot s = slot();
    if (s.where == kField && s.field->kind == CborKind::kBool) {
      out_.onBool(s.field->id, v);
      return true;
    }
    return other();
  }
  bool number_integer(number_integer_t v) override {  // negative ones only, from CBOR
    const Slot s = slot();
    if (s.where == kField && s.field->kind == CborKind::kInt) {
      out_.onInt(s.field->id, v);
      return true;
    }
    return other();
  }
  bool number_unsigned(number_unsigned_t v) override {
    const Slot s = slot();
    if (s.where == kField && s.field->kind == CborKind::kInt) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail("integer out of range in field ", s.field);
      }
      out_.onInt(s.field->id, static_cast<int64_t>(v));
      return true;
    }
    if ((s.where == kField && s.field->kind == CborKind::kUint) ||
        (s.where == kElement && s.field->kind == CborKind::kUintArray)) {
      if (v > s.field->max) return fail("integer out of range in field ", s.field);
      out_.onUint(s.field->id, v);
      return true;
    }
    return other();
  }
  bool number_float(number_float_t, const string_t&) override { return other(); }
  bool string(string_t& v) override {
    const Slot s = slot();
    if ((s.where == kField && s.field->kind == CborKind::kText) ||
        (s.where == kElement && s.field->kind == CborKind::kTextArray)) {
      out_.onText(s.field->id, std::move(v));
      return true;
    }
    if (s.where == kTextMapValue) {
      out_.onTextMapEntry(s.field->id, std::move(text_map_key_), std::move(v));
      return true;
    }
    return other();
  }
  bool binary(binary_t& v) override {
    const Slot s = slot();
    if (s.where == kField && s.field->kind == CborKind::kVersion) {
      if (v.size() != 16) return fail("bad version id in field ", s.field);
      out_.onBytes(s.field->id, v);
      return true;
    }
    if (s.where == kField && s.field->kind == CborKind::kBytes) {
      out_.onBytes(s.field->id, v);
      return true;
    }
    return other();
  }
  bool start_object(std::size_t) override {
    const Slot s = slot();
    switch (s.where) {
      case kRoot:
        frames_.push_back({Frame::kMap, &root_, nullptr});
        return true;
      case kSkip:
        frames_.push_back({Frame::kSkip, nullptr, nullptr});
        return true;
      case kField:
        if (s.field->kind == CborKind::kMap) {
          out_.onBegin(s.field->id);
          frames_.push_back({Frame::kMap, s.field->nested, s.field});
          return true;
        }
        if (s.field->kind == CborKind::kTextMap) {
          out_.onBegin(s.field->id);
          frames_.push_back({Frame::kTextMap, nullptr, s.field});
          return true;
        }
        return other();
      case kElement:
        if (s.field->kind == CborKind::kMapArray) {
          out_.onBeginElement(s.field->id);
          frames_.push_back({Frame::kMap, s.field->nested, s.field});
          return true;
        }
        return other();
      case kTextMapValue:
        return other();
    }
    return other();
  }
  bool start_array(std::size_t) override {
    const Slot s = slot();
    if (s.where == kSkip) {
      frames_.push_back({Frame::kSkip, nullptr, nullptr});
      return true;
    }
    if (s.where == kField && (s.field->kind == CborKind::kTextArray ||
                              s.field->kind == CborKind::kUintArray ||
                              s.field->kind == CborKind::kMapArray)) {
      out_.onBegin(s.field->id);
      frames_.push_back({Frame::kArray, nullptr, s.field});
      return true;
    }
    return other();
  }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (f.type == Frame::kTextMap) {
      text_map_key_ = std::move(k);
    } else if (f.type == Frame::kMap) {
      f.current = -1;
      for (size_t i = 0; i < f.schema->fields.size(); ++i) {
        if (f.schema->fields[i].name == k) {
          f.current = static_cast<int>(i);
          f.seen |= uint64_t{1} << i;
          break;
        }
      }
    }
    return true;
  }
  bool end_object() override {
    const Frame& f = frames_.back();
    if (f.type == Frame::kMap) {
      for (size_t i = 0; i < f.schema->fields.size(); ++i) {
        if (f.schema->fields[i].required && !(f.seen & (uint64_t{1} << i))) {
          return fail("missing field ", &f.schema->fields[i]);
        }
      }
    }
    frames_.pop_back();
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    if (!error_) error_ = "not CBOR";
    return false;
  }

 private:
  // A container being read: the root map, a nested map with its own schema, an array
  // field, a text map, or something skipped.
  struct Frame {
    enum Type { kMap, kArray, kTextMap, kSkip } type;
    const CborSchema* schema;  // kMap
    const CborField* field;    // kArray, kTextMap: the field it is
    uint64_t seen = 0;         // kMap: the fields met, by index
    int current = -1;          // kMap: the field of the last key, or -1 when unknown
  };
  // What the next value is.
  enum Where { kRoot, kSkip, kField, kElement, kTextMapValue };
  struct Slot {
    Where where;
    const CborField* field = nullptr;
  };

  Slot slot() const {
    if (frames_.empty()) return {kRoot};
    const Frame& f = frames_.back();
    switch (f.type) {
      case Frame::kMap:
        if (f.current < 0) return {kSkip};
        return {kField, &f.schema->fields[static_cast<size_t>(f.current)]};
      case Frame::kArray:
        return {kElement, f.field};
      case Frame::kTextMap:
        return {kTextMapValue, f.field};
      case Frame::kSkip:
        return {kSkip};
    }
    return {kSkip};
  }

  // A value that fits no known field: skipped where unknown, else the value is bad.
  bool other() {
    const Slot s = slot();
    if (s.where == kSkip) return true;
    if (s.where == kRoot) {
      if (!error_) error_ = "not a CBOR map";
      return false;
    }
    return fail("wrong type in field ", s.field);
  }
  bool fail(std::string_view why, const CborField* field) {
    if (!error_) error_ = std::string(why).append(field->name);
    return false;
  }

  const CborSchema& root_;
  CborReceiver& out_;
  std::vector<Frame> frames_;
  std::string text_map_key_;
  std::optional<std::string> error_;
};

}  // namespace

bool cborShapeIsSafe(std::string_view value) {
  // Items still to read in each open array or map, the whole value's one at the bottom
  // (on the stack: this runs before every manifest decode).
  std::array<uint64_t, kMaxCborDepth + 1> open;
  size_t depth = 0;
  open[0] = 1;
  size_t at = 0;
  while (true) {
    if (open[depth] == 0) {
      if (depth == 0) break;
      --depth;
      continue;
    }
    --open[depth];
    if (at == value.size()) return false;
    const auto initial = static_cast<uint8_t>(value[at++]);
    const int major = initial >> 5;
    const int info = initial & 31;
    uint64_t arg = static_cast<uint64_t>(info);
    if (info >= 24) {
      // 28-30 are reserved; 31 is an indefinite length (or a break), which to_cbor never
      // writes and whose strings nlohmann reads by recursion no SAX handler sees.
      if (info > 27) return false;
      const size_t bytes = size_t{1} << (info - 24);
      if (value.size() - at < bytes) return false;
      arg = 0;
      for (size_t i = 0; i < bytes; ++i) arg = arg << 8 | static_cast<uint8_t>(value[at++]);
    }
    switch (major) {
      case 2:  // byte and text strings
      case 3:
        if (value.size() - at < arg) return false;
        at += static_cast<size_t>(arg);
        break;
      case 4:  // arrays and maps: their items follow (a map's count is of pairs)
      case 5:
        if (depth == kMaxCborDepth) return false;
        if (major == 5 && arg > UINT64_MAX / 2) return false;
        open[++depth] = major == 5 ? arg * 2 : arg;
        break;
      case 6:  // tags: to_cbor writes none, and from_cbor refuses them
        return false;
      default:  // integers, floats and simple values: nothing follows
        break;
    }
  }
  return true;
}

Json parseCborDom(std::string_view value) {
  if (!cborShapeIsSafe(value)) return Json(Json::value_t::discarded);
  return Json::from_cbor(value.begin(), value.end(), /*strict=*/true,
                         /*allow_exceptions=*/false);
}

std::optional<std::string> readCborMap(std::string_view value, const CborSchema& schema,
                                       CborReceiver& receiver) {
  if (!cborShapeIsSafe(value)) return "not CBOR as the index writes it (nested too deep?)";
  Reader reader(schema, receiver);
  const bool parsed = Json::sax_parse(value.begin(), value.end(), &reader,
                                      Json::input_format_t::cbor, /*strict=*/true);
  if (reader.error()) return std::move(reader.error());
  if (!parsed) return "not CBOR";
  return std::nullopt;
}

}  // namespace granary::index_kv

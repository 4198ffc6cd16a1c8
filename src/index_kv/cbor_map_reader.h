// Decodes a CBOR map straight into a struct with nlohmann's SAX reader, by a table of the
// fields it knows: no JSON DOM (a std::map and a node per value) is built. The index decodes
// a manifest per GET (and summaries written before their fixed layout), and the DOM was the
// larger part of the cost (docs/benchmarks.md).
//
// The rules are those of the DOM readers in codec.cc: a known field of the wrong type is
// corruption, a required field missing is corruption, fields it does not know (at any depth,
// of any type) are skipped, and when a key repeats the last value wins.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace granary::index_kv {

// What a known field holds.
enum class CborKind : uint8_t {
  kUint,       // unsigned integer <= max
  kInt,        // integer in int64_t
  kText,       // text string
  kBool,
  kVersion,    // byte string of 16 bytes
  kBytes,      // byte string
  kTextMap,    // map of text to text
  kTextArray,  // array of text strings
  kUintArray,  // array of unsigned integers <= max
  kMap,        // a map with its own fields (`nested`)
  kMapArray,   // an array of such maps
};

struct CborSchema;

struct CborField {
  std::string_view name;
  CborKind kind;
  int id;  // the receiver's name for the field
  bool required = false;
  uint64_t max = std::numeric_limits<uint64_t>::max();
  const CborSchema* nested = nullptr;  // kMap, kMapArray
};

struct CborSchema {
  std::span<const CborField> fields;  // at most 64
};

// Where the values go. `id` is the field's; the element calls of an array field and the
// entries of a text map carry the id of that field.
class CborReceiver {
 public:
  virtual ~CborReceiver() = default;
  virtual void onUint(int /*id*/, uint64_t /*v*/) {}
  virtual void onInt(int /*id*/, int64_t /*v*/) {}
  virtual void onText(int /*id*/, std::string&& /*v*/) {}
  virtual void onBool(int /*id*/, bool /*v*/) {}
  virtual void onBytes(int /*id*/, std::span<const uint8_t> /*v*/) {}  // kVersion, kBytes
  virtual void onTextMapEntry(int /*id*/, std::string&& /*key*/, std::string&& /*v*/) {}
  // A container field starts (kTextMap, kTextArray, kUintArray, kMap, kMapArray): a
  // repeated key starts it afresh.
  virtual void onBegin(int /*id*/) {}
  // One map of a kMapArray field starts; the fields that follow are its own.
  virtual void onBeginElement(int /*id*/) {}
};

// Decodes `value`, a CBOR map with the fields of `schema`, into `receiver`. Returns nothing
// on success, else why the value is bad.
std::optional<std::string> readCborMap(std::string_view value, const CborSchema& schema,
                                       CborReceiver& receiver);

// nlohmann's CBOR reader recurses once per level of nesting, and once per chunk of an
// indefinite-length string nested in another, so a value of a million nested arrays or
// strings (1 MB) overflows the stack. Both readers here first walk the value's shape
// (iteratively) and refuse what nlohmann's to_cbor never writes: nesting deeper than
// this, indefinite lengths, tags. The index's own values and the index API's bodies
// nest a few levels.
inline constexpr size_t kMaxCborDepth = 128;
bool cborShapeIsSafe(std::string_view value);

// `value` as a JSON DOM (as nlohmann::json::from_cbor, strict): discarded when it is not
// CBOR or its shape is not safe (cborShapeIsSafe).
nlohmann::json parseCborDom(std::string_view value);

}  // namespace granary::index_kv

#include "spec.h"

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <utility>

namespace granary::bench {
namespace {

Result<uint64_t> parseUnsigned(std::string_view text, std::string_view what) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return fail(Status::invalidArgument(fmt::format("bad {} '{}'", what, text)));
  }
  return v;
}

Result<bool> parseYesNo(std::string_view text, std::string_view what) {
  if (text == "yes" || text == "true" || text == "1") return true;
  if (text == "no" || text == "false" || text == "0") return false;
  return fail(Status::invalidArgument(fmt::format("bad {} '{}' (yes or no)", what, text)));
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    size_t at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return out;
    text.remove_prefix(at + 1);
  }
}

Result<std::vector<MixEntry>> parseMix(std::string_view text) {
  std::vector<MixEntry> mix;
  for (std::string_view part : split(text, '+')) {
    size_t colon = part.find(':');
    auto op = parseOp(part.substr(0, colon));
    if (!op || colon == std::string_view::npos || *op == Op::kList) {
      return fail(Status::invalidArgument(
          fmt::format("bad mix entry '{}' (op:weight, op one of put get range head delete)", part)));
    }
    auto weight = parseUnsigned(part.substr(colon + 1), "mix weight");
    if (!weight) return fail(weight.error());
    if (*weight == 0 || *weight > 1'000'000) {
      return fail(Status::invalidArgument(fmt::format("bad mix weight in '{}'", part)));
    }
    mix.push_back({*op, static_cast<unsigned>(*weight)});
  }
  return mix;
}

}  // namespace

std::string_view opName(Op op) {
  switch (op) {
    case Op::kPut: return "put";
    case Op::kGet: return "get";
    case Op::kRange: return "range";
    case Op::kHead: return "head";
    case Op::kList: return "list";
    case Op::kDelete: return "delete";
  }
  return "?";
}

std::optional<Op> parseOp(std::string_view name) {
  for (Op op : kAllOps) {
    if (opName(op) == name) return op;
  }
  return std::nullopt;
}

bool WorkloadSpec::needsObjects() const {
  if (!op) return true;  // a mix reads prepared objects
  return *op != Op::kPut;
}

std::string WorkloadSpec::describe() const {
  std::string out = fmt::format("name={},", name);
  if (op) {
    out += fmt::format("op={}", opName(*op));
  } else {
    out += "mix=";
    for (size_t i = 0; i < mix.size(); ++i) {
      out += fmt::format("{}{}:{}", i ? "+" : "", opName(mix[i].op), mix[i].weight);
    }
  }
  out += fmt::format(",size={}", formatSize(size));
  if (op == Op::kRange) out += fmt::format(",range={}-{}", formatSize(range_min), formatSize(range_max));
  if (op == Op::kList) out += fmt::format(",page={}", list_page);
  out += fmt::format(",objects={},concurrency={}", objects, concurrency);
  if (count) out += fmt::format(",count={}", count);
  if (rate > 0) out += fmt::format(",rate={}", rate);
  out += fmt::format(",prefix={},prepare={},cleanup={}", prefix, prepare ? "auto" : "skip",
                     cleanup ? "yes" : "no");
  return out;
}

Result<uint64_t> parseSize(std::string_view text) {
  static constexpr std::pair<std::string_view, uint64_t> kUnits[] = {
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40},
      {"KB", 1000ull},     {"MB", 1000'000ull}, {"GB", 1000'000'000ull},
      {"k", 1ull << 10},   {"K", 1ull << 10},   {"M", 1ull << 20},   {"G", 1ull << 30},
      {"B", 1}};
  uint64_t unit = 1;
  for (const auto& [suffix, mult] : kUnits) {
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      text.remove_suffix(suffix.size());
      unit = mult;
      break;
    }
  }
  auto v = parseUnsigned(text, "size");
  if (!v) return v;
  if (*v > UINT64_MAX / unit) return fail(Status::invalidArgument("size too large"));
  return *v * unit;
}

Result<double> parseSeconds(std::string_view text) {
  double unit = 1;
  if (text.ends_with("ms")) {
    unit = 0.001;
    text.remove_suffix(2);
  } else if (text.ends_with("s")) {
    text.remove_suffix(1);
  } else if (text.ends_with("m")) {
    unit = 60;
    text.remove_suffix(1);
  } else if (text.ends_with("h")) {
    unit = 3600;
    text.remove_suffix(1);
  }
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !(v >= 0) ||
      !std::isfinite(v)) {
    return fail(Status::invalidArgument(fmt::format("bad duration '{}'", text)));
  }
  return v * unit;
}

std::string formatSize(uint64_t bytes) {
  static constexpr std::pair<const char*, uint64_t> kUnits[] = {
      {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}};
  for (const auto& [suffix, mult] : kUnits) {
    if (bytes >= mult && bytes % mult == 0) return fmt::format("{}{}", bytes / mult, suffix);
  }
  return fmt::format("{}B", bytes);
}

Result<WorkloadSpec> parseWorkload(std::string_view text) {
  WorkloadSpec spec;
  bool have_objects = false;
  for (std::string_view field : split(text, ',')) {
    if (field.empty()) continue;
    size_t eq = field.find('=');
    if (eq == std::string_view::npos) {
      return fail(Status::invalidArgument(fmt::format("bad field '{}' (name=value)", field)));
    }
    std::string_view name = field.substr(0, eq);
    std::string_view value = field.substr(eq + 1);
    Result<uint64_t> num = 0;
    if (name == "name") {
      if (value.empty() || value.find_first_of("/ \t") != std::string_view::npos) {
        return fail(Status::invalidArgument(fmt::format("bad workload name '{}'", value)));
      }
      spec.name = std::string(value);
    } else if (name == "op") {
      if (value == "mix") {
        spec.op.reset();
        continue;
      }
      spec.op = parseOp(value);
      if (!spec.op) {
        return fail(Status::invalidArgument(
            fmt::format("unknown op '{}' (put get range head list delete mix)", value)));
      }
    } else if (name == "mix") {
      auto mix = parseMix(value);
      if (!mix) return fail(mix.error());
      spec.mix = std::move(*mix);
      spec.op.reset();
    } else if (name == "size") {
      num = parseSize(value);
      if (num) spec.size = *num;
    } else if (name == "range") {
      size_t dash = value.find('-');
      auto lo = parseSize(value.substr(0, dash));
      auto hi = dash == std::string_view::npos ? lo : parseSize(value.substr(dash + 1));
      if (!lo || !hi || *lo == 0 || *lo > *hi) {
        return fail(Status::invalidArgument(fmt::format("bad range '{}' (MIN-MAX)", value)));
      }
      spec.range_min = *lo;
      spec.range_max = *hi;
    } else if (name == "objects") {
      num = parseUnsigned(value, "objects");
      if (num) spec.objects = *num;
      have_objects = true;
    } else if (name == "concurrency") {
      num = parseUnsigned(value, "concurrency");
      if (num && (*num == 0 || *num > 10'000)) {
        return fail(Status::invalidArgument("concurrency must be 1..10000"));
      }
      if (num) spec.concurrency = static_cast<unsigned>(*num);
    } else if (name == "count") {
      num = parseUnsigned(value, "count");
      if (num) spec.count = *num;
    } else if (name == "rate") {
      double r = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), r);
      if (ec != std::errc() || end != value.data() + value.size() || !(r > 0) || r > 1e7) {
        return fail(Status::invalidArgument(
            fmt::format("bad rate '{}' (operations a second, above 0)", value)));
      }
      spec.rate = r;
    } else if (name == "page") {
      num = parseUnsigned(value, "page");
      if (num && (*num == 0 || *num > 1000)) {
        return fail(Status::invalidArgument("page must be 1..1000"));
      }
      if (num) spec.list_page = *num;
    } else if (name == "prefix") {
      spec.prefix = std::string(value);
    } else if (name == "prepare") {
      if (value != "auto" && value != "skip") {
        return fail(Status::invalidArgument("prepare must be auto or skip"));
      }
      spec.prepare = value == "auto";
    } else if (name == "cleanup") {
      auto yes = parseYesNo(value, "cleanup");
      if (!yes) return fail(yes.error());
      spec.cleanup = *yes;
    } else {
      return fail(Status::invalidArgument(fmt::format("unknown field '{}'", name)));
    }
    if (!num) return fail(num.error());
  }
  if (!spec.op && spec.mix.empty()) {
    return fail(Status::invalidArgument("a workload needs op=... or mix=..."));
  }
  if (!have_objects && spec.needsObjects()) spec.objects = spec.op == Op::kDelete ? 10'000 : 100;
  if (spec.needsObjects() && spec.objects == 0) {
    return fail(Status::invalidArgument("this op reads prepared objects: objects must be > 0"));
  }
  if (spec.op == Op::kRange && spec.range_min > spec.size) {
    return fail(Status::invalidArgument("range MIN is larger than the object size"));
  }
  return spec;
}

}  // namespace granary::bench

// ContainerParser: format names, sniffing, sticky errors; the formats live in
// tar_scanner.cc and warc_scanner.cc, gzip members in gzip_member.cc.
#include "granary/index_kv/container_parser.h"

#include <algorithm>

#include "index_kv/container_scanners.h"

namespace granary::index_kv {

std::string_view containerFormatName(ContainerFormat f) {
  switch (f) {
    case ContainerFormat::kAuto: return "auto";
    case ContainerFormat::kTar: return "tar";
    case ContainerFormat::kWarc: return "warc";
    case ContainerFormat::kWarcGz: return "warc.gz";
  }
  return "auto";
}

std::optional<ContainerFormat> parseContainerFormat(std::string_view name) {
  for (auto f : {ContainerFormat::kAuto, ContainerFormat::kTar, ContainerFormat::kWarc,
                 ContainerFormat::kWarcGz}) {
    if (name == containerFormatName(f)) {
      return f;
    }
  }
  return std::nullopt;
}

std::optional<WarcKey> parseWarcKey(std::string_view name) {
  if (name == "uri") {
    return WarcKey::kTargetUri;
  }
  if (name == "record-id") {
    return WarcKey::kRecordId;
  }
  return std::nullopt;
}

bool isNotIndexable(const Status& status) {
  return status.code() == Status::Code::kInvalidArgument &&
         status.message().starts_with(kNotIndexablePrefix);
}

class ContainerParser::Impl {
 public:
  explicit Impl(const ParserOptions& o) : options_(o) {
    switch (o.format) {
      case ContainerFormat::kAuto: break;
      case ContainerFormat::kTar: scanner_ = makeTarScanner(o); break;
      case ContainerFormat::kWarc: scanner_ = makeWarcScanner(o); break;
      case ContainerFormat::kWarcGz: scanner_ = makeWarcGzScanner(o, false); break;
    }
  }

  Status feed(std::span<const uint8_t> data, std::vector<ParsedRecord>& out) {
    if (!error_.isOk()) {
      return error_;
    }
    if (finished_) {
      return Status::internal("ContainerParser::feed() after finish()");
    }
    bytes_fed_ += data.size();
    if (!scanner_) {
      // Sniff: gzip magic decides at once; otherwise wait for one tar header block.
      const size_t take = std::min(kSniffBytes - sniff_.size(), data.size());
      sniff_.insert(sniff_.end(), data.begin(), data.begin() + take);
      data = data.subspan(take);
      if (!decide(false)) {
        return error_;  // ok: still sniffing, or the not-indexable verdict
      }
      if (Status s = record(scanner_->feed(sniff_, out)); !s.isOk()) {
        return s;
      }
      sniff_ = {};
    }
    if (zero_lead_ && !std::all_of(data.begin(), data.end(), [](uint8_t b) { return b == 0; })) {
      // A tar that starts with a zero block has ended (or is malformed) there: what follows
      // is something else that starts with zeros (an ISO image, a disk image).
      return record(notIndexable("starts with a zero block but is not all zeros: not a tar "
                                 "or WARC container"));
    }
    return record(scanner_->feed(data, out));
  }

  Status finish(std::vector<ParsedRecord>& out) {
    if (!error_.isOk() || finished_) {
      return error_;
    }
    finished_ = true;
    if (!scanner_) {
      if (!decide(true)) {
        return error_;
      }
      if (Status s = record(scanner_->feed(sniff_, out)); !s.isOk()) {
        return s;
      }
      sniff_ = {};
    }
    return record(scanner_->finish(out));
  }

  ContainerFormat format() const {
    return scanner_ ? scanner_->format() : options_.format;
  }

  uint64_t bytesFed() const { return bytes_fed_; }

 private:
  static constexpr size_t kSniffBytes = 512;

  Status record(Status s) {
    if (!s.isOk()) {
      error_ = s;
    }
    return s;
  }

  // Picks the scanner from sniff_. False while undecided or when not indexable.
  bool decide(bool at_eof) {
    const auto& b = sniff_;
    if (b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
      scanner_ = makeWarcGzScanner(options_, true);
      return true;
    }
    const bool warc_magic = b.size() >= 5 && std::equal(b.begin(), b.begin() + 5, "WARC/");
    if (b.size() == kSniffBytes) {
      // Tar first: a tar whose first member is named "WARC/..." must stay a tar.
      if (looksLikeTarHeader(std::span<const uint8_t, 512>(b.data(), 512))) {
        scanner_ = makeTarScanner(options_);
        // All zeros: an empty tar only if all the rest is zeros too (feed() checks).
        zero_lead_ = std::all_of(b.begin(), b.end(), [](uint8_t c) { return c == 0; });
        return true;
      }
    } else if (!at_eof) {
      return false;
    }
    if (warc_magic) {
      scanner_ = makeWarcScanner(options_);
      return true;
    }
    error_ = notIndexable(b.empty() ? "empty input is not a tar or WARC container"
                                    : "not a tar or WARC container (no valid tar header, no "
                                      "\"WARC/\" record, no gzip magic at byte offset 0)");
    return false;
  }

  const ParserOptions options_;
  std::unique_ptr<FormatScanner> scanner_;
  std::vector<uint8_t> sniff_;
  Status error_;
  bool finished_ = false;
  bool zero_lead_ = false;  // sniffed a tar from an all-zero first block
  uint64_t bytes_fed_ = 0;
};

ContainerParser::ContainerParser(const ParserOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

ContainerParser::~ContainerParser() = default;

Status ContainerParser::feed(std::span<const uint8_t> data, std::vector<ParsedRecord>& out) {
  return impl_->feed(data, out);
}

Status ContainerParser::finish(std::vector<ParsedRecord>& out) { return impl_->finish(out); }

ContainerFormat ContainerParser::format() const { return impl_->format(); }

uint64_t ContainerParser::bytesFed() const { return impl_->bytesFed(); }

}  // namespace granary::index_kv

// Multipart uploads: CreateMultipartUpload, UploadPart, CompleteMultipartUpload,
// AbortMultipartUpload, ListParts and ListMultipartUploads. A part is ingested exactly like
// a PUT body (ingest.h), always striped, and recorded in the index (UploadPartCopy writes
// a byte range of another object as new stripes instead, copy_source.h); Complete builds the
// object's manifest from the parts' stripes without copying a byte: each stripe keeps its
// part's blob version, and the parts' drive tables are merged into one.
#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "copy_source.h"
#include "digest.h"
#include "granary/common/clock.h"
#include "granary/common/hex.h"
#include "granary/common/strings.h"
#include "handlers.h"
#include "ingest.h"
#include "records.h"
#include "s3_xml.h"
#include "uri.h"

namespace granary::gateway {

namespace {

constexpr uint32_t kMaxPartNumber = 10000;
constexpr uint64_t kMaxPartSize = 5ull << 30;     // AWS: 5 GiB
constexpr uint64_t kMinPartSize = 5ull << 20;     // AWS: 5 MiB, except the last part
constexpr uint64_t kMaxObjectSize = 5ull << 40;   // AWS: 5 TiB
constexpr size_t kMaxCompleteBody = 2 * 1024 * 1024;  // 10000 parts with checksums
constexpr size_t kPartsPage = 1000;
// Complete loads the parts again when one was replaced under it, at most this many times.
constexpr int kCompleteAttempts = 3;

S3Error noSuchUpload() {
  return {S3ErrorCode::kNoSuchUpload,
          "The specified upload does not exist. The upload ID may be invalid, or the upload "
          "may have been aborted or completed."};
}

// The uploadId parameter; one that this gateway cannot have minted is NoSuchUpload.
S3Result<std::string> uploadIdOf(const S3Request& req) {
  std::string id(req.queryValue("uploadId").value_or(""));
  if (!VersionId::fromHex(id)) return std::unexpected(noSuchUpload());
  return id;
}

// UploadPart's and UploadPartCopy's target: partNumber (1..10000) and uploadId.
struct PartTarget {
  uint32_t number = 0;
  std::string upload_id;
};
S3Result<PartTarget> partTargetOf(const S3Request& req) {
  auto number = parseDecimalU64(req.queryValue("partNumber").value_or(""));
  if (!number || *number < 1 || *number > kMaxPartNumber) {
    return std::unexpected(S3Error{S3ErrorCode::kInvalidArgument,
                                   "Part number must be an integer between 1 and 10000, inclusive"});
  }
  auto id = uploadIdOf(req);
  if (!id) return std::unexpected(id.error());
  return PartTarget{static_cast<uint32_t>(*number), std::move(*id)};
}

// Index failures of an operation on an upload. Its kNotFound is NoSuchBucket when its
// bucket is gone (or never was: the root user's requests reach here unchecked), else
// NoSuchUpload, as S3 answers.
Task<S3Error> uploadError(GatewayContext& ctx, const S3Request& req, const Status& st) {
  if (!st.isNotFound()) co_return fromStatus(st);
  auto bucket = co_await lookupBucket(ctx, req.bucket);
  if (!bucket && bucket.error().isNotFound()) co_return noSuchBucket();
  co_return noSuchUpload();
}
// The answer to it.
Task<S3Response> uploadFailure(GatewayContext& ctx, const S3Request& req, const Status& st) {
  S3Error err = co_await uploadError(ctx, req, st);
  co_return errorResponse(err, req);
}

struct LoadedUpload {
  index_kv::MultipartUpload upload;
  std::map<uint32_t, index_kv::PartInfo> parts;
};

// A multipart object's ETag: the MD5 of its parts' MD5s (hex, unquoted), "-", their
// count; nullopt if one is not an MD5.
template <typename Parts, typename EtagOf>
std::optional<std::string> multipartEtag(const Parts& parts, EtagOf etag_of) {
  Digest md5(Digest::Kind::kMd5);
  for (const auto& part : parts) {
    auto raw = fromHex(etag_of(part));
    if (!raw || raw->size() != 16) return std::nullopt;
    md5.update(std::span<const uint8_t>(*raw));
  }
  return toHex(md5.finish()) + "-" + std::to_string(parts.size());
}

// CompleteMultipartUpload's answer for the object `m` (Location from the request's Host).
S3Response completedAnswer(const S3Request& req, const index_kv::Manifest& m) {
  std::string host(req.header("host").value_or("localhost"));
  S3Response res = xmlResponse(completeMultipartUploadXml("http://" + host + req.path,
                                                          req.bucket, req.key, m.etag,
                                                          m.checksum));
  setRecordIndexHeaders(res, m.records);
  return res;
}

// The EC profile the parts' stripes were written with, which the object takes. Each part
// has the profile of the gateway that wrote it: an upload that spans a change of the map's
// profile (or a rolling update of it) can hold parts of two, and one object has one. A
// part stored by a release before parts recorded their profile is taken to have this
// gateway's, unless that cannot be (its stripes name another number of fragments) or
// another part recorded another profile (the map changed during the upload: which one
// the old part has is unknown). InvalidPart names a part to upload again.
S3Result<ec::EcProfile> partsProfile(GatewayContext& ctx,
                                     const std::vector<const index_kv::PartInfo*>& parts) {
  const ec::EcProfile ours = ctx.data.code().profile();
  auto profileOf = [&](const index_kv::PartInfo* p) { return p->ec.k > 0 ? p->ec : ours; };
  auto again = [&](const index_kv::PartInfo* p, std::string_view why) {
    return s3fail(S3ErrorCode::kInvalidPart,
                  fmt::format("Part {} {}: the cluster's erasure code changed during the "
                              "upload. Upload part {} again.",
                              p->part_number, why, p->part_number));
  };
  const index_kv::PartInfo* unprofiled = nullptr;
  const index_kv::PartInfo* other = nullptr;  // the first with a profile not ours
  for (const index_kv::PartInfo* part : parts) {
    if (part->stripes.empty()) continue;  // an empty part: no bytes, no code
    if (part->ec.k == 0) {
      if (part->stripes.front().drives.size() != static_cast<size_t>(ours.total())) {
        return again(part, "was stored by an older release with another erasure code");
      }
      if (!unprofiled) unprofiled = part;
    } else if (part->ec != ours && !other) {
      other = part;
    }
  }
  if (!other) return ours;
  // Parts of two profiles (an old part counts as ours) unless all are `other`'s.
  const bool mixed = std::any_of(parts.begin(), parts.end(), [&](const index_kv::PartInfo* p) {
    return !p->stripes.empty() && profileOf(p) != other->ec;
  });
  if (!mixed) return other->ec;
  if (unprofiled) {
    return again(unprofiled, "was stored by an older release, which kept no record of its "
                             "erasure code");
  }
  return again(other, fmt::format("was stored with erasure code {}+{} and other parts with "
                                  "{}+{}",
                                  other->ec.k, other->ec.m, ours.k, ours.m));
}

// The manifest of the completed object: `parts` in order, stripes referenced in place.
S3Result<index_kv::Manifest> assemble(GatewayContext& ctx, const index_kv::MultipartUpload& up,
                                      const std::vector<const index_kv::PartInfo*>& parts) {
  index_kv::Manifest m;
  m.version = VersionId::generate(ctx.deps.clock, ctx.deps.random);
  auto profile = partsProfile(ctx, parts);
  if (!profile) return std::unexpected(profile.error());
  m.ec = *profile;
  m.upload_id = up.upload_id;
  m.content_type = up.content_type;
  m.metadata = up.metadata;
  m.headers = up.headers;
  m.tags = up.tags;
  std::map<std::string, uint16_t> drive_index;
  const S3Error corrupt{S3ErrorCode::kInternalError,
                        "We encountered an internal error. Please try again."};
  auto etag = multipartEtag(parts, [](const index_kv::PartInfo* p) { return p->etag; });
  if (!etag) return std::unexpected(corrupt);
  m.etag = std::move(*etag);
  for (const index_kv::PartInfo* part : parts) {
    m.size += part->size;
    std::vector<uint16_t> remap(part->drives.size());
    for (size_t d = 0; d < part->drives.size(); ++d) {
      auto [it, inserted] =
          drive_index.emplace(part->drives[d], static_cast<uint16_t>(m.drives.size()));
      if (inserted) {
        if (m.drives.size() >= 0xffff) return std::unexpected(corrupt);
        m.drives.push_back(part->drives[d]);
      }
      remap[d] = it->second;
    }
    for (const auto& stripe : part->stripes) {
      index_kv::StripeLayout s = stripe;
      for (auto& d : s.drives) {
        if (d >= remap.size()) return std::unexpected(corrupt);
        d = remap[d];
      }
      m.stripes.push_back(std::move(s));
    }
  }
  m.mtime_unix_nanos = ctx.deps.clock.nowUnixNanos();
  return m;
}

// x-amz-checksum-algorithm and x-amz-checksum-type of CreateMultipartUpload, normalised:
// ("", "") when absent; the type defaults to FULL_OBJECT for CRC64NVME, else COMPOSITE.
S3Result<std::pair<std::string, std::string>> uploadChecksum(const S3Request& req) {
  auto named = checksumAlgorithmHeader(req);
  if (!named) return std::unexpected(named.error());
  std::string type(req.header("x-amz-checksum-type").value_or(""));
  for (auto& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!*named) {
    if (!type.empty()) {
      return s3fail(S3ErrorCode::kInvalidRequest,
                    "The x-amz-checksum-type header can only be used with the "
                    "x-amz-checksum-algorithm header.");
    }
    return std::pair<std::string, std::string>();
  }
  const ChecksumAlgorithm alg = **named;
  if (type.empty()) type = alg == ChecksumAlgorithm::kCrc64Nvme ? "FULL_OBJECT" : "COMPOSITE";
  const bool ok = (type == "FULL_OBJECT" && isCrc(alg)) ||
                  (type == "COMPOSITE" && alg != ChecksumAlgorithm::kCrc64Nvme);
  if (!ok) {
    return s3fail(S3ErrorCode::kInvalidRequest,
                  "The " + type + " checksum type cannot be used with the " +
                      std::string(checksumName(alg)) + " checksum algorithm.");
  }
  return std::pair(std::string(checksumName(alg)), type);
}

// What the client says the whole object is, against what its parts make: the size in
// x-amz-mp-object-size, and the checksum of the upload's algorithm in its
// x-amz-checksum-* header ("value" or "value-N" for a composite one). Nullopt when they
// agree or were not given; a checksum of another algorithm than the object has is not
// compared (the object keeps the one it has).
std::optional<S3Error> checkClaimedObject(const S3Request& req, const index_kv::Manifest& m) {
  if (auto size = req.header("x-amz-mp-object-size")) {
    const auto v = parseDecimalU64(*size);
    if (!v) {
      return S3Error{S3ErrorCode::kInvalidRequest,
                     "Value for x-amz-mp-object-size header is invalid."};
    }
    if (*v != m.size) {
      return S3Error{S3ErrorCode::kInvalidRequest,
                     fmt::format("The provided 'x-amz-mp-object-size' header value {} does not "
                                 "match what was computed: {}",
                                 *v, m.size)};
    }
  }
  const auto alg = checksumFromName(m.checksum.algorithm);
  if (!alg || m.checksum.value.empty()) return std::nullopt;
  if (auto type = req.header("x-amz-checksum-type");
      type && !asciiIEquals(*type, m.checksum.type)) {
    return S3Error{S3ErrorCode::kInvalidRequest,
                   fmt::format("The upload was created using the {} checksum mode. The "
                               "complete request must use the same checksum mode.",
                               m.checksum.type)};
  }
  const auto claimed = req.header(checksumHeader(*alg));
  if (!claimed) return std::nullopt;
  // The value, and the part count after '-' when one is given on either side.
  const auto split = [](std::string_view v) {
    const size_t dash = v.find('-');
    return std::pair(v.substr(0, dash),
                     dash == std::string_view::npos ? std::string_view() : v.substr(dash + 1));
  };
  const auto [claimed_value, claimed_parts] = split(*claimed);
  const auto [value, parts] = split(m.checksum.value);
  if (claimed_value != value || (!claimed_parts.empty() && claimed_parts != parts)) {
    return S3Error{S3ErrorCode::kBadDigest,
                   "The " + std::string(checksumName(*alg)) +
                       " you specified did not match the calculated checksum."};
  }
  return std::nullopt;
}

// The completed object's checksum: empty unless the upload named an algorithm and every
// chosen part carries a checksum of it.
index_kv::ObjectChecksum objectChecksum(const index_kv::MultipartUpload& up,
                                        const std::vector<const index_kv::PartInfo*>& parts) {
  auto alg = checksumFromName(up.checksum_algorithm);
  if (!alg) return {};
  std::vector<PartChecksum> sums;
  sums.reserve(parts.size());
  for (const index_kv::PartInfo* p : parts) {
    if (p->checksum.algorithm != up.checksum_algorithm) return {};
    sums.push_back(PartChecksum{p->checksum.value, p->size});
  }
  const bool full = up.checksum_type == "FULL_OBJECT" ||
                    (up.checksum_type.empty() && *alg == ChecksumAlgorithm::kCrc64Nvme);
  auto value = full ? combinedCrc(*alg, sums) : compositeChecksum(*alg, sums);
  if (!value) return {};
  return index_kv::ObjectChecksum{up.checksum_algorithm, *value,
                                  full ? "FULL_OBJECT" : "COMPOSITE"};
}

// x-amz-copy-source-range "bytes=first-last" (inclusive) against a source of `size`
// bytes: {first, length}. Absent: the whole source.
S3Result<std::pair<uint64_t, uint64_t>> copySourceRange(const S3Request& req, uint64_t size) {
  auto header = req.header("x-amz-copy-source-range");
  if (!header) return std::pair<uint64_t, uint64_t>(0, size);
  // S3's two messages: one for a value of the wrong form, one for a range off the source.
  const S3Error malformed{S3ErrorCode::kInvalidArgument,
                          "The x-amz-copy-source-range value must be of the form "
                          "bytes=first-last where first and last are the zero-based offsets "
                          "of the first and last bytes to copy"};
  std::string_view spec = *header;
  if (!spec.starts_with("bytes=")) return std::unexpected(malformed);
  spec.remove_prefix(6);
  size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return std::unexpected(malformed);
  auto first = parseDecimalU64(spec.substr(0, dash));
  auto last = parseDecimalU64(spec.substr(dash + 1));
  if (!first || !last) return std::unexpected(malformed);
  if (*first > *last || *last >= size) {
    return s3fail(S3ErrorCode::kInvalidArgument,
                  "Range specified is not valid for source object of size: " +
                      std::to_string(size));
  }
  return std::pair<uint64_t, uint64_t>(*first, *last - *first + 1);
}

}  // namespace

Task<S3Response> createMultipartUpload(GatewayContext& ctx, const S3Request& req) {
  index_kv::Manifest attrs;
  if (auto st = collectMetadata(req, attrs); !st) co_return errorResponse(st.error(), req);
  if (auto st = collectTags(req, attrs); !st) co_return errorResponse(st.error(), req);
  index_kv::MultipartUpload up;
  up.upload_id = VersionId::generate(ctx.deps.clock, ctx.deps.random).toHex();
  up.bucket = req.bucket;
  up.key = req.key;
  up.owner = req.principal;
  up.initiated_unix_nanos = ctx.deps.clock.nowUnixNanos();
  up.content_type = std::move(attrs.content_type);
  up.metadata = std::move(attrs.metadata);
  up.headers = std::move(attrs.headers);
  up.tags = std::move(attrs.tags);
  auto checksum = uploadChecksum(req);
  if (!checksum) co_return errorResponse(checksum.error(), req);
  up.checksum_algorithm = checksum->first;
  up.checksum_type = checksum->second;
  auto index_request = co_await resolveIndexRequest(ctx, req);
  if (!index_request) co_return errorResponse(index_request.error(), req);
  if (*index_request) {
    up.index_format = (*index_request)->format_name;
    up.index_key = (*index_request)->key_name;
  }
  Status st = co_await offload(ctx.pool(), [&] {
    return ctx.index().createUpload(up, req.bucket_created_unix_nanos);
  });
  if (!st.isOk()) co_return errorResponse(fromStatus(st, S3ErrorCode::kNoSuchBucket), req);
  S3Response res = xmlResponse(initiateMultipartUploadXml(req.bucket, req.key, up.upload_id));
  if (!up.checksum_algorithm.empty()) {
    res.set("x-amz-checksum-algorithm", up.checksum_algorithm);
    res.set("x-amz-checksum-type", up.checksum_type);
  }
  co_return res;
}

Task<S3Response> uploadPart(GatewayContext& ctx, const S3Request& req, const RequestAuth& auth,
                            BodySource& body) {
  auto target = partTargetOf(req);
  if (!target) co_return errorResponse(target.error(), req);
  const uint32_t number = target->number;
  const std::string upload_id = std::move(target->upload_id);
  auto upload = co_await offload(ctx.pool(), [&] {
    return ctx.index().getUpload(req.bucket, req.key, upload_id);
  });
  if (!upload) co_return co_await uploadFailure(ctx, req, upload.error());

  IngestOptions options;
  options.allow_inline = false;
  options.part = true;
  options.max_size = kMaxPartSize;
  // Parts of an upload created with a checksum algorithm carry that algorithm.
  options.required_checksum = checksumFromName(upload->checksum_algorithm);
  auto ingested = co_await ingestBody(ctx, req, auth, body, options);
  if (!ingested) {
    S3Response res = errorResponse(ingested.error().error, req);
    res.close = ingested.error().close;
    co_return res;
  }
  IngestResult& in = *ingested;

  index_kv::PartInfo part;
  part.part_number = number;
  part.size = in.size;
  part.etag = toHex(in.md5);
  part.mtime_unix_nanos = ctx.deps.clock.nowUnixNanos();
  part.version = in.version;
  part.drives = in.drives;
  part.stripes = in.stripes;
  part.ec = ctx.data.code().profile();
  if (in.checksum_algorithm) {
    part.checksum = index_kv::ObjectChecksum{std::string(checksumName(*in.checksum_algorithm)),
                                             in.checksum, "FULL_OBJECT"};
  }
  auto recorded = co_await offload(ctx.pool(), [&] {
    return ctx.index().putPart(req.bucket, req.key, upload_id, part);
  });
  if (!recorded) {
    // Aborted or completed meanwhile (or the commit failed): the part's blobs are ours.
    S3Error err = co_await uploadError(ctx, req, recorded.error());
    co_await removeBlobs(ctx, recorded.error(), in.drives, in.stripes);
    S3Response res = errorResponse(err, req);
    res.close = !body.done();
    co_return res;
  }
  S3Response res;
  res.set("ETag", "\"" + part.etag + "\"");
  if (in.checksum_algorithm) res.set(checksumHeader(*in.checksum_algorithm), in.checksum);
  co_return res;
}

namespace {

Task<S3Response> uploadPartCopyKeptAlive(GatewayContext& ctx, const S3Request& req,
                                         KeepAlive& keep_alive) {
  auto target = partTargetOf(req);
  if (!target) co_return errorResponse(target.error(), req);
  const uint32_t number = target->number;
  const std::string upload_id = std::move(target->upload_id);
  auto source = parseCopySource(*req.header("x-amz-copy-source"));
  if (!source) co_return errorResponse(source.error(), req);
  if (source->version) keep_alive.set("x-amz-copy-source-version-id", "null");
  auto upload = co_await offload(ctx.pool(), [&] {
    return ctx.index().getUpload(req.bucket, req.key, upload_id);
  });
  if (!upload) co_return co_await uploadFailure(ctx, req, upload.error());
  auto src = co_await loadCopySource(ctx, req, *source);
  if (!src) co_return errorResponse(src.error(), req);
  auto range = copySourceRange(req, src->size);
  if (!range) co_return errorResponse(range.error(), req);
  const uint64_t first = range->first;
  const uint64_t length = range->second;
  if (length > kMaxCopySource) {
    co_return errorResponse({S3ErrorCode::kInvalidRequest,
                             "The specified copy source is larger than the maximum allowable "
                             "size for a copy source: 5368709120"},
                            req);
  }

  // Written like an UploadPart body: new stripes of a new blob version, owned by the part.
  const VersionId version = VersionId::generate(ctx.deps.clock, ctx.deps.random);
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  ObjectWriter writer(ctx.data, version, req.bucket, req.key, ex, length, true);
  if (Status st = co_await writer.start(); !st.isOk()) {
    co_return errorResponse(dataPathError(st), req);
  }
  // A part of an upload created with a checksum algorithm carries that algorithm (AWS). A
  // part that copies a whole source is checked against it end to end (CopyCheck).
  const CopyCheck check(*src, first == 0 && length == src->size);
  CopySink sink(ctx, writer, &keep_alive, checksumFromName(upload->checksum_algorithm),
                check.algorithm());
  Status st = Status::ok();
  if (src->is_inline) {
    if (src->inline_data.size() < first + length) {
      st = Status::corruption("inline data shorter than the object size");
    } else {
      auto bytes = std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(src->inline_data.data()) + first, length);
      st = co_await sink.write(bytes);
    }
  } else {
    st = co_await readObjectRange(ctx.data, *src, first, length, sink, /*prepaid=*/false,
                                  BufferBudget::Holds::kLease);
  }
  if (st.isOk()) st = co_await sink.flush();
  if (st.isOk()) st = co_await writer.finish();
  if (!st.isOk()) {
    co_await writer.abandon();
    co_return errorResponse(dataPathError(st), req);
  }
  if (auto overdue = writeOverdue(ctx, version)) {
    co_await writer.abandon();
    co_return errorResponse(*overdue, req);
  }

  index_kv::PartInfo part;
  part.part_number = number;
  part.size = length;
  part.etag = toHex(sink.md5());
  part.checksum = sink.checksum();
  if (auto what = check.mismatch(part.etag, sink.checkValue()); !what.empty()) {
    co_await writer.abandon();
    co_return copyMismatchResponse(req, *source, what);
  }
  part.mtime_unix_nanos = ctx.deps.clock.nowUnixNanos();
  part.version = version;
  part.drives = writer.drives();
  part.stripes = writer.stripes();
  part.ec = ctx.data.code().profile();
  auto recorded = co_await offload(ctx.pool(), [&] {
    return ctx.index().putPart(req.bucket, req.key, upload_id, part);
  });
  if (!recorded) {
    // Aborted or completed meanwhile (or the commit failed): the part's blobs are ours.
    S3Error err = co_await uploadError(ctx, req, recorded.error());
    co_await removeBlobs(ctx, recorded.error(), part.drives, part.stripes);
    co_return errorResponse(err, req);
  }
  co_return xmlResponse(copyPartResultXml(part.etag, part.mtime_unix_nanos, part.checksum));
}

}  // namespace

Task<S3Response> uploadPartCopy(GatewayContext& ctx, const S3Request& req, BodySink& sink) {
  KeepAlive keep_alive(sink, std::chrono::milliseconds(ctx.options.keepalive_after_ms));
  S3Response res = co_await uploadPartCopyKeptAlive(ctx, req, keep_alive);
  co_return co_await keep_alive.answer(std::move(res));
}

// The answer to a Complete of an upload that is gone because it was completed: a client
// retrying a Complete whose answer it lost (a timeout, a reset) must get that answer, as
// S3 gives it, not NoSuchUpload for an object that is in place. The key's object is that
// upload's when its manifest names the upload and the listed parts give its ETag (the MD5
// of their MD5s). A manifest from before the upload id was stored names none: then its
// version must not be older than the upload id, and the ETag decides. nullopt otherwise
// (then NoSuchUpload).
Task<std::optional<S3Response>> completedBefore(GatewayContext& ctx, const S3Request& req,
                                                std::string_view upload_id,
                                                const std::vector<CompletedPart>& listed) {
  auto began = VersionId::fromHex(upload_id);
  if (!began) co_return std::nullopt;
  auto etag = multipartEtag(listed, [](const CompletedPart& p) { return p.etag; });
  if (!etag) co_return std::nullopt;
  auto current = co_await lookupObject(ctx, req.bucket, req.key);
  if (!current || current->etag != *etag) co_return std::nullopt;
  const bool same_upload = current->upload_id.empty()
                               ? current->version.createdUnixNanos() >= began->createdUnixNanos()
                               : current->upload_id == upload_id;
  if (!same_upload) co_return std::nullopt;
  co_return completedAnswer(req, *current);
}

namespace {

Task<S3Response> completeKeptAlive(GatewayContext& ctx, const S3Request& req, BodySource& body,
                                   KeepAlive& keep_alive) {
  auto parsed_id = uploadIdOf(req);
  if (!parsed_id) co_return errorResponse(parsed_id.error(), req);
  const std::string upload_id = std::move(*parsed_id);
  // Its x-amz-checksum-* header names the whole object's checksum, not the body's.
  auto xml = co_await readSmallBody(req, body, kMaxCompleteBody, ChecksumHeaderOf::kObject);
  if (!xml) co_return errorResponse(xml.error(), req);
  auto listed = parseCompleteMultipartUpload(*xml);
  if (!listed) co_return errorResponse(listed.error(), req);
  for (size_t i = 1; i < listed->size(); ++i) {
    if ((*listed)[i].part_number <= (*listed)[i - 1].part_number) {
      co_return errorResponse({S3ErrorCode::kInvalidPartOrder,
                               "The list of parts was not in ascending order. The parts list "
                               "must be specified in order by part number."},
                              req);
    }
  }

  for (int attempt = 1;; ++attempt) {
    auto loaded = co_await offload(ctx.pool(), [&]() -> Result<LoadedUpload> {
      LoadedUpload out;
      auto up = ctx.index().getUpload(req.bucket, req.key, upload_id);
      if (!up) return fail(up.error());
      out.upload = std::move(*up);
      uint32_t after = 0;
      for (;;) {
        auto page = ctx.index().listParts(req.bucket, req.key, upload_id, after, kPartsPage);
        if (!page) return fail(page.error());
        if (page->empty()) break;
        after = page->back().part_number;
        const bool more = page->size() >= kPartsPage;
        for (auto& p : *page) {
          uint32_t n = p.part_number;
          out.parts.emplace(n, std::move(p));
        }
        if (!more) break;
      }
      return out;
    });
    if (!loaded && loaded.error().isNotFound()) {
      if (auto replay = co_await completedBefore(ctx, req, upload_id, *listed)) {
        co_return std::move(*replay);
      }
    }
    if (!loaded) co_return co_await uploadFailure(ctx, req, loaded.error());

    std::vector<const index_kv::PartInfo*> chosen;
    chosen.reserve(listed->size());
    for (size_t i = 0; i < listed->size(); ++i) {
      const CompletedPart& want = (*listed)[i];
      auto it = loaded->parts.find(want.part_number);
      if (it == loaded->parts.end() || !asciiIEquals(it->second.etag, want.etag)) {
        co_return errorResponse({S3ErrorCode::kInvalidPart,
                                 "One or more of the specified parts could not be found. The part "
                                 "may not have been uploaded, or the specified entity tag may not "
                                 "match the part's entity tag."},
                                req);
      }
      // Checksums listed for the part must be the ones it was uploaded with.
      const index_kv::ObjectChecksum& stored = it->second.checksum;
      for (const auto& [name, value] : want.checksums) {
        if (stored.empty() || stored.algorithm != name || stored.value != value) {
          co_return errorResponse({S3ErrorCode::kInvalidPart,
                                   "One or more of the specified parts could not be found. The "
                                   "part may not have been uploaded, or the specified checksum "
                                   "may not match the part's checksum."},
                                  req);
        }
      }
      chosen.push_back(&it->second);
    }
    for (size_t i = 0; i + 1 < chosen.size(); ++i) {
      if (chosen[i]->size < kMinPartSize) {
        co_return errorResponse({S3ErrorCode::kEntityTooSmall,
                                 "Your proposed upload is smaller than the minimum allowed size"},
                                req);
      }
    }
    // S3's largest object (5 TiB): 10,000 parts of 5 GiB would make a ~1 GB manifest.
    uint64_t total = 0;
    for (const index_kv::PartInfo* p : chosen) total += p->size;
    if (total > kMaxObjectSize) {
      co_return errorResponse({S3ErrorCode::kEntityTooLarge,
                               "Your proposed upload exceeds the maximum allowed object size "
                               "(5 TiB)."},
                              req);
    }
    auto manifest = assemble(ctx, loaded->upload, chosen);
    if (!manifest) co_return errorResponse(manifest.error(), req);
    manifest->checksum = objectChecksum(loaded->upload, chosen);
    if (auto mismatch = checkClaimedObject(req, *manifest)) co_return errorResponse(*mismatch, req);
    auto precondition = co_await writePrecondition(ctx, req);
    if (!precondition) {
      // A retry (If-None-Match: *, If-Match) that loaded the upload before its first attempt
      // committed finds that attempt's object: the condition failed on its own work, and
      // the answer is that attempt's, not 412.
      if (precondition.error().code == S3ErrorCode::kPreconditionFailed) {
        if (auto replay = co_await completedBefore(ctx, req, upload_id, *listed)) {
          co_return std::move(*replay);
        }
      }
      co_return errorResponse(precondition.error(), req);
    }

    // Indexing reads the parts once, in order, before the commit that makes the rows visible
    // with the object (docs/record-index.md: Complete waits for it).
    std::unique_ptr<RecordIndexer> indexer;
    if (auto index_request = indexRequestOf(loaded->upload)) {
      indexer = co_await indexStoredObject(ctx, req.bucket, req.key, *manifest, *index_request,
                                           manifest->records, &keep_alive);
    }
    auto committed = co_await offload(ctx.pool(), [&] {
      return ctx.index().completeUpload(req.bucket, req.key, upload_id, *manifest, *precondition);
    });
    if (!committed) {
      if (auto plain = retryWithoutRecords(manifest->records, committed.error())) {
        manifest->records = *plain;  // a swept record set: store the object unindexed
        committed = co_await offload(ctx.pool(), [&] {
          return ctx.index().completeUpload(req.bucket, req.key, upload_id, *manifest,
                                            *precondition);
        });
      }
    }
    // Rows no commit published (and none that may have): the record sweep gets the others.
    if (indexer && (committed ? manifest->records.set.isZero()
                              : commitRefused(committed.error()))) {
      co_await offload(ctx.pool(), [&] {
        indexer->abandon();
        return 0;
      });
    }
    // Another Complete of this upload (a retry sent while this one ran) committed first.
    if (!committed && committed.error().isNotFound()) {
      if (auto replay = co_await completedBefore(ctx, req, upload_id, *listed)) {
        co_return std::move(*replay);
      }
    }
    if (!committed && committed.error().code() == Status::Code::kInvalidArgument) {
      // A listed part was replaced while we assembled the manifest (index.h): an UploadPart
      // retry whose first attempt committed late, most often with the same bytes. Load the
      // parts again: the listed ETags decide whether the new ones still make this object.
      if (attempt < kCompleteAttempts) continue;
      co_return errorResponse({S3ErrorCode::kInvalidPart,
                               "A part was replaced while the upload was being completed."},
                              req);
    }
    if (!committed) {
      const Status& st = committed.error();
      if (st.code() == Status::Code::kPreconditionFailed) {
        co_return errorResponse(writeCommitError(st, *precondition), req);
      }
      co_return co_await uploadFailure(ctx, req, st);
    }

    ctx.metrics.containerIndexed(manifest->records);
    co_return completedAnswer(req, *manifest);
  }
}

}  // namespace

Task<S3Response> completeMultipartUpload(GatewayContext& ctx, const S3Request& req,
                                         BodySource& body, BodySink& sink) {
  KeepAlive keep_alive(sink, std::chrono::milliseconds(ctx.options.keepalive_after_ms));
  S3Response res = co_await completeKeptAlive(ctx, req, body, keep_alive);
  co_return co_await keep_alive.answer(std::move(res));
}

Task<S3Response> abortMultipartUpload(GatewayContext& ctx, const S3Request& req) {
  auto parsed_id = uploadIdOf(req);
  if (!parsed_id) co_return errorResponse(parsed_id.error(), req);
  const std::string upload_id = std::move(*parsed_id);
  Status st = co_await offload(ctx.pool(), [&] {
    return ctx.index().abortUpload(req.bucket, req.key, upload_id);
  });
  if (!st.isOk()) co_return co_await uploadFailure(ctx, req, st);
  S3Response res;
  res.status = 204;
  co_return res;
}

Task<S3Response> listParts(GatewayContext& ctx, const S3Request& req) {
  ListPartsParams p;
  p.bucket = req.bucket;
  p.key = req.key;
  auto parsed_id = uploadIdOf(req);
  if (!parsed_id) co_return errorResponse(parsed_id.error(), req);
  p.upload_id = std::move(*parsed_id);
  if (auto marker = req.queryValue("part-number-marker")) {
    auto n = s3Integer(*marker);
    if (!n) {
      co_return errorResponse({S3ErrorCode::kInvalidArgument,
                               "Provided part-number-marker not an integer or within integer "
                               "range"},
                              req);
    }
    // Past the last part number there is nothing more to list (an empty page).
    p.part_number_marker = std::min<uint32_t>(*n, kMaxPartNumber);
  }
  auto max = maxParam(req, "max-parts");
  if (!max) co_return errorResponse(max.error(), req);
  p.max_parts = *max;

  struct Page {
    index_kv::MultipartUpload upload;
    std::vector<index_kv::PartInfo> parts;
  };
  enum class Missing { kBucket, kUpload };
  std::optional<Missing> missing;  // which one a NotFound names
  auto page = co_await offload(ctx.pool(), [&]() -> Result<Page> {
    Page out;
    auto bucket = ctx.index().getBucket(req.bucket);
    if (!bucket) {
      missing = Missing::kBucket;
      return fail(bucket.error());
    }
    missing = Missing::kUpload;
    auto up = ctx.index().getUpload(req.bucket, req.key, p.upload_id);
    if (!up) return fail(up.error());
    out.upload = std::move(*up);
    auto parts =
        ctx.index().listParts(req.bucket, req.key, p.upload_id, p.part_number_marker,
                              p.max_parts + 1);
    if (!parts) return fail(parts.error());
    out.parts = std::move(*parts);
    return out;
  });
  if (!page && missing == Missing::kBucket) {
    co_return errorResponse(fromStatus(page.error(), S3ErrorCode::kNoSuchBucket), req);
  }
  if (!page) co_return co_await uploadFailure(ctx, req, page.error());
  p.owner_id = ctx.credentials.ownerId(page->upload.owner);
  p.checksum_algorithm = page->upload.checksum_algorithm;
  p.checksum_type = page->upload.checksum_type;
  if (page->parts.size() > p.max_parts) {
    p.truncated = p.max_parts > 0;  // (none asked for: no marker to go on from)
    page->parts.resize(p.max_parts);
  }
  co_return xmlResponse(listPartsXml(p, page->parts));
}

namespace {

// The page of uploads `p` asks for, read from the index: keys with the delimiter after
// the prefix roll into one common prefix each, and the listing seeks past the rest of a
// prefix's keys (UTF-8 keys never hold the byte 0xFF, so prefix + "\xff" is after all of
// them) rather than reading them. A marker inside a prefix resumes after that prefix.
Result<UploadsPage> readUploadsPage(index_kv::Index& index, const ListUploadsParams& p) {
  UploadsPage out;
  if (p.max_uploads == 0) return out;  // none asked for, and nothing said of more
  index_kv::ListUploadsRequest lr;
  lr.prefix = p.prefix;
  lr.key_marker = p.key_marker;
  lr.upload_id_marker = p.upload_id_marker;
  auto rolled = [&](std::string_view key) -> std::optional<std::string> {
    if (p.delimiter.empty() || !key.starts_with(p.prefix)) return std::nullopt;
    const size_t at = key.find(p.delimiter, p.prefix.size());
    if (at == std::string_view::npos) return std::nullopt;
    return std::string(key.substr(0, at + p.delimiter.size()));
  };
  auto skip_past = [&](const std::string& prefix) {
    lr.key_marker = prefix + '\xff';
    lr.upload_id_marker.clear();
  };
  if (auto group = rolled(lr.key_marker)) skip_past(*group);
  // With a delimiter, pages of a few: the rest of a page that meets a prefix is dropped
  // (the next read seeks past the prefix). After a prefix, one row, then twice as many
  // each read that meets none: uploads each under their own prefix cost a row a read, not
  // a batch (64,000 rows decoded for a page of 1,000 prefixes).
  constexpr size_t kRollingBatch = 64;
  size_t batch = kRollingBatch;
  size_t count = 0;
  for (;;) {
    const size_t left = p.max_uploads - count;
    lr.max_uploads = p.delimiter.empty() ? left : std::min(left, batch);
    auto page = index.listUploads(p.bucket, lr);
    if (!page) return fail(page.error());
    bool reseek = false;
    for (auto& u : page->uploads) {
      if (auto group = rolled(u.key)) {
        out.common_prefixes.push_back(*group);
        out.next_key_marker = *group;
        out.next_upload_id_marker.clear();
        ++count;
        skip_past(*group);
        reseek = true;
        break;
      }
      out.next_key_marker = lr.key_marker = u.key;  // the next read resumes after it
      out.next_upload_id_marker = lr.upload_id_marker = u.upload_id;
      out.uploads.push_back(std::move(u));
      ++count;
    }
    batch = reseek ? 1 : std::min(kRollingBatch, 2 * batch);
    if (!reseek && !page->truncated) break;  // the index has no more
    if (count == p.max_uploads) {
      // Full: more follow if the index said so, or (after a prefix) if anything is left.
      if (reseek) {
        lr.max_uploads = 1;
        auto next = index.listUploads(p.bucket, lr);
        if (!next) return fail(next.error());
        out.truncated = !next->uploads.empty();
      } else {
        out.truncated = true;
      }
      break;
    }
  }
  return out;
}

}  // namespace

Task<S3Response> listMultipartUploads(GatewayContext& ctx, const S3Request& req) {
  if (auto bad = checkListingParameters(req); !bad) co_return errorResponse(bad.error(), req);
  ListUploadsParams p;
  p.bucket = req.bucket;
  p.prefix = std::string(req.queryValue("prefix").value_or(""));
  p.delimiter = std::string(req.queryValue("delimiter").value_or(""));
  if (auto enc = req.queryValue("encoding-type")) {
    if (*enc != "url") {
      co_return errorResponse({S3ErrorCode::kInvalidArgument,
                               "Invalid Encoding Method specified in Request"},
                              req);
    }
    p.url_encode = true;
  }
  p.key_marker = std::string(req.queryValue("key-marker").value_or(""));
  // S3 ignores upload-id-marker without key-marker.
  if (!p.key_marker.empty()) {
    p.upload_id_marker = std::string(req.queryValue("upload-id-marker").value_or(""));
  }
  auto max = maxParam(req, "max-uploads");
  if (!max) co_return errorResponse(max.error(), req);
  p.max_uploads = *max;

  auto page = co_await offload(ctx.pool(), [&]() -> Result<UploadsPage> {
    auto bucket = ctx.index().getBucket(req.bucket);
    if (!bucket) return fail(bucket.error());
    return readUploadsPage(ctx.index(), p);
  });
  if (!page) co_return errorResponse(fromStatus(page.error(), S3ErrorCode::kNoSuchBucket), req);
  for (auto& u : page->uploads) u.owner = ctx.credentials.ownerId(u.owner);
  co_return xmlResponse(listMultipartUploadsXml(p, *page));
}

}  // namespace granary::gateway

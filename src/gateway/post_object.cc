// POST Object: a browser form upload (`POST /bucket`, multipart/form-data) signed by a POST
// policy instead of the request's headers (post_form.h). The form's fields become the
// headers of a PutObject of the file's bytes, which stream from the connection into the
// same data path as a PUT's; the answer is S3's 204, 201 with a PostResponse, or a 303 to
// success_action_redirect.
#include <fmt/core.h>

#include <algorithm>
#include <optional>

#include "digest.h"
#include "granary/common/base64.h"
#include "granary/common/clock.h"
#include "granary/common/strings.h"
#include "handlers.h"
#include "http_text.h"
#include "post_form.h"
#include "s3_xml.h"
#include "uri.h"

namespace granary::gateway {

namespace {

// Form bytes before the file's that are read and kept; more is
// MaxPostPreDataLengthExceededError (S3 allows 20 KB of fields; a tag set and a long
// policy fit in this).
constexpr size_t kMaxFormHead = 64 * 1024;
// After a small file, what the form sends after it is read and dropped up to this much;
// beyond it the connection closes instead.
constexpr size_t kMaxFormTail = 64 * 1024;
constexpr size_t kReadSize = 16 * 1024;

S3Error fieldsTooLarge() {
  return {S3ErrorCode::kMaxPostPreDataLengthExceededError,
          "Your POST request fields preceding the upload file were too large."};
}

// The CRLF after a streamed file's closing delimiter, which RFC 2046 makes optional: the
// file's length is known to within it until the form's end is read (StreamedFile).
constexpr uint64_t kOptionalCrlf = 2;

// The policy's content-length-range refuses a file whose length lies in [shortest,
// longest] if no such length is within the range.
std::optional<S3Error> outsideRange(uint64_t shortest, uint64_t longest,
                                    const PostLengthRange& range) {
  if (longest < range.min) {
    return S3Error{S3ErrorCode::kEntityTooSmall,
                   "Your proposed upload is smaller than the minimum allowed size"};
  }
  if (shortest > range.max) {
    return S3Error{S3ErrorCode::kEntityTooLarge,
                   "Your proposed upload exceeds the maximum allowed size"};
  }
  return std::nullopt;
}

S3Error notMultipart() {
  return {S3ErrorCode::kMalformedPOSTRequest,
          "The body of your POST request is not well-formed multipart/form-data."};
}

// A file whose bytes are all in memory (it ended within what was read ahead).
class MemoryFile final : public BodySource {
 public:
  explicit MemoryFile(std::string_view data) : data_(data) {}
  Task<S3Result<size_t>> read(std::span<uint8_t> out) override {
    const size_t n = std::min(out.size(), data_.size() - at_);
    std::copy_n(data_.data() + at_, n, out.data());
    at_ += n;
    co_return n;
  }
  bool done() const override { return at_ == data_.size(); }

 private:
  std::string_view data_;
  size_t at_ = 0;
};

// A large file: the bytes of the form after its head, the first of them already read
// (`pending`), the rest from the connection. Its size comes from the request's
// Content-Length, so the file must be the form's last part, followed only by the closing
// delimiter: "\r\n--boundary--" and, as nearly every client sends, "\r\n" (RFC 2046
// makes that CRLF optional, and Node.js 18's fetch leaves it out). Which of the two ends
// the form shows only at its end, so the file's length is `longest` (without the CRLF) or
// 2 bytes less: the last 2 bytes that may be the file's are held back until the ending
// is read, and finalLength() then tells the writer. A delimiter anywhere inside the
// file's bytes, or any other ending, fails the read, and with it the upload (nothing is
// stored); so does a length outside the policy's `range`, once known.
class StreamedFile final : public BodySource {
 public:
  StreamedFile(BodySource& raw, std::string pending, uint64_t longest, std::string delimiter,
               PostLengthRange range)
      : raw_(raw),
        pending_(std::move(pending)),
        longest_(longest),
        delimiter_(std::move(delimiter)),
        range_(range) {}

  void setDeadline(std::chrono::steady_clock::time_point deadline) override {
    raw_.setDeadline(deadline);  // the upload's, once the form is known good
  }

  Task<S3Result<size_t>> read(std::span<uint8_t> out) override {
    if (out.empty() || (final_ && yielded_ == *final_)) co_return 0;
    const uint64_t certain = longest_ - kOptionalCrlf;  // the file's, whichever the ending
    size_t n = 0;
    if (yielded_ < certain) {
      out = out.first(std::min<uint64_t>(out.size(), certain - yielded_));
      if (at_ < pending_.size()) {
        n = std::min(out.size(), pending_.size() - at_);
        std::copy_n(pending_.data() + at_, n, out.data());
        at_ += n;
      } else {
        auto got = co_await raw_.read(out);
        if (!got) co_return std::unexpected(got.error());
        if (*got == 0) {
          co_return s3fail(S3ErrorCode::kIncompleteBody,
                           "The request body terminated unexpectedly");
        }
        n = *got;
      }
    } else {  // the 2 bytes held back, found to be the file's
      n = std::min(out.size(), held_.size() - held_at_);
      std::copy_n(held_.data() + held_at_, n, out.data());
      held_at_ += n;
    }
    if (!scan(out.first(n))) co_return std::unexpected(earlyEnd());
    yielded_ += n;
    // The ending is read as soon as the certain bytes are out, so that the writer knows
    // the length before it writes the stripe that ends the file.
    if (yielded_ == certain && !final_) {
      if (auto decided = co_await readEnding(); !decided) {
        co_return std::unexpected(decided.error());
      }
    }
    co_return n;
  }

  bool done() const override { return final_ && yielded_ == *final_ && raw_.done(); }
  std::optional<uint64_t> finalLength() const override { return final_; }

 private:
  static S3Error earlyEnd() {
    return {S3ErrorCode::kMalformedPOSTRequest,
            "The file of a POST form larger than the server keeps in memory must be the "
            "form's last field, followed only by the closing boundary."};
  }

  // Reads what follows the certain bytes, to the end of the body: the closing delimiter
  // with its CRLF (the file ends here), or 2 more bytes of the file and the delimiter
  // without it.
  Task<S3Result<void>> readEnding() {
    const std::string closing = delimiter_ + "--";
    std::string tail = pending_.substr(std::min(at_, pending_.size()));
    at_ = pending_.size();
    while (tail.size() <= closing.size() + kOptionalCrlf) {
      char buf[256];
      auto got = co_await raw_.read({reinterpret_cast<uint8_t*>(buf), sizeof buf});
      if (!got) co_return std::unexpected(got.error());
      if (*got == 0) break;
      tail.append(buf, *got);
    }
    if (tail == closing + "\r\n") {
      final_ = yielded_;
    } else if (tail.size() == closing.size() + kOptionalCrlf &&
               std::string_view(tail).substr(kOptionalCrlf) == closing) {
      held_ = tail.substr(0, kOptionalCrlf);
      final_ = longest_;
    } else {
      co_return std::unexpected(earlyEnd());
    }
    if (auto outside = outsideRange(*final_, *final_, range_)) {
      co_return std::unexpected(std::move(*outside));
    }
    co_return S3Result<void>{};
  }

  // False if the delimiter appears in the file's bytes, within `data` or across the bytes
  // before it. Keeps the last delimiter-1 bytes for the next call.
  bool scan(std::span<const uint8_t> data) {
    const std::string_view d(reinterpret_cast<const char*>(data.data()), data.size());
    const size_t keep = delimiter_.size() - 1;
    std::string joined = carry_;
    joined.append(d.substr(0, std::min(d.size(), keep)));
    if (joined.find(delimiter_) != std::string::npos) return false;
    if (d.find(delimiter_) != std::string_view::npos) return false;
    if (d.size() >= keep) {
      carry_.assign(d.substr(d.size() - keep));
    } else {
      carry_.append(d);
      carry_.erase(0, carry_.size() - std::min(carry_.size(), keep));
    }
    return true;
  }

  BodySource& raw_;
  std::string pending_;
  size_t at_ = 0;
  uint64_t longest_;
  uint64_t yielded_ = 0;
  std::string delimiter_;
  PostLengthRange range_;
  std::optional<uint64_t> final_;  // the file's length, once the ending is read
  std::string held_;               // the file's last 2 bytes, when the ending says so
  size_t held_at_ = 0;
  std::string carry_;
};

// Form fields that become headers: of the object (stored, and sent on every GET of it)
// or of the answer (the redirect). An HTTP parser refuses control characters in a PUT's
// headers and bounds their length; a form's values are the body's bytes, so they are
// checked here (headerValue).
bool headerField(std::string_view name) {
  return name.starts_with("x-amz-meta-") || name.starts_with("x-amz-checksum-") ||
         name == "content-type" || name == "content-md5" || name == "cache-control" ||
         name == "content-disposition" || name == "content-encoding" ||
         name == "content-language" || name == "expires" || name == "x-granary-index" ||
         name == "x-granary-index-key";
}

// The PutObject a form asks for: its key, and its fields as the headers a PUT would carry
// (a form without Content-Type stores binary/octet-stream, as S3 does).
S3Result<S3Request> putRequestOf(const S3Request& post, const FormHead& form,
                                 std::string_view key) {
  S3Request put;
  put.method = "PUT";
  put.bucket = post.bucket;
  put.key = std::string(key);
  put.path = "/" + uriEncode(post.bucket, false) + "/" + uriEncode(key, false);
  put.target = put.path;
  put.request_id = post.request_id;
  put.principal = post.principal;
  put.root = post.root;
  // What a bucket policy's conditions ask about the request.
  put.source_ip = post.source_ip;
  put.secure = post.secure;
  for (const char* name : {"host", "user-agent", "referer"}) {
    if (auto value = post.header(name)) put.headers.emplace_back(name, std::string(*value));
  }
  for (const auto& [name, value] : form.fields) {
    const bool header = headerField(name);
    if ((header || name == "success_action_redirect" || name == "redirect") &&
        (!headerValue(value) || !headerToken(name))) {
      return s3fail(S3ErrorCode::kInvalidArgument,
                    "The form field '" + name + "' is not a valid HTTP header value.");
    }
    if (header) {
      put.headers.emplace_back(name, value);
    } else if (name == "tagging") {
      auto tags = parseTagging(value);
      if (!tags) return std::unexpected(tags.error());
      std::string encoded;
      for (const auto& [k, v] : *tags) {
        if (!encoded.empty()) encoded.push_back('&');
        encoded.append(uriEncode(k, true)).append("=").append(uriEncode(v, true));
      }
      if (!encoded.empty()) put.headers.emplace_back("x-amz-tagging", std::move(encoded));
    }
  }
  return put;
}

// What the form's success_action_* fields ask for, after the object is stored.
S3Response successResponse(const S3Request& post, const FormHead& form, const S3Request& put,
                           const S3Response& stored) {
  std::string etag;
  for (const auto& [name, value] : stored.headers) {
    if (name == "ETag") etag = value;
  }
  // The object's URL in the form's own style: a form posted to a virtual-hosted bucket
  // (path "/", the Host names the bucket) gets https://bucket.domain/key, as from S3.
  const bool virtual_hosted = post.path == "/";
  const std::string location =
      fmt::format("{}://{}{}", post.secure ? "https" : "http",
                  post.header("host").value_or("localhost"),
                  virtual_hosted ? "/" + uriEncode(put.key, false) : put.path);
  auto redirect = form.field("success_action_redirect");
  if (!redirect) redirect = form.field("redirect");
  S3Response res;
  res.headers = stored.headers;
  if (redirect && (redirect->starts_with("http://") || redirect->starts_with("https://"))) {
    std::string target(*redirect);
    target.push_back(target.find('?') == std::string::npos ? '?' : '&');
    target += "bucket=" + uriEncode(put.bucket, true);
    target += "&key=" + uriEncode(put.key, true);
    target += "&etag=" + uriEncode(etag, true);
    res.status = 303;
    res.set("Location", std::move(target));
    return res;
  }
  res.set("Location", location);
  const std::string_view status = form.field("success_action_status").value_or("204");
  if (status == "201") {
    res.status = 201;
    res.set("Content-Type", "application/xml");
    res.body = postResponseXml(location, put.bucket, put.key, etag);
  } else {
    res.status = status == "200" ? 200 : 204;  // S3: anything else is 204
  }
  return res;
}

}  // namespace

Task<S3Response> postObject(GatewayContext& ctx, S3Request& req, BodySource& body) {
  const auto boundary = formBoundary(req.header("content-type").value_or(""));
  if (!boundary) {
    co_return errorResponse({S3ErrorCode::kPreconditionFailed,
                             "Bucket POST must be of the enclosure-type multipart/form-data"},
                            req, body);
  }

  // The form up to the file's first byte, kMaxFormHead bytes at most, within the time a
  // request head has (--idle-timeout): nothing is authenticated yet, and a client
  // trickling its fields (a byte a minute) must not keep its connection for longer than
  // one trickling its head. The file then has an upload's deadline (--max-put-seconds).
  body.setDeadline(std::chrono::steady_clock::now() +
                   std::chrono::seconds(ctx.options.idle_timeout_seconds));
  std::string buf;
  std::optional<FormHead> form;
  FormHeadParser parser(*boundary);
  uint8_t chunk[kReadSize];
  for (;;) {
    auto head = parser.parse(buf, body.done());
    if (!head) co_return errorResponse(head.error(), req, body);
    if (*head) {
      form = std::move(**head);
      break;
    }
    if (buf.size() == kMaxFormHead) co_return errorResponse(fieldsTooLarge(), req, body);
    auto n = co_await body.read({chunk, std::min(sizeof chunk, kMaxFormHead - buf.size())});
    if (!n) co_return errorResponse(n.error(), req, body);
    buf.append(reinterpret_cast<const char*>(chunk), *n);
  }

  // Who signed it, and what the policy allows. A form with neither signature nor policy is
  // anonymous: only a bucket whose policy lets anyone write takes it, and it has no POST
  // policy to check.
  auto signer = parsePostAuth(*form);
  if (!signer) co_return errorResponse(signer.error(), req, body);
  std::optional<PostPolicy> policy;
  req.principal.clear();
  req.root = false;
  if (*signer) {
    auto user = ctx.credentials.find((*signer)->access_key);
    if (!user) {
      co_return errorResponse(
          {S3ErrorCode::kInvalidAccessKeyId,
           "The AWS Access Key Id you provided does not exist in our records."},
          req, body);
    }
    const std::string_view policy_text = *form->field("policy");
    if (auto ok =
            verifyPostSignature(**signer, policy_text, user->secret_key, ctx.signing_keys);
        !ok) {
      co_return errorResponse(ok.error(), req, body);
    }
    const auto policy_json = base64Decode(policy_text);
    if (!policy_json) {
      co_return errorResponse(
          {S3ErrorCode::kInvalidPolicyDocument, "Invalid Policy: the policy is not base64."},
          req, body);
    }
    auto parsed = parsePostPolicy(std::string_view(
        reinterpret_cast<const char*>(policy_json->data()), policy_json->size()));
    if (!parsed) co_return errorResponse(parsed.error(), req, body);
    policy = std::move(*parsed);
    req.principal = user->name;
    req.root = user->is_root;
  }

  // ${filename} in any field the policy checks is the file's name: the policy checks, and
  // the object gets, the values with it replaced. The fields with it replaced stay within
  // the form head's limit: a long file name times many ${filename} would otherwise make
  // megabytes out of 64 KiB (before any access check, for an anonymous form).
  constexpr std::string_view kFilename = "${filename}";
  size_t fields_size = 0;
  for (auto& [name, value] : form->fields) {
    if (!unsignedFormField(name) && value.find(kFilename) != std::string::npos) {
      std::string replaced;
      for (size_t from = 0;;) {
        const size_t at = value.find(kFilename, from);
        replaced.append(value, from, at == std::string::npos ? std::string::npos : at - from);
        if (at == std::string::npos) break;
        if (fields_size + replaced.size() + form->filename.size() > kMaxFormHead) {
          co_return errorResponse(fieldsTooLarge(), req, body);
        }
        replaced += form->filename;
        from = at + kFilename.size();
      }
      value = std::move(replaced);
    }
    fields_size += name.size() + value.size();
    if (fields_size > kMaxFormHead) co_return errorResponse(fieldsTooLarge(), req, body);
  }
  const auto key_field = form->field("key");
  if (!key_field) {
    co_return errorResponse(
        {S3ErrorCode::kInvalidArgument, "Bucket POST must contain a field named 'key'."}, req,
        body);
  }
  const std::string key(*key_field);
  if (key.empty()) {
    co_return errorResponse(
        {S3ErrorCode::kInvalidArgument, "User key must have a length greater than 0."}, req,
        body);
  }
  if (auto bad = checkNewObjectKey(key); !bad) co_return errorResponse(bad.error(), req, body);
  req.key = key;  // the access log's, and error bodies' Resource
  if (auto named = form->field("bucket"); named && *named != req.bucket) {
    co_return errorResponse({S3ErrorCode::kInvalidArgument,
                             "The bucket field does not name the bucket the form posts to."},
                            req, body);
  }
  PostLengthRange range;
  if (policy) {
    const int64_t now = ctx.deps.clock.nowUnixNanos() / 1'000'000'000;
    auto checked = checkPostPolicy(*policy, form->fields, req.bucket, now);
    if (!checked) co_return errorResponse(checked.error(), req, body);
    range = *checked;
  }
  auto put = putRequestOf(req, *form, key);
  if (!put) co_return errorResponse(put.error(), req, body);
  if (auto denied = co_await authorizeRequest(ctx, *put, "PutObject")) {
    co_return errorResponse(*denied, req, body);
  }
  // The form is signed and allowed: from here on the body has an upload's time, not a
  // request head's (a small file is read whole below, under no later deadline).
  body.setDeadline(std::chrono::steady_clock::now() +
                   std::chrono::seconds(ctx.options.max_put_seconds));

  // The file: in memory if it ends within what is read ahead (what follows it is then
  // ignored, as S3 ignores fields after the file), else streamed, its size taken from the
  // Content-Length; which one depends only on the form, not on how its bytes arrive.
  const std::string delimiter = "\r\n--" + *boundary;
  const std::string closing = delimiter + "--";  // and, from nearly every client, CRLF
  const size_t read_ahead = ctx.options.inline_threshold + delimiter.size();
  while (!body.done() && buf.size() - form->data_offset < read_ahead) {
    auto n = co_await body.read(
        {chunk, std::min(sizeof chunk, read_ahead - (buf.size() - form->data_offset))});
    if (!n) co_return errorResponse(n.error(), req, body);
    buf.append(reinterpret_cast<const char*>(chunk), *n);
  }
  const std::string_view ahead =
      std::string_view(buf).substr(form->data_offset, read_ahead);
  std::unique_ptr<BodySource> file;
  uint64_t size = 0;
  uint64_t streamed_slack = 0;  // how much shorter than `size` the file may turn out
  if (const size_t end = ahead.find(delimiter); end != std::string_view::npos) {
    size = end;
    file = std::make_unique<MemoryFile>(ahead.substr(0, end));
  } else if (body.done()) {
    co_return errorResponse(notMultipart(), req, body);  // the form never ends
  } else if (!req.content_length || *req.content_length < buf.size()) {
    co_return errorResponse({S3ErrorCode::kMissingContentLength,
                             "You must provide the Content-Length HTTP header."},
                            req, body);
  } else {
    const uint64_t rest = *req.content_length - buf.size();  // bytes not read yet
    const uint64_t seen = buf.size() - form->data_offset;
    if (seen + rest < closing.size() + kOptionalCrlf) {
      co_return errorResponse(notMultipart(), req, body);
    }
    size = seen + rest - closing.size();  // at most: kOptionalCrlf less if the CRLF follows
    file = std::make_unique<StreamedFile>(body, buf.substr(form->data_offset), size, delimiter,
                                          range);
    streamed_slack = kOptionalCrlf;
  }
  // A streamed file's length is known to kOptionalCrlf bytes before its end: StreamedFile
  // checks the range again then.
  if (auto outside = outsideRange(size - streamed_slack, size, range)) {
    co_return errorResponse(std::move(*outside), req, body);
  }
  put->content_length = size;

  S3Response stored = co_await putObject(ctx, *put, RequestAuth{}, *file);
  // What the form sends after a small file (its closing boundary, fields S3 ignores) is
  // read and dropped, so the connection can serve the next request.
  for (size_t dropped = 0; !body.done() && dropped <= kMaxFormTail;) {
    auto n = co_await body.read(chunk);
    if (!n || *n == 0) break;
    dropped += *n;
  }
  if (stored.status != 200) {
    stored.close = stored.close || !body.done();
    co_return stored;
  }
  S3Response res = successResponse(req, *form, *put, stored);
  res.close = !body.done();
  co_return res;
}

}  // namespace granary::gateway

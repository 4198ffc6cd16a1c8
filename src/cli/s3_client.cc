// The CLI's S3 client (s3_client.h). Beast's synchronous calls ignore beast::tcp_stream's
// deadlines (they apply to asynchronous operations only), so each network operation is
// started asynchronously and run to completion on a private io_context: a blocking call
// with a real inactivity deadline.
#include "s3_client.h"
#include "granary/common/strings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// clang-format off
#include <utility>  // before any Asio header: see TOOLCHAIN.md
// clang-format on

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <pugixml.hpp>

#include "sigv4.h"
#include "uri.h"

namespace granary::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr size_t kIoChunk = size_t{1} << 20;  // body bytes per write or read

std::string toString(beast::string_view s) { return std::string(s.data(), s.size()); }

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// One connection, used for one exchange.
class Connection {
 public:
  explicit Connection(std::chrono::seconds timeout) : timeout_(timeout) {
    buffer_.reserve(256 << 10);  // else Beast reads 512 bytes per call
  }

  Status connect(const Endpoint& ep) {
    tcp::resolver resolver(ioc_);
    tcp::resolver::results_type results;
    auto ec = run(
        [&](auto handler) {
          resolver.async_resolve(ep.host, ep.port,
                                 [&, handler](beast::error_code e, tcp::resolver::results_type r) {
                                   results = std::move(r);
                                   handler(e);
                                 });
        },
        [&] { resolver.cancel(); });
    if (ec) return Status::unavailable("cannot resolve " + ep.host + ": " + ec.message());
    stream_.expires_after(timeout_);
    ec = run([&](auto handler) {
      stream_.async_connect(results,
                            [handler](beast::error_code e, const tcp::endpoint&) { handler(e); });
    });
    if (ec) {
      return Status::unavailable("cannot connect to " + ep.host + ":" + ep.port + ": " +
                                 ec.message());
    }
    return Status::ok();
  }

  Status writeHeader(http::request<http::empty_body>& req) {
    http::request_serializer<http::empty_body> sr(req);
    while (!sr.is_done()) {
      stream_.expires_after(timeout_);
      auto ec = run([&](auto handler) {
        http::async_write_some(stream_, sr, [handler](beast::error_code e, size_t) { handler(e); });
      });
      if (ec) return Status::ioError("sending the request: " + ec.message());
    }
    return Status::ok();
  }

  Status writeBody(std::string_view bytes) {
    while (!bytes.empty()) {
      size_t n = std::min(bytes.size(), kIoChunk);
      stream_.expires_after(timeout_);
      auto ec = run([&](auto handler) {
        asio::async_write(stream_, asio::buffer(bytes.data(), n),
                          [handler](beast::error_code e, size_t) { handler(e); });
      });
      if (ec) return Status::ioError("sending the request body: " + ec.message());
      bytes.remove_prefix(n);
    }
    return Status::ok();
  }

  Result<S3Response> read(bool head, const BodySink& sink, uint64_t body_limit) {
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(body_limit);
    parser.skip(head);  // a HEAD response has a Content-Length but no body
    stream_.expires_after(timeout_);
    auto ec = run([&](auto handler) {
      http::async_read_header(stream_, buffer_, parser,
                              [handler](beast::error_code e, size_t) { handler(e); });
    });
    if (ec) return std::unexpected(Status::ioError("reading the response: " + ec.message()));
    S3Response res;
    const auto& msg = parser.get();
    res.status = msg.result_int();
    res.reason = toString(msg.reason());
    for (const auto& field : msg) {
      res.headers.emplace_back(asciiLower(toString(field.name_string())), toString(field.value()));
    }
    const bool to_sink = sink && res.status >= 200 && res.status < 300;
    std::vector<char> chunk(kIoChunk);
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      stream_.expires_after(timeout_);
      ec = run([&](auto handler) {
        http::async_read(stream_, buffer_, parser,
                         [handler](beast::error_code e, size_t) { handler(e); });
      });
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        return std::unexpected(Status::ioError("reading the response body: " + ec.message()));
      }
      std::string_view got(chunk.data(), chunk.size() - parser.get().body().size);
      if (to_sink) {
        if (Status st = sink(got); !st) return std::unexpected(std::move(st));
      } else {
        res.body.append(got);
      }
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return res;
  }

 private:
  // Starts an operation through start(handler), handler(error_code), and runs the context
  // until it completes. `cancel` stops an operation that has no stream deadline.
  template <typename Start>
  beast::error_code run(Start&& start) {
    return run(std::forward<Start>(start), [] {});
  }
  template <typename Start, typename Cancel>
  beast::error_code run(Start&& start, Cancel&& cancel) {
    beast::error_code result = asio::error::operation_aborted;
    bool done = false;
    start([&](beast::error_code ec) {
      result = ec;
      done = true;
    });
    ioc_.restart();
    ioc_.run_for(timeout_ + std::chrono::seconds(1));
    if (!done) {
      cancel();
      stream_.cancel();
      ioc_.restart();
      ioc_.run();
      if (!result) result = beast::error::timeout;
    }
    return result;
  }

  std::chrono::seconds timeout_;
  asio::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
};

// Streams `fd` (of `size` bytes) as the body.
Status sendFile(Connection& conn, int fd, uint64_t size, const std::string& path) {
  std::vector<char> buf(kIoChunk);
  uint64_t offset = 0;
  while (offset < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - offset));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::fromErrno(errno, "reading " + path);
    if (n == 0) return Status::ioError(path + " shrank while it was being sent");
    if (Status st = conn.writeBody({buf.data(), static_cast<size_t>(n)}); !st) return st;
    offset += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

}  // namespace

std::optional<std::string_view> S3Response::header(std::string_view lower_name) const {
  for (const auto& [n, v] : headers) {
    if (n == lower_name) return std::string_view(v);
  }
  return std::nullopt;
}

Result<Endpoint> parseEndpoint(std::string_view url) {
  if (url.starts_with("https://")) {
    return fail(Status::invalidArgument("https endpoints are not supported: " + std::string(url)));
  }
  if (url.starts_with("http://")) url.remove_prefix(7);
  std::string_view authority = url.substr(0, url.find('/'));
  Endpoint ep;
  std::string_view port;
  if (authority.starts_with("[")) {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return fail(Status::invalidArgument("bad endpoint " + std::string(url)));
    }
    ep.host = std::string(authority.substr(1, close - 1));
    std::string_view rest = authority.substr(close + 1);
    if (rest.starts_with(":")) port = rest.substr(1);
  } else {
    size_t colon = authority.rfind(':');
    ep.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (ep.host.empty() ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return fail(Status::invalidArgument("bad endpoint " + std::string(url)));
  }
  ep.port = port.empty() ? "80" : std::string(port);
  ep.host_header = std::string(authority);
  return ep;
}

std::string requestTarget(const S3Request& req) {
  std::string target = "/" + gateway::uriEncode(req.bucket, true);
  if (!req.key.empty()) target += "/" + gateway::uriEncode(req.key, false);
  char sep = '?';
  for (const auto& [name, value] : req.query) {
    target.push_back(sep);
    sep = '&';
    target += gateway::uriEncode(name, true);
    if (value) target += "=" + gateway::uriEncode(*value, true);
  }
  return target;
}

std::string authorization(std::string_view method, std::string_view target,
                          const HeaderList& headers, std::string_view payload_hash,
                          std::string_view amz_date, const S3Credentials& creds,
                          gateway::SigningKeyCache* keys) {
  gateway::HttpRequestView view{method, target, headers, {}};
  gateway::AuthInfo auth;
  auth.access_key = creds.access_key;
  auth.date = std::string(amz_date.substr(0, 8));
  auth.region = creds.region;
  auth.service = "s3";
  auth.amz_date = std::string(amz_date);
  auth.payload_hash = std::string(payload_hash);
  for (const auto& [name, value] : headers) auth.signed_headers.push_back(name);
  std::sort(auth.signed_headers.begin(), auth.signed_headers.end());
  auth.signed_headers.erase(std::unique(auth.signed_headers.begin(), auth.signed_headers.end()),
                            auth.signed_headers.end());
  // The same canonicalisation the gateway verifies with (sigv4.cc).
  std::string to_sign = gateway::stringToSign(auth, gateway::canonicalRequest(view, auth));
  auto key = keys ? keys->get(creds.secret_key, auth.date, auth.region, auth.service)
                  : gateway::deriveSigningKey(creds.secret_key, auth.date, auth.region, auth.service);
  std::string signed_list;
  for (const auto& name : auth.signed_headers) {
    signed_list += (signed_list.empty() ? "" : ";") + name;
  }
  return "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" + auth.scope() +
         ", SignedHeaders=" + signed_list + ", Signature=" + gateway::hmacSha256Hex(key, to_sign);
}

HeaderList signedHeaders(std::string_view method, std::string_view target,
                         std::string_view host_header, const HeaderList& extra,
                         std::string_view payload_hash, const S3Credentials& creds,
                         gateway::SigningKeyCache* keys) {
  const std::string date = amzDate(std::chrono::system_clock::now());
  HeaderList headers{{"host", std::string(host_header)}};
  headers.insert(headers.end(), extra.begin(), extra.end());
  headers.emplace_back("x-amz-content-sha256", std::string(payload_hash));
  headers.emplace_back("x-amz-date", date);
  std::string auth = authorization(method, target, headers, payload_hash, date, creds, keys);
  headers.emplace_back("Authorization", std::move(auth));  // the usual spelling on the wire
  return headers;
}

std::string amzDate(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  size_t n = std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return std::string(buf, n);
}

S3ErrorBody parseErrorBody(std::string_view body) {
  S3ErrorBody out;
  pugi::xml_document doc;
  if (body.empty() || !doc.load_buffer(body.data(), body.size())) return out;
  pugi::xml_node error = doc.child("Error");
  out.code = error.child_value("Code");
  out.message = error.child_value("Message");
  return out;
}

std::string describeError(const S3Response& res) {
  S3ErrorBody err = parseErrorBody(res.body);
  std::string out = std::to_string(res.status) + " ";
  if (!err.code.empty()) return out + err.code + ": " + err.message;
  out += res.reason.empty() ? "error" : res.reason;
  std::string_view text = res.body;
  if (!text.empty()) out += ": " + std::string(text.substr(0, 300));
  return out;
}

S3Client::S3Client(Endpoint endpoint, S3Credentials creds, std::chrono::seconds timeout)
    : endpoint_(std::move(endpoint)), creds_(std::move(creds)), timeout_(timeout) {}

Result<S3Response> S3Client::send(const S3Request& req, const BodySink& sink, uint64_t body_limit) {
  std::optional<FileDescriptor> file;
  uint64_t body_size = req.body.size();
  if (req.body_file) {
    file.emplace(::open(req.body_file->c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (file->get() < 0 || ::fstat(file->get(), &st) != 0) {
      return fail(Status::fromErrno(errno, "cannot open " + *req.body_file));
    }
    if (!S_ISREG(st.st_mode)) return fail(Status::invalidArgument(*req.body_file + ": not a file"));
    body_size = static_cast<uint64_t>(st.st_size);
  }

  const std::string target = requestTarget(req);
  const std::string payload_hash =
      req.body_file ? std::string("UNSIGNED-PAYLOAD") : gateway::sha256Hex(req.body);
  HeaderList extra;
  for (const auto& [name, value] : req.headers) extra.emplace_back(asciiLower(name), value);

  http::request<http::empty_body> head;
  head.version(11);
  head.method_string(req.method);
  head.target(target);
  for (const auto& [name, value] :
       signedHeaders(req.method, target, endpoint_.host_header, extra, payload_hash, creds_)) {
    head.set(name, value);
  }
  head.set(http::field::user_agent, "granary-cli");
  if (body_size > 0 || req.method == "PUT" || req.method == "POST") {
    head.content_length(body_size);
  }

  Connection conn(timeout_);
  if (Status st = conn.connect(endpoint_); !st) return fail(std::move(st));
  if (Status st = conn.writeHeader(head); !st) return fail(std::move(st));
  Status sent =
      file ? sendFile(conn, file->get(), body_size, *req.body_file) : conn.writeBody(req.body);
  // A server may answer early (an error) and close while the body is still going: read
  // what it said rather than report the broken pipe.
  auto res = conn.read(req.method == "HEAD", sink, body_limit);
  if (!sent && !res) return fail(std::move(sent));
  return res;
}

}  // namespace granary::cli

// `granary records VERB ...`: the record index from the command line. Each verb is one or a
// few S3 requests of docs/record-index.md ("API"); the verbs are listed in its "CLI"
// section. Output is meant for pipes: JSON answers as one object per line, record bytes
// untouched, errors on standard error as "error: <status> <Code>: <Message>".
#include "records_cli.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include "granary/common/base64.h"
#include "granary/common/files.h"
#include "granary/common/strings.h"
#include "granary/gateway/record_limits.h"
#include "record_stream.h"
#include "s3_client.h"

namespace granary::cli {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;
constexpr uint64_t kPageSize = 1000;  // records per list page (the gateway's max)

int failWith(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return kFailed;
}

void printJsonLine(const json& j) {
  std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stdout);
}

std::optional<json> parseJson(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Prints the headers whose names start with `prefix` as "name: value" lines.
void printHeaders(const S3Response& res, std::string_view prefix) {
  for (const auto& [name, value] : res.headers) {
    if (name.starts_with(prefix)) std::printf("%s: %s\n", name.c_str(), value.c_str());
  }
}

struct Invocation {
  std::vector<std::string> args;  // positional arguments after the verb
  po::variables_map vm;
  S3Client& client;

  bool has(const char* name) const { return vm.count(name) > 0 && !vm[name].defaulted(); }
  std::string opt(const char* name) const {
    return vm.count(name) > 0 ? vm[name].as<std::string>() : std::string();
  }
  // Sends `req`; on a failed exchange or a non-2xx answer, prints why and returns nullopt.
  std::optional<S3Response> call(const S3Request& req, const BodySink& sink = nullptr) const {
    auto res = client.send(req, sink);
    if (!res) {
      failWith(res.error().message());
      return std::nullopt;
    }
    if (res->status < 200 || res->status >= 300) {
      failWith(describeError(*res));
      return std::nullopt;
    }
    return std::move(*res);
  }
};

// A JSON request body from command-line text, or nullopt when an argument is not UTF-8
// (JSON holds text only: such an argument is refused, not silently replaced).
std::optional<std::string> jsonText(const json& body) {
  try {
    return body.dump();
  } catch (const json::type_error&) {
    return std::nullopt;
  }
}

int notUtf8(const char* command) {
  std::fprintf(stderr, "%s: arguments must be UTF-8 text\n", command);
  return kUsage;
}

// GET or HEAD /b?record&key=K[&container=C[&offset=N]][&type=T][&raw=1].
S3Request recordRequest(const Invocation& inv, std::string method) {
  S3Request req;
  req.method = std::move(method);
  req.bucket = inv.args[0];
  req.query = {{"record", std::nullopt}, {"key", inv.args[1]}};
  if (inv.has("container")) req.query.emplace_back("container", inv.opt("container"));
  if (inv.has("offset")) req.query.emplace_back("offset", inv.opt("offset"));
  if (inv.has("type")) req.query.emplace_back("type", inv.opt("type"));
  if (inv.vm["raw"].as<bool>()) req.query.emplace_back("raw", "1");
  return req;
}

int runGet(const Invocation& inv) {
  Output out(inv.opt("output"));
  auto res = inv.call(recordRequest(inv, "GET"), [&](std::string_view b) { return out.write(b); });
  if (!res) {
    out.discard();
    return kFailed;
  }
  if (Status st = out.finish(); !st) return failWith(st.message());
  return kOk;
}

int runHead(const Invocation& inv) {
  auto res = inv.call(recordRequest(inv, "HEAD"));
  if (!res) return kFailed;
  printHeaders(*res, "x-granary-record-");
  printHeaders(*res, "content-length");
  return kOk;
}

// Prints the "records" of a JSON page, at most `room`; returns how many, or nullopt.
std::optional<uint64_t> printRecords(const json& page, uint64_t room) {
  if (!page.is_object() || !page.contains("records") || !page["records"].is_array()) {
    return std::nullopt;
  }
  uint64_t printed = 0;
  for (const auto& record : page["records"]) {
    if (printed == room) break;
    printJsonLine(record);
    ++printed;
  }
  return printed;
}

uint64_t maxRecords(const Invocation& inv) {
  return inv.has("max") ? inv.vm["max"].as<uint64_t>() : std::numeric_limits<uint64_t>::max();
}

// Prints the records of every page of `base` (up to --max), following the page's cursor:
// `cursor` is the answer's field naming the next page, sent back as query parameter
// `param` (a string token, or a number).
int printPages(const Invocation& inv, const S3Request& base, const char* cursor,
               const char* param) {
  const uint64_t max = maxRecords(inv);
  uint64_t printed = 0;
  std::optional<std::string> next;
  while (printed < max) {
    S3Request req = base;
    req.query.emplace_back("max-records", std::to_string(std::min(kPageSize, max - printed)));
    if (next) req.query.emplace_back(param, *next);
    auto res = inv.call(req);
    if (!res) return kFailed;
    auto page = parseJson(res->body);
    auto n = page ? printRecords(*page, max - printed) : std::nullopt;
    if (!n) return failWith("unexpected answer: " + res->body.substr(0, 300));
    printed += *n;
    if (!(*page)["is_truncated"].is_boolean() || !(*page)["is_truncated"].get<bool>()) break;
    const auto& c = (*page)[cursor];
    std::string cursor_value;
    if (c.is_string()) {
      cursor_value = c.get<std::string>();
    } else if (c.is_number_unsigned()) {
      cursor_value = std::to_string(c.get<uint64_t>());
    } else {
      return failWith(std::string("a truncated page without ") + cursor);
    }
    // The same cursor again would ask for the same page forever.
    if (next == cursor_value) return failWith(std::string("the server repeated its ") + cursor);
    next = std::move(cursor_value);
  }
  return kOk;
}

int runList(const Invocation& inv) {
  if (inv.has("prefix") && inv.has("key")) {
    std::fprintf(stderr, "granary records list: --prefix and --key exclude each other\n");
    return kUsage;
  }
  S3Request req;
  req.bucket = inv.args[0];
  req.query = {{"records", std::nullopt}};
  for (const char* name : {"prefix", "key", "container", "type"}) {
    if (inv.has(name)) req.query.emplace_back(name, inv.opt(name));
  }
  return printPages(inv, req, "next_continuation_token", "continuation-token");
}

int runRows(const Invocation& inv) {
  S3Request req;
  req.bucket = inv.args[0];
  req.key = inv.args[1];
  req.query = {{"records", std::nullopt}};
  return printPages(inv, req, "next_after", "after");
}

int runPut(const Invocation& inv) {
  S3Request req;
  req.method = "PUT";
  req.bucket = inv.args[0];
  req.key = inv.args[1];
  req.body_file = inv.args[2];  // streamed from disk, UNSIGNED-PAYLOAD
  req.headers.emplace_back("x-granary-index", inv.opt("index"));
  if (inv.has("index-key")) req.headers.emplace_back("x-granary-index-key", inv.opt("index-key"));
  auto res = inv.call(req);
  if (!res) return kFailed;
  printHeaders(*res, "x-granary-record-");
  return kOk;
}

// Prints a JSON answer on one line (as sent if it is not JSON).
int printAnswer(const S3Response& res) {
  if (auto j = parseJson(res.body)) {
    printJsonLine(*j);
  } else {
    std::printf("%s\n", res.body.c_str());
  }
  return kOk;
}

int runInsert(const Invocation& inv) {
  S3Request req;
  req.method = "POST";
  req.bucket = inv.args[0];
  req.key = inv.args[1];
  req.query = {{"records", std::nullopt}};
  if (inv.has("format")) req.query.emplace_back("format", inv.opt("format"));
  auto body = readWholeFile(inv.args[2]);
  if (!body) return failWith("cannot read " + body.error().message());
  req.body = std::move(*body);
  auto res = inv.call(req);
  return res ? printAnswer(*res) : kFailed;
}

// What one records-batch request may ask for (the gateway's limits): a longer key list
// goes in several requests. Keys fill the body up to 1 MiB short of its limit, room for
// its other fields.
constexpr size_t kBatchBodyBytes = gateway::kMaxBatchGetBody - (1u << 20);

int runBatchGet(const Invocation& inv) {
  auto keys_text = readWholeFile(inv.args[1]);
  if (!keys_text) return failWith("cannot read " + keys_text.error().message());
  // The keys in batches, each within the request limits.
  std::vector<json> batches(1, json::array());
  size_t batch_bytes = 0;
  uint64_t total = 0;
  std::istringstream lines(*keys_text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    // JSON strings are UTF-8: a key that is not goes as its bytes in base64.
    json entry = strictUtf8(line) ? json(line) : json{{"key_b64", base64Encode(line)}};
    const size_t bytes = entry.dump(-1, ' ', false, json::error_handler_t::replace).size() + 1;
    if (batches.back().size() == gateway::kMaxBatchGetKeys ||
        (!batches.back().empty() && batch_bytes + bytes > kBatchBodyBytes)) {
      batches.emplace_back(json::array());
      batch_bytes = 0;
    }
    batches.back().push_back(std::move(entry));
    batch_bytes += bytes;
    ++total;
  }

  const std::string out_dir = inv.opt("out-dir");
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) return failWith("cannot create " + out_dir + ": " + ec.message());
  }
  std::optional<Output> current;  // the file of the record being received
  uint64_t failed = 0;
  uint64_t base = 0;  // the index, in the key list, of the batch's first record
  auto close_current = [&]() -> Status {
    Status st = current ? current->finish() : Status::ok();
    current.reset();
    return st;
  };
  const FrameReader::HeaderFn on_header =
      [&](const json& header, std::string_view line) -> Status {
        if (Status st = close_current(); !st) return st;
        if (header.contains("end")) return Status::ok();  // one end line, for all batches
        const bool indexed = header.contains("index") && header["index"].is_number_unsigned();
        const uint64_t index = indexed ? base + header["index"].get<uint64_t>() : 0;
        if (base == 0 || !indexed) {
          std::printf("%.*s\n", static_cast<int>(line.size()), line.data());
        } else {  // the line as sent, its index counted in the whole key list
          auto ordered = nlohmann::ordered_json::parse(line, nullptr, false);
          ordered["index"] = index;
          std::printf("%s\n",
                      ordered.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
        }
        if (!header.contains("status") || header["status"] != 200) {
          ++failed;
        } else if (!out_dir.empty() && indexed) {
          current.emplace((fs::path(out_dir) / std::to_string(index)).string());
        }
        return Status::ok();
      };
  const FrameReader::DataFn on_data = [&](std::string_view data) {
    return current ? current->write(data) : Status::ok();
  };

  for (json& keys : batches) {
    if (keys.empty()) continue;
    json body = {{"records", std::move(keys)}, {"raw", inv.vm["raw"].as<bool>()}};
    if (inv.has("type")) body["type"] = inv.opt("type");
    const size_t count = body["records"].size();
    S3Request req;
    req.method = "POST";
    req.bucket = inv.args[0];
    req.query = {{"records-batch", std::nullopt}};
    auto text = jsonText(body);  // keys are UTF-8 or base64 (above): --type may not be
    if (!text) return notUtf8("granary records batch-get");
    req.body = std::move(*text);
    FrameReader reader(on_header, on_data);
    auto res = inv.call(req, [&](std::string_view bytes) { return reader.feed(bytes); });
    if (current && reader.midRecord()) {  // a cut record leaves no file
      current->discard();
      current.reset();
    }
    Status closed = close_current();
    std::fflush(stdout);
    if (!res) return kFailed;
    if (!closed) return failWith(closed.message());
    if (!reader.ended()) return failWith("the record stream ended without its end line: cut");
    base += count;
  }
  std::printf("%s\n",
              nlohmann::ordered_json{{"end", true}, {"records", total}, {"errors", failed}}
                  .dump()
                  .c_str());
  if (failed > 0) {
    return failWith(std::to_string(failed) + " of " + std::to_string(total) +
                    " records failed");
  }
  return kOk;
}

int runIndex(const Invocation& inv) {
  S3Request req;
  req.bucket = inv.args[0];
  req.query = {{"record-index", std::nullopt}};
  if (inv.args.size() > 1) {
    json body = {{"index", inv.args[1]}};
    if (inv.has("index-key")) body["index_key"] = inv.opt("index-key");
    req.method = "PUT";
    auto text = jsonText(body);
    if (!text) return notUtf8("granary records index");
    req.body = std::move(*text);
  } else if (inv.has("index-key")) {
    std::fprintf(stderr, "granary records index: --index-key needs an index value\n");
    return kUsage;
  }
  auto res = inv.call(req);
  return res ? printAnswer(*res) : kFailed;
}

int runStats(const Invocation& inv) {
  S3Request req;
  req.method = "HEAD";
  req.bucket = inv.args[0];
  req.key = inv.args[1];
  auto res = inv.call(req);
  if (!res) return kFailed;
  printHeaders(*res, "content-length");
  for (const char* name : {"x-granary-record-index", "x-granary-record-format",
                           "x-granary-record-count", "x-granary-record-index-bytes",
                           "x-granary-record-index-message"}) {
    if (auto v = res->header(name)) std::printf("%s: %s\n", name, std::string(*v).c_str());
  }
  return kOk;
}

void recordOptions(po::options_description& o) {
  o.add_options()("container", po::value<std::string>(), "only the record in this container")(
      "offset", po::value<std::string>(),
      "the row at this offset of --container (one of several of the same key)")(
      "type", po::value<std::string>(), "WARC type (default response; '*': any)")(
      "raw", po::bool_switch(), "a warc.gz record as stored (gzip), not inflated");
}
void getOptions(po::options_description& o) {
  recordOptions(o);
  o.add_options()("output,o", po::value<std::string>(), "write to FILE, not standard output");
}
void listOptions(po::options_description& o) {
  o.add_options()("prefix", po::value<std::string>(), "record keys starting with P")(
      "key", po::value<std::string>(), "every location of exactly this key")(
      "container", po::value<std::string>(), "only rows of this container")(
      "type", po::value<std::string>(), "only this WARC type")("max", po::value<uint64_t>(),
                                                               "stop after N records");
}
void rowsOptions(po::options_description& o) {
  o.add_options()("max", po::value<uint64_t>(), "stop after N records");
}
void putOptions(po::options_description& o) {
  o.add_options()("index", po::value<std::string>()->default_value("auto"),
                  "auto|tar|warc|warc.gz|off")("index-key", po::value<std::string>(),
                                               "WARC record key: uri|record-id");
}
void insertOptions(po::options_description& o) {
  o.add_options()("format", po::value<std::string>(), "tar|warc|warc.gz|raw (new record set)");
}
void batchOptions(po::options_description& o) {
  o.add_options()("type", po::value<std::string>(), "WARC type (default response; '*': any)")(
      "raw", po::bool_switch(), "warc.gz records as stored (gzip), not inflated")(
      "out-dir", po::value<std::string>(), "write record i to DIR/i");
}
void indexOptions(po::options_description& o) {
  o.add_options()("index-key", po::value<std::string>(), "WARC record key: uri|record-id");
}
void noOptions(po::options_description&) {}

struct Verb {
  std::string_view name;
  std::string_view synopsis;
  std::string_view summary;
  size_t min_args;
  size_t max_args;
  void (*options)(po::options_description&);
  int (*run)(const Invocation&);
  // --timeout's default: seconds a network operation may make no progress. The gateway
  // answers a repair pass only when it ends, which takes as long as the store is large.
  int default_timeout = 120;
};

constexpr Verb kVerbs[] = {
    {"get", "BUCKET KEY", "a record's bytes", 2, 2, getOptions, runGet},
    {"head", "BUCKET KEY", "where a record lies (x-granary-record-* headers)", 2, 2, recordOptions,
     runHead},
    {"list", "BUCKET", "record locations, one JSON object a line", 1, 1, listOptions, runList},
    {"rows", "BUCKET CONTAINER", "a container's rows in offset order", 2, 2, rowsOptions, runRows},
    {"put", "BUCKET KEY FILE", "upload a container with indexing", 3, 3, putOptions, runPut},
    {"insert", "BUCKET CONTAINER ROWS.jsonl", "add externally built rows", 3, 3, insertOptions,
     runInsert},
    {"batch-get", "BUCKET KEYS.txt", "many records in one request (keys one a line)", 2, 2,
     batchOptions, runBatchGet},
    {"index", "BUCKET [auto|tar|warc|warc.gz|off]", "show or set the bucket's indexing", 1, 2,
     indexOptions, runIndex},
    {"stats", "BUCKET KEY", "a container's indexing outcome and row count", 2, 2, noOptions,
     runStats},
};

// METHOD /_granary/admin/<what>[?dry-run], its answer (JSON) printed as it comes.
int callAdmin(const Invocation& inv, const char* what, const char* method = "GET") {
  S3Request req;
  req.method = method;
  req.bucket = "_granary";
  req.key = std::string("admin/") + what;
  if (inv.has("dry-run")) req.query.emplace_back("dry-run", std::nullopt);
  auto res = inv.call(req);
  if (!res) return kFailed;
  std::fputs(res->body.c_str(), stdout);
  return kOk;
}
int runAdminStats(const Invocation& inv) { return callAdmin(inv, "stats"); }
int runAdminStatus(const Invocation& inv) { return callAdmin(inv, "status"); }

void repairOptions(po::options_description& o) {
  o.add_options()("dry-run", "only find and count what needs doing");
}
// granary admin repair|rebalance [--dry-run]: one pass through the gateway.
int runAdminRepair(const Invocation& inv) { return callAdmin(inv, "repair", "POST"); }
int runAdminRebalance(const Invocation& inv) { return callAdmin(inv, "rebalance", "POST"); }

void userOptions(po::options_description& o) {
  o.add_options()("user-access-key", po::value<std::string>(),
                  "add: the new user's access key (default: generated)")(
      "user-secret-key", po::value<std::string>(),
      "add: the new user's secret key (default: generated)");
}

// granary admin user add NAME | list | remove NAME: the admin API's /users.
int runAdminUser(const Invocation& inv) {
  const std::string& action = inv.args[0];
  const bool named = action == "add" || action == "remove";
  if (!(named && inv.args.size() == 2) && !(action == "list" && inv.args.size() == 1)) {
    std::fprintf(stderr, "usage: granary admin user add NAME | list | remove NAME\n");
    return kUsage;
  }
  S3Request req;
  req.bucket = "_granary";
  req.key = "admin/users";
  if (named) req.key += "/" + inv.args[1];
  if (action == "add") {
    req.method = "PUT";
    json body = json::object();
    if (inv.has("user-access-key")) body["access_key"] = inv.opt("user-access-key");
    if (inv.has("user-secret-key")) body["secret_key"] = inv.opt("user-secret-key");
    auto text = jsonText(body);
    if (!text) return notUtf8("granary admin user add");
    req.body = std::move(*text);
  } else if (action == "remove") {
    req.method = "DELETE";
  }
  auto res = inv.call(req);
  if (!res) return kFailed;
  if (action == "remove") {
    std::printf("removed user %s\n", inv.args[1].c_str());
  } else {
    std::fputs(res->body.c_str(), stdout);
  }
  return kOk;
}

// A whole repair pass: a week, i.e. no limit but a dead connection's.
constexpr int kPassTimeout = 7 * 24 * 3600;

constexpr Verb kAdminVerbs[] = {
    {"stats", "", "buckets, drives and the record index's rows and bytes (root only)", 0, 0,
     noOptions, runAdminStats},
    {"status", "", "the cluster map's epoch, the index's and every server's health, drive "
     "capacity (root only)", 0, 0, noOptions, runAdminStatus},
    {"repair", "", "one repair pass: rebuild lost and corrupt fragments, spread out stacked "
     "ones, copy those of draining drives elsewhere; prints its report (root only)", 0, 0,
     repairOptions, runAdminRepair, kPassTimeout},
    {"rebalance", "", "a repair pass that also moves fragments onto the drives the current "
     "map places them on (after adding a server; root only)", 0, 0, repairOptions,
     runAdminRebalance, kPassTimeout},
    {"user", "add NAME | list | remove NAME",
     "manage named users: add prints the new keys (root only)", 1, 2, userOptions,
     runAdminUser},
};

void usage(FILE* to, std::string_view tool, std::span<const Verb> verbs) {
  std::fprintf(to, "usage: granary %s <verb> [options]\n\nverbs:\n", std::string(tool).c_str());
  for (const Verb& v : verbs) {
    std::string line = std::string(v.name) + " " + std::string(v.synopsis);
    std::fprintf(to, "  %-45s %s\n", line.c_str(), std::string(v.summary).c_str());
  }
  if (tool == "admin") {  // not through a gateway: src/main.cc runs it
    std::fprintf(to, "  %-45s %s\n", "rebuild-index --cluster FILE --dir DIR",
                 "rebuild a lost index from the checkpoints and fragment headers on the "
                 "chunk servers (with the index stopped)");
  }
  std::fprintf(to, "\nRun 'granary %s <verb> --help' for the options of a verb.\n",
               std::string(tool).c_str());
}

std::string envOr(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

}  // namespace

namespace {

int runVerbs(std::string_view tool, std::span<const Verb> verbs, int argc, char** argv) {
  const std::string prefix = "granary " + std::string(tool);
  std::string_view verb_name = argc > 1 ? argv[1] : "";
  if (verb_name.empty() || verb_name == "--help" || verb_name == "-h" || verb_name == "help") {
    usage(verb_name.empty() ? stderr : stdout, tool, verbs);
    return verb_name.empty() ? kUsage : kOk;
  }
  const Verb* verb = nullptr;
  for (const Verb& v : verbs) {
    if (v.name == verb_name) verb = &v;
  }
  if (verb == nullptr) {
    std::fprintf(stderr, "%s: unknown verb '%s'\n", prefix.c_str(), argv[1]);
    usage(stderr, tool, verbs);
    return kUsage;
  }
  po::options_description visible(prefix + " " + std::string(verb->name) + " " +
                                  std::string(verb->synopsis) + " [options]");
  visible.add_options()("help,h", "show this help")(
      "endpoint", po::value<std::string>(),
      "S3 endpoint URL (default: $GRANARY_ENDPOINT, else http://127.0.0.1:9000)")(
      "access-key", po::value<std::string>(), "access key (default: $AWS_ACCESS_KEY_ID)")(
      "secret-key", po::value<std::string>(), "secret key (default: $AWS_SECRET_ACCESS_KEY)")(
      "region", po::value<std::string>()->default_value("us-east-1"), "SigV4 region")(
      "timeout", po::value<int>()->default_value(verb->default_timeout),
      "seconds a network operation may make no progress");
  verb->options(visible);
  po::options_description all;
  all.add(visible).add_options()("args", po::value<std::vector<std::string>>(), "");
  po::positional_options_description positional;
  positional.add("args", -1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc - 1, argv + 1).options(all).positional(positional).run(),
              vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << prefix << " " << verb->name << ": " << e.what() << "\n" << visible;
    return kUsage;
  }
  if (vm.count("help")) {
    std::cout << visible;
    return kOk;
  }
  std::vector<std::string> args;
  if (vm.count("args")) args = vm["args"].as<std::vector<std::string>>();
  if (args.size() < verb->min_args || args.size() > verb->max_args) {
    std::cerr << prefix << " " << verb->name << ": expected " << verb->synopsis << "\n"
              << visible;
    return kUsage;
  }
  // An empty bucket, key or file: `put B "" FILE` would be PUT /B (CreateBucket, the file
  // its body), `stats B ""` HeadBucket.
  if (std::any_of(args.begin(), args.end(), [](const std::string& a) { return a.empty(); })) {
    std::cerr << prefix << " " << verb->name << ": an argument is empty\n" << visible;
    return kUsage;
  }

  auto opt_or_env = [&](const char* opt, const char* env, std::string fallback) {
    return vm.count(opt) ? vm[opt].as<std::string>() : envOr(env, std::move(fallback));
  };
  auto endpoint =
      parseEndpoint(opt_or_env("endpoint", "GRANARY_ENDPOINT", "http://127.0.0.1:9000"));
  if (!endpoint) {
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), endpoint.error().message().c_str());
    return kUsage;
  }
  S3Credentials creds{opt_or_env("access-key", "AWS_ACCESS_KEY_ID", ""),
                      opt_or_env("secret-key", "AWS_SECRET_ACCESS_KEY", ""),
                      vm["region"].as<std::string>()};
  if (creds.access_key.empty() || creds.secret_key.empty()) {
    std::fprintf(stderr,
                 "%s: no credentials (--access-key/--secret-key or "
                 "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)\n",
                 prefix.c_str());
    return kUsage;
  }
  const int timeout = vm["timeout"].as<int>();
  if (timeout <= 0) {
    std::fprintf(stderr, "%s: --timeout must be > 0\n", prefix.c_str());
    return kUsage;
  }
  S3Client client(std::move(*endpoint), std::move(creds), std::chrono::seconds(timeout));
  Invocation inv{std::move(args), std::move(vm), client};
  int rc = verb->run(inv);
  if (std::fflush(stdout) != 0 && rc == kOk) return failWith("cannot write standard output");
  return rc;
}

}  // namespace

int records(int argc, char** argv) { return runVerbs("records", kVerbs, argc, argv); }

int admin(int argc, char** argv) { return runVerbs("admin", kAdminVerbs, argc, argv); }

}  // namespace granary::cli

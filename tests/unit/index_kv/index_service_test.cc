// The index API's own wire (index_service.h), beyond the index tests this binary also runs
// over it: authentication, malformed requests, hostile bytes, an unreachable service.
#include <catch2/catch.hpp>

#include <new>
#include <string>
#include <thread>

#include "../gateway/forwarding_index.h"
#include "granary/index_kv/index_service.h"
#include "granary/rpc/client.h"
#include "test_util.h"

using namespace granary;
using namespace granary::index_kv;
using granary::index_kv::testing::IndexFixture;
using Code = Status::Code;

namespace {

std::string endpointOf(IndexFixture& f) {
  return "127.0.0.1:" + std::to_string(f.server_->port());
}

Status rawCall(IndexFixture& f, std::string secret, std::string path, std::string body) {
  rpc::Client client(std::move(secret), rpc::ClientOptions{}, f.clock);
  rpc::Call c;
  c.method = "POST";
  c.path = std::move(path);
  c.body = {reinterpret_cast<const uint8_t*>(body.data()), body.size()};
  auto answer = client.call(endpointOf(f), c);
  return answer ? Status::ok() : answer.error();
}

}  // namespace

TEST_CASE("The index API refuses a request signed with another secret") {
  IndexFixture f;
  auto intruder = makeRemoteIndex(endpointOf(f), "not-the-secret", RemoteIndexOptions{}, f.clock);
  CHECK(intruder->createBucket(testing::bucketInfo("b", "o", 1)).code() ==
        Code::kPermissionDenied);
  CHECK(intruder->listBuckets().error().code() == Code::kPermissionDenied);
  CHECK(f.backing().listBuckets()->empty());
}

TEST_CASE("A malformed index request is kInvalidArgument and changes nothing") {
  IndexFixture f;
  const std::string secret = "index-test-secret";
  CHECK(rawCall(f, secret, "/internal/v1/index/create_bucket", "not cbor").code() ==
        Code::kInvalidArgument);
  // Valid CBOR ({"bucket": 1}), the wrong type of field.
  CHECK(rawCall(f, secret, "/internal/v1/index/create_bucket", "\xa1\x66" "bucket\x01")
            .code() == Code::kInvalidArgument);
  const Status unknown = rawCall(f, secret, "/internal/v1/index/no_such_method", "\xa0");
  CHECK(unknown.code() == Code::kInvalidArgument);
  // What RemoteIndex::holdLease takes for an index service older than leases.
  CHECK(unknown.message().find("no such index method") != std::string::npos);
  CHECK(rawCall(f, secret, "/internal/v1/elsewhere", "").code() == Code::kInvalidArgument);
  // A million nested arrays: refused, where nlohmann's recursive reader would have
  // overflowed the stack.
  CHECK(rawCall(f, secret, "/internal/v1/index/create_bucket", std::string(1'000'000, '\x81'))
            .code() == Code::kInvalidArgument);
  CHECK(f.backing().listBuckets()->empty());
}

TEST_CASE("An index call that throws after it committed is not answered as a refusal") {
  // A gateway removes the blobs of a commit the index refused (kInvalidArgument among
  // others); one that committed and then ran out of memory must not read as refused.
  IndexFixture f;
  struct ThrowsAfterCommit : ForwardingIndex {
    using ForwardingIndex::ForwardingIndex;
    Status createBucket(const BucketInfo& b) override {
      Status st = ForwardingIndex::createBucket(b);
      if (st.isOk()) throw std::bad_alloc();
      return st;
    }
  } throwing(f.backing());
  rpc::ServerOptions options;
  options.cluster_secret = "index-test-secret";
  WorkerPool pool{2, "throwing-index"};
  auto server = serveIndex(options, throwing, pool, f.clock);
  REQUIRE(server.has_value());
  std::jthread serving([s = server->get()] { s->run(); });
  auto remote = makeRemoteIndex("127.0.0.1:" + std::to_string((*server)->port()),
                                options.cluster_secret, RemoteIndexOptions{}, f.clock);
  const Status st = remote->createBucket(testing::bucketInfo("b", "o", 1));
  (*server)->stop();
  serving.join();
  CHECK(st.code() == Code::kInternal);
  CHECK(f.backing().getBucket("b").has_value());
}

TEST_CASE("Keys with NUL and bytes that are not UTF-8 cross the index API intact") {
  IndexFixture f;
  f.makeBucket("b");
  std::string key = "a";
  key.push_back('\0');
  key.append("b\xff\xfe/\xc3(");
  Manifest m = f.inlineManifest(std::string("body\0\xff", 6));
  m.metadata["k"] = std::string(1, static_cast<char>(0x80));
  REQUIRE(f.index->putObject("b", key, m, Precondition::mustNotExist()).has_value());
  auto got = f.index->getObject("b", key);
  REQUIRE(got.has_value());
  CHECK(*got == m);
  auto listed = f.index->listObjects("b", ListRequest{});
  REQUIRE(listed.has_value());
  REQUIRE(listed->objects.size() == 1);
  CHECK(listed->objects[0].key == key);
  CHECK(listed->objects[0].version == m.version);
}

TEST_CASE("An index request over rpc's 64 MiB default, as a 5 TiB object's manifest, is served") {
  // A Complete of ~4.5 TiB or a relocation of ~2.4 TiB names more stripes than 64 MiB
  // of CBOR holds; an inline body of the same size stands in for them here.
  IndexFixture f;
  f.makeBucket("b");
  Manifest m = f.inlineManifest(std::string(size_t{70} << 20, 'x'));
  REQUIRE(f.index->putObject("b", "big", m, Precondition::none()).has_value());
  auto got = f.index->getObject("b", "big");
  REQUIRE(got.has_value());
  CHECK(got->inline_data.size() == size_t{70} << 20);
}

TEST_CASE("An index service that is down is kUnavailable, and usable again once back") {
  IndexFixture f;
  f.makeBucket("b");
  const std::string endpoint = endpointOf(f);
  f.server_->stop();
  f.serving_.join();
  f.server_.reset();
  RemoteIndexOptions o;
  o.retries = 0;
  auto remote = makeRemoteIndex(endpoint, "index-test-secret", o, f.clock);
  CHECK(remote->getBucket("b").error().code() == Code::kUnavailable);
  CHECK(remote->createBucket(testing::bucketInfo("c", "o", 1)).code() == Code::kUnavailable);
  // Statistics too are an error, not zeros (a metric would show an empty index).
  CHECK(remote->recordIndexStats().error().code() == Code::kUnavailable);

  f.reopen();  // a new server (and port) over the same directory
  CHECK(f.index->getBucket("b").has_value());
  CHECK(f.index->getBucket("c").error().code() == Code::kNotFound);
}

TEST_CASE("The index's commit counts cross the index API with the time it opened") {
  IndexFixture f;
  f.makeBucket("b");
  auto local = f.backing().commitStats();
  auto remote = f.index->commitStats();
  REQUIRE(local.has_value());
  REQUIRE(remote.has_value());
  CHECK(remote->batches >= 1);
  CHECK(remote->batches == local->batches);
  CHECK(remote->requests == local->requests);
  CHECK(local->opened_unix_nanos == static_cast<uint64_t>(testing::kStartNanos));
  CHECK(remote->opened_unix_nanos == local->opened_unix_nanos);
  // Opened again later: its counts start again, and say so.
  f.clock.advance(5'000'000'000);
  f.reopen();
  CHECK(f.index->commitStats()->opened_unix_nanos ==
        static_cast<uint64_t>(testing::kStartNanos) + 5'000'000'000);
}

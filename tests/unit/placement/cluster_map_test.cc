#include "granary/placement/cluster_map.h"

#include <catch2/catch.hpp>
#include <string>

using granary::Status;
using granary::placement::ClusterMap;
using granary::placement::Drive;

namespace {

const char* kExample = R"({
  "epoch": 7,
  "ec": {"k": 2, "m": 1},
  "drives": [
    {"id": "d0", "server": "s0", "domain": "rack-a", "weight": 1.5,
     "endpoint": "10.0.0.1:9100", "path": "drives/d0"},
    {"id": "d1", "server": "s1", "domain": "rack-b"},
    {"id": "D.2_x-y", "server": "s2", "domain": "rack-c", "weight": 0.25, "path": "/mnt/x"}
  ]
})";

// The example with `from` replaced by `to`: one focused mutation per error test.
std::string mutate(const std::string& from, const std::string& to) {
  std::string s = kExample;
  auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  s.replace(pos, from.size(), to);
  return s;
}

// Parses `json`, expects kInvalidArgument and returns the message.
std::string rejection(const std::string& json) {
  auto r = ClusterMap::fromJson(json);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Status::Code::kInvalidArgument);
  return r.error().message();
}

}  // namespace

TEST_CASE("A cluster map parses with defaults for optional drive fields") {
  auto r = ClusterMap::fromJson(kExample);
  REQUIRE(r.has_value());
  const ClusterMap& map = *r;
  CHECK(map.epoch == 7);
  CHECK(map.ec == granary::ec::EcProfile{2, 1});
  REQUIRE(map.drives.size() == 3);
  CHECK(map.drives[0] == Drive{"d0", "s0", "rack-a", 1.5, "10.0.0.1:9100", "drives/d0"});
  CHECK(map.drives[1] == Drive{"d1", "s1", "rack-b", 1.0, "", ""});
  CHECK(map.drives[2].weight == 0.25);
  CHECK_FALSE(map.drives[0].draining);
  auto drained =
      ClusterMap::fromJson(mutate(R"("weight": 1.5)", R"("weight": 1.5, "draining": true)"));
  REQUIRE(drained.has_value());
  CHECK(drained->drives[0].draining);
  CHECK(map.domainCount() == 3);
  REQUIRE(map.findDrive("d1") != nullptr);
  CHECK(map.findDrive("d1")->server == "s1");
  CHECK(map.findDrive("d9") == nullptr);
}

TEST_CASE("toJson round-trips through fromJson") {
  ClusterMap map;
  map.epoch = 123456789012ull;
  map.ec = {4, 2};
  for (int i = 0; i < 8; ++i) {
    std::string id = "drive-" + std::to_string(i);
    map.drives.push_back({id, "srv" + std::to_string(i / 2), "dom" + std::to_string(i % 6),
                          0.1 + i / 3.0, i % 2 ? "host:" + std::to_string(9000 + i) : "",
                          "drives/" + id});
  }
  map.drives[3].draining = true;
  auto back = ClusterMap::fromJson(map.toJson());
  REQUIRE(back.has_value());
  CHECK(back->drives[3].draining);
  CHECK_FALSE(back->drives[2].draining);
  CHECK(map.toJson().find("\"draining\": true") != std::string::npos);
  CHECK(back->epoch == map.epoch);
  CHECK(back->ec == map.ec);
  CHECK(back->drives == map.drives);  // weights survive bit-exactly
  CHECK(back->toJson() == map.toJson());
}

TEST_CASE("Cluster map validation names the problem") {
  CHECK(rejection("{").find("not valid JSON") != std::string::npos);
  CHECK(rejection("[]").find("object") != std::string::npos);
  CHECK(rejection(mutate(R"("id": "d1")", R"("id": "d0")")).find("duplicate drive id \"d0\"") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("weight": 1.5)", R"("weight": 0)")).find("weight") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("weight": 1.5)", R"("weight": -1)")).find("weight") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("weight": 1.5)", R"("weight": "2")")).find("weight") !=
        std::string::npos);
  for (const char* bad_id : {"d 0", "d/0", "", "d\u00e9", "d:0"}) {
    INFO(bad_id);
    CHECK(rejection(mutate(R"("id": "d0")", std::string(R"("id": ")") + bad_id + "\""))
              .find("[A-Za-z0-9._-]") != std::string::npos);
  }
  // Three domains cannot hold k + m = 4 fragments of a stripe.
  CHECK(rejection(mutate(R"("m": 1)", R"("m": 2)")).find("failure domains") != std::string::npos);
  CHECK(
      rejection(mutate(R"("domain": "rack-c")", R"("domain": "rack-a")")).find("failure domains") !=
      std::string::npos);
  CHECK(rejection(mutate(R"("k": 2, "m": 1)", R"("k": 0, "m": 1)")).find("ec.k") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("k": 2)", R"("k": 2.5)")).find("ec.k") != std::string::npos);
  CHECK(rejection(mutate(R"("k": 2)", R"("k": 300)")).find("ec.k") != std::string::npos);
  CHECK(rejection(mutate(R"("k": 2)", R"("k": 40)")).find("at most 32") != std::string::npos);
  CHECK(rejection(mutate(R"("epoch": 7)", R"("epoch": -1)")).find("epoch") != std::string::npos);
  CHECK(rejection(mutate(R"("domain": "rack-b")", R"("domain": "")")).find("domain") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("weight": 1.5)", R"("wieght": 1.5)")).find("unknown field") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("weight": 1.5)", R"("weight": 1.5, "draining": "yes")"))
            .find("draining must be true or false") != std::string::npos);
  // k = 2: one domain left with a drive to write to is too few (two draining of three).
  const std::string two_draining =
      mutate(R"("domain": "rack-b")", R"("domain": "rack-b", "draining": true)");
  CHECK(ClusterMap::fromJson(two_draining).has_value());
  auto pos = two_draining.find(R"("domain": "rack-c")");
  std::string worse = two_draining;
  worse.replace(pos, 18, R"("domain": "rack-c", "draining": true)");
  CHECK(rejection(worse).find("not draining") != std::string::npos);
  // One chunk server's drives in two domains: losing that server loses two fragments.
  CHECK(rejection(mutate(R"("domain": "rack-b")",
                         R"("domain": "rack-b", "endpoint": "10.0.0.1:9100")"))
            .find("share a domain") != std::string::npos);
}

TEST_CASE("Cluster map validation reports missing fields") {
  CHECK(rejection(mutate(R"("epoch": 7,)", "")).find("missing field \"epoch\"") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("ec": {"k": 2, "m": 1},)", "")).find("missing field \"ec\"") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("k": 2, )", "")).find("missing field \"k\"") != std::string::npos);
  CHECK(rejection(mutate(R"("id": "d1", )", "")).find("drives[1]: missing field \"id\"") !=
        std::string::npos);
  CHECK(rejection(mutate(R"("server": "s1", )", "")).find("missing field \"server\"") !=
        std::string::npos);
  CHECK(rejection(mutate(R"(, "domain": "rack-b")", "")).find("missing field \"domain\"") !=
        std::string::npos);
  CHECK(rejection(R"({"epoch": 1, "ec": {"k": 1, "m": 0}})").find("missing field \"drives\"") !=
        std::string::npos);
  CHECK(rejection(R"({"epoch": 1, "ec": {"k": 1, "m": 0}, "drives": {}})").find("array") !=
        std::string::npos);
  CHECK(
      rejection(R"({"epoch": 1, "ec": {"k": 1, "m": 0}, "drives": []})").find("failure domains") !=
      std::string::npos);
}

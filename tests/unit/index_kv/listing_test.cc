#include <catch2/catch.hpp>

#include <fmt/core.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "test_util.h"

using namespace granary;
using namespace granary::index_kv;
using granary::index_kv::testing::IndexFixture;

namespace {

// One listing entry as the model sees it: a key or a common prefix.
struct Entry {
  std::string name;
  bool is_prefix = false;
  bool operator==(const Entry&) const = default;
};

// S3 semantics from first principles: the sorted, deduplicated entries after start_after.
std::vector<Entry> model(const std::set<std::string>& keys, const ListRequest& req) {
  std::vector<Entry> out;
  for (const std::string& k : keys) {
    if (!k.starts_with(req.prefix)) continue;
    Entry e{k, false};
    if (!req.delimiter.empty()) {
      size_t pos = k.find(req.delimiter, req.prefix.size());
      if (pos != std::string::npos) e = Entry{k.substr(0, pos + req.delimiter.size()), true};
    }
    if (e.name <= req.start_after) continue;
    if (!out.empty() && out.back() == e) continue;
    out.push_back(e);
  }
  return out;
}

// Merges a ListResult's objects and prefixes back into one ordered sequence.
std::vector<Entry> entries(const ListResult& r) {
  std::vector<Entry> out;
  for (const auto& o : r.objects) out.push_back(Entry{o.key, false});
  for (const auto& p : r.common_prefixes) out.push_back(Entry{p, true});
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

std::vector<Entry> listAll(Index& index, const std::string& bucket, ListRequest req) {
  std::vector<Entry> out;
  for (int page = 0; page < 100000; ++page) {
    auto r = index.listObjects(bucket, req);
    REQUIRE(r.has_value());
    REQUIRE(r->objects.size() + r->common_prefixes.size() <= req.max_keys);
    auto e = entries(*r);
    out.insert(out.end(), e.begin(), e.end());
    if (!r->truncated) break;
    REQUIRE_FALSE(e.empty());
    REQUIRE(r->next_start_after == e.back().name);
    req.start_after = r->next_start_after;
  }
  return out;
}

void putKeys(IndexFixture& f, const std::string& bucket, const std::vector<std::string>& keys,
             int threads = 16) {
  std::vector<Manifest> manifests;
  for (const auto& k : keys) manifests.push_back(f.inlineManifest(k));
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = t; i < keys.size(); i += threads) {
        if (!f.index->putObject(bucket, keys[i], manifests[i], Precondition::none())) {
          ++failures;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  REQUIRE(failures == 0);
}

std::vector<std::string> names(const std::vector<Entry>& es) {
  std::vector<std::string> out;
  for (const auto& e : es) out.push_back(e.is_prefix ? e.name + "(P)" : e.name);
  return out;
}

}  // namespace

TEST_CASE("Listing with a prefix returns only the keys under it, in order") {
  IndexFixture f;
  f.makeBucket("b");
  putKeys(f, "b", {"a", "ab", "abc", "abd/x", "ac", "b"});
  auto r = f.index->listObjects("b", ListRequest{"ab", "", "", 1000});
  REQUIRE(r.has_value());
  CHECK(names(entries(*r)) == std::vector<std::string>{"ab", "abc", "abd/x"});
  CHECK_FALSE(r->truncated);
  CHECK(r->objects[0].size == 2);  // inlineManifest(k) has size k.size()
}

TEST_CASE("Listing with a delimiter rolls keys up into common prefixes") {
  IndexFixture f;
  f.makeBucket("b");
  putKeys(f, "b", {"a/1", "a/2", "a/b/3", "b", "c/", "c/x", "d//e", "photos/2024/x.jpg"});
  auto r = f.index->listObjects("b", ListRequest{"", "/", "", 1000});
  REQUIRE(r.has_value());
  CHECK(names(entries(*r)) ==
        std::vector<std::string>{"a/(P)", "b", "c/(P)", "d/(P)", "photos/(P)"});
  auto inner = f.index->listObjects("b", ListRequest{"a/", "/", "", 1000});
  REQUIRE(inner.has_value());
  CHECK(names(entries(*inner)) == std::vector<std::string>{"a/1", "a/2", "a/b/(P)"});
  auto multi = f.index->listObjects("b", ListRequest{"photos", "/2024/", "", 1000});
  CHECK(names(entries(*multi)) == std::vector<std::string>{"photos/2024/(P)"});
}

TEST_CASE("start_after skips up to and including it, and whole common prefixes it is in") {
  IndexFixture f;
  f.makeBucket("b");
  putKeys(f, "b", {"a/1", "a/2", "a/3", "b", "c/1"});
  auto flat = f.index->listObjects("b", ListRequest{"", "", "a/2", 1000});
  CHECK(names(entries(*flat)) == std::vector<std::string>{"a/3", "b", "c/1"});
  // Continuing after the prefix "a/" must not return any key under it.
  auto after_prefix = f.index->listObjects("b", ListRequest{"", "/", "a/", 1000});
  CHECK(names(entries(*after_prefix)) == std::vector<std::string>{"b", "c/(P)"});
  // start_after inside a common prefix: the prefix sorts before it, so it is skipped.
  auto inside = f.index->listObjects("b", ListRequest{"", "/", "a/1", 1000});
  CHECK(names(entries(*inside)) == std::vector<std::string>{"b", "c/(P)"});
  auto before = f.index->listObjects("b", ListRequest{"", "/", "a", 1000});
  CHECK(names(entries(*before)) == std::vector<std::string>{"a/(P)", "b", "c/(P)"});
  auto past = f.index->listObjects("b", ListRequest{"a/", "", "zzz", 1000});
  CHECK(entries(*past).empty());
}

TEST_CASE("max_keys of zero returns nothing and is not truncated") {
  IndexFixture f;
  f.makeBucket("b");
  putKeys(f, "b", {"a", "b"});
  auto r = f.index->listObjects("b", ListRequest{"", "", "", 0});
  REQUIRE(r.has_value());
  CHECK(entries(*r).empty());
  CHECK_FALSE(r->truncated);
}

TEST_CASE("max_keys counts objects and prefixes together and truncates exactly") {
  IndexFixture f;
  f.makeBucket("b");
  putKeys(f, "b", {"a/1", "b", "c/1"});
  auto two = f.index->listObjects("b", ListRequest{"", "/", "", 2});
  CHECK(names(entries(*two)) == std::vector<std::string>{"a/(P)", "b"});
  CHECK(two->truncated);
  CHECK(two->next_start_after == "b");
  auto three = f.index->listObjects("b", ListRequest{"", "/", "", 3});
  CHECK(entries(*three).size() == 3);
  CHECK_FALSE(three->truncated);
  CHECK(three->next_start_after.empty());
}

TEST_CASE("Paginated listings match a model over random keys, with no duplicates") {
  IndexFixture f;
  f.makeBucket("b");
  f.makeBucket("b-other");
  const std::vector<std::string> parts = {"a", "b", "/", "/", "+", "%", " ", "\xC3\xA9",
                                          "\xE6\x97\xA5", "z", "0", "\xF0\x9F\x98\x80"};
  std::mt19937_64 rng(77);
  std::set<std::string> keys;
  while (keys.size() < 600) {
    std::string k;
    size_t n = 1 + rng() % 7;
    for (size_t i = 0; i < n; ++i) k += parts[rng() % parts.size()];
    keys.insert(k);
  }
  putKeys(f, "b", std::vector<std::string>(keys.begin(), keys.end()));
  putKeys(f, "b-other", {"a", "a/b", "zzz"});

  const std::vector<std::string> prefixes = {"", "a", "a/", "/", "\xC3\xA9", "b/+", "q"};
  const std::vector<std::string> delimiters = {"", "/", "+", "/a", "\xE6\x97\xA5"};
  for (const auto& prefix : prefixes) {
    for (const auto& delimiter : delimiters) {
      for (size_t max_keys : {1, 3, 7, 1000}) {
        ListRequest req{prefix, delimiter, "", max_keys};
        auto expected = model(keys, req);
        auto got = listAll(*f.index, "b", req);
        INFO("prefix '" << prefix << "' delimiter '" << delimiter << "' max " << max_keys);
        REQUIRE(names(got) == names(expected));
      }
      // A random start_after, as a V1 marker could be.
      for (int i = 0; i < 5; ++i) {
        auto it = keys.begin();
        std::advance(it, rng() % keys.size());
        std::string start_after = *it;
        if (rng() % 2) start_after.pop_back();
        ListRequest req{prefix, delimiter, start_after, 5};
        INFO("prefix '" << prefix << "' delimiter '" << delimiter << "' start_after '"
                        << start_after << "'");
        REQUIRE(names(listAll(*f.index, "b", req)) == names(model(keys, req)));
      }
    }
  }
}

TEST_CASE("Keys of a bucket whose name extends another's never leak into its listing") {
  IndexFixture f;
  f.makeBucket("a");
  f.makeBucket("ab");
  f.makeBucket("a0");
  putKeys(f, "a", {"k1", "k2"});
  putKeys(f, "ab", {"k0", "k3"});
  putKeys(f, "a0", {"\xFF"});
  auto r = f.index->listObjects("a", ListRequest{});
  REQUIRE(r.has_value());
  CHECK(names(entries(*r)) == std::vector<std::string>{"k1", "k2"});
  auto ab = f.index->listObjects("ab", ListRequest{"", "/", "", 1000});
  CHECK(names(entries(*ab)) == std::vector<std::string>{"k0", "k3"});
  CHECK(f.index->listObjects("missing", ListRequest{})->objects.empty());
}

TEST_CASE("A delimiter listing over 200 prefixes of 100 keys seeks past each prefix") {
  IndexFixture f;
  f.makeBucket("big");
  std::vector<std::string> keys;
  for (int p = 0; p < 200; ++p) {
    for (int k = 0; k < 100; ++k) {
      keys.push_back(fmt::format("dir{:03}/file{:04}", p, k));
    }
  }
  putKeys(f, "big", keys, 64);
  auto r = f.index->listObjects("big", ListRequest{"", "/", "", 1000});
  REQUIRE(r.has_value());
  CHECK(r->common_prefixes.size() == 200);
  CHECK(r->objects.empty());
  CHECK_FALSE(r->truncated);
  CHECK(r->keys_examined < 2000);
  WARN("keys examined for 200 prefixes over 20000 keys: " << r->keys_examined);
  // A walk over every key would examine 20,000; seeking examines about 10 per prefix.
  // Paging through the prefixes 7 at a time still never walks inside one.
  ListRequest req{"", "/", "", 7};
  uint64_t examined = 0;
  size_t prefixes = 0;
  for (;;) {
    auto page = f.index->listObjects("big", req);
    REQUIRE(page.has_value());
    examined += page->keys_examined;
    prefixes += page->common_prefixes.size();
    if (!page->truncated) break;
    req.start_after = page->next_start_after;
  }
  CHECK(prefixes == 200);
  CHECK(examined < 2000);
  auto inner = f.index->listObjects("big", ListRequest{"dir123/", "/", "", 1000});
  CHECK(inner->objects.size() == 100);
}

// Exclusions: the cool-down rule, the record, and the job's list in its
// store, updated by several nodes at once.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <thread>

#include "ccrun/exclusion.h"
#include "ccrun/hash_store.h"
#include "ccrun/job_state.h"

using namespace ccrun;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

TEST_CASE("exclusion: the cool-down doubles with each offence, up to a day", "[exclusion]") {
  CHECK(exclusion_cooldown(60s, 1) == 60s);
  CHECK(exclusion_cooldown(60s, 2) == 120s);
  CHECK(exclusion_cooldown(60s, 4) == 480s);
  CHECK(exclusion_cooldown(60s, 1000) == kMaxCooldown);
  CHECK(exclusion_cooldown(48h, 1) == kMaxCooldown);
}

TEST_CASE("exclusion: a list counts a host's offences, live or past", "[exclusion]") {
  ExclusionList list;
  const Exclusion& first = list.add("gpu7", "its health gate failed", 1'000'000, 10s);
  CHECK(first.offences == 1);
  CHECK(first.until_ms == 1'010'000);
  CHECK(list.active("gpu7", 1'009'999));
  CHECK_FALSE(list.active("gpu7", 1'010'000));  // the cool-down ended
  CHECK_FALSE(list.active("gpu1", 1'000'000));
  // Again after its cool-down: twice as long.
  const Exclusion& second = list.add("gpu7", "its workers failed first", 2'000'000, 10s);
  CHECK(second.offences == 2);
  CHECK(second.until_ms == 2'020'000);
  list.add("gpu3", "its health gate failed", 2'000'000, 10s);
  auto live = list.all_active(2'000'001);
  REQUIRE(live.size() == 2);
  CHECK(live[0].host == "gpu3");  // soonest end first
  ExclusionList back = ExclusionList::from_json(list.to_json());
  REQUIRE(back.by_host.count("gpu7"));
  CHECK(back.by_host["gpu7"].offences == 2);
  CHECK(back.by_host["gpu7"].reason == "its workers failed first");
  CHECK(ExclusionList::from_json("").by_host.empty());
  CHECK(ExclusionList::from_json("not json").by_host.empty());
}

TEST_CASE("exclusion: nodes excluding themselves at once all land in the store", "[exclusion]") {
  store::HashStore s;
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&s, i] {
      exclude_node(s, "job", "node" + std::to_string(i % 4), "gate", 60s);
    });
  }
  for (auto& t : threads) t.join();
  ExclusionList list = read_exclusions(s, "job");
  REQUIRE(list.by_host.size() == 4);
  for (const auto& [host, e] : list.by_host) {
    CHECK(e.offences == 2);  // each host twice: the second doubled
    CHECK(e.until_ms - e.since_ms == 120'000);
  }
  CHECK(read_exclusions(s, "other").by_host.empty());
}

TEST_CASE("exclusion: its description says until when, which offence and why", "[exclusion]") {
  Exclusion e{"gpu7", "its health gate failed: user: exit 1", 0, 1'764'166'931'000, 2};
  std::string text = describe(e, 1'764'166'878'000);
  CHECK(text == "until 2025-11-26 14:22:11 UTC (53s from now; offence 2): its health gate "
                "failed: user: exit 1");
}

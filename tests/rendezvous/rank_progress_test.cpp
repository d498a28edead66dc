// A rank's progress records (include/ccrun/rank_progress.h): their JSON
// forms, read back from this version's and from others'.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "ccrun/rank_progress.h"

using namespace ccrun;

TEST_CASE("rank views round-trip with their groups and start-up", "[rank_progress]") {
  RankView r;
  r.rank = 3, r.local_rank = 1, r.node_rank = 2, r.host = "h2", r.pid = 99;
  r.reporting = true, r.idle_ms = 1'500, r.steps = 40, r.steps_per_s = 2.5;
  r.busy_ms_per_step = 12.5, r.rss_kb = 2048;
  r.groups.push_back({7, 4, 11, 10, uint32_t(progress::Op::kAllReduce), 1024, 300});
  r.startup.rank = 3, r.startup.spawned_ms = 1'000, r.startup.warm = true;
  r.startup.after_spawn_us[size_t(progress::Phase::kStep)] = 250'000;
  RankView back = RankView::from_json(r.to_json());
  CHECK(back.rank == 3);
  CHECK(back.local_rank == 1);
  CHECK(back.node_rank == 2);
  CHECK(back.host == "h2");
  CHECK(back.pid == 99);
  CHECK(back.reporting);
  CHECK(back.idle_ms == 1'500);
  CHECK(back.steps == 40);
  CHECK(back.steps_per_s == 2.5);
  CHECK(back.busy_ms_per_step == 12.5);
  CHECK(back.rss_kb == 2048);
  REQUIRE(back.groups.size() == 1);
  CHECK(back.groups[0].id == 7);
  CHECK(back.groups[0].op == uint32_t(progress::Op::kAllReduce));
  CHECK(back.groups[0].waiting_ms == 300);
  CHECK(back.startup.warm);
  CHECK(back.startup.done());
  CHECK(back.startup.last_us() == 250'000);
}

TEST_CASE("rank views: anything but an object reads as an unknown rank", "[rank_progress]") {
  CHECK(RankView::from_json(nlohmann::json("junk")).rank == -1);
  CHECK(RankView::from_json(nlohmann::json::object()).groups.empty());
  CHECK(StartupTimeline::from_json(nlohmann::json(3)).rank == -1);
}

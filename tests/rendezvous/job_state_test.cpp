// The job's store records (round ends, the closed record) and the one reader
// of a job's state, read back from what real rendezvous handlers wrote.
#include <catch2/catch.hpp>

#include <csignal>

#include "ccrun/hash_store.h"
#include "ccrun/job_keys.h"
#include "ccrun/job_state.h"
#include "rendezvous/rendezvous_nodes.h"

using namespace ccrun;
using namespace ccrun::rendezvous::testing;

TEST_CASE("round end records: every kind round-trips by its one name", "[job_state]") {
  for (auto kind : {RoundEndKind::kRestartRequested, RoundEndKind::kNodeDead,
                    RoundEndKind::kNodeWaiting, RoundEndKind::kAllDone, RoundEndKind::kClosed,
                    RoundEndKind::kStoreLost}) {
    RoundEnd e{kind, 3, "why", 4};
    RoundEnd back = RoundEnd::from_json(e.to_json());
    CHECK(back.kind == kind);
    CHECK(back.node == 3);
    CHECK(back.detail == "why");
    CHECK(back.next_expected == 4);
    CHECK(parse_round_end_kind(to_string(kind)) == kind);
  }
  CHECK(to_string(RoundEndKind::kNodeDead) == "dead");
  CHECK_FALSE(parse_round_end_kind("exploded"));
}

TEST_CASE("round end records: unreadable text ends the round, saying so", "[job_state]") {
  for (std::string text : {"", "not json", "[1,2]", R"({"kind": 7})"}) {
    RoundEnd e = RoundEnd::from_json(text);
    CHECK(e.kind == RoundEndKind::kClosed);
    CHECK(e.detail.find("unreadable round end record") == 0);
  }
  CHECK(RoundEnd::from_json(R"({"kind": "exploded"})").kind == RoundEndKind::kClosed);
}

TEST_CASE("closed records: a stop signal is a field, not words", "[job_state]") {
  ClosedRecord c = ClosedRecord::from_json(ClosedRecord{"ccrun received SIGTERM", SIGTERM}.to_json());
  CHECK(c.reason == "ccrun received SIGTERM");
  CHECK(c.stop_signal == SIGTERM);
  CHECK(ClosedRecord::from_json(R"({"reason": "no restarts left"})").stop_signal == 0);
}

TEST_CASE("job state: unknown, forming, running, finished", "[job_state]") {
  auto store = std::make_shared<store::HashStore>();
  CHECK(read_job_state(*store, "test").phase == JobPhase::kUnknown);
  store->add(JobKeys("other").joined(0), 1);  // one agent of another job came
  JobState forming = read_job_state(*store, "other");
  CHECK(forming.phase == JobPhase::kForming);
  CHECK(forming.joined == 1);

  auto nodes = join_all(store, std::vector<rendezvous::RendezvousOptions>(2, options("c10d", 2, 2)));
  JobState running = read_job_state(*store, "test");
  CHECK(running.phase == JobPhase::kRunning);
  CHECK(running.round == 0);
  CHECK(running.num_nodes == 2);
  REQUIRE(running.node_statuses.size() == 2);
  CHECK(running.node_statuses[0].empty());  // nobody beat yet

  watch_all(nodes);
  for (auto& n : nodes) n->handler->mark_done();
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEndKind::kAllDone);
  JobState done = read_job_state(*store, "test");
  CHECK(done.phase == JobPhase::kFinished);
  CHECK_FALSE(done.node_statuses[0].empty());  // each watcher beat once
}

TEST_CASE("job state: a failure restarts, a signal stops, a close fails", "[job_state]") {
  auto store = std::make_shared<store::HashStore>();
  auto nodes = join_all(store, std::vector<rendezvous::RendezvousOptions>(2, options("c10d", 2, 2)));
  watch_all(nodes);
  nodes[1]->handler->request_restart(R"({"rank": 3, "exit_code": 1})");
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEndKind::kRestartRequested);
  JobState restarting = read_job_state(*store, "test");
  CHECK(restarting.phase == JobPhase::kRestarting);
  CHECK(restarting.reason == "a worker failed");
  CHECK(restarting.last_failure == R"({"rank": 3, "exit_code": 1})");
  CHECK(restarting.last_failure_round == 0);

  SECTION("stopped by a signal") {
    nodes[0]->handler->set_closed({"ccrun received SIGINT on node 0", SIGINT});
    JobState st = read_job_state(*store, "test");
    CHECK(st.phase == JobPhase::kStopped);
    CHECK(st.stop_signal == SIGINT);
  }
  SECTION("failed for good") {
    nodes[0]->handler->set_closed({"no restarts left (--max-restarts 0)", 0});
    JobState st = read_job_state(*store, "test");
    CHECK(st.phase == JobPhase::kFailed);
    CHECK(st.reason == "no restarts left (--max-restarts 0)");
  }
}

TEST_CASE("job keys: a job's done markers, told apart from its other keys", "[job_state]") {
  JobKeys k("job-7");
  auto split = [](const std::string& key) { return JobKeys::split(key); };
  REQUIRE(split(k.closed()));
  CHECK(split(k.closed())->job == "ccrun/job-7/");
  CHECK(split(k.closed())->done_marker);
  CHECK(split(k.all_exited(12))->done_marker);
  CHECK_FALSE(split(k.exited(12))->done_marker);
  CHECK_FALSE(split(k.heartbeat(0, 1))->done_marker);
  CHECK_FALSE(split("ccrun/job-7/round//all_exited")->done_marker);
  CHECK_FALSE(split("ccrun/job-7/round/x1/all_exited")->done_marker);
  CHECK_FALSE(split("torch/rank0"));
  CHECK_FALSE(split("ccrun//closed"));
}

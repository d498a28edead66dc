// The job's store records (round ends, the closed record) and the one reader
// of a job's state, read back from what real rendezvous handlers wrote.
#include <catch2/catch.hpp>

#include <csignal>
#include <nlohmann/json.hpp>

#include "ccrun/hash_store.h"
#include "ccrun/job_keys.h"
#include "ccrun/job_state.h"
#include "rendezvous/rendezvous_nodes.h"

using namespace ccrun;
using namespace ccrun::rendezvous::testing;

TEST_CASE("failure records: every field and every cause round-trip", "[job_state]") {
  for (const auto& [name, cause] : kFailureCauseNames) {
    Failure f;
    f.node_rank = 1, f.hostname = "h1", f.addr = "10.0.0.2", f.rank = 5, f.local_rank = 1;
    f.pid = 42, f.exit_code = 3, f.signal = 9, f.time_ms = 1'700'000'000'123, f.attempt = 2;
    f.cause = cause, f.message = "boom", f.stderr_tail = "last line";
    nlohmann::json j = f.to_json();
    CHECK(j["cause"] == name);  // the stored name, "" for a plain exit
    Failure back = Failure::from_json(j);
    CHECK(back.node_rank == 1);
    CHECK(back.hostname == "h1");
    CHECK(back.addr == "10.0.0.2");
    CHECK(back.rank == 5);
    CHECK(back.local_rank == 1);
    CHECK(back.pid == 42);
    CHECK(back.exit_code == 3);
    CHECK(back.signal == 9);
    CHECK(back.time_ms == 1'700'000'000'123);
    CHECK(back.attempt == 2);
    CHECK(back.cause == cause);
    CHECK(back.message == "boom");
    CHECK(back.stderr_tail == "last line");
  }
  CHECK(names_text(kFailureCauseNames) == ", hang, oom or timer");
}

TEST_CASE("failure records: other versions' and unreadable records", "[job_state]") {
  // A cause this version does not know, fields missing: defaults.
  Failure newer = Failure::from_json(nlohmann::json{{"rank", 2}, {"cause", "gpu_fell_off"}});
  CHECK(newer.rank == 2);
  CHECK(newer.cause == FailureCause::kNone);
  CHECK(newer.node_rank == -1);
  // Not an object, or a field of another type: a failure that says so.
  CHECK(Failure::from_json(nlohmann::json::parse("[1]")).message == "unreadable failure record");
  Failure typed = Failure::from_json(nlohmann::json{{"rank", "three"}});
  CHECK(typed.rank == -1);
  CHECK(typed.message.find("unreadable failure record") == 0);
}

TEST_CASE("node status records round-trip with their ranks' progress", "[job_state]") {
  NodeStatus n;
  n.host = "h0", n.addr = "10.0.0.1", n.node_rank = 1, n.first_rank = 4, n.nproc = 4;
  n.attempt = 2, n.beat_ms = 1'700'000'000'000, n.pid = 77;
  RankView r;
  r.rank = 5, r.node_rank = 1, r.steps = 9, r.groups.push_back({0, 8, 3, 2, 1, 16, 250});
  n.ranks.push_back(r);
  nlohmann::json j = n.to_json();
  for (const char* key : {"host", "addr", "node_rank", "first_rank", "nproc", "attempt", "beat_ms",
                          "pid", "ranks"}) {
    CHECK(j.contains(key));  // the keys `ccrun status` of other versions reads
  }
  NodeStatus back = NodeStatus::from_json(j);
  CHECK(back.host == "h0");
  CHECK(back.addr == "10.0.0.1");
  CHECK(back.node_rank == 1);
  CHECK(back.first_rank == 4);
  CHECK(back.nproc == 4);
  CHECK(back.attempt == 2);
  CHECK(back.beat_ms == 1'700'000'000'000);
  CHECK(back.pid == 77);
  REQUIRE(back.ranks.size() == 1);
  CHECK(back.ranks[0].rank == 5);
  CHECK(back.ranks[0].steps == 9);
  REQUIRE(back.ranks[0].groups.size() == 1);
  CHECK(back.ranks[0].groups[0].waiting_ms == 250);
  // A node with no ranks to show publishes none.
  CHECK_FALSE(NodeStatus{}.to_json().contains("ranks"));
  CHECK(NodeStatus::from_json(nlohmann::json("junk")).node_rank == -1);
}

TEST_CASE("job phases: each has its one name", "[job_state]") {
  CHECK(to_string(JobPhase::kUnknown) == "unknown");
  CHECK(to_string(JobPhase::kRestarting) == "restarting");
  CHECK(to_string(JobPhase::kStopped) == "stopped");
}

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

TEST_CASE("closed records and round ends carry when they were written, older ones read as 0",
          "[job_state]") {
  CHECK(ClosedRecord::from_json(ClosedRecord{"x", 0, 1'700'000'000'123}.to_json()).time_ms ==
        1'700'000'000'123);
  CHECK(ClosedRecord::from_json(R"({"reason": "no restarts left"})").time_ms == 0);
  RoundEnd done;
  done.kind = RoundEndKind::kAllDone;
  done.time_ms = 1'700'000'000'456;
  CHECK(RoundEnd::from_json(done.to_json()).time_ms == 1'700'000'000'456);
  CHECK(RoundEnd::from_json(R"({"kind": "all_done"})").time_ms == 0);
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
  CHECK_FALSE(running.node_statuses[0]);  // nobody beat yet

  watch_all(nodes);
  for (auto& n : nodes) n->handler->mark_done();
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEndKind::kAllDone);
  JobState done = read_job_state(*store, "test");
  CHECK(done.phase == JobPhase::kFinished);
  REQUIRE(done.node_statuses[0]);  // each watcher beat once
  CHECK(done.node_statuses[0]->node_rank == 0);
  CHECK(done.node_statuses[0]->nproc == 1);
}

TEST_CASE("job state: a failure restarts, a signal stops, a close fails", "[job_state]") {
  auto store = std::make_shared<store::HashStore>();
  auto nodes = join_all(store, std::vector<rendezvous::RendezvousOptions>(2, options("c10d", 2, 2)));
  watch_all(nodes);
  Failure failed;
  failed.rank = 3, failed.exit_code = 1;
  nodes[1]->handler->request_restart(failed, false);
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEndKind::kRestartRequested);
  JobState restarting = read_job_state(*store, "test");
  CHECK(restarting.phase == JobPhase::kRestarting);
  CHECK(restarting.reason == "a worker failed");
  REQUIRE(restarting.last_failure);
  CHECK(restarting.last_failure->rank == 3);
  CHECK(restarting.last_failure->exit_code == 1);
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

// torch's NCCL flight recorder read on a hang (flight_recorder.h, pickle_reader.h):
// Python's pickles of plain data read as Python reads them, a pickle of an object
// refused, a real dump from torch 2.11 on an H100, and the findings for ranks behind,
// collectives queued or running on the GPU, and GPUs with nothing pending.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "flight_recorder.h"
#include "pickle_reader.h"

using namespace ccrun::agent;
using nlohmann::json;

namespace {

const std::string kData = std::string(CCRUN_SOURCE_DIR) + "/tests/agent/data/";

std::string bytes_of(const std::string& name) {
  std::ifstream in(kData + name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One rank's dump of one group, as torch 2.5+ writes it (pg_status and entries).
json dump(int64_t enqueued, int64_t started, int64_t completed, const std::string& last_state,
          const std::string& op = "nccl:all_reduce", int64_t created_ns = 1'000'000'000'000) {
  json entries = json::array();
  for (int64_t seq = std::max<int64_t>(1, enqueued - 2); seq <= enqueued; ++seq) {
    entries.push_back({{"process_group", {"0", "default_pg"}}, {"collective_seq_id", seq},
                       {"profiling_name", op}, {"time_created_ns", created_ns},
                       {"input_sizes", {{16, 16}}}, {"input_dtypes", {"Float"}},
                       {"state", seq <= completed ? "completed" : last_state}, {"is_p2p", false}});
  }
  return {{"version", "2.10"},
          {"pg_config", {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0, 1, 2, 3]"}}}}},
          {"pg_status", {{"0", {{"last_enqueued_collective", enqueued}, {"last_started_collective", started},
                                {"last_completed_collective", completed}}}}},
          {"entries", entries}};
}

constexpr int64_t kNow = 1'000'000'000'000 + 5'900'000'000;  // 5.9 s after the dumps' calls

}  // namespace

TEST_CASE("Python's pickles of plain data read as Python reads them", "[pickle]") {
  json want = {{"a", {1, -2, 300, 70000, int64_t(1) << 40, -(int64_t(1) << 40), 1.5, nullptr, true, false,
                      "\xc3\xbc", {1, 2}, json::array(), {3}, {4, 5, 6}, {7, 8, 9, 10}}},
               {"b", {{"c", std::string(300, 'x')}}},
               {"5", "int key"}};
  CHECK(read_pickle(bytes_of("plain_data_p2.pickle")) == want);
  CHECK(read_pickle(bytes_of("plain_data_p4.pickle")) == want);
}

TEST_CASE("a pickle that is not plain data, or not whole, is an error naming why", "[pickle]") {
  CHECK_THROWS_WITH(read_pickle(bytes_of("object.pickle")), Catch::Contains("opcode 0x63") &&
                                                                Catch::Contains("not plain data"));
  std::string whole = bytes_of("plain_data_p2.pickle");
  for (size_t cut : {size_t(0), size_t(1), size_t(5), whole.size() / 2, whole.size() - 1}) {
    CHECK_THROWS_AS(read_pickle(whole.substr(0, cut)), PickleError);
  }
  CHECK_THROWS_WITH(read_pickle(std::string("\x80\x02h\x07.", 5)), Catch::Contains("unknown key 7"));
  CHECK_THROWS_WITH(read_pickle(std::string("\x80\x02K\x01" "e.", 6)), Catch::Contains("MARK"));
  // A list that holds itself.
  CHECK_THROWS_WITH(read_pickle(std::string("\x80\x02]q\x00h\x00" "a.", 9)), Catch::Contains("deeper"));
  // 40 levels of a list holding the one below twice: 2^40 values once copied.
  std::string doubling("\x80\x02]q\x00" "0", 6);
  for (int i = 0; i < 40; ++i) {
    doubling += std::string("(h") + char(i) + "h" + char(i) + "lq" + char(i + 1) + "0";
  }
  CHECK_THROWS_WITH(read_pickle(doubling + "h" + char(40) + "."), Catch::Contains("4,000,000 values"));
}

TEST_CASE("torch 2.11's dump of a rank whose GPU never ran its all_reduce", "[flight-recorder]") {
  std::string error;
  auto r = read_flight_record(0, kData + "nccl_trace_h100_rank_0.pickle", error);
  REQUIRE(r);
  CHECK(error.empty());
  REQUIRE(r->groups.size() == 1);
  const FlightGroup& g = r->groups[0];
  CHECK(g.id == "0");
  CHECK(g.desc == "default_pg");
  CHECK(g.enqueued == 20);
  CHECK(g.started == -1);  // not timed
  CHECK(g.completed == 19);
  REQUIRE(g.entries.size() == 20);
  CHECK(g.entries.back().op == "all_reduce");
  CHECK(g.entries.back().state == "scheduled");
  CHECK(g.entries.back().shape == "256 Float");
  auto lines = flight_recorder_findings({*r}, g.entries.back().created_ns + 5'900'000'000);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] ==
        "rank 0: all_reduce #20 of group 0 (default_pg), 256 Float, issued 5.9s ago, not completed on "
        "the GPU: queued or running (TORCH_NCCL_ENABLE_TIMING=1 makes the flight recorder tell which)");
}

TEST_CASE("a verdict that names no cause takes the first finding", "[flight-recorder]") {
  std::string headline = "no rank has progressed for 5s (no rank inside a collective call; no step marked)";
  CHECK(with_flight_finding(headline, {}) == headline);
  CHECK(with_flight_finding(headline, {"rank 0: all_reduce #20 of group 0 (default_pg), not completed"}) ==
        headline + "; NCCL flight recorder: rank 0: all_reduce #20 of group 0 (default_pg), not completed");
  CHECK(with_flight_finding(headline, {"a", "b", "c"}) ==
        headline + "; NCCL flight recorder: a (and 2 more findings in the log)");
}

TEST_CASE("a file that is not a dump says why", "[flight-recorder]") {
  std::string error;
  CHECK_FALSE(read_flight_record(0, kData + "plain_data_p2.pickle", error));
  CHECK_THAT(error, Catch::Contains("not a flight-recorder dump"));
  CHECK_FALSE(read_flight_record(0, kData + "missing.pickle", error));
  CHECK_THAT(error, Catch::Contains("cannot open"));
}

TEST_CASE("the flight recorders' findings", "[flight-recorder]") {
  SECTION("a rank that issued fewer collectives, the others' kernels running") {
    std::vector<FlightRecord> rs = {flight_record_from_dump(0, dump(21, 21, 20, "started")),
                                    flight_record_from_dump(1, dump(21, 21, 20, "started")),
                                    flight_record_from_dump(2, dump(20, 20, 20, "completed")),
                                    flight_record_from_dump(3, dump(21, 21, 20, "started"))};
    auto lines = flight_recorder_findings(rs, kNow);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "rank 2 has not issued all_reduce #21 of group 0 (default_pg), which ranks 0,1,3 issued "
                      "(last issued: #20)");
    CHECK(lines[1] == "ranks 0,1,3: all_reduce #21 of group 0 (default_pg), 256 Float, issued 5.9s ago, "
                      "not completed on the GPU: its kernel runs: it waits for a peer's part, or the network");
  }
  SECTION("a rank whose GPU has not started the collective the others run (timed)") {
    std::vector<FlightRecord> rs = {flight_record_from_dump(0, dump(8, 8, 7, "started")),
                                    flight_record_from_dump(1, dump(8, 7, 7, "scheduled"))};
    auto lines = flight_recorder_findings(rs, kNow);
    REQUIRE(lines.size() == 2);
    CHECK_THAT(lines[0], Catch::StartsWith("rank 0: all_reduce #8") && Catch::Contains("its kernel runs"));
    CHECK_THAT(lines[1], Catch::StartsWith("rank 1: all_reduce #8") &&
                             Catch::EndsWith("not started: queued behind other work on the GPU that has not finished"));
  }
  SECTION("every collective done: the hang is outside NCCL") {
    std::vector<FlightRecord> rs = {flight_record_from_dump(4, dump(30, -1, 30, "completed")),
                                    flight_record_from_dump(5, dump(30, -1, 30, "completed"))};
    auto lines = flight_recorder_findings(rs, kNow);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "ranks 4,5: every NCCL collective issued has completed on the GPU: the hang is "
                      "outside NCCL");
  }
  SECTION("torch before pg_status: the entries say it") {
    json d = dump(12, -1, 11, "scheduled");
    d.erase("pg_status");
    FlightRecord r = flight_record_from_dump(0, d);
    REQUIRE(r.groups.size() == 1);
    CHECK(r.groups[0].enqueued == 12);
    CHECK(r.groups[0].completed == 11);
    CHECK(r.groups[0].started == 11);
  }
  SECTION("no dump, nothing said") { CHECK(flight_recorder_findings({}, kNow).empty()); }
}

TEST_CASE("a record sent to another node as JSON says what the whole one says", "[flight-recorder]") {
  json long_dump = dump(21, 21, 18, "started");  // three pending: #19 to #21
  for (auto& e : long_dump["entries"]) {
    if (e["collective_seq_id"] == 20) e["profiling_name"] = "nccl:broadcast";
  }
  std::vector<std::vector<FlightRecord>> sets = {
      {flight_record_from_dump(0, dump(21, 21, 20, "started")), flight_record_from_dump(1, dump(20, 20, 20, "completed")),
       flight_record_from_dump(2, long_dump)},
      {flight_record_from_dump(0, dump(8, 8, 7, "started")), flight_record_from_dump(1, dump(8, 7, 7, "scheduled"))},
      {flight_record_from_dump(4, dump(30, -1, 30, "completed"))},
  };
  for (const auto& records : sets) {
    std::vector<FlightRecord> sent;
    for (const auto& r : records) {
      json j = json::parse(flight_record_to_json(r).dump());
      for (const auto& g : j["groups"]) CHECK(g["entries"].size() <= 2);  // the last, the oldest pending
      sent.push_back(flight_record_from_json(j));
      CHECK(sent.back().rank == r.rank);
    }
    CHECK(flight_recorder_findings(sent, kNow) == flight_recorder_findings(records, kNow));
  }
  SECTION("anything else reads as an empty record") {
    CHECK(flight_record_from_json(json::array()).groups.empty());
    FlightRecord r = flight_record_from_json(json{{"rank", 3}, {"groups", {{{"id", "0"}, {"entries", 7}}}}});
    CHECK(r.rank == 3);
    REQUIRE(r.groups.size() == 1);
    CHECK(r.groups[0].enqueued == -1);
    CHECK(r.groups[0].entries.empty());
  }
}

TEST_CASE("the comparing node's findings take in every node's share, and skip those that did not come",
          "[flight-recorder]") {
  // Node 1 compares: rank 1 (its own) issued #20; rank 0 (node 0) #21; node 2's share never came.
  std::vector<FlightRecord> mine = {flight_record_from_dump(1, dump(20, 20, 20, "completed"))};
  auto share_of = [](const std::vector<FlightRecord>& records) {
    nlohmann::json share = nlohmann::json::object();
    add_flight_records(share, records);
    return nlohmann::json::parse(share.dump());  // as the comparing node reads it
  };
  std::vector<nlohmann::json> shares = {share_of({flight_record_from_dump(0, dump(21, 21, 20, "started"))}),
                                        share_of(mine), nullptr};
  auto lines = job_flight_findings(mine, shares, 1, kNow);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "rank 1 has not issued all_reduce #21 of group 0 (default_pg), which rank 0 issued "
                    "(last issued: #20)");
  CHECK_THAT(lines[1], Catch::StartsWith("rank 0: all_reduce #21 of group 0 (default_pg)"));
  SECTION("its own share is not counted twice; a share without records, or not one, is skipped") {
    shares[2] = {{"something", 1}};
    shares.push_back("not a share");
    CHECK(job_flight_findings(mine, shares, 1, kNow) == lines);
  }
  SECTION("the comparing node without records of its own compares the others'") {
    lines = job_flight_findings({}, shares, 1, kNow);
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::StartsWith("rank 0: all_reduce #21 of group 0 (default_pg)"));
  }
  SECTION("no records on any node (a job without NCCL): nothing, even with a node that did not come") {
    std::vector<nlohmann::json> none = {share_of({}), share_of({}), nullptr};
    CHECK(job_flight_findings({}, none, 1, kNow).empty());
  }
  SECTION("without other nodes, what this node's records say") {
    CHECK(job_flight_findings(mine, {}, 0, kNow) ==
          flight_recorder_findings(mine, kNow));
  }
}

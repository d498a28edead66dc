// judge_hang and find_stragglers: the decisions behind --hang-timeout and
// the straggler mark in `ccrun status`, on hand-made rank views.
#include "ccrun/hang_verdict.h"

#include <catch2/catch.hpp>

#include <tuple>

#include "ccrun/progress.h"

using namespace ccrun::agent;

namespace {

constexpr uint32_t kAllReduce = uint32_t(ccrun::progress::Op::kAllReduce);

// A rank of a world group of `size`: issued/completed calls, idle for
// `idle_ms`, waiting in its unfinished call for `waiting_ms` (-1: none).
RankView rank(int r, uint64_t issued, uint64_t completed, int64_t idle_ms, int64_t waiting_ms,
              uint32_t size = 4) {
  RankView v;
  v.rank = v.local_rank = r;
  v.node_rank = 0;
  v.host = std::string(1, 'h');  // (GCC 12 -Wrestrict false positive on = "h")
  v.pid = 100 + r;
  v.reporting = true;
  v.idle_ms = idle_ms;
  v.groups.push_back({0, size, issued, completed, kAllReduce, 1024, waiting_ms});
  return v;
}

// Four ranks that issued call #100, rank `culprit` a barrier where the others
// issued all_reduce; waiting in it for `waiting_ms`, or (-1) returned from it.
std::vector<RankView> desynced(int culprit, int64_t waiting_ms) {
  std::vector<RankView> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(rank(r, 100, waiting_ms < 0 ? 100 : 99, 31'000, waiting_ms));
  ranks[culprit].groups[0].op = uint32_t(ccrun::progress::Op::kBarrier);
  ranks[culprit].groups[0].count = 0;
  return ranks;
}

// judge_hang(ranks) under a 30 s timeout is hung, names `culprits`, and its headline starts so.
void check_verdict(const std::vector<RankView>& ranks, const std::vector<int>& culprits,
                   const std::string& starts) {
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == culprits);
  CHECK_THAT(v.headline, Catch::StartsWith(starts));
}

}  // namespace

TEST_CASE("judge_hang: the rank that never issued the call the others wait in is the culprit") {
  std::vector<RankView> ranks = {rank(0, 100, 99, 31'000, 31'000), rank(1, 100, 99, 31'000, 31'000),
                                 rank(2, 99, 99, 31'000, -1), rank(3, 100, 99, 31'000, 31'000)};
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{2});
  CHECK_THAT(v.headline, Catch::Contains("rank 2 has not issued all_reduce #100 of the world group"));
  CHECK_THAT(v.headline, Catch::Contains("ranks 0,1,3 have waited in for 31s"));
  REQUIRE(v.lines.size() == 4);
  CHECK_THAT(v.lines[2], Catch::Contains("rank 2 (host h, node 0, pid 102): not in a collective"));
}

TEST_CASE("judge_hang: nothing before the timeout") {
  std::vector<RankView> ranks = {rank(0, 100, 99, 29'000, 29'000), rank(1, 99, 99, 29'000, -1)};
  CHECK_FALSE(judge_hang(ranks, 30'000).hung);
  CHECK_FALSE(judge_hang(ranks, 0).hung);  // 0: never judged
}

TEST_CASE("judge_hang: ranks that disagree are hung even while one keeps busy") {
  // Rank 1 marks steps (idle 0) but never issues the call rank 0 waits in.
  std::vector<RankView> ranks = {rank(0, 5, 4, 40'000, 40'000, 2), rank(1, 4, 4, 0, -1, 2)};
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{1});
}

TEST_CASE("judge_hang: a long collective every rank is in is no hang until the timeout") {
  std::vector<RankView> ranks = {rank(0, 7, 6, 20'000, 20'000, 2), rank(1, 7, 6, 20'000, 20'000, 2)};
  CHECK_FALSE(judge_hang(ranks, 30'000).hung);
  ranks = {rank(0, 7, 6, 31'000, 31'000, 2), rank(1, 7, 6, 31'000, 31'000, 2)};
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);  // past the timeout: every member waits in the same call
  CHECK(v.culprits == std::vector<int>{0, 1});
  CHECK_THAT(v.headline, Catch::Contains("none is behind in it"));
}

TEST_CASE("judge_hang: a long step with no collective in flight is no hang while one rank moves") {
  std::vector<RankView> ranks = {rank(0, 7, 7, 45'000, -1, 2), rank(1, 7, 7, 2'000, -1, 2)};
  CHECK_FALSE(judge_hang(ranks, 30'000).hung);
}

TEST_CASE("judge_hang: a rank whose groups outgrew its record is idle only in a call it recorded") {
  // Every rank idle past the timeout in what its record shows; rank 1 has groups past the
  // record's slots, where it may be at work unseen: no verdict from it standing still.
  std::vector<RankView> ranks = {rank(0, 7, 7, 45'000, -1, 2), rank(1, 7, 7, 45'000, -1, 2)};
  REQUIRE(judge_hang(ranks, 30'000).hung);
  ranks[1].groups_unrecorded = 3;
  CHECK_FALSE(judge_hang(ranks, 30'000).hung);
  // Waiting in a call it recorded, it is stuck there whatever it does elsewhere.
  ranks = {rank(0, 8, 7, 45'000, 45'000, 2), rank(1, 8, 7, 45'000, 45'000, 2)};
  ranks[1].groups_unrecorded = 3;
  CHECK(judge_hang(ranks, 30'000).hung);
  // Its view goes to node 0 with the count.
  CHECK(RankView::from_json(ranks[1].to_json()).groups_unrecorded == 3);
  CHECK_FALSE(ranks[0].to_json().contains("groups_unrecorded"));
}

TEST_CASE("judge_hang: ranks that report nothing are not judged") {
  RankView silent;
  silent.rank = 0;
  silent.idle_ms = 1'000'000;
  CHECK_FALSE(judge_hang({silent, silent}, 30'000).hung);
  // A world-group rank with no collective yet, beside ranks waiting in #1.
  RankView late = rank(1, 0, 0, 50'000, -1, 2);
  late.groups.clear();
  std::vector<RankView> ranks = {rank(0, 1, 0, 50'000, 50'000, 2), late};
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{1});
}

TEST_CASE("judge_hang: subgroups are lined up by id, across nodes") {
  RankView a = rank(0, 10, 10, 35'000, -1, 4), b = rank(1, 10, 10, 35'000, -1, 4);
  b.node_rank = 1;
  a.groups.push_back({0xabc, 2, 3, 2, kAllReduce, 8, 35'000});
  b.groups.push_back({0xabc, 2, 2, 2, kAllReduce, 8, -1});
  HangVerdict v = judge_hang({a, b}, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{1});
  CHECK_THAT(v.headline, Catch::Contains("group 0000000000000abc (2 ranks)"));
}

TEST_CASE("RankView: JSON round trip (what agents publish with their heartbeats)") {
  RankView r = rank(3, 12, 11, 500, 400);
  r.steps = 9, r.steps_per_s = 2.5, r.busy_ms_per_step = 12.5, r.rss_kb = 2048;
  RankView back = RankView::from_json(r.to_json());
  CHECK(back.rank == 3);
  CHECK(back.pid == 103);
  CHECK(back.reporting);
  CHECK(back.steps == 9);
  CHECK(back.busy_ms_per_step == 12.5);
  REQUIRE(back.groups.size() == 1);
  CHECK(back.groups[0].issued == 12);
  CHECK(back.groups[0].waiting_ms == 400);
  CHECK(back.groups[0].op == kAllReduce);
  CHECK(back.groups[0].op_calls == std::array<uint32_t, ccrun::progress::kCountedOps>{});
  r.groups[0].op_calls[kAllReduce - 1] = 11, r.groups[0].op_calls[10] = 1;  // 1 barrier
  nlohmann::json j = r.to_json();
  CHECK(j["groups"][0]["op_calls"] == nlohmann::json{{"all_reduce", 11}, {"barrier", 1}});
  CHECK(RankView::from_json(j).groups[0].op_calls == r.groups[0].op_calls);
  CHECK(RankView::from_json(nlohmann::json::object()).rank == -1);  // tolerant
}

TEST_CASE("find_stragglers: 1.5x the others' median time outside collectives per step") {
  std::vector<RankView> ranks(4);
  for (int i = 0; i < 4; ++i) ranks[i].rank = i, ranks[i].busy_ms_per_step = 10;
  ranks[2].busy_ms_per_step = 16;
  CHECK(find_stragglers(ranks) == std::vector<int>{2});
  ranks[2].busy_ms_per_step = 14;  // 1.4x: not yet
  CHECK(find_stragglers(ranks).empty());
  ranks[2].busy_ms_per_step = -1;  // unknown figures are left out
  CHECK(find_stragglers(ranks).empty());
  CHECK(find_stragglers({ranks[0]}).empty());
}

TEST_CASE("judge_hang: a DDP step is named as such, and a collective inside it comes first") {
  constexpr uint32_t kDdp = uint32_t(ccrun::progress::Op::kDdpStep);
  // Ranks 0 and 1 in the backward of DDP step 10; rank 2 never began it.
  std::vector<RankView> ranks = {rank(0, 0, 0, 40'000, -1, 3), rank(1, 0, 0, 40'000, -1, 3),
                                 rank(2, 0, 0, 40'000, -1, 3)};
  for (auto& r : ranks) r.groups[0] = {0x77, 3, 10, 9, kDdp, 4096, 40'000};
  ranks[2].groups[0] = {0x77, 3, 9, 9, kDdp, 4096, -1};
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{2});
  CHECK_THAT(v.headline, Catch::Contains("DDP step #10 of a DistributedDataParallel module (3 ranks)"));
  // A SyncBatchNorm all_gather waiting inside the step is the lead, not the step.
  for (auto& r : ranks) r.groups.push_back({0, 3, 5, 4, kAllReduce, 8, 35'000});
  ranks[2].groups[1] = {0, 3, 4, 4, kAllReduce, 8, -1};
  v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK_THAT(v.headline, Catch::Contains("all_reduce #5 of the world group"));
}

TEST_CASE("judge_hang: with no call in flight, the ranks that issued fewer calls are the culprits") {
  // NCCL's calls return once queued: ranks 0,1,3 issued all_reduce #21 and
  // now block on the GPU outside any call; rank 2 never issued it.
  std::vector<RankView> ranks = {rank(0, 21, 21, 31'000, -1), rank(1, 21, 21, 31'000, -1),
                                 rank(2, 20, 20, 32'000, -1), rank(3, 21, 21, 31'000, -1)};
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.cause_named);
  CHECK(v.culprits == std::vector<int>{2});
  CHECK_THAT(v.headline, Catch::StartsWith(
      "rank 2 has not issued all_reduce #21 of the world group (1024 elements), which ranks 0,1,3 "
      "issued (its last: #20); no rank has progressed for 31s (none waits in a call"));
  // The culprit may be rank 0, and two behind are named together.
  ranks = {rank(0, 20, 20, 31'000, -1), rank(1, 21, 21, 31'000, -1), rank(2, 19, 19, 31'000, -1)};
  v = judge_hang(ranks, 30'000);
  CHECK(v.culprits == std::vector<int>{0, 2});
  CHECK_THAT(v.headline, Catch::StartsWith("ranks 0,2 have not issued all_reduce #21 of the world "
                                           "group (1024 elements), which rank 1 issued;"));
  // Not before every rank is idle for the timeout.
  ranks[1].idle_ms = 2'000;
  CHECK_FALSE(judge_hang(ranks, 30'000).hung);
}

TEST_CASE("judge_hang: with no call in flight, a group with sends or receives is not compared") {
  // A pipeline: rank 0 sends to rank 1, rank 2 takes no part; their counts differ by design.
  constexpr uint32_t kSend = uint32_t(ccrun::progress::Op::kSend);
  std::vector<RankView> ranks = {rank(0, 25, 25, 31'000, -1, 3), rank(1, 25, 25, 31'000, -1, 3),
                                 rank(2, 20, 20, 31'000, -1, 3)};
  ranks[0].groups[0].op = ranks[1].groups[0].op = kSend;
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK_FALSE(v.cause_named);
  CHECK_THAT(v.headline, Catch::StartsWith("no rank has progressed"));
  // Counted sends make the same call, whatever the last one was.
  ranks[0].groups[0].op = ranks[1].groups[0].op = kAllReduce;
  ranks[0].groups[0].op_calls[kSend - 1] = 5;
  CHECK_FALSE(judge_hang(ranks, 30'000).cause_named);
  ranks[0].groups[0].op_calls[kSend - 1] = 0;
  CHECK(judge_hang(ranks, 30'000).culprits == std::vector<int>{2});
}

TEST_CASE("judge_hang: a rank waiting in a receive names the rank in no call, not the group's") {
  // Rank 1 waits for rank 0's send; rank 0 sleeps outside any call; rank 2 takes no part in the
  // pipeline and waits in a send to rank 3, which waits for it.
  constexpr uint32_t kRecv = uint32_t(ccrun::progress::Op::kRecv);
  constexpr uint32_t kSend = uint32_t(ccrun::progress::Op::kSend);
  std::vector<RankView> ranks = {rank(0, 24, 24, 31'000, -1), rank(1, 25, 24, 31'000, 31'000),
                                 rank(2, 20, 19, 31'000, 30'500), rank(3, 20, 19, 31'000, 30'500)};
  ranks[1].groups[0].op = ranks[3].groups[0].op = kRecv;
  ranks[2].groups[0].op = kSend;
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.cause_named);
  CHECK(v.culprits == std::vector<int>{0});
  CHECK(v.headline == "rank 0 is in no call, while ranks 1-3 wait in calls (the longest: rank 1 "
                      "in recv #25 of the world group (1024 elements) for 31s, a point-to-point "
                      "call)");
  // Every rank in a call: who waits, no culprit named.
  ranks[0] = rank(0, 25, 24, 31'000, 30'000);
  ranks[0].groups[0].op = kSend;
  v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK_FALSE(v.cause_named);
  CHECK(v.culprits == std::vector<int>{0, 1, 2, 3});
  CHECK_THAT(v.headline, Catch::StartsWith("ranks 0-3 have waited in calls (the longest: rank 1 in "
                                           "recv #25 of the world group (1024 elements) for 31s, "
                                           "a point-to-point call, which its peer holds up"));
  // A rank outside calls that is still at work is not judged so.
  ranks[0] = rank(0, 24, 24, 2'000, -1);
  CHECK_FALSE(judge_hang(ranks, 30'000).cause_named);
  // The rank waiting in a receive made fewer calls than the others, which all returned.
  ranks = {rank(0, 27, 27, 31'000, -1, 3), rank(1, 25, 24, 31'000, 31'000, 3),
           rank(2, 27, 27, 31'000, -1, 3)};
  ranks[0].groups[0].op = kSend;
  ranks[1].groups[0].op = kRecv;
  v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{0, 2});
  CHECK_THAT(v.headline, Catch::StartsWith("ranks 0,2 are in no call, while rank 1 waits in calls "
                                           "(the longest: rank 1 in recv #25"));
}

TEST_CASE("judge_hang: with no call in flight, a subgroup whose members disagree is named") {
  RankView a = rank(0, 10, 10, 35'000, -1, 2), b = rank(1, 10, 10, 35'000, -1, 2);
  a.groups.push_back({0xabc, 2, 3, 3, kAllReduce, 8, -1});
  b.groups.push_back({0xabc, 2, 2, 2, kAllReduce, 8, -1});
  HangVerdict v = judge_hang({a, b}, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{1});
  CHECK_THAT(v.headline, Catch::StartsWith("rank 1 has not issued all_reduce #3 of group "
                                           "0000000000000abc (2 ranks)"));
}

TEST_CASE("judge_hang: a verdict that tells no rank from another names no cause") {
  // Every rank idle at the same count: nothing in the records tells them apart.
  std::vector<RankView> ranks = {rank(0, 7, 7, 45'000, -1, 2), rank(1, 7, 7, 45'000, -1, 2)};
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK_FALSE(v.cause_named);
  CHECK(v.culprits == std::vector<int>{0, 1});
  CHECK_THAT(v.headline,
             Catch::StartsWith("no rank has progressed for 45s (no rank inside a collective call"));
  // Every member in the same call: none behind.
  ranks = {rank(0, 7, 6, 31'000, 31'000, 2), rank(1, 7, 6, 31'000, 31'000, 2)};
  CHECK_FALSE(judge_hang(ranks, 30'000).cause_named);
  // A rank behind is a cause.
  ranks[1] = rank(1, 6, 6, 31'000, -1, 2);
  CHECK(judge_hang(ranks, 30'000).cause_named);
}

TEST_CASE("judge_hang: a rank that issued another op at the same call number is the culprit") {
  // Rank 2 (then rank 0) called barrier where the others called all_reduce, each as its call
  // #100: every rank waiting in it, or every call returned (NCCL's return once queued).
  for (auto [culprit, waiting_ms, others] : {std::tuple{2, int64_t(31'000), "0,1,3"},
                                             std::tuple{0, int64_t(-1), "1-3"}}) {
    HangVerdict v = judge_hang(desynced(culprit, waiting_ms), 30'000);
    REQUIRE(v.hung);
    CHECK(v.culprits == std::vector<int>{culprit});
    CHECK_THAT(v.headline, Catch::StartsWith("rank " + std::to_string(culprit) +
                                             " issued barrier as call #100 of the world group, "
                                             "where ranks " + others +
                                             " issued all_reduce (1024 elements)"));
    CHECK_THAT(v.headline, Catch::Contains(waiting_ms < 0 ? "; no rank has progressed for 31s "
                                                            "(none waits in a call"
                                                          : "a desync"));
  }
}

TEST_CASE("judge_hang: per-op counts say which calls a desynced rank made fewer or more of") {
  constexpr uint32_t kBarrier = uint32_t(ccrun::progress::Op::kBarrier);
  // Rank 2 skipped one all_reduce: its call #60 is the final barrier, after 59 all_reduces.
  std::vector<RankView> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(rank(r, 60, 59, 31'000, 31'000));
    ranks[r].groups[0].op_calls[kAllReduce - 1] = 60;
  }
  ranks[2].groups[0].op = kBarrier;
  ranks[2].groups[0].count = 0;
  ranks[2].groups[0].op_calls[kAllReduce - 1] = 59;
  ranks[2].groups[0].op_calls[kBarrier - 1] = 1;
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{2});
  CHECK_THAT(v.headline,
             Catch::StartsWith("rank 2 issued barrier as call #60 of the world group, where ranks "
                               "0,1,3 issued all_reduce (1024 elements): a desync; rank 2 made one "
                               "all_reduce fewer (59 against 60);"));
  // Two extra all_reduces on ranks 1 and 2 (the others are at a broadcast).
  for (auto& r : ranks) {
    r.groups[0].op = uint32_t(ccrun::progress::Op::kBroadcast);
    r.groups[0].op_calls = {};
    r.groups[0].op_calls[kAllReduce - 1] = 58;
    r.groups[0].op_calls[1] = 2;  // broadcast
  }
  for (int r : {1, 2}) {
    ranks[r].groups[0].op = kAllReduce;
    ranks[r].groups[0].count = 1024;
    ranks[r].groups[0].op_calls[kAllReduce - 1] = 60;
    ranks[r].groups[0].op_calls[1] = 0;
  }
  ranks.push_back(rank(4, 60, 59, 31'000, 31'000));
  ranks.back().groups[0].op = uint32_t(ccrun::progress::Op::kBroadcast);
  ranks.back().groups[0].op_calls = ranks[0].groups[0].op_calls;
  v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{1, 2});
  CHECK_THAT(v.headline, Catch::Contains("a desync; ranks 1,2 made 2 broadcast calls fewer "
                                         "(0 against 2);"));
  // Without counts (an older writer, a slot past the 16th), the general words.
  for (auto& r : ranks) r.groups[0].op_calls = {};
  CHECK_THAT(judge_hang(ranks, 30'000).headline,
             Catch::Contains("a desync (a call skipped, added or made with other arguments on "
                             "the ranks named first);"));
}

TEST_CASE("judge_hang: the culprit of a desync may be rank 0, and a size that differs is one") {
  std::vector<RankView> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(rank(r, 100, 99, 31'000, 31'000));
  ranks[0].groups[0].count = 8;
  check_verdict(ranks, {0}, "rank 0 issued all_reduce with 8 elements as call #100 of the world "
                            "group, where ranks 1-3 issued all_reduce (1024 elements)");
}

TEST_CASE("judge_hang: two ranks that disagree, one each way, are both named") {
  std::vector<RankView> ranks = {rank(0, 10, 9, 31'000, 31'000, 2), rank(1, 10, 9, 31'000, 31'000, 2)};
  ranks[1].groups[0].op = uint32_t(ccrun::progress::Op::kBroadcast);
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{0, 1});
  CHECK_THAT(v.headline, Catch::StartsWith("the members of the world group issued different calls "
                                           "as #10"));
}

TEST_CASE("judge_hang: a culprit whose process is stopped is said to be") {
  std::vector<RankView> ranks = {rank(0, 100, 99, 31'000, 31'000), rank(1, 99, 99, 31'000, -1)};
  ranks[1].state = 'T';
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{1});
  CHECK_THAT(v.headline, Catch::EndsWith("; rank 1: its process is stopped (state T: SIGSTOP, or "
                                         "Ctrl-Z)"));
  CHECK_THAT(v.lines[1], Catch::Contains("state T"));
  ranks[1].state = 'D';
  CHECK_THAT(judge_hang(ranks, 30'000).headline, Catch::Contains("uninterruptible sleep"));
}

TEST_CASE("judge_hang: 256 ranks in three places make three classes and a short console") {
  std::vector<RankView> ranks;
  for (int r = 0; r < 256; ++r) ranks.push_back(rank(r, 100, 99, 31'000, 31'000 + r, 256));
  ranks[63] = rank(63, 99, 99, 31'000, -1, 256);      // behind
  ranks[200] = rank(200, 99, 99, 31'000, -1, 256);    // behind too
  ranks[200].state = 'T';                             // and stopped
  HangVerdict v = judge_hang(ranks, 30'000);
  REQUIRE(v.hung);
  CHECK(v.culprits == std::vector<int>{63, 200});
  REQUIRE(v.classes.size() == 3);
  CHECK(v.classes[0] == "ranks 0-62,64-199,201-255 (254): waiting in all_reduce #100 of the world "
                        "group (1024 elements)");
  CHECK_THAT(v.classes[1], Catch::StartsWith("rank 63: not in a collective; last returned from "
                                             "all_reduce #99"));
  CHECK_THAT(v.classes[2], Catch::StartsWith("rank 200: not in a collective") &&
                               Catch::EndsWith("state T: SIGSTOP, or Ctrl-Z)"));
  CHECK(v.console_lines() == v.classes);
  CHECK(v.lines.size() == 256);  // failure_report.json keeps every rank
}

TEST_CASE("compress_ranks: runs as ranges, pairs and singles as they are") {
  CHECK(ccrun::compress_ranks({}) == "");
  CHECK(ccrun::compress_ranks({3}) == "3");
  CHECK(ccrun::compress_ranks({0, 1}) == "0,1");
  CHECK(ccrun::compress_ranks({5, 0, 1, 2, 3, 7, 8, 9, 9}) == "0-3,5,7-9");
}

TEST_CASE("console_lines: at most 39 under the headline, whatever the number of places") {
  HangVerdict v;
  for (int i = 0; i < 100; ++i) v.lines.push_back("line");
  for (int i = 0; i < 60; ++i) v.classes.push_back("class " + std::to_string(i));
  auto out = v.console_lines();
  REQUIRE(out.size() == HangVerdict::kConsoleLines);
  CHECK(out.back() == "... and 22 more classes (failure_report.json has every rank)");
}

TEST_CASE("desync_at_failure: a rank that died in a call its peers issued with another size") {
  // Rank 2 issued all_reduce #30 with 2048 elements; gloo aborted rank 1, whose buffer was the
  // smaller: the desync names rank 2, whichever rank died.
  std::vector<RankView> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(rank(r, 30, 29, 100, 100));
  ranks[2].groups[0].count = 2048;
  for (int failed : {1, 2}) {
    CHECK(desync_at_failure(ranks, failed) ==
          "rank 2 issued all_reduce with 2048 elements as call #30 of the world group, where "
          "ranks 0,1,3 issued all_reduce (1024 elements): a desync (a call skipped, added or made "
          "with other arguments on the rank named first)");
  }
  // With per-op counts: as many all_reduce calls everywhere, so the size differs, not a skip.
  for (auto& r : ranks) r.groups[0].op_calls[kAllReduce - 1] = 30;
  CHECK_THAT(desync_at_failure(ranks, 1),
             Catch::EndsWith("(1024 elements): a desync; rank 2 made as many all_reduce calls (30)"));
}

TEST_CASE("desync_at_failure: nothing when the calls agree or the rank was in none") {
  std::vector<RankView> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(rank(r, 30, 29, 100, 100));
  CHECK(desync_at_failure(ranks, 1).empty());    // the same call everywhere: a plain crash
  ranks[2].groups[0].count = 2048;
  ranks[1].groups[0].completed = 30;             // rank 1 died between calls
  CHECK(desync_at_failure(ranks, 1).empty());
  CHECK(desync_at_failure(ranks, 7).empty());    // a rank with no view here
  CHECK_FALSE(desync_at_failure(ranks, 0).empty());
}

TEST_CASE("judge_hang: a rank that waits for its subgroup is not behind in the world's call") {
  // Pairs {0,1} and {2,3}; each step a pair's all_reduce, then the world's. Rank 2 stalls
  // before its pair's call #30: rank 3 waits in it, and ranks 0,1, through with theirs, wait
  // in the world's call #30, longer than rank 3 waits (they got there first).
  std::vector<RankView> ranks;
  for (int r = 0; r < 4; ++r) {
    bool first_pair = r < 2;
    ranks.push_back(rank(r, first_pair ? 30 : 29, 29, 31'000, first_pair ? 31'000 : -1));
    uint64_t pair_issued = r == 2 ? 29 : 30, pair_completed = first_pair ? 30 : 29;
    ranks.back().groups.push_back({first_pair ? 0xa01u : 0xa23u, 2, pair_issued, pair_completed,
                                   kAllReduce, 1024, r == 3 ? 30'500 : -1});
  }
  check_verdict(ranks, {2}, "rank 2 has not issued all_reduce #30 of group 0000000000000a23 (2 "
                            "ranks) (1024 elements), which rank 3 has waited in for 30s");
}

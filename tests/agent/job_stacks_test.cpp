// A hang's stacks merged across the job's nodes: classes matched by their
// normalized stack whatever node they come from, the nodes whose share did
// not come skipped, a share's stack cut to its cap.
#include "job_stacks.h"

#include <catch2/catch.hpp>

using namespace ccrun::agent;
using nlohmann::json;

namespace {

std::string python_in(const char* func, int line, const char* thread) {
  return std::string("Thread ") + thread + " (most recent call first):\n" +
         "  File \"/srv/job/train.py\", line " + std::to_string(line) + " in " + func + "\n";
}

// Node `node`'s ranks r0..r0+n-1, `odd` (if in range) somewhere else; the
// threads' addresses differ from node to node, as they do.
std::vector<StackClass> node_classes(int node, int r0, int n, int odd) {
  json stacks = json::array();
  std::string thread = "0x00007f3e" + std::to_string(node) + "1e31040";
  for (int r = r0; r < r0 + n; ++r) {
    stacks.push_back({{"rank", r}, {"pid", 1000 + r},
                      {"python", r == odd ? python_in("__next__", 41, thread.c_str())
                                          : python_in("step", 88, thread.c_str())},
                      {"native", "native of " + std::to_string(r)}});
  }
  return stack_classes(stacks);
}

json share_of(const std::vector<StackClass>& classes, size_t cap = kSharedStackBytes) {
  json share = json::object();
  add_stack_classes(share, classes, cap);
  return json::parse(share.dump());  // as the comparing node reads it
}

}  // namespace

TEST_CASE("job_stack_classes: the same stack on every node is one class, an odd rank its own",
          "[job-stacks]") {
  // 4 nodes of 4 ranks; rank 7 (node 1) is elsewhere. Node 1 merges.
  std::vector<json> shares;
  for (int node = 0; node < 4; ++node) shares.push_back(share_of(node_classes(node, node * 4, 4, 7)));
  JobStacks job = job_stack_classes(node_classes(1, 4, 4, 7), shares, 1);
  REQUIRE(job.classes.size() == 2);
  CHECK(job.classes[0].title() == "ranks 0-6,8-15 (15) on nodes 0-3 <- train.py:88 in step");
  CHECK(job.classes[1].title() == "rank 7 on node 1 <- train.py:41 in __next__");
  CHECK(job.classes[0].python);
  CHECK_THAT(job.classes[1].stack, Catch::Contains("line 41 in __next__"));
  SECTION("its own share is not counted twice") {
    for (const auto& c : job.classes) CHECK(c.ranks.size() == (c.ranks.front() == 7 ? 1u : 15u));
  }
  SECTION("a node whose share did not come, or has no classes, is skipped; the others are merged") {
    shares[2] = json();
    shares[3] = json{{"flight_records", json::array()}};
    job = job_stack_classes(node_classes(1, 4, 4, 7), shares, 1);
    REQUIRE(job.classes.size() == 2);
    CHECK(job.classes[0].title() == "ranks 0-6 (7) on nodes 0,1 <- train.py:88 in step");
  }
  SECTION("the report's form") {
    json j = job.to_json();
    CHECK(j["classes"][1]["title"] == "rank 7 on node 1 <- train.py:41 in __next__");
    CHECK(j["classes"][0]["nodes"] == json{0, 1, 2, 3});
    CHECK(j.size() == 1);
  }
}

TEST_CASE("job_stack_classes: a node's stack is cut to the cap, and still merged by the whole one's digest",
          "[job-stacks]") {
  auto mine = node_classes(1, 1, 1, -1);
  auto theirs = node_classes(0, 0, 1, -1);
  json share = share_of(theirs, 16);
  std::string sent = share["stack_classes"][0]["stack"];
  CHECK(sent.rfind(theirs[0].python.substr(0, 16), 0) == 0);
  CHECK_THAT(sent, Catch::Contains("cut at 16 bytes"));
  JobStacks job = job_stack_classes(mine, {share, json()}, 1);
  REQUIRE(job.classes.size() == 1);
  CHECK(job.classes[0].title() == "ranks 0,1 (2) on nodes 0,1 <- train.py:88 in step");
  CHECK(job.classes[0].stack == mine[0].python);  // the first one's whole, node 0's cut
}

TEST_CASE("job_stack_classes: native stacks (no Python) are merged by theirs, a class without ranks is none",
          "[job-stacks]") {
  json stacks = json::array({{{"rank", 0}, {"pid", 1}, {"python", ""}, {"native", "#0 0x00007f01 in poll ()"}}});
  json other = json::array({{{"rank", 1}, {"pid", 2}, {"python", ""}, {"native", "#0 0x00007f99 in poll ()"}}});
  json share = share_of(stack_classes(other));
  share["stack_classes"].push_back({{"key", "ffff"}, {"ranks", json::array()}, {"stack", "x"}});
  JobStacks job = job_stack_classes(stack_classes(stacks), {share, json()}, 1);
  REQUIRE(job.classes.size() == 1);
  CHECK(job.classes[0].title() == "ranks 0,1 (2) on nodes 0,1");
  CHECK_FALSE(job.classes[0].python);
  CHECK(job.classes[0].stack == "#0 0x00007f01 in poll ()");  // its own, the first
}

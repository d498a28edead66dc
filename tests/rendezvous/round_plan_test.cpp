// The round's assignment (round_plan.h): node ranks, RANK offsets, the
// master, role ranks, and who watches whom, as one pure function.
#include <catch2/catch.hpp>

#include "round_plan.h"

using namespace ccrun::rendezvous;

namespace {

JoinedNode node(const std::string& addr, int nproc, int prev_rank = -1,
                const std::string& role = "default") {
  return JoinedNode{addr, "host-" + addr, nproc, 1000 + nproc, prev_rank, role};
}

}  // namespace

TEST_CASE("plan: static order keeps slots, offsets add up nproc", "[round_plan]") {
  RoundPlan p = plan_round({node("a", 1), node("b", 2), node("c", 3)}, false);
  CHECK(p.shape.num_nodes == 3);
  CHECK(p.shape.world_size == 6);
  CHECK(p.shape.master_addr == "a");
  CHECK(p.shape.master_port == 1001);
  CHECK(p.places[0].node_rank == 0);
  CHECK(p.places[1].rank_offset == 1);
  CHECK(p.places[2].rank_offset == 3);
}

TEST_CASE("plan: node rank 0 tells whether its port is its agent's worker store",
          "[round_plan]") {
  JoinedNode served = node("b", 1, 0);
  served.agent_store = true;
  RoundPlan p = plan_round({node("a", 1, 1), served}, true);
  CHECK(p.shape.master_addr == "b");
  CHECK(p.shape.agent_store);
  CHECK(RoundShape::from_json(p.shape.to_json()).agent_store);
  CHECK(JoinedNode::from_json(served.to_json()).agent_store);
  CHECK_FALSE(plan_round({node("a", 1, 0), served}, true).shape.agent_store);
  // A record without the field (an older agent's) reads as not shared.
  CHECK_FALSE(JoinedNode::from_json(R"({"addr":"a","hostname":"h","nproc":1,"master_port":1})")
                  .agent_store);
}

TEST_CASE("plan: the previous round's nodes keep their order, newcomers follow", "[round_plan]") {
  // Slots in join order: a newcomer first, then the old ranks 1 and 0.
  RoundPlan p = plan_round({node("new", 1), node("one", 1, 1), node("zero", 1, 0)}, true);
  CHECK(p.places[2].node_rank == 0);
  CHECK(p.places[1].node_rank == 1);
  CHECK(p.places[0].node_rank == 2);
  CHECK(p.shape.master_addr == "zero");
}

TEST_CASE("plan: ROLE_RANK counts the nodes of one role in node-rank order", "[round_plan]") {
  // torchrun's _assign_worker_ranks: offset = nproc of the same role's lower
  // node ranks, size = nproc of the whole role.
  RoundPlan p = plan_round({node("a", 2, -1, "trainer"), node("b", 1, -1, "ps"),
                            node("c", 3, -1, "trainer"), node("d", 1, -1, "ps")},
                           false);
  CHECK(p.places[0].role_rank_offset == 0);
  CHECK(p.places[0].role_world_size == 5);
  CHECK(p.places[1].role_rank_offset == 0);
  CHECK(p.places[1].role_world_size == 2);
  CHECK(p.places[2].role_rank_offset == 2);
  CHECK(p.places[2].role_world_size == 5);
  CHECK(p.places[3].role_rank_offset == 1);
  CHECK(p.places[3].role_world_size == 2);
  // Dynamic: node ranks, not join slots, order the role's nodes.
  RoundPlan d = plan_round({node("x", 1, 1, "ps"), node("y", 4, 0, "ps")}, true);
  CHECK(d.places[1].role_rank_offset == 0);
  CHECK(d.places[0].role_rank_offset == 4);
  CHECK(d.places[0].role_world_size == 5);
  // One role everywhere: the same numbers as RANK and WORLD_SIZE.
  RoundPlan same = plan_round({node("a", 1), node("b", 2)}, false);
  CHECK(same.places[1].role_rank_offset == same.places[1].rank_offset);
  CHECK(same.places[1].role_world_size == same.shape.world_size);
}

TEST_CASE("plan: each node watches the previous node rank, node 0 the last", "[round_plan]") {
  RoundPlan p = plan_round({node("a", 1), node("b", 1), node("c", 1)}, false);
  CHECK(p.places[0].watch == 2);
  CHECK(p.places[0].watch_addr == "c");
  CHECK(p.places[1].watch == 0);
  CHECK(p.places[2].watch_addr == "b");
  RoundPlan alone = plan_round({node("a", 4)}, true);
  CHECK(alone.places[0].watch == 0);  // itself: nothing to read
}

TEST_CASE("plan records round-trip, a broken one names itself", "[round_plan]") {
  Place place{3, 24, 2, "10.0.0.3", "10.0.0.4", 8, 16};
  Place back = Place::from_json(place.to_json());
  CHECK(back.rank_offset == 24);
  CHECK(back.role_rank_offset == 8);
  CHECK(back.role_world_size == 16);
  CHECK(back.watch_addr == "10.0.0.3");
  RoundShape shape{4, 32, "10.0.0.1", 29500};
  CHECK(RoundShape::from_json(shape.to_json()).world_size == 32);
  CHECK(JoinedNode::from_json(node("a", 2, 5).to_json()).prev_rank == 5);
  CHECK(JoinedNode::from_json(node("a", 2, 5, "ps").to_json()).role == "ps");
  // A record without a role (an older ccrun) is of the default role.
  CHECK(JoinedNode::from_json(R"({"addr":"a","hostname":"h","nproc":1,"master_port":1})").role ==
        "default");
  CHECK_THROWS_WITH(Place::from_json("{}"), Catch::Contains("unreadable place record"));
  CHECK_THROWS_WITH(RoundShape::from_json("nope"), Catch::Contains("unreadable plan record"));
}

// The round's assignment and its records (see round_plan.h).
#include "round_plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <numeric>
#include <unordered_map>

#include "ccrun/error.h"

namespace ccrun::rendezvous {
namespace {

using json = nlohmann::json;

json parse(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    throw Error(std::string("rendezvous: unreadable ") + what + " record: " + text.substr(0, 200));
  }
  return j;
}

template <typename F>
auto read_fields(const std::string& text, const char* what, F fill) {
  json j = parse(text, what);
  try {
    return fill(j);
  } catch (const json::exception& e) {
    throw Error(std::string("rendezvous: unreadable ") + what + " record (" + e.what() +
                "): " + text.substr(0, 200));
  }
}

}  // namespace

std::string JoinedNode::to_json() const {
  return json{{"addr", addr}, {"hostname", hostname}, {"nproc", nproc},
              {"master_port", master_port}, {"prev_rank", prev_rank}, {"role", role},
              {"agent_store", agent_store}}
      .dump();
}

JoinedNode JoinedNode::from_json(const std::string& text) {
  return read_fields(text, "node", [](const json& j) {
    return JoinedNode{j.at("addr"),          j.at("hostname"),
                      j.at("nproc"),         j.at("master_port"),
                      j.value("prev_rank", -1), j.value("role", std::string("default")),
                      j.value("agent_store", false)};
  });
}

std::string Place::to_json() const {
  return json{{"node_rank", node_rank}, {"rank_offset", rank_offset}, {"watch", watch},
              {"watch_addr", watch_addr}, {"addr", addr},
              {"role_rank_offset", role_rank_offset}, {"role_world_size", role_world_size}}
      .dump();
}

Place Place::from_json(const std::string& text) {
  return read_fields(text, "place", [](const json& j) {
    return Place{j.at("node_rank"),        j.at("rank_offset"),     j.at("watch"),
                 j.at("watch_addr"),       j.at("addr"),            j.at("role_rank_offset"),
                 j.at("role_world_size")};
  });
}

std::string RoundShape::to_json() const {
  return json{{"num_nodes", num_nodes}, {"world_size", world_size},
              {"master_addr", master_addr}, {"master_port", master_port},
              {"agent_store", agent_store}}
      .dump();
}

RoundShape RoundShape::from_json(const std::string& text) {
  return read_fields(text, "plan", [](const json& j) {
    return RoundShape{j.at("num_nodes"), j.at("world_size"), j.at("master_addr"),
                      j.at("master_port"), j.value("agent_store", false)};
  });
}

RoundPlan plan_round(const std::vector<JoinedNode>& by_slot, bool keep_previous_order) {
  int n = static_cast<int>(by_slot.size());
  std::vector<int> order(size_t(n), 0);  // order[node rank] = slot
  std::iota(order.begin(), order.end(), 0);
  if (keep_previous_order) {
    auto key = [&](int slot) {
      int prev = by_slot[size_t(slot)].prev_rank;
      return std::pair(prev < 0 ? INT_MAX : prev, slot);
    };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  }
  RoundPlan plan;
  plan.places.resize(size_t(n));
  plan.shape.num_nodes = n;
  std::unordered_map<std::string, int> role_sum;  // nproc so far, per role
  for (int rank = 0; rank < n; ++rank) {
    const JoinedNode& node = by_slot[size_t(order[size_t(rank)])];
    const JoinedNode& watched = by_slot[size_t(order[size_t((rank + n - 1) % n)])];
    Place& place = plan.places[size_t(order[size_t(rank)])];
    place = Place{rank, plan.shape.world_size, (rank + n - 1) % n, watched.addr, node.addr};
    place.role_rank_offset = role_sum[node.role];  // step 2a, first pass
    role_sum[node.role] += node.nproc;
    plan.shape.world_size += node.nproc;
  }
  for (int slot = 0; slot < n; ++slot) {  // step 2a, second pass
    plan.places[size_t(slot)].role_world_size = role_sum[by_slot[size_t(slot)].role];
  }
  if (n > 0) {
    plan.shape.master_addr = by_slot[size_t(order[0])].addr;
    plan.shape.master_port = by_slot[size_t(order[0])].master_port;
    plan.shape.agent_store = by_slot[size_t(order[0])].agent_store;
  }
  return plan;
}

}  // namespace ccrun::rendezvous

// The JSON forms of a rank's progress (see include/ccrun/rank_progress.h).
#include "ccrun/rank_progress.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ccrun {
namespace {

using json = nlohmann::json;
using progress::Phase;

// after_spawn_s's keys, by progress::Phase.
constexpr const char* kPhaseKeys[progress::kPhases] = {"interpreter", "imports", "group",
                                                       "collective", "step"};

}  // namespace

int64_t StartupTimeline::last_us() const {
  int64_t last = 0;
  for (int64_t us : after_spawn_us) last = std::max(last, us);
  return last;
}

json StartupTimeline::to_json() const {
  json phases = json::object();
  for (int p = 0; p < progress::kPhases; ++p) {
    if (after_spawn_us[size_t(p)] >= 0) phases[kPhaseKeys[p]] = double(after_spawn_us[size_t(p)]) / 1e6;
  }
  return {{"rank", rank}, {"spawned_ms", spawned_ms}, {"warm", warm}, {"after_spawn_s", phases}};
}

StartupTimeline StartupTimeline::from_json(const json& j) {
  StartupTimeline t;
  if (!j.is_object()) return t;
  t.rank = j.value("rank", -1);
  t.spawned_ms = j.value("spawned_ms", int64_t(0));
  t.warm = j.value("warm", false);
  const json& phases = j.contains("after_spawn_s") ? j["after_spawn_s"] : json::object();
  for (int p = 0; p < progress::kPhases; ++p) {
    if (phases.is_object() && phases.contains(kPhaseKeys[p]) && phases[kPhaseKeys[p]].is_number()) {
      t.after_spawn_us[size_t(p)] = int64_t(phases[kPhaseKeys[p]].get<double>() * 1e6);
    }
  }
  return t;
}

json RankView::to_json() const {
  json gs = json::array();
  for (const auto& g : groups) {
    json group = {{"id", g.id}, {"size", g.size}, {"issued", g.issued},
                  {"completed", g.completed}, {"op", progress::op_name(g.op)}, {"op_code", g.op},
                  {"count", g.count}, {"waiting_ms", g.waiting_ms}};
    json calls = json::object();  // {"all_reduce": 60, "barrier": 1}: the ops it issued
    for (int op = 0; op < progress::kCountedOps; ++op) {
      if (g.op_calls[op] > 0) calls[progress::op_name(uint32_t(op + 1))] = g.op_calls[op];
    }
    if (!calls.empty()) group["op_calls"] = calls;
    gs.push_back(group);
  }
  json j = {{"rank", rank}, {"local_rank", local_rank}, {"node_rank", node_rank}, {"host", host},
            {"pid", pid}, {"reporting", reporting}, {"idle_ms", idle_ms}, {"steps", steps},
            {"steps_per_s", steps_per_s}, {"busy_ms_per_step", busy_ms_per_step},
            {"rss_kb", rss_kb}, {"state", state ? std::string(1, state) : std::string()},
            {"groups", gs}, {"startup", startup.to_json()}};
  if (groups_unrecorded > 0) j["groups_unrecorded"] = groups_unrecorded;
  return j;
}

RankView RankView::from_json(const json& j) {
  RankView r;
  if (!j.is_object()) return r;
  r.rank = j.value("rank", -1);
  r.local_rank = j.value("local_rank", -1);
  r.node_rank = j.value("node_rank", -1);
  r.host = j.value("host", "");
  r.pid = j.value("pid", 0);
  r.reporting = j.value("reporting", false);
  r.idle_ms = j.value("idle_ms", int64_t(0));
  r.steps = j.value("steps", uint64_t(0));
  r.steps_per_s = j.value("steps_per_s", 0.0);
  r.busy_ms_per_step = j.value("busy_ms_per_step", -1.0);
  r.rss_kb = j.value("rss_kb", int64_t(0));
  std::string state = j.value("state", std::string());
  r.state = state.size() == 1 ? state[0] : 0;
  r.groups_unrecorded = j.value("groups_unrecorded", 0u);
  if (j.contains("startup")) r.startup = StartupTimeline::from_json(j["startup"]);
  if (j.contains("groups") && j["groups"].is_array()) {
    for (const auto& g : j["groups"]) {
      GroupView v{g.value("id", uint64_t(0)), g.value("size", 0u),
                  g.value("issued", uint64_t(0)), g.value("completed", uint64_t(0)),
                  g.value("op_code", 0u), g.value("count", uint64_t(0)),
                  g.value("waiting_ms", int64_t(-1))};
      if (g.contains("op_calls") && g["op_calls"].is_object()) {
        for (int op = 0; op < progress::kCountedOps; ++op) {
          v.op_calls[op] = g["op_calls"].value(progress::op_name(uint32_t(op + 1)), 0u);
        }
      }
      r.groups.push_back(v);
    }
  }
  return r;
}

std::string compress_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace ccrun

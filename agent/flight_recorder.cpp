// What torch's NCCL flight recorder says of a hang (see flight_recorder.h).
#include "flight_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ccrun/rank_progress.h"
#include "pickle_reader.h"

namespace ccrun::agent {

using nlohmann::json;

namespace {

// The key of a node's records in its share of a hang's evidence.
constexpr const char* kShareKey = "flight_records";

int64_t int_or(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string string_or(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// "256 Float" from input_sizes [[256]] and input_dtypes ["Float"].
std::string shape_of(const json& e) {
  auto sizes = e.find("input_sizes");
  auto dtypes = e.find("input_dtypes");
  if (sizes == e.end() || !sizes->is_array() || sizes->empty() || !(*sizes)[0].is_array()) return "";
  int64_t n = 1;
  for (const auto& d : (*sizes)[0]) n *= d.is_number_integer() ? d.get<int64_t>() : 1;
  std::string type = dtypes != e.end() && dtypes->is_array() && !dtypes->empty() && (*dtypes)[0].is_string()
                         ? " " + (*dtypes)[0].get<std::string>()
                         : "";
  return std::to_string(n) + type;
}

FlightGroup& group_of(FlightRecord& r, const std::string& id) {
  for (auto& g : r.groups) {
    if (g.id == id) return g;
  }
  r.groups.push_back({});
  r.groups.back().id = id;
  return r.groups.back();
}

// The pending collective a rank's GPU has not finished, or null.
const FlightEntry* oldest_pending(const FlightGroup& g) {
  if (g.enqueued <= g.completed) return nullptr;
  for (const auto& e : g.entries) {
    if (e.seq > g.completed && e.state != "completed") return &e;
  }
  return nullptr;
}

std::string group_name(const FlightGroup& g) {
  return "group " + g.id + (g.desc.empty() ? "" : " (" + g.desc + ")");
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + compress_ranks(ranks);
}

std::string what_state_means(const std::string& state, bool timed) {
  if (state == "started") return "its kernel runs: it waits for a peer's part, or the network";
  if (timed) return "not started: queued behind other work on the GPU that has not finished";
  return "queued or running (TORCH_NCCL_ENABLE_TIMING=1 makes the flight recorder tell which)";
}

}  // namespace

FlightRecord flight_record_from_dump(int rank, const json& dump) {
  FlightRecord r;
  r.rank = rank;
  if (!dump.is_object()) return r;
  if (auto config = dump.find("pg_config"); config != dump.end() && config->is_object()) {
    for (const auto& [id, c] : config->items()) {
      if (c.is_object()) group_of(r, id).desc = string_or(c, "desc");
    }
  }
  if (auto entries = dump.find("entries"); entries != dump.end() && entries->is_array()) {
    for (const auto& e : *entries) {
      if (!e.is_object() || e.value("is_p2p", false)) continue;
      auto pg = e.find("process_group");
      std::string id = pg != e.end() && pg->is_array() && !pg->empty() && (*pg)[0].is_string()
                           ? (*pg)[0].get<std::string>()
                           : std::to_string(int_or(e, "pg_id", 0));
      FlightGroup& g = group_of(r, id);
      if (g.desc.empty() && pg != e.end() && pg->size() > 1 && (*pg)[1].is_string()) g.desc = (*pg)[1].get<std::string>();
      std::string op = string_or(e, "profiling_name");
      if (op.rfind("nccl:", 0) == 0) op.erase(0, 5);
      FlightEntry fe{int_or(e, "collective_seq_id", -1), op, string_or(e, "state"),
                     int_or(e, "time_created_ns", 0), shape_of(e)};
      // Without pg_status (torch before 2.5): what the entries say.
      g.enqueued = std::max(g.enqueued, fe.seq);
      if (fe.state == "completed") g.completed = std::max(g.completed, fe.seq);
      if (fe.state != "scheduled") g.started = std::max(g.started, fe.seq);
      g.entries.push_back(std::move(fe));
    }
  }
  if (auto status = dump.find("pg_status"); status != dump.end() && status->is_object()) {
    for (const auto& [id, s] : status->items()) {
      if (!s.is_object()) continue;
      FlightGroup& g = group_of(r, id);
      g.enqueued = int_or(s, "last_enqueued_collective", g.enqueued);
      g.started = int_or(s, "last_started_collective", g.started);
      g.completed = int_or(s, "last_completed_collective", g.completed);
    }
  }
  return r;
}

std::optional<FlightRecord> read_flight_record(int rank, const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open " + path;
    return std::nullopt;
  }
  std::stringstream bytes;
  bytes << in.rdbuf();
  try {
    json dump = read_pickle(bytes.str());
    if (!dump.is_object() || !dump.contains("entries")) {
      error = path + " is not a flight-recorder dump (no entries)";
      return std::nullopt;
    }
    return flight_record_from_dump(rank, dump);
  } catch (const PickleError& e) {
    error = path + ": " + e.what();
    return std::nullopt;
  }
}

json flight_record_to_json(const FlightRecord& record) {
  json groups = json::array();
  for (const auto& g : record.groups) {
    json entries = json::array();
    const FlightEntry* pending = oldest_pending(g);
    for (const auto& e : g.entries) {
      if (&e != pending && e.seq != g.enqueued) continue;
      entries.push_back({{"seq", e.seq}, {"op", e.op}, {"state", e.state},
                         {"created_ns", e.created_ns}, {"shape", e.shape}});
    }
    groups.push_back({{"id", g.id}, {"desc", g.desc}, {"enqueued", g.enqueued},
                      {"started", g.started}, {"completed", g.completed}, {"entries", entries}});
  }
  return {{"rank", record.rank}, {"groups", groups}};
}

FlightRecord flight_record_from_json(const json& j) {
  FlightRecord r;
  if (!j.is_object()) return r;
  r.rank = static_cast<int>(int_or(j, "rank", -1));
  auto groups = j.find("groups");
  if (groups == j.end() || !groups->is_array()) return r;
  for (const auto& gj : *groups) {
    if (!gj.is_object()) continue;
    FlightGroup g;
    g.id = string_or(gj, "id"), g.desc = string_or(gj, "desc");
    g.enqueued = int_or(gj, "enqueued", -1), g.started = int_or(gj, "started", -1);
    g.completed = int_or(gj, "completed", -1);
    if (auto entries = gj.find("entries"); entries != gj.end() && entries->is_array()) {
      for (const auto& e : *entries) {
        if (!e.is_object()) continue;
        g.entries.push_back({int_or(e, "seq", -1), string_or(e, "op"), string_or(e, "state"),
                             int_or(e, "created_ns", 0), string_or(e, "shape")});
      }
    }
    r.groups.push_back(std::move(g));
  }
  return r;
}

void add_flight_records(json& share, const std::vector<FlightRecord>& records) {
  json mine = json::array();
  for (const auto& r : records) mine.push_back(flight_record_to_json(r));
  share[kShareKey] = std::move(mine);
}

std::vector<std::string> job_flight_findings(std::vector<FlightRecord> mine, const std::vector<json>& shares,
                                             int node_rank, int64_t now_ns) {
  for (size_t node = 0; node < shares.size(); ++node) {
    const json& share = shares[node];
    auto theirs = share.is_object() ? share.find(kShareKey) : share.end();
    if (int(node) == node_rank || theirs == share.end() || !theirs->is_array()) continue;
    for (const auto& r : *theirs) mine.push_back(flight_record_from_json(r));
  }
  if (mine.empty()) return {};  // no flight recorder anywhere (a job without NCCL): nothing to say
  std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return flight_recorder_findings(mine, now_ns);
}

std::string with_flight_finding(const std::string& message, const std::vector<std::string>& findings) {
  if (findings.empty()) return message;
  std::string more =
      findings.size() > 1 ? fmt::format(" (and {} more findings in the log)", findings.size() - 1) : "";
  return message + "; NCCL flight recorder: " + findings.front() + more;
}

std::vector<std::string> flight_recorder_findings(const std::vector<FlightRecord>& records, int64_t now_ns) {
  std::vector<std::string> lines;
  std::vector<std::string> ids;  // groups in the order first seen
  std::map<std::string, std::vector<std::pair<int, const FlightGroup*>>> members;
  for (const auto& r : records) {
    for (const auto& g : r.groups) {
      if (g.enqueued < 0) continue;  // created, never used
      if (!members.count(g.id)) ids.push_back(g.id);
      members[g.id].emplace_back(r.rank, &g);
    }
  }
  for (const auto& id : ids) {
    const auto& m = members[id];
    int64_t top = -1;
    std::string top_op;
    for (const auto& [rank, g] : m) top = std::max(top, g->enqueued);
    std::vector<int> ahead, behind;
    std::set<int64_t> lasts;
    for (const auto& [rank, g] : m) {
      for (const auto& e : g->entries) {
        if (e.seq == top && top_op.empty()) top_op = e.op;
      }
      if (g->enqueued == top) {
        ahead.push_back(rank);
      } else {
        behind.push_back(rank);
        lasts.insert(g->enqueued);
      }
    }
    if (!behind.empty()) {
      std::string last = lasts.size() == 1 ? fmt::format("#{}", *lasts.begin())
                                            : fmt::format("#{} to #{}", *lasts.begin(), *lasts.rbegin());
      lines.push_back(fmt::format("{} {} not issued {} #{} of {}, which {} issued (last issued: {})",
                                  ranks_text(behind), behind.size() == 1 ? "has" : "have",
                                  top_op.empty() ? "collective" : top_op, top, group_name(*m[0].second),
                                  ranks_text(ahead), last));
    }
    // The collective each rank's GPU has not finished, ranks alike together.
    struct Pending {
      std::string call, state;  // "all_reduce #20 of group 0 (...), 256 Float"; what its state means
      std::vector<int> ranks;
      int64_t first_ns = 0;  // the earliest rank's issue
    };
    std::map<std::pair<std::string, std::string>, Pending> pending;  // by what it says, less its age
    for (const auto& [rank, g] : m) {
      const FlightEntry* e = oldest_pending(*g);
      if (!e) continue;
      bool timed = g->started >= 0 || e->state == "started";
      std::string call = fmt::format("{} #{} of {}{}", e->op, e->seq, group_name(*g),
                                     e->shape.empty() ? "" : ", " + e->shape);
      std::string state = what_state_means(e->state, timed);
      Pending& p = pending[{call, state}];
      p.call = call, p.state = state;
      p.ranks.push_back(rank);
      if (e->created_ns > 0 && (p.first_ns == 0 || e->created_ns < p.first_ns)) p.first_ns = e->created_ns;
    }
    for (const auto& [key, p] : pending) {
      std::string age = p.first_ns > 0 ? fmt::format(", issued {:.1f}s ago", double(now_ns - p.first_ns) / 1e9) : "";
      lines.push_back(fmt::format("{}: {}{}, not completed on the GPU: {}", ranks_text(p.ranks), p.call, age, p.state));
    }
  }
  if (lines.empty() && !records.empty()) {
    std::vector<int> ranks;
    for (const auto& r : records) ranks.push_back(r.rank);
    lines.push_back(ranks_text(ranks) + ": every NCCL collective issued has completed on the GPU: the "
                    "hang is outside NCCL");
  }
  return lines;
}

}  // namespace ccrun::agent

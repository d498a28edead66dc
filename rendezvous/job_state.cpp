// The job's store records and their reader (see include/ccrun/job_state.h).
#include "ccrun/job_state.h"

#include <nlohmann/json.hpp>

#include <array>
#include <utility>

#include "ccrun/job_keys.h"
#include "round_plan.h"

namespace ccrun {
namespace {

using json = nlohmann::json;

// A job has at most this many rounds of history worth reading back for its
// last failure.
constexpr int kFailureLookback = 8;

constexpr std::array<std::pair<RoundEndKind, std::string_view>, 6> kRoundEndNames{{
    {RoundEndKind::kRestartRequested, "restart"},
    {RoundEndKind::kNodeDead, "dead"},
    {RoundEndKind::kNodeWaiting, "waiting"},
    {RoundEndKind::kAllDone, "all_done"},
    {RoundEndKind::kClosed, "closed"},
    {RoundEndKind::kStoreLost, "store_lost"},
}};

constexpr std::array<std::pair<JobPhase, std::string_view>, 7> kPhaseNames{{
    {JobPhase::kUnknown, "unknown"},
    {JobPhase::kForming, "forming"},
    {JobPhase::kRunning, "running"},
    {JobPhase::kRestarting, "restarting"},
    {JobPhase::kFinished, "finished"},
    {JobPhase::kFailed, "failed"},
    {JobPhase::kStopped, "stopped"},
}};

json parse_object(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_object() ? j : json::object();
}

int64_t counter(store::Store& s, const std::string& key) {
  return s.check({key}) ? s.add(key, 0) : 0;
}

// The participants of round r: its plan's (round_plan.h), or while it is
// being planned, its size (dynamic rounds; static ones have none).
int round_size(store::Store& s, const JobKeys& k, int r) {
  if (s.check({k.plan(r)})) return rendezvous::RoundShape::from_json(s.get(k.plan(r))).num_nodes;
  if (s.check({k.size(r)})) return std::stoi(s.get(k.size(r)));
  return 0;
}

// The newest failure report of the rounds up to r.
void read_last_failure(store::Store& s, const JobKeys& k, int r, JobState& st) {
  for (int back = r; back >= 0 && back > r - kFailureLookback; --back) {
    int64_t n = counter(s, k.failures(back));
    if (n <= 0 || !s.check({k.failure(back, int(n - 1))})) continue;
    std::string text = s.get(k.failure(back, int(n - 1)));
    if (!json::parse(text, nullptr, false).is_object()) continue;
    st.last_failure = std::move(text);
    st.last_failure_round = back;
    return;
  }
}

// What ended the current round, or the job, as a phase and a reason.
void read_phase(store::Store& s, const JobKeys& k, JobState& st) {
  st.phase = JobPhase::kRunning;
  if (s.check({k.closed()})) {
    ClosedRecord c = ClosedRecord::from_json(s.get(k.closed()));
    st.phase = c.stop_signal ? JobPhase::kStopped : JobPhase::kFailed;
    st.reason = c.reason;
    st.stop_signal = c.stop_signal;
  } else if (s.check({k.end(st.round)})) {
    RoundEnd end = RoundEnd::from_json(s.get(k.end(st.round)));
    if (end.kind == RoundEndKind::kAllDone) {
      st.phase = JobPhase::kFinished;
    } else {
      st.phase = JobPhase::kRestarting;
      st.reason = end.kind == RoundEndKind::kRestartRequested ? "a worker failed"
                  : end.detail.empty() ? std::string(to_string(end.kind))
                                       : end.detail;
    }
  }
}

}  // namespace

std::string_view to_string(RoundEndKind kind) {
  for (const auto& [k, name] : kRoundEndNames) {
    if (k == kind) return name;
  }
  return "closed";
}

std::optional<RoundEndKind> parse_round_end_kind(std::string_view name) {
  for (const auto& [k, n] : kRoundEndNames) {
    if (n == name) return k;
  }
  return std::nullopt;
}

std::string_view to_string(JobPhase phase) {
  for (const auto& [p, name] : kPhaseNames) {
    if (p == phase) return name;
  }
  return "unknown";
}

std::string RoundEnd::to_json() const {
  json j{{"kind", to_string(kind)}, {"node", node}, {"detail", detail}};
  if (next_expected >= 0) j["next_expected"] = next_expected;
  if (stop_signal > 0) j["stop_signal"] = stop_signal;
  return j.dump();
}

RoundEnd RoundEnd::from_json(const std::string& text) {
  RoundEnd e;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    e.detail = "unreadable round end record: " + text.substr(0, 200);
    return e;
  }
  try {
    e.kind = parse_round_end_kind(j.value("kind", "closed")).value_or(RoundEndKind::kClosed);
    e.node = j.value("node", -1);
    e.detail = j.value("detail", "");
    e.next_expected = j.value("next_expected", -1);
    e.stop_signal = j.value("stop_signal", 0);
  } catch (const json::exception& x) {
    e = RoundEnd{};
    e.detail = std::string("unreadable round end record: ") + x.what();
  }
  return e;
}

std::string ClosedRecord::to_json() const {
  return json{{"reason", reason}, {"stop_signal", stop_signal}}.dump();
}

ClosedRecord ClosedRecord::from_json(const std::string& text) {
  json j = parse_object(text);
  ClosedRecord c;
  try {
    c.reason = j.value("reason", "closed");
    c.stop_signal = j.value("stop_signal", 0);
  } catch (const json::exception&) {
    c.reason = "closed (unreadable record: " + text.substr(0, 200) + ")";
  }
  return c;
}

JobState read_job_state(store::Store& s, const std::string& run_id) {
  JobKeys k(run_id);
  JobState st;
  st.run_id = run_id;
  if (!s.check({k.current_round()})) {
    // A job still forming its first round has round 0's join counter (or,
    // static, its nodes); a job closed before any round formed, its closed.
    if (s.check({k.joined(0)}) || s.check({k.node(0, 0)})) {
      st.phase = JobPhase::kForming;
      st.joined = counter(s, k.joined(0));
    } else if (s.check({k.closed()})) {
      read_phase(s, k, st);
    }
    return st;
  }
  st.round = std::stoi(s.get(k.current_round()));
  st.nodes_waiting = counter(s, k.joined(st.round + 1));
  st.num_nodes = round_size(s, k, st.round);
  for (int i = 0; i < st.num_nodes; ++i) {
    st.node_statuses.push_back(s.check({k.status(st.round, i)}) ? s.get(k.status(st.round, i)) : "");
  }
  read_phase(s, k, st);
  read_last_failure(s, k, st.round, st);
  return st;
}

}  // namespace ccrun

// The job's store records and their reader (see include/ccrun/job_state.h).
#include "ccrun/job_state.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>

#include <array>
#include <utility>

#include "ccrun/job_keys.h"
#include "round_end.h"
#include "round_plan.h"

namespace ccrun {

std::string format_utc(int64_t ms, bool millis) {
  time_t secs = time_t(ms / 1000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char buf[64];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &utc);
  if (millis) std::snprintf(buf + n, sizeof buf - n, ".%03d", int(ms % 1000));
  return std::string(buf) + " UTC";
}
namespace {

using json = nlohmann::json;

// A job has at most this many rounds of history worth reading back for its
// last failure.
constexpr int kFailureLookback = 8;

constexpr std::array<NamedValue<RoundEndKind>, 6> kRoundEndNames{{
    {"restart", RoundEndKind::kRestartRequested},
    {"dead", RoundEndKind::kNodeDead},
    {"waiting", RoundEndKind::kNodeWaiting},
    {"all_done", RoundEndKind::kAllDone},
    {"closed", RoundEndKind::kClosed},
    {"store_lost", RoundEndKind::kStoreLost},
}};

constexpr std::array<NamedValue<JobPhase>, 7> kPhaseNames{{
    {"unknown", JobPhase::kUnknown},
    {"forming", JobPhase::kForming},
    {"running", JobPhase::kRunning},
    {"restarting", JobPhase::kRestarting},
    {"finished", JobPhase::kFinished},
    {"failed", JobPhase::kFailed},
    {"stopped", JobPhase::kStopped},
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
    json j = json::parse(s.get(k.failure(back, int(n - 1))), nullptr, false);
    if (!j.is_object()) continue;
    st.last_failure = Failure::from_json(j);
    st.last_failure_round = back;
    return;
  }
}

// Each node's last status in round r (nullopt: no heartbeat yet).
std::vector<std::optional<NodeStatus>> read_statuses(store::Store& s, const JobKeys& k, int r,
                                                     int num_nodes) {
  std::vector<std::optional<NodeStatus>> out;
  for (int i = 0; i < num_nodes; ++i) {
    if (s.check({k.status(r, i)})) {
      out.push_back(NodeStatus::from_json(json::parse(s.get(k.status(r, i)), nullptr, false)));
    } else {
      out.emplace_back();
    }
  }
  return out;
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

std::string_view to_string(RoundEndKind kind) { return name_of(kRoundEndNames, kind, "closed"); }

std::optional<RoundEndKind> parse_round_end_kind(std::string_view name) {
  const auto* entry = find_name(kRoundEndNames, name);
  return entry ? std::optional(entry->value) : std::nullopt;
}

std::string_view to_string(JobPhase phase) { return name_of(kPhaseNames, phase, "unknown"); }

std::string RoundEnd::to_json() const {
  json j{{"kind", to_string(kind)}, {"node", node}, {"detail", detail}};
  if (next_expected >= 0) j["next_expected"] = next_expected;
  if (stop_signal > 0) j["stop_signal"] = stop_signal;
  if (time_ms > 0) j["time_ms"] = time_ms;
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
    e.time_ms = j.value("time_ms", int64_t{0});
  } catch (const json::exception& x) {
    e = RoundEnd{};
    e.detail = std::string("unreadable round end record: ") + x.what();
  }
  return e;
}

std::optional<Failure> RoundEnd::failure() const {
  if (kind != RoundEndKind::kRestartRequested) return std::nullopt;
  return Failure::from_json(json::parse(detail, nullptr, false));
}

std::string ClosedRecord::to_json() const {
  json j{{"reason", reason}, {"stop_signal", stop_signal}};
  if (time_ms > 0) j["time_ms"] = time_ms;
  return j.dump();
}

ClosedRecord ClosedRecord::from_json(const std::string& text) {
  json j = parse_object(text);
  ClosedRecord c;
  try {
    c.reason = j.value("reason", "closed");
    c.stop_signal = j.value("stop_signal", 0);
    c.time_ms = j.value("time_ms", int64_t{0});
  } catch (const json::exception&) {
    c.reason = "closed (unreadable record: " + text.substr(0, 200) + ")";
  }
  return c;
}

json Failure::to_json() const {
  return {{"node_rank", node_rank}, {"hostname", hostname}, {"addr", addr},
          {"rank", rank}, {"local_rank", local_rank}, {"pid", pid},
          {"exit_code", exit_code}, {"signal", signal}, {"time_ms", time_ms},
          {"attempt", attempt}, {"cause", name_of(kFailureCauseNames, cause, "")},
          {"message", message}, {"stderr_tail", stderr_tail}, {"steps", steps}};
}

Failure Failure::from_json(const json& j) {
  Failure f;
  if (!j.is_object()) {
    f.message = "unreadable failure record";
    return f;
  }
  try {
    f.node_rank = j.value("node_rank", -1);
    f.hostname = j.value("hostname", "");
    f.addr = j.value("addr", "");
    f.rank = j.value("rank", -1);
    f.local_rank = j.value("local_rank", -1);
    f.pid = j.value("pid", 0);
    f.exit_code = j.value("exit_code", 0);
    f.signal = j.value("signal", 0);
    f.time_ms = j.value("time_ms", int64_t{0});
    f.attempt = j.value("attempt", 0);
    const auto* cause = find_name(kFailureCauseNames, j.value("cause", ""));
    f.cause = cause ? cause->value : FailureCause::kNone;
    f.message = j.value("message", "");
    f.stderr_tail = j.value("stderr_tail", "");
    f.steps = j.value("steps", int64_t{-1});
  } catch (const json::exception&) {
    f = Failure{};
    f.message = "unreadable failure record: " + j.dump().substr(0, 200);
  }
  return f;
}

json NodeStatus::to_json() const {
  json j{{"host", host}, {"addr", addr}, {"node_rank", node_rank}, {"first_rank", first_rank},
         {"nproc", nproc}, {"attempt", attempt}, {"beat_ms", beat_ms}, {"pid", pid}};
  if (sampled_ms > 0) j["sampled_ms"] = sampled_ms;
  if (!ranks.empty()) {
    j["ranks"] = json::array();
    for (const auto& r : ranks) j["ranks"].push_back(r.to_json());
  }
  return j;
}

NodeStatus NodeStatus::from_json(const json& j) {
  NodeStatus n;
  if (!j.is_object()) return n;
  try {
    n.host = j.value("host", "");
    n.addr = j.value("addr", "");
    n.node_rank = j.value("node_rank", -1);
    n.first_rank = j.value("first_rank", 0);
    n.nproc = j.value("nproc", 0);
    n.attempt = j.value("attempt", 0);
    n.beat_ms = j.value("beat_ms", int64_t{0});
    n.sampled_ms = j.value("sampled_ms", int64_t{0});
    n.pid = j.value("pid", 0);
    if (j.contains("ranks") && j["ranks"].is_array()) {
      for (const auto& r : j["ranks"]) n.ranks.push_back(RankView::from_json(r));
    }
  } catch (const json::exception&) {
    // A field of another type (another version's record): the fields read
    // so far stand, the rest keep their defaults, as for a missing field.
  }
  return n;
}

// The hosts on round r's spare list, or on r + 1's once r's is closed (r
// ended and its spares moved on). A token is "<host>/<pid>/<n>".
static std::vector<std::string> read_spares(store::Store& s, const JobKeys& k, int r) {
  for (int round : {r, r + 1}) {
    if (!s.check({k.spares(round)})) continue;
    rendezvous::SpareList list = rendezvous::SpareList::from_json(s.get(k.spares(round)));
    if (list.closed) continue;
    std::vector<std::string> hosts;
    for (const auto& t : list.tokens) hosts.push_back(t.substr(0, t.find('/')));
    return hosts;
  }
  return {};
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
  st.node_statuses = read_statuses(s, k, st.round, st.num_nodes);
  read_phase(s, k, st);
  read_last_failure(s, k, st.round, st);
  st.spares = read_spares(s, k, st.round);
  st.exclusions = read_exclusions(s, run_id);
  return st;
}

}  // namespace ccrun

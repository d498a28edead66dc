// `ccrun status`: a running job as its store shows it (see status_command.h).
#include "status_command.h"
#include "subcommand_usage.h"

#include "help_formatter.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include "ccrun/error.h"
#include "ccrun/hang_verdict.h"
#include "ccrun/job_state.h"
#include "ccrun/startup_timeline.h"
#include "job_reader.h"

namespace ccrun::launcher {
namespace {

using json = nlohmann::json;

constexpr int kExitHealthy = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnknown = 3;

// Every rank's progress as its node published it with its heartbeat, with
// where it is in words and the straggler mark (docs/hangs.md).
void add_rank_progress(const JobState& st, json& out) {
  std::vector<RankView> views = job_rank_views(st);
  if (views.empty()) return;
  std::vector<int> slow = agent::find_stragglers(views);
  out["stragglers"] = slow;
  out["ranks"] = json::array();
  for (const auto& v : views) {
    json r = v.to_json();
    r["position"] = agent::rank_position(v);
    r["straggler"] = std::find(slow.begin(), slow.end(), v.rank) != slow.end();
    r["startup_summary"] = agent::startup_summary(v.startup, v.steps);
    out["ranks"].push_back(r);
  }
}

// One node's row: its status (its ranks once, in the job's "ranks") and
// how long ago it beat.
json node_json(const NodeStatus& n, int64_t now) {
  json j = n.to_json();
  j.erase("ranks");
  j["heartbeat_age_s"] = double(now - n.beat_ms) / 1000.0;
  return j;
}

// The hot spares waiting, and the nodes excluded now (ccrun/exclusion.h)
// with why and until when; past exclusions only count offences, unshown.
void add_spares_and_exclusions(const JobState& st, json& out) {
  if (!st.spares.empty()) out["spares"] = st.spares;
  auto live = st.exclusions.all_active(wall_clock_ms());
  if (live.empty()) return;
  out["excluded"] = json::array();
  for (const auto& e : live) out["excluded"].push_back(e.to_json());
}

// The job's state as `ccrun status --json` prints it.
json status_json(const JobState& st) {
  json out{{"run_id", st.run_id}, {"state", to_string(st.phase)}, {"nodes", json::array()}};
  if (!st.reason.empty() || st.phase == JobPhase::kFailed || st.phase == JobPhase::kStopped) {
    out["reason"] = st.reason;
  }
  if (st.stop_signal) out["stop_signal"] = st.stop_signal;
  if (st.phase == JobPhase::kForming) {
    out["round"] = 0;
    out["joined"] = st.joined;
    return out;
  }
  if (st.round < 0) return out;
  out["round"] = st.round;
  out["num_nodes"] = st.num_nodes;
  if (st.phase == JobPhase::kRunning && st.nodes_waiting > 0) {
    out["nodes_waiting"] = st.nodes_waiting;
  }
  int64_t now = wall_clock_ms();
  int attempt = 0, world = 0;
  for (int i = 0; i < int(st.node_statuses.size()); ++i) {
    const auto& n = st.node_statuses[i];
    if (!n) {
      out["nodes"].push_back({{"node_rank", i}, {"state", "no heartbeat yet"}});
      continue;
    }
    attempt = std::max(attempt, n->attempt);
    world += n->nproc;
    out["nodes"].push_back(node_json(*n, now));
  }
  out["attempt"] = attempt;
  out["world_size"] = world;
  add_rank_progress(st, out);
  if (st.last_failure) {
    out["last_failure"] = st.last_failure->to_json();
    out["last_failure"]["round"] = st.last_failure_round;
  }
  add_spares_and_exclusions(st, out);
  return out;
}

void format_ranks(std::ostringstream& o, const json& ranks) {
  char line[512];
  std::snprintf(line, sizeof line, "  %-5s %-5s %-8s %-8s %-8s %-9s %-8s %-26s %s\n", "rank",
                "node", "pid", "steps", "steps/s", "ms/step", "RSS MiB", "start-up", "where");
  o << line;
  for (const auto& r : ranks) {
    double busy = r.value("busy_ms_per_step", -1.0);
    std::string per_step = busy >= 0 ? std::to_string(int64_t(busy + 0.5)) : "-";
    std::snprintf(line, sizeof line, "  %-5d %-5d %-8d %-8llu %-8.1f %-9s %-8lld %-26s %s%s\n",
                  r.value("rank", -1), r.value("node_rank", -1), r.value("pid", 0),
                  static_cast<unsigned long long>(r.value("steps", uint64_t(0))),
                  r.value("steps_per_s", 0.0), per_step.c_str(),
                  static_cast<long long>(r.value("rss_kb", int64_t(0)) / 1024),
                  r.value("startup_summary", std::string("-")).c_str(),
                  r.value("position", std::string()).c_str(),
                  r.value("straggler", false) ? "  << straggler" : "");
    o << line;
  }
  o << "  (ms/step: each rank's own time per step, outside collectives; a straggler takes "
       "1.5x the others' median)\n";
}

// The job's state as `ccrun status` prints it: `st` is status_json(`job`).
std::string format_text(const JobState& job, const json& st, const std::string& endpoint) {
  std::ostringstream o;
  o << "job '" << st.value("run_id", "") << "' at " << endpoint << ": " << st.value("state", "");
  if (st.contains("round")) o << ", round " << st["round"].get<int>();
  if (st.contains("attempt")) o << ", attempt " << st["attempt"].get<int>();
  if (st.contains("world_size")) {
    o << ", " << st["num_nodes"].get<int>() << " node(s), " << st["world_size"].get<int>()
      << " rank(s)";
  }
  o << "\n";
  if (st.contains("reason")) o << "  reason: " << st["reason"].get<std::string>() << "\n";
  bool over = job.phase == JobPhase::kFinished || job.phase == JobPhase::kFailed ||
              job.phase == JobPhase::kStopped;
  if (over && !st["nodes"].empty()) {
    o << "  the job is over: the rows below are its nodes' and ranks' last heartbeats, "
         "not live\n";
  }
  if (st.contains("joined")) o << "  nodes joined so far: " << st["joined"].get<int64_t>() << "\n";
  if (st.contains("nodes_waiting")) {
    o << "  nodes waiting to join the next round: " << st["nodes_waiting"].get<int64_t>() << "\n";
  }
  if (!st["nodes"].empty()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-5s %-20s %-16s %-11s %-8s %s\n", "node", "host",
                  "address", "ranks", "attempt", "last heartbeat");
    o << line;
    for (const auto& n : st["nodes"]) {
      if (!n.contains("host")) {
        o << "  " << n.value("node_rank", -1) << "     (no heartbeat yet)\n";
        continue;
      }
      int first = n.value("first_rank", 0);
      std::string ranks = std::to_string(first) + "-" + std::to_string(first + n.value("nproc", 1) - 1);
      char age[32];
      std::snprintf(age, sizeof age, "%.1fs ago", n.value("heartbeat_age_s", 0.0));
      std::snprintf(line, sizeof line, "  %-5d %-20s %-16s %-11s %-8d %s\n",
                    n.value("node_rank", -1), n.value("host", "").c_str(),
                    n.value("addr", "").c_str(), ranks.c_str(), n.value("attempt", 0), age);
      o << line;
    }
  }
  if (st.contains("ranks")) format_ranks(o, st["ranks"]);
  if (job.last_failure) o << "  last failure: " << describe_failure(*job.last_failure) << "\n";
  if (!job.spares.empty()) {
    o << "  hot spares (waiting, no workers): ";
    for (size_t i = 0; i < job.spares.size(); ++i) o << (i ? ", " : "") << job.spares[i];
    o << "\n";
  }
  int64_t now = wall_clock_ms();
  for (const auto& e : job.exclusions.all_active(now)) {
    o << "  excluded: " << e.host << " " << describe(e, now) << "\n";
  }
  return o.str();
}

// What `ccrun status` is asked.
struct StatusArgs {
  JobStoreArgs job;  // the job and its store
  bool as_json = false;
};

// The parser of `ccrun status`, bound to `a` (also read by the completion).
std::unique_ptr<CLI::App> make_status_app(StatusArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Shows a running job's nodes, ranks, attempt and last failure, as its store holds them;\n"
      "exits 0 while the job is healthy (or finished), 1 when it failed or was stopped, 3 when\n"
      "the store does not know it",
      "ccrun status");
  auto help = std::make_shared<HelpFormatter>();
  help->column_width(32);
  app->formatter(help);
  add_job_store_options(*app, a.job);
  app->add_flag("--json", a.as_json, "print JSON instead of a table");
  return app;
}

}  // namespace

std::vector<FlagCompletion> status_flag_completions() {
  StatusArgs a;
  auto app = make_status_app(a);
  return job_store_flag_completions(*app);
}

int run_status_command(const std::vector<std::string>& args) {
  StatusArgs a;
  auto app_ptr = make_status_app(a);
  CLI::App& app = *app_ptr;
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fputs(subcommand_usage_error("status", app, e, args).c_str(), stderr);
    return kExitUsage;
  }
  try {
    auto store = open_store_of_job(a.job, "status");
    JobState job = read_job_state(*store, a.job.run_id);
    json st = status_json(job);
    if (a.as_json) {
      std::printf("%s\n", st.dump(2).c_str());
    } else {
      std::fputs(format_text(job, st, a.job.endpoint).c_str(), stdout);
    }
    if (job.phase == JobPhase::kUnknown) {
      std::fprintf(stderr, "ccrun status: %s\n", no_such_job_message(a.job).c_str());
      return kExitUnknown;
    }
    bool failed = job.phase == JobPhase::kFailed || job.phase == JobPhase::kStopped;
    return failed ? kExitFailed : kExitHealthy;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ccrun status: %s\n", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "ccrun status: %s\n", e.what());
    return kExitUnknown;
  }
}

}  // namespace ccrun::launcher

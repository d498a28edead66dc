// The agent's hang handling (agent_impl.h): the attempt's HangMonitor
// (--hang-timeout), a hang judged here or read from node 0 (the workers'
// stacks, then the group stops), and torch's FileTimer watchdog.
#include "agent_impl.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "ccrun/host_name.h"
#include "ccrun/signal_names.h"
#include "ccrun/hang_verdict.h"
#include "flight_recorder.h"

namespace ccrun::agent {

namespace fs = std::filesystem;

void Agent::serve_file_timer() {
  if (!node_env_.file_timer) return;
  std::string path = !node_env_.timer_file.empty() ? node_env_.timer_file
                                                   : "/tmp/watchdog_timer_" + agent_token_;
  file_timer_ = std::make_unique<FileTimerServer>(io_, path, [this](const FileTimerKill& k) {
    std::string scopes;
    for (const auto& s : k.scopes) scopes += (scopes.empty() ? "" : ", ") + s;
    spdlog::error("ccrun: torch's FileTimer expired for pid {} (scope {}); sent it {}", k.pid,
                  scopes, signal_name(k.signal));
    timer_kills_[k.pid] = "torch's FileTimer expired (scope " + scopes + "): ccrun sent " +
                          signal_name(k.signal) + ", as torch's LocalElasticAgent does";
  });
}

std::string Agent::evidence_prefix() const {
  if (run_logs_->kept()) {
    return (run_logs_->root() / ("attempt_" + std::to_string(restart_count_))).string() + "/";
  }
  return (fs::temp_directory_path() / ("ccrun-" + agent_token_ + "-")).string();
}

std::unique_ptr<HangMonitor> Agent::make_monitor() {
  HangMonitorOptions o;
  o.hang_timeout = spec_.hang_timeout;
  o.node_rank = info_.node_rank, o.num_nodes = info_.num_nodes;
  o.first_rank = info_.rank_offset, o.nproc = spec_.nproc_per_node;
  o.attempt = restart_count_, o.host = host_name(), o.token = agent_token_;
  o.evidence_prefix = evidence_prefix();
  o.nccl_ras_addr = node_env_.nccl_ras_addr;
  HangMonitor::Hooks h;
  h.publish = [this](std::vector<RankView> ranks) {
    if (steps_) {  // the sample of the hang monitor's timer: no timer of its own
      steps_->sample(wall_clock_ms(), restart_count_, info_.node_rank, info_.rank_offset, ranks);
    }
    rdzv_->set_progress(std::move(ranks));
    if (!attempt_->status_published) {  // the attempt's ranks in `ccrun status` at once
      attempt_->status_published = true;
      attempt_->tasks.run([rdzv = rdzv_.get()] { rdzv->publish_status(); },
                          [](const std::string&) {});  // the next heartbeat publishes it
    }
  };
  h.read_statuses = [rdzv = rdzv_.get()] { return rdzv->node_statuses(); };
  h.off_loop = [this](std::function<void()> call) {
    attempt_->tasks.run(std::move(call), [](const std::string& what) {
      spdlog::error("ccrun: hang monitor: {}", what);
    });
  };
  h.on_hang = [this](const HangVerdict& v, const std::vector<RankView>& all,
                     const std::vector<RankView>& local, const RankView& culprit) {
    // Else a stop is under way.
    if (!attempt_->stopping && !attempt_->outcome) on_hang(v, all, local, culprit);
  };
  h.event = [this](const std::string& name, const std::string& json) {
    run_logs_->event(name, restart_count_, json);
  };
  h.publish_evidence = [rdzv = rdzv_.get()](const std::string& mine) { rdzv->publish_hang_evidence(mine); };
  h.read_evidence = [rdzv = rdzv_.get()](std::chrono::milliseconds wait) { return rdzv->hang_evidence(wait); };
  h.await_evidence = [rdzv = rdzv_.get()](std::chrono::milliseconds wait) {
    return rdzv->await_hang_evidence(wait);
  };
  return std::make_unique<HangMonitor>(io_, o, h);
}

void Agent::on_hang(const HangVerdict& v, const std::vector<RankView>& all,
             const std::vector<RankView>& local, const RankView& culprit) {
  spdlog::error("ccrun: the job is hung (--hang-timeout {}): {}",
                format_duration(spec_.hang_timeout), v.headline);
  for (const auto& line : v.console_lines()) spdlog::error("ccrun:   {}", line);
  nlohmann::json& hang = attempt_->hang;
  hang = v.to_json();
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : all) ranks.push_back(r.to_json());
  hang["progress"] = ranks;
  run_logs_->event("hang", restart_count_, hang.dump());
  Failure f = node_failure("hang: " + v.headline, local);
  f.cause = FailureCause::kHang;
  if (culprit.rank >= 0) {
    f.rank = culprit.rank, f.local_rank = culprit.local_rank, f.pid = culprit.pid;
    f.node_rank = culprit.node_rank, f.hostname = culprit.host;
  }
  attempt_->local_failures.push_back(f);
  run_logs_->event("failure", restart_count_, f.to_json().dump());
  size_t at = attempt_->local_failures.size() - 1;
  stop_with_stacks(local, [this, at, named = v.cause_named](const HangEvidence& e) {
    // A verdict that names no cause takes what the NCCL flight recorders say.
    Failure& failure = attempt_->local_failures[at];
    if (!named) failure.message = with_flight_finding(failure.message, e.nccl_findings);
    tell_restart(failure);
  }, Outcome::kFailedHere);
}

void Agent::stop_with_stacks(const std::vector<RankView>& local,
                             std::function<void(const HangEvidence&)> then, Outcome outcome) {
  Attempt& a = *attempt_;
  a.stopping = true;
  state_ = State::kStopping;
  a.monitor->stop();
  int gen = a.generation;
  a.monitor->collect_stacks(local, [this, gen, then, outcome](const HangEvidence& e) {
    if (gen != generation_ || attempt_->outcome) return;
    nlohmann::json& hang = attempt_->hang;
    if (hang.is_null()) hang = nlohmann::json::object();
    hang["stacks"] = e.stacks;
    if (!e.ras.empty()) hang["nccl_ras"] = e.ras;
    if (!e.nccl_findings.empty()) hang["nccl_findings"] = e.nccl_findings;
    if (e.job_stacks) hang["job_stacks"] = e.job_stacks->to_json();
    if (!e.missing_nodes.empty()) hang["missing_nodes"] = e.missing_nodes;
    run_logs_->event("hang_stacks", restart_count_,
                     nlohmann::json{{"stacks", e.stacks}, {"nccl_findings", e.nccl_findings}}.dump());
    then(e);
    attempt_->monitor->after_other_nodes([this, gen, outcome] {
      // A signal meanwhile stops the workers already, and says why.
      if (gen != generation_ || attempt_->outcome || attempt_->workers->stopping()) return;
      attempt_->workers->stop(spec_.stop_grace, [this, outcome] { finish(outcome); });
    });
  });
}

}  // namespace ccrun::agent

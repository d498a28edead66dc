// The agent's health gate before each join, and its exclusions: made when
// the gate fails or the node's workers keep failing first, then sat out with
// no place in the job's rounds (see agent_impl.h, ccrun/exclusion.h and
// docs/health.md).
#include <spdlog/spdlog.h>

#include <cstdio>

#include "agent_impl.h"
#include "ccrun/error.h"
#include "ccrun/host_name.h"
#include "cuda_visible_devices.h"
#include "gpu_health.h"
#include "health_gate.h"

namespace ccrun::agent {

using std::chrono::milliseconds;

int Agent::clear_to_join() {
  for (;;) {
    if (auto e = my_exclusion()) {
      if (int status = sit_out(*e); status >= 0) return status;
    }
    state_ = State::kForming;
    std::optional<std::string> failed = run_health_gate_once();
    // A stop signal during the gate interrupted its store call: that is the
    // job's stop, not the node's health (run() ends it as a signal).
    if (signalled_) throw InterruptedError("stopped by a signal during the health gate");
    if (!failed) return -1;
    std::string why = "its health gate failed: " + *failed;
    exclude_self(why);
    if (can_sit_out()) continue;
    // A static job (or a job of one node) cannot form without this node:
    // the others stop now. The exclusion stays for the next launch (a host
    // list with a host to spare).
    std::string reason = node_before_round(host_name()) + " failed its health gate: " + *failed;
    run_bounded([this, reason] { rdzv_->set_closed({reason, 0}); }, milliseconds(3'000));
    throw Error(reason + " (the job is closed: it cannot form without this node; "
                         "docs/health.md)");
  }
}

std::optional<std::string> Agent::run_health_gate_once() {
  HealthGateOptions o;
  o.bound = spec_.health_timeout;
  o.user_check = spec_.health_check;
  if (spec_.health_allreduce) {
    o.allreduce_ranks = spec_.nproc_per_node;
    static const std::string program = find_allreduce_check();  // once: the agent's files do not move
    o.allreduce_program = program;
  }
  o.dirs = {run_logs_->root().string()};
  const std::string& temp = node_env_.temp_dir;
  if (run_logs_->root().string().rfind(temp, 0) != 0) o.dirs.push_back(temp);
  if (!store_.address.empty()) {
    // One new connection for both: the ping, then the clock on it.
    auto conn = std::make_shared<std::shared_ptr<store::Store>>();
    o.ping_store = [conn, connect = store_.connector()] {
      *conn = connect();
      (void)(*conn)->ping();
    };
    o.read_store_clock = [conn] { return (*conn)->read_clock(); };
  }
  if (node_env_.nvml_library.empty() && !node_env_.nvidia_driver) {
    // A CPU node: said in the report, with no NVML to open.
    o.gpus = [](milliseconds) {
      return std::vector<HealthCheck>{{"gpus", HealthCheck::Verdict::kCannotRun, 0,
                                       "no NVIDIA driver (/proc/driver/nvidia)"}};
    };
  } else {
    o.gpus = [this](milliseconds bound) {
      if (!gpu_checks_) gpu_checks_ = std::make_unique<GpuChecks>(open_nvml(node_env_.nvml_library));
      // GPUs named by UUID: no index known, the count check alone applies.
      return gpu_checks_->run(bound, cuda_device_indexes(node_env_.cuda_visible_devices)
                                         .value_or(std::vector<int>{}));
    };
  }
  HealthReport r;
  run_off_loop([&] { r = run_health_gate(o); });
  run_logs_->event("health", restart_count_, r.to_json().dump());
  if (r.healthy()) {
    if (spec_.health_check.empty()) {
      spdlog::debug("ccrun: health gate: {}", r.summary());
    } else {
      spdlog::info("ccrun: health gate passed: {}", r.summary());
    }
    return std::nullopt;
  }
  spdlog::error("ccrun: {} failed its health gate: {}; it does not join the round",
                node_before_round(host_name()), r.reason());
  return r.reason();
}

[[gnu::cold]] Exclusion Agent::exclude_self(const std::string& reason) {
  Exclusion e;
  if (!store_.address.empty()) {
    run_bounded([&] {
      e = exclude_node(*store_.connector()(), run_id_, host_name(), reason,
                       spec_.exclusion_cooldown);
    }, milliseconds(10'000));
  }
  if (e.host.empty()) {  // no job store (or it did not answer): this agent's own record
    e = local_exclusions_.add(host_name(), reason, wall_clock_ms(), spec_.exclusion_cooldown);
  } else {
    local_exclusions_.by_host[e.host] = e;
  }
  run_logs_->event("excluded", restart_count_, e.to_json().dump());
  spdlog::error("ccrun: node {} ({}) is excluded from the job {}", info_.node_rank, e.host,
                describe(e, wall_clock_ms()));
  if (spec_.started_by_fanout) {  // for the launching host (kExclusionMarker)
    std::fprintf(stderr, "%s%s\n", kExclusionMarker, e.to_json().dump().c_str());
  }
  if (!spec_.exclusion_file.empty()) {  // under Slurm: for the job's next run
    if (std::string error = record_exclusion(spec_.exclusion_file, e); !error.empty()) {
      spdlog::warn("ccrun: the exclusion is kept in the job's store only: {}", error);
    }
  }
  return e;
}

std::optional<Exclusion> Agent::my_exclusion() {
  // Only this agent excludes its node, so the store is read once, before the
  // first join (an earlier agent's record on this host); later joins know.
  // A store this agent hosts began with it: it holds no earlier record.
  bool joined_store = !store_.address.empty() && !store_.server;
  if (attempts_ == 0 && joined_store && local_exclusions_.by_host.empty()) {
    run_off_loop([&] { local_exclusions_ = read_exclusions(*store_.connector()(), run_id_); });
  }
  if (!spec_.exclusion_file.empty() && !exclusion_file_read_) {  // under Slurm
    exclusion_file_read_ = true;
    for (auto& [host, e] : read_exclusion_file(spec_.exclusion_file).by_host) {
      Exclusion& known = local_exclusions_.by_host[host];
      if (e.until_ms > known.until_ms) known = e;
    }
  }
  if (local_exclusions_.by_host.empty()) return std::nullopt;  // the usual case, at once
  return local_exclusions_.active(host_name(), wall_clock_ms());
}

bool Agent::can_sit_out() const {
  return spec_.rdzv.backend != rendezvous::Backend::kStatic && spec_.max_nodes > 1;
}

std::string Agent::node_before_round(const std::string& host) const {
  if (spec_.rdzv.backend != rendezvous::Backend::kStatic) return "node " + host;
  return "node " + std::to_string(spec_.node_rank) + " (" + host + ")";
}

[[gnu::cold]] int Agent::sit_out(const Exclusion& e) {
  state_ = State::kExcluded;
  if (!can_sit_out()) {  // no round forms without this node: the job cannot wait for it
    std::string reason = node_before_round(e.host) + " is excluded " + describe(e, wall_clock_ms());
    run_bounded([this, reason] { rdzv_->set_closed({reason, 0}); }, milliseconds(3'000));
    std::string elsewhere = spec_.exclusion_file.empty()
                                ? "launch on other hosts"
                                : "launch on other nodes (sbatch --exclude=" + e.host + ")";
    throw Error(reason + "; this job cannot run without it: wait for the cool-down, " +
                elsewhere + ", or use another --rdzv-id");
  }
  spdlog::warn("ccrun: node {} sits out its exclusion until {} with no workers ({}); then it "
               "runs its health gate and joins again", e.host, format_utc(e.until_ms), e.reason);
  rendezvous::RendezvousHandler::StandByEnd end{};
  try {
    run_off_loop([&] { end = rdzv_->stand_by(e.until_ms, store_.server != nullptr,
                                             milliseconds(60'000)); });
  } catch (const ConnectionError& lost) {
    // The job ended and its store's host left without waiting for a node
    // that has no part in it, or that host failed, which the nodes of the
    // round report. Nothing of the job is left here either way.
    spdlog::warn("ccrun: the job's store went away while node {} sat out its exclusion ({}): the "
                 "job ended, or its store's host failed (the other nodes say which)", e.host, lost.what());
    return 0;
  }
  using End = rendezvous::RendezvousHandler::StandByEnd;
  switch (end) {
    case End::kTimeUp:
      spdlog::info("ccrun: the cool-down of node {} ended", e.host);
      return -1;
    case End::kFinished:
      spdlog::info("ccrun: the job finished while node {} was excluded", e.host);
      return 0;
    case End::kClosed:
      end_reason_ = "the job was closed while node " + e.host + " was excluded";
      spdlog::warn("ccrun: {}", end_reason_);
      return 1;
  }
  return 1;
}

bool Agent::excluded_by_failures(const AttemptEnd& end) {
  failure_streak_ = next_failure_streak(failure_streak_, end, info_.node_rank);
  // Set only when this node's request ended the round and left: the next
  // round then waits for one node fewer (tell_restart).
  bool left = leaving_.exchange(false);
  if (!(left && failure_streak_ >= kExcludeAfterFailures)) return false;
  failure_streak_ = 0;
  return true;
}

}  // namespace ccrun::agent

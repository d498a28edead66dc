// The agent's failure reporting (agent_impl.h): the failures of an attempt
// collected from the store (or this node alone), the failure report (and the
// launcher's own TORCHELASTIC_ERROR_FILE), and the two ends no decision
// takes: the store lost, a stop by signal.
#include "agent_impl.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include <unistd.h>

#include "ccrun/error.h"
#include "ccrun/signal_names.h"
#include "incident.h"

namespace ccrun::agent {

namespace {

// How long a signalled agent tries to tell the other nodes it stopped.
constexpr std::chrono::milliseconds kCloseOnSignalTimeout{3'000};

}  // namespace

void Agent::collect_failures() {
  std::vector<Failure> records;
  try {
    run_off_loop([&] { records = rdzv_->failures(); });
  } catch (const InterruptedError&) {
    throw;
  } catch (const Error& e) {
    spdlog::warn("ccrun: cannot read the other nodes' failures: {}", e.what());
  }
  if (records.empty()) {
    collect_failures_local();
  } else {
    last_failures_ = std::move(records);
    all_failures_.insert(all_failures_.end(), last_failures_.begin(), last_failures_.end());
  }
  keep_incident();
}

void Agent::keep_incident() {
  static const nlohmann::json kNoHang;
  const nlohmann::json& hang = attempt_ ? attempt_->hang : kNoHang;
  if (!run_logs_ || !run_logs_->kept() || (last_failures_.empty() && hang.is_null())) return;
  IncidentMaterial m;
  m.attempt = restart_count_;
  for (const auto& f : last_failures_) m.failures.push_back(f.to_json());
  if (!hang.is_null()) {
    m.hang = hang;
    m.nccl_ras = hang.value("nccl_ras", std::string());
    m.hang.erase("nccl_ras");
  }
  for (int lr = 0; lr < spec_.nproc_per_node; ++lr) {
    auto dir = run_logs_->rank_dir(restart_count_, lr);
    m.logs.push_back({info_.rank_offset + lr, dir / "stdout.log", dir / "stderr.log"});
  }
  std::string dir = write_incident(run_logs_->root(), m).string();
  spdlog::info("ccrun: attempt {}'s incident (verdict, stacks, last log lines) is in {}",
               restart_count_, dir);
  incidents_.push_back(dir);
}

void Agent::collect_failures_local() {
  if (!attempt_) return;
  std::vector<Failure>& local = attempt_->local_failures;
  last_failures_ = local;
  all_failures_.insert(all_failures_.end(), local.begin(), local.end());
  local.clear();
}

void Agent::report(const std::string& reason) {
  std::vector<Failure> final = last_failures_;
  const auto* event = attempt_ && attempt_->event ? &*attempt_->event : nullptr;
  if (final.empty() && event && event->kind == RoundEndKind::kNodeDead) {
    Failure f;
    f.node_rank = event->node_rank;
    f.message = event->detail;
    f.time_ms = wall_clock_ms();
    f.attempt = restart_count_;
    final.push_back(f);
    all_failures_.push_back(f);
  }
  auto python = parse_python_command(spec_.entrypoint);
  std::string text = format_report(run_id_, final) + "  reason    : " + reason + "\n" +
                     interpreter_lines(python ? python->interpreter.front() : "", final);
  if (spec_.started_by_fanout) {
    // Every node prints the same report, and the launching ccrun shows one
    // of them (fanout.h, kReportMarker).
    std::string marked;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) marked += kReportMarker + l + "\n";
    text = marked;
  }
  std::fputs(text.c_str(), stderr);
  if (run_logs_ && run_logs_->kept()) {
    auto j = nlohmann::json::parse(report_json(run_id_, final, all_failures_, reason));
    if (attempt_ && !attempt_->hang.is_null()) j["hang"] = attempt_->hang;
    run_logs_->write_file("failure_report.json", j.dump(2) + "\n");
  } else if (!spec_.started_by_fanout) {
    // The report above holds the root cause's error record and last lines;
    // the files it came from are in a directory the run removes.
    spdlog::info("ccrun: this report is all that is kept; give --log-dir DIR to keep every "
                 "rank's output, error files and failure_report.json");
  }
  write_launcher_error_file(final);
}

namespace {

// Writes `record` to ccrun's own TORCHELASTIC_ERROR_FILE; false when unset.
bool write_error_file(const std::string& record) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return false;
  std::ofstream out(path, std::ios::trunc);
  out << record;
  out.close();
  // A scheduler reads it after ccrun exits: a failed write must be seen.
  if (!out) spdlog::error("ccrun: cannot write TORCHELASTIC_ERROR_FILE {}", path);
  return true;
}

}  // namespace

void write_launcher_error(const std::string& type, const std::string& what) {
  write_error_file(own_error_record(type, what, wall_clock_ms() / 1000));
}

void Agent::write_launcher_error_file(const std::vector<Failure>& final) {
  if (final.empty()) return;
  Failure root = root_cause(final);
  std::string worker_record;
  if (root.rank >= 0 && root.node_rank == info_.node_rank && run_logs_) {
    std::ifstream in(run_logs_->error_file(root.attempt, root.local_rank));
    worker_record.assign(std::istreambuf_iterator<char>(in), {});
  }
  error_file_written_ = write_error_file(launcher_error_record(root, worker_record));
}

void Agent::write_own_error_file(int status) {
  if (status == 0 || error_file_written_) return;
  if (status > 128) {
    write_launcher_error("SignalException", "ccrun (pid " + std::to_string(getpid()) +
                                                ") got signal: " + std::to_string(status - 128) +
                                                " (" + signal_name(status - 128) + ")");
  } else {
    write_launcher_error(end_error_type_, end_reason_);
  }
}

int Agent::store_lost(const std::string& detail) {
  end_reason_ = "lost the store " + store_endpoint() + ": " + detail;
  std::string what = attempt_ && attempt_->reached_barrier
                         ? "at the exit barrier (this node's workers all exited 0; the other "
                           "nodes' outcome is unknown)"
                         : "while the workers ran";
  std::fprintf(stderr,
               "ccrun: lost the store %s %s: %s; no answer for %llds, giving up. Was "
               "ccrun-rendezvous (or the agent hosting the store) stopped? A restarted "
               "ccrun-rendezvous starts empty; restart the job.\n",
               store_endpoint().c_str(), what.c_str(), detail.c_str(),
               static_cast<long long>(
                   (spec_.rdzv.keep_alive_interval * spec_.rdzv.keep_alive_max_attempt).count() /
                   1000));
  collect_failures_local();
  if (!all_failures_.empty()) report("lost the store " + store_endpoint());
  return 1;
}

int Agent::exit_signalled() {
  std::string reason = "ccrun received " + signal_name(signalled_) + " on node " +
                       std::to_string(info_.node_rank);
  end_reason_ = reason;
  // A node with no place in the rounds (excluded, or a hot spare) stops
  // alone, unless the job's store goes with it.
  bool outside = state_ == State::kExcluded || (rdzv_ && rdzv_->waiting_as_spare());
  if (outside && !store_.server) {
    spdlog::info("ccrun: this node leaves; the job goes on without it");
  } else if (rdzv_) {
    state_ = State::kLeaving;
    // The hosting node keeps serving until the others have read the close (or
    // the bound passes): its store goes away with it.
    bool hosting = store_.server != nullptr;
    run_bounded([&] {
      rdzv_->set_closed({reason, signalled_});
      if (hosting) rdzv_->leave(true, kCloseOnSignalTimeout);
    }, kCloseOnSignalTimeout);
  }
  return 128 + signalled_;
}

}  // namespace ccrun::agent

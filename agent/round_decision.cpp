// The agent's decision when an attempt ends (see round_decision.h).
#include "round_decision.h"

#include <algorithm>

namespace ccrun::agent {

namespace {

// The line that names a failure's error: the error record's first line,
// else stderr's last line that is not blank.
std::string error_line(const Failure& f) {
  if (!f.message.empty()) return f.message.substr(0, f.message.find('\n'));
  size_t end = f.stderr_tail.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t start = f.stderr_tail.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return f.stderr_tail.substr(start, end + 1 - start);
}

bool failed_alike(const Failure& a, const Failure& b) {
  return a.steps == b.steps && a.cause == b.cause && a.exit_code == b.exit_code &&
         a.signal == b.signal && error_line(a) == error_line(b);
}

// With no restarts left and --stop-without-progress off: when the last
// attempts (3 or more) failed alike, "; all 7 attempts failed at step 0
// with the same error: ...", naming the setting that would have stopped
// the job sooner; else "".
std::string repeated_failure_note(const AttemptEnd& end, const RestartBudget& b) {
  constexpr int kWorthSaying = 3;  // 2 restarts spent on one failure
  if (b.stop_without_progress > 0 || !end.failure || b.same_in_a_row < kWorthSaying) return "";
  int n = b.same_in_a_row;
  int stop = std::min(kSuggestedStopWithoutProgress, n - 1);
  return std::string("; ") + (n == b.failed_attempts ? "all " : "the last ") + std::to_string(n) +
         " attempts failed at step " + std::to_string(end.failure->steps) +
         " with the same error: --stop-without-progress " + std::to_string(stop) +
         " would have stopped the job after " + std::to_string(stop) +
         " (exit " + std::to_string(kExitNoProgress) + ": do not requeue)";
}

}  // namespace

void note_progress(RestartBudget& budget, const AttemptEnd& end) {
  if (end.how != AttemptEnd::How::kRoundEnded || end.kind != RoundEndKind::kRestartRequested) {
    return;  // not a failure: nothing learned
  }
  ++budget.failed_attempts;
  const std::optional<Failure>& f = end.failure;
  bool known = f && f->steps >= 0;
  bool alike = known && budget.last_failure && failed_alike(*f, *budget.last_failure);
  budget.same_in_a_row = !known ? 0 : alike ? budget.same_in_a_row + 1 : 1;
  budget.last_failure = f;
}

Decision decide(const AttemptEnd& end, const RestartBudget& budget) {
  using Action = Decision::Action;
  if (end.how == AttemptEnd::How::kSignalled) return {Action::kStop, ""};
  if (end.how == AttemptEnd::How::kSucceeded) return {Action::kLeave, ""};
  switch (end.kind) {
    case RoundEndKind::kAllDone:
      return {Action::kLeave, ""};
    case RoundEndKind::kStoreLost:
      return {Action::kStoreLost, end.detail};
    case RoundEndKind::kClosed:
      if (end.stop_signal > 0) return {Action::kStopped, end.detail};
      return {Action::kFail,
              end.detail.empty() ? "the job was stopped on another node" : end.detail};
    case RoundEndKind::kNodeWaiting:
      return {Action::kRejoin, ""};  // scaling up costs no restart
    case RoundEndKind::kNodeDead:
      if (budget.static_membership || budget.num_nodes - 1 < budget.min_nodes) {
        return {Action::kFail,
                end.detail + "; the job needs " + std::to_string(budget.min_nodes) + " nodes"};
      }
      break;
    case RoundEndKind::kRestartRequested:
      break;
  }
  if (budget.stop_without_progress > 0 && end.failure &&
      budget.same_in_a_row >= budget.stop_without_progress) {
    return {Action::kNoProgress,
            std::to_string(budget.same_in_a_row) + " attempts in a row failed at step " +
                std::to_string(end.failure->steps) +
                " with the same error: restarts do not help (--stop-without-progress " +
                std::to_string(budget.stop_without_progress) + "; exit " +
                std::to_string(kExitNoProgress) + ": do not requeue)"};
  }
  if (budget.restarts_left <= 0) {
    return {Action::kFail, "no restarts left (--max-restarts " +
                               std::to_string(budget.max_restarts) + ")" +
                               repeated_failure_note(end, budget)};
  }
  return {Action::kRestart, ""};
}

bool leaves_on_failure(int streak, bool elastic, int num_nodes, int min_nodes, int spares) {
  return elastic && streak + 1 >= kExcludeAfterFailures && num_nodes - 1 + spares >= min_nodes;
}

int next_failure_streak(int streak, const AttemptEnd& end, int node_rank) {
  bool here = end.how == AttemptEnd::How::kRoundEnded &&
              end.kind == RoundEndKind::kRestartRequested && end.failure &&
              end.failure->node_rank == node_rank;
  return here ? streak + 1 : 0;
}

}  // namespace ccrun::agent

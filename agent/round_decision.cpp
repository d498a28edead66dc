// The agent's decision when an attempt ends (see round_decision.h).
#include "round_decision.h"

namespace ccrun::agent {

void note_progress(RestartBudget& budget, const AttemptEnd& end) {
  if (end.how != AttemptEnd::How::kRoundEnded || end.kind != RoundEndKind::kRestartRequested) {
    return;  // not a failure: nothing learned
  }
  int64_t steps = end.failure ? end.failure->steps : -1;
  bool same = steps >= 0 && steps == budget.last_steps;
  budget.no_progress = same ? budget.no_progress + 1 : 0;
  budget.last_steps = steps;
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
  if (budget.no_progress >= kNoProgressLimit && end.failure) {
    return {Action::kNoProgress,
            std::to_string(budget.no_progress + 1) + " attempts in a row failed at step " +
                std::to_string(end.failure->steps) +
                ": restarts do not help (exit " + std::to_string(kExitNoProgress) +
                ": do not requeue)"};
  }
  if (budget.restarts_left <= 0) {
    return {Action::kFail,
            "no restarts left (--max-restarts " + std::to_string(budget.max_restarts) + ")"};
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

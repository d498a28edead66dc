// The agent's decision when an attempt ends (see round_decision.h).
#include "round_decision.h"

namespace ccrun::agent {

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
  if (budget.restarts_left <= 0) {
    return {Action::kFail,
            "no restarts left (--max-restarts " + std::to_string(budget.max_restarts) + ")"};
  }
  return {Action::kRestart, ""};
}

}  // namespace ccrun::agent

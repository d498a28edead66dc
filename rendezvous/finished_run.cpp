// A job id whose run is over, as a newcomer finds it (ccrun/finished_run.h).
#include "ccrun/finished_run.h"

#include <algorithm>
#include <chrono>

#include "ccrun/error.h"
#include "ccrun/signal_names.h"

namespace ccrun {

std::optional<FinishedRun> finished_run(const std::optional<ClosedRecord>& closed,
                                        const std::optional<RoundEnd>& current_end) {
  if (closed) {
    FinishedRun run;
    run.how = closed->stop_signal ? FinishedRun::How::kStopped : FinishedRun::How::kFailed;
    run.reason = closed->reason;
    run.stop_signal = closed->stop_signal;
    run.time_ms = closed->time_ms;
    return run;
  }
  if (current_end && current_end->kind == RoundEndKind::kAllDone) {
    FinishedRun run;
    run.how = FinishedRun::How::kSucceeded;
    run.time_ms = current_end->time_ms;
    return run;
  }
  return std::nullopt;
}

namespace {

// "3m12s ago (2026-11-26 14:02:11 UTC)"; the writer's clock may run ahead
// of this one: a time in the future reads as "just now".
std::string when(int64_t time_ms, int64_t now_ms) {
  if (time_ms <= 0) return "at a time it did not record";
  int64_t ago_s = std::max<int64_t>(now_ms - time_ms, 0) / 1000;
  std::string ago = ago_s == 0 ? "just now"
                               : format_duration(std::chrono::seconds(ago_s)) + " ago";
  return ago + " (" + format_utc(time_ms) + ")";
}

std::string how(const FinishedRun& run) {
  switch (run.how) {
    case FinishedRun::How::kSucceeded:
      return "succeeded";
    case FinishedRun::How::kStopped:
      return "was stopped by " + signal_name(run.stop_signal) +
             (run.reason.empty() ? "" : " (the previous run's reason: " + run.reason + ")");
    case FinishedRun::How::kFailed:
      break;
  }
  return "failed" + (run.reason.empty() ? "" : " (the previous run's reason: " + run.reason + ")");
}

}  // namespace

std::string already_ran_message(const std::string& run_id, const FinishedRun& run, int64_t now_ms,
                                std::string_view forget_hint) {
  std::string out = "the job id '" + run_id + "' already ran on this store: its previous run ended " +
                    when(run.time_ms, now_ms) + " and " + how(run) +
                    "; nothing was started here. To run it again, use a new --rdzv-id";
  if (!forget_hint.empty()) out += ", or " + std::string(forget_hint);
  return out;
}

}  // namespace ccrun

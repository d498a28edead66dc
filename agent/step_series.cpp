// Each rank's steps over time in the run dir (see step_series.h).
#include "step_series.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ccrun::agent {

bool StepThinning::take(int64_t now_ms, int attempt) {
  bool new_attempt = attempt != last_attempt_;
  // A timer that fires a little early still counts as one period.
  if (!new_attempt && now_ms - last_ms_ < period_ms_ - kFirstPeriodMs / 10) return false;
  last_attempt_ = attempt;
  last_ms_ = now_ms;
  if (++lines_at_period_ >= kLinesPerPeriod && period_ms_ < kLongestPeriodMs) {
    period_ms_ *= 2;
    lines_at_period_ = 0;
  }
  return true;
}

std::string step_line(int64_t time_ms, int attempt, int node_rank, int first_rank,
                      const std::vector<RankView>& ranks) {
  std::string line = "{\"time_ms\":" + std::to_string(time_ms) +
                     ",\"attempt\":" + std::to_string(attempt) +
                     ",\"node\":" + std::to_string(node_rank) +
                     ",\"first_rank\":" + std::to_string(first_rank) + ",\"steps\":[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) line += ',';
    const RankView& r = ranks[i];
    line += r.reporting ? std::to_string(r.steps) : "-1";
  }
  line += "],\"busy_ms\":[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankView& r = ranks[i];
    char ms[32] = "-1";
    if (r.reporting && r.busy_ms_per_step >= 0) std::snprintf(ms, sizeof ms, "%.1f", r.busy_ms_per_step);
    line += (i ? "," : "") + std::string(ms);
  }
  line += "]}\n";
  return line;
}

StepSeries::~StepSeries() {
  if (fd_ >= 0) ::close(fd_);
}

void StepSeries::sample(int64_t now_ms, int attempt, int node_rank, int first_rank,
                        const std::vector<RankView>& ranks) {
  if (failed_ || ranks.empty() || !thinning_.take(now_ms, attempt)) return;
  if (fd_ < 0) fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  std::string line = step_line(now_ms, attempt, node_rank, first_rank, ranks);
  // One write per line: O_APPEND keeps it whole.
  if (fd_ < 0 || ::write(fd_, line.data(), line.size()) != ssize_t(line.size())) {
    std::fprintf(stderr, "ccrun: cannot write %s: %s; later step samples are not saved\n",
                 path_.c_str(), std::strerror(errno));
    failed_ = true;
  }
}

}  // namespace ccrun::agent

// Each worker's start-up timeline, and the attempt's one line (see startup_timeline.h).
#include "ccrun/startup_timeline.h"

#include <algorithm>
#include <cstdio>

namespace ccrun::agent {

using progress::Phase;

namespace {

constexpr const char* kPhaseNames[progress::kPhases] = {"start", "imports", "process group",
                                                        "first collective", "first step"};

std::string secs(double s) {
  char buf[32];
  if (s < 0.0005) return "0";
  std::snprintf(buf, sizeof buf, s < 0.01 ? "%.3f" : "%.2f", s);
  return buf;
}

// When `t`'s start-up ended, in wall-clock ms (with its spawn as 0 if
// unknown): its first step, else the last phase it reached, else its spawn.
double startup_end_ms(const StartupTimeline& t) {
  return double(t.spawned_ms) + double(t.last_us()) / 1000.0;
}

}  // namespace

const char* phase_name(Phase p) { return kPhaseNames[size_t(p)]; }

StartupTimeline read_timeline(int rank, int64_t spawned_mono_ns, const progress::Startup& s,
                              int64_t mono_to_wall_ns) {
  StartupTimeline t;
  t.rank = rank;
  t.spawned_ms = (spawned_mono_ns + mono_to_wall_ns) / 1'000'000;
  t.warm = (s.flags.load(std::memory_order_relaxed) & progress::kStartedWarm) != 0;
  for (int p = 0; p < progress::kPhases; ++p) {
    int64_t at = s.at_ns[p].load(std::memory_order_relaxed);
    // A phase written before the spawn is another attempt's (a reused record): not reached.
    if (at != 0 && at >= spawned_mono_ns) t.after_spawn_us[size_t(p)] = (at - spawned_mono_ns) / 1000;
  }
  return t;
}

bool past_startup(const StartupTimeline& t, uint64_t steps) {
  if (t.done()) return true;
  if (t.reached(Phase::kCollective) && steps > 0) return true;
  return t.spawned_ms != 0 && t.last_us() == 0 && !t.reached(Phase::kInterpreter);
}

std::string startup_summary(const StartupTimeline& t, uint64_t steps) {
  int last = -1;
  for (int p = 0; p < progress::kPhases; ++p) {
    if (t.after_spawn_us[size_t(p)] >= 0) last = p;
  }
  if (last < 0) return t.spawned_ms ? "running" : "-";
  std::string at = secs(double(t.after_spawn_us[size_t(last)]) / 1e6) + "s";
  std::string warm = t.warm ? " (warm)" : "";
  if (t.done()) return "first step " + at + warm;
  if (past_startup(t, steps)) return std::string("running since ") + kPhaseNames[last] + " " + at + warm;
  return std::string("starting: ") + kPhaseNames[last] + " " + at + warm;
}

namespace {

// Seconds from `ref` to the end of the last rank's start-up (startup_end_ms).
double seconds_to_startup_end(const StartupReference& ref, const std::vector<StartupTimeline>& ranks) {
  double last = -1;
  for (const auto& t : ranks) {
    double from = ref.wall_ms ? double(ref.wall_ms) : double(t.spawned_ms);
    last = std::max(last, (startup_end_ms(t) - from) / 1000.0);
  }
  return last;
}

}  // namespace

double seconds_to_first_step(const StartupReference& ref, const std::vector<StartupTimeline>& ranks) {
  double last = -1;
  for (const auto& t : ranks) {
    if (!t.done()) return -1;
    double from = ref.wall_ms ? double(ref.wall_ms) : double(t.spawned_ms);
    last = std::max(last, (startup_end_ms(t) - from) / 1000.0);
  }
  return last;
}

std::string startup_line(int attempt, const StartupReference& ref,
                         const std::vector<StartupTimeline>& ranks) {
  if (ranks.empty()) return "";
  const StartupTimeline* slowest = &ranks.front();
  for (const auto& t : ranks) {
    if (startup_end_ms(t) > startup_end_ms(*slowest)) slowest = &t;
  }
  bool stepped = std::all_of(ranks.begin(), ranks.end(), [](const auto& t) { return t.done(); });
  std::string line = "attempt " + std::to_string(attempt) +
                     (stepped ? ": every rank at its first step "
                              : ": every rank past its start-up, with no first step, ") +
                     secs(seconds_to_startup_end(ref, ranks)) + " s after " +
                     (ref.what.empty() ? "its spawn" : ref.what) + " (";
  std::string parts;
  if (ref.wall_ms) {
    parts = std::string(ref.what == "launch" ? "until spawned " : "stop ") +
            secs(double(slowest->spawned_ms - ref.wall_ms) / 1000.0);
  }
  int64_t prev = 0;
  for (int p = 0; p < progress::kPhases; ++p) {
    int64_t at = slowest->after_spawn_us[size_t(p)];
    if (at < 0) continue;
    bool warm_import = p == int(Phase::kImports) && slowest->warm;
    std::string value = warm_import ? "0 (warm)" : secs(double(at - prev) / 1e6);
    parts += (parts.empty() ? "" : ", ") + std::string(kPhaseNames[p]) + " " + value;
    prev = std::max(prev, at);
  }
  return line + parts + "; slowest rank " + std::to_string(slowest->rank) + ")";
}

}  // namespace ccrun::agent

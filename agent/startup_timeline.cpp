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

// When `t` took its first step, in wall-clock ms (with its spawn as 0 if unknown).
double first_step_ms(const StartupTimeline& t) {
  return double(t.spawned_ms) + double(t.after_spawn_us[size_t(Phase::kStep)]) / 1000.0;
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

std::string startup_summary(const StartupTimeline& t) {
  int last = -1;
  for (int p = 0; p < progress::kPhases; ++p) {
    if (t.after_spawn_us[size_t(p)] >= 0) last = p;
  }
  if (last < 0) return t.spawned_ms ? "starting" : "-";
  std::string at = secs(double(t.after_spawn_us[size_t(last)]) / 1e6) + "s";
  std::string warm = t.warm ? " (warm)" : "";
  if (t.done()) return "first step " + at + warm;
  return std::string("starting: ") + kPhaseNames[last] + " " + at + warm;
}

double seconds_to_first_step(const StartupReference& ref, const std::vector<StartupTimeline>& ranks) {
  double last = -1;
  for (const auto& t : ranks) {
    if (!t.done()) return -1;
    double from = ref.wall_ms ? double(ref.wall_ms) : double(t.spawned_ms);
    last = std::max(last, (first_step_ms(t) - from) / 1000.0);
  }
  return last;
}

std::string startup_line(int attempt, const StartupReference& ref,
                         const std::vector<StartupTimeline>& ranks) {
  if (ranks.empty()) return "";
  const StartupTimeline* slowest = &ranks.front();
  for (const auto& t : ranks) {
    if (first_step_ms(t) > first_step_ms(*slowest)) slowest = &t;
  }
  std::string line = "attempt " + std::to_string(attempt) + ": every rank at its first step " +
                     secs(seconds_to_first_step(ref, ranks)) + " s after " +
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

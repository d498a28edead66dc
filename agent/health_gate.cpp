// A node's checks before it joins a round (see health_gate.h).
#include "health_gate.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ccrun/error.h"
#include "incident.h"
#include "run_command.h"

namespace ccrun::agent {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

const char* verdict_name(HealthCheck::Verdict v) {
  switch (v) {
    case HealthCheck::Verdict::kOk:
      return "ok";
    case HealthCheck::Verdict::kFailed:
      return "failed";
    case HealthCheck::Verdict::kCannotRun:
      return "cannot run";
  }
  return "?";
}

// Runs `check`, timing it.
HealthCheck timed(const std::function<HealthCheck()>& check) {
  auto t0 = Clock::now();
  HealthCheck c = check();
  c.ms = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
  return c;
}

HealthCheck disk_check(const std::string& dir, uint64_t min) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) {
    return {"disk", HealthCheck::Verdict::kCannotRun, 0, "cannot read the free space of " + dir};
  }
  return judge_free_space(dir, uint64_t(st.f_bavail) * st.f_frsize, min);
}

HealthCheck memory_check(uint64_t min) {
  std::ifstream in("/proc/meminfo");
  std::ostringstream text;
  text << in.rdbuf();
  return judge_memory(text.str(), min);
}

HealthCheck store_check(const std::function<void()>& ping) {
  auto t0 = Clock::now();
  try {
    ping();
  } catch (const std::exception& e) {
    return {"store", HealthCheck::Verdict::kFailed, 0, std::string("no answer: ") + e.what()};
  }
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  char rtt[64];
  std::snprintf(rtt, sizeof rtt, "round trip %.2f ms", ms);
  return {"store", HealthCheck::Verdict::kOk, 0, rtt};
}

HealthCheck clock_check(const std::function<std::optional<store::ClockReading>()>& read,
                        milliseconds max_skew) {
  try {
    return judge_clock(read(), max_skew);
  } catch (const std::exception& e) {
    // A store that does not answer failed the store check already; one
    // that does not know TIME (torch's own server) closed the connection.
    return {"clock", HealthCheck::Verdict::kCannotRun, 0,
            std::string("the store did not answer TIME (not a ccrun store?): ") + e.what()};
  }
}

std::string ms_text(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, ms >= 100 ? "%.0f ms" : "%.2f ms", ms);
  return text;
}

// A check that runs `argv`: a program that cannot start cannot run; else
// its exit, its time and its last lines are judged (judge_command).
HealthCheck command_check(const char* name, const std::vector<std::string>& argv, milliseconds bound) {
  CommandResult r = run_command(argv, bound, 64 << 10);
  if (r.spawn_error) return {name, HealthCheck::Verdict::kCannotRun, 0, argv.at(0) + " cannot run"};
  return judge_command(name, r.signal ? -1 : r.exit_code, r.timed_out, bound, r.output);
}

HealthCheck user_check(const std::string& command, milliseconds bound) {
  return command_check("user", {"/bin/sh", "-c", command}, bound);
}

HealthCheck allreduce_check(const std::string& program, int ranks, milliseconds bound) {
  if (program.empty()) {
    return {"allreduce", HealthCheck::Verdict::kCannotRun, 0,
            "ccrun-allreduce-check is not installed beside ccrun (it comes with ccrun's "
            "collectives; CCRUN_ALLREDUCE_CHECK names another path)"};
  }
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%.3f", double(bound.count()) / 1000);
  return command_check("allreduce", {program, "--ranks", std::to_string(ranks), "--timeout", timeout}, bound);
}

}  // namespace

bool HealthReport::healthy() const {
  for (const auto& c : checks) {
    if (c.verdict == HealthCheck::Verdict::kFailed) return false;
  }
  return true;
}

std::string HealthReport::reason() const {
  std::string out;
  for (const auto& c : checks) {
    if (c.verdict != HealthCheck::Verdict::kFailed) continue;
    out += (out.empty() ? "" : "; ") + c.name + ": " + c.detail;
  }
  return out;
}

std::string HealthReport::summary() const {
  std::string out;
  for (const auto& c : checks) {
    out += (out.empty() ? "" : ", ") + c.name + " " + verdict_name(c.verdict) + " (" +
           c.detail + ")";
  }
  return out;
}

nlohmann::json HealthReport::to_json() const {
  nlohmann::json checks_json = nlohmann::json::array();
  for (const auto& c : checks) {
    checks_json.push_back({{"name", c.name}, {"verdict", verdict_name(c.verdict)},
                           {"ms", c.ms}, {"detail", c.detail}});
  }
  return {{"healthy", healthy()}, {"checks", checks_json}};
}

HealthCheck judge_free_space(const std::string& dir, uint64_t available, uint64_t min) {
  std::string found = mib(available) + " free in " + dir;
  if (available < min) return {"disk", HealthCheck::Verdict::kFailed, 0, found + ", under " + mib(min)};
  return {"disk", HealthCheck::Verdict::kOk, 0, found};
}

HealthCheck judge_memory(const std::string& meminfo, uint64_t min) {
  std::istringstream lines(meminfo);
  for (std::string line; std::getline(lines, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) != 1) continue;
    uint64_t bytes = uint64_t(kb) << 10;
    std::string found = mib(bytes) + " available";
    if (bytes < min) return {"memory", HealthCheck::Verdict::kFailed, 0, found + ", under " + mib(min)};
    return {"memory", HealthCheck::Verdict::kOk, 0, found};
  }
  return {"memory", HealthCheck::Verdict::kCannotRun, 0, "no MemAvailable in /proc/meminfo"};
}

HealthCheck judge_clock(const std::optional<store::ClockReading>& reading,
                        milliseconds max_skew) {
  if (!reading) {
    return {"clock", HealthCheck::Verdict::kCannotRun, 0,
            "this store does not tell its host's time (only ccrun's TCP store does)"};
  }
  double offset = double(reading->offset.count()) / 1000;  // the store host's minus ours
  double error = double(reading->rtt.count()) / 2000;
  double skew = std::abs(offset);
  std::string found = "this host's clock is " + ms_text(skew) +
                      (offset >= 0 ? " behind" : " ahead of") + " the store host's (to within " +
                      ms_text(error) + ")";
  if (skew - error > double(max_skew.count())) {
    return {"clock", HealthCheck::Verdict::kFailed, 0,
            found + ", over " + format_duration(max_skew) +
                ": sync the clocks (chrony or NTP); nodes read each other's times"};
  }
  return {"clock", HealthCheck::Verdict::kOk, 0, found};
}

HealthCheck judge_command(std::string name, int exit_code, bool timed_out, milliseconds bound,
                          const std::string& output) {
  std::string said = last_lines(output, 3);
  while (!said.empty() && said.back() == '\n') said.pop_back();
  for (char& ch : said) ch = ch == '\n' ? ' ' : ch;
  if (timed_out) {
    return {name, HealthCheck::Verdict::kFailed, 0,
            "still running after " + format_duration(bound) + " (--health-timeout); killed"};
  }
  if (exit_code == 126 || exit_code == 127) {  // sh: not executable, not found
    return {name, HealthCheck::Verdict::kCannotRun, 0,
            "exit " + std::to_string(exit_code) + ": " + said};
  }
  if (exit_code != 0) {
    std::string how = exit_code < 0 ? "killed by a signal" : "exit " + std::to_string(exit_code);
    return {name, HealthCheck::Verdict::kFailed, 0, how + (said.empty() ? "" : ": " + said)};
  }
  return {name, HealthCheck::Verdict::kOk, 0, said.empty() ? "exit 0" : said};
}

std::string find_allreduce_check() {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("CCRUN_ALLREDUCE_CHECK"); path && *path) {
    candidates.emplace_back(path);
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((exe.parent_path() / "ccrun-allreduce-check").string());
  candidates.emplace_back(CCRUN_BUILD_ALLREDUCE_CHECK);
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

HealthReport run_health_gate(const HealthGateOptions& o) {
  HealthReport r;
  for (const auto& dir : o.dirs) {
    r.checks.push_back(timed([&] { return disk_check(dir, o.min_free_bytes); }));
  }
  r.checks.push_back(timed([&] { return memory_check(o.min_available_memory); }));
  bool store_answers = true;
  if (o.ping_store) {
    r.checks.push_back(timed([&] { return store_check(o.ping_store); }));
    store_answers = r.checks.back().verdict == HealthCheck::Verdict::kOk;
  }
  if (o.read_store_clock && store_answers) {
    r.checks.push_back(timed([&] { return clock_check(o.read_store_clock, o.max_clock_skew); }));
  }
  if (o.gpus) {
    for (auto& c : o.gpus(o.bound)) r.checks.push_back(std::move(c));
  }
  if (o.allreduce_ranks > 0) {
    r.checks.push_back(
        timed([&] { return allreduce_check(o.allreduce_program, o.allreduce_ranks, o.bound); }));
  }
  if (!o.user_check.empty()) {
    r.checks.push_back(timed([&] { return user_check(o.user_check, o.bound); }));
  }
  return r;
}

}  // namespace ccrun::agent

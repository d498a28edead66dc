// Restarts, signals, logs and the program (see resolve.h).
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <sstream>

#include "ccrun/error.h"
#include "ccrun/event_log_handler.h"
#include "ccrun/numa_binding.h"
#include "ccrun/signal_names.h"
#include "resolve.h"

namespace ccrun::launcher {

void resolve_restarts(const Sources& src, JobSpec& spec) {
  auto raw = [&](const char* key) { return src.get(key); };
  spec.max_restarts = int(to_int(raw("max_restarts"), 0, 1 << 20, "a number of restarts, 0 or more"));
  Raw stop = raw("stop_without_progress");
  spec.stop_without_progress = int(to_int(stop, 0, 1 << 20, "0 (never) or a number of attempts"));
  if (spec.stop_without_progress == 1) {
    fail(stop, "one attempt has nothing to repeat; give 2 or more attempts in a row, or 0 to "
               "never stop this way");
  }
  spec.monitor_interval = to_seconds(raw("monitor_interval"));
  spec.stop_grace = to_seconds(raw("stop_grace"));
  spec.hang_timeout = to_seconds(raw("hang_timeout"));
  spec.health_check = raw("health_check").value;
  spec.health_timeout = to_seconds(raw("health_timeout"));
  if (spec.health_timeout.count() <= 0) {
    fail(raw("health_timeout"), "a health check needs a bound above 0 seconds");
  }
  spec.health_allreduce = to_bool(raw("health_allreduce"));
  spec.exclusion_cooldown = to_seconds(raw("exclusion_cooldown"));
  if (spec.exclusion_cooldown.count() <= 0) {
    fail(raw("exclusion_cooldown"), "an exclusion needs a cool-down above 0 seconds");
  }
  Raw signals = raw("signals_to_handle");
  spec.signals_to_handle.clear();
  std::stringstream ss(signals.value);
  for (std::string sig; std::getline(ss, sig, ',');) {
    sig.erase(std::remove(sig.begin(), sig.end(), ' '), sig.end());
    if (sig.empty()) continue;
    const int s = signal_number(sig);
    if (s == 0 || s == SIGKILL || s == SIGSTOP) fail(signals, "\"" + sig + "\" is not a signal ccrun can handle (e.g. SIGTERM)");
    spec.signals_to_handle.push_back(s);
  }
  spec.role = raw("role").value;
  // torchrun 1.13's --start_method: how its Python agent made workers.
  // ccrun always fork+execs the program, which is what "spawn" amounts to
  // for a fresh interpreter; the value is checked and otherwise unused.
  Raw start = raw("start_method");
  if (std::find(std::begin(kStartMethods), std::end(kStartMethods), start.value) == std::end(kStartMethods)) {
    fail(start, "expected spawn, fork or forkserver (accepted for torchrun compatibility; "
                "ccrun always fork+execs)");
  }
}

namespace {

// Throws, naming `r`, unless `rank` is one of this node's local ranks.
// With a host list each host's agent checks its own (slots differ).
void check_local_rank(const Raw& r, int rank, const JobSpec& spec) {
  if (rank < spec.nproc_per_node || !spec.hosts.empty()) return;
  fail(r, "local rank " + std::to_string(rank) + " does not exist: this node runs " +
              std::to_string(spec.nproc_per_node) + " worker(s), local ranks 0 to " +
              std::to_string(spec.nproc_per_node - 1));
}

// -r/--redirects or -t/--tee (`key`): a value for all, or per local rank.
void resolve_std_streams(const Sources& src, const char* key, int& def, std::map<int, int>& per_rank,
                         const JobSpec& spec) {
  Raw r = src.get(key);
  parse_std_streams(r, def, per_rank);
  for (const auto& [rank, value] : per_rank) check_local_rank(r, rank, spec);
}

}  // namespace

void resolve_logs(const Sources& src, JobSpec& spec) {
  auto raw = [&](const char* key) { return src.get(key); };
  spec.logs.log_dir = raw("log_dir").value;
  resolve_std_streams(src, "redirects", spec.logs.default_redirects, spec.logs.redirects, spec);
  resolve_std_streams(src, "tee", spec.logs.default_tee, spec.logs.tee, spec);
  // torch 2.x's --logs-specs names an entry point of its "torchrun.logs_specs"
  // group; torch ships one, "default", which is what ccrun's logs are.
  Raw specs = raw("logs_specs");
  if (specs.value != "default") {
    fail(specs, "the only logs spec is default (torch's DefaultLogsSpecs); ccrun's logs are set "
                "by --log-dir, -r/--redirects, -t/--tee and --local-ranks-filter");
  }
  spec.logs.line_prefix_template = raw("log_line_prefix_template").value;
  spec.logs.collapse_output = to_bool(raw("collapse_output"));
  Raw filter = raw("local_ranks_filter");
  std::stringstream fs_(filter.value);
  for (std::string r; std::getline(fs_, r, ',');) {
    if (r.empty()) continue;
    Raw one{r, filter.where, filter.yaml};
    int rank = int(to_int(one, 0, 1 << 20, "local ranks such as 0,2"));
    check_local_rank(one, rank, spec);
    spec.logs.local_ranks_filter.insert(rank);
  }
  spec.logs.duplicate_stdout_filters = split_escaped_commas(raw("duplicate_stdout_filters").value);
  spec.logs.duplicate_stderr_filters = split_escaped_commas(raw("duplicate_stderr_filters").value);
  Raw handler = raw("event_log_handler");
  try {
    spec.event_log_handler = parse_event_log_handler(handler.value);
  } catch (const ConfigError& e) {
    fail(handler, std::string(e.what()) + " (torch's registry of event handlers)");
  }
}

void resolve_placement(const Sources& src, JobSpec& spec) {
  Raw numa = src.get("numa_binding");
  try {
    spec.numa_binding = parse_numa_binding(numa.value);
  } catch (const ConfigError& e) {
    fail(numa, e.what());
  }
  spec.virtual_local_rank = to_bool(src.get("virtual_local_rank"));
}

void resolve_warm_start(const Sources& src, JobSpec& spec) {
  spec.warm_start = to_bool(src.get("warm_start"));
  Raw preload = src.get("preload");
  std::stringstream ss(preload.value);
  for (std::string m; std::getline(ss, m, ',');) {
    m.erase(std::remove(m.begin(), m.end(), ' '), m.end());
    if (m.empty()) continue;
    bool dotted_name = std::all_of(m.begin(), m.end(), [](char c) {
      return c == '.' || c == '_' || std::isalnum(static_cast<unsigned char>(c));
    });
    if (!dotted_name) fail(preload, "\"" + m + "\" is not a module name (e.g. numpy,transformers)");
    spec.preload.push_back(m);
  }
  spec.mpi = to_bool(src.get("mpi"));
  if (spec.mpi && spec.warm_start) {
    fail(src.get("mpi"), "serves PMI to workers started cold, and --warm-start forks them from a "
                         "template: drop one of --mpi and --warm-start");
  }
  if (!spec.preload.empty() && !spec.warm_start) {
    fail(preload, "names modules for the --warm-start template, and --warm-start is off: add "
                  "--warm-start (warm_start: true, PET_WARM_START=1), or drop --preload");
  }
}

bool resolve_program(const Sources& src, std::vector<std::string> rest, JobSpec& spec) {
  auto raw = [&](const char* key) { return src.get(key); };
  const YamlJob& job = src.yaml();
  spec.env = job.env;
  if (!rest.empty() && rest[0] == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-') {
    std::vector<std::string> flags;
    for (const auto& s : settings()) {
      for (auto& f : long_flags(s)) flags.push_back(std::move(f));
    }
    for (const char* f : {"--config", "--print-config", "--version", "--help"}) flags.push_back(f);
    throw ConfigError("unknown flag \"" + rest[0] + "\"" + closest_flag(rest[0], flags) +
                      " (a program whose name starts with '-' goes after --); see ccrun --help");
  }
  std::string program;
  std::vector<std::string> prog_args;
  if (!rest.empty()) {
    program = rest[0];
    prog_args.assign(rest.begin() + 1, rest.end());
  } else if (job.program) {
    program = *job.program;
    prog_args = job.args;
  }
  bool module = to_bool(raw("module")), no_python = to_bool(raw("no_python")),
       run_path = to_bool(raw("run_path"));
  if (module && no_python) throw ConfigError("-m/--module and --no-python cannot go together");
  if (program.empty()) return false;
  spec.program = {program, prog_args, module, no_python, run_path};
  std::string python = src.env().get("PYTHON_EXEC").value_or(kDefaultPython);
  bool is_py = is_python_script(program);
  if (module) {
    spec.entrypoint = {python, kPythonFlags, "-m", program};
  } else if (run_path) {
    spec.entrypoint = {python, kPythonFlags, "-c", kRunPathCode, program};
  } else if (is_py && !no_python) {
    spec.entrypoint = {python, kPythonFlags, program};
  } else {
    spec.entrypoint = {program};
  }
  spec.entrypoint.insert(spec.entrypoint.end(), prog_args.begin(), prog_args.end());
  return true;
}

}  // namespace ccrun::launcher

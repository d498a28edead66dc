// ccrun: the command. Parses flags, PET_* variables and the job file into a
// JobSpec, then runs this node's agent.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ccrun/agent.h"
#include "ccrun/error.h"
#include "ccrun/stop_signals.h"
#include "fanout.h"
#include "job_builder.h"
#include "log_level.h"
#include "preflight.h"
#include "process.h"
#include "report_command.h"
#include "status_command.h"
#include "top_command.h"

// SIGINT, SIGTERM, SIGHUP and SIGQUIT are held from load on; the agent and
// the fan-out read them from their loop, the other paths release them.
CCRUN_BLOCK_STOP_SIGNALS_AT_LOAD();

namespace {

// A mistake in the input, said with its fix: exit 2.
int usage_error(const char* type, const std::string& what) {
  std::fprintf(stderr, "ccrun: %s\n", what.c_str());
  ccrun::agent::write_launcher_error(type, what);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ccrun;
  open_standard_descriptors();
  if (argc > 1 && std::string(argv[1]) == "status") {
    release_stop_signals();  // no state to save: a signal ends it at once
    return launcher::run_status_command(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc > 1 && std::string(argv[1]) == "report") {
    release_stop_signals();  // writes one file: a signal ends it at once
    return launcher::run_report_command(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc > 1 && std::string(argv[1]) == "top") {  // reads the stop signals itself
    return launcher::run_top_command(std::vector<std::string>(argv + 2, argv + argc));
  }
  launcher::Command cmd;
  launcher::LogLevelChoice log_level;
  try {
    cmd = launcher::parse_command_line(std::vector<std::string>(argv + 1, argv + argc),
                                       launcher::Environment::from_process());
    log_level = launcher::choose_log_level(std::getenv("CCRUN_LOG_LEVEL"), std::getenv("LOGLEVEL"));
  } catch (const Error& e) {
    return usage_error(error_type_name(e), e.what());
  } catch (const std::exception& e) {
    // A bad value the checks missed: still a usage error, never an abort.
    return usage_error("ccrun::ConfigError",
                       std::string("cannot read the command line or job file: ") + e.what());
  }
  if (!cmd.message.empty() || cmd.print_config) release_stop_signals();
  if (!cmd.message.empty()) {
    std::fputs(cmd.message.c_str(), stdout);
    return 0;
  }
  if (cmd.print_config) {
    std::fputs(launcher::to_yaml(cmd.spec).c_str(), stdout);
    return 0;
  }
  if (!cmd.spec.hosts.empty()) {  // one agent per host, over ssh
    try {
      return launcher::run_fanout(cmd.spec, launcher::Environment::from_process());
    } catch (const ConfigError& e) {
      return usage_error(error_type_name(e), e.what());
    } catch (const Error& e) {
      std::fprintf(stderr, "ccrun: %s\n", e.what());
      agent::write_launcher_error(error_type_name(e), e.what());
      return 1;
    }
  }
  try {
    launcher::check_node_inputs(cmd.spec, launcher::Environment::from_process());
  } catch (const ConfigError& e) {
    return usage_error(error_type_name(e), e.what());
  }
  // ccrun's own messages go to stderr: stdout carries the workers' output.
  auto logger = spdlog::stderr_color_mt("ccrun");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(log_level.level);
  if (!log_level.warning.empty()) spdlog::warn("ccrun: {}", log_level.warning);
  std::fflush(stdout);
  return agent::run(cmd.spec);
}

// --event-log-handler (agent_impl.h): the event torch 2.x's launcher
// records when its agent's run ends, in torch's schema
// (torch/distributed/elastic/events/api.py's Event, metadata as
// SimpleElasticAgent._construct_event fills it), written where the handler
// says: "console" is a logging.StreamHandler, one JSON line on stderr.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent_impl.h"
#include "ccrun/host_name.h"

namespace ccrun::agent {
namespace {

// torch's _get_entrypoint_name: for a Python program its first argument that
// is not an option (the script or module), else the program.
std::string entry_point(const std::vector<std::string>& argv) {
  if (argv.empty()) return "";
  std::string prog = std::filesystem::path(argv[0]).filename().string();
  if (prog.rfind("python", 0) != 0) return argv[0];
  for (size_t i = 1; i < argv.size(); ++i) {
    if (!argv[i].empty() && argv[i][0] != '-') return argv[i];
  }
  return "";
}

}  // namespace

void Agent::record_end_event(int status) const {
  if (spec_.event_log_handler != EventLogHandler::kConsole) return;
  // torch records FAILED when its agent raised (a signal, a rendezvous
  // error) and SUCCEEDED when the agent's run returned, its workers' result
  // whatever it was (torch/distributed/launcher/api.py: "NOT that workers have succeeded").
  bool failed = agent_error_ || status > 128;
  std::string state = failed ? "FAILED" : "SUCCEEDED";
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_);
  nlohmann::ordered_json md{{"group_world_size", info_.num_nodes}, {"entry_point", entry_point(spec_.entrypoint)}};
  nlohmann::ordered_json meta{
      {"run_id", run_id_},
      {"global_rank", nullptr},
      {"group_rank", info_.node_rank},
      {"worker_id", nullptr},
      {"role", spec_.role},
      {"hostname", host_name()},
      {"state", state},
      {"total_run_time", secs.count()},
      {"rdzv_backend", std::string(rendezvous::backend_name(spec_.rdzv.backend))},
      {"raw_error", failed ? nlohmann::ordered_json(end_reason_) : nlohmann::ordered_json(nullptr)},
      {"metadata", md.dump()},
      {"agent_restarts", restart_count_},
      {"duration_ms", nullptr},
  };
  nlohmann::ordered_json event{{"name", "torchelastic.worker.status." + state},
                               {"source", "AGENT"},
                               {"timestamp", 0},  // torch leaves Event.timestamp at its default
                               {"metadata", meta}};
  std::fprintf(stderr, "%s\n", event.dump().c_str());
  std::fflush(stderr);
}

}  // namespace ccrun::agent

// --mpi: the attempt's PMI-1 server (mpi/pmi_server.h), made for the round
// this node joined, and a rank's MPI_Abort as its failure. mpiexec ends a
// rank that aborts (its PMI client waits for that); so does the agent, and
// the failure report gives the rank's error code rather than the SIGKILL.
// Each rank gets the PMPI library that records its MPI calls in its progress
// record (collectives/mpi_progress), for the hang verdict and `ccrun status`.
#include "agent_impl.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include "ccrun/error.h"
#include "ccrun/job_keys.h"
#include "ccrun/store_address.h"
#include "module_loader.h"

namespace ccrun::agent {

[[gnu::cold]] std::unique_ptr<mpi::PmiServer> Agent::make_pmi_server() {
  if (!spec_.mpi) return nullptr;
  mpi::PmiServerOptions o;
  o.job.kvsname = mpi::kvs_name("kvs_ccrun_" + run_id_ + "_" + std::to_string(info_.round));
  o.job.world_size = info_.world_size;
  o.job.num_nodes = info_.num_nodes;
  o.job.nproc_per_node = spec_.nproc_per_node;
  o.local_ranks = spec_.nproc_per_node;
  o.rank_offset = info_.rank_offset;
  o.key_prefix = JobKeys(run_id_).pmi(info_.round);
  // Its own connection, whose blocking barrier the server's interrupt ends.
  auto open = [address = store_.address, reopen = store_.reopen](
                  std::shared_ptr<store::StoreInterrupt> interrupt) {
    if (address.empty()) throw Error("--mpi needs the job's store, and this agent has none");
    store::OpenStoreOptions opts = reopen;
    opts.interrupt = std::move(interrupt);
    return store::open_store(address, opts);
  };
  return std::make_unique<mpi::PmiServer>(
      io_, std::move(o), std::move(open),
      [this](int lr, int code, const std::string& message) { on_mpi_abort(lr, code, message); },
      [](const std::string& what) {
        spdlog::error("ccrun: --mpi: the ranks' PMI connections are closed: {}", what);
      });
}

[[gnu::cold]] void Agent::add_mpi_environment(EnvBuilder& env, int lr) const {
  for (auto& [name, value] : attempt_->pmi->variables(lr)) env.set(name, value);
  static const std::string preload = [] {
    std::string path = module_path("mpi_progress");
    if (path.empty()) {
      spdlog::warn("ccrun: --mpi: libccrun_mpi_progress.so is not installed (ccrun was built "
                   "without MPI's headers, or the module directory moved): the ranks' MPI calls "
                   "are not recorded, and a hang verdict cannot name the call a rank is behind in");
    }
    return path;
  }();
  if (!preload.empty()) env.prepend_path("LD_PRELOAD", preload);
}

[[gnu::cold]] void Agent::on_mpi_abort(int lr, int exit_code, const std::string& message) {
  Attempt& a = *attempt_;
  if (a.mpi_aborts.count(lr)) return;
  a.mpi_aborts[lr] = MpiAbort{exit_code, message};
  spdlog::error("ccrun: rank {} called MPI_Abort with error code {}", info_.rank_offset + lr,
                exit_code);
  std::vector<pid_t> pids = a.workers->pids();
  if (size_t(lr) < pids.size() && pids[size_t(lr)] > 0) ::kill(pids[size_t(lr)], SIGKILL);
}

[[gnu::cold]] void Agent::name_mpi_abort(Failure& f) const {
  auto it = attempt_->mpi_aborts.find(f.local_rank);
  if (it == attempt_->mpi_aborts.end()) return;
  const MpiAbort& abort = it->second;
  f.exit_code = abort.exit_code;
  f.signal = 0;
  std::string why = "MPI_Abort: the rank aborted the job with error code " +
                    std::to_string(abort.exit_code) +
                    (abort.message.empty() ? "" : ": " + abort.message) +
                    " (ccrun ended the rank, as mpiexec does)";
  f.message = why + (f.message.empty() ? "" : "\n" + f.message);
}

}  // namespace ccrun::agent

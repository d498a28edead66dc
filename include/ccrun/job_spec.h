//===- ccrun/job_spec.h - What one ccrun job is -----------------*- C++ -*-===//
//
// A `JobSpec` is the whole description of a job on one node, after flags,
// PET_* environment variables, Slurm's srun variables and the YAML job file
// have been merged and validated by the launcher. The agent runs exactly
// what it says and never re-reads flags; beside it, the agent honours only
// a few variables of its node, most of which torch's agent reads too
// (OMP_NUM_THREADS, TORCHELASTIC_*, TMPDIR, NCCL_RAS_ADDR, CUDA_VISIBLE_DEVICES,
// CCRUN_NVML_LIBRARY: agent/node_environment.h). Defaults are torchrun's, and a
// default JobSpec is where they live: the launcher's settings table
// (launcher/settings.cpp) reads each flag's default, --print-config's value
// and the flags the ssh fan-out forwards from a JobSpec. With a
// host list (`hosts`), the launcher does not run an agent itself: it starts
// one per host over ssh (launcher/fanout.h), each with its own JobSpec.
//
//   JobSpec spec;                      // torchrun's defaults
//   spec.nproc_per_node = 4;
//   spec.entrypoint = {"/usr/bin/python3", "train.py", "--lr", "0.1"};
//   int status = ccrun::agent::run(spec);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <csignal>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ccrun/event_log_handler.h"
#include "ccrun/numa_binding.h"
#include "ccrun/rendezvous_backend.h"

namespace ccrun {

// The rendezvous' timing: torchrun's --rdzv-conf keys and defaults. The
// job's RendezvousSpec and the handler's RendezvousOptions both hold it.
struct RendezvousTiming {
  std::chrono::milliseconds join_timeout{600'000};     // whole rendezvous
  std::chrono::milliseconds last_call_timeout{30'000};  // wait after min
  std::chrono::milliseconds keep_alive_interval{5'000};
  int keep_alive_max_attempt = 3;  // missed beats before a node is dead
};

// The rendezvous: how the agents of a job find each other.
struct RendezvousSpec : RendezvousTiming {
  // static, c10d or etcd (ccrun/rendezvous_backend.h).
  rendezvous::Backend backend = rendezvous::Backend::kStatic;
  // c10d: host[:port] of the store, the port defaulting to
  // kDefaultRendezvousPort; etcd: the cluster's members.
  std::string endpoint;
  std::string id = "none";  // the job's identity: agents with one id meet
  // The --rdzv-conf pairs (keys as ccrun names them, values unquoted), kept
  // for --print-config, the ssh fan-out and open_store (etcd_* keys).
  std::map<std::string, std::string> conf;
  // Parsed from `conf` (launcher/rdzv_conf.h: torchrun's keys and defaults).
  std::chrono::milliseconds read_timeout{60'000};      // one store call
  // Whether this agent hosts the store; unset = decide from the endpoint
  // (its host is one of this machine's addresses).
  std::optional<bool> is_host;
};

// How worker output is handled.
struct LogSpec {
  // --log-dir: per attempt and rank files under <log_dir>/<run_id>/; empty =
  // no files (a temporary directory still holds error files).
  std::string log_dir;
  // -r/--redirects and -t/--tee, per local rank: bit 1 = stdout, 2 = stderr.
  // A rank missing from the map uses `default_*`.
  int default_redirects = 0;
  std::map<int, int> redirects;
  int default_tee = 0;
  std::map<int, int> tee;
  // --local-ranks-filter: the local ranks whose lines reach the console;
  // empty = all.
  std::set<int> local_ranks_filter;
  // --log-line-prefix-template, else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
  // (torch 2.x's): the prefix of each worker line on the console, with
  // ${role_name}, ${rank} and ${local_rank} replaced; empty = none (a script
  // that parses its workers' output gets their lines unchanged).
  std::string line_prefix_template = "[${rank}]:";
  // --collapse-output: a line several ranks print identically within 0.5 s
  // is printed once, with their ranks (ccrun/console_collapse.h).
  bool collapse_output = false;
  // --duplicate-stdout-filters / --duplicate-stderr-filters (torch 2.x): the
  // tee'd lines (-t) holding any of these strings are also written, with
  // their prefix, to attempt_<n>/filtered_{stdout,stderr}.log; empty = none.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
};

// One host of a host list (--hostfile, `hosts:` in the job file), after
// --include / --exclude.
struct HostSpec {
  std::string name;   // as ssh reaches it: a name or an address
  // slots=N, or nproc_per_node when not given; 0 = counted on the host
  // (nproc_per_node auto, cpu or gpu, and no slots=).
  int slots = 1;
  // The slots (local device indices, 0..slots-1) this job uses, ascending:
  // all of them unless --include/--exclude named some. Workers on this host
  // = devices.size().
  std::vector<int> devices;
};

// The --preload word that asks the warm template to learn its imports from
// the workers of the attempt before.
inline constexpr const char* kPreloadAuto = "auto";

struct JobSpec {
  // Nodes.
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = 0;            // static rendezvous only
  int nproc_per_node = 1;       // resolved from N|auto|cpu|gpu
  // "auto", "cpu" or "gpu" as given (empty for a number): each host of a
  // host list without slots= resolves it itself (the launching machine may
  // have no GPU).
  std::string nproc_per_node_given;
  std::string master_addr = "127.0.0.1";  // static rendezvous
  int master_port = rendezvous::kDefaultMasterPort;
  std::string local_addr;       // --local-addr: this node's address
  bool standalone = false;      // single node, free port picked
  RendezvousSpec rdzv;

  // Restarts and monitoring.
  int max_restarts = 0;
  // --stop-without-progress: this many failed attempts in a row at the
  // same step with the same error stop the job with exit 4, "do not
  // requeue" (agent/round_decision.h); 0 = never, so that --max-restarts
  // means what torchrun's does. When 0, a job that spends its restarts
  // that way says so in its failure report.
  int stop_without_progress = 0;
  // --monitor-interval: accepted for torchrun compatibility and printed by
  // --print-config; nothing reads it, since the agent watches its workers
  // by pidfd events, not by polling.
  std::chrono::milliseconds monitor_interval{100};
  std::string role = "default";
  // Signals forwarded to workers when ccrun gets them, as numbers: the
  // launcher reads the names and refuses those it cannot handle.
  std::vector<int> signals_to_handle = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  // Time between SIGTERM and SIGKILL when stopping workers.
  std::chrono::milliseconds stop_grace{30'000};
  // No progress from any rank, or ranks disagreeing on a collective, for
  // this long is a hang (docs/hangs.md); 0 = never judged. 600 s: the NCCL
  // watchdog's default in torch 2.x, so the verdict comes before its error.
  std::chrono::milliseconds hang_timeout{600'000};
  // The health gate before each round (agent/health_gate.h): the user's
  // check (sh -c; "" = none) and the bound of each check.
  std::string health_check;
  std::chrono::milliseconds health_timeout{5'000};
  // The gate's loopback all_reduce among the node's nproc_per_node ranks
  // (ccrun-allreduce-check). Off by default: it costs tens of ms per round
  // (a process per rank, Gloo's connections), which a launch and a restart
  // would otherwise not pay (docs/health.md).
  bool health_allreduce = false;
  // How long a node that failed its gate, or whose workers failed first
  // kExcludeAfterFailures times in a row, stays out of an elastic job, the
  // first time; doubled for each repeat offence (ccrun/exclusion.h). Five
  // minutes: a bad GPU stays bad, and a node back too soon costs a restart.
  std::chrono::milliseconds exclusion_cooldown{300'000};

  // What to run: argv of each worker, already resolved (python3 added for a
  // .py program or -m, unless --no-python).
  std::vector<std::string> entrypoint;
  // The program as the user gave it (command line, PET_ variables or job
  // file), before this node chose an interpreter for it: what
  // --print-config writes, so that the file runs the same way on another
  // node, under that node's PYTHON_EXEC. Empty `name`: not known (a JobSpec
  // built from an entrypoint alone).
  struct Program {
    std::string name;  // a script, a command, or with `module` a module
    std::vector<std::string> args;
    bool module = false;     // -m/--module
    bool no_python = false;  // --no-python
    bool run_path = false;   // --run-path
  } program;
  // --warm-start: Python workers are forked from one template interpreter per
  // node that imported torch and `preload` (agent/warm_template.h).
  bool warm_start = false;
  // --preload: modules the template imports besides torch. The word `auto`
  // (kPreloadAuto) among them: after an attempt, the template also imports
  // the installed packages that attempt's workers imported (docs/startup.md).
  std::vector<std::string> preload;
  // --mpi: the agent serves PMI-1 to its workers (agent/mpi/pmi_server.h), so
  // that MPI programs of the MPICH family form one MPI_COMM_WORLD equal to
  // ccrun's world (docs/mpi.md). Workers start cold (not with --warm-start).
  bool mpi = false;
  // Extra worker environment (YAML `env:`), set after the torchrun set.
  std::map<std::string, std::string> env;

  LogSpec logs;
  // --event-log-handler (torch 2.x): where the agent's end-of-run event goes
  // (ccrun/event_log_handler.h).
  EventLogHandler event_log_handler = EventLogHandler::kNull;

  // --numa-binding (torch 2.x): bind local rank N to the CPUs near GPU N
  // (ccrun/numa_plan.h); kNone = no binding.
  NumaBinding numa_binding = NumaBinding::kNone;
  // --virtual-local-rank (torch 2.x): every worker gets LOCAL_RANK=0 and
  // CUDA_VISIBLE_DEVICES naming only its own GPU.
  bool virtual_local_rank = false;

  // How a host list starts one agent per host (launcher/fanout.h).
  struct Fanout {
    // The ssh command, as words: options go before the host.
    std::vector<std::string> ssh_command = {"ssh", "-o", "BatchMode=yes"};
    // Variables forwarded to every host (--export, exports:), beside the
    // default set (docs/cli.md).
    std::vector<std::string> exports;
    // The ccrun each host runs; empty = this ccrun's own absolute path.
    std::string remote_ccrun;
  } fanout;

  // Hidden flag --exit-on-stdin-eof, which only the ssh fan-out gives, sets
  // both of these. exit_on_stdin_eof: the agent stops the job (as on
  // SIGTERM) when its stdin reaches EOF, which is how a SIGKILLed launching
  // ccrun (its ssh gone) reaches remote nodes.
  bool exit_on_stdin_eof = false;
  // started_by_fanout: every node prints the same failure report, so each
  // marks its lines for the launching ccrun to show one node's
  // (launcher/fanout.h).
  bool started_by_fanout = false;
  // Under Slurm, where the agent also keeps its node's exclusions and looks
  // for them before its first join (ccrun/exclusion.h's file; a shared
  // state folder, as a home folder on a cluster is): a requeued or
  // relaunched job of the same id keeps a bad node out though its store
  // ended with the last run. Empty: the store only (a host-list launch's
  // launching ccrun keeps its own file).
  std::string exclusion_file;

  // The job's hosts, in node-rank order (the first is node 0 and, unless
  // --master-addr is given, the master); empty = no host list: this node
  // only, as given by the node flags.
  std::vector<HostSpec> hosts;
};

}  // namespace ccrun

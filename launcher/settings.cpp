// The launcher's settings table, each setting's value read from a JobSpec,
// and the typed conversions of raw values (see settings.h).
#include "settings.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <sstream>

#include "ccrun/error.h"
#include "ccrun/event_log_handler.h"
#include "ccrun/numa_binding.h"
#include "ccrun/rendezvous_backend.h"
#include "ccrun/signal_names.h"
#include "fanout.h"

namespace ccrun::launcher {
namespace {

using Y = YamlForm;
using S = const JobSpec&;

std::string ssh_command_text(S s) {
  std::string out;
  for (const auto& w : s.fanout.ssh_command) {
    bool plain = !w.empty() && w.find_first_of(" \t\n'\"\\$`") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? w : shell_quote(w));
  }
  return out;
}

std::string conf_text(S s) {
  std::vector<std::string> kv;
  for (const auto& [k, v] : s.rdzv.conf) kv.push_back(k + "=" + v);
  return join(kv, ",");
}

std::string ranks_text(S s) {
  std::vector<std::string> ranks;
  for (int r : s.logs.local_ranks_filter) ranks.push_back(std::to_string(r));
  return join(ranks, ",");
}

// The signals by name, as --signals-to-handle reads them.
std::string signal_names_text(const std::vector<int>& signals) {
  std::vector<std::string> names;
  for (int sig : signals) names.push_back(signal_name(sig));
  return join(names, ",");
}

std::string none(S) { return ""; }  // kept in the JobSpec as something else (hosts)

// --numa-binding's help: every mode of ccrun/numa_binding.h's table.
const std::string kNumaHelp = [] {
  std::string out = "Bind local rank N to the CPUs (and memory) near GPU N:";
  for (const auto& m : kNumaBindingNames) {
    out += std::string(" ") + std::string(m.name) + " = " + std::string(m.help) + ";";
  }
  out.back() = '.';
  return out;
}();
const std::string kEventHelp = "Where the agent's end-of-run event (torch's JSON) goes: " +
                               event_log_handler_names() + " (console: stderr)";

// The rendezvous help line names every backend (rendezvous_backend.h).
static_assert(rendezvous::kBackendNames.size() == 3, "name the new backend in --rdzv-backend's help");

// The words of a setting that takes a name of one of the name tables
// (rendezvous_backend.h, numa_binding.h, event_log_handler.h): their `name`s.
template <const auto& table>
constexpr auto kNamesOf = [] {
  std::array<std::string_view, std::size(table)> names{};
  for (size_t i = 0; i < names.size(); ++i) names[i] = table[i].name;
  return names;
}();

const Setting kSettings[] = {
    {"nnodes", "--nnodes", "N|MIN:MAX", "Nodes: N or MIN:MAX (elastic)", "Nodes",
     [](S s) {
       return s.min_nodes == s.max_nodes ? std::to_string(s.max_nodes)
                                         : std::to_string(s.min_nodes) + ":" + std::to_string(s.max_nodes);
     },
     Y::kScalar, true},
    {"nproc_per_node", "--nproc-per-node,--nproc_per_node", "N|auto|cpu|gpu",
     "Workers per node: N, auto, cpu or gpu", "Nodes",
     [](S s) {  // auto/cpu/gpu as written: each node (each host of a host list) counts its own
       return !s.nproc_per_node_given.empty() ? s.nproc_per_node_given : std::to_string(s.nproc_per_node);
     },
     Y::kScalar, true, nullptr, kNprocKeywords},
    {"node_rank", "--node-rank,--node_rank", "N", "This node's rank (static rendezvous)", "Nodes",
     [](S s) { return std::to_string(s.node_rank); }, Y::kScalar, true},
    {"master_addr", "--master-addr,--master_addr", "HOST",
     "Node 0's address (static rendezvous)", "Nodes",
     [](S s) { return s.master_addr; }, Y::kScalar, true},
    {"master_port", "--master-port,--master_port", "PORT",
     "Node 0's store port (static rendezvous)", "Nodes",
     [](S s) { return std::to_string(s.master_port); }, Y::kScalar, true},
    {"local_addr", "--local-addr,--local_addr", "ADDR",
     "This node's address as the others reach it", "Nodes",
     [](S s) { return s.local_addr; }, Y::kIfSet},
    {"standalone", "--standalone", "",
     "Single node: a local store on a free port, random id", "Nodes", nullptr},
    {"rdzv_backend", "--rdzv-backend,--rdzv_backend", "static|c10d|etcd",
     "static, c10d (dynamic, on a ccrun store) or etcd (dynamic, on etcd v3)", "Rendezvous",
     [](S s) { return std::string(rendezvous::backend_name(s.rdzv.backend)); }, Y::kRdzv, true, nullptr,
     kNamesOf<rendezvous::kBackendNames>},
    {"rdzv_endpoint", "--rdzv-endpoint,--rdzv_endpoint", "HOST[:PORT]",
     "Store of the c10d rendezvous: host[:port]",
     "Rendezvous", [](S s) { return s.rdzv.endpoint; }, Y::kRdzv, true},
    {"rdzv_id", "--rdzv-id,--rdzv_id", "ID", "Job id: agents with one id meet", "Rendezvous",
     [](S s) { return s.rdzv.id; }, Y::kRdzv, true},
    {"rdzv_conf", "--rdzv-conf,--rdzv_conf", "KEY=VALUE,...",
     "k=v,... : join_timeout, last_call_timeout, read_timeout, "
     "keep_alive_interval, keep_alive_max_attempt (seconds), is_host; torchrun's other keys "
     "are accepted (docs/cli.md), an unknown one is ignored with a warning",
     "Rendezvous", conf_text, Y::kRdzv, true},
    {"hostfile", "--hostfile", "FILE",
     "Hosts of the job, one `host [slots=N]` a line (DeepSpeed's format)",
     "Hosts", none, Y::kNone},
    {"include", "--include", "HOST[:SLOTS]@...",
     "Only these hosts/slots of the host list: host1@host2:0,1", "Hosts", none,
     Y::kNone},
    {"exclude", "--exclude", "HOST[:SLOTS]@...",
     "Leave out these hosts/slots of the host list: host1@host2:0,1", "Hosts", none,
     Y::kNone},
    {"ssh_command", "--ssh-command", "COMMAND",
     "How to reach a host of the host list (also CCRUN_SSH), called as ssh: options, host, command",
     "Hosts", ssh_command_text, Y::kNone},
    {"remote_ccrun", "--remote-ccrun", "PATH",
     "The ccrun each host runs (default: this ccrun's own path)", "Hosts",
     [](S s) { return s.fanout.remote_ccrun; }, Y::kNone},
    {"max_restarts", "--max-restarts,--max_restarts", "N",
     "Restarts of the worker group before failing",
     "Restarts", [](S s) { return std::to_string(s.max_restarts); }, Y::kScalar, true},
    {"stop_without_progress", "--stop-without-progress,--stop_without_progress", "N",
     "Stop the job with exit 4 (do not requeue) once N attempts in a row fail at the same step "
     "with the same error, restarts left or not; 0 = never: every --max-restarts restart is "
     "used, as in torchrun (docs/agent.md)",
     "Restarts", [](S s) { return std::to_string(s.stop_without_progress); }, Y::kScalar, true},
    {"monitor_interval", "--monitor-interval,--monitor_interval", "SECONDS",
     "Seconds (accepted for torchrun compatibility; ccrun watches workers by events)", "Restarts",
     [](S s) { return seconds_text(s.monitor_interval); }},
    {"stop_grace", "--stop-grace,--stop_grace,--shutdown-timeout,--shutdown_timeout", "SECONDS",
     "Seconds between SIGTERM and SIGKILL (torch 2.x's --shutdown-timeout; also "
     "PET_SHUTDOWN_TIMEOUT, TORCH_ELASTIC_SHUTDOWN_TIMEOUT)", "Restarts",
     [](S s) { return seconds_text(s.stop_grace); }, Y::kScalar, true, nullptr, {},
     kShutdownTimeoutEnv},
    {"hang_timeout", "--hang-timeout,--hang_timeout", "SECONDS",
     "Seconds with no progress from any rank (or ranks stuck apart in a collective) before the "
     "job is declared hung: every rank's stack is reported, then the job fails, or restarts "
     "while --max-restarts allows; 0 = never",
     "Restarts", [](S s) { return seconds_text(s.hang_timeout); }, Y::kScalar, true},
    {"health_check", "--health-check,--health_check", "COMMAND",
     "A command (sh -c) run before each round this node joins: a non-zero exit keeps the node "
     "out, its output is the reason (docs/health.md)", "Restarts",
     [](S s) { return s.health_check; }, Y::kIfSet, true},
    {"health_timeout", "--health-timeout,--health_timeout", "SECONDS",
     "Seconds each health check may take; one that runs longer is killed and fails",
     "Restarts", [](S s) { return seconds_text(s.health_timeout); }, Y::kScalar, true},
    {"health_allreduce", "--health-allreduce,--health_allreduce", "",
     "Add to the health gate a short all_reduce among this node's --nproc-per-node ranks "
     "over loopback (ccrun-allreduce-check; tens of ms per round; docs/health.md)",
     "Restarts", nullptr, Y::kScalar, true, [](S s) { return s.health_allreduce; }},
    {"exclusion_cooldown", "--exclusion-cooldown,--exclusion_cooldown", "SECONDS",
     "Seconds a node that fails its health gate, or whose workers fail first twice in a row, "
     "is kept out of an elastic job; doubled for each repeat offence (docs/health.md)",
     "Restarts", [](S s) { return seconds_text(s.exclusion_cooldown); }, Y::kScalar, true},
    {"signals_to_handle", "--signals-to-handle,--signals_to_handle", "SIGNAL,...",
     "Signals forwarded to the workers",
     "Restarts", [](S s) { return signal_names_text(s.signals_to_handle); }, Y::kList, true},
    {"role", "--role", "NAME",
     "Worker role name (ROLE_NAME); ROLE_RANK counts per role", "Program", [](S s) { return s.role; }, Y::kScalar,
     true},
    {"module", "-m,--module", "",
     "Run the program as a Python module (python -m)", "Program", nullptr,
     Y::kNone},
    {"start_method", "--start-method,--start_method", "spawn|fork|forkserver",
     "spawn, fork or forkserver: accepted for torchrun compatibility; ccrun always fork+execs", "Program",
     [](S) -> std::string { return "spawn"; }, Y::kNone, false, nullptr, kStartMethods},
    {"warm_start", "--warm-start,--warm_start", "",
     "Fork Python workers from one template interpreter per node that has imported torch (and "
     "--preload): starts and restarts skip the imports (docs/startup.md)", "Program", nullptr,
     Y::kScalar, true, [](S s) { return s.warm_start; }},
    {"preload", "--preload", "MODULE,...",
     "Modules the --warm-start template imports besides torch: mod1,mod2; `auto` adds, from "
     "the second attempt on, the installed packages the workers imported", "Program",
     [](S s) { return join(s.preload, ","); }, Y::kList, true},
    {"mpi", "--mpi", "",
     "Serve PMI-1 to the workers: MPI programs of the MPICH family (MPICH, Intel MPI, MVAPICH) "
     "form one MPI_COMM_WORLD of ccrun's ranks, without mpiexec (docs/mpi.md)", "Program",
     nullptr, Y::kScalar, true, [](S s) { return s.mpi; }},
    {"no_python", "--no-python,--no_python", "",
     "Execute the program directly, not with Python", "Program",
     nullptr, Y::kNone},
    {"run_path", "--run-path,--run_path", "",
     "Run the program with Python's runpy.run_path", "Program",
     nullptr, Y::kNone},
    {"log_dir", "--log-dir,--log_dir", "DIR",
     "Per attempt and local rank log files under DIR/<run_id>_<random>/", "Logs",
     [](S s) { return s.logs.log_dir; }, Y::kScalar, true},
    {"redirects", "-r,--redirects", "N|RANK:N,...",
     "Keep stdout(1)/stderr(2)/both(3) off the console: 3 or 0:1,1:2",
     "Logs", [](S s) { return std_streams_text(s.logs.default_redirects, s.logs.redirects); }, Y::kQuoted,
     true},
    {"tee", "-t,--tee", "N|RANK:N,...",
     "Show stdout(1)/stderr(2)/both(3) on the console and in the log files, -r or not", "Logs",
     [](S s) { return std_streams_text(s.logs.default_tee, s.logs.tee); }, Y::kQuoted, true},
    {"logs_specs", "--logs-specs,--logs_specs", "default",
     "torch 2.x's logs spec: only default (the logs are --log-dir, -r, -t)", "Logs",
     [](S) -> std::string { return "default"; }, Y::kNone},
    {"local_ranks_filter", "--local-ranks-filter,--local_ranks_filter", "RANK,...",
     "Local ranks shown on the console, e.g. 0,2", "Logs", ranks_text, Y::kList, true},
    {"collapse_output", "--collapse-output,--collapse_output", "",
     "Print a line that several ranks print identically within 0.5 s once, with their ranks "
     "([0-7]:...); tracebacks stay whole; the log files stay raw", "Logs", nullptr, Y::kScalar,
     true, [](S s) { return s.logs.collapse_output; }},
    {"log_line_prefix_template", "--log-line-prefix-template,--log_line_prefix_template", "TEMPLATE",
     "Prefix of each worker line on the console, with ${rank}, ${local_rank}, ${role_name}; "
     "\"\" for none", "Logs", [](S s) { return s.logs.line_prefix_template; }, Y::kQuoted, true,
     nullptr, {}, kLinePrefixEnv},
    {"duplicate_stdout_filters", "--duplicate-stdout-filters,--duplicate_stdout_filters", "STRING,...",
     "Tee'd (-t) stdout lines holding any of these strings (a,b; ,, is a comma) also go to "
     "attempt_<n>/filtered_stdout.log", "Logs",
     [](S s) { return join_escaped_commas(s.logs.duplicate_stdout_filters); }, Y::kIfSet, true},
    {"duplicate_stderr_filters", "--duplicate-stderr-filters,--duplicate_stderr_filters", "STRING,...",
     "The same for stderr, into attempt_<n>/filtered_stderr.log", "Logs",
     [](S s) { return join_escaped_commas(s.logs.duplicate_stderr_filters); }, Y::kIfSet, true},
    {"event_log_handler", "--event-log-handler,--event_log_handler", "NAME",
     kEventHelp.c_str(), "Logs",
     [](S s) { return std::string(event_log_handler_name(s.event_log_handler)); }, Y::kScalar, true,
     nullptr, kNamesOf<kEventLogHandlerNames>},
    {"numa_binding", "--numa-binding,--numa_binding", "MODE", kNumaHelp.c_str(), "Program",
     [](S s) { return std::string(numa_binding_name(s.numa_binding)); }, Y::kIfSet, true,
     nullptr, kNamesOf<kNumaBindingNames>},
    {"virtual_local_rank", "--virtual-local-rank,--virtual_local_rank", "",
     "Every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming only its own GPU", "Program",
     nullptr, Y::kScalar, true, [](S s) { return s.virtual_local_rank; }},
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string Raw::label() const {
  return yaml ? where + ": \"" + value + "\"" : where + " \"" + value + "\"";
}

std::span<const Setting> settings() { return kSettings; }

std::string default_text(const Setting& s) { return s.text ? s.text(JobSpec{}) : "false"; }

std::string_view value_name(const Setting& s) {
  return *s.value_name ? std::string_view(s.value_name) : std::string_view("VALUE");
}

const Setting* find_setting(const std::string& key) {
  for (const auto& s : kSettings) {
    if (key == s.key) return &s;
  }
  return nullptr;
}

std::string pet_name(const std::string& key) {
  std::string n = "PET_" + key;
  std::transform(n.begin(), n.end(), n.begin(), ::toupper);
  return n;
}

std::string pet_value(const Setting& s, const std::string& value) {
  return !s.text && value.empty() ? "true" : value;
}

std::string first_flag(const Setting& s) {
  std::vector<std::string> names = long_flags(s);
  return names.empty() ? s.flags : names.front();
}

std::string closest(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t dist = 4;
  for (const auto& k : known) {
    size_t d = edit_distance(key, k);
    if (d < dist) {
      dist = d;
      best = k;
    }
  }
  return best.empty() ? "" : "; did you mean \"" + best + "\"?";
}

namespace {

std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

}  // namespace

std::string closest_flag(const std::string& arg, const std::vector<std::string>& flags) {
  std::string name = arg.substr(0, arg.find('='));
  bool underscored = name.find('_') != std::string::npos;
  // Nearest first, then the user's style: twice the distance, plus one
  // for the other style; within a distance of 3.
  std::string best;
  size_t best_score = 8;
  for (const auto& f : flags) {
    bool other_style = (f.find('_') != std::string::npos) != underscored;
    size_t score = 2 * edit_distance(dashed(name), dashed(f)) + (other_style ? 1 : 0);
    if (score < best_score) {
      best_score = score;
      best = f;
    }
  }
  return best.empty() ? "" : "; did you mean \"" + best + "\"?";
}

std::vector<std::string> long_flags(const Setting& s) {
  std::vector<std::string> out;
  std::stringstream parts{std::string(s.flags)};
  for (std::string name; std::getline(parts, name, ',');) {
    if (name.rfind("--", 0) == 0) out.push_back(name);
  }
  return out;
}

[[noreturn]] void fail(const Raw& r, const std::string& why) {
  throw ConfigError(r.label() + ": " + why);
}

// `r`'s value read by `parse` (std::stoll, std::stod: leading spaces and a
// sign allowed); one that is not wholly a number, or out of range, fails
// saying `expected`.
template <class Parse>
auto parse_whole(const Raw& r, Parse parse, const std::string& expected) {
  try {
    size_t used = 0;
    auto v = parse(r.value, &used);
    if (used == r.value.size()) return v;
  } catch (const std::exception&) {
    // std::invalid_argument or std::out_of_range: the failure below says it
  }
  fail(r, expected);
}

int64_t to_int(const Raw& r, int64_t lo, int64_t hi, const char* what) {
  int64_t v = parse_whole(
      r, [](const std::string& s, size_t* used) { return std::stoll(s, used); },
      std::string("expected ") + what);
  if (v < lo || v > hi) {
    fail(r, std::string("must be between ") + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return v;
}

std::chrono::milliseconds to_seconds(const Raw& r) {
  double v = parse_whole(
      r, [](const std::string& s, size_t* used) { return std::stod(s, used); },
      "expected a number of seconds");
  if (!(v >= 0) || v > 1e7) fail(r, "expected a number of seconds, at least 0");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(v * 1000)));
}

bool to_bool(const Raw& r) {
  std::string v = r.value;
  std::transform(v.begin(), v.end(), v.begin(), ::tolower);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  fail(r, "expected true or false");
}

// "3" or "0:1,1:2" -> (default, per local rank).
void parse_std_streams(const Raw& r, int& def, std::map<int, int>& per_rank) {
  def = 0;
  per_rank.clear();
  if (r.value.find(':') == std::string::npos) {
    def = int(to_int(r, 0, 3, "0, 1, 2 or 3, or local_rank:value pairs"));
    return;
  }
  std::stringstream ss(r.value);
  for (std::string item; std::getline(ss, item, ',');) {
    auto colon = item.find(':');
    if (colon == std::string::npos) fail(r, "expected local_rank:value pairs such as 0:1,1:2");
    Raw rank{item.substr(0, colon), r.where, r.yaml}, val{item.substr(colon + 1), r.where, r.yaml};
    per_rank[int(to_int(rank, 0, 1 << 20, "a local rank"))] = int(to_int(val, 0, 3, "0 to 3"));
  }
}

std::string std_streams_text(int def, const std::map<int, int>& per_rank) {
  if (per_rank.empty()) return std::to_string(def);
  std::string out;
  for (auto [k, v] : per_rank) out += (out.empty() ? "" : ",") + std::to_string(k) + ":" + std::to_string(v);
  return out;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::vector<std::string> split_escaped_commas(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::string item;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else {
      out.push_back(item);
      item.clear();
    }
  }
  out.push_back(item);
  return out;
}

std::string join_escaped_commas(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    for (char c : items[i]) out += c == ',' ? std::string(",,") : std::string(1, c);
  }
  return out;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, double(ms.count()) / 1000.0);
  return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace ccrun::launcher

// Flags, PET_* variables and YAML job files into one validated JobSpec
// (see job_builder.h).
#include "job_builder.h"

#include <sched.h>
#include <signal.h>
#include <string.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "ccrun/error.h"

extern char** environ;

namespace ccrun::launcher {
namespace {

// One setting, as given: its text and where it came from.
struct Raw {
  std::string value;
  std::string where;  // "--nnodes" or "job.yaml:7: nnodes"
  bool yaml = false;
  std::string label() const {
    return yaml ? where + ": \"" + value + "\"" : where + " \"" + value + "\"";
  }
};

// Every setting: its key (YAML name), its flags, and its default.
struct Setting {
  const char* key;
  const char* flags;  // CLI11 names
  const char* help;
  const char* def;    // nullptr = a flag (switch)
  const char* group;
};

const Setting kSettings[] = {
    {"nnodes", "--nnodes", "Nodes: N or MIN:MAX (elastic)", "1:1", "Nodes"},
    {"nproc_per_node", "--nproc-per-node,--nproc_per_node",
     "Workers per node: N, auto, cpu or gpu", "1", "Nodes"},
    {"node_rank", "--node-rank,--node_rank", "This node's rank (static rendezvous)", "0", "Nodes"},
    {"master_addr", "--master-addr,--master_addr", "Node 0's address (static rendezvous)",
     "127.0.0.1", "Nodes"},
    {"master_port", "--master-port,--master_port", "Node 0's store port (static rendezvous)",
     "29500", "Nodes"},
    {"local_addr", "--local-addr,--local_addr", "This node's address as the others reach it",
     "", "Nodes"},
    {"standalone", "--standalone", "Single node: a local store on a free port, random id",
     nullptr, "Nodes"},
    {"rdzv_backend", "--rdzv-backend,--rdzv_backend", "static or c10d (dynamic)", "static",
     "Rendezvous"},
    {"rdzv_endpoint", "--rdzv-endpoint,--rdzv_endpoint", "Store of the c10d rendezvous: host[:port]",
     "", "Rendezvous"},
    {"rdzv_id", "--rdzv-id,--rdzv_id", "Job id: agents with one id meet", "none", "Rendezvous"},
    {"rdzv_conf", "--rdzv-conf,--rdzv_conf",
     "k=v,... : join_timeout, last_call_timeout, close_timeout, read_timeout, "
     "keep_alive_interval, keep_alive_max_attempt (seconds), is_host",
     "", "Rendezvous"},
    {"max_restarts", "--max-restarts,--max_restarts", "Restarts of the worker group before failing",
     "0", "Restarts"},
    {"monitor_interval", "--monitor-interval,--monitor_interval",
     "Seconds (accepted for torchrun compatibility; ccrun watches workers by events)", "0.1",
     "Restarts"},
    {"stop_grace", "--stop-grace,--stop_grace", "Seconds between SIGTERM and SIGKILL", "30",
     "Restarts"},
    {"signals_to_handle", "--signals-to-handle,--signals_to_handle",
     "Signals forwarded to the workers", "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "Restarts"},
    {"role", "--role", "Worker role name (ROLE_NAME)", "default", "Program"},
    {"module", "-m,--module", "Run the program as a Python module (python -m)", nullptr, "Program"},
    {"no_python", "--no-python,--no_python", "Execute the program directly, not with Python",
     nullptr, "Program"},
    {"run_path", "--run-path,--run_path", "Run the program with Python's runpy.run_path",
     nullptr, "Program"},
    {"log_dir", "--log-dir,--log_dir", "Per attempt and rank log files under DIR/<run_id>/", "",
     "Logs"},
    {"redirects", "-r,--redirects", "Keep stdout(1)/stderr(2)/both(3) off the console: 3 or 0:1,1:2",
     "0", "Logs"},
    {"tee", "-t,--tee", "Also write stdout(1)/stderr(2)/both(3) to the log files", "0", "Logs"},
    {"local_ranks_filter", "--local-ranks-filter,--local_ranks_filter",
     "Local ranks shown on the console, e.g. 0,2", "", "Logs"},
};

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

std::string first_flag(const Setting& s) {
  std::string f = s.flags;
  auto parts = std::stringstream(f);
  std::string name;
  while (std::getline(parts, name, ',')) {
    if (name.rfind("--", 0) == 0) return name;
  }
  return f;
}

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

[[noreturn]] void fail(const Raw& r, const std::string& why) {
  throw ConfigError(r.label() + ": " + why);
}

int64_t to_int(const Raw& r, int64_t lo, int64_t hi, const char* what) {
  int64_t v = 0;
  try {
    size_t used = 0;
    v = std::stoll(r.value, &used);
    if (used != r.value.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    fail(r, std::string("expected ") + what);
  }
  if (v < lo || v > hi) {
    fail(r, std::string("must be between ") + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return v;
}

std::chrono::milliseconds to_seconds(const Raw& r) {
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(r.value, &used);
    if (used != r.value.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    fail(r, "expected a number of seconds");
  }
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

int count_gpus(const Environment& env) {
  if (auto v = env.get("CUDA_VISIBLE_DEVICES")) {
    if (v->empty() || *v == "-1") return 0;
    return int(std::count(v->begin(), v->end(), ',')) + 1;
  }
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && name.size() > 6 &&
        std::all_of(name.begin() + 6, name.end(), ::isdigit)) {
      ++n;
    }
  }
  return n;
}

int count_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return 1;
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

// Reads the YAML job file into raw settings, extra env, program and args.
struct YamlJob {
  std::map<std::string, Raw> raws;
  std::map<std::string, std::string> env;
  std::optional<std::string> program;
  std::vector<std::string> args;
  std::map<std::string, Raw> rdzv_conf;
};

std::string scalar_text(const YAML::Node& n, const std::string& where) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsNull()) return "";
  if (n.IsSequence()) {  // lists of ranks or signals are given comma-separated on flags
    std::string out;
    for (const auto& item : n) {
      if (!item.IsScalar()) throw ConfigError(where + ": expected a list of plain values");
      out += (out.empty() ? "" : ",") + item.Scalar();
    }
    return out;
  }
  throw ConfigError(where + ": expected a plain value, not a mapping");
}

YamlJob load_yaml(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError("--config \"" + path + "\": cannot read the file; check the path");
  } catch (const YAML::ParserException& e) {
    throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
  }
  YamlJob job;
  if (root.IsNull()) return job;
  if (!root.IsMap()) throw ConfigError(path + ": the job file must be a mapping of keys");
  std::vector<std::string> known;
  for (const auto& s : kSettings) {
    if (std::string(s.key).rfind("rdzv_", 0) != 0) known.push_back(s.key);
  }
  for (const char* k : {"rdzv", "env", "program", "args"}) known.push_back(k);
  auto where = [&](const YAML::Node& n, const std::string& key) {
    return path + ":" + std::to_string(n.Mark().line + 1) + ": " + key;
  };
  for (const auto& kv : root) {
    std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    std::string at = where(kv.first, key);
    if (key == "rdzv") {
      if (!v.IsMap()) throw ConfigError(at + ": expected a mapping (backend, endpoint, id, conf)");
      for (const auto& r : v) {
        std::string sub = r.first.Scalar();
        std::string sub_at = where(r.first, "rdzv." + sub);
        if (sub == "conf") {
          if (!r.second.IsMap()) throw ConfigError(sub_at + ": expected a mapping of settings");
          for (const auto& c : r.second) {
            std::string ck = c.first.Scalar();
            job.rdzv_conf[ck] = Raw{scalar_text(c.second, where(c.first, "rdzv.conf." + ck)),
                                    where(c.first, "rdzv.conf." + ck), true};
          }
        } else if (sub == "backend" || sub == "endpoint" || sub == "id") {
          job.raws["rdzv_" + sub] = Raw{scalar_text(r.second, sub_at), sub_at, true};
        } else {
          throw ConfigError(sub_at + ": unknown key" +
                            closest(sub, {"backend", "endpoint", "id", "conf"}) +
                            " (known: backend, endpoint, id, conf)");
        }
      }
    } else if (key == "env") {
      if (!v.IsMap()) throw ConfigError(at + ": expected a mapping of NAME: value");
      for (const auto& e : v) job.env[e.first.Scalar()] = scalar_text(e.second, where(e.first, "env"));
    } else if (key == "program") {
      if (!v.IsScalar()) throw ConfigError(at + ": expected a path or module name");
      job.program = v.Scalar();
    } else if (key == "args") {
      if (!v.IsSequence()) throw ConfigError(at + ": expected a list of arguments");
      for (const auto& a : v) {
        if (!a.IsScalar()) throw ConfigError(where(a, "args") + ": expected a plain argument");
        job.args.push_back(a.Scalar());
      }
    } else if (find_setting(key) && key.rfind("rdzv_", 0) != 0) {
      job.raws[key] = Raw{scalar_text(v, at), at, true};
    } else {
      throw ConfigError(at + ": unknown key" + closest(key, known));
    }
  }
  return job;
}

}  // namespace

Environment Environment::from_process() {
  Environment e;
  for (char** p = environ; *p; ++p) {
    std::string s = *p;
    auto eq = s.find('=');
    if (eq != std::string::npos) e.vars[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return e;
}

std::optional<std::string> Environment::get(const std::string& name) const {
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

Command parse_command_line(const std::vector<std::string>& args, const Environment& env) {
  CLI::App app{"ccrun: launch a distributed training job, torchrun-compatible.\n"
               "Every flag can also be set by PET_<FLAG> (e.g. PET_NPROC_PER_NODE=4)\n"
               "or by a YAML job file (--config); flags win over variables, variables\n"
               "over the file.",
               "ccrun"};
  app.footer(
      "Examples:\n"
      "  ccrun --nproc-per-node 4 train.py --lr 0.1\n"
      "  ccrun --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 8 train.py\n"
      "  ccrun --nnodes 1:4 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 \\\n"
      "        --rdzv-id job7 --max-restarts 3 --no-python ./trainer --steps 1000\n"
      "  ccrun --config configs/single_node.yaml");
  app.prefix_command();  // everything from the program on belongs to it
  app.get_formatter()->column_width(44);
  std::map<std::string, std::string> values;
  std::map<std::string, bool> switches;
  std::map<std::string, CLI::Option*> opts;
  for (const auto& s : kSettings) {
    CLI::Option* o;
    if (s.def) {
      o = app.add_option(s.flags, values[s.key], s.help)->default_str(s.def);
    } else {
      o = app.add_flag(s.flags, switches[s.key], s.help);
    }
    o->group(s.group);
    opts[s.key] = o;
  }
  std::string config;
  bool print_config = false, version = false;
  app.add_option("--config", config, "YAML job file (see configs/)")->group("Job file");
  app.add_flag("--print-config", print_config, "Print the effective job as YAML and exit")
      ->group("Job file");
  app.add_flag("--version", version, "Print ccrun's version and exit");

  // PET_* variables count as flags given (CLI11's envname reads only the
  // process environment; ours is explicit for testing).
  std::vector<std::string> argv_rev(args.rbegin(), args.rend());
  Command cmd;
  try {
    app.parse(argv_rev);
  } catch (const CLI::CallForHelp&) {
    cmd.message = app.help();
    return cmd;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string(e.what()) + "; see ccrun --help");
  }
  if (version) {
    cmd.message = std::string("ccrun ") + CCRUN_VERSION + "\n";
    return cmd;
  }

  YamlJob job;
  if (!config.empty()) job = load_yaml(config);

  // Resolve each setting: flag > PET_ variable > YAML > default.
  auto raw = [&](const std::string& key) -> Raw {
    const Setting& s = *find_setting(key);
    if (opts[key]->count() > 0) {
      return Raw{s.def ? values[key] : "true", first_flag(s), false};
    }
    if (auto v = env.get(pet_name(key))) return Raw{*v, pet_name(key), false};
    if (auto it = job.raws.find(key); it != job.raws.end()) return it->second;
    return Raw{s.def ? s.def : "false", first_flag(s) + " (default)", false};
  };

  JobSpec& spec = cmd.spec;
  cmd.print_config = print_config;

  // Nodes.
  Raw nnodes = raw("nnodes");
  if (auto colon = nnodes.value.find(':'); colon != std::string::npos) {
    Raw lo{nnodes.value.substr(0, colon), nnodes.where, nnodes.yaml};
    Raw hi{nnodes.value.substr(colon + 1), nnodes.where, nnodes.yaml};
    spec.min_nodes = int(to_int(lo, 1, 1 << 20, "MIN:MAX with positive integers"));
    spec.max_nodes = int(to_int(hi, 1, 1 << 20, "MIN:MAX with positive integers"));
    if (spec.min_nodes > spec.max_nodes) fail(nnodes, "min is larger than max");
  } else {
    spec.min_nodes = spec.max_nodes = int(to_int(nnodes, 1, 1 << 20, "a positive node count"));
  }
  Raw nproc = raw("nproc_per_node");
  if (nproc.value == "cpu") {
    spec.nproc_per_node = count_cpus();
  } else if (nproc.value == "gpu" || nproc.value == "auto") {
    int gpus = count_gpus(env);
    if (nproc.value == "gpu" && gpus == 0) {
      fail(nproc, "no CUDA device is visible on this machine; give a number or use cpu");
    }
    spec.nproc_per_node = gpus > 0 ? gpus : count_cpus();
  } else {
    spec.nproc_per_node = int(to_int(nproc, 1, 1 << 16, "a positive number, auto, cpu or gpu"));
  }
  spec.node_rank = int(to_int(raw("node_rank"), 0, 1 << 20, "a node rank"));
  spec.master_addr = raw("master_addr").value;
  spec.master_port = int(to_int(raw("master_port"), 1, 65535, "a TCP port"));
  spec.local_addr = raw("local_addr").value;
  spec.standalone = to_bool(raw("standalone"));

  // Rendezvous.
  Raw backend = raw("rdzv_backend");
  if (backend.value != "static" && backend.value != "c10d") {
    fail(backend, "unknown backend; use static or c10d");
  }
  spec.rdzv.backend = backend.value;
  spec.rdzv.endpoint = raw("rdzv_endpoint").value;
  spec.rdzv.id = raw("rdzv_id").value;
  std::map<std::string, Raw> conf = job.rdzv_conf;
  Raw conf_raw = raw("rdzv_conf");
  if (!conf_raw.value.empty() && !conf_raw.yaml) {
    std::stringstream ss(conf_raw.value);
    for (std::string item; std::getline(ss, item, ',');) {
      auto eq = item.find('=');
      if (eq == std::string::npos) fail(conf_raw, "expected key=value pairs separated by commas");
      conf[item.substr(0, eq)] = Raw{item.substr(eq + 1), conf_raw.where + " " + item.substr(0, eq), false};
    }
  }
  const std::vector<std::string> conf_keys = {"join_timeout", "last_call_timeout", "close_timeout",
                                              "read_timeout", "keep_alive_interval",
                                              "keep_alive_max_attempt", "is_host"};
  for (const auto& [k, r] : conf) {
    spec.rdzv.conf[k] = r.value;
    if (k == "join_timeout") spec.rdzv.join_timeout = to_seconds(r);
    else if (k == "last_call_timeout") spec.rdzv.last_call_timeout = to_seconds(r);
    else if (k == "close_timeout") spec.rdzv.close_timeout = to_seconds(r);
    else if (k == "read_timeout") spec.rdzv.read_timeout = to_seconds(r);
    else if (k == "keep_alive_interval") spec.rdzv.keep_alive_interval = to_seconds(r);
    else if (k == "keep_alive_max_attempt") spec.rdzv.keep_alive_max_attempt = int(to_int(r, 1, 1000, "a count"));
    else if (k == "is_host") spec.rdzv.is_host = to_bool(r);
    else {
      std::string known;
      for (const auto& c : conf_keys) known += (known.empty() ? "" : ", ") + c;
      throw ConfigError(r.where + ": unknown rendezvous setting \"" + k + "\"" +
                        closest(k, conf_keys) + " (known: " + known + ")");
    }
  }
  if (spec.rdzv.keep_alive_interval.count() == 0) {
    throw ConfigError("rendezvous setting keep_alive_interval must be more than 0");
  }
  if (spec.standalone) {
    spec.rdzv.backend = "c10d";
    spec.rdzv.endpoint = "127.0.0.1:0";
    if (spec.min_nodes != 1 || spec.max_nodes != 1) {
      fail(nnodes, "--standalone runs one node; drop --nnodes or --standalone");
    }
  } else if (spec.rdzv.backend == "static") {
    if (spec.min_nodes != spec.max_nodes) {
      fail(nnodes, "the static rendezvous needs a fixed node count; use --rdzv-backend c10d "
                   "with --rdzv-endpoint for an elastic job");
    }
    if (spec.node_rank >= spec.max_nodes) {
      Raw nr = raw("node_rank");
      fail(nr, "must be less than the number of nodes (" + std::to_string(spec.max_nodes) + ")");
    }
  } else if (spec.rdzv.endpoint.empty()) {
    fail(backend, "needs --rdzv-endpoint host[:port] (the store every node reaches)");
  }

  // Restarts and signals.
  spec.max_restarts = int(to_int(raw("max_restarts"), 0, 1 << 20, "a number of restarts, 0 or more"));
  spec.monitor_interval = to_seconds(raw("monitor_interval"));
  spec.stop_grace = to_seconds(raw("stop_grace"));
  Raw signals = raw("signals_to_handle");
  spec.signals_to_handle.clear();
  std::stringstream ss(signals.value);
  for (std::string sig; std::getline(ss, sig, ',');) {
    sig.erase(std::remove(sig.begin(), sig.end(), ' '), sig.end());
    if (sig.empty()) continue;
    bool known = false;
    for (int s = 1; s < NSIG && !known; ++s) {
      const char* a = sigabbrev_np(s);
      known = a && sig == std::string("SIG") + a && s != SIGKILL && s != SIGSTOP;
    }
    if (!known) fail(signals, "\"" + sig + "\" is not a signal ccrun can handle (e.g. SIGTERM)");
    spec.signals_to_handle.push_back(sig);
  }
  spec.role = raw("role").value;

  // Logs.
  spec.logs.log_dir = raw("log_dir").value;
  parse_std_streams(raw("redirects"), spec.logs.default_redirects, spec.logs.redirects);
  parse_std_streams(raw("tee"), spec.logs.default_tee, spec.logs.tee);
  Raw filter = raw("local_ranks_filter");
  std::stringstream fs_(filter.value);
  for (std::string r; std::getline(fs_, r, ',');) {
    if (r.empty()) continue;
    spec.logs.local_ranks_filter.insert(int(to_int(Raw{r, filter.where, filter.yaml}, 0, 1 << 20, "local ranks such as 0,2")));
  }

  // Program.
  spec.env = job.env;
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest[0] == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-') {
    std::vector<std::string> flags;
    for (const auto& s : kSettings) flags.push_back(first_flag(s));
    for (const char* f : {"--config", "--print-config", "--version", "--help"}) flags.push_back(f);
    throw ConfigError("unknown flag \"" + rest[0] + "\"" + closest(rest[0], flags) +
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
  if (program.empty()) {
    if (print_config) return cmd;
    throw ConfigError("no program to run; give it after the flags, e.g. ccrun --nproc-per-node 2 "
                      "train.py (or `program:` in the job file)");
  }
  std::string python = env.get("PYTHON_EXEC").value_or("python3");
  bool is_py = program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0;
  if (module) {
    spec.entrypoint = {python, "-u", "-m", program};
  } else if (run_path) {
    spec.entrypoint = {python, "-u", "-c",
                       "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], "
                       "run_name='__main__')",
                       program};
  } else if (is_py && !no_python) {
    spec.entrypoint = {python, "-u", program};
  } else {
    spec.entrypoint = {program};
  }
  spec.entrypoint.insert(spec.entrypoint.end(), prog_args.begin(), prog_args.end());
  return cmd;
}

std::string to_yaml(const JobSpec& s) {
  YAML::Emitter out;
  auto secs = [](std::chrono::milliseconds ms) { return ms.count() / 1000.0; };
  out << YAML::BeginMap;
  out << YAML::Key << "nnodes" << YAML::Value
      << (s.min_nodes == s.max_nodes ? std::to_string(s.min_nodes)
                                     : std::to_string(s.min_nodes) + ":" + std::to_string(s.max_nodes));
  out << YAML::Key << "nproc_per_node" << YAML::Value << s.nproc_per_node;
  out << YAML::Key << "node_rank" << YAML::Value << s.node_rank;
  out << YAML::Key << "master_addr" << YAML::Value << s.master_addr;
  out << YAML::Key << "master_port" << YAML::Value << s.master_port;
  if (!s.local_addr.empty()) out << YAML::Key << "local_addr" << YAML::Value << s.local_addr;
  out << YAML::Key << "standalone" << YAML::Value << s.standalone;
  out << YAML::Key << "rdzv" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "backend" << YAML::Value << s.rdzv.backend;
  out << YAML::Key << "endpoint" << YAML::Value << s.rdzv.endpoint;
  out << YAML::Key << "id" << YAML::Value << s.rdzv.id;
  out << YAML::Key << "conf" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "join_timeout" << YAML::Value << secs(s.rdzv.join_timeout);
  out << YAML::Key << "last_call_timeout" << YAML::Value << secs(s.rdzv.last_call_timeout);
  out << YAML::Key << "close_timeout" << YAML::Value << secs(s.rdzv.close_timeout);
  out << YAML::Key << "read_timeout" << YAML::Value << secs(s.rdzv.read_timeout);
  out << YAML::Key << "keep_alive_interval" << YAML::Value << secs(s.rdzv.keep_alive_interval);
  out << YAML::Key << "keep_alive_max_attempt" << YAML::Value << s.rdzv.keep_alive_max_attempt;
  if (s.rdzv.is_host) out << YAML::Key << "is_host" << YAML::Value << *s.rdzv.is_host;
  out << YAML::EndMap << YAML::EndMap;
  out << YAML::Key << "max_restarts" << YAML::Value << s.max_restarts;
  out << YAML::Key << "monitor_interval" << YAML::Value << secs(s.monitor_interval);
  out << YAML::Key << "stop_grace" << YAML::Value << secs(s.stop_grace);
  out << YAML::Key << "signals_to_handle" << YAML::Value << YAML::Flow << s.signals_to_handle;
  out << YAML::Key << "role" << YAML::Value << s.role;
  out << YAML::Key << "log_dir" << YAML::Value << s.logs.log_dir;
  auto streams = [](int def, const std::map<int, int>& m) {
    if (m.empty()) return std::to_string(def);
    std::string out;
    for (auto [k, v] : m) out += (out.empty() ? "" : ",") + std::to_string(k) + ":" + std::to_string(v);
    return out;
  };
  out << YAML::Key << "redirects" << YAML::Value << streams(s.logs.default_redirects, s.logs.redirects);
  out << YAML::Key << "tee" << YAML::Value << streams(s.logs.default_tee, s.logs.tee);
  std::vector<int> filter(s.logs.local_ranks_filter.begin(), s.logs.local_ranks_filter.end());
  out << YAML::Key << "local_ranks_filter" << YAML::Value << YAML::Flow << filter;
  if (!s.env.empty()) {
    out << YAML::Key << "env" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : s.env) out << YAML::Key << k << YAML::Value << v;
    out << YAML::EndMap;
  }
  if (!s.entrypoint.empty()) {
    // The resolved command: no_python makes it load back unchanged.
    out << YAML::Key << "no_python" << YAML::Value << true;
    out << YAML::Key << "program" << YAML::Value << s.entrypoint[0];
    std::vector<std::string> args(s.entrypoint.begin() + 1, s.entrypoint.end());
    out << YAML::Key << "args" << YAML::Value << YAML::Flow << args;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace ccrun::launcher

// One agent per host over ssh (see fanout.h).
#include "fanout.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <utility>  // before Asio: its awaitable.hpp needs std::exchange
#include <boost/asio.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "ccrun/error.h"
#include "ccrun/signal_names.h"
#include "ccrun/agent.h"
#include "ccrun/console_collapse.h"
#include "ccrun/console_frame.h"
#include "ccrun/exclusion.h"
#include "ccrun/finished_run.h"
#include "ccrun/store_address.h"
#include "exclusion_file.h"
#include "log_mux.h"
#include "process.h"
#include "settings.h"
#include "signal_stream.h"

namespace ccrun::launcher {
namespace asio = boost::asio;

namespace {

// Variables forwarded to every host when set here (docs/cli.md).
const char* const kForwardedNames[] = {"PYTHONPATH",       "PYTHON_EXEC",     "VIRTUAL_ENV",
                                       "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "CCRUN_LOG_LEVEL", "LOGLEVEL",
                                       store::kStoreTokenFileEnv,
                                       "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"};
const char* const kForwardedPrefixes[] = {"NCCL_", "TORCH_", "UCX_"};

// How long a non-elastic job waits, after one node failed, for the other
// agents to end on their own (they see the failure through the store)
// before ccrun stops them.
constexpr std::chrono::seconds kPeerGrace{5};
// After a stop signal, how long past --stop-grace a node may take to end
// before its ssh is killed.
constexpr std::chrono::milliseconds kKillSlack{5000};

// `name` resolved through PATH as execvp would, or "" when not found.
std::string find_program(const std::string& name, const Environment& env) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  std::string path = env.get("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (access(full.c_str(), X_OK) == 0) return full;
    start = end + 1;
  }
  return "";
}

// The ranks whose lines reach this console, for --collapse-output: each
// host's workers, or as many of them as --local-ranks-filter shows. A host
// that counts its own workers (slots 0) counts as many as could be: the
// collapse then waits out its window instead of printing a line early.
size_t shown_ranks(const JobSpec& spec) {
  size_t total = 0;
  for (const auto& h : spec.hosts) {
    if (h.slots == 0) return std::numeric_limits<size_t>::max();
    total += agent::shown_local_ranks(h.devices.size(), spec.logs.local_ranks_filter);
  }
  return total;
}

// One host's ssh and what it printed.
struct Node {
  size_t index = 0;
  std::string host;
  std::unique_ptr<ProcessWatch> watch;  // its ssh; watch->reaped(): it exited
  int stdin_fd = -1;  // never written; its close is the remote agent's EOF
  int err_stream = -1;
  int open_pipes = 2;
  bool finished = false;
  int status = 0;  // exit status, or 128+N for signal N
  std::unique_ptr<asio::steady_timer> drain;
};

class Fanout {
 public:
  Fanout(const JobSpec& spec, const Environment& env)
      : spec_(spec), env_(env), signals_(io_, {SIGINT, SIGTERM, SIGHUP}), mux_(io_, LogMux::Reading::kEveryWake), peer_timer_(io_), kill_timer_(io_) {}

  int run() {
    prepare();
    ::signal(SIGPIPE, SIG_IGN);
    arm_signals();
    spawner_ = std::make_unique<Spawner>();  // after our dispositions are set
    std::string hosts;
    for (const auto& h : spec_.hosts) hosts += " " + h.name;
    std::fprintf(stderr, "ccrun: starting %zu node(s) over `%s`:%s\n", spec_.hosts.size(),
                 join(spec_.fanout.ssh_command, " ").c_str(), hosts.c_str());
    open_collapsers();
    for (size_t i = 0; i < spec_.hosts.size(); ++i) start(i);
    io_.run();
    if (signalled_) return 128 + signalled_;
    // Nodes that came after the id's run had ended ran nothing (on_failure).
    // With a node of this launch that exited 0, the launch's job ran without
    // them; with none, the whole launch came too late.
    bool one_succeeded = std::any_of(nodes_.begin(), nodes_.end(),
                                     [](const auto& n) { return n->finished && n->status == 0; });
    if (exit_code_ == 0 && came_after_the_run_ && !one_succeeded) return kExitAlreadyRan;
    return exit_code_;
  }

 private:
  void prepare() {
    std::error_code ec;
    cwd_ = std::filesystem::current_path(ec).string();
    if (ec) throw ConfigError("cannot read the current directory: " + ec.message());
    ccrun_ = spec_.fanout.remote_ccrun;
    if (ccrun_.empty()) {
      ccrun_ = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      if (ec) throw ConfigError("cannot find ccrun's own path (/proc/self/exe): " + ec.message() +
                                "; give --remote-ccrun PATH");
    }
    vars_ = forwarded_env(spec_, env_);
    ssh_ = spec_.fanout.ssh_command;
    std::string found = find_program(ssh_.at(0), env_);
    if (found.empty()) {
      throw ConfigError("--ssh-command: \"" + ssh_[0] +
                        "\" is not an executable in PATH; install openssh-client or give "
                        "--ssh-command (or CCRUN_SSH)");
    }
    ssh_[0] = found;
  }

  void arm_signals() {
    signals_.async_wait([this](int sig) {
      on_signal(sig);
      arm_signals();
    });
  }

  void on_signal(int sig) {
    if (signalled_) {
      std::fprintf(stderr, "ccrun: received %s again; killing every node's ssh\n", signal_name(sig).c_str());
      signal_all(SIGKILL);
      return;
    }
    signalled_ = sig;
    std::fprintf(stderr, "ccrun: received %s; stopping every node (again to kill at once)\n",
                 signal_name(sig).c_str());
    // Both ways to every node: the signal to its ssh (a local agent gets it
    // itself), and EOF on the remote agent's stdin (what a real ssh, which
    // forwards no signal, can carry).
    for (auto& n : nodes_) close_stdin(*n);
    signal_all(sig);
    arm_kill_timer();
  }

  // An agent that has not ended when its own SIGKILL deadline passed is
  // stuck: kill its ssh.
  void arm_kill_timer() {
    kill_timer_.expires_after(spec_.stop_grace + kKillSlack);
    kill_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      std::fprintf(stderr, "ccrun: node(s) still running %llds after they were told to stop; killing their ssh\n",
                   static_cast<long long>((spec_.stop_grace + kKillSlack).count() / 1000));
      signal_all(SIGKILL);
    });
  }

  static void close_stdin(Node& n) {
    if (n.stdin_fd >= 0) ::close(n.stdin_fd);
    n.stdin_fd = -1;
  }

  void signal_all(int sig) {
    for (auto& n : nodes_) {
      if (n->watch && !n->watch->reaped()) ::kill(n->watch->pid(), sig);
    }
  }

  void start(size_t i) {
    auto node = std::make_unique<Node>();
    node->index = i;
    node->host = spec_.hosts[i].name;
    std::vector<std::string> argv = ssh_;
    argv.push_back(node->host);
    argv.push_back(remote_command(spec_, i, cwd_, vars_, ccrun_));

    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      throw Error(std::string("cannot make pipes for ssh: ") + strerror(errno));
    }
    // Its own process group: our forwarding, not the terminal's, reaches
    // it; it dies with this ccrun (then the remote agent's stdin closes).
    SpawnOptions o;
    o.stdin_fd = in[0], o.stdout_fd = out[1], o.stderr_fd = err[1];
    o.death_signal = SIGTERM;
    pid_t pid = spawner_->spawn(ProcessImage(argv, nullptr), o);
    if (pid < 0) throw Error(std::string("cannot start ssh: clone: ") + strerror(errno));
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    node->stdin_fd = in[1];
    node->watch = std::make_unique<ProcessWatch>(io_, pid);
    Node* n = node.get();
    std::string prefix = node->host + ": ";
    StreamOptions out_options;
    out_options.prefix = prefix;
    out_options.console_filter = [this](std::string& line) { return !collapse(1, line); };
    mux_.add(out[0], out_options, [this, n] { pipe_closed(*n); });
    StreamOptions err_options;
    err_options.prefix = prefix;
    err_options.console_fd = 2;
    err_options.console_filter = [this, n](std::string& line) {
      return !collapse(2, line) && report_line(*n, line);
    };
    n->err_stream = mux_.add(err[0], err_options, [this, n] { pipe_closed(*n); });
    n->watch->async_wait([this, n](ExitStatus s) { on_exit(*n, s); });
    nodes_.push_back(std::move(node));
  }

  // Every node prints the same failure report (marked by its agent): the
  // first node to start one is shown, the others' copies are not. A node's
  // exclusion (its own marked line) is kept for the next launch, unshown.
  bool report_line(Node& n, std::string& line) {
    std::string_view excluded = agent::kExclusionMarker;
    if (line.compare(0, excluded.size(), excluded) == 0) {
      keep_exclusion(n, line.substr(excluded.size()));
      return false;
    }
    std::string_view marker = agent::kReportMarker;
    if (line.compare(0, marker.size(), marker) != 0) return true;
    if (!report_node_) {
      report_node_ = &n;
      flush_collapsed();  // the workers' last lines before the report
    }
    line.erase(0, marker.size());
    return report_node_ == &n;
  }

  // --collapse-output: the agents frame their workers' lines instead of
  // collapsing them (ccrun/console_frame.h), so that identical lines of
  // every node's ranks are printed once here.
  void open_collapsers() {
    if (!spec_.logs.collapse_output) return;
    for (int fd : {1, 2}) {
      collapse_[fd - 1] = std::make_unique<agent::ConsoleCollapser>(
          io_, agent::CollapseOptions{fd, shown_ranks(spec_), spec_.logs.line_prefix_template, spec_.role});
    }
  }

  // Whether `line` of a node's stream `fd` was a framed worker line, now
  // the collapse's.
  bool collapse(int fd, const std::string& line) {
    if (!collapse_[fd - 1]) return false;
    auto unit = agent::parse_console_frame(line);
    if (!unit) return false;
    collapse_[fd - 1]->submit(unit->rank, unit->local_rank, unit->text);
    return true;
  }

  void flush_collapsed() {
    for (auto& c : collapse_) {
      if (c) c->flush_all();
    }
  }

  // Under the host's name in the host list (what the next launch reads),
  // in the launching host's file of the job's exclusions (exclusion_file.h).
  void keep_exclusion(const Node& n, const std::string& text) {
    Exclusion e = Exclusion::from_json(nlohmann::json::parse(text, nullptr, false));
    e.host = n.host;
    std::filesystem::path file = exclusion_file(env_, spec_.rdzv.id);
    if (file.empty()) return;
    std::string error = record_exclusion(file, e);
    if (!error.empty()) {
      std::fprintf(stderr, "ccrun: cannot keep the exclusion of host %s for the next launch: %s\n",
                   n.host.c_str(), error.c_str());
    }
  }

  void on_exit(Node& n, ExitStatus s) {
    n.status = s.exit_code;
    n.watch->close();
    // Its output may still be in the pipes (or held by a straggler): read
    // it to the end, but not for ever.
    n.drain = std::make_unique<asio::steady_timer>(io_, std::chrono::seconds(2));
    n.drain->async_wait([this, &n](boost::system::error_code ec) {
      if (!ec) finish(n);
    });
    if (n.open_pipes == 0) finish(n);
  }

  void pipe_closed(Node& n) {
    --n.open_pipes;
    if (n.open_pipes == 0 && n.watch->reaped()) finish(n);
  }

  void finish(Node& n) {
    if (n.finished) return;
    n.finished = true;
    if (n.drain) n.drain->cancel();
    close_stdin(n);
    ++finished_;
    if (n.status != 0 && !signalled_) on_failure(n);
    if (finished_ == nodes_.size()) {
      signals_.cancel();
      peer_timer_.cancel();
      kill_timer_.cancel();
    }
  }

  void on_failure(Node& n) {
    bool elastic = spec_.min_nodes < spec_.max_nodes;
    size_t live = 0;
    for (const auto& o : nodes_) live += !o->finished;
    if (n.status == 255) {
      std::string tail = mux_.tail(n.err_stream);
      std::fprintf(stderr, "ccrun: host %s (node %zu): ssh failed (exit 255): %s", n.host.c_str(), n.index,
                   tail.empty() ? "(ssh printed nothing)\n" : tail.c_str());
      if (elastic && !stopping_ && live >= size_t(spec_.min_nodes)) {
        std::fprintf(stderr, "ccrun: the job is elastic and %zu node(s) remain (min %d); going on\n", live,
                     spec_.min_nodes);
        return;
      }
      if (exit_code_ == 0) exit_code_ = 255;
      stop_peers("host " + n.host + " cannot be reached");
      return;
    }
    if (stopping_) {
      std::fprintf(stderr, "ccrun: host %s (node %zu) stopped (status %d)\n", n.host.c_str(), n.index, n.status);
      return;
    }
    if (n.status == kExitAlreadyRan) {  // no failure of a run: no peer to stop (run() decides)
      came_after_the_run_ = true;
      std::fprintf(stderr, "ccrun: host %s (node %zu) came after the job id's run had ended and "
                   "ran nothing (status %d)\n", n.host.c_str(), n.index, n.status);
      return;
    }
    if (exit_code_ == 0 && !(elastic && live >= size_t(spec_.min_nodes))) exit_code_ = n.status;
    std::fprintf(stderr, "ccrun: host %s (node %zu) exited with status %d\n", n.host.c_str(), n.index, n.status);
    if (elastic && live >= size_t(spec_.min_nodes)) return;
    if (peer_timer_armed_ || live == 0) return;
    // The other agents normally see the failure through the store and end
    // with their own reports; those that do not are stopped.
    peer_timer_armed_ = true;
    peer_timer_.expires_after(kPeerGrace);
    peer_timer_.async_wait([this, host = n.host](boost::system::error_code ec) {
      if (!ec) stop_peers("host " + host + " failed " + std::to_string(kPeerGrace.count()) + " s ago");
    });
  }

  void stop_peers(const std::string& why) {
    if (stopping_) return;
    stopping_ = true;
    size_t live = 0;
    for (const auto& o : nodes_) live += !o->watch->reaped();
    if (live == 0) return;
    std::fprintf(stderr, "ccrun: %s; stopping the other %zu node(s)\n", why.c_str(), live);
    signal_all(SIGTERM);
    arm_kill_timer();
  }

  const JobSpec& spec_;
  const Environment& env_;
  asio::io_context io_;
  SignalStream signals_;  // held from load on (ccrun/stop_signals.h)
  LogMux mux_;
  std::unique_ptr<agent::ConsoleCollapser> collapse_[2];  // --collapse-output: stdout, stderr
  std::unique_ptr<Spawner> spawner_;  // every ssh of the job
  const Node* report_node_ = nullptr;  // whose failure report is shown
  asio::steady_timer peer_timer_;
  asio::steady_timer kill_timer_;
  bool peer_timer_armed_ = false;
  std::vector<std::string> ssh_;
  std::string cwd_, ccrun_;
  std::map<std::string, std::string> vars_;
  std::vector<std::unique_ptr<Node>> nodes_;
  size_t finished_ = 0;
  int signalled_ = 0;
  bool stopping_ = false;
  bool came_after_the_run_ = false;  // a node exited kExitAlreadyRan
  int exit_code_ = 0;
};

}  // namespace

std::string shell_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::vector<std::string> split_words(std::string_view text, const std::string& label) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else if (c == '\'' || c == '"') {
      size_t close = text.find(c, i + 1);
      if (c == '"') {  // backslash escapes inside double quotes
        size_t j = i + 1;
        for (; j < text.size() && text[j] != '"'; ++j) {
          if (text[j] == '\\' && j + 1 < text.size()) ++j;
        }
        close = j < text.size() ? j : std::string_view::npos;
      }
      if (close == std::string_view::npos) {
        throw ConfigError(label + ": column " + std::to_string(i + 1) + ": unclosed " + c + " quote");
      }
      for (size_t j = i + 1; j < close; ++j) {
        if (c == '"' && text[j] == '\\' && j + 1 < close) ++j;
        cur += text[j];
      }
      in_word = true;
      i = close;
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
      in_word = true;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  if (words.empty()) throw ConfigError(label + ": empty; give a command such as ssh -o BatchMode=yes");
  return words;
}

std::vector<std::string> agent_args(const JobSpec& spec, size_t index) {
  // The job as this host's agent sees it: its node rank and its workers.
  const HostSpec& h = spec.hosts.at(index);
  JobSpec host = spec;
  host.node_rank = int(index);
  if (h.slots != 0) {
    host.nproc_per_node = int(h.devices.size());
    host.nproc_per_node_given.clear();
  }
  std::vector<std::string> a;
  auto add = [&](const Setting& s) {
    if (!s.text) {  // a switch
      if (s.on && s.on(host)) a.push_back(first_flag(s));
      return;
    }
    std::string value = s.text(host);
    // An empty value that is not the default was given so (an empty prefix
    // template: none): the host's agent must get it too.
    if (!value.empty() || !default_text(s).empty()) a.insert(a.end(), {first_flag(s), value});
  };
  // Its place in the job first, then every other forwarded setting.
  const char* const placement[] = {"nnodes", "node_rank", "nproc_per_node"};
  for (const char* key : placement) add(*find_setting(key));
  for (const auto& s : settings()) {
    bool placed = std::find(std::begin(placement), std::end(placement), std::string(s.key)) != std::end(placement);
    if (s.forwarded && !placed) add(s);
  }
  a.insert(a.end(), {"--exit-on-stdin-eof", "--no-python", "--"});
  a.insert(a.end(), spec.entrypoint.begin(), spec.entrypoint.end());
  return a;
}

std::map<std::string, std::string> forwarded_env(const JobSpec& spec, const Environment& env) {
  std::map<std::string, std::string> out;
  for (const char* name : kForwardedNames) {
    if (auto v = env.get(name)) out[name] = *v;
  }
  for (const auto& [name, value] : env.vars) {
    for (const char* p : kForwardedPrefixes) {
      if (name.rfind(p, 0) == 0) out[name] = value;
    }
  }
  for (const auto& name : spec.fanout.exports) {
    auto v = env.get(name);
    if (!v) {
      throw ConfigError("--export " + name + ": " + name +
                        " is not set here, so there is nothing to forward; set it or drop it");
    }
    out[name] = *v;
  }
  for (const auto& [name, value] : spec.env) out[name] = value;
  return out;
}

std::string remote_command(const JobSpec& spec, size_t index, const std::string& cwd,
                           const std::map<std::string, std::string>& vars, const std::string& ccrun) {
  const HostSpec& h = spec.hosts.at(index);
  std::map<std::string, std::string> all = vars;
  bool narrowed = int(h.devices.size()) != h.slots;
  if (narrowed) {  // DeepSpeed's rule: a slot is a device index
    std::vector<std::string> d;
    for (int i : h.devices) d.push_back(std::to_string(i));
    all["CUDA_VISIBLE_DEVICES"] = join(d, ",");
  }
  std::string line = "cd " + shell_quote(cwd) + " && exec env";
  for (const auto& [k, v] : all) line += " " + shell_quote(k + "=" + v);
  line += " " + shell_quote(ccrun);
  for (const auto& a : agent_args(spec, index)) line += " " + shell_quote(a);
  return line;
}

int run_fanout(const JobSpec& spec, const Environment& env) { return Fanout(spec, env).run(); }

}  // namespace ccrun::launcher

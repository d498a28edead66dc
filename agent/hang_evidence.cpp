// Stacks of the ranks and OOM-kill evidence (see hang_evidence.h).
#include "hang_evidence.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "proc_stat.h"
#include "run_command.h"
#include "warm_template.h"


namespace ccrun::agent {
namespace {

using namespace std::chrono;

constexpr size_t kMaxStackBytes = 256 * 1024;  // per rank and kind
constexpr milliseconds kNativeTimeout{10'000};

// eu-stack's (or any tracer's) output, or why there is none.
std::string run_capture(const std::vector<std::string>& args, milliseconds timeout) {
  CommandResult r = run_command(args, timeout, kMaxStackBytes);
  if (r.spawn_error) {
    return args[0] + " cannot run: " + strerror(r.spawn_error) +
           (r.spawn_error == ENOENT ? " (install elfutils: apt-get install elfutils)" : "");
  }
  if (r.timed_out) {
    r.output += "\n(" + args[0] + " did not finish within " +
                std::to_string(timeout.count() / 1000) + " s; killed)";
  }
  return r.output;
}

off_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

std::string read_from(const std::string& path, off_t offset) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::string s(kMaxStackBytes, '\0');
  in.read(s.data(), std::streamsize(s.size()));
  s.resize(size_t(in.gcount()));
  return s;
}

// Signals every Python worker at once, then reads each file once it has
// grown and stayed the same for a moment. faulthandler writes with plain
// write(2) calls from the signal handler, so there is no event to wait on
// but the file itself; the wait is bounded by `wait`.
void python_stacks(const std::vector<StackTarget>& targets, std::vector<RankStacks>& out,
                   milliseconds wait) {
  std::vector<off_t> before(targets.size()), last(targets.size());
  std::vector<bool> done(targets.size()), stopped(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    done[i] = targets[i].dump_signal <= 0 || targets[i].dump_pid <= 0;
    if (done[i] || targets[i].stack_file.empty()) continue;
    // A stopped process runs no handler until it is continued, and
    // continuing it would change what the other ranks show: it is not asked.
    char state = read_proc_stat(targets[i].dump_pid).state;
    if (state == 'T' || state == 't') {
      stopped[i] = done[i] = true;
      continue;
    }
    before[i] = last[i] = file_size(targets[i].stack_file);
    ::kill(targets[i].dump_pid, targets[i].dump_signal);
  }
  auto deadline = steady_clock::now() + wait;
  while (steady_clock::now() < deadline &&
         !std::all_of(done.begin(), done.end(), [](bool d) { return d; })) {
    std::this_thread::sleep_for(milliseconds(100));
    for (size_t i = 0; i < targets.size(); ++i) {
      if (done[i]) continue;
      off_t now = file_size(targets[i].stack_file);
      done[i] = now > before[i] && now == last[i];
      last[i] = now;
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].dump_signal <= 0 || targets[i].dump_pid <= 0) continue;
    if (stopped[i]) {
      out[i].python = "(none: the process is stopped (state T); a traceback needs it to run, and "
                      "resuming it would change what the other ranks show. Its native stack, "
                      "read while it is stopped, is where it stopped.)";
      continue;
    }
    out[i].python = drop_template_frames(read_from(targets[i].stack_file, before[i]));
    if (out[i].python.empty()) out[i].python = "(no traceback within the wait: the interpreter "
                                               "may be stuck outside Python code)";
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr const char* kPipeStem = "nccl_pipe_rank_";
constexpr const char* kDumpStem = "nccl_trace_rank_";

}  // namespace

void add_flight_recorder_env(const std::string& prefix, EnvBuilder& env) {
  // Each setting under both its names, unless the user set either: the
  // older that torch 2.x read first, and the newer that torch 2.11 reads
  // (warning of the older, which the start-up hook then drops).
  auto both = [&](const char* newer, const char* older, const std::string& value) {
    if (env.get(newer) || env.get(older)) return;
    env.set(newer, value);
    env.set(older, value);
  };
  both("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000");
  env.set_default("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", prefix + kPipeStem);
  both("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix + kDumpStem);
}

std::vector<std::pair<int, std::string>> dump_flight_recorders(const std::string& prefix,
                                                               const std::vector<int>& ranks,
                                                               milliseconds wait) {
  std::vector<std::pair<int, std::string>> asked;
  for (int r : ranks) {
    std::string pipe = prefix + kPipeStem + std::to_string(r) + ".pipe";
    int fd = ::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;  // no NCCL group in that rank, or not torch
    if (::write(fd, "1", 1) == 1) asked.emplace_back(r, prefix + kDumpStem + std::to_string(r));
    ::close(fd);
  }
  // torch writes the dump from its own thread: the file is the only event.
  std::vector<std::pair<int, std::string>> out;
  std::vector<off_t> last(asked.size(), -1);
  std::vector<bool> done(asked.size(), false);
  auto deadline = steady_clock::now() + wait;
  while (out.size() < asked.size() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(100));
    for (size_t i = 0; i < asked.size(); ++i) {
      if (done[i]) continue;
      off_t now = file_size(asked[i].second);
      if (now > 0 && now == last[i]) done[i] = true, out.push_back(asked[i]);
      last[i] = now;
    }
  }
  return out;
}

std::vector<RankStacks> collect_stacks(const std::vector<StackTarget>& targets,
                                       milliseconds python_wait) {
  std::vector<RankStacks> out(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) out[i].rank = targets[i].rank, out[i].pid = targets[i].pid;
  python_stacks(targets, out, python_wait);
  // Every rank at once: a rank in the D state holds its tracer up to the
  // timeout, and a stop waits for this.
  std::vector<std::future<std::string>> native(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].pid <= 0) continue;
    native[i] = std::async(std::launch::async, run_capture,
                           std::vector<std::string>{"eu-stack", "-p", std::to_string(targets[i].pid)},
                           kNativeTimeout);
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (native[i].valid()) out[i].native = native[i].get();
  }
  return out;
}

std::string cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line, v2, v1;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, 2, "0:") == 0 && controllers.empty()) v2 = "/sys/fs/cgroup" + path;
    if (controllers == "memory") v1 = "/sys/fs/cgroup/memory" + path;
  }
  if (!v1.empty() && ::access((v1 + "/memory.oom_control").c_str(), R_OK) == 0) return v1;
  if (!v2.empty() && ::access((v2 + "/memory.events").c_str(), R_OK) == 0) return v2;
  return "";
}

int64_t cgroup_oom_kills_at(const std::string& dir) {
  if (dir.empty()) return -1;
  std::string text = read_file(dir + "/memory.events");
  if (text.empty()) text = read_file(dir + "/memory.oom_control");
  auto at = text.find("oom_kill ");
  if (at == std::string::npos) return -1;
  return std::strtoll(text.c_str() + at + 9, nullptr, 10);
}

int64_t cgroup_oom_kills(pid_t pid) { return cgroup_oom_kills_at(cgroup_of(pid)); }

std::string oom_kill_evidence(pid_t pid, const std::string& cgroup_dir, int64_t kills_before) {
  // The kernel log names the pid: "Killed process 1234 (python3)" and
  // "oom-kill:...,pid=1234,...". Each read(2) of /dev/kmsg is one record.
  int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    std::string killed = "Killed process " + std::to_string(pid) + " (";
    std::string field = ",pid=" + std::to_string(pid) + ",";
    std::string found;
    char rec[8192];
    for (;;) {
      ssize_t n = ::read(fd, rec, sizeof rec - 1);
      if (n < 0 && errno == EPIPE) continue;  // overwritten records: read on
      if (n <= 0) break;
      std::string r(rec, size_t(n));
      if (r.find(killed) != std::string::npos || r.find(field) != std::string::npos) {
        auto semi = r.find(';');
        found = r.substr(semi == std::string::npos ? 0 : semi + 1);
        while (!found.empty() && found.back() == '\n') found.pop_back();
      }
    }
    ::close(fd);
    if (!found.empty()) return "the kernel's OOM killer ended it (kernel log: " + found + ")";
  }
  int64_t now = cgroup_oom_kills_at(cgroup_dir);
  if (kills_before >= 0 && now > kills_before) {
    return "the kernel's OOM killer ended it (" + cgroup_dir + " counts " +
           std::to_string(now - kills_before) + " OOM kill(s) since it started)";
  }
  return "";
}

}  // namespace ccrun::agent

// The workers' progress records, created, named and read by the agent
// (see progress_watch.h and include/ccrun/progress.h).
#include "progress_watch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>

#include "ccrun/progress.h"
#include "orphan_killer.h"
#include "progress_read.h"
#include "proc_stat.h"

#ifndef CCRUN_PYTHON_HOOK_SOURCE_DIR
#define CCRUN_PYTHON_HOOK_SOURCE_DIR ""
#endif

namespace ccrun::agent {
namespace {

namespace fs = std::filesystem;
using progress::Record;

// Rates (steps per second, time per step) are taken over at least this long.
constexpr int64_t kRateWindowNs = 5'000'000'000;

int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

struct ProgressWatch::Worker {
  std::string path, stack_path;
  int fd = -1;
  Record* record = nullptr;
  pid_t pid = 0;
  int64_t spawned_ns = 0;  // CLOCK_MONOTONIC
  int64_t created_mtime_ns = 0, last_mtime_ns = 0;
  uint64_t touches = 0;
  int64_t rss_kb = 0;
  // The start of the rate window: when, steps (or calls) and wait time then.
  int64_t window_ns = 0;
  uint64_t window_steps = 0;
  uint32_t window_wait_us = 0;  // sum of the slots' wait_us (wrapping)
  double steps_per_s = 0, busy_ms_per_step = -1;

  ~Worker() {
    if (record) ::munmap(record, progress::kRecordBytes);
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
    if (!stack_path.empty()) ::unlink(stack_path.c_str());
    if (!path.empty()) ::unlink((path + ".modules").c_str());
    if (!path.empty()) ::unlink((path + ".modules.tmp").c_str());  // a worker killed mid-write
  }

  // The record, mapped at the first call; null when it cannot be.
  Record* map() {
    if (!record && fd >= 0) {
      void* m = ::mmap(nullptr, progress::kRecordBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) record = static_cast<Record*>(m);
    }
    return record;
  }

  // Fills `v`'s progress from the record `r` (mapped) and the file's mtime;
  // `now` is progress::now_ns(), `real` the wall clock at the same moment.
  void read_progress(const Record& r, int64_t now, int64_t real, RankView& v) {
    GroupsRead read = read_groups(r, now, v.groups);
    int64_t last = read.last_ns;
    // A shell's `touch "$CCRUN_PROGRESS_FILE"` is a step.
    int64_t mtime = mtime_ns();
    if (mtime != last_mtime_ns) {
      ++touches;
      last_mtime_ns = mtime;
    }
    if (touches > 0) last = std::max(last, now - (real - last_mtime_ns));
    uint64_t marked = r.steps.load(std::memory_order_relaxed) + touches + read.ddp_steps;
    v.steps = marked > 0 ? marked : read.most_calls;
    v.reporting = last > 0;
    v.groups_unrecorded = read.unrecorded;
    v.idle_ms = v.reporting ? std::max<int64_t>(0, (now - last) / 1'000'000) : 0;
    update_rates(now, v.steps, read.wait_us);
    v.steps_per_s = steps_per_s;
    v.busy_ms_per_step = busy_ms_per_step;
  }

  // Steps per second and busy time per step (time not spent waiting in
  // collectives), over a window of at least kRateWindowNs; the first call
  // opens the window.
  void update_rates(int64_t now, uint64_t steps_now, uint32_t wait_us) {
    // Fewer steps than at the window's start: a slot passing from a gone DDP module to the
    // next, read between its writes (ccrun_progress._new_slot); the window starts again.
    if (window_ns == 0 || steps_now < window_steps) {
      window_ns = now, window_steps = steps_now, window_wait_us = wait_us;
    } else if (now - window_ns >= kRateWindowNs) {
      double span = double(now - window_ns);
      uint64_t steps = steps_now - window_steps;
      double waited = double(uint32_t(wait_us - window_wait_us)) * 1000;
      steps_per_s = double(steps) * 1e9 / span;
      busy_ms_per_step = steps > 0 ? std::max(0.0, span - waited) / 1e6 / double(steps) : -1;
      window_ns = now, window_steps = steps_now, window_wait_us = wait_us;
    }
  }

  int64_t mtime_ns() const {
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) return 0;
    return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }

  // Creates the record with its header; false (and nothing left behind) on
  // failure. It is mapped at the first sample (map()): a worker that ends
  // within a second costs no mmap/munmap (the unmap of a threaded agent
  // interrupts every CPU it ran on), and launch stays as fast as before.
  bool create(const std::string& p) {
    fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    path = p;
    if (::ftruncate(fd, progress::kRecordBytes) != 0) return false;
    struct Header {
      uint64_t magic;
      uint32_t version, record_bytes;
    } header{progress::kMagic, progress::kVersion, uint32_t(progress::kRecordBytes)};
    static_assert(sizeof(Header) == offsetof(Record, pid));
    if (::pwrite(fd, &header, sizeof header, 0) != ssize_t(sizeof header)) return false;
    created_mtime_ns = last_mtime_ns = mtime_ns();
    stack_path = p + ".stacks";  // made by the Python hook (append) when it registers
    return true;
  }
};

ProgressWatch::ProgressWatch(const std::string& token, int attempt, int first_rank,
                             int node_rank, std::string host, int nproc)
    : first_rank_(first_rank), node_rank_(node_rank), host_(std::move(host)) {
  std::string base = progress_dir() + "/" + leftover_prefix(token) + std::to_string(attempt) + "-";
  for (int lr = 0; lr < nproc; ++lr) {
    auto w = std::make_unique<Worker>();
    if (!w->create(base + std::to_string(lr))) {
      spdlog::warn("ccrun: cannot create the progress record {}: {}; rank {} runs without one "
                   "(no hang verdict for it; set CCRUN_PROGRESS_DIR to a writable tmpfs)",
                   base + std::to_string(lr), std::strerror(errno), first_rank + lr);
      w = std::make_unique<Worker>();
    }
    workers_.push_back(std::move(w));
  }
}

ProgressWatch::~ProgressWatch() = default;

namespace {
// The installed hook's folder relative to the running program (bin/ccrun).
fs::path installed_under(const char* relative) {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path().parent_path() / relative;
}
}  // namespace

std::string ProgressWatch::python_hook_dir() {
  std::vector<std::string> candidates;
  if (const char* d = std::getenv("CCRUN_PYTHON_HOOK_DIR")) candidates.push_back(d);
  fs::path installed = installed_under("share/ccrun/python");
  if (!installed.empty()) candidates.push_back(installed.string());
  candidates.push_back(CCRUN_PYTHON_HOOK_SOURCE_DIR);
  std::error_code ec;
  for (const auto& c : candidates) {
    if (!c.empty() && fs::exists(fs::path(c) / "sitecustomize.py", ec)) return c;
  }
  return "";
}

std::string ProgressWatch::python_extension_dir(const std::string& hook) {
#ifdef CCRUN_PYTHON_HOOK_BUILD_DIR
  std::error_code ec;
  fs::path dir;
  if (hook == CCRUN_PYTHON_HOOK_SOURCE_DIR) {
    dir = CCRUN_PYTHON_HOOK_BUILD_DIR;
  } else if (!hook.empty() && hook == installed_under("share/ccrun/python").string()) {
    dir = installed_under(CCRUN_PYTHON_HOOK_LIB_DIR);
  }
  if (!dir.empty() && fs::is_directory(dir, ec)) return dir.string();
#else
  (void)hook;
#endif
  return "";
}

void ProgressWatch::add_environment(int local_rank, EnvBuilder& env) const {
  const Worker& w = *workers_.at(local_rank);
  if (w.fd < 0) return;
  env.set(progress::kFileVar, w.path);
  env.set("CCRUN_STACK_FILE", w.stack_path);
  add_hook_path(env);
}

void ProgressWatch::add_hook_path(EnvBuilder& env) {
  static const std::string hook = python_hook_dir();
  static const std::string extension = python_extension_dir(hook);
  if (!extension.empty()) env.prepend_path("PYTHONPATH", extension);
  if (!hook.empty()) env.prepend_path("PYTHONPATH", hook);
}

void ProgressWatch::set_pids(const std::vector<pid_t>& pids, const std::vector<int64_t>& spawned_ns) {
  for (size_t i = 0; i < pids.size() && i < workers_.size(); ++i) workers_[i]->pid = pids[i];
  for (size_t i = 0; i < spawned_ns.size() && i < workers_.size(); ++i) {
    workers_[i]->spawned_ns = spawned_ns[i];
  }
}

std::vector<std::string> ProgressWatch::imported_modules(int local_rank) const {
  const Worker& w = *workers_.at(local_rank);
  std::vector<std::string> out;
  if (w.path.empty()) return out;
  std::ifstream in(w.path + ".modules");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::vector<StartupTimeline> ProgressWatch::timelines() const {
  int64_t mono_to_wall = realtime_ns() - progress::monotonic_ns();
  std::vector<StartupTimeline> out;
  for (size_t lr = 0; lr < workers_.size(); ++lr) {
    Worker& w = *workers_[lr];
    Record* r = w.map();
    if (!r) {
      out.push_back(StartupTimeline{first_rank_ + int(lr)});
      continue;
    }
    out.push_back(read_timeline(first_rank_ + int(lr), w.spawned_ns, r->startup, mono_to_wall));
  }
  return out;
}

std::vector<RankView> ProgressWatch::sample() {
  int64_t now = progress::now_ns();
  int64_t real = realtime_ns();
  int64_t mono_to_wall = real - progress::monotonic_ns();
  std::vector<RankView> out;
  for (size_t lr = 0; lr < workers_.size(); ++lr) {
    Worker& w = *workers_[lr];
    RankView v;
    v.rank = first_rank_ + int(lr);
    v.local_rank = int(lr);
    v.node_rank = node_rank_;
    v.host = host_;
    v.pid = w.pid;
    if (w.pid > 0) {
      ProcStat p = read_proc_stat(w.pid);
      w.rss_kb = p.rss_kb ? p.rss_kb : w.rss_kb;
      v.state = p.state;
    }
    v.rss_kb = w.rss_kb;
    if (Record* r = w.map()) {
      w.read_progress(*r, now, real, v);
      v.startup = read_timeline(v.rank, w.spawned_ns, r->startup, mono_to_wall);
    }
    out.push_back(std::move(v));
  }
  return out;
}

int ProgressWatch::dump_signal(int local_rank) const {
  Record* r = workers_.at(local_rank)->map();
  return r ? r->dump_signal.load(std::memory_order_relaxed) : 0;
}

pid_t ProgressWatch::dump_pid(int local_rank) const {
  Record* r = workers_.at(local_rank)->map();
  return r ? r->pid.load(std::memory_order_relaxed) : 0;
}

const std::string& ProgressWatch::stack_file(int local_rank) const {
  return workers_.at(local_rank)->stack_path;
}

pid_t ProgressWatch::pid(int local_rank) const { return workers_.at(local_rank)->pid; }

int64_t ProgressWatch::last_rss_kb(int local_rank) const {
  return workers_.at(local_rank)->rss_kb;
}

}  // namespace ccrun::agent

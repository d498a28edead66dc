// One attempt's watch over its workers' progress (see hang_monitor.h).
#include "hang_monitor.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <future>

#include "ccrun/error.h"
#include "ccrun/rank_progress.h"
#include "evidence_shares.h"
#include "flight_recorder.h"
#include "hang_evidence.h"
#include "incident.h"
#include "nccl_ras.h"

namespace ccrun::agent {
namespace {

namespace asio = boost::asio;
using json = nlohmann::json;

// The node that merges every node's stacks and compares every node's
// flight records, and how long it waits for them: node 0 judged the hang
// and collects first (no other node has learnt of it yet); node 1 collects
// with the others, once they see the round end. One node, so that a job of
// many nodes reads the shares once and says what they say once.
constexpr int kComparingNode = 1;
constexpr std::chrono::milliseconds kEvidenceWait{5000};

// How often the records are read: a record costs no system call, the RSS
// one read per worker (bench-hang.sh measures the agent's CPU).
constexpr std::chrono::milliseconds kSampleInterval{1'000};

}  // namespace

HangMonitor::HangMonitor(asio::io_context& io, HangMonitorOptions options, Hooks hooks)
    : io_(io),
      o_(std::move(options)),
      hooks_(std::move(hooks)),
      watch_(o_.token, o_.attempt, o_.first_rank, o_.node_rank, o_.host, o_.nproc),
      timer_(io) {}

HangMonitor::~HangMonitor() {
  *alive_ = false;
  timer_.cancel();
}

void HangMonitor::add_worker_env(EnvBuilder& env, int local_rank) const {
  watch_.add_environment(local_rank, env);
  add_flight_recorder_env(o_.evidence_prefix, env);
}

void HangMonitor::start(const std::vector<pid_t>& pids, const std::vector<int64_t>& spawned_ns) {
  watch_.set_pids(pids, spawned_ns);
  // Workers start in the agent's own memory cgroup: one read for them all.
  cgroup_ = cgroup_of(::getpid());
  oom_kills_ = cgroup_oom_kills_at(cgroup_);
  arm();
}

void HangMonitor::stop() {
  stopped_ = true;
  timer_.cancel();
}

void HangMonitor::arm() {
  timer_.expires_after(kSampleInterval);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;  // cancelled: `this` may be gone
    on_sample();
    if (!stopped_) arm();
  });
}

// Every node publishes its ranks' views with its heartbeat; node 0 judges
// the whole job from every node's (one reader of N keys a second, the
// others only write), so no node reads every other's.
void HangMonitor::on_sample() {
  std::vector<RankView> views = watch_.sample();
  hooks_.publish(views);
  if (o_.node_rank != 0) return;
  if (o_.num_nodes <= 1) return judge(views, views);
  if (reading_) return;  // the last read has not come back yet
  reading_ = true;
  hooks_.off_loop([this, io = &io_, alive = alive_, views, read = hooks_.read_statuses] {
    std::vector<std::optional<NodeStatus>> statuses;
    try {
      statuses = read();
    } catch (const Error& e) {
      spdlog::warn("ccrun: cannot read the other nodes' progress: {}", e.what());
    }
    asio::post(*io, [this, alive, views, statuses] {
      if (!*alive) return;
      reading_ = false;
      if (!stopped_ && !statuses.empty()) judge(with_other_nodes(views, statuses), views);
    });
  });
}

std::vector<RankView> HangMonitor::with_other_nodes(
    std::vector<RankView> local, const std::vector<std::optional<NodeStatus>>& statuses) const {
  for (size_t node = 0; node < statuses.size(); ++node) {
    if (int(node) == o_.node_rank || !statuses[node]) continue;
    local.insert(local.end(), statuses[node]->ranks.begin(), statuses[node]->ranks.end());
  }
  return local;
}

void HangMonitor::judge(const std::vector<RankView>& all, const std::vector<RankView>& local) {
  note_stragglers(all);
  if (o_.hang_timeout.count() <= 0) return;
  HangVerdict v = judge_hang(all, o_.hang_timeout.count());
  if (!v.hung) return;
  stop();  // one verdict per attempt
  RankView culprit;
  for (const auto& r : all) {
    if (!v.culprits.empty() && r.rank == v.culprits.front()) culprit = r;
  }
  hooks_.on_hang(v, all, local, culprit);
}

// Says so once when the set of stragglers changes (`ccrun status` shows
// them all the time).
void HangMonitor::note_stragglers(const std::vector<RankView>& all) {
  std::vector<int> slow = find_stragglers(all);
  if (slow == stragglers_) return;
  stragglers_ = slow;
  for (const auto& r : all) {
    if (std::find(slow.begin(), slow.end(), r.rank) == slow.end()) continue;
    spdlog::warn("ccrun: rank {} (host {}, pid {}) is a straggler: {:.0f} ms of its own work "
                 "per step, 1.5x or more the other ranks' median", r.rank, r.host, r.pid,
                 r.busy_ms_per_step);
  }
  hooks_.event("stragglers", json{{"ranks", slow}}.dump());
}

namespace {

// The flight-recorder dumps named, on the console.
void print_dumps(const json& stacks) {
  for (const auto& s : stacks) {
    std::string trace = s.value("nccl_trace", std::string());
    if (!trace.empty()) {
      spdlog::error("ccrun: rank {}'s NCCL flight recorder dumped to {}", s.value("rank", -1), trace);
    }
  }
}

// This node's stacks on the console, one block per class of identical
// stacks (incident.h).
void print_stacks(const std::vector<StackClass>& classes) {
  for (const auto& c : classes) {
    std::vector<std::string> pids;
    for (int p : c.pids) pids.push_back(std::to_string(p));
    std::string procs = pids.size() <= 8 ? "pid " + fmt::format("{}", fmt::join(pids, ","))
                                         : std::to_string(pids.size()) + " processes";
    spdlog::error("ccrun: stacks of {} ({}){}:\n{}", c.title(), procs,
                  c.python.empty() ? "" : " (Python; native ones in the report)", c.shown());
  }
}

// The job's stacks on the console, merged across its nodes (job_stacks.h).
void print_job_stacks(const JobStacks& job) {
  for (const auto& c : job.classes) {
    spdlog::error("ccrun: stacks of {}{}:\n{}", c.title(),
                  c.python ? " (Python; native ones in each node's report)" : "", c.stack);
  }
}

// The comparing node of a job of several nodes merges every node's stacks,
// compares every rank's flight records, and prints both; the others say in
// a line what their ranks' classes are, and keep their findings in their
// report: at 128 nodes, one class's stack printed once, not 128 times.
void print_node_summary(const std::vector<StackClass>& classes, size_t nccl_findings) {
  std::vector<std::string> titles;
  for (const auto& c : classes) titles.push_back(c.title());
  spdlog::error("ccrun: this node's ranks' stacks: {} (node {} prints the job's, merged across nodes; "
                "every rank's are in the report)", fmt::join(titles, "; "), kComparingNode);
  if (nccl_findings > 0) {
    spdlog::error("ccrun: NCCL flight recorder: node {} compares every rank's records; what this node's "
                  "say is in the report", kComparingNode);
  }
}

// Publishes this node's share of the evidence (`hooks` set: a job of several
// nodes) and, on the comparing node, reads every node's, waiting for them
// at most kEvidenceWait; none elsewhere.
std::vector<json> exchange_evidence(const std::vector<FlightRecord>& records, const std::vector<StackClass>& classes,
                                    int node_rank, const HangMonitor::Hooks& hooks) {
  if (!hooks.publish_evidence) return {};
  try {
    json share = json::object();
    add_flight_records(share, records);
    add_stack_classes(share, classes);
    hooks.publish_evidence(share.dump());
    if (hooks.read_evidence && node_rank == kComparingNode) return parse_shares(hooks.read_evidence(kEvidenceWait));
  } catch (const std::exception& e) {
    spdlog::warn("ccrun: this node's evidence of the hang cannot be shared with the other nodes': {}", e.what());
  }
  return {};
}

}  // namespace

// The flight recorders' dumps, read; says why one could not be.
static std::vector<FlightRecord> read_flight_recorders(const std::vector<std::pair<int, std::string>>& dumps) {
  std::vector<FlightRecord> records;
  for (const auto& [rank, path] : dumps) {
    std::string error;
    if (auto r = read_flight_record(rank, path, error)) {
      records.push_back(std::move(*r));
    } else {
      spdlog::warn("ccrun: rank {}'s NCCL flight recorder dump cannot be read: {}", rank, error);
    }
  }
  return records;
}

// Every target's stacks (the agent's stacks JSON), with their NCCL flight
// recorders' dumps (under `prefix`) taken meanwhile: torch writes a dump
// from its own thread (on torch 2.x with its C++ stacks: seconds).
static json take_stacks(const std::vector<StackTarget>& targets, const std::string& prefix,
                        std::vector<std::pair<int, std::string>>& dumped) {
  std::vector<int> ranks;
  for (const auto& t : targets) ranks.push_back(t.rank);
  auto dumps = std::async(std::launch::async, [prefix, ranks] { return dump_flight_recorders(prefix, ranks); });
  auto stacks = agent::collect_stacks(targets);
  dumped = dumps.get();
  json out = json::array();
  for (const auto& s : stacks) {
    std::string trace;
    for (const auto& [rank, path] : dumped) {
      if (rank == s.rank) trace = path;
    }
    out.push_back({{"rank", s.rank}, {"pid", s.pid}, {"python", s.python}, {"native", s.native}, {"nccl_trace", trace}});
  }
  return out;
}

// The evidence on the console: the job's stacks on the comparing node of a
// job of several nodes (`shared`), a line on the others; this node's on one.
static void print_evidence(const HangEvidence& evidence, const std::vector<StackClass>& classes, bool shared) {
  print_dumps(evidence.stacks);
  if (evidence.job_stacks) {
    print_job_stacks(*evidence.job_stacks);
  } else if (shared) {
    print_node_summary(classes, evidence.nccl_findings.size());
  } else {
    print_stacks(classes);
  }
  if (!shared || evidence.job_stacks) {
    for (const auto& f : evidence.nccl_findings) spdlog::error("ccrun: NCCL flight recorder: {}", f);
  }
  if (auto line = missing_shares_line(evidence.missing_nodes, kEvidenceWait); !line.empty()) {
    spdlog::error("ccrun: {}", line);
  }
  if (!evidence.ras.empty()) spdlog::error("ccrun: NCCL's RAS answered (kept in the incident's folder)");
}

void HangMonitor::collect_stacks(const std::vector<RankView>& local, std::function<void(HangEvidence)> done) {
  spdlog::error("ccrun: collecting the stacks of this node's ranks, then stopping them");
  std::vector<StackTarget> targets;
  for (const auto& r : local) {
    targets.push_back({r.rank, r.pid, watch_.dump_signal(r.local_rank),
                       watch_.dump_pid(r.local_rank), watch_.stack_file(r.local_rank)});
  }
  hooks_.off_loop([this, io = &io_, alive = alive_, targets, done, prefix = o_.evidence_prefix,
                   ras_addr = o_.nccl_ras_addr, node_rank = o_.node_rank,
                   hooks = o_.num_nodes > 1 ? hooks_ : Hooks{}] {
    // NCCL's RAS view of the job, asked while the stacks are taken.
    auto ras = std::async(std::launch::async, [ras_addr] {
      return nccl_ras_status(ras_addr, std::chrono::seconds(8));
    });
    HangEvidence evidence;
    std::vector<std::pair<int, std::string>> dumped;
    evidence.stacks = take_stacks(targets, prefix, dumped);
    auto records = read_flight_recorders(dumped);
    auto classes = stack_classes(evidence.stacks);
    auto deadline = std::chrono::steady_clock::now() + kEvidenceWait;  // for after_other_nodes
    auto shares = exchange_evidence(records, classes, node_rank, hooks);
    auto now = std::chrono::system_clock::now().time_since_epoch();
    evidence.nccl_findings = job_flight_findings(records, shares, node_rank,
                                                 std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
    if (!shares.empty()) evidence.job_stacks = job_stack_classes(classes, shares, node_rank);
    evidence.missing_nodes = missing_shares(shares, node_rank);
    evidence.ras = ras.get();
    asio::post(*io, [this, alive, done, evidence = std::move(evidence), classes = std::move(classes),
                     shared = bool(hooks.publish_evidence), deadline] {
      if (!*alive) return;
      evidence_deadline_ = deadline;
      print_evidence(evidence, classes, shared);
      done(evidence);
    });
  });
}

void HangMonitor::after_other_nodes(std::function<void()> done) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(evidence_deadline_ -
                                                                    std::chrono::steady_clock::now());
  if (o_.num_nodes <= 1 || !hooks_.await_evidence || left.count() <= 0) {
    asio::post(io_, std::move(done));
    return;
  }
  hooks_.off_loop([io = &io_, alive = alive_, await = hooks_.await_evidence, left, done] {
    try {
      await(left);
    } catch (const std::exception& e) {
      spdlog::warn("ccrun: cannot learn whether the other nodes have taken their ranks' stacks: {}", e.what());
    }
    asio::post(*io, [alive, done] {
      if (*alive) done();
    });
  });
}

std::string HangMonitor::oom_evidence(int local_rank, pid_t pid) const {
  std::string why = oom_kill_evidence(pid, cgroup_, oom_kills_);
  if (why.empty()) return why;
  int64_t rss = watch_.last_rss_kb(local_rank);
  return why + (rss > 0 ? "; its last sampled RSS was " + std::to_string(rss / 1024) + " MiB" : "");
}

}  // namespace ccrun::agent

// What `ccrun top` draws: one read of a job's store as the lines of one
// frame, pure functions only (see top_frame.h; the terminal is
// top_command.cpp's). Every function runs only for `ccrun top`: all are
// [[gnu::cold]], out of the text pages that a launch touches.
#include "top_frame.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "ccrun/hang_verdict.h"
#include "ccrun/progress.h"
#include "ccrun/startup_timeline.h"
#include "job_reader.h"

namespace ccrun::launcher {
namespace {

// One row of the table: a rank, or a class of ranks in the same state.
struct Row {
  std::vector<int> ranks;
  std::set<int> nodes;
  std::set<std::string> hosts;
  uint64_t step_min = 0, step_max = 0;
  double rate = 0;             // the mean of its ranks'
  std::string op;              // the collective its ranks wait in ("" none)
  std::set<uint64_t> seqs;     // its sequence numbers
  int64_t waiting_ms = -1;     // the longest wait
  int64_t lag = 0;             // steps against the median step (the furthest rank's)
  int64_t rss_kb = 0;          // the largest
  int64_t age_ms = 0;          // how old its data is (the oldest rank's)
  std::string mark;            // culprit, process state, start-up, straggler
  bool culprit = false;
};

// The hang verdict of the job's current attempt, if the last failure is one.
[[gnu::cold]] const Failure* current_hang(const JobState& job) {
  const auto& f = job.last_failure;
  if (!f || f->cause != FailureCause::kHang) return nullptr;
  int attempt = 0;
  for (const auto& n : job.node_statuses) {
    if (n) attempt = std::max(attempt, n->attempt);
  }
  return f->attempt >= attempt ? &*f : nullptr;
}

[[gnu::cold]] std::string mib(int64_t kb) { return kb > 0 ? std::to_string(kb / 1024) : "-"; }

[[gnu::cold]] std::string secs(int64_t ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1fs", double(ms) / 1000.0);
  return b;
}

// What marks a rank beside its numbers, most telling first.
[[gnu::cold]] std::string rank_mark(const RankView& v, bool culprit, bool straggler) {
  if (culprit) return "CULPRIT (hang)";
  if (v.state == 'T' || v.state == 't') return "stopped (state " + std::string(1, v.state) + ")";
  if (v.state == 'D') return "uninterruptible sleep (D)";
  if (!agent::past_startup(v.startup, v.steps) && v.startup.last_us() > 0) {
    return agent::startup_summary(v.startup, v.steps);
  }
  if (straggler) return "straggler";
  if (!v.reporting) return "no progress reported";
  return "";
}

[[gnu::cold]] int64_t median_steps(const std::vector<RankView>& views) {
  std::vector<uint64_t> s;
  for (const auto& v : views) s.push_back(v.steps);
  if (s.empty()) return 0;
  std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
  return int64_t(s[s.size() / 2]);
}

// How old each node's sample of its ranks is at the read, by node rank
// (another host's wall clock: never below 0). Empty once the job is over:
// its rows are its last records, not live.
[[gnu::cold]] std::map<int, int64_t> sample_ages(const TopSnapshot& snap) {
  std::map<int, int64_t> out;
  if (snap.job.phase != JobPhase::kRunning) return out;
  int64_t now = snap.now_ms > 0 ? snap.now_ms : wall_clock_ms();
  for (const auto& n : snap.job.node_statuses) {
    if (n) out[n->node_rank] = std::max<int64_t>(now - (n->sampled_ms > 0 ? n->sampled_ms : n->beat_ms), 0);
  }
  return out;
}

// One row per rank. Times that grow between samples (a wait) are shown as
// of the read: the sample's value plus its age.
[[gnu::cold]] std::vector<Row> rank_rows(const TopSnapshot& snap) {
  std::vector<RankView> views = job_rank_views(snap.job);
  std::map<int, int64_t> ages = sample_ages(snap);
  std::vector<int> slow = agent::find_stragglers(views);
  const Failure* hang = current_hang(snap.job);
  int64_t median = median_steps(views);
  std::vector<Row> rows;
  for (const auto& v : views) {
    Row r;
    r.ranks = {v.rank};
    r.nodes = {v.node_rank};
    r.hosts = {v.host};
    r.step_min = r.step_max = v.steps;
    auto rate = snap.rates.find(v.rank);
    r.rate = rate != snap.rates.end() ? rate->second : v.steps_per_s;
    auto age = ages.find(v.node_rank);
    r.age_ms = age != ages.end() ? age->second : 0;
    for (const auto& g : v.groups) {
      if (g.waiting_ms < 0 || g.waiting_ms + r.age_ms <= r.waiting_ms) continue;
      r.op = progress::op_name(g.op), r.seqs = {g.completed + 1}, r.waiting_ms = g.waiting_ms + r.age_ms;
    }
    r.lag = int64_t(v.steps) - median;
    r.rss_kb = v.rss_kb;
    r.culprit = hang && hang->rank == v.rank;
    bool straggler = std::find(slow.begin(), slow.end(), v.rank) != slow.end();
    r.mark = rank_mark(v, r.culprit, straggler);
    rows.push_back(std::move(r));
  }
  return rows;
}

// The state that ranks of one class share.
[[gnu::cold]] std::string class_key(const Row& r) {
  std::string mark = r.mark.substr(0, r.mark.find(':'));  // "starting: imports 1.2s" -> "starting"
  return mark + "|" + r.op + "|" + (r.culprit ? "c" : "");
}

// Rows of ranks in the same state merged, in the order of their first rank.
[[gnu::cold]] std::vector<Row> class_rows(const std::vector<Row>& ranks) {
  std::vector<Row> out;
  std::map<std::string, size_t> index;
  for (const auto& r : ranks) {
    auto [it, fresh] = index.emplace(class_key(r), out.size());
    if (fresh) {
      out.push_back(r);
      continue;
    }
    Row& c = out[it->second];
    double n = double(c.ranks.size());
    c.rate = (c.rate * n + r.rate) / (n + 1);
    c.ranks.push_back(r.ranks.front());
    c.nodes.insert(r.nodes.begin(), r.nodes.end());
    c.hosts.insert(r.hosts.begin(), r.hosts.end());
    c.step_min = std::min(c.step_min, r.step_min), c.step_max = std::max(c.step_max, r.step_max);
    c.seqs.insert(r.seqs.begin(), r.seqs.end());
    c.waiting_ms = std::max(c.waiting_ms, r.waiting_ms);
    if (std::abs(r.lag) > std::abs(c.lag)) c.lag = r.lag;
    c.rss_kb = std::max(c.rss_kb, r.rss_kb);
    c.age_ms = std::max(c.age_ms, r.age_ms);
    if (r.mark != c.mark) c.mark = class_key(r).substr(0, class_key(r).find('|'));
  }
  return out;
}

[[gnu::cold]] void sort_rows(std::vector<Row>& rows, TopSort sort) {
  auto key = [sort](const Row& r) -> int64_t {
    switch (sort) {
      case TopSort::kStep: return int64_t(r.step_min);
      case TopSort::kLag: return -std::abs(r.lag);
      case TopSort::kRank: break;
    }
    return 0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    return std::make_pair(key(a), a.ranks.front()) < std::make_pair(key(b), b.ranks.front());
  });
}

// `s` cut or padded to `w` characters ("+" marks a cut).
[[gnu::cold]] std::string fit(const std::string& s, size_t w) {
  if (s.size() <= w) return s + std::string(w - s.size(), ' ');
  return w == 0 ? "" : s.substr(0, w - 1) + "+";
}

constexpr size_t kNode = 4, kHost = 12, kStep = 9, kRate = 7, kLag = 6, kRss = 7, kColl = 20,
                 kWait = 7;

[[gnu::cold]] std::string table_line(size_t rank_w, const std::vector<std::string>& cells) {
  const size_t widths[] = {rank_w, kNode, kHost, kStep, kRate, kLag, kRss, kColl, kWait};
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    line += i < std::size(widths) ? fit(cells[i], widths[i]) + " " : cells[i];
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

// The STATE cell: the row's mark, and its data's age once that is more than
// `stale_ms` (0: never said).
[[gnu::cold]] std::string state_cell(const Row& r, int64_t stale_ms) {
  if (stale_ms <= 0 || r.age_ms <= stale_ms) return r.mark;
  std::string age = "data " + secs(r.age_ms) + " old";
  return r.mark.empty() ? age : r.mark + "; " + age;
}

[[gnu::cold]] std::string format_row(const Row& r, size_t rank_w, int64_t stale_ms) {
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.1f", r.rate);
  std::string step = std::to_string(r.step_min);
  if (r.step_max != r.step_min) step += "-" + std::to_string(r.step_max);
  std::string coll = r.op.empty() ? "-" : r.op;
  if (r.seqs.size() == 1) coll += " #" + std::to_string(*r.seqs.begin());
  std::string node = r.nodes.size() == 1 ? std::to_string(*r.nodes.begin())
                                         : std::to_string(r.nodes.size()) + "n";
  std::string host = r.hosts.size() == 1 ? *r.hosts.begin()
                                         : std::to_string(r.hosts.size()) + " hosts";
  std::string lag = (r.lag > 0 ? "+" : "") + std::to_string(r.lag);
  return table_line(rank_w, {compress_ranks(r.ranks), node, host, step, rate, lag, mib(r.rss_kb),
                             coll, r.waiting_ms >= 0 ? secs(r.waiting_ms) : "-",
                             state_cell(r, stale_ms)});
}

}  // namespace

[[gnu::cold]] TopSort next_sort(TopSort s) {
  switch (s) {
    case TopSort::kRank: return TopSort::kStep;
    case TopSort::kStep: return TopSort::kLag;
    case TopSort::kLag: break;
  }
  return TopSort::kRank;
}

[[gnu::cold]] std::string_view to_string(TopSort s) {
  switch (s) {
    case TopSort::kRank: return "rank";
    case TopSort::kStep: return "step";
    case TopSort::kLag: return "lag";
  }
  return "rank";
}

[[gnu::cold]] void StepRates::update(const JobState& job) {
  for (const auto& n : job.node_statuses) {
    if (!n) continue;
    for (const auto& v : n->ranks) {
      auto [it, fresh] = samples_.try_emplace(v.rank);
      Sample& s = it->second;
      bool same_run = !fresh && s.attempt == n->attempt && v.steps >= s.steps;
      int64_t t = n->sampled_ms > 0 ? n->sampled_ms : n->beat_ms;
      if (same_run && t <= s.beat_ms) continue;  // the same sample read again
      s.rate = same_run ? double(v.steps - s.steps) * 1000.0 / double(t - s.beat_ms) : -1;
      s.steps = v.steps, s.beat_ms = t, s.attempt = n->attempt;
    }
  }
}

[[gnu::cold]] std::map<int, double> StepRates::by_rank(const JobState& job) const {
  std::map<int, double> out;
  for (const auto& v : job_rank_views(job)) {
    auto it = samples_.find(v.rank);
    out[v.rank] = it != samples_.end() && it->second.rate >= 0 ? it->second.rate : v.steps_per_s;
  }
  return out;
}

[[gnu::cold]] void Frame::add(std::string line, bool emphasize) {
  lines.push_back(std::move(line));
  emphasized.push_back(emphasize);
}

namespace {

// "job 'x' at h:p: running, round 1, attempt 0, 2 node(s), 4 rank(s)".
[[gnu::cold]] std::string headline(const TopSnapshot& snap) {
  const JobState& job = snap.job;
  std::string s = "ccrun top: job '" + job.run_id + "' at " + snap.endpoint + ": " +
                  std::string(to_string(job.phase));
  if (job.round >= 0) s += ", round " + std::to_string(job.round);
  int attempt = -1, world = 0;
  for (const auto& n : job.node_statuses) {
    if (n) attempt = std::max(attempt, n->attempt), world += n->nproc;
  }
  if (attempt >= 0) s += ", attempt " + std::to_string(attempt);
  if (job.num_nodes > 0) {
    s += ", " + std::to_string(job.num_nodes) + " node(s), " + std::to_string(world) + " rank(s)";
  }
  return s;
}

// The lines between the headline and the table: what needs saying now.
[[gnu::cold]] void add_notices(const TopSnapshot& snap, Frame& f) {
  const JobState& job = snap.job;
  if (!snap.store_problem.empty()) f.add("the store stopped answering: " + snap.store_problem, true);
  if (!job.reason.empty()) f.add("reason: " + job.reason);
  if (const Failure* hang = current_hang(job)) {
    std::string verdict = hang->message.rfind("hang: ", 0) == 0 ? hang->message.substr(6)
                                                                 : hang->message;
    if (verdict.empty()) verdict = "rank " + std::to_string(hang->rank) + " is behind";
    f.add("HUNG: " + verdict, true);
  } else if (job.last_failure) {
    f.add("last failure: " + describe_failure(*job.last_failure));
  }
  bool over = job.phase == JobPhase::kFinished || job.phase == JobPhase::kFailed ||
              job.phase == JobPhase::kStopped;
  if (over) f.add("the job is over: the rows are its ranks' last heartbeats, not live");
  if (job.phase == JobPhase::kForming) {
    f.add("forming: " + std::to_string(job.joined) + " node(s) joined so far");
  }
}

[[gnu::cold]] std::string footer(TopSort sort) {
  return "sorted by " + std::string(to_string(sort)) + "; s: sort by " +
         std::string(to_string(next_sort(sort))) + ", q: quit";
}

// The table's rows, each with whether it is the culprit's: one per rank if
// `room` allows (0: no limit), else one per class.
[[gnu::cold]] std::vector<std::pair<std::string, bool>> table_rows(const TopSnapshot& snap, size_t room, TopSort sort,
                                    std::string& title) {
  std::vector<Row> rows = rank_rows(snap);
  if (room > 0 && rows.size() > room) rows = class_rows(rows);
  sort_rows(rows, sort);
  size_t rank_w = 4;
  for (const auto& r : rows) rank_w = std::max(rank_w, compress_ranks(r.ranks).size());
  rank_w = std::min<size_t>(rank_w, 16);
  title = table_line(rank_w, {"RANK", "NODE", "HOST", "STEP", "STEP/S", "LAG", "RSS MiB",
                              "COLLECTIVE", "FOR", "STATE"});
  std::vector<std::pair<std::string, bool>> out;
  for (const auto& r : rows) out.emplace_back(format_row(r, rank_w, snap.stale_after_ms), r.culprit);
  if (room > 0 && out.size() > room) {
    size_t hidden = out.size() - room + 1;
    out.resize(room - 1);
    out.emplace_back("... " + std::to_string(hidden) + " more rows: enlarge the terminal, or --once",
                     false);
  }
  return out;
}

}  // namespace

[[gnu::cold]] Frame render_frame(const TopSnapshot& snap, int width, int height, TopSort sort) {
  Frame f;
  f.add(headline(snap), true);
  add_notices(snap, f);
  size_t fixed = f.lines.size() + 1 + (snap.interactive ? 1 : 0);  // + titles, footer
  if ((width > 0 && width < kMinWidth) || (height > 0 && size_t(height) < fixed + 1) ||
      (height > 0 && height < kMinHeight)) {
    Frame small;
    small.add("terminal too small: " + std::to_string(width) + "x" + std::to_string(height) +
              ", ccrun top needs " + std::to_string(kMinWidth) + "x" +
              std::to_string(std::max<size_t>(kMinHeight, fixed + 1)) + " (or --once)");
    if (width > 0 && small.lines[0].size() > size_t(width)) small.lines[0].resize(size_t(width));
    return small;
  }
  size_t room = height > 0 ? size_t(height) - fixed : 0;
  std::string title;
  auto rows = table_rows(snap, room, sort, title);
  f.add(title, true);
  if (rows.empty()) f.add("(no rank has reported yet)");
  for (auto& [line, culprit] : rows) f.add(std::move(line), culprit);
  if (snap.interactive) f.add(footer(sort));
  if (width > 0) {
    for (auto& l : f.lines) {
      if (l.size() > size_t(width)) l.resize(size_t(width));
    }
  }
  return f;
}

[[gnu::cold]] std::string frame_ansi(const Frame& f, int width) {
  std::string out = "\x1b[H";
  for (size_t i = 0; i < f.lines.size(); ++i) {
    if (i) out += "\r\n";
    if (f.emphasized[i]) {
      // Reverse video across the whole width, as a bar.
      std::string bar = f.lines[i];
      if (width > 0 && bar.size() < size_t(width)) bar.resize(size_t(width), ' ');
      out += "\x1b[7m" + bar + "\x1b[0m";
    } else {
      out += f.lines[i] + "\x1b[K";
    }
  }
  out += "\x1b[J";
  return out;
}

[[gnu::cold]] std::string frame_plain(const Frame& f) {
  std::string out;
  for (const auto& l : f.lines) out += l + "\n";
  return out;
}

}  // namespace ccrun::launcher

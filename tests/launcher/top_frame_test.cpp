// `ccrun top`'s frames (launcher/top_frame.h) drawn from made-up job states:
// a row per rank when they fit, classes of ranks when they do not, the hang
// verdict and its culprit emphasized, the sorts, steps per second from two
// reads, a terminal too small, and no escape code in a plain frame.
#include "top_frame.h"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace ccrun;
using namespace ccrun::launcher;

namespace {

// A running job of `nodes` nodes with `per_node` ranks each, every rank at
// `steps`, beaten at `beat_ms`.
JobState job_of(int nodes, int per_node, uint64_t steps, int64_t beat_ms = 1000) {
  JobState job;
  job.run_id = "j1";
  job.phase = JobPhase::kRunning;
  job.round = 0;
  job.num_nodes = nodes;
  for (int n = 0; n < nodes; ++n) {
    NodeStatus s;
    s.host = "host" + std::to_string(n), s.node_rank = n, s.nproc = per_node;
    s.first_rank = n * per_node, s.beat_ms = beat_ms;
    for (int l = 0; l < per_node; ++l) {
      RankView v;
      v.rank = n * per_node + l, v.local_rank = l, v.node_rank = n, v.host = s.host;
      v.steps = steps, v.reporting = true, v.rss_kb = 2048 * 1024;
      v.startup.after_spawn_us = {1, 2, 3, 4, 5};
      s.ranks.push_back(v);
    }
    job.node_statuses.push_back(s);
  }
  return job;
}

RankView& rank(JobState& job, int r) {
  for (auto& n : job.node_statuses) {
    for (auto& v : n->ranks) {
      if (v.rank == r) return v;
    }
  }
  throw std::out_of_range("no such rank");
}

TopSnapshot snap_of(JobState job) {
  TopSnapshot s;
  s.job = std::move(job);
  s.endpoint = "127.0.0.1:29400";
  return s;
}

// The line that starts with `prefix`, "" when none.
std::string line_starting(const Frame& f, const std::string& prefix) {
  for (const auto& l : f.lines) {
    if (l.rfind(prefix, 0) == 0) return l;
  }
  return "";
}

}  // namespace

TEST_CASE("a job that fits gets a row per rank, with its node, host, step and RSS", "[top]") {
  Frame f = render_frame(snap_of(job_of(2, 2, 40)), 120, 40, TopSort::kRank);
  REQUIRE(f.lines.size() == f.emphasized.size());
  CHECK(f.lines[0].find("job 'j1' at 127.0.0.1:29400: running") != std::string::npos);
  CHECK(f.emphasized[0]);
  for (int r = 0; r < 4; ++r) {
    std::string row = line_starting(f, std::to_string(r) + " ");
    INFO(row);
    CHECK(row.find(r < 2 ? "host0" : "host1") != std::string::npos);
    CHECK(row.find(" 40 ") != std::string::npos);
    CHECK(row.find(" 2048 ") != std::string::npos);  // RSS in MiB
  }
  for (const auto& l : f.lines) CHECK(l.size() <= 120);
}

TEST_CASE("more ranks than lines collapse into classes of ranks in the same state", "[top]") {
  JobState job = job_of(2, 64, 100);
  rank(job, 63).steps = 90;  // behind, and starting again: another state
  rank(job, 63).startup.after_spawn_us = {1, 2, -1, -1, -1};
  Frame f = render_frame(snap_of(job), 120, 12, TopSort::kRank);
  CHECK(f.lines.size() <= 12);
  std::string all = line_starting(f, "0-62,64-127");
  CHECK(!all.empty());
  CHECK(all.find("2n") != std::string::npos);       // two nodes
  CHECK(all.find("2 hosts") != std::string::npos);
  std::string slow = line_starting(f, "63 ");
  CHECK(slow.find("starting") != std::string::npos);
  CHECK(slow.find("-10") != std::string::npos);     // 10 steps behind the median
}

TEST_CASE("a hang verdict is emphasized with its culprit's row", "[top]") {
  JobState job = job_of(1, 4, 20);
  Failure f;
  f.cause = FailureCause::kHang, f.rank = 2, f.node_rank = 0;
  f.message = "hang: rank 2 has not issued all_reduce #20 of the world group";
  job.last_failure = f;
  job.phase = JobPhase::kFailed;
  job.reason = "no restarts left";
  Frame fr = render_frame(snap_of(job), 120, 40, TopSort::kRank);
  auto verdict = std::find_if(fr.lines.begin(), fr.lines.end(), [](const std::string& l) {
    return l.rfind("HUNG: rank 2 has not issued all_reduce #20", 0) == 0;
  });
  REQUIRE(verdict != fr.lines.end());
  CHECK(fr.emphasized[size_t(verdict - fr.lines.begin())]);
  for (size_t i = 0; i < fr.lines.size(); ++i) {
    bool culprit_row = fr.lines[i].rfind("2 ", 0) == 0;
    if (culprit_row) CHECK(fr.emphasized[i]);
    if (culprit_row) CHECK(fr.lines[i].find("CULPRIT") != std::string::npos);
  }
  CHECK(!line_starting(fr, "the job is over").empty());
  // The hang of an earlier attempt is only the last failure.
  job.node_statuses[0]->attempt = 1;
  job.phase = JobPhase::kRunning;
  Frame later = render_frame(snap_of(job), 120, 40, TopSort::kRank);
  CHECK(line_starting(later, "HUNG").empty());
  CHECK(!line_starting(later, "last failure: node 0 rank 2").empty());
}

TEST_CASE("the sorts order rows by rank, by step, by distance from the median", "[top]") {
  JobState job = job_of(1, 4, 50);
  rank(job, 1).steps = 55, rank(job, 2).steps = 20, rank(job, 3).steps = 49;
  auto order = [&](TopSort s) {
    std::vector<char> firsts;
    for (const auto& l : render_frame(snap_of(job), 120, 40, s).lines) {
      if (!l.empty() && l[0] >= '0' && l[0] <= '9' && l[1] == ' ') firsts.push_back(l[0]);
    }
    return std::string(firsts.begin(), firsts.end());
  };
  CHECK(order(TopSort::kRank) == "0123");
  CHECK(order(TopSort::kStep) == "2301");
  CHECK(order(TopSort::kLag) == "2130");  // median 50: -30, +5, -1, 0
  CHECK(next_sort(TopSort::kRank) == TopSort::kStep);
  CHECK(next_sort(TopSort::kLag) == TopSort::kRank);
}

TEST_CASE("steps per second come from two beats' step counters", "[top]") {
  StepRates rates;
  JobState job = job_of(1, 2, 100, 10000);
  rank(job, 0).steps_per_s = 7;
  rates.update(job);
  CHECK(rates.by_rank(job).at(0) == Approx(7));  // one read: the agent's figure
  rates.update(job);                              // the same beat read again
  CHECK(rates.by_rank(job).at(0) == Approx(7));
  JobState next = job_of(1, 2, 150, 12000);        // 50 steps in 2 s
  rates.update(next);
  CHECK(rates.by_rank(next).at(0) == Approx(25));
  next.node_statuses[0]->attempt = 1;              // a restart counts from 0 again
  next.node_statuses[0]->beat_ms = 13000;
  rank(next, 0).steps = 3, rank(next, 0).steps_per_s = 1;
  rates.update(next);
  CHECK(rates.by_rank(next).at(0) == Approx(1));
}

TEST_CASE("a terminal too small gets one line saying so", "[top]") {
  for (auto [w, h] : {std::pair{40, 40}, std::pair{120, 3}}) {
    Frame f = render_frame(snap_of(job_of(1, 2, 1)), w, h, TopSort::kRank);
    REQUIRE(f.lines.size() == 1);
    CHECK(f.lines[0].rfind("terminal too small", 0) == 0);
    CHECK(int(f.lines[0].size()) <= w);
  }
}

TEST_CASE("a plain frame has no escape codes, the ANSI one redraws in place", "[top]") {
  TopSnapshot s = snap_of(job_of(1, 2, 1));
  s.interactive = true;
  s.store_problem = "connection refused";
  Frame f = render_frame(s, 80, 20, TopSort::kRank);
  CHECK(!line_starting(f, "the store stopped answering: connection refused").empty());
  CHECK(f.lines.back().find("q: quit") != std::string::npos);
  CHECK(frame_plain(f).find('\x1b') == std::string::npos);
  std::string ansi = frame_ansi(f, 80);
  CHECK(ansi.rfind("\x1b[H", 0) == 0);
  CHECK(ansi.find("\x1b[7m") != std::string::npos);
  CHECK(ansi.find('\n') != std::string::npos);
  // No frame line is longer than the terminal, so none wraps and scrolls it.
  for (const auto& l : f.lines) CHECK(l.size() <= 80);
}

TEST_CASE("a job with no rank reported yet says so", "[top]") {
  JobState job;
  job.run_id = "j1", job.phase = JobPhase::kForming, job.joined = 1;
  Frame f = render_frame(snap_of(job), 100, 20, TopSort::kRank);
  CHECK(!line_starting(f, "forming: 1 node(s) joined so far").empty());
  CHECK(!line_starting(f, "(no rank has reported yet)").empty());
}

TEST_CASE("a wait is shown as of the read, and data older than two refreshes says its age",
          "[top]") {
  JobState job = job_of(2, 1, 40, 10'000);
  job.node_statuses[0]->sampled_ms = 9'000;  // node 0 sampled 1 s before it published
  GroupView g;
  g.id = 0, g.size = 2, g.issued = 41, g.completed = 40, g.waiting_ms = 400;
  g.op = uint32_t(progress::Op::kAllReduce);
  rank(job, 0).groups = {g};
  TopSnapshot s = snap_of(job);
  s.now_ms = 12'000;        // read 3 s after node 0's sample, 2 s after node 1's beat
  s.stale_after_ms = 2'500;
  Frame f = render_frame(s, 160, 40, TopSort::kRank);
  std::string r0 = line_starting(f, "0 "), r1 = line_starting(f, "1 ");
  INFO(r0 << "\n" << r1);
  CHECK(r0.find("3.4s") != std::string::npos);  // 0.4 s waited when sampled, 3 s since
  CHECK(r0.find("data 3.0s old") != std::string::npos);
  CHECK(r1.find("old") == std::string::npos);  // 2 s: within two refreshes
  // Once the job is over its rows are its last records: no age is added.
  s.job.phase = JobPhase::kFinished;
  f = render_frame(s, 160, 40, TopSort::kRank);
  CHECK(line_starting(f, "0 ").find("0.4s") != std::string::npos);
  CHECK(line_starting(f, "0 ").find("old") == std::string::npos);
}

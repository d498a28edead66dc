// The run report's model (see run_report.h): the attempts, the steps-per-
// second lines and the root cause, derived from what the run directory held.
// The page itself is run_report_html.cpp's.
//
// Every function here runs only for `ccrun report`: all are [[gnu::cold]],
// out of the text pages that a launch touches.
#include "run_report.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <map>
#include <set>

#include "ccrun/name_table.h"
#include "job_reader.h"

namespace ccrun::launcher {
namespace {

using json = nlohmann::json;

[[gnu::cold]] int64_t event_time(const json& e) {
  const json& t = e.contains("time_ms") ? e["time_ms"] : json();
  return t.is_number() ? t.get<int64_t>() : 0;
}

[[gnu::cold]] int event_int(const json& e, const char* key, int fallback) {
  const json& v = e.contains(key) ? e[key] : json();
  return v.is_number() ? v.get<int>() : fallback;
}

[[gnu::cold]] void widen(AttemptView& a, int64_t t) {
  if (t <= 0) return;
  if (a.start_ms == 0 || t < a.start_ms) a.start_ms = t;
  a.end_ms = std::max(a.end_ms, t);
}

// What one event says of its attempt (or, for a restart, of the one before).
[[gnu::cold]] void apply_event(std::map<int, AttemptView>& by, const json& e) {
  std::string kind = e.value("event", std::string());
  int n = event_int(e, "attempt", 0);
  int64_t t = event_time(e);
  if (kind == "restart") {
    // Counted restarts number the next attempt; a membership change keeps it.
    int before = e.value("counts", true) ? n - 1 : n;
    if (by.count(before)) by[before].ended = "restarted", widen(by[before], t);
    if (before == n) return;
  }
  AttemptView& a = by[n];
  a.attempt = n;
  if (kind != "stop" && kind != "restart") widen(a, t);
  if (kind == "start") {
    int first = event_int(e, "first_rank", 0);
    for (int i = 0; i < event_int(e, "workers", 0); ++i) a.ranks.push_back(first + i);
  } else if (kind == "startup") {
    a.startup.push_back(StartupTimeline::from_json(e));
    a.ranks.push_back(a.startup.back().rank);
  } else if (kind == "failure") {
    a.failures.push_back(Failure::from_json(e));
    if (a.failures.back().rank >= 0) a.ranks.push_back(a.failures.back().rank);
  } else if (kind == "hang") {
    a.hang_headline = e.value("headline", std::string());
    a.hang_ms = t;
    if (e.contains("culprits") && e["culprits"].is_array()) {
      for (const auto& c : e["culprits"]) {
        if (c.is_number()) a.culprits.push_back(c.get<int>());
      }
    }
  } else if (kind == "stop") {
    int code = event_int(e, "exit_code", 1);
    a.ended = code == 0 ? "succeeded" : code > 128 ? "stopped" : "failed";
    widen(a, t);
  }
}

}  // namespace

[[gnu::cold]] std::vector<AttemptView> attempts_of(const RunData& run) {
  std::map<int, AttemptView> by;
  for (const auto& e : run.events) {
    if (e.is_object()) apply_event(by, e);
  }
  for (const auto& s : run.steps) {
    AttemptView& a = by[s.attempt];
    a.attempt = s.attempt;
    widen(a, s.time_ms);
    for (size_t i = 0; i < s.steps.size(); ++i) a.ranks.push_back(s.first_rank + int(i));
  }
  std::vector<AttemptView> out;
  for (auto& [n, a] : by) {
    std::sort(a.ranks.begin(), a.ranks.end());
    a.ranks.erase(std::unique(a.ranks.begin(), a.ranks.end()), a.ranks.end());
    // A hang ends its attempt with exit codes of ccrun's own stop: the hang
    // is what ended it, and is said first.
    if (!a.hang_headline.empty() && a.ended != "succeeded") {
      a.ended = a.ended.empty() ? "hung" : "hung, " + a.ended;
    }
    out.push_back(std::move(a));
  }
  return out;
}

namespace {

using Series = std::map<int, std::vector<std::pair<int64_t, double>>>;  // by rank

// Each rank's rate between its consecutive samples of one attempt; -1 marks
// a break (a new attempt, a rank not reporting).
[[gnu::cold]] Series rank_series(std::vector<StepSample> samples) {
  std::stable_sort(samples.begin(), samples.end(),
                   [](const StepSample& a, const StepSample& b) { return a.time_ms < b.time_ms; });
  struct Last {
    int64_t t = 0, steps = -1;
    int attempt = -1;
  };
  std::map<int, Last> last;
  Series out;
  for (const auto& s : samples) {
    for (size_t i = 0; i < s.steps.size(); ++i) {
      int rank = s.first_rank + int(i);
      Last& l = last[rank];
      bool joined = l.attempt == s.attempt && l.steps >= 0 && s.steps[i] >= l.steps &&
                    s.time_ms > l.t;
      double rate = joined ? double(s.steps[i] - l.steps) * 1000.0 / double(s.time_ms - l.t) : -1;
      out[rank].emplace_back(s.time_ms, rate);
      l = {s.time_ms, s.steps[i], s.attempt};
    }
  }
  return out;
}

[[gnu::cold]] double mean_rate(const std::vector<std::pair<int64_t, double>>& points) {
  double sum = 0;
  int n = 0;
  for (const auto& [t, r] : points) {
    if (r >= 0) sum += r, ++n;
  }
  return n ? sum / n : 0;
}

[[gnu::cold]] double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The median line of `ranks`, one point a second (the nodes sample apart).
[[gnu::cold]] RateLine median_line(const Series& series, std::vector<int> ranks) {
  std::map<int64_t, std::vector<double>> by_second;
  for (int r : ranks) {
    for (const auto& [t, rate] : series.at(r)) {
      auto& bucket = by_second[t / 1000];
      if (rate >= 0) bucket.push_back(rate);
    }
  }
  RateLine line;
  line.label = "ranks " + compress_ranks(ranks) + " (" + std::to_string(ranks.size()) + ", median)";
  line.ranks = std::move(ranks);
  for (auto& [sec, rates] : by_second) {
    line.points.emplace_back(sec * 1000, rates.empty() ? -1.0 : median(rates));
  }
  return line;
}

// Each rank's own time per step at each sample; -1 where unknown.
[[gnu::cold]] Series busy_series(std::vector<StepSample> samples) {
  std::stable_sort(samples.begin(), samples.end(),
                   [](const StepSample& a, const StepSample& b) { return a.time_ms < b.time_ms; });
  Series out;
  for (const auto& s : samples) {
    for (size_t i = 0; i < s.busy_ms.size(); ++i) out[s.first_rank + int(i)].emplace_back(s.time_ms, s.busy_ms[i]);
  }
  // A rank never known is no line.
  for (auto it = out.begin(); it != out.end();) {
    bool known = std::any_of(it->second.begin(), it->second.end(), [](const auto& p) { return p.second >= 0; });
    it = known ? std::next(it) : out.erase(it);
  }
  return out;
}

[[gnu::cold]] std::vector<RateLine> lines_of(Series series, size_t max_lines) {
  std::vector<RateLine> out;
  if (series.size() <= max_lines) {
    for (auto& [rank, points] : series) out.push_back({"rank " + std::to_string(rank), {rank}, points});
    return out;
  }
  // Many ranks: the ranks furthest from the median alone (stragglers show),
  // the rest as one median line.
  std::vector<double> means;
  for (const auto& [rank, points] : series) means.push_back(mean_rate(points));
  double mid = median(means);
  std::vector<std::pair<double, int>> far;  // (distance from the median, rank)
  for (const auto& [rank, points] : series) {
    double d = std::abs(mean_rate(points) - mid);
    if (d > 0.1 * mid) far.emplace_back(d, rank);
  }
  std::sort(far.rbegin(), far.rend());
  far.resize(std::min(far.size(), max_lines - 1));
  std::set<int> alone;
  for (const auto& [d, rank] : far) alone.insert(rank);
  std::vector<int> rest;
  for (const auto& [rank, points] : series) {
    if (!alone.count(rank)) rest.push_back(rank);
  }
  if (!rest.empty()) out.push_back(median_line(series, rest));
  for (int rank : alone) out.push_back({"rank " + std::to_string(rank), {rank}, series.at(rank)});
  return out;
}

}  // namespace

[[gnu::cold]] std::vector<RateLine> rate_lines(const std::vector<StepSample>& samples, size_t max_lines) {
  return lines_of(rank_series(samples), max_lines);
}

[[gnu::cold]] std::vector<RateLine> busy_lines(const std::vector<StepSample>& samples, size_t max_lines) {
  return lines_of(busy_series(samples), max_lines);
}

[[gnu::cold]] std::string root_cause_text(const RunData& run) {
  const json& rep = run.failure_report;
  std::optional<Failure> root;
  std::string reason;
  if (rep.is_object() && rep.contains("root_cause")) {
    root = Failure::from_json(rep["root_cause"]);
    reason = rep.value("reason", std::string());
  } else {
    for (const auto& a : attempts_of(run)) {
      if (!a.failures.empty() && !root) root = a.failures.front();  // the first failure
    }
  }
  if (!root) return "";
  std::string text = describe_failure(*root);
  if (root->cause != FailureCause::kNone) {
    text += "\ncause: " + std::string(name_of(kFailureCauseNames, root->cause, "?"));
  }
  if (!root->message.empty()) text += "\nmessage: " + root->message;
  if (!reason.empty()) text += "\nwhy the job was not restarted: " + reason;
  if (!root->stderr_tail.empty()) text += "\nlast stderr lines:\n" + root->stderr_tail;
  return text;
}

[[gnu::cold]] std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace ccrun::launcher

// The run report's page (see run_report.h): one HTML file with its CSS, its
// SVG charts and a few lines of JS inline, so that it can be mailed, kept
// with the run, or opened on a machine with no network. Every text from the
// run goes through html_escape.
//
// Every function here runs only for `ccrun report`: all are [[gnu::cold]],
// out of the text pages that a launch touches.
#include <algorithm>
#include <cstdio>
#include <map>

#include "ccrun/job_state.h"
#include "ccrun/startup_timeline.h"
#include "job_reader.h"
#include "run_report.h"

namespace ccrun::launcher {
namespace {

constexpr double kWidth = 1000, kLeft = 110, kRight = 20;
constexpr double kRowHeight = 16;
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};
// One colour per start-up phase (progress::Phase), then training.
constexpr const char* kPhaseColour[] = {"#c7c7c7", "#9edae5", "#aec7e8", "#ffbb78", "#dbdb8d"};
constexpr const char* kTrainingColour = "#98df8a";

[[gnu::cold]] std::string num(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// The run's time span, and where a moment falls on the charts' x axis.
struct TimeAxis {
  int64_t t0 = 0, t1 = 1;
  double x(int64_t t) const {
    double span = double(std::max<int64_t>(t1 - t0, 1));
    return kLeft + (kWidth - kLeft - kRight) * double(t - t0) / span;
  }
};

[[gnu::cold]] TimeAxis time_axis(const std::vector<AttemptView>& attempts,
                                 const std::vector<RateLine>& lines) {
  TimeAxis ax{INT64_MAX, 0};
  auto take = [&ax](int64_t t) {
    if (t <= 0) return;
    ax.t0 = std::min(ax.t0, t), ax.t1 = std::max(ax.t1, t);
  };
  for (const auto& a : attempts) {
    take(a.start_ms), take(a.end_ms);
    for (const auto& s : a.startup) take(s.spawned_ms);
  }
  for (const auto& l : lines) {
    for (const auto& [t, r] : l.points) take(t);
  }
  if (ax.t0 == INT64_MAX) ax = {0, 1};
  if (ax.t1 <= ax.t0) ax.t1 = ax.t0 + 1;
  return ax;
}

// Ticks along the bottom, in seconds from the run's first moment.
[[gnu::cold]] std::string time_ticks(const TimeAxis& ax, double y) {
  std::string s;
  double span_s = double(ax.t1 - ax.t0) / 1000.0;
  for (int i = 0; i <= 5; ++i) {
    int64_t t = ax.t0 + (ax.t1 - ax.t0) * i / 5;
    s += "<text class=\"tick\" x=\"" + num(ax.x(t)) + "\" y=\"" + num(y) + "\">" +
         num(span_s * i / 5, span_s < 10 ? 1 : 0) + " s</text>";
  }
  return s;
}

[[gnu::cold]] std::string rect(double x0, double x1, double y, double h, const std::string& fill,
                               const std::string& title) {
  return "<rect x=\"" + num(x0) + "\" y=\"" + num(y) + "\" width=\"" +
         num(std::max(x1 - x0, 1.0)) + "\" height=\"" + num(h) + "\" fill=\"" + fill +
         "\"><title>" + html_escape(title) + "</title></rect>";
}

// One rank's bar in one attempt: its start-up phases, then training, to
// the attempt's end (or its failure).
[[gnu::cold]] std::string rank_bar(const AttemptView& a, int rank, const TimeAxis& ax, double y) {
  int64_t end = a.end_ms;
  for (const auto& f : a.failures) {
    if (f.rank == rank && f.time_ms > 0) end = std::min(end, f.time_ms);
  }
  std::string head = "attempt " + std::to_string(a.attempt) + ", rank " + std::to_string(rank);
  auto it = std::find_if(a.startup.begin(), a.startup.end(),
                         [rank](const StartupTimeline& t) { return t.rank == rank; });
  if (it == a.startup.end() || it->spawned_ms <= 0) {
    return rect(ax.x(a.start_ms), ax.x(end), y, kRowHeight - 4, "#e0e0e0",
                head + ": running (no start-up timeline recorded)");
  }
  std::string s;
  int64_t from = it->spawned_ms;
  for (size_t p = 0; p < progress::kPhases; ++p) {
    if (it->after_spawn_us[p] < 0) continue;
    int64_t to = it->spawned_ms + it->after_spawn_us[p] / 1000;
    std::string what = agent::phase_name(progress::Phase(p));
    s += rect(ax.x(from), ax.x(to), y, kRowHeight - 4, kPhaseColour[p],
              head + ": " + what + " at " + num(double(it->after_spawn_us[p]) / 1e6, 3) +
                  " s after its spawn" + (it->warm ? " (warm)" : ""));
    from = to;
  }
  // After its start-up: training from its first step; a program without
  // steps runs from the last phase it reached.
  s += rect(ax.x(from), ax.x(end), y, kRowHeight - 4, it->done() ? kTrainingColour : "#c7c7c7",
            head + (it->done() ? ": training" : ": running (no first step)"));
  return s;
}

// Failures as red marks on their rank's row, the hang as a line.
[[gnu::cold]] std::string attempt_marks(const AttemptView& a, const std::map<int, double>& row_y,
                                        const TimeAxis& ax, double height) {
  std::string s;
  for (const auto& f : a.failures) {
    auto it = row_y.find(f.rank);
    double y = it == row_y.end() ? 20 : it->second;
    s += "<g class=\"failure\"><circle cx=\"" + num(ax.x(f.time_ms)) + "\" cy=\"" +
         num(y + kRowHeight / 2 - 2) + "\" r=\"5\" fill=\"#d62728\"><title>" +
         html_escape(describe_failure(f) + (f.message.empty() ? "" : ": " + f.message)) +
         "</title></circle></g>";
  }
  if (!a.hang_headline.empty()) {
    double x = ax.x(a.hang_ms > 0 ? a.hang_ms : a.end_ms);
    s += "<line class=\"hang\" x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"16\" y2=\"" +
         num(height) + "\" stroke=\"#ff7f0e\" stroke-width=\"2\" stroke-dasharray=\"4 2\"><title>hang: " +
         html_escape(a.hang_headline) + "</title></line>";
  }
  return s;
}

}  // namespace

namespace {

// The attempts' timeline: a row per rank, a band per attempt.
[[gnu::cold]] std::string timeline_svg(const std::vector<AttemptView>& attempts, const TimeAxis& ax) {
  std::vector<int> ranks;
  for (const auto& a : attempts) ranks.insert(ranks.end(), a.ranks.begin(), a.ranks.end());
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::map<int, double> row_y;
  for (size_t i = 0; i < ranks.size(); ++i) row_y[ranks[i]] = 24 + kRowHeight * double(i);
  double height = 24 + kRowHeight * double(ranks.size()) + 24;
  std::string s = "<svg id=\"timeline-chart\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
                  "\" width=\"" + num(kWidth) + "\" height=\"" + num(height) + "\">";
  for (const auto& a : attempts) {
    double x0 = ax.x(a.start_ms), x1 = ax.x(a.end_ms);
    s += "<g class=\"attempt\" data-attempt=\"" + std::to_string(a.attempt) + "\">";
    s += "<rect class=\"band\" x=\"" + num(x0) + "\" y=\"16\" width=\"" + num(std::max(x1 - x0, 1.0)) +
         "\" height=\"" + num(height - 40) + "\"/>";
    s += "<text class=\"band-label\" x=\"" + num(x0 + 2) + "\" y=\"12\">attempt " +
         std::to_string(a.attempt) + "</text>";
    for (int r : a.ranks) s += rank_bar(a, r, ax, row_y[r]);
    s += attempt_marks(a, row_y, ax, height - 24) + "</g>";
  }
  for (int r : ranks) {
    s += "<text class=\"row-label\" x=\"4\" y=\"" + num(row_y[r] + kRowHeight - 6) + "\">rank " +
         std::to_string(r) + "</text>";
  }
  return s + time_ticks(ax, height - 6) + "</svg>";
}

[[gnu::cold]] std::string timeline_legend() {
  std::string s = "<p class=\"legend\">";
  for (size_t p = 0; p < progress::kPhases; ++p) {
    s += "<span><i style=\"background:" + std::string(kPhaseColour[p]) + "\"></i>" +
         agent::phase_name(progress::Phase(p)) + "</span>";
  }
  return s + "<span><i style=\"background:" + kTrainingColour + "\"></i>training</span>" +
         "<span><i style=\"background:#e0e0e0\"></i>running (no timeline)</span>" +
         "<span><i style=\"background:#d62728;border-radius:50%\"></i>failure</span>" +
         "<span><i style=\"background:#ff7f0e\"></i>hang verdict</span></p>";
}

// A value over time (steps per second, ms per step): a polyline per rank
// (or class), broken at restarts; `id` names the chart, `unit` its ticks.
[[gnu::cold]] std::string lines_svg(const std::vector<RateLine>& lines, const TimeAxis& ax,
                                    const std::string& id, const char* unit) {
  const double height = 280, top = 10, bottom = height - 30;
  double most = 0;
  for (const auto& l : lines) {
    for (const auto& [t, r] : l.points) most = std::max(most, r);
  }
  if (most <= 0) most = 1;
  auto y = [&](double r) { return bottom - (bottom - top) * r / (most * 1.1); };
  std::string s = "<svg id=\"" + id + "-chart\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
                  "\" width=\"" + num(kWidth) + "\" height=\"" + num(height) + "\">";
  for (int i = 0; i <= 4; ++i) {
    double r = most * 1.1 * i / 4;
    s += "<line class=\"grid\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kWidth - kRight) + "\" y1=\"" +
         num(y(r)) + "\" y2=\"" + num(y(r)) + "\"/><text class=\"tick\" x=\"4\" y=\"" +
         num(y(r) + 4) + "\">" + num(r, r < 10 ? 1 : 0) + unit + "</text>";
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    s += "<g class=\"series\" data-series=\"" + std::to_string(i) + "\" stroke=\"" +
         kPalette[i % std::size(kPalette)] + "\"><title>" + html_escape(lines[i].label) + "</title>";
    std::string pts;
    for (const auto& [t, r] : lines[i].points) {
      if (r < 0) {
        if (!pts.empty()) s += "<polyline points=\"" + pts + "\"/>";
        pts.clear();
        continue;
      }
      pts += num(ax.x(t)) + "," + num(y(r)) + " ";
    }
    if (!pts.empty()) s += "<polyline points=\"" + pts + "\"/>";
    s += "</g>";
  }
  return s + time_ticks(ax, height - 8) + "</svg>";
}

[[gnu::cold]] std::string lines_legend(const std::vector<RateLine>& lines, const std::string& id) {
  std::string s = "<p class=\"legend\" id=\"" + id + "-legend\">";
  for (size_t i = 0; i < lines.size(); ++i) {
    s += "<span class=\"toggle\" data-chart=\"" + id + "\" data-series=\"" + std::to_string(i) +
         "\"><i style=\"background:" +
         kPalette[i % std::size(kPalette)] + "\"></i>" + html_escape(lines[i].label) + "</span>";
  }
  return s + "</p>";
}

}  // namespace

namespace {

[[gnu::cold]] std::string attempts_table(const std::vector<AttemptView>& attempts) {
  std::string s = "<table id=\"attempts\"><tr><th>attempt</th><th>started</th><th>lasted</th>"
                  "<th>ranks</th><th>ended</th><th>hang verdict</th><th>failures</th></tr>";
  for (const auto& a : attempts) {
    std::string failures;
    for (const auto& f : a.failures) {
      failures += html_escape(describe_failure(f)) + (f.message.empty() ? "" : ": ") +
                  html_escape(f.message) + "<br>";
    }
    s += "<tr data-attempt=\"" + std::to_string(a.attempt) + "\"><td>attempt " +
         std::to_string(a.attempt) + "</td><td>" + html_escape(format_utc(a.start_ms)) + "</td><td>" +
         num(double(a.end_ms - a.start_ms) / 1000.0) + " s</td><td>" +
         html_escape(compress_ranks(a.ranks)) + "</td><td>" + html_escape(a.ended) + "</td><td>" +
         html_escape(a.hang_headline) + "</td><td>" + failures + "</td></tr>";
  }
  return s + "</table>";
}

[[gnu::cold]] std::string stacks_section(const RunData& run) {
  if (run.incidents.empty()) return "";
  std::string s = "<section id=\"stacks\"><h2>Incidents: merged stacks</h2>";
  for (const auto& inc : run.incidents) {
    std::string headline;
    if (inc.verdict.is_object() && inc.verdict.contains("hang") && inc.verdict["hang"].is_object()) {
      headline = inc.verdict["hang"].value("headline", std::string());
    }
    s += "<h3>attempt " + std::to_string(inc.attempt) + (headline.empty() ? "" : ": hang: ") +
         html_escape(headline) + "</h3>";
    s += inc.merged_stacks.empty() ? "<p>(no stacks were taken)</p>"
                                   : "<pre class=\"stacks\">" + html_escape(inc.merged_stacks) + "</pre>";
  }
  return s + "</section>";
}

[[gnu::cold]] std::string summary_section(const RunData& run, const std::vector<AttemptView>& attempts) {
  std::string outcome = attempts.empty() ? "" : attempts.back().ended;
  std::vector<int> ranks;
  for (const auto& a : attempts) ranks.insert(ranks.end(), a.ranks.begin(), a.ranks.end());
  std::string s = "<section id=\"summary\"><h1>ccrun run report</h1><p class=\"sub\">" +
                  html_escape(run.title) + "</p><p>";
  s += std::to_string(attempts.size()) + " attempt(s), ranks " + html_escape(compress_ranks(ranks));
  if (!outcome.empty()) s += "; the job <b>" + html_escape(outcome) + "</b>";
  s += "</p></section>";
  std::string cause = root_cause_text(run);
  if (cause.empty()) return s;
  bool failed = run.failure_report.is_object();
  return s + "<section id=\"root-cause\"><h2>" +
         (failed ? "Root cause" : "First failure (the job went on)") + "</h2><pre>" +
         html_escape(cause) + "</pre></section>";
}

[[gnu::cold]] std::string warnings_section(const RunData& run) {
  if (run.warnings.empty()) return "";
  std::string s = "<section id=\"warnings\"><h2>Skipped while reading</h2><ul>";
  for (const auto& w : run.warnings) s += "<li>" + html_escape(w) + "</li>";
  return s + "</ul></section>";
}

constexpr const char* kStyle =
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1040px}"
    "h1{margin:0}.sub{color:#666;margin-top:2px}pre{background:#f6f6f6;padding:8px;"
    "overflow-x:auto;white-space:pre-wrap}svg{display:block;border:1px solid #ddd}"
    "svg text{font:11px sans-serif;fill:#333}.band{fill:#f3f3fb;stroke:#c8c8e0}"
    ".band-label{font-weight:bold}.grid{stroke:#eee}.series{fill:none;stroke-width:1.5}"
    ".series.off{display:none}.legend span{margin-right:12px;cursor:default;white-space:nowrap}"
    ".legend .toggle{cursor:pointer}.legend .toggle.off{opacity:.35}"
    ".legend i{display:inline-block;width:10px;height:10px;margin-right:4px}"
    "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 6px;"
    "text-align:left;vertical-align:top}";

// A click on a legend entry shows or hides its line.
constexpr const char* kScript =
    "document.querySelectorAll('.legend .toggle').forEach(function(e){"
    "e.addEventListener('click',function(){var on=e.classList.toggle('off');"
    "var g=document.querySelector('#'+e.dataset.chart+'-chart .series[data-series=\"'+e.dataset.series+'\"]');"
    "if(g)g.classList.toggle('off',on);});});";

}  // namespace

[[gnu::cold]] std::string build_report_html(const RunData& run) {
  std::vector<AttemptView> attempts = attempts_of(run);
  std::vector<RateLine> lines = rate_lines(run.steps);
  std::vector<RateLine> busy = busy_lines(run.steps);
  TimeAxis ax = time_axis(attempts, lines);
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ccrun report: " +
                  html_escape(run.title) + "</title><style>" + kStyle + "</style></head><body>";
  s += summary_section(run, attempts);
  s += "<section id=\"timeline\"><h2>Attempts</h2>" + timeline_svg(attempts, ax) + timeline_legend() +
       attempts_table(attempts) + "</section>";
  s += "<section id=\"rates\"><h2>Steps per second</h2>";
  if (lines.empty()) {
    s += "<p>No step samples (steps.jsonl): the ranks reported no progress, or the run predates "
         "it.</p>";
  } else {
    s += lines_svg(lines, ax, "rates", "/s") + lines_legend(lines, "rates");
  }
  s += "</section>";
  if (!busy.empty()) {
    s += "<section id=\"busy\"><h2>Own time per step</h2><p>Each rank's time per step outside "
         "collectives (ms): in a synchronous job every rank makes the same steps per second, and "
         "a straggler is the rank whose own time is longest.</p>" +
         lines_svg(busy, ax, "busy", " ms") + lines_legend(busy, "busy") + "</section>";
  }
  s += stacks_section(run) + warnings_section(run);
  return s + "<script>" + kScript + "</script></body></html>\n";
}

}  // namespace ccrun::launcher

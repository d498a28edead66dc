// The run report's page (launcher/run_report.h), built from made-up runs:
// both attempts on it, every rank, the root cause, the rate lines, and
// every text from the run escaped.
#include "run_report.h"

#include <catch2/catch.hpp>

using namespace ccrun::launcher;
using nlohmann::json;

namespace {

constexpr int64_t kT0 = 1'764'150'000'000;

json event(const char* name, int attempt, int64_t at_ms, json fields = json::object()) {
  fields["event"] = name;
  fields["attempt"] = attempt;
  fields["time_ms"] = kT0 + at_ms;
  return fields;
}

// Two ranks; attempt 0 fails (rank 1, exit 3, with markup in its stderr),
// attempt 1 runs on and fails for good.
RunData two_attempts() {
  RunData run;
  run.title = "/logs/job_0badc0de";
  json f{{"node_rank", 0}, {"rank", 1}, {"local_rank", 1}, {"exit_code", 3}, {"time_ms", kT0 + 4'000},
         {"attempt", 0}, {"message", "bad <value> & more"}, {"stderr_tail", "<script>x</script>"}};
  json startup{{"rank", 0}, {"spawned_ms", kT0 + 100}, {"after_spawn_s", {{"interpreter", 0.01},
                                                                          {"step", 0.5}}}};
  run.events = {event("start", 0, 100, {{"first_rank", 0}, {"workers", 2}}),
                event("startup", 0, 700, startup), event("failure", 0, 4'000, f),
                event("restart", 1, 4'100, {{"restarts_left", 0}}),
                event("start", 1, 4'200, {{"first_rank", 0}, {"workers", 2}}),
                event("stop", 1, 9'000, {{"exit_code", 1}})};
  for (int i = 0; i < 8; ++i) {
    int attempt = i < 4 ? 0 : 1;
    int64_t k = i < 4 ? i : i - 4;
    run.steps.push_back({kT0 + 500 + i * 1'000, attempt, 0, 0, {10 * k, 5 * k}, {}});
  }
  f["attempt"] = 1;
  run.failure_report = {{"root_cause", f}, {"reason", "no restarts left (--max-restarts 1)"}};
  run.incidents.push_back({0, json{{"hang", {{"headline", "rank 1 <stuck>"}}}},
                           "ranks 0 (1) <- train.py:3 in <module>\n"});
  return run;
}

}  // namespace

TEST_CASE("both attempts and every rank are on the page") {
  std::string html = build_report_html(two_attempts());
  CHECK(html.find("attempt 0") != std::string::npos);
  CHECK(html.find("attempt 1") != std::string::npos);
  CHECK(html.find(">rank 0<") != std::string::npos);
  CHECK(html.find(">rank 1<") != std::string::npos);
  CHECK(html.find("no restarts left (--max-restarts 1)") != std::string::npos);
  CHECK(html.find("id=\"rates-chart\"") != std::string::npos);
  CHECK(html.find("<polyline") != std::string::npos);
}

TEST_CASE("every text from the run is escaped") {
  std::string html = build_report_html(two_attempts());
  CHECK(html.find("<script>x</script>") == std::string::npos);
  CHECK(html.find("&lt;script&gt;x&lt;/script&gt;") != std::string::npos);
  CHECK(html.find("bad &lt;value&gt; &amp; more") != std::string::npos);
  CHECK(html.find("in &lt;module&gt;") != std::string::npos);
  CHECK(html.find("rank 1 &lt;stuck&gt;") != std::string::npos);
  CHECK(html_escape("a\"b'c") == "a&quot;b&#39;c");
}

TEST_CASE("the page loads nothing from elsewhere") {
  std::string html = build_report_html(two_attempts());
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find(" src=") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
}

TEST_CASE("attempts come from the events: a restart ends the one before") {
  auto attempts = attempts_of(two_attempts());
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].ended == "restarted");
  CHECK(attempts[0].ranks == std::vector<int>{0, 1});
  CHECK(attempts[0].failures.size() == 1);
  CHECK(attempts[0].startup.size() == 1);
  CHECK(attempts[1].ended == "failed");
  CHECK(attempts[1].start_ms == kT0 + 4'200);
}

TEST_CASE("rates per rank, broken at a restart") {
  auto lines = rate_lines(two_attempts().steps);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].label == "rank 0");
  // 10 steps a second for rank 0, 5 for rank 1; the first sample of each attempt breaks the line.
  CHECK(lines[0].points[0].second < 0);
  CHECK(lines[0].points[1].second == Approx(10));
  CHECK(lines[0].points[4].second < 0);
  CHECK(lines[1].points[2].second == Approx(5));
}

TEST_CASE("many ranks: a median line, and the straggler alone") {
  std::vector<StepSample> samples;
  for (int64_t k = 0; k < 5; ++k) {
    std::vector<int64_t> steps;
    for (int r = 0; r < 40; ++r) steps.push_back(r == 17 ? 3 * k : 10 * k);
    samples.push_back({kT0 + k * 1'000, 0, 0, 0, steps, {}});
  }
  auto lines = rate_lines(samples, 12);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].label == "ranks 0-16,18-39 (39, median)");
  CHECK(lines[0].points[1].second == Approx(10));
  CHECK(lines[1].label == "rank 17");
  CHECK(lines[1].points[1].second == Approx(3));
}

TEST_CASE("own time per step: the straggler of a synchronous job stands out") {
  std::vector<StepSample> samples;
  for (int64_t k = 0; k < 4; ++k) {
    // Every rank makes the same steps; rank 1 works 3x as long per step, and waits least.
    samples.push_back({kT0 + k * 1'000, 0, 0, 0, {10 * k, 10 * k, 10 * k}, {20, 61.5, k == 0 ? -1 : 20.5}});
  }
  auto rates = rate_lines(samples);
  REQUIRE(rates.size() == 3);
  CHECK(rates[0].points[1].second == rates[1].points[1].second);
  auto busy = busy_lines(samples);
  REQUIRE(busy.size() == 3);
  CHECK(busy[1].label == "rank 1");
  CHECK(busy[1].points[2].second == Approx(61.5));
  CHECK(busy[2].points[0].second < 0);  // unknown: a break
  RunData run;
  run.steps = samples;
  std::string html = build_report_html(run);
  CHECK(html.find("id=\"busy-chart\"") != std::string::npos);
  // Samples of an older agent, with no own times: no chart.
  for (auto& s : run.steps) s.busy_ms.clear();
  CHECK(busy_lines(run.steps).empty());
  CHECK(build_report_html(run).find("busy-chart") == std::string::npos);
}

TEST_CASE("a rank stopped for a hang says so, not its exit code") {
  RunData run;
  json f{{"node_rank", 0}, {"rank", 1}, {"local_rank", 1}, {"exit_code", -15}, {"time_ms", kT0 + 4'000},
         {"attempt", 0}, {"cause", "hang"}, {"message", "hang: rank 1 has not issued all_reduce #20"}};
  run.events = {event("start", 0, 100, {{"first_rank", 0}, {"workers", 2}}), event("failure", 0, 4'000, f)};
  std::string html = build_report_html(run);
  CHECK(html.find("node 0 rank 1: hung at ") != std::string::npos);
  CHECK(html.find("exit code") == std::string::npos);
}

TEST_CASE("a run that did not fail has no root cause") {
  RunData run;
  run.events = {event("start", 0, 0, {{"first_rank", 0}, {"workers", 1}}),
                event("stop", 0, 1'000, {{"exit_code", 0}})};
  CHECK(root_cause_text(run).empty());
  std::string html = build_report_html(run);
  CHECK(html.find("succeeded") != std::string::npos);
  CHECK(html.find("No step samples") != std::string::npos);
}

TEST_CASE("an attempt ended by a hang says the hang before its ranks' exits") {
  RunData run;
  json f{{"node_rank", 0}, {"rank", 0}, {"local_rank", 0}, {"exit_code", -15}, {"time_ms", kT0 + 4'100},
         {"attempt", 0}, {"message", "stopped by ccrun"}};
  run.events = {event("start", 0, 100, {{"first_rank", 0}, {"workers", 2}}),
                event("hang", 0, 4'000, {{"headline", "rank 1 has not issued all_reduce #20"},
                                         {"culprits", {1}}}),
                event("failure", 0, 4'100, f), event("stop", 0, 4'200, {{"exit_code", 1}})};
  auto attempts = attempts_of(run);
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].ended == "hung, failed");
  std::string html = build_report_html(run);
  auto row = html.substr(html.find("<tr data-attempt=\"0\""));
  auto verdict = row.find("rank 1 has not issued"), exit = row.find("exit code");
  REQUIRE(verdict != std::string::npos);
  REQUIRE(exit != std::string::npos);
  CHECK(verdict < exit);
  CHECK(html.find("the job <b>hung, failed</b>") != std::string::npos);
}

// `ccrun report`: a run's report page (see report_command.h). This file
// reads the run directories, tolerantly, into a RunData; the page is
// run_report.h's.
//
// Every function here runs only for `ccrun report`: all are [[gnu::cold]],
// out of the text pages that a launch touches.
#include "report_command.h"
#include "subcommand_usage.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "ccrun/error.h"
#include "help_formatter.h"
#include "run_report.h"

namespace ccrun::launcher {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// What `ccrun report` is asked.
struct ReportArgs {
  std::vector<std::string> run_dirs;
  std::string output;  // "": <first run dir>/report.html
};

[[gnu::cold]] std::unique_ptr<CLI::App> make_report_app(ReportArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Writes one self-contained HTML page about a run that had --log-dir: every attempt on a\n"
      "timeline (each rank's start-up phases, failures, restarts, the hang verdict), each rank's\n"
      "steps per second and own time per step over time (a straggler stands out), the root\n"
      "cause, and the merged stacks of a hang. RUN_DIR is the run's own directory,\n"
      "<log dir>/<run_id>_<hex> (logged at start: \"ccrun: logs in ...\"); give one per node\n"
      "to merge the nodes of one run. Exits 0 when written, 1 when the directory cannot be\n"
      "read or the page written",
      "ccrun report");
  auto help = std::make_shared<HelpFormatter>();
  help->column_width(32);
  app->formatter(help);
  app->add_option("RUN_DIR", a.run_dirs, "the run's directory (one per node of the run)")
      ->required()
      ->type_name("RUN_DIR...");
  app->add_option("-o,--output", a.output, "where the page goes (default RUN_DIR/report.html)")
      ->type_name("FILE");
  return app;
}

[[gnu::cold]] std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream o;
  o << in.rdbuf();
  return o.str();
}

// Each JSON object line of `file` to `take`; a line that is not one is
// skipped and said in `warnings`.
template <typename Take>
[[gnu::cold]] void read_json_lines(const fs::path& file, std::vector<std::string>& warnings, Take take) {
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && take(j)) continue;
    warnings.push_back(file.string() + ":" + std::to_string(n) + ": not a " +
                       (j.is_discarded() ? "JSON line" : "record of this file") +
                       " (a line cut short by a crash, or an edit), skipped");
  }
}

[[gnu::cold]] bool take_sample(const json& j, std::vector<StepSample>& out) {
  if (!j.contains("time_ms") || !j["time_ms"].is_number() || !j.contains("steps") ||
      !j["steps"].is_array()) {
    return false;
  }
  StepSample s;
  s.time_ms = j["time_ms"].get<int64_t>();
  s.attempt = j.value("attempt", 0), s.node = j.value("node", 0);
  s.first_rank = j.value("first_rank", 0);
  for (const auto& v : j["steps"]) s.steps.push_back(v.is_number() ? v.get<int64_t>() : -1);
  if (j.contains("busy_ms") && j["busy_ms"].is_array()) {
    for (const auto& v : j["busy_ms"]) s.busy_ms.push_back(v.is_number() ? v.get<double>() : -1);
  }
  out.push_back(std::move(s));
  return true;
}

[[gnu::cold]] void read_incidents(const fs::path& dir, RunData& run) {
  static const std::regex kName("incident_(\\d+)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !std::regex_match(name, m, kName)) continue;
    IncidentData inc;
    inc.attempt = std::stoi(m[1].str());
    inc.verdict = json::parse(read_text(entry.path() / "verdict.json"), nullptr, false);
    if (inc.verdict.is_discarded()) {
      inc.verdict = nullptr;
      run.warnings.push_back((entry.path() / "verdict.json").string() + ": missing or not JSON");
    }
    inc.merged_stacks = read_text(entry.path() / "stacks" / "merged.txt");
    run.incidents.push_back(std::move(inc));
  }
  std::sort(run.incidents.begin(), run.incidents.end(),
            [](const IncidentData& a, const IncidentData& b) { return a.attempt < b.attempt; });
}

// The run directories below `dir` (a --log-dir holds one per run), for the
// error's fix; at most a few.
[[gnu::cold]] std::string runs_below(const fs::path& dir) {
  std::string names;
  std::error_code ec;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (fs::exists(entry.path() / "events.jsonl") && n++ < 3) names += "\n  " + entry.path().string();
  }
  return names;
}

[[gnu::cold]] void check_run_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    throw Error(dir.string() + " does not exist; give the directory of a run that had --log-dir "
                "(<log dir>/<run_id>_<hex>, logged at start as \"ccrun: logs in ...\")");
  }
  if (!fs::is_directory(dir, ec)) throw Error(dir.string() + " is not a directory; give a run's directory");
  if (fs::exists(dir / "events.jsonl") || fs::exists(dir / "steps.jsonl")) return;
  std::string below = runs_below(dir);
  throw Error(dir.string() + " is not a run directory: it has no events.jsonl or steps.jsonl; " +
              (below.empty() ? std::string("give <log dir>/<run_id>_<hex>, the folder a run with "
                                           "--log-dir made (logged at start as \"ccrun: logs in ...\")")
                             : "it looks like a --log-dir; give one of its runs:" + below));
}

[[gnu::cold]] void read_run_dir(const fs::path& dir, RunData& run) {
  check_run_dir(dir);
  run.title += (run.title.empty() ? "" : ", ") + dir.string();
  read_json_lines(dir / "events.jsonl", run.warnings, [&run](const json& j) {
    run.events.push_back(j);
    return true;
  });
  read_json_lines(dir / "steps.jsonl", run.warnings,
                  [&run](const json& j) { return take_sample(j, run.steps); });
  fs::path report = dir / "failure_report.json";
  if (fs::exists(report) && run.failure_report.is_null()) {
    run.failure_report = json::parse(read_text(report), nullptr, false);
    if (!run.failure_report.is_object()) {
      run.failure_report = nullptr;
      run.warnings.push_back(report.string() + ": not a JSON object, skipped");
    }
  }
  read_incidents(dir, run);
}

[[gnu::cold]] void write_page(const fs::path& file, const std::string& html) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << html;
  out.close();
  if (!out) {
    throw Error("cannot write " + file.string() + ": " + std::strerror(errno) +
                "; give --output FILE in a writable directory");
  }
}

}  // namespace

[[gnu::cold]] std::vector<FlagCompletion> report_flag_completions() {
  ReportArgs a;
  auto app = make_report_app(a);
  std::vector<FlagCompletion> out;
  for (const CLI::Option* o : app->get_options()) {
    if (o->nonpositional()) out.push_back(flag_completion(*o));
  }
  return out;
}

[[gnu::cold]] int run_report_command(const std::vector<std::string>& args) {
  ReportArgs a;
  auto app = make_report_app(a);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app->help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::fputs(subcommand_usage_error("report", *app, e, args).c_str(), stderr);
    return kExitUsage;
  }
  try {
    RunData run;
    for (const auto& dir : a.run_dirs) read_run_dir(dir, run);
    for (const auto& w : run.warnings) std::fprintf(stderr, "ccrun report: warning: %s\n", w.c_str());
    fs::path out = a.output.empty() ? fs::path(a.run_dirs.front()) / "report.html" : fs::path(a.output);
    write_page(out, build_report_html(run));
    std::printf("ccrun report: wrote %s\n", out.c_str());
    return kExitOk;
  } catch (const Error& e) {
    std::fprintf(stderr, "ccrun report: %s\n", e.what());
    return kExitFailed;
  }
}

}  // namespace ccrun::launcher

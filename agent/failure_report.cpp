// Failure records and the failure report (see failure_report.h).
#include "failure_report.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ccrun/signal_names.h"

namespace ccrun::agent {
using json = nlohmann::json;

std::string read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    // torch's @record: {"message": {"message": "...", "extraInfo": {"py_callstack": ...}}}
    const json& m = j.contains("message") ? j["message"] : j;
    if (m.is_string()) return m.get<std::string>();
    std::string out = m.value("message", "");
    if (m.contains("extraInfo") && m["extraInfo"].contains("py_callstack")) {
      out += "\n" + m["extraInfo"]["py_callstack"].get<std::string>();
    }
    return out;
  } catch (const json::exception&) {
    return ss.str().substr(0, 4000);
  }
}

namespace {

void sort_by_time(std::vector<Failure>& fs) {
  std::stable_sort(fs.begin(), fs.end(),
                   [](const Failure& a, const Failure& b) { return a.time_ms < b.time_ms; });
}

std::string describe_exit(const Failure& f) {
  switch (f.cause) {
    case FailureCause::kHang:
      return "hang (no progress: the verdict and every rank's stacks are logged above)";
    case FailureCause::kTimer:
      return "torch FileTimer expired (" + signal_name(f.signal) + ")";
    case FailureCause::kOom:
      return "killed by the kernel's OOM killer (" + signal_name(f.signal) + ")";
    case FailureCause::kNone:
      break;
  }
  if (f.signal) return signal_name(f.signal) + " (signal " + std::to_string(f.signal) + ")";
  if (f.rank < 0) return "node failure";
  return "exit code " + std::to_string(f.exit_code);
}

void append_failure(std::ostringstream& o, const Failure& f) {
  o << "  node      : " << f.node_rank;
  if (!f.hostname.empty() || !f.addr.empty()) o << " (" << f.hostname << " " << f.addr << ")";
  o << "\n";
  if (f.rank >= 0) {
    o << "  rank      : " << f.rank << " (local_rank " << f.local_rank << ")\n";
    o << "  pid       : " << f.pid << "\n";
  }
  o << "  cause     : " << describe_exit(f) << "\n";
  o << "  time      : " << format_utc(f.time_ms, /*millis=*/true) << " (attempt " << f.attempt
    << ")\n";
  std::string detail = !f.message.empty() ? f.message : f.stderr_tail;
  if (!detail.empty()) {
    o << "  " << (!f.message.empty() ? "error" : "last stderr lines") << ":\n";
    std::istringstream lines(detail);
    for (std::string l; std::getline(lines, l);) o << "    " << l << "\n";
  }
}

}  // namespace

std::string format_report(const std::string& run_id, std::vector<Failure> failures) {
  sort_by_time(failures);
  std::ostringstream o;
  std::string rule(72, '=');
  o << rule << "\nccrun: job '" << run_id << "' failed\n" << rule << "\n";
  if (failures.empty()) {
    o << "  (no failure record reached this node)\n";
  } else {
    o << "Root cause (first failure):\n";
    append_failure(o, failures[0]);
    if (failures.size() > 1) {
      o << "Other failures:\n";
      for (size_t i = 1; i < failures.size(); ++i) {
        o << "  [" << i << "] node " << failures[i].node_rank << " rank " << failures[i].rank
          << ": " << describe_exit(failures[i]) << " at "
          << format_utc(failures[i].time_ms, /*millis=*/true) << "\n";
      }
    }
  }
  o << rule << "\n";
  return o.str();
}

std::string report_json(const std::string& run_id, std::vector<Failure> final,
                        std::vector<Failure> all, const std::string& reason) {
  sort_by_time(final);
  sort_by_time(all);
  json j{{"run_id", run_id}, {"reason", reason}, {"failures", json::array()}};
  for (const auto& f : all) j["failures"].push_back(f.to_json());
  if (!final.empty()) j["root_cause"] = final[0].to_json();
  int attempts = 0;
  for (const auto& f : all) attempts = std::max(attempts, f.attempt + 1);
  j["attempts"] = attempts;
  return j.dump(2);
}

std::string own_error_record(const std::string& type, const std::string& what,
                             int64_t unix_seconds) {
  json message{{"message", type + ": " + what},
               {"extraInfo",
                {{"py_callstack", what}, {"timestamp", std::to_string(unix_seconds)}}}};
  return json{{"message", message}}.dump();
}

Failure root_cause(std::vector<Failure> failures) {
  sort_by_time(failures);
  return failures.empty() ? Failure{} : failures[0];
}

std::string launcher_error_record(const Failure& root, const std::string& worker_record) {
  // torch's ProcessFailure.exitcode: the exit status, or -N for signal N.
  int code = root.signal ? -root.signal : root.exit_code;
  json j = json::parse(worker_record, nullptr, false);
  if (j.is_object()) {
    // torch's dump_error_file: the child's record, its errorCode overridden
    // (unless "message" is a plain string, torch's newer format).
    if (code != 0 && j.contains("message") && j["message"].is_object()) {
      j["message"]["errorCode"] = code;
    }
    return j.dump();
  }
  std::string what = root.rank >= 0 ? "rank " + std::to_string(root.rank) + " (local_rank " +
                                          std::to_string(root.local_rank) + ")"
                                    : "node " + std::to_string(root.node_rank);
  std::string detail = !root.message.empty() ? root.message : root.stderr_tail;
  json message{{"message", "ChildFailedError: " + what + " on " + root.hostname + ": " +
                               describe_exit(root)},
               {"extraInfo",
                {{"py_callstack", detail}, {"timestamp", std::to_string(root.time_ms / 1000)}}}};
  if (code != 0) message["errorCode"] = code;
  return json{{"message", message}}.dump();
}

std::string interpreter_lines(const std::string& python, const std::vector<Failure>& failures) {
  if (python.empty()) return "";
  std::string out = "  python    : " + python + " (PYTHON_EXEC, else python3 on PATH)\n";
  for (const auto& f : failures) {
    const std::string& text = f.message.empty() ? f.stderr_tail : f.message;
    size_t at = text.find("ModuleNotFoundError: No module named ");
    if (at == std::string::npos) continue;
    size_t end = text.find('\n', at);
    out += "  hint      : " + text.substr(at, end == std::string::npos ? end : end - at) + " in " +
           python + "; set PYTHON_EXEC to the interpreter that has it (your venv's or conda's)\n";
    break;
  }
  return out;
}

}  // namespace ccrun::agent

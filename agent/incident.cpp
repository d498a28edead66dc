// One folder of evidence per failed attempt (see incident.h).
#include "incident.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "ccrun/fnv1a.h"
#include "ccrun/rank_progress.h"

namespace ccrun::agent {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr size_t kLogLines = 50;

void write(const fs::path& p, const std::string& text) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) spdlog::warn("ccrun: cannot write {} (the incident's folder is best effort)", p.string());
}

// The end of `p` that holds its last `n` lines, read backwards from its end
// in 64 KiB steps: a log of gigabytes costs what its last lines do.
std::string read_end(const fs::path& p, size_t n) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  std::streamoff at = in ? std::streamoff(in.tellg()) : 0;
  std::string text;
  while (at > 0 && size_t(std::count(text.begin(), text.end(), '\n')) <= n) {
    std::streamoff step = std::min<std::streamoff>(at, 64 << 10);
    at -= step;
    std::string chunk(size_t(step), '\0');
    in.seekg(at);
    in.read(chunk.data(), step);
    text.insert(0, chunk);
  }
  return text;
}

std::string log_tail(const fs::path& p, const char* name) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return "";
  std::string tail = last_lines(read_end(p, kLogLines), kLogLines);
  return "== " + std::string(name) + " (last " + std::to_string(kLogLines) + " lines) ==\n" + tail +
         (tail.empty() || tail.back() == '\n' ? "" : "\n");
}

void write_stacks(const fs::path& dir, const json& stacks) {
  if (!stacks.is_array() || stacks.empty()) return;
  std::string merged;
  for (const auto& c : stack_classes(stacks)) {
    merged += c.title() + "\n" + c.shown() + "\n";
  }
  write(dir / "merged.txt", merged);
  for (const auto& s : stacks) {
    std::string r = std::to_string(s.value("rank", -1));
    if (!s.value("python", std::string()).empty()) {
      write(dir / ("rank_" + r + ".python.txt"), s.value("python", std::string()));
    }
    write(dir / ("rank_" + r + ".native.txt"), s.value("native", std::string()));
  }
}

// The job's stacks merged across its nodes (the report's hang.job_stacks,
// job_stacks.h: JobStacks::to_json), and the nodes whose share did not come.
void write_job_stacks(const fs::path& dir, const json& hang) {
  const json& job = hang["job_stacks"];
  auto classes = job.find("classes");
  if (classes == job.end() || !classes->is_array()) return;
  std::string merged;
  for (const auto& c : *classes) merged += c.value("title", std::string()) + "\n" + c.value("stack", std::string()) + "\n";
  auto missing = hang.find("missing_nodes");
  if (missing != hang.end() && missing->is_array() && !missing->empty()) {
    auto nodes = missing->get<std::vector<int>>();
    merged += std::string(nodes.size() == 1 ? "(the stacks of node " : "(the stacks of nodes ") +
              compress_ranks(nodes) + " did not come: in " + (nodes.size() == 1 ? "its" : "their") +
              " own incident folder)\n";
  }
  write(dir / "job_merged.txt", merged);
}

// torch's flight-recorder dumps, copied as torch wrote them.
void copy_flight_recorders(const fs::path& dir, const json& stacks) {
  if (!stacks.is_array()) return;
  for (const auto& s : stacks) {
    fs::path trace = s.value("nccl_trace", std::string());
    std::error_code ec;
    if (trace.empty() || !fs::exists(trace, ec)) continue;
    fs::create_directories(dir, ec);
    fs::copy_file(trace, dir / trace.filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) spdlog::warn("ccrun: cannot copy {}: {}", trace.string(), ec.message());
  }
}

}  // namespace

std::string StackClass::title() const {
  std::string t = (ranks.size() == 1 ? "rank " : "ranks ") + compress_ranks(ranks);
  if (ranks.size() > 1) t += " (" + std::to_string(ranks.size()) + ")";
  if (!where.empty()) t += " <- " + where;
  return t;
}

std::string normalize_stack(const std::string& stack) {
  static const std::regex hex("0x[0-9a-fA-F]+");
  static const std::regex ids("\\b(PID|TID|pid|tid) [0-9]+");
  return std::regex_replace(std::regex_replace(stack, hex, "0x?"), ids, "$1 ?");
}

bool is_library_file(const std::string& path) {
  static const std::regex python_lib("(^|/)lib(64)?/python[0-9][0-9.]*/");
  if (path.rfind("<frozen ", 0) == 0) return true;
  if (fs::path(path).filename() == "ccrun_progress.py") return true;
  return path.find("/site-packages/") != std::string::npos ||
         path.find("/dist-packages/") != std::string::npos || std::regex_search(path, python_lib);
}

std::string program_frame(const std::string& python) {
  static const std::regex frame("File \"([^\"]*)\", line ([0-9]+) in (\\S+)");
  size_t from = python.find("Current thread");
  if (from == std::string::npos) from = 0;
  size_t to = python.find("\n\n", from);  // the thread's frames end at a blank line
  std::string thread = python.substr(from, to == std::string::npos ? std::string::npos : to - from);
  std::string first;
  for (std::sregex_iterator it(thread.begin(), thread.end(), frame), end; it != end; ++it) {
    const std::smatch& m = *it;
    std::string text = fs::path(m[1].str()).filename().string() + ":" + m[2].str() + " in " + m[3].str();
    if (!is_library_file(m[1].str())) return text;
    if (first.empty()) first = text;
  }
  return first;
}

std::vector<StackClass> stack_classes(const json& stacks) {
  std::vector<StackClass> out;
  std::map<std::string, size_t> by_key;
  if (!stacks.is_array()) return out;
  for (const auto& s : stacks) {
    std::string python = s.value("python", std::string());
    std::string native = s.value("native", std::string());
    std::string key = normalize_stack(python.empty() ? native : python);
    auto [it, fresh] = by_key.try_emplace(key, out.size());
    if (fresh) out.push_back({{}, {}, python, native, program_frame(python), fnv1a64(key)});
    StackClass& c = out[it->second];
    c.ranks.push_back(s.value("rank", -1));
    c.pids.push_back(s.value("pid", 0));
  }
  return out;
}

std::string last_lines(const std::string& text, size_t n) {
  if (n == 0) return "";
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;  // the last line's own newline
  size_t pos = end;
  for (size_t lines = 0; pos > 0; --pos) {
    if (text[pos - 1] == '\n' && ++lines == n) break;
  }
  return text.substr(pos);
}

fs::path write_incident(const fs::path& run_root, const IncidentMaterial& m) {
  fs::path dir = run_root / ("incident_" + std::to_string(m.attempt));
  json verdict{{"attempt", m.attempt}, {"failures", m.failures}};
  if (!m.hang.is_null()) {
    verdict["hang"] = m.hang;
    verdict["hang"].erase("stacks");  // they are under stacks/
    verdict["hang"].erase("job_stacks");
  }
  write(dir / "verdict.json", verdict.dump(2) + "\n");
  if (!m.hang.is_null() && m.hang.contains("stacks")) {
    write_stacks(dir / "stacks", m.hang["stacks"]);
    copy_flight_recorders(dir / "nccl_flight_recorder", m.hang["stacks"]);
  }
  if (!m.hang.is_null() && m.hang.contains("job_stacks")) write_job_stacks(dir / "stacks", m.hang);
  for (const auto& r : m.logs) {
    std::string text = log_tail(r.stdout_log, "stdout") + log_tail(r.stderr_log, "stderr");
    if (!text.empty()) write(dir / "logs" / ("rank_" + std::to_string(r.rank) + ".log"), text);
  }
  if (!m.nccl_ras.empty()) write(dir / "nccl_ras.txt", m.nccl_ras);
  return dir;
}

}  // namespace ccrun::agent

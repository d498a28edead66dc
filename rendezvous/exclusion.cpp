// Nodes kept out of a job for a cool-down, and their records in the job's
// store (see ccrun/exclusion.h). Every function here is [[gnu::cold]]: they
// run only when a node is excluded or its exclusions are read, so the linker
// keeps them out of the text pages every launch touches (its RSS target).
#include "ccrun/exclusion.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <random>

#include "ccrun/error.h"
#include "ccrun/job_keys.h"
#include "ccrun/job_state.h"

namespace ccrun {

using json = nlohmann::json;
using std::chrono::milliseconds;

[[gnu::cold]] milliseconds exclusion_cooldown(milliseconds base, int offences) {
  milliseconds cap = kMaxCooldown;
  milliseconds d = std::min(base, cap);
  for (int i = 1; i < offences && d < cap; ++i) d = std::min(d * 2, cap);
  return d;
}

[[gnu::cold]] json Exclusion::to_json() const {
  return json{{"host", host}, {"reason", reason}, {"since_ms", since_ms},
              {"until_ms", until_ms}, {"offences", offences}};
}

[[gnu::cold]] Exclusion Exclusion::from_json(const json& j) {
  Exclusion e;
  if (!j.is_object()) return e;
  e.host = j.value("host", std::string());
  e.reason = j.value("reason", std::string());
  e.since_ms = j.value("since_ms", int64_t(0));
  e.until_ms = j.value("until_ms", int64_t(0));
  e.offences = j.value("offences", 0);
  return e;
}

[[gnu::cold]] const Exclusion& ExclusionList::add(const std::string& host, const std::string& reason,
                                    int64_t now_ms, milliseconds base) {
  Exclusion& e = by_host[host];
  e.host = host;
  e.reason = reason;
  e.offences += 1;
  e.since_ms = now_ms;
  e.until_ms = now_ms + exclusion_cooldown(base, e.offences).count();
  return e;
}

[[gnu::cold]] std::optional<Exclusion> ExclusionList::active(const std::string& host, int64_t now_ms) const {
  auto it = by_host.find(host);
  if (it == by_host.end() || it->second.until_ms <= now_ms) return std::nullopt;
  return it->second;
}

[[gnu::cold]] std::vector<Exclusion> ExclusionList::all_active(int64_t now_ms) const {
  std::vector<Exclusion> out;
  for (const auto& [host, e] : by_host) {
    if (e.until_ms > now_ms) out.push_back(e);
  }
  std::sort(out.begin(), out.end(),
            [](const Exclusion& a, const Exclusion& b) { return a.until_ms < b.until_ms; });
  return out;
}

[[gnu::cold]] std::string ExclusionList::to_json() const {
  json hosts = json::object();
  for (const auto& [host, e] : by_host) hosts[host] = e.to_json();
  json j{{"hosts", hosts}};
  if (write != 0) j["write"] = write;
  return j.dump();
}

[[gnu::cold]] ExclusionList ExclusionList::from_json(const std::string& text) {
  ExclusionList list;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("hosts") || !j["hosts"].is_object()) return list;
  for (const auto& [host, e] : j["hosts"].items()) {
    Exclusion x = Exclusion::from_json(e);
    x.host = host;
    list.by_host[host] = x;
  }
  return list;
}

[[gnu::cold]] Exclusion exclude_node(store::Store& store, const std::string& run_id, const std::string& host,
                       const std::string& reason, milliseconds base_cooldown) {
  std::random_device rd;
  Exclusion e;
  // Another node may be adding its own.
  (void)store::update_by_compare_set(store, JobKeys(run_id).exclusions(), [&](const std::string& before) {
    ExclusionList list = ExclusionList::from_json(before);
    e = list.add(host, reason, wall_clock_ms(), base_cooldown);
    // This write's own mark: two nodes adding the same host in the same
    // millisecond would write the same text, and each take the other's
    // success for its own.
    list.write = (uint64_t(rd()) << 32 | rd()) | 1;
    return std::optional<std::string>(list.to_json());
  });
  return e;
}

[[gnu::cold]] ExclusionList read_exclusions(store::Store& store, const std::string& run_id) {
  std::string key = JobKeys(run_id).exclusions();
  return ExclusionList::from_json(store.check({key}) ? store.get(key) : "");
}

[[gnu::cold]] std::string describe(const Exclusion& e, int64_t now_ms) {
  std::string times = e.offences == 1 ? "first offence" : "offence " + std::to_string(e.offences);
  std::string left = e.until_ms > now_ms
                         ? format_duration(milliseconds(e.until_ms - now_ms)) + " from now"
                         : "ended";
  return "until " + format_utc(e.until_ms) + " (" + left + "; " + times + "): " + e.reason;
}

namespace fs = std::filesystem;

[[gnu::cold]] ExclusionList read_exclusion_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return ExclusionList::from_json(text.str());
}

[[gnu::cold]] std::string record_exclusion(const fs::path& file, const Exclusion& e) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return "cannot make " + file.parent_path().string() + ": " + ec.message();
  ExclusionList list = read_exclusion_file(file);
  list.by_host[e.host] = e;
  fs::path temp = file;
  temp += ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temp);
    out << list.to_json() << "\n";
    if (!out) return "cannot write " + temp.string();
  }
  fs::rename(temp, file, ec);
  if (ec) return "cannot write " + file.string() + ": " + ec.message();
  return "";
}

}  // namespace ccrun

// The run's log directory (see run_logs.h).
#include "run_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>

#include "ccrun/error.h"
#include "orphan_killer.h"

namespace ccrun::agent {
namespace fs = std::filesystem;

bool redirects_anything(const LogSpec& logs) {
  if (logs.default_redirects != 0) return true;
  for (const auto& [rank, bits] : logs.redirects) {
    if (bits != 0) return true;
  }
  return false;
}

std::string logs_home(const LogSpec& logs) {
  if (!logs.log_dir.empty() || !redirects_anything(logs)) return logs.log_dir;
  std::string tmpl = (fs::temp_directory_path() / "ccrun-logs-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) {
    throw Error("-r/--redirects without --log-dir: cannot create a directory for the redirected "
                "output in " + fs::temp_directory_path().string() + ": " + std::strerror(errno) +
                "; give --log-dir DIR");
  }
  return tmpl;
}

RunLogs::RunLogs(const std::string& log_dir, const std::string& run_id, const std::string& token) {
  kept_ = !log_dir.empty();
  if (!kept_) {
    std::string name = (token.empty() ? "ccrun-" : leftover_prefix(token)) + "XXXXXX";
    std::string tmpl = (fs::temp_directory_path() / name).string();
    if (!mkdtemp(tmpl.data())) {
      throw Error("cannot create a temporary directory in " + fs::temp_directory_path().string() +
                  ": " + std::strerror(errno) + "; set TMPDIR to a writable directory");
    }
    root_ = tmpl;
    return;
  }
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  if (ec) {
    throw Error("--log-dir " + log_dir + ": cannot create it: " + ec.message());
  }
  std::random_device rd;
  for (int tries = 0; tries < 100; ++tries) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "_%08x", rd());
    fs::path dir = fs::path(log_dir) / (run_id + suffix);
    if (::mkdir(dir.c_str(), 0755) == 0) {
      root_ = dir;
      return;
    }
    if (errno != EEXIST) {
      throw Error("--log-dir " + log_dir + ": cannot create " + dir.string() + ": " +
                  std::strerror(errno));
    }
  }
  throw Error("--log-dir " + log_dir + ": no free run directory name");
}

RunLogs::~RunLogs() {
  if (events_fd_ >= 0) ::close(events_fd_);
  if (kept_ || root_.empty()) return;
  std::error_code ec;
  fs::remove_all(root_, ec);
}

fs::path RunLogs::rank_dir(int attempt, int local_rank) const {
  fs::path dir = root_ / ("attempt_" + std::to_string(attempt)) / std::to_string(local_rank);
  std::error_code ec;
  fs::create_directories(dir, ec);
  return dir;
}

fs::path RunLogs::error_file(int attempt, int local_rank) const {
  if (kept_) return rank_dir(attempt, local_rank) / "error.json";
  fs::path dir = root_ / ("attempt_" + std::to_string(attempt));
  std::error_code ec;
  fs::create_directories(dir, ec);
  return dir / ("error_" + std::to_string(local_rank) + ".json");
}

bool RunLogs::write_file(const std::string& name, const std::string& text) const {
  fs::path path = root_ / name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size_t done = 0;
  int err = fd < 0 ? errno : 0;
  while (fd >= 0 && done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += size_t(n);
  }
  if (fd >= 0 && ::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    std::fprintf(stderr, "ccrun: cannot write %s: %s\n", path.c_str(), std::strerror(err));
    return false;
  }
  return true;
}

}  // namespace ccrun::agent

namespace ccrun::agent {

void RunLogs::event(const std::string& name, int attempt, const std::string& fields_json) {
  if (!kept_ || events_failed_) return;
  auto now = std::chrono::system_clock::now();
  int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  time_t secs = time_t(ms / 1000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char stamp[96];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                int(ms % 1000));
  nlohmann::json j = nlohmann::json::parse(fields_json, nullptr, false);
  if (!j.is_object()) j = nlohmann::json::object();
  j["time"] = stamp;
  j["time_ms"] = ms;
  j["event"] = name;
  j["attempt"] = attempt;
  std::string line = j.dump() + "\n";
  if (events_fd_ < 0) {
    events_fd_ = ::open((root_ / "events.jsonl").c_str(),
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  // One write per line: O_APPEND keeps lines whole.
  if (events_fd_ < 0 || ::write(events_fd_, line.data(), line.size()) != ssize_t(line.size())) {
    std::fprintf(stderr, "ccrun: cannot write %s: %s; later events are not saved\n",
                 (root_ / "events.jsonl").c_str(), std::strerror(errno));
    events_failed_ = true;
  }
}

}  // namespace ccrun::agent

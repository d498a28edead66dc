// torch's FileTimer protocol, served on the agent's loop (see file_timer.h).
#include "file_timer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ccrun/error.h"

namespace ccrun::agent {
namespace {

int open_fifo(const std::string& path) {
  ::unlink(path.c_str());
  if (::mkfifo(path.c_str(), 0600) != 0) {
    throw Error("cannot make the FileTimer FIFO " + path + " (TORCHELASTIC_TIMER_FILE): " +
                std::strerror(errno) + "; point TORCHELASTIC_TIMER_FILE at a writable folder");
  }
  // Read and write: no EOF each time a client closes, and open never blocks.
  int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  return fd;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

FileTimerRequest parse_file_timer_request(const std::string& line) {
  FileTimerRequest r;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("pid") || !j.contains("scope_id") ||
      !j.contains("expiration_time") || !j["pid"].is_number_integer() ||
      !j["expiration_time"].is_number()) {
    return r;
  }
  r.pid = j["pid"].get<pid_t>();
  r.scope = j["scope_id"].is_string() ? j["scope_id"].get<std::string>() : j["scope_id"].dump();
  r.expiration = j["expiration_time"].get<double>();
  r.signal = j.value("signal", 0);
  r.ok = r.pid > 0 && std::isfinite(r.expiration);
  return r;
}

FileTimerServer::FileTimerServer(boost::asio::io_context& io, std::string path,
                                 std::function<void(const FileTimerKill&)> on_kill)
    : io_(io),
      path_(std::move(path)),
      on_kill_(std::move(on_kill)),
      fifo_(io, open_fifo(path_)),
      deadline_(io) {
  read();
}

FileTimerServer::~FileTimerServer() {
  boost::system::error_code ignored;  // closing cancels the pending read
  fifo_.close(ignored);
  deadline_.cancel();
  ::unlink(path_.c_str());
}

void FileTimerServer::read() {
  fifo_.async_read_some(boost::asio::buffer(buf_), [this](boost::system::error_code ec, size_t n) {
    if (ec) return;  // closed: the server is going away
    partial_.append(buf_.data(), n);
    for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
      on_line(partial_.substr(0, nl));
      partial_.erase(0, nl + 1);
    }
    if (partial_.size() > 65536) partial_.clear();  // no newline: not a client of ours
    read();
  });
}

void FileTimerServer::on_line(const std::string& line) {
  FileTimerRequest r = parse_file_timer_request(line);
  if (!r.ok) return;
  auto key = std::make_pair(r.pid, r.scope);
  if (r.expiration < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = r;
  }
  arm();
}

// One deadline: the earliest expiration of every live timer.
void FileTimerServer::arm() {
  deadline_.cancel();
  if (timers_.empty()) return;
  double first = timers_.begin()->second.expiration;
  for (const auto& [key, t] : timers_) first = std::min(first, t.expiration);
  double wait = std::max(0.0, first - wall_seconds());
  deadline_.expires_after(std::chrono::milliseconds(int64_t(std::ceil(wait * 1000))));
  deadline_.async_wait([this](boost::system::error_code ec) {
    if (!ec) expire();
  });
}

void FileTimerServer::expire() {
  double now = wall_seconds();
  std::map<pid_t, std::vector<FileTimerRequest>> expired;
  for (const auto& [key, t] : timers_) {
    if (t.expiration <= now) expired[key.first].push_back(t);
  }
  for (auto& [pid, list] : expired) {
    std::sort(list.begin(), list.end(),
              [](const auto& a, const auto& b) { return a.expiration < b.expiration; });
    FileTimerKill kill{pid, 0, {}};
    for (const auto& t : list) {
      kill.scopes.push_back(t.scope);
      if (kill.signal <= 0 && t.signal > 0) kill.signal = t.signal;
    }
    // A pid's timers all end with it, as in torch's server; no signal: none sent.
    for (auto it = timers_.begin(); it != timers_.end();) {
      it = it->first.first == pid ? timers_.erase(it) : std::next(it);
    }
    if (kill.signal > 0 && ::kill(pid, kill.signal) == 0) on_kill_(kill);
  }
  arm();
}

}  // namespace ccrun::agent

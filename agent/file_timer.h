//===- file_timer.h - torch's FileTimer watchdog, served by the agent -*- C++ -*-//
//
// torch's LocalElasticAgent serves torch.distributed.elastic.timer's
// FileTimerClient when TORCHELASTIC_ENABLE_FILE_TIMER=1: a FIFO named by
// TORCHELASTIC_TIMER_FILE, one JSON request a line
//   {"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N}
// T in wall-clock seconds; T < 0 releases (P, S). A timer past T gets its
// pid sent signal N (if N > 0), the first expired one by T. ccrun serves the
// same protocol on the agent's io_context: the FIFO is read as events, the
// next deadline is one steady_timer, and each kill is reported to the agent,
// which names the cause when the worker ends.
//
//   FileTimerServer timers(io, path, [](const FileTimerKill& k) { ... });
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <array>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange
#include <boost/asio.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ccrun::agent {

struct FileTimerKill {
  pid_t pid = 0;
  int signal = 0;
  std::vector<std::string> scopes;  // every expired scope of that pid
};

// One parsed request; `ok` false for a line that is not one (it is ignored,
// as torch's server would fail on it without effect on the others).
struct FileTimerRequest {
  bool ok = false;
  pid_t pid = 0;
  std::string scope;
  double expiration = 0;  // wall-clock seconds; < 0: release
  int signal = 0;
};
FileTimerRequest parse_file_timer_request(const std::string& line);

class FileTimerServer {
 public:
  // Makes the FIFO at `path` (replacing a stale one) and starts reading it.
  // Throws Error when it cannot be made.
  FileTimerServer(boost::asio::io_context& io, std::string path,
                  std::function<void(const FileTimerKill&)> on_kill);
  ~FileTimerServer();  // removes the FIFO
  FileTimerServer(const FileTimerServer&) = delete;  // owns the FIFO
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  void read();
  void on_line(const std::string& line);
  void arm();
  void expire();

  boost::asio::io_context& io_;
  std::string path_;
  std::function<void(const FileTimerKill&)> on_kill_;
  boost::asio::posix::stream_descriptor fifo_;
  boost::asio::steady_timer deadline_;
  std::array<char, 4096> buf_{};
  std::string partial_;
  std::map<std::pair<pid_t, std::string>, FileTimerRequest> timers_;
};

}  // namespace ccrun::agent

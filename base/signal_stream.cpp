// Stop signals read from a signalfd on the io_context (see signal_stream.h).
#include "signal_stream.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "ccrun/error.h"
#include "ccrun/stop_signals.h"

namespace ccrun {
namespace {

int open_signalfd(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  release_stop_signals_except(set);
  int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    throw Error(std::string("cannot receive signals: signalfd: ") + std::strerror(errno) +
                "; raise the open-file limit (ulimit -n)");
  }
  return fd;
}

}  // namespace

SignalStream::SignalStream(boost::asio::io_context& io, const std::vector<int>& signals)
    : fd_(io, open_signalfd(signals)) {}

void SignalStream::async_wait(std::function<void(int)> handler) {
  fd_.async_read_some(boost::asio::buffer(&info_, sizeof info_),
                      [this, handler = std::move(handler)](boost::system::error_code ec,
                                                           size_t n) {
                        // A signalfd read fails only once the descriptor is
                        // closed (cancel, destruction): nothing to wait for.
                        if (ec || n != sizeof info_) return;
                        handler(int(info_.ssi_signo));
                      });
}

void SignalStream::cancel() {
  boost::system::error_code ignored;  // nothing in flight is no error
  fd_.cancel(ignored);
}

}  // namespace ccrun

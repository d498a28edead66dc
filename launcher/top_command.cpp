// `ccrun top`: a running job, live in the terminal (see top_command.h). The
// frame is top_frame.cpp's; this file owns the terminal (raw mode, the
// alternate screen, its size), the keys, the signals and the refresh. One
// thread, one poll(): stdin and a signalfd (SIGWINCH and the stop signals),
// with the time to the next read of the store as its timeout.
//
// Every function here runs only for `ccrun top`: all are [[gnu::cold]], out
// of the text pages that a launch touches.
#include "top_command.h"
#include "subcommand_usage.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "ccrun/error.h"
#include "ccrun/host_name.h"
#include "ccrun/stop_signals.h"
#include "ccrun/watch_lease.h"
#include "help_formatter.h"
#include "job_reader.h"
#include "log_mux.h"
#include "top_frame.h"

namespace ccrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitUnknown = 3;

// --once reads the job without a lease: its nodes' samples come with their
// heartbeats (every 5 s by default), so a row says its data's age past two.
constexpr int64_t kOnceStaleMs = 10'000;

// What `ccrun top` is asked.
struct TopArgs {
  JobStoreArgs job;       // the job and its store
  bool once = false;      // one plain frame, then exit
  double interval_s = 1;  // between reads of the store
};

[[gnu::cold]] std::unique_ptr<CLI::App> make_top_app(TopArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Shows a running job live, as its store holds it: one row per rank (or per class of\n"
      "ranks in the same state) with its node, host, step, steps/s, the collective it waits\n"
      "in and for how long, its lag against the median step, RSS, straggler mark and start-up\n"
      "phase; a hang verdict and its culprit highlighted. Keys: q quits, s cycles the sort\n"
      "(rank, step, lag). Exits 0 after q or --once, 3 when the store cannot be reached or\n"
      "does not know the job",
      "ccrun top");
  auto help = std::make_shared<HelpFormatter>();
  help->column_width(32);
  app->formatter(help);
  add_job_store_options(*app, a.job);
  app->add_flag("--once", a.once,
                "print one plain frame (no escape codes) and exit, for scripts; also what "
                "happens when the output is not a terminal");
  app->add_option("--interval", a.interval_s, "seconds between refreshes (default 1)")
      ->check(CLI::Validator(CLI::PositiveNumber).description(""))
      ->type_name("SECONDS");
  return app;
}

// The terminal's size (columns, lines); {0, 0} when it is not a terminal.
[[gnu::cold]] std::pair<int, int> terminal_size(int fd) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) != 0) return {0, 0};
  return {int(ws.ws_col), int(ws.ws_row)};
}

// The terminal while `top` draws on it: keys one at a time and unechoed,
// the alternate screen, the cursor hidden. The destructor puts it back as it
// was, on every way out (a return, an exception, a signal read).
class Terminal {
 public:
  [[gnu::cold]] Terminal() {
    if (tcgetattr(STDIN_FILENO, &saved_) != 0) {
      throw Error("cannot read the terminal's settings: " + std::string(std::strerror(errno)));
    }
    termios raw = saved_;
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG | IEXTEN);  // Ctrl-C arrives as a key
    raw.c_iflag &= ~tcflag_t(IXON | ICRNL);
    raw.c_cc[VMIN] = 1, raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) != 0) {
      throw Error("cannot set the terminal's mode: " + std::string(std::strerror(errno)));
    }
    write_all(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l\x1b[2J");
  }
  [[gnu::cold]] ~Terminal() {
    write_all(STDOUT_FILENO, "\x1b[0m\x1b[?25h\x1b[?1049l");
    tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Terminal(const Terminal&) = delete;  // one owner restores it, once
  Terminal& operator=(const Terminal&) = delete;

 private:
  termios saved_{};
};

// A signalfd for SIGWINCH and the load-time stop signals, blocked while it
// lives (the stop signals stay blocked after: ccrun exits next).
class SignalFd {
 public:
  [[gnu::cold]] SignalFd() {
    sigset_t set = load_time_stop_signals();
    sigaddset(&set, SIGWINCH);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) throw Error("signalfd: " + std::string(std::strerror(errno)));
  }
  [[gnu::cold]] ~SignalFd() { ::close(fd_); }
  SignalFd(const SignalFd&) = delete;  // owns the descriptor
  SignalFd& operator=(const SignalFd&) = delete;
  int fd() const { return fd_; }
  // The next pending signal's number, 0 when none.
  [[gnu::cold]] int next() {
    signalfd_siginfo si{};
    return ::read(fd_, &si, sizeof si) == ssize_t(sizeof si) ? int(si.ssi_signo) : 0;
  }

 private:
  int fd_ = -1;
};

// The live view: one read of the store per refresh, a frame per read, key
// or resize. run() returns the exit status; the terminal is restored by
// then (Terminal's destructor).
class TopView {
 public:
  TopView(const TopArgs& a, SignalFd& signals, std::shared_ptr<store::Store> store,
          JobState first)
      : args_(a),
        store_(std::move(store)),
        signals_(signals),
        lease_(a.job.run_id, host_name() + ":" + std::to_string(getpid()), interval_ms(a)) {
    rates_.update(first);
    snap_.job = std::move(first);
    snap_.endpoint = a.job.endpoint;
    snap_.interactive = true;
    snap_.stale_after_ms = 2 * interval_ms(a).count();
    take_lease();
  }
  int run();

 private:
  static std::chrono::milliseconds interval_ms(const TopArgs& a) {
    return std::chrono::milliseconds(int64_t(a.interval_s * 1000));
  }
  void read_store();
  void take_lease();
  void draw();
  std::optional<int> on_keys();
  std::optional<int> on_signals();
  int quit();

  const TopArgs& args_;
  std::shared_ptr<store::Store> store_;  // null after a failed read: reopened at the next
  SignalFd& signals_;
  std::optional<Terminal> terminal_;
  StepRates rates_;
  TopSnapshot snap_;
  TopSort sort_ = TopSort::kRank;
  WatchLeaseWriter lease_;  // the nodes publish at this view's rate while it renews
};

[[gnu::cold]] void TopView::read_store() {
  try {
    if (!store_) store_ = open_store_of_job(args_.job, "top");
    JobState job = read_job_state(*store_, args_.job.run_id);
    rates_.update(job);
    snap_.job = std::move(job);
    snap_.store_problem.clear();
    take_lease();
  } catch (const std::exception& e) {  // any failure to read: said on the screen, retried
    store_.reset();
    snap_.store_problem = std::string(e.what()) + " (retrying; q quits)";
  }
  snap_.rates = rates_.by_rank(snap_.job);
}

// Renews the lease on the running round: the nodes publish their next
// samples for the next read.
[[gnu::cold]] void TopView::take_lease() {
  if (snap_.job.phase == JobPhase::kRunning && store_) {
    lease_.renew(*store_, snap_.job.round, wall_clock_ms());
  }
}

[[gnu::cold]] void TopView::draw() {
  auto [width, height] = terminal_size(STDOUT_FILENO);
  Frame f = render_frame(snap_, width, height, sort_);
  write_all(STDOUT_FILENO, frame_ansi(f, width));
}

// Reads the keys waiting: q and Ctrl-C quit, s cycles the sort.
[[gnu::cold]] std::optional<int> TopView::on_keys() {
  char keys[64];
  ssize_t n = ::read(STDIN_FILENO, keys, sizeof keys);
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
    terminal_.reset();
    std::fprintf(stderr, "ccrun top: the terminal closed\n");
    return 1;
  }
  for (ssize_t i = 0; i < n; ++i) {
    if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == '\x03') return quit();
    if (keys[i] == 's' || keys[i] == 'S') sort_ = next_sort(sort_);
  }
  draw();
  return std::nullopt;
}

// SIGWINCH redraws at the new size; SIGINT quits as q does, another stop
// signal ends with 128+N.
[[gnu::cold]] std::optional<int> TopView::on_signals() {
  while (int sig = signals_.next()) {
    if (sig == SIGINT) return quit();
    if (sig != SIGWINCH) {
      terminal_.reset();
      std::fprintf(stderr, "ccrun top: stopped by signal %d\n", sig);
      return 128 + sig;
    }
    write_all(STDOUT_FILENO, "\x1b[2J");
  }
  draw();
  return std::nullopt;
}

// Restores the terminal; 0, or 3 when the store had stopped answering.
[[gnu::cold]] int TopView::quit() {
  terminal_.reset();
  if (snap_.store_problem.empty()) return kExitOk;
  std::fprintf(stderr,
               "ccrun top: the store at %s stopped answering: %s; check that the job's store "
               "(ccrun-rendezvous, or the agent hosting it) is up and reachable from here\n",
               args_.job.endpoint.c_str(), snap_.store_problem.c_str());
  return kExitUnknown;
}

[[gnu::cold]] int TopView::run() {
  terminal_.emplace();
  snap_.rates = rates_.by_rank(snap_.job);
  draw();
  auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(args_.interval_s));
  Clock::time_point next = Clock::now() + interval;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
    int n = ::poll(fds, 2, int(std::max<int64_t>(0, left.count())));
    if (n < 0 && errno != EINTR) throw Error("poll: " + std::string(std::strerror(errno)));
    std::optional<int> done;
    if (n > 0 && fds[1].revents) done = on_signals();
    if (!done && n > 0 && fds[0].revents) done = on_keys();
    if (done) return *done;
    if (Clock::now() >= next) {
      read_store();
      draw();
      next = Clock::now() + interval;
    }
  }
}

// One plain frame of the job read once: --once, or output not a terminal.
[[gnu::cold]] int print_once(const TopArgs& a, store::Store& store) {
  JobState job = read_job_state(store, a.job.run_id);
  if (job.phase == JobPhase::kUnknown) {
    std::fprintf(stderr, "ccrun top: %s\n", no_such_job_message(a.job).c_str());
    return kExitUnknown;
  }
  TopSnapshot snap;
  snap.endpoint = a.job.endpoint;
  snap.job = std::move(job);
  snap.stale_after_ms = kOnceStaleMs;
  int width = terminal_size(STDOUT_FILENO).first;
  std::fputs(frame_plain(render_frame(snap, width, 0, TopSort::kRank)).c_str(), stdout);
  return kExitOk;
}

// The live view, from its first read of the store (which must know the job).
[[gnu::cold]] int run_live(const TopArgs& a) {
  if (!isatty(STDIN_FILENO)) {
    std::fprintf(stderr, "ccrun top: the input is not a terminal, so keys cannot be read; run "
                         "it in a terminal, or use --once\n");
    return kExitUsage;
  }
  SignalFd signals;  // before the store's threads, which inherit the mask
  auto store = open_store_of_job(a.job, "top");
  JobState first = read_job_state(*store, a.job.run_id);
  if (first.phase == JobPhase::kUnknown) {
    std::fprintf(stderr, "ccrun top: %s\n", no_such_job_message(a.job).c_str());
    return kExitUnknown;
  }
  TopView view(a, signals, std::move(store), std::move(first));
  return view.run();
}

}  // namespace

[[gnu::cold]] std::vector<FlagCompletion> top_flag_completions() {
  TopArgs a;
  auto app = make_top_app(a);
  return job_store_flag_completions(*app);
}

[[gnu::cold]] int run_top_command(const std::vector<std::string>& args) {
  TopArgs a;
  auto app = make_top_app(a);
  try {
    app->parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::CallForHelp&) {
    std::fputs(app->help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::fputs(subcommand_usage_error("top", *app, e, args).c_str(), stderr);
    return kExitUsage;
  }
  bool live = !a.once && isatty(STDOUT_FILENO);
  if (!live) release_stop_signals();  // no terminal to restore: a signal ends it at once
  try {
    if (live) return run_live(a);
    auto store = open_store_of_job(a.job, "top");
    return print_once(a, *store);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ccrun top: %s\n", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "ccrun top: %s\n", e.what());
    return kExitUnknown;
  }
}

}  // namespace ccrun::launcher

// ccrun-rendezvous: the standalone store daemon. It serves one job's (or
// many jobs') rendezvous store and outlives the agents that use it. It lives
// beside the store it serves: it uses the store layer only (StoreServer), not
// the rendezvous algorithm.
//
//   ccrun-rendezvous --host 0.0.0.0 --port 29400 --token-file /etc/ccrun/token
//
// main: parse the command line (DaemonFlags), set up logging and the stop
// signals, then serve until SIGINT or SIGTERM.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/signal_names.h"
#include "ccrun/rendezvous_backend.h"
#include "ccrun/stop_signals.h"
#include "ccrun/store_server.h"
#include "ccrun/token_file.h"

// The stop signals are held from load on: one that comes while the daemon
// starts is read by the sigwait below, once it serves (a clean stop).
CCRUN_BLOCK_STOP_SIGNALS_AT_LOAD();

namespace {

constexpr int kExitUsage = 2;  // a mistake in the command line, as ccrun's

// The command line: the server's options, plus what main turns into them
// (timeouts in seconds, the token's file) and the log level.
struct DaemonFlags {
  ccrun::store::StoreServerOptions opts;
  std::string token_file;
  int port = ccrun::rendezvous::kDefaultRendezvousPort;  // checked, then opts.port
  std::string log_level = "info";
  double handshake_s = 10, first_request_s = 60, idle_s = 0, finished_ttl_s = 600;
};

// Where to listen, who may connect, and how many.
void add_listen_options(CLI::App& app, DaemonFlags& f) {
  app.add_option("--host", f.opts.host, "Address to listen on (0.0.0.0 for every interface)")
      ->capture_default_str();
  app.add_option("--port", f.port, "Port to listen on; 0 picks a free one")
      ->capture_default_str()
      ->type_name("PORT")
      ->check(CLI::Range(0, 65535).description(""));
  app.add_option("--token-file", f.token_file,
                 "File holding a shared secret clients must present: its first line, "
                 "trailing whitespace stripped (torch clients cannot; ccrun agents read "
                 "the file CCRUN_STORE_TOKEN_FILE names, by the same rule)");
  app.add_option("--max-connections", f.opts.max_connections,
                 "Connections beyond this are refused; 0 = what the open-file "
                 "limit allows less 64 (at most 65536)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

// A limit in seconds, 0 or more.
void add_seconds_option(CLI::App& app, const char* name, double& secs, const char* help) {
  app.add_option(name, secs, help)->capture_default_str()->check(CLI::NonNegativeNumber);
}

// How long a connection, and a finished job's keys, may stay.
void add_timeout_options(CLI::App& app, DaemonFlags& f) {
  add_seconds_option(app, "--handshake-timeout", f.handshake_s,
                     "With --token-file: seconds a new connection has to authenticate; "
                     "0 = no limit");
  add_seconds_option(app, "--first-request-timeout", f.first_request_s,
                     "Without --token-file: seconds a new connection has to send its first "
                     "request, enforced only while over 3/4 of --max-connections are open "
                     "(torch 1.13's watch connection never speaks); 0 = no limit");
  add_seconds_option(app, "--finished-job-ttl", f.finished_ttl_s,
                     "Seconds after a job's done marker (and its last write) before its "
                     "keys (ccrun/<run_id>/...) are deleted; 0 = keep them");
  add_seconds_option(app, "--idle-timeout", f.idle_s,
                     "Close a connection silent this many seconds with no WAIT parked; "
                     "0 = never (torch clients stay silent for a whole job)");
}

// How much one request may carry, and the log level.
void add_limit_options(CLI::App& app, DaemonFlags& f) {
  app.add_option("--max-value-bytes", f.opts.max_value_bytes, "Largest value a client may send")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-keys-per-request", f.opts.max_keys_per_request,
                 "Most keys one WAIT, CHECK, MULTI_GET or MULTI_SET may name (a parked "
                 "WAIT costs about 200 bytes per missing key)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

// The seconds the flags hold, as the server's typed timeouts.
void apply_timeouts(DaemonFlags& f) {
  auto to_ms = [](double s) {
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  };
  f.opts.handshake_timeout = to_ms(f.handshake_s);
  f.opts.first_request_timeout = to_ms(f.first_request_s);
  f.opts.idle_timeout = to_ms(f.idle_s);
  f.opts.finished_job_ttl = to_ms(f.finished_ttl_s);
}

// Parses the command line: nothing when the daemon should serve, else its
// exit status (0 after --help or --version; kExitUsage for a bad flag,
// said with the fix, as ccrun says its own).
std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ccrun-rendezvous: %s; see ccrun-rendezvous --help\n", e.what());
    return kExitUsage;
  }
  return std::nullopt;
}

// SIGINT and SIGTERM stay blocked (every thread inherits the mask) and are
// waited for by serve(); SIGHUP and SIGQUIT take their default action again.
sigset_t keep_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ccrun::release_stop_signals_except(stop_signals);
  std::signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

// Serves until one of `stop_signals` comes; kExitUsage when the command
// line names something unusable (the token file), 1 if the server cannot
// start.
int serve(DaemonFlags& f, const sigset_t& stop_signals) {
  try {
    if (!f.token_file.empty())
      f.opts.token = ccrun::store::read_token_file(f.token_file, "--token-file");
    ccrun::store::StoreServer server(f.opts);
    server.start();
    std::printf("ccrun-rendezvous: listening on %s\n",
                ccrun::store::format_host_port(f.opts.host, server.port()).c_str());
    std::fflush(stdout);
    spdlog::info("serving up to {} connections; the data lives in memory only "
                 "(a restarted daemon starts empty)", server.max_connections());
    int signo = 0;
    sigwait(&stop_signals, &signo);
    spdlog::info("{} received; closing {} connection(s)", ccrun::signal_name(signo),
                 server.num_connections());
    server.stop();
  } catch (const ccrun::ConfigError& e) {
    std::fprintf(stderr, "ccrun-rendezvous: %s\n", e.what());
    return kExitUsage;
  } catch (const ccrun::Error& e) {
    std::fprintf(stderr, "ccrun-rendezvous: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ccrun-rendezvous: the standalone rendezvous store of ccrun jobs.\n"
      "Speaks PyTorch's TCPStore protocol (torch 1.13 and 2.x clients) and\n"
      "ccrun's extensions. Agents use it with --rdzv-endpoint HOST:PORT.",
      "ccrun-rendezvous"};
  DaemonFlags flags;
  add_listen_options(app, flags);
  add_timeout_options(app, flags);
  add_limit_options(app, flags);
  app.set_version_flag("--version", std::string("ccrun-rendezvous ") + CCRUN_VERSION);
  if (std::optional<int> done = parse_flags(app, argc, argv)) return *done;
  flags.opts.port = uint16_t(flags.port);
  flags.opts.port_in_use_fix = "give another with --port (0 picks a free one, printed at start)";
  apply_timeouts(flags);
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ccrun-rendezvous] [%l] %v");
  return serve(flags, keep_stop_signals());
}

// ccrun-rendezvous: the standalone store daemon. It serves one job's (or
// many jobs') rendezvous store and outlives the agents that use it.
//
//   ccrun-rendezvous --host 0.0.0.0 --port 29400 --token-file /etc/ccrun/token
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>

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

int main(int argc, char** argv) {
  CLI::App app{
      "ccrun-rendezvous: the standalone rendezvous store of ccrun jobs.\n"
      "Speaks PyTorch's TCPStore protocol (torch 1.13 and 2.x clients) and\n"
      "ccrun's extensions. Agents use it with --rdzv-endpoint HOST:PORT.",
      "ccrun-rendezvous"};
  ccrun::store::StoreServerOptions opts;
  opts.port = ccrun::rendezvous::kDefaultRendezvousPort;
  std::string token_file, log_level = "info";
  app.add_option("--host", opts.host, "Address to listen on (0.0.0.0 for every interface)")
      ->capture_default_str();
  app.add_option("--port", opts.port, "Port to listen on; 0 picks a free one")
      ->capture_default_str();
  app.add_option("--token-file", token_file,
                 "File holding a shared secret clients must present: its first line, "
                 "trailing whitespace stripped (torch clients cannot; ccrun agents read "
                 "the file CCRUN_STORE_TOKEN_FILE names, by the same rule)");
  app.add_option("--max-connections", opts.max_connections,
                 "Connections beyond this are refused; 0 = what the open-file "
                 "limit allows less 64 (at most 65536)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  double handshake_s = 10, first_request_s = 60, idle_s = 0;
  app.add_option("--handshake-timeout", handshake_s,
                 "With --token-file: seconds a new connection has to authenticate; "
                 "0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--first-request-timeout", first_request_s,
                 "Without --token-file: seconds a new connection has to send its first "
                 "request; 0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  double finished_ttl_s = 600;
  app.add_option("--finished-job-ttl", finished_ttl_s,
                 "Seconds after a job's done marker (and its last write) before its "
                 "keys (ccrun/<run_id>/...) are deleted; 0 = keep them")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--idle-timeout", idle_s,
                 "Close a connection silent this many seconds with no WAIT parked; "
                 "0 = never (torch clients stay silent for a whole job)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-value-bytes", opts.max_value_bytes,
                 "Largest value a client may send")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-keys-per-request", opts.max_keys_per_request,
                 "Most keys one WAIT, CHECK, MULTI_GET or MULTI_SET may name (a parked "
                 "WAIT costs about 200 bytes per missing key)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.set_version_flag("--version", std::string("ccrun-rendezvous ") + CCRUN_VERSION);
  CLI11_PARSE(app, argc, argv);

  auto to_ms = [](double s) {
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  };
  opts.handshake_timeout = to_ms(handshake_s);
  opts.first_request_timeout = to_ms(first_request_s);
  opts.idle_timeout = to_ms(idle_s);
  opts.finished_job_ttl = to_ms(finished_ttl_s);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ccrun-rendezvous] [%l] %v");

  // SIGINT and SIGTERM stay blocked (every thread inherits the mask) and are
  // waited for here; SIGHUP and SIGQUIT take their default action again.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ccrun::release_stop_signals_except(stop_signals);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    if (!token_file.empty()) opts.token = ccrun::store::read_token_file(token_file, "--token-file");
    ccrun::store::StoreServer server(opts);
    server.start();
    std::printf("ccrun-rendezvous: listening on %s\n",
                ccrun::store::format_host_port(opts.host, server.port()).c_str());
    std::fflush(stdout);
    spdlog::info("serving up to {} connections; the data lives in memory only "
                 "(a restarted daemon starts empty)", server.max_connections());
    int signo = 0;
    sigwait(&stop_signals, &signo);
    spdlog::info("{} received; closing {} connection(s)", ccrun::signal_name(signo),
                 server.num_connections());
    server.stop();
  } catch (const ccrun::Error& e) {
    std::fprintf(stderr, "ccrun-rendezvous: %s\n", e.what());
    return 1;
  }
  return 0;
}

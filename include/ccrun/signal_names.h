//===- ccrun/signal_names.h - Signal names and numbers, one table -*- C++ -*-//
//
// Every place ccrun names a signal (the failure report, log lines, `ccrun
// status`, --signals-to-handle) converts through these two functions, so
// that a name ccrun prints is a name it accepts:
//
//   std::string a = signal_name(SIGSEGV);  // "SIGSEGV"
//   std::string b = signal_name(77);       // "signal 77" (no name)
//   int n = signal_number("SIGTERM");      // SIGTERM; 0 for a name that is no signal
//
// The table is the C library's (sigabbrev_np), the names kill -l prints
// with "SIG" in front. Used by the agent, the launcher and ccrun-rendezvous.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

namespace ccrun {

// "SIG" + the abbreviation of `sig` ("SIGTERM"), or "signal N" when the
// number has no name.
[[nodiscard]] std::string signal_name(int sig);

// The number of the signal named `name` ("SIGTERM", upper case, with the
// SIG prefix, as signal_name prints it), or 0 when no signal has that name.
[[nodiscard]] int signal_number(std::string_view name);

}  // namespace ccrun

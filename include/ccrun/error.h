//===- ccrun/error.h - ccrun's error types ----------------------*- C++ -*-===//
//
// One family of exceptions for every ccrun component. A message says what
// failed, where (peer, key, rank, flag) and, where one exists, what to do:
//
//   throw TimeoutError("store 10.0.0.1:29400: timed out after 30s waiting "
//                      "for key \"rdzv/round/3\"");
//
// Catch `ccrun::Error` to handle any of them; catch a subclass to react to
// one cause (a timeout is often retried, a configuration error never is).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace ccrun {

// Base of every exception ccrun throws on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A deadline passed: a key never appeared, a peer never answered.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer could not be reached or the connection to it broke.
class ConnectionError : public Error {
 public:
  using Error::Error;
};

// A peer sent bytes that break the protocol (bad frame, bad length, bad type).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// The peer at a store's address does not speak the store protocol (an HTTP
// server, some other service answered): retrying will not help, the address
// is wrong. The message names the endpoint and what the peer sent.
class NotAStoreError : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

// The user's input (flags, YAML, environment variables) is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// An operation that this implementation does not offer.
class NotSupportedError : public Error {
 public:
  using Error::Error;
};

// The store rejected this client (authentication failed or missing).
class AuthError : public Error {
 public:
  using Error::Error;
};

// A blocking call was ended on purpose (StoreInterrupt): the caller is
// stopping, typically on a signal. Not a failure of the peer.
class InterruptedError : public Error {
 public:
  using Error::Error;
};

// The rendezvous was closed (job finished or failed for good): do not rejoin.
class RendezvousClosedError : public Error {
 public:
  using Error::Error;
};

// The job succeeded while this node waited outside its rounds (a hot spare
// that was never needed): not a failure of this node.
class JobFinishedError : public RendezvousClosedError {
 public:
  using RendezvousClosedError::RendezvousClosedError;
};

// The job id's run had ended before this node arrived (ccrun/finished_run.h):
// nothing was started; the message says how that run ended and how to run
// again. The agent exits kExitAlreadyRan.
class JobAlreadyRanError : public RendezvousClosedError {
 public:
  using RendezvousClosedError::RendezvousClosedError;
};

// The name of `e`'s ccrun error class ("ccrun::TimeoutError"), or
// "std::exception" for any other: the type part of an error record that
// follows torch's "<Type>: <message>" form.
inline const char* error_type_name(const std::exception& e) {
  if (dynamic_cast<const NotAStoreError*>(&e)) return "ccrun::NotAStoreError";
  if (dynamic_cast<const ProtocolError*>(&e)) return "ccrun::ProtocolError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "ccrun::TimeoutError";
  if (dynamic_cast<const ConnectionError*>(&e)) return "ccrun::ConnectionError";
  if (dynamic_cast<const ConfigError*>(&e)) return "ccrun::ConfigError";
  if (dynamic_cast<const NotSupportedError*>(&e)) return "ccrun::NotSupportedError";
  if (dynamic_cast<const AuthError*>(&e)) return "ccrun::AuthError";
  if (dynamic_cast<const InterruptedError*>(&e)) return "ccrun::InterruptedError";
  if (dynamic_cast<const JobFinishedError*>(&e)) return "ccrun::JobFinishedError";
  if (dynamic_cast<const JobAlreadyRanError*>(&e)) return "ccrun::JobAlreadyRanError";
  if (dynamic_cast<const RendezvousClosedError*>(&e)) return "ccrun::RendezvousClosedError";
  if (dynamic_cast<const Error*>(&e)) return "ccrun::Error";
  return "std::exception";
}

// A duration as messages spell it: "250ms", "2.5s", "30s", "2m30s".
inline std::string format_duration(std::chrono::milliseconds d) {
  auto ms = d.count();
  if (ms < 1000) return std::to_string(ms) + "ms";
  if (ms % 1000 != 0 && ms < 10'000) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1000.0);
    return buf;
  }
  auto s = ms / 1000;
  if (s < 120) return std::to_string(s) + "s";
  std::string out = std::to_string(s / 60) + "m";
  if (s % 60) out += std::to_string(s % 60) + "s";
  return out;
}

}  // namespace ccrun

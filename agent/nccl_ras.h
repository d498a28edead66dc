//===- nccl_ras.h - NCCL's RAS status, as `ncclras` asks for it --*- C++ -*-===//
//
// NCCL 2.24 and later run a RAS thread in every process that listens on
// localhost:28028 (NCCL_RAS_ADDR moves it; NCCL_RAS_ENABLE=0 turns it off)
// and answers a line-based text protocol: "CLIENT PROTOCOL 2" is answered
// "SERVER PROTOCOL 2", "TIMEOUT <s>" and "OK", then "VERBOSE STATUS" with a
// report of every communicator of the job (MISMATCH, INCOMPLETE, DEAD
// ranks), after which the server closes the connection. On a hang the agent
// asks once and keeps the answer in the incident's folder (incident.h).
//
//   std::string text = nccl_ras_status(node_env.nccl_ras_addr, std::chrono::seconds(8));
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <string>

namespace ccrun::agent {

// NCCL's own default, "localhost:28028" (NCCL_RAS_ADDR overrides it:
// node_environment.h reads it).
std::string default_nccl_ras_address();

// The status text of the NCCL RAS server at `address` ("host:port",
// "[v6]:port"), or "" when none answers as one (nothing listens, another
// program does, or NCCL_RAS_ENABLE=0) within `timeout` in all.
std::string nccl_ras_status(const std::string& address, std::chrono::milliseconds timeout);

}  // namespace ccrun::agent

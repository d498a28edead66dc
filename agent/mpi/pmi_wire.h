//===- mpi/pmi_wire.h - PMI-1 request lines, parsed and answered -*- C++ -*-===//
//
// MPICH's simple PMI client (and every MPI of the MPICH family: Intel MPI,
// MVAPICH, Cray's) asks its process manager who it is and where its peers
// are over a socket, in the PMI-1 wire protocol: one request a line of
// space-separated key=value tokens, `cmd=` first, one reply line to most.
// This file is the protocol without the socket or the store: a line taken
// apart (parse_request), a reply put together (format_reply), and what a
// node's server does with one request (decide), a pure function of the
// request and the job, so that a table of lines tests it.
//
//   std::optional<PmiRequest> r = parse_request("cmd=get kvsname=kvs_1 key=bc-0");
//   PmiAction a = decide(*r, job);          // kGet, key "bc-0"
//   ... the server looks the key up, then:
//   send(format_reply("get_result", {{"rc", "0"}, {"msg", "success"}, {"value", v}}));
//
// What the requests mean, as the agent serves them, is in docs/mpi.md.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ccrun::agent::mpi {

// The longest request line the server reads (a longer one closes the
// connection): MPICH's client writes at most 1024 bytes a line.
inline constexpr size_t kMaxLine = 4096;
// What `cmd=get_maxes` answers; MPICH's client fits kvsname, key and value
// into its own 1024-byte line and lowers its value limit to make them fit.
inline constexpr int kKvsNameMax = 256;
inline constexpr int kKeyMax = 64;
inline constexpr int kValueMax = 1024;
// The key MPICH reads first: the ranks of each node, so that it need not
// exchange host names to find which ranks share memory.
inline constexpr std::string_view kProcessMappingKey = "PMI_process_mapping";

// One request line, taken apart: its command and its other tokens in order.
struct PmiRequest {
  std::string cmd;
  std::vector<std::pair<std::string, std::string>> args;
  // The value of `key`, or null when the request has none.
  [[nodiscard]] const std::string* arg(std::string_view key) const;
};

// Parses one line (its '\n' and a '\r' before it may be left on). A
// `value=` token runs to the end of the line, spaces included. nullopt when
// the line is not a request: no `cmd=` first, a token without '=', an empty
// key, or longer than kMaxLine.
[[nodiscard]] std::optional<PmiRequest> parse_request(std::string_view line);

// "cmd=<cmd> k=v ...\n". A value with a space or a newline would be
// misread by the client: each is written as '_'.
[[nodiscard]] std::string format_reply(
    std::string_view cmd, std::initializer_list<std::pair<std::string_view, std::string>> args);

// The job as a node's server describes it to its ranks.
struct PmiJob {
  std::string kvsname;     // the one key-value space of the job's attempt
  int world_size = 1;      // PMI_SIZE, and the universe size
  int num_nodes = 1;
  int nproc_per_node = 1;  // every node's ranks, when they are the same
  int appnum = 0;
};

// PMI_process_mapping for `num_nodes` nodes of `per_node` consecutive ranks
// each: "(vector,(0,<nodes>,<per node>))". "" when that is not the job's
// shape (nodes with different counts): then the key is not found, and MPICH
// exchanges host names instead.
[[nodiscard]] std::string process_mapping(int num_nodes, int per_node, int world_size);

// A name safe as a kvsname: ASCII letters, digits, '_', '-' and '.' kept,
// anything else '_', cut at kKvsNameMax.
[[nodiscard]] std::string kvs_name(std::string_view text);

// What the server does with one request.
struct PmiAction {
  enum class Kind {
    kReply,     // send `reply`
    kPut,       // keep `key` = `value` for the job, then send `reply`
    kGet,       // look `key` up in the job's space, answer get_result
    kBarrier,   // answer barrier_out once every rank of the job entered
    kFinalize,  // send `reply`: the rank is done with PMI
    kAbort,     // the rank aborts the job with `exit_code`; no reply
    kClose,     // not a request: close the connection
  };
  Kind kind = Kind::kClose;
  std::string reply;       // kReply, kPut, kFinalize
  std::string key, value;  // kPut, kGet
  int exit_code = 1;       // kAbort
  std::string message;     // kAbort: its message, when the client sent one
};

// The reply or the work for `request` of a rank of `job`. Requests naming
// another kvsname, keys or values over the limits, and unknown commands
// are answered with rc=-1; PMI_process_mapping is answered here.
[[nodiscard]] PmiAction decide(const PmiRequest& request, const PmiJob& job);

// get_result for a key found (value) or not (nullopt).
[[nodiscard]] std::string get_reply(const std::string& key, const std::optional<std::string>& value);

}  // namespace ccrun::agent::mpi

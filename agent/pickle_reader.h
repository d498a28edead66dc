//===- pickle_reader.h - Python pickles of plain data, as JSON ---*- C++ -*-===//
//
// torch's NCCL flight recorder dumps its state as a pickle (torch's own
// pickler, protocol 2) of dicts, lists, tuples, strings, integers, floats,
// booleans and None. The agent reads those dumps on a hang to say which
// collectives each rank's GPU has not finished (flight_recorder.h), without
// a Python of its own: this reads that subset of the pickle format.
//
// What it reads: the binary opcodes (protocol 2 and later) for those types
// (tuples become arrays, dict keys that are not strings their JSON text),
// the memo (BINPUT, BINGET, MEMOIZE), POP and FRAME. Anything else — a
// class, a global, a persistent id, bytes — is an error naming the opcode:
// such a pickle holds objects, not data, and a tool that needs Python
// should read it.
//
//   nlohmann::json dump = read_pickle(bytes);   // throws PickleError
//
//===----------------------------------------------------------------------===//
#pragma once

#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ccrun::agent {

struct PickleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value `bytes` pickles. Throws PickleError for a truncated or
// malformed pickle, an opcode outside the subset above, nesting deeper than
// 100 (a cycle through the memo included), or more than 4 million values
// once the values the memo shares are copied where each is referenced.
nlohmann::json read_pickle(std::string_view bytes);

}  // namespace ccrun::agent

//===- ccrun/host_name.h - This machine's name, read in one place -*- C++ -*-//
//
// The name the agent writes into failure records and the rendezvous into
// each node's entry (what `ccrun status` and the failure report show):
//
//   std::string me = ccrun::host_name();   // "node7", as gethostname says
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace ccrun {

// This machine's host name (gethostname), or "" when it cannot be read.
[[nodiscard]] std::string host_name();

}  // namespace ccrun

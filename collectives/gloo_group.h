//===- gloo_group.h - The Gloo backend, inside the library -------*- C++ -*-===//
//
// create_gloo_group (include/ccrun/collectives.h) gives a Gloo group that
// records its calls in a progress slot of its own (progress_writer.h). The
// default group (dispatch_group.cpp) records each call once, in its own
// slot, for both of its halves; it makes its Gloo half, and that half's
// subgroups, with these, handing in its GroupProgress.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ccrun/collectives.h"
#include "progress_writer.h"

namespace ccrun::collectives {

// create_gloo_group's group, recording its calls into `progress`, which the
// caller opens before the first call (or leaves closed: not recorded).
std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<store::Store> store, int rank,
                                              int size, std::chrono::milliseconds timeout,
                                              std::string host,
                                              std::shared_ptr<GroupProgress> progress);

// gloo.new_group(ranks), the subgroup recording into `progress` rather
// than into a slot of its own. `gloo` is a group of this file (create_ or
// make_gloo_group); throws Error otherwise. Collective, as new_group is.
std::shared_ptr<ProcessGroup> split_gloo_group(ProcessGroup& gloo, std::vector<int> ranks,
                                               std::shared_ptr<GroupProgress> progress);

}  // namespace ccrun::collectives

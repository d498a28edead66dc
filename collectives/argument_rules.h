//===- argument_rules.h - What every backend accepts, written once -*- C++ -*-//
//
// The argument rules of ProcessGroup's operations (include/ccrun/collectives.h),
// shared by the Gloo and NCCL backends so that a call one backend refuses
// the other refuses too, with the same words. Pure functions: each checks
// one rule and throws ccrun::Error (NotSupportedError for a buffer on the
// wrong device) naming the operation, the group and rank, and the bad value.
// Backend-specific checks (the NCCL backend's pointer query) come after.
//
// Settled where the backends used to differ (docs/collectives.md):
//   - new_group: every rank in range and listed once;
//   - all_to_all: each buffer holds exactly what its counts add up to (the
//     equal split: send.count == recv.count, a multiple of the group size).
//
//   const std::string locus = "on group [0,1] rank 1";   // built once per group
//   rules::Call call{"broadcast", locus, /*rank=*/1, /*size=*/2};
//   rules::check_peer(call, "root", root);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "ccrun/collectives.h"

namespace ccrun::collectives::rules {

// One call, as errors name it: "<op> <locus>: <what is wrong>".
struct Call {
  const char* op;             // "all_gather"
  const std::string& locus;   // "on group [0,1] rank 1", the group's own text
  int rank;                   // this rank in the group
  int size;                   // the group's size
  std::string where() const;  // "<op> <locus>"
};

// `b` lives on `device` (the backend's side) and is not null unless empty.
void check_buffer(const Call& call, const Buffer& b, DeviceType device);

// `peer` (a root, dst or src, called `role`) is a rank of the group.
void check_peer(const Call& call, const char* role, int peer);

// A message tag is 0 or more.
void check_tag(const Call& call, int tag);

// all_gather: same data type; recv.count == size * send.count.
void check_all_gather(const Call& call, const Buffer& send, const Buffer& recv);

// reduce_scatter: same data type; send.count == size * recv.count.
void check_reduce_scatter(const Call& call, const Buffer& send, const Buffer& recv);

// gather: root in range; on root, as all_gather.
void check_gather(const Call& call, const Buffer& send, const Buffer& recv, int root);

// scatter: root in range; on root, as reduce_scatter.
void check_scatter(const Call& call, const Buffer& send, const Buffer& recv, int root);

// all_to_all with equal splits: send.count == recv.count, a multiple of the
// group size. Returns the per-rank counts.
[[nodiscard]] std::vector<size_t> equal_split(const Call& call, const Buffer& send,
                                              const Buffer& recv);

// all_to_all with counts: one count per rank on each side, one data type,
// and each buffer holds exactly the sum of its counts.
void check_all_to_all(const Call& call, const Buffer& send, const std::vector<size_t>& send_counts,
                      const Buffer& recv, const std::vector<size_t>& recv_counts);

// new_group: every rank in range, none listed twice.
void check_group_ranks(const Call& call, const std::vector<int>& ranks);

}  // namespace ccrun::collectives::rules

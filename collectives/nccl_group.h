//===- nccl_group.h - The NCCL backend --------------------------*- C++ -*-===//
//
// A ProcessGroup for CUDA buffers over NCCL, written against the seams of
// device_api.h, so it is compiled in every build and CPU tests drive it with
// a fake NCCL (tests/collectives/fake_nccl.h). In a build without NCCL,
// default_devices() has no NcclApi and creating a group fails with the
// reason.
//
//   auto pg = create_nccl_group(store, rank, size, timeout, default_devices());
//   pg->all_reduce({dptr, n, DataType::kFloat32, DeviceType::kCuda})->wait();
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "ccrun/collectives.h"
#include "device_api.h"
#include "progress_writer.h"

namespace ccrun::collectives {

// The device this rank's NCCL group uses: LOCAL_RANK when set (an index
// among the devices CUDA_VISIBLE_DEVICES leaves visible), else the rank in
// the job (the default group's) modulo the device count. Throws NotSupportedError when no device is visible and
// ConfigError when LOCAL_RANK names a device that is not there (two ranks
// on one GPU is what NCCL refuses as "Duplicate GPU detected").
int nccl_device_for(DeviceRuntime& runtime, int rank);

// The (colour, key) this rank passes to ncclCommSplit for new_group(ranks):
// (0, its index in ranks) for members, (kNcclNoColor, 0) for the others.
// `ranks` passed rules::check_group_ranks (argument_rules.h) first.
std::pair<int, int> nccl_split_colour(const std::vector<int>& ranks, int rank);

// The op NCCL is given for `op` in a group of `size` ranks. At size 1 Avg
// is passed as Sum (the same result, x / 1 == x): NCCL's one-rank path runs
// ncclAvg on floating types through a kernel that leaves the last elements
// of an out-of-place result unwritten for some counts (docs/collectives.md,
// "NCCL at world size 1").
ReduceOp nccl_reduce_op(ReduceOp op, int size);

// A group of `size` ranks whose NCCL unique id travels through `store`
// (key "unique_id"), on the device nccl_device_for names. Blocks until every
// rank joined (ncclCommInitRank). `global` holds the job's rank of each
// member (default 0..size-1): for messages, and for the device choice.
// Its calls are recorded into `progress` (progress_writer.h), which the
// caller opens before the first call; null: into a slot of its own, the
// world group's when `global` is empty, else a subgroup's.
std::shared_ptr<ProcessGroup> create_nccl_group(std::shared_ptr<store::Store> store, int rank,
                                                int size, std::chrono::milliseconds timeout,
                                                Devices devices, std::vector<int> global = {},
                                                std::shared_ptr<GroupProgress> progress = nullptr);

// nccl.new_group(ranks), the subgroup recording into `progress` rather than
// into a slot of its own (the default group's halves share one). `nccl` is
// a group from create_nccl_group; throws Error otherwise. Collective.
std::shared_ptr<ProcessGroup> split_nccl_group(ProcessGroup& nccl, std::vector<int> ranks,
                                               std::shared_ptr<GroupProgress> progress);

}  // namespace ccrun::collectives

//===- nccl_group.h - The NCCL backend, when built --------------*- C++ -*-===//
//
// Present in builds with CCRUN_HAVE_NCCL (CUDA and NCCL found); see
// nccl_group.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <memory>

#include "ccrun/collectives.h"

namespace ccrun::collectives {

// True when a CUDA device can be used here.
bool nccl_available();

std::shared_ptr<ProcessGroup> create_nccl_group(std::shared_ptr<rendezvous::Store> store, int rank,
                                                int size, std::chrono::milliseconds timeout);

}  // namespace ccrun::collectives

//===- dispatch_group.h - One group for host and CUDA buffers ---*- C++ -*-===//
//
// CollectivesBackend::kAuto: a ProcessGroup that sends host buffers to a Gloo group and
// CUDA buffers to an NCCL group (torch 2.x's "cpu:gloo,cuda:nccl"), each
// under its own store prefix ("gloo/", "nccl/"). The NCCL group is made at
// the first CUDA buffer (or at once with nccl_at_init), so a host-only
// program never touches CUDA or NCCL.
//
// make_group is init_process_group after the store is open; tests call it
// (and init_process_group_with) with fake Devices.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ccrun/collectives.h"
#include "ccrun/progress.h"
#include "device_api.h"

namespace ccrun::collectives {

struct GroupSpec {
  CollectivesBackend backend = CollectivesBackend::kAuto;
  std::shared_ptr<store::Store> store;  // the job's, unprefixed by backend; null for kMpi
  int rank = 0, size = 1;               // kMpi: -1 takes MPI's
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::string host = "127.0.0.1";  // where Gloo listens
  bool nccl_at_init = false;       // CollectivesBackend::kAuto: make the NCCL group now
  // Where the group and its subgroups record their calls
  // (progress_writer.h): this process's record, or null for nowhere.
  progress::Record* progress_record = progress::record();
};

// Throws NotSupportedError, with the reason, when CollectivesBackend::kNccl cannot work
// over `devices` (no NCCL in this build, or no device visible).
void require_nccl(Devices& devices);

// The group spec.backend names, over `devices`.
std::shared_ptr<ProcessGroup> make_group(const GroupSpec& spec, Devices devices);

// init_process_group over `devices` instead of default_devices().
std::shared_ptr<ProcessGroup> init_process_group_with(InitOptions options, Devices devices);

}  // namespace ccrun::collectives

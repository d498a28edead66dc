//===- node_environment.h - What the agent reads from its own environment -*- C++ -*-===//
//
// The JobSpec is the job, as the launcher resolved it from flags, PET_*
// variables and YAML. Beside it, the agent honours a few variables of the
// node it runs on: conventions of torch's elastic agent that a scheduler, a
// container or the user's shell sets, which torchrun's agent reads from its
// environment too (they are not flags there either). They are read here
// once, when the agent starts, and nowhere else in the agent; the one
// exception is TORCHELASTIC_ERROR_FILE, which write_launcher_error
// (ccrun/agent.h) reads, since the launcher writes ccrun's own error there
// before any agent exists.
//
//   NodeEnvironment env = NodeEnvironment::read();
//   if (env.file_timer) serve_file_timer(env.timer_file);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace ccrun::agent {

struct NodeEnvironment {
  // OMP_NUM_THREADS is set: the workers inherit it (else each gets 1, and
  // the agent says so, as torchrun does).
  bool omp_num_threads_set = false;
  // TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: a dynamic round's rank-0 worker
  // hosts the workers' store, as with torch 1.x (store_plan.h).
  bool no_shared_worker_store = false;
  // TORCHELASTIC_ENABLE_FILE_TIMER=1: serve torch's FileTimer at
  // TORCHELASTIC_TIMER_FILE ("" = a FIFO of the agent's own).
  bool file_timer = false;
  std::string timer_file;
  // TMPDIR, else /tmp: where the health gate checks the free space.
  std::string temp_dir = "/tmp";
  // NCCL_RAS_ADDR, else NCCL's default (localhost:28028): whom a hang asks
  // for NCCL's RAS status.
  std::string nccl_ras_addr;
  // CCRUN_NVML_LIBRARY, else "" (the driver's libnvidia-ml.so.1): the NVML
  // the health gate's GPU checks open (gpu_health.h); a path for a driver
  // installed elsewhere, or the tests' stand-in.
  std::string nvml_library;
  // CUDA_VISIBLE_DEVICES as the agent got it: the GPUs the gate expects.
  std::string cuda_visible_devices;
  // /proc/driver/nvidia exists: the NVIDIA driver is loaded (a GPU node).
  bool nvidia_driver = false;

  // From this process's environment.
  static NodeEnvironment read();
};

}  // namespace ccrun::agent

//===- gpu_health.h - The health gate's GPU checks, through NVML -*- C++ -*-===//
//
// On a GPU node the gate also asks the driver, through NVML, whether the
// node's GPUs can take a round:
//
//   gpus        every expected GPU is visible: those CUDA_VISIBLE_DEVICES
//               names, else as many as the node's first gate saw (a GPU that
//               fell off the bus since fails); none is lost
//   gpu_pages   no page retirement pending (an uncorrectable error a reboot
//               or GPU reset must clear), no row remap pending or failed
//   gpu_ecc     uncorrectable ECC errors (volatile count) not rising since
//               the node's previous gate
//   gpu_memory  no process holds GPU memory: one left by an attempt before
//               (a worker's child that outlived it) is waited for, up to the
//               gate's bound, then fails
//
// NVML (the driver's libnvidia-ml.so.1) is opened at run time on the first
// gate and kept: no build dependency, and on a node without it (a CPU node)
// the checks say they cannot run and do not count against the node. The
// driver is reached through a small interface (GpuProbe), so that tests
// drive the checks with a stand-in library or a fake probe.
//
//   GpuChecks gpus(open_nvml(node_env.nvml_library));
//   for (auto& c : gpus.run(bound, visible)) report.checks.push_back(c);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "health_gate.h"

namespace ccrun::agent {

// A process holding memory on a GPU.
struct GpuProcess {
  unsigned pid = 0;
  uint64_t used_bytes = 0;
};

// One GPU as the driver reports it now; nullopt: the GPU does not support it.
struct GpuState {
  int index = 0;
  bool lost = false;                       // NVML_ERROR_GPU_IS_LOST
  std::optional<bool> pages_pending;       // retired pages pending a reset
  std::optional<bool> rows_pending;        // a row remap pending a reset
  bool remap_failed = false;               // a row remap failed
  std::optional<uint64_t> uncorrected_ecc; // volatile uncorrectable ECC errors
  std::vector<GpuProcess> processes;       // compute processes on it
};

// The driver, as the checks need it.
class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  // Every GPU the driver sees now. Throws ccrun::Error when it cannot tell.
  virtual std::vector<GpuState> read() = 0;
};

// A probe, or why there is none (no NVML here: the checks cannot run).
struct OpenedProbe {
  std::unique_ptr<GpuProbe> probe;
  std::string why_not;
};

// NVML from `library` ("" = libnvidia-ml.so.1), opened and initialized.
// The agent calls it only where the NVIDIA driver is loaded
// (NodeEnvironment::nvidia_driver) or a library is named.
OpenedProbe open_nvml(const std::string& library);

// The pure verdicts (each check's name as in the overview above).
// `expected`: the indexes the job expects, empty = as many as `first_count`.
HealthCheck judge_gpus_visible(const std::vector<GpuState>& gpus, const std::vector<int>& expected,
                               int first_count);
HealthCheck judge_gpu_pages(const std::vector<GpuState>& gpus);
// `before`: each GPU's count at the previous gate (none: the first gate).
HealthCheck judge_gpu_ecc(const std::vector<GpuState>& gpus,
                          const std::map<int, uint64_t>& before);
// `waited`: how long the check waited for the memory to be freed;
// `gave_up`: it waited its whole bound.
HealthCheck judge_gpu_memory(const std::vector<GpuState>& gpus, std::chrono::milliseconds waited,
                             bool gave_up);

// The GPU checks of a node's gates, with what they remember between gates.
class GpuChecks {
 public:
  explicit GpuChecks(OpenedProbe opened) : opened_(std::move(opened)) {}

  // One gate's GPU checks. `visible`: CUDA_VISIBLE_DEVICES' indexes (empty:
  // unset, or not indexes); `bound`: the longest it waits for GPU memory.
  // `poll`: how often it looks again meanwhile (the driver has no event).
  std::vector<HealthCheck> run(std::chrono::milliseconds bound, const std::vector<int>& visible,
                               std::chrono::milliseconds poll = std::chrono::milliseconds(100));

 private:
  OpenedProbe opened_;
  int first_count_ = -1;            // GPUs the first gate saw
  std::map<int, uint64_t> ecc_;     // each GPU's count at the previous gate
};

}  // namespace ccrun::agent

// What the agent reads from its own environment (see node_environment.h).
#include "node_environment.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "nccl_ras.h"

namespace ccrun::agent {
namespace {

const char* value(const char* name) { return std::getenv(name); }

}  // namespace

NodeEnvironment NodeEnvironment::read() {
  NodeEnvironment e;
  e.omp_num_threads_set = value("OMP_NUM_THREADS") != nullptr;
  const char* no_share = value("TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
  e.no_shared_worker_store = no_share && std::string(no_share) == "1";
  const char* timer = value("TORCHELASTIC_ENABLE_FILE_TIMER");
  e.file_timer = timer && std::string(timer) == "1";
  if (const char* v = value("TORCHELASTIC_TIMER_FILE")) e.timer_file = v;
  if (const char* v = value("TMPDIR"); v && *v) e.temp_dir = v;
  const char* ras = value("NCCL_RAS_ADDR");
  e.nccl_ras_addr = ras && *ras ? ras : default_nccl_ras_address();
  if (const char* v = value("CCRUN_NVML_LIBRARY")) e.nvml_library = v;
  if (const char* v = value("CUDA_VISIBLE_DEVICES")) e.cuda_visible_devices = v;
  e.nvidia_driver = ::access("/proc/driver/nvidia", F_OK) == 0;
  return e;
}

}  // namespace ccrun::agent

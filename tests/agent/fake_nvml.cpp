// A stand-in for the driver's libnvidia-ml.so.1, for the health gate's GPU
// checks on machines without a GPU (agent/gpu_health.h): it exports the
// NVML calls the gate makes and answers from a JSON file named by
// FAKE_NVML_STATE, read again at each nvmlDeviceGetCount_v2, so a test can
// change a GPU while an agent runs:
//   {"init_error": 0,
//    "gpus": [{"lost": false, "pages_pending": false, "rows_pending": false,
//              "remap_failed": false, "ecc": 0,
//              "processes": [{"pid": 4242, "used_mib": 1024, "until_ms": 0}]}]}
// A process whose until_ms (wall clock, ms since the epoch) has passed is
// gone; 0 holds forever. A GPU field left out is "not supported".
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>

namespace {

using json = nlohmann::json;
std::mutex mu;
json state;

void load() {
  const char* path = std::getenv("FAKE_NVML_STATE");
  std::ifstream in(path ? path : "");
  json j = json::parse(in, nullptr, false);
  state = j.is_object() ? j : json::object();
}

const json* gpu(void* handle) {
  size_t i = reinterpret_cast<size_t>(handle) - 1;
  if (!state.contains("gpus") || i >= state["gpus"].size()) return nullptr;
  return &state["gpus"][i];
}

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(mu);
  load();
  return state.value("init_error", 0);
}
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int r) { return r == 15 ? "GPU is lost" : r ? "Unknown Error" : "Success"; }

int nvmlDeviceGetCount_v2(unsigned* n) {
  std::lock_guard<std::mutex> lock(mu);
  load();
  *n = state.contains("gpus") ? unsigned(state["gpus"].size()) : 0;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** handle) {
  std::lock_guard<std::mutex> lock(mu);
  *handle = reinterpret_cast<void*>(size_t(i) + 1);
  const json* g = gpu(*handle);
  if (!g) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  return g->value("lost", false) ? 15 : 0;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void* handle, int* pending) {
  std::lock_guard<std::mutex> lock(mu);
  const json* g = gpu(handle);
  if (!g || !g->contains("pages_pending")) return 3;  // NVML_ERROR_NOT_SUPPORTED
  *pending = (*g)["pages_pending"].get<bool>() ? 1 : 0;
  return 0;
}

int nvmlDeviceGetRemappedRows(void* handle, unsigned* corr, unsigned* unc, unsigned* pending,
                              unsigned* failed) {
  std::lock_guard<std::mutex> lock(mu);
  const json* g = gpu(handle);
  if (!g || !g->contains("rows_pending")) return 3;
  *corr = *unc = 0;
  *pending = (*g)["rows_pending"].get<bool>() ? 1 : 0;
  *failed = g->value("remap_failed", false) ? 1 : 0;
  return 0;
}

int nvmlDeviceGetTotalEccErrors(void* handle, int, int, unsigned long long* count) {
  std::lock_guard<std::mutex> lock(mu);
  const json* g = gpu(handle);
  if (!g || !g->contains("ecc")) return 3;
  *count = (*g)["ecc"].get<unsigned long long>();
  return 0;
}

struct ProcessInfoV1 {
  unsigned pid;
  unsigned long long used;
};

int nvmlDeviceGetComputeRunningProcesses(void* handle, unsigned* count, ProcessInfoV1* infos) {
  std::lock_guard<std::mutex> lock(mu);
  const json* g = gpu(handle);
  unsigned n = 0, room = *count;
  if (g && g->contains("processes")) {
    for (const auto& p : (*g)["processes"]) {
      long long until = p.value("until_ms", 0LL);
      if (until != 0 && until <= now_ms()) continue;
      if (n < room) infos[n] = {p.value("pid", 0u), p.value("used_mib", 0ull) << 20};
      ++n;
    }
  }
  *count = n;
  return n > room ? 7 : 0;  // NVML_ERROR_INSUFFICIENT_SIZE
}

}  // extern "C"

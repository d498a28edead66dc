// The health gate's GPU checks through NVML (see gpu_health.h). The
// functions are [[gnu::cold]]: on a node without the NVIDIA driver they never
// run, and stay out of the text pages every launch touches (its RSS target).
#include "gpu_health.h"

#include <dlfcn.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "ccrun/error.h"

namespace ccrun::agent {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// The part of NVML's C API the checks use, as the driver's library exports
// it (nvml.h is not needed to build; its ABI for these calls is stable
// across drivers).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kGpuIsLost = 15;
constexpr int kUncorrected = 1;  // nvmlMemoryErrorType_t
constexpr int kVolatile = 0;     // nvmlEccCounterType_t
struct ProcessInfoV1 {           // nvmlProcessInfo_v1_t: the unversioned call's
  unsigned int pid;
  unsigned long long used_gpu_memory;
};

class NvmlProbe final : public GpuProbe {
 public:
  explicit NvmlProbe(void* lib) : lib_(lib) {}
  ~NvmlProbe() override {
    if (shutdown_) shutdown_();
    ::dlclose(lib_);
  }

  // Resolves the calls and initializes NVML; "" on success, else why not.
  std::string open() {
    std::string missing;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib_, name));
      if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
    };
    sym(init_, "nvmlInit_v2");
    sym(shutdown_, "nvmlShutdown");
    sym(error_string_, "nvmlErrorString");
    sym(count_, "nvmlDeviceGetCount_v2");
    sym(handle_, "nvmlDeviceGetHandleByIndex_v2");
    sym(pages_pending_, "nvmlDeviceGetRetiredPagesPendingStatus");
    sym(remapped_rows_, "nvmlDeviceGetRemappedRows");
    sym(ecc_, "nvmlDeviceGetTotalEccErrors");
    sym(processes_, "nvmlDeviceGetComputeRunningProcesses");
    if (!missing.empty()) {
      shutdown_ = nullptr;
      return "the NVML library lacks " + missing;
    }
    if (nvmlReturn_t r = init_(); r != kSuccess) {
      shutdown_ = nullptr;
      return "nvmlInit: " + error(r);
    }
    return "";
  }

  std::vector<GpuState> read() override {
    unsigned n = 0;
    if (nvmlReturn_t r = count_(&n); r != kSuccess) throw Error("nvmlDeviceGetCount: " + error(r));
    std::vector<GpuState> gpus;
    for (unsigned i = 0; i < n; ++i) gpus.push_back(read_one(i));
    return gpus;
  }

 private:
  GpuState read_one(unsigned i) {
    GpuState g;
    g.index = int(i);
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t r = handle_(i, &dev);
    if (r == kGpuIsLost) {
      g.lost = true;
      return g;
    }
    if (r != kSuccess) throw Error("nvmlDeviceGetHandleByIndex(" + std::to_string(i) + "): " + error(r));
    int pending = 0;
    if (pages_pending_(dev, &pending) == kSuccess) g.pages_pending = pending != 0;
    unsigned corrected = 0, uncorrected = 0, is_pending = 0, failed = 0;
    if (remapped_rows_(dev, &corrected, &uncorrected, &is_pending, &failed) == kSuccess) {
      g.rows_pending = is_pending != 0;
      g.remap_failed = failed != 0;
    }
    unsigned long long ecc = 0;
    if (ecc_(dev, kUncorrected, kVolatile, &ecc) == kSuccess) g.uncorrected_ecc = ecc;
    read_processes(dev, g);
    return g;
  }

  void read_processes(nvmlDevice_t dev, GpuState& g) {
    std::vector<ProcessInfoV1> infos(16);
    for (;;) {
      unsigned count = unsigned(infos.size());
      nvmlReturn_t r = processes_(dev, &count, infos.data());
      if (r == kInsufficientSize) {
        infos.resize(size_t(count) + 16);
        continue;
      }
      if (r == kNotSupported) return;
      if (r != kSuccess) throw Error("nvmlDeviceGetComputeRunningProcesses: " + error(r));
      for (unsigned k = 0; k < count; ++k) {
        g.processes.push_back({infos[k].pid, infos[k].used_gpu_memory});
      }
      return;
    }
  }

  std::string error(nvmlReturn_t r) const {
    const char* text = error_string_ ? error_string_(r) : nullptr;
    return (text ? std::string(text) : "error") + " (" + std::to_string(r) + ")";
  }

  void* lib_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count_)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*pages_pending_)(nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*remapped_rows_)(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*ecc_)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*processes_)(nvmlDevice_t, unsigned*, ProcessInfoV1*) = nullptr;
};

HealthCheck check(const char* name, bool ok, std::string detail) {
  return {name, ok ? HealthCheck::Verdict::kOk : HealthCheck::Verdict::kFailed, 0,
          std::move(detail)};
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

[[gnu::cold]] OpenedProbe open_nvml(const std::string& library) {
  std::string name = library.empty() ? "libnvidia-ml.so.1" : library;
  void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = ::dlerror();
    return {nullptr, "no NVML: " + std::string(e ? e : name)};
  }
  auto probe = std::make_unique<NvmlProbe>(lib);
  if (std::string why = probe->open(); !why.empty()) return {nullptr, why};
  return {std::move(probe), ""};
}

[[gnu::cold]] HealthCheck judge_gpus_visible(const std::vector<GpuState>& gpus, const std::vector<int>& expected,
                               int first_count) {
  std::string lost;
  for (const auto& g : gpus) {
    if (g.lost) lost += (lost.empty() ? "" : ", ") + std::to_string(g.index);
  }
  if (!lost.empty()) return check("gpus", false, "GPU " + lost + " lost (fell off the bus?)");
  int n = int(gpus.size());
  for (int i : expected) {
    if (i >= n) {
      return check("gpus", false, "GPU " + std::to_string(i) + " (CUDA_VISIBLE_DEVICES) missing: " +
                                      std::to_string(n) + " visible");
    }
  }
  if (expected.empty() && first_count >= 0 && n < first_count) {
    return check("gpus", false, std::to_string(n) + " visible, " + std::to_string(first_count) +
                                    " at the node's first gate");
  }
  return check("gpus", true, std::to_string(n) + " visible");
}

[[gnu::cold]] HealthCheck judge_gpu_pages(const std::vector<GpuState>& gpus) {
  std::string bad;
  bool known = false;
  for (const auto& g : gpus) {
    known = known || g.pages_pending || g.rows_pending;
    std::string gpu = "GPU " + std::to_string(g.index) + ": ";
    if (g.pages_pending.value_or(false)) bad += (bad.empty() ? "" : "; ") + gpu + "page retirement pending";
    if (g.rows_pending.value_or(false)) bad += (bad.empty() ? "" : "; ") + gpu + "row remap pending";
    if (g.remap_failed) bad += (bad.empty() ? "" : "; ") + gpu + "row remap failed";
  }
  if (!bad.empty()) return check("gpu_pages", false, bad + " (a GPU reset or reboot clears it)");
  if (!known && !gpus.empty()) {
    return {"gpu_pages", HealthCheck::Verdict::kCannotRun, 0, "not supported by these GPUs"};
  }
  return check("gpu_pages", true, "none pending");
}

[[gnu::cold]] HealthCheck judge_gpu_ecc(const std::vector<GpuState>& gpus,
                          const std::map<int, uint64_t>& before) {
  std::string rising;
  uint64_t total = 0;
  bool known = false;
  for (const auto& g : gpus) {
    if (!g.uncorrected_ecc) continue;
    known = true;
    total += *g.uncorrected_ecc;
    auto it = before.find(g.index);
    if (it != before.end() && *g.uncorrected_ecc > it->second) {
      rising += (rising.empty() ? "" : "; ") + std::string("GPU ") + std::to_string(g.index) + ": " +
                std::to_string(it->second) + " -> " + std::to_string(*g.uncorrected_ecc);
    }
  }
  if (!rising.empty()) {
    return check("gpu_ecc", false, "uncorrectable ECC errors rising since the last gate: " + rising);
  }
  if (!known && !gpus.empty()) {
    return {"gpu_ecc", HealthCheck::Verdict::kCannotRun, 0, "ECC not supported or off"};
  }
  return check("gpu_ecc", true, std::to_string(total) + " uncorrectable (not rising)");
}

[[gnu::cold]] HealthCheck judge_gpu_memory(const std::vector<GpuState>& gpus, milliseconds waited, bool gave_up) {
  std::string held;
  for (const auto& g : gpus) {
    for (const auto& p : g.processes) {
      held += (held.empty() ? "" : "; ") + std::string("GPU ") + std::to_string(g.index) +
              ": pid " + std::to_string(p.pid) + " holds " + mib(p.used_bytes);
    }
  }
  if (!held.empty() && gave_up) {
    return check("gpu_memory", false, held + ", still after " + format_duration(waited));
  }
  if (!held.empty()) return check("gpu_memory", true, held);  // not judged yet
  std::string how = waited.count() > 0 ? "freed after " + format_duration(waited) : "free";
  return check("gpu_memory", true, how);
}

[[gnu::cold]] std::vector<HealthCheck> GpuChecks::run(milliseconds bound, const std::vector<int>& visible,
                                        milliseconds poll) {
  auto t0 = Clock::now();
  auto since = [&t0] { return std::chrono::duration_cast<milliseconds>(Clock::now() - t0); };
  if (!opened_.probe) {
    return {{"gpus", HealthCheck::Verdict::kCannotRun, 0, opened_.why_not}};
  }
  std::vector<GpuState> gpus;
  try {
    gpus = opened_.probe->read();
  } catch (const std::exception& e) {
    return {{"gpus", HealthCheck::Verdict::kFailed, since().count(), e.what()}};
  }
  if (first_count_ < 0) first_count_ = int(gpus.size());
  std::vector<HealthCheck> out;
  out.push_back(judge_gpus_visible(gpus, visible, first_count_));
  out.push_back(judge_gpu_pages(gpus));
  out.push_back(judge_gpu_ecc(gpus, ecc_));
  for (const auto& g : gpus) {
    if (g.uncorrected_ecc) ecc_[g.index] = *g.uncorrected_ecc;
  }
  for (auto& c : out) c.ms = since().count();
  // Leftover memory: looked at again until it is freed or the bound passes.
  auto held = [](const std::vector<GpuState>& v) {
    return std::any_of(v.begin(), v.end(), [](const GpuState& g) { return !g.processes.empty(); });
  };
  auto w0 = Clock::now();
  auto waited = [&w0] { return std::chrono::duration_cast<milliseconds>(Clock::now() - w0); };
  bool had = held(gpus);
  while (held(gpus) && waited() < bound) {
    std::this_thread::sleep_for(std::min(poll, bound - waited()));
    try {
      gpus = opened_.probe->read();
    } catch (const std::exception&) {
      break;  // judged on what was last read
    }
  }
  HealthCheck memory = judge_gpu_memory(gpus, had ? waited() : milliseconds(0), held(gpus));
  memory.ms = since().count();
  out.push_back(memory);
  return out;
}

}  // namespace ccrun::agent

// The health gate's GPU checks: the verdicts, and GpuChecks driven through
// a fake probe (what the driver says, gate after gate).
#include <catch2/catch.hpp>

#include "cuda_visible_devices.h"
#include "gpu_health.h"

using namespace ccrun::agent;
using namespace std::chrono_literals;
using Verdict = HealthCheck::Verdict;

namespace {

GpuState gpu(int index) {
  GpuState g;
  g.index = index;
  g.pages_pending = false;
  g.rows_pending = false;
  g.uncorrected_ecc = 0;
  return g;
}

class FakeProbe final : public GpuProbe {
 public:
  explicit FakeProbe(std::vector<std::vector<GpuState>>& reads) : reads_(reads) {}
  std::vector<GpuState> read() override {
    auto r = reads_.front();
    if (reads_.size() > 1) reads_.erase(reads_.begin());  // the last read repeats
    return r;
  }

 private:
  std::vector<std::vector<GpuState>>& reads_;
};

const HealthCheck& named(const std::vector<HealthCheck>& checks, const std::string& name) {
  for (const auto& c : checks) {
    if (c.name == name) return c;
  }
  FAIL("no check " << name);
  return checks.front();
}

}  // namespace

TEST_CASE("gpu checks: expected GPUs, lost ones, pending retirements and remaps",
          "[health][gpu]") {
  std::vector<GpuState> two{gpu(0), gpu(1)};
  CHECK(judge_gpus_visible(two, {}, 2).verdict == Verdict::kOk);
  CHECK(judge_gpus_visible(two, {0, 1}, -1).verdict == Verdict::kOk);
  HealthCheck missing = judge_gpus_visible(two, {0, 3}, -1);
  CHECK(missing.verdict == Verdict::kFailed);
  CHECK(missing.detail == "GPU 3 (CUDA_VISIBLE_DEVICES) missing: 2 visible");
  CHECK(judge_gpus_visible(two, {}, 4).detail == "2 visible, 4 at the node's first gate");
  two[1].lost = true;
  CHECK(judge_gpus_visible(two, {}, 2).detail == "GPU 1 lost (fell off the bus?)");

  std::vector<GpuState> pages{gpu(0), gpu(1)};
  CHECK(judge_gpu_pages(pages).verdict == Verdict::kOk);
  pages[1].pages_pending = true;
  pages[0].remap_failed = true;
  HealthCheck bad = judge_gpu_pages(pages);
  CHECK(bad.verdict == Verdict::kFailed);
  CHECK(bad.detail == "GPU 0: row remap failed; GPU 1: page retirement pending (a GPU reset or "
                      "reboot clears it)");
  GpuState unknown;
  CHECK(judge_gpu_pages({unknown}).verdict == Verdict::kCannotRun);
}

TEST_CASE("gpu checks: uncorrectable ECC errors may not rise between gates", "[health][gpu]") {
  std::vector<GpuState> now{gpu(0), gpu(1)};
  now[1].uncorrected_ecc = 5;
  CHECK(judge_gpu_ecc(now, {}).verdict == Verdict::kOk);  // the first gate: a baseline
  CHECK(judge_gpu_ecc(now, {{0, 0}, {1, 5}}).verdict == Verdict::kOk);
  HealthCheck rising = judge_gpu_ecc(now, {{0, 0}, {1, 2}});
  CHECK(rising.verdict == Verdict::kFailed);
  CHECK(rising.detail == "uncorrectable ECC errors rising since the last gate: GPU 1: 2 -> 5");
}

TEST_CASE("gpu checks: leftover GPU memory is waited for, then fails at the bound",
          "[health][gpu]") {
  GpuState busy = gpu(0);
  busy.processes = {{4242, 1024ull << 20}};
  std::vector<std::vector<GpuState>> reads{{busy}, {busy}, {gpu(0)}};
  GpuChecks freed(OpenedProbe{std::make_unique<FakeProbe>(reads), ""});
  auto checks = freed.run(2s, {}, 1ms);
  CHECK(named(checks, "gpu_memory").verdict == Verdict::kOk);
  CHECK_THAT(named(checks, "gpu_memory").detail, Catch::StartsWith("freed after"));

  std::vector<std::vector<GpuState>> stuck{{busy}};
  GpuChecks held(OpenedProbe{std::make_unique<FakeProbe>(stuck), ""});
  checks = held.run(50ms, {}, 5ms);
  const HealthCheck& m = named(checks, "gpu_memory");
  CHECK(m.verdict == Verdict::kFailed);
  CHECK_THAT(m.detail, Catch::StartsWith("GPU 0: pid 4242 holds 1024 MiB, still after"));
  CHECK(m.ms >= 50);
}

TEST_CASE("gpu checks: a GPU lost since the first gate, and ECC rising between gates",
          "[health][gpu]") {
  GpuState hot = gpu(1);
  hot.uncorrected_ecc = 7;
  std::vector<std::vector<GpuState>> reads{{gpu(0), gpu(1)}, {gpu(0), hot}, {gpu(0)}};
  GpuChecks checks(OpenedProbe{std::make_unique<FakeProbe>(reads), ""});
  auto first = checks.run(10ms, {});
  for (const auto& c : first) CHECK(c.verdict == Verdict::kOk);
  auto second = checks.run(10ms, {});
  CHECK(named(second, "gpu_ecc").verdict == Verdict::kFailed);
  auto third = checks.run(10ms, {});
  CHECK(named(third, "gpus").detail == "1 visible, 2 at the node's first gate");
}

TEST_CASE("gpu checks: no NVML here says so and does not count", "[health][gpu]") {
  OpenedProbe none = open_nvml("/nonexistent/libnvidia-ml.so.1");
  REQUIRE_FALSE(none.probe);
  CHECK_THAT(none.why_not, Catch::StartsWith("no NVML: "));
  GpuChecks checks(std::move(none));
  auto out = checks.run(10ms, {});
  REQUIRE(out.size() == 1);
  CHECK(out[0].verdict == Verdict::kCannotRun);
}

TEST_CASE("gpu checks: CUDA_VISIBLE_DEVICES' indexes", "[health][gpu]") {
  CHECK(cuda_device_indexes("0, 2") == std::vector<int>{0, 2});
  CHECK(cuda_device_indexes("")->empty());
  CHECK(cuda_device_indexes("1,-1,3") == std::vector<int>{1});  // CUDA stops at an invalid index
  CHECK_FALSE(cuda_device_indexes("GPU-8f2c,GPU-11aa"));  // by UUID: the count alone
}

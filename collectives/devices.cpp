// default_devices(): the real CUDA runtime and NCCL (cuda_nccl_api.cpp) in
// builds with CCRUN_HAVE_NCCL; otherwise a runtime that sees no device.
#include <cstdlib>

#include "device_api.h"

namespace ccrun::collectives {

#ifdef CCRUN_HAVE_NCCL
Devices cuda_devices();  // cuda_nccl_api.cpp
#endif

namespace {

// A build without CUDA: no device, every pointer host memory, and every
// other call an error that names the reason (callers check device_count
// first, so these are not reached in practice).
class NoDeviceRuntime : public DeviceRuntime {
 public:
  int device_count() override { return 0; }
  std::string visible_devices() override {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    return v ? v : "";
  }
  CudaStatus pointer_info(const void*, PointerInfo* out) override {
    *out = PointerInfo{};
    return nullptr;
  }
  CudaStatus set_device(int) override { return kNoCuda; }
  CudaStatus create_stream(Stream*) override { return kNoCuda; }
  void destroy_stream(Stream) noexcept override {}
  CudaStatus create_event(Event*) override { return kNoCuda; }
  void destroy_event(Event) noexcept override {}
  CudaStatus record_on_default_stream(Event) override { return kNoCuda; }
  CudaStatus record(Event, Stream) override { return kNoCuda; }
  CudaStatus stream_wait(Stream, Event) override { return kNoCuda; }
  CudaStatus query(Event, bool*) override { return kNoCuda; }
  CudaStatus stream_idle(Stream, bool*) override { return kNoCuda; }
  CudaStatus device_alloc(size_t, void**) override { return kNoCuda; }
  void device_free(void*) noexcept override {}

 private:
  static constexpr const char* kNoCuda =
      "this build has no CUDA (CUDA and NCCL were not found when it was configured)";
};

}  // namespace

Devices default_devices() {
#ifdef CCRUN_HAVE_NCCL
  static const Devices devices = cuda_devices();
#else
  static const Devices devices{std::make_shared<NoDeviceRuntime>(), nullptr};
#endif
  return devices;
}

}  // namespace ccrun::collectives

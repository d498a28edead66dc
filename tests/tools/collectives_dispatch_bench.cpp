// collectives_dispatch_bench: the CPU cost of ccrun's own NCCL path per
// call, without a GPU: all_reduce + wait at world size 1 through the NCCL
// group and through the default group's dispatch, over CUDA and NCCL seams
// that return at once (every call a no-op, every event done). What it
// measures is the part of nccl_overhead_bench's "overhead" that is ccrun's
// code (checks, the Work, the event pool, routing); the CUDA calls ccrun
// makes per operation (pointer query, set device, two event records, a
// stream wait, an event query, NCCL's async-error query) come on top, and
// only a GPU measures those (scripts/gpu-check.sh). One JSON line per path.
//
//   build/tests/collectives_dispatch_bench [calls]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "../../collectives/dispatch_group.h"
#include "../../collectives/nccl_group.h"
#include "ccrun/hash_store.h"

using namespace ccrun;
using namespace ccrun::collectives;

namespace {

// A device where everything is done the moment it is asked.
class InstantRuntime : public DeviceRuntime {
 public:
  int device_count() override { return 1; }
  std::string visible_devices() override { return ""; }
  CudaStatus pointer_info(const void*, PointerInfo* out) override {
    *out = PointerInfo{DeviceType::Cuda, 0};
    return nullptr;
  }
  CudaStatus set_device(int) override { return nullptr; }
  CudaStatus create_stream(Stream* out) override {
    *out = this;
    return nullptr;
  }
  void destroy_stream(Stream) noexcept override {}
  CudaStatus create_event(Event* out) override {
    *out = this;
    return nullptr;
  }
  void destroy_event(Event) noexcept override {}
  CudaStatus record_on_default_stream(Event) override { return nullptr; }
  CudaStatus record(Event, Stream) override { return nullptr; }
  CudaStatus stream_wait(Stream, Event) override { return nullptr; }
  CudaStatus query(Event, bool* done) override {
    *done = true;
    return nullptr;
  }
  CudaStatus stream_idle(Stream, bool* idle) override {
    *idle = true;
    return nullptr;
  }
  CudaStatus device_alloc(size_t, void** out) override {
    *out = &scratch_;
    return nullptr;
  }
  void device_free(void*) noexcept override {}

 private:
  double scratch_ = 0;
};

class InstantNccl : public NcclApi {
 public:
  NcclResult get_unique_id(NcclUniqueId* id) override {
    id->fill(1);
    return NcclResult::Success;
  }
  NcclResult comm_init_rank(Comm* out, int, const NcclUniqueId&, int) override {
    *out = this;
    return NcclResult::Success;
  }
  NcclResult comm_split(Comm c, int, int, Comm* out) override {
    *out = c;
    return NcclResult::Success;
  }
  NcclResult comm_abort(Comm) override { return NcclResult::Success; }
  NcclResult comm_destroy(Comm) override { return NcclResult::Success; }
  NcclResult comm_async_error(Comm, NcclResult* out) override {
    *out = NcclResult::Success;
    return NcclResult::Success;
  }
  std::string error_string(NcclResult, Comm) override { return "none"; }
  NcclResult all_reduce(const void*, void*, size_t, DataType, ReduceOp, Comm, Stream) override {
    return NcclResult::Success;
  }
  NcclResult broadcast(const void*, void*, size_t, DataType, int, Comm, Stream) override {
    return NcclResult::Success;
  }
  NcclResult reduce(const void*, void*, size_t, DataType, ReduceOp, int, Comm, Stream) override {
    return NcclResult::Success;
  }
  NcclResult all_gather(const void*, void*, size_t, DataType, Comm, Stream) override {
    return NcclResult::Success;
  }
  NcclResult reduce_scatter(const void*, void*, size_t, DataType, ReduceOp, Comm, Stream) override {
    return NcclResult::Success;
  }
  NcclResult send(const void*, size_t, DataType, int, Comm, Stream) override { return NcclResult::Success; }
  NcclResult recv(void*, size_t, DataType, int, Comm, Stream) override { return NcclResult::Success; }
  NcclResult group_start() override { return NcclResult::Success; }
  NcclResult group_end() override { return NcclResult::Success; }
};

double best_ns(ProcessGroup& pg, int calls) {
  float x = 1;
  Buffer b{&x, 1, DataType::Float32, DeviceType::Cuda};
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) pg.all_reduce(b)->wait();
    auto t = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, t / calls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::stoi(argv[1]) : 1'000'000;
  Devices dev{std::make_shared<InstantRuntime>(), std::make_shared<InstantNccl>()};
  auto store = std::make_shared<store::HashStore>();
  auto nccl = create_nccl_group(store, 0, 1, std::chrono::seconds(10), dev);
  std::printf("{\"path\":\"nccl group\",\"ns_per_call\":%.1f}\n", best_ns(*nccl, calls));
  GroupSpec spec;
  spec.store = std::make_shared<store::HashStore>();
  auto def = make_group(spec, dev);
  std::printf("{\"path\":\"default group -> nccl\",\"ns_per_call\":%.1f}\n", best_ns(*def, calls));
  return 0;
}

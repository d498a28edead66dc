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
// With --record, the calls are recorded as under ccrun (docs/collectives.md,
// "Progress record"): the bench makes a record file, points
// CCRUN_PROGRESS_FILE at it, and prints each group slot's last sequence
// numbers after the paths.
//
//   build/tests/collectives_dispatch_bench [calls] [--record]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../collectives/dispatch_group.h"
#include "../../collectives/nccl_group.h"
#include "ccrun/hash_store.h"
#include "ccrun/progress.h"

using namespace ccrun;
using namespace ccrun::collectives;

namespace {

// A device where everything is done the moment it is asked.
class InstantRuntime : public DeviceRuntime {
 public:
  int device_count() override { return 1; }
  std::string visible_devices() override { return ""; }
  CudaStatus pointer_info(const void*, PointerInfo* out) override {
    *out = PointerInfo{DeviceType::kCuda, 0};
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
  Buffer b{&x, 1, DataType::kFloat32, DeviceType::kCuda};
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) pg.all_reduce(b)->wait();
    auto t = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, t / calls);
  }
  return best;
}

// A record as ccrun's agent makes one (zeros, then the header), unlinked at
// exit; CCRUN_PROGRESS_FILE names it.
std::string make_record() {
  char path[] = "/tmp/ccrun-bench-progress-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) {
    std::perror("collectives_dispatch_bench: mkstemp");
    std::exit(1);
  }
  std::vector<char> page(progress::kRecordBytes, 0);
  const uint64_t magic = progress::kMagic;
  const uint32_t version = progress::kVersion, bytes = progress::kRecordBytes;
  std::memcpy(page.data(), &magic, 8);
  std::memcpy(page.data() + 8, &version, 4);
  std::memcpy(page.data() + 12, &bytes, 4);
  if (::write(fd, page.data(), page.size()) != ssize_t(page.size())) {
    std::perror("collectives_dispatch_bench: writing the record");
    std::exit(1);
  }
  ::close(fd);
  ::setenv(progress::kFileVar, path, 1);
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 1'000'000;
  bool record = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--record") {
      record = true;
    } else {
      calls = std::stoi(argv[i]);
    }
  }
  std::string record_path;
  if (record) record_path = make_record();
  if (record && !progress::record()) {
    std::fprintf(stderr, "collectives_dispatch_bench: cannot map the record %s\n", record_path.c_str());
    return 1;
  }
  Devices dev{std::make_shared<InstantRuntime>(), std::make_shared<InstantNccl>()};
  auto store = std::make_shared<store::HashStore>();
  auto nccl = create_nccl_group(store, 0, 1, std::chrono::seconds(10), dev);
  std::printf("{\"path\":\"nccl group\",\"ns_per_call\":%.1f}\n", best_ns(*nccl, calls));
  GroupSpec spec;
  spec.store = std::make_shared<store::HashStore>();
  auto def = make_group(spec, dev);
  std::printf("{\"path\":\"default group -> nccl\",\"ns_per_call\":%.1f}\n", best_ns(*def, calls));
  if (progress::Record* r = progress::record()) {
    for (uint32_t i = 0; i < std::min<uint32_t>(r->groups_used, progress::kMaxGroups); ++i) {
      const progress::GroupSlot& s = r->groups[i];
      std::printf("{\"slot\":%u,\"id\":%llu,\"issued\":%llu,\"completed\":%llu,\"op\":\"%s\"}\n", i,
                  (unsigned long long)s.id.load(), (unsigned long long)s.issued.load(),
                  (unsigned long long)s.completed.load(), progress::op_name(s.op.load()));
    }
    ::unlink(record_path.c_str());
  }
  return 0;
}

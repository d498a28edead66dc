//===- fake_nccl.h - CUDA and NCCL on host memory, for CPU tests -*- C++ -*-===//
//
// A test double for device_api.h's seams, so that CPU tests run the real
// NCCL group logic (nccl_group.cpp) and the dispatching group
// (dispatch_group.cpp) with ranks as threads. One FakeCuda is the machine:
// its "GPUs" are host memory it registers as device memory, its
// communicators perform every collective on that memory when the last rank
// has enqueued it, and its events are done when the operations recorded
// before them are. What it models of the real thing, on purpose:
//   - pointer_info says "CUDA, device d" for memory from alloc(), "host"
//     for anything else;
//   - ncclCommInitRank blocks until every rank joined, and refuses two
//     ranks of one communicator on one device ("Duplicate GPU detected");
//   - at one rank, Avg on floating types runs NCCL 2.28's one-rank kernel
//     split (src/device/onerank.cu): blocks of alignUp(n / blocks, 16 /
//     elem) elements, which leave the tail of an out-of-place result
//     unwritten for some counts (docs/collectives.md);
//   - an operation no peer joins stays pending (timeouts); abort and
//     injected asynchronous errors are counted and reported.
// Every call is logged per rank (trace()) for stream-ordering checks.
//
//   auto cuda = std::make_shared<FakeCuda>(2);   // two GPUs
//   Devices dev = cuda->devices_for_rank();       // one per rank thread
//   float* d = cuda->alloc<float>(n, /*device=*/0);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "device_api.h"
#include "reduce_functions.h"

namespace ccrun::test {

using namespace ccrun::collectives;

class FakeCuda : public std::enable_shared_from_this<FakeCuda> {
 public:
  explicit FakeCuda(int devices) : devices_(devices) {}
  ~FakeCuda() {
    for (auto& [p, a] : allocations_) delete[] reinterpret_cast<char*>(p);
  }
  FakeCuda(const FakeCuda&) = delete;  // owns its allocations and communicators
  FakeCuda& operator=(const FakeCuda&) = delete;

  // Host memory that pointer_info reports as memory of CUDA device `device`.
  template <typename T>
  T* alloc(size_t count, int device) {
    return static_cast<T*>(alloc_bytes(count * sizeof(T), device));
  }
  void* alloc_bytes(size_t bytes, int device) {
    char* p = new char[std::max<size_t>(bytes, 1)]();
    std::lock_guard lock(mu_);
    allocations_[reinterpret_cast<uintptr_t>(p)] = {std::max<size_t>(bytes, 1), device};
    return p;
  }
  void free_bytes(void* p) {
    std::lock_guard lock(mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations_.end()) return;
    allocations_.erase(it);
    delete[] static_cast<char*>(p);
  }

  // Devices for one rank (one "process"): its own current device and trace.
  Devices devices_for_rank();

  // Every communicator of rank `rank` (in its own group) reports `r` as
  // its asynchronous error from now on (a peer died, the network failed).
  void inject_async_error(NcclResult r, int rank) {
    std::lock_guard lock(mu_);
    injected_ = r;
    injected_rank_ = rank;
  }
  void set_device_count(int n) {
    std::lock_guard lock(mu_);
    devices_ = n;
  }

  // Counters, for assertions.
  std::atomic<int> comm_inits{0}, comm_splits{0}, comm_aborts{0}, comm_destroys{0},
      collectives{0};

  // ---- used by the fake runtime and NCCL below ----
  struct Op {
    bool done = false;  // guarded by FakeCuda::mu_
  };
  using OpPtr = std::shared_ptr<Op>;
  struct FakeStream {
    int device = 0;
    std::vector<OpPtr> pending;  // guarded by FakeCuda::mu_
  };
  struct FakeEvent {
    std::vector<OpPtr> waits;  // guarded by FakeCuda::mu_
  };
  struct World;
  struct FakeComm {
    std::shared_ptr<World> world;
    int rank = 0;
    int device = 0;
    uint64_t next_seq = 0;
    uint64_t next_split = 0;
    bool aborted = false;
    std::string last_error;
  };
  // One part of one collective: what rank `rank` passed.
  struct Part {
    std::string kind;
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    DataType dtype = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
  };
  struct Slot {
    std::vector<Part> parts;
    int arrived = 0;
    OpPtr op = std::make_shared<Op>();
  };
  struct P2P {
    const void* send = nullptr;
    void* recv = nullptr;
    size_t bytes = 0;
    OpPtr op = std::make_shared<Op>();
  };
  struct SplitCall {
    std::vector<std::pair<int, int>> colour_key;  // per parent rank
    int arrived = 0;
    std::vector<FakeComm*> result;  // per parent rank, once all arrived
    bool ready = false;
  };
  struct World {
    int nranks = 0;
    std::vector<FakeComm*> members;
    int joined = 0;
    std::map<uint64_t, Slot> slots;
    std::map<std::pair<int, int>, std::deque<P2P>> sends, recvs;  // (src, dst)
    std::map<uint64_t, SplitCall> splits;
    std::string error;  // a mismatch seen between ranks
  };

  std::mutex mu_;
  std::condition_variable cv_;
  int devices_;
  NcclResult injected_ = NcclResult::Success;  // guarded by mu_
  int injected_rank_ = -1;                     // guarded by mu_
  std::map<uintptr_t, std::pair<size_t, int>> allocations_;  // guarded by mu_
  std::map<std::string, std::shared_ptr<World>> worlds_;      // guarded by mu_
  std::vector<std::unique_ptr<FakeComm>> comms_;              // guarded by mu_; all ever made

  // memcpy for the fake's transfers: NCCL takes a null buffer of 0 elements,
  // which memcpy may not be given even for 0 bytes.
  static void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }

  // A communicator that lives as long as this machine (caller holds mu_).
  FakeComm* new_comm(std::shared_ptr<World> w, int rank, int device) {
    comms_.push_back(std::make_unique<FakeComm>());
    FakeComm* c = comms_.back().get();
    c->world = std::move(w);
    c->rank = rank;
    c->device = device;
    return c;
  }
  uint64_t ids_ = 0;                                          // guarded by mu_

  PointerInfo lookup(const void* p) {
    std::lock_guard lock(mu_);
    auto a = reinterpret_cast<uintptr_t>(p);
    auto it = allocations_.upper_bound(a);
    if (it == allocations_.begin()) return {};
    --it;
    if (a >= it->first + it->second.first) return {};
    return PointerInfo{DeviceType::kCuda, it->second.second};
  }

  // Runs a collective whose every part arrived (caller holds mu_).
  void execute(World& w, Slot& s) {
    const Part& p0 = s.parts[0];
    for (const Part& p : s.parts) {
      if (p.kind != p0.kind || p.count != p0.count || p.dtype != p0.dtype || p.op != p0.op ||
          p.root != p0.root) {
        w.error = "ranks issued different operations (" + p0.kind + " vs " + p.kind + ")";
        s.op->done = true;  // NCCL would hang or fail; the error is reported
        return;
      }
    }
    ++collectives;
    const size_t es = element_size(p0.dtype), n = p0.count;
    const int nr = w.nranks;
    auto reduce_all = [&](size_t offset, size_t count) {
      std::vector<char> acc(count * es);
      copy_bytes(acc.data(), static_cast<const char*>(s.parts[0].send) + offset * es, count * es);
      ReduceFn fn = reduce_function(p0.dtype, p0.op);
      for (int r = 1; r < nr; ++r) {
        fn(acc.data(), acc.data(), static_cast<const char*>(s.parts[size_t(r)].send) + offset * es,
           count);
      }
      if (p0.op == ReduceOp::kAvg) divide(acc.data(), count, p0.dtype, nr);
      return acc;
    };
    // What NCCL 2.28's one-rank path writes: Avg on floating types goes
    // through its kernel's block split; every other op is a copy.
    auto write = [&](void* dst, const std::vector<char>& v, const void* src, size_t count) {
      size_t written = count;
      bool floating = p0.dtype == DataType::kFloat16 || p0.dtype == DataType::kBFloat16 ||
                      p0.dtype == DataType::kFloat32 || p0.dtype == DataType::kFloat64;
      if (nr == 1 && p0.op == ReduceOp::kAvg && floating && dst != src && count > 0) {
        size_t blocks = std::min<size_t>(32, (count * es + (16 << 10) - 1) / (16 << 10));
        size_t per_pack = 16 / es;
        size_t per_block = (count / blocks + per_pack - 1) / per_pack * per_pack;
        written = std::min(count, blocks * per_block);
      }
      copy_bytes(dst, v.data(), written * es);
    };
    if (p0.kind == "all_reduce") {
      auto acc = reduce_all(0, n);
      for (auto& p : s.parts) write(p.recv, acc, p.send, n);
    } else if (p0.kind == "reduce") {
      auto acc = reduce_all(0, n);
      auto& root = s.parts[size_t(p0.root)];
      write(root.recv, acc, root.send, n);
    } else if (p0.kind == "broadcast") {
      std::vector<char> v(n * es);
      copy_bytes(v.data(), s.parts[size_t(p0.root)].send, n * es);
      for (auto& p : s.parts) copy_bytes(p.recv, v.data(), n * es);
    } else if (p0.kind == "all_gather") {
      std::vector<char> v(n * es * size_t(nr));
      for (int r = 0; r < nr; ++r) copy_bytes(v.data() + size_t(r) * n * es, s.parts[size_t(r)].send, n * es);
      for (auto& p : s.parts) copy_bytes(p.recv, v.data(), v.size());
    } else if (p0.kind == "reduce_scatter") {
      std::vector<std::vector<char>> out;
      for (int r = 0; r < nr; ++r) out.push_back(reduce_all(size_t(r) * n, n));
      for (int r = 0; r < nr; ++r) {
        auto& p = s.parts[size_t(r)];
        write(p.recv, out[size_t(r)], static_cast<const char*>(p.send) + size_t(r) * n * es, n);
      }
    }
    s.op->done = true;
  }

  // Pairs sends and receives on one channel (caller holds mu_).
  void match(World& w, std::pair<int, int> channel) {
    auto& sq = w.sends[channel];
    auto& rq = w.recvs[channel];
    while (!sq.empty() && !rq.empty()) {
      if (sq.front().bytes != rq.front().bytes) {
        w.error = "send of " + std::to_string(sq.front().bytes) + " bytes met a recv of " +
                  std::to_string(rq.front().bytes);
      } else {
        copy_bytes(rq.front().recv, sq.front().send, sq.front().bytes);
      }
      sq.front().op->done = rq.front().op->done = true;
      sq.pop_front();
      rq.pop_front();
    }
  }
};

// The CUDA runtime of one rank.
class FakeRuntime : public DeviceRuntime {
 public:
  explicit FakeRuntime(std::shared_ptr<FakeCuda> cuda) : cuda_(std::move(cuda)) {}

  int current() const { return current_; }
  std::vector<std::string> trace() {
    std::lock_guard lock(cuda_->mu_);
    return trace_;
  }
  void log(std::string s) { trace_.push_back(std::move(s)); }  // caller holds cuda_->mu_
  static std::string id(const void* p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return b;
  }

  int device_count() override {
    std::lock_guard lock(cuda_->mu_);
    return cuda_->devices_;
  }
  std::string visible_devices() override { return "fake"; }
  CudaStatus pointer_info(const void* p, PointerInfo* out) override {
    *out = cuda_->lookup(p);
    return nullptr;
  }
  CudaStatus set_device(int d) override {
    std::lock_guard lock(cuda_->mu_);
    if (d < 0 || d >= cuda_->devices_) return "invalid device ordinal";
    current_ = d;
    return nullptr;
  }
  CudaStatus create_stream(Stream* out) override {
    auto* s = new FakeCuda::FakeStream;
    s->device = current_;
    *out = s;
    return nullptr;
  }
  void destroy_stream(Stream s) noexcept override { delete static_cast<FakeCuda::FakeStream*>(s); }
  CudaStatus create_event(Event* out) override {
    *out = new FakeCuda::FakeEvent;
    return nullptr;
  }
  void destroy_event(Event e) noexcept override { delete static_cast<FakeCuda::FakeEvent*>(e); }
  CudaStatus record_on_default_stream(Event e) override {
    std::lock_guard lock(cuda_->mu_);
    static_cast<FakeCuda::FakeEvent*>(e)->waits.clear();  // nothing runs on it here
    log("record_default " + id(e));
    return nullptr;
  }
  CudaStatus record(Event e, Stream s) override {
    std::lock_guard lock(cuda_->mu_);
    auto* st = static_cast<FakeCuda::FakeStream*>(s);
    std::erase_if(st->pending, [](const FakeCuda::OpPtr& o) { return o->done; });
    static_cast<FakeCuda::FakeEvent*>(e)->waits = st->pending;
    log("record " + id(e) + " " + id(s));
    return nullptr;
  }
  CudaStatus stream_wait(Stream s, Event e) override {
    std::lock_guard lock(cuda_->mu_);
    log("wait " + id(s) + " " + id(e));
    return nullptr;
  }
  CudaStatus query(Event e, bool* done) override {
    std::lock_guard lock(cuda_->mu_);
    auto& w = static_cast<FakeCuda::FakeEvent*>(e)->waits;
    *done = std::all_of(w.begin(), w.end(), [](const FakeCuda::OpPtr& o) { return o->done; });
    return nullptr;
  }
  CudaStatus stream_idle(Stream s, bool* idle) override {
    std::lock_guard lock(cuda_->mu_);
    auto& p = static_cast<FakeCuda::FakeStream*>(s)->pending;
    *idle = std::all_of(p.begin(), p.end(), [](const FakeCuda::OpPtr& o) { return o->done; });
    return nullptr;
  }
  CudaStatus device_alloc(size_t bytes, void** out) override {
    *out = cuda_->alloc_bytes(bytes, current_);
    return nullptr;
  }
  void device_free(void* p) noexcept override { cuda_->free_bytes(p); }

 private:
  std::shared_ptr<FakeCuda> cuda_;
  int current_ = 0;
  std::vector<std::string> trace_;  // guarded by cuda_->mu_
};

// NCCL for one rank.
class FakeNccl : public NcclApi {
 public:
  using Comm_ = FakeCuda::FakeComm;
  FakeNccl(std::shared_ptr<FakeCuda> cuda, std::shared_ptr<FakeRuntime> rt)
      : cuda_(std::move(cuda)), rt_(std::move(rt)) {}

  NcclResult get_unique_id(NcclUniqueId* id) override {
    std::lock_guard lock(cuda_->mu_);
    id->fill(0);
    std::string s = "fake-nccl-" + std::to_string(++cuda_->ids_);
    std::memcpy(id->data(), s.data(), s.size());
    return NcclResult::Success;
  }
  NcclResult comm_init_rank(Comm* out, int nranks, const NcclUniqueId& id, int rank) override {
    std::unique_lock lock(cuda_->mu_);
    ++cuda_->comm_inits;
    std::string key(id.data(), strnlen(id.data(), id.size()));
    auto& w = cuda_->worlds_[key];
    if (!w) {
      w = std::make_shared<FakeCuda::World>();
      w->nranks = nranks;
      w->members.assign(size_t(nranks), nullptr);
    }
    if (w->nranks != nranks || rank < 0 || rank >= nranks || w->members[size_t(rank)]) {
      last_ = "bad rank or size";
      return NcclResult::InvalidArgument;
    }
    for (auto* m : w->members) {
      if (m && m->device == rt_->current()) {
        last_ = w->error = "Duplicate GPU detected : rank " + std::to_string(m->rank) + " and rank " +
                           std::to_string(rank) + " both on CUDA device " +
                           std::to_string(m->device);
        cuda_->cv_.notify_all();
        return NcclResult::InvalidUsage;
      }
    }
    auto* c = cuda_->new_comm(w, rank, rt_->current());
    w->members[size_t(rank)] = c;
    ++w->joined;
    cuda_->cv_.notify_all();
    if (!cuda_->cv_.wait_for(lock, std::chrono::seconds(20),
                             [&] { return w->joined == w->nranks || !w->error.empty(); })) {
      last_ = "the other ranks never joined (fake, 20 s)";
      return NcclResult::SystemError;
    }
    if (w->joined != w->nranks) {
      last_ = w->error;
      return NcclResult::SystemError;
    }
    *out = c;
    return NcclResult::Success;
  }
  NcclResult comm_split(Comm parent, int color, int key, Comm* out) override {
    auto* p = static_cast<Comm_*>(parent);
    std::unique_lock lock(cuda_->mu_);
    ++cuda_->comm_splits;
    auto& w = *p->world;
    auto& call = w.splits[p->next_split++];
    call.colour_key.resize(size_t(w.nranks));
    call.result.resize(size_t(w.nranks), nullptr);
    call.colour_key[size_t(p->rank)] = {color, key};
    if (++call.arrived == w.nranks) {
      std::map<int, std::vector<std::pair<int, int>>> by_colour;  // colour -> (key, parent rank)
      for (int r = 0; r < w.nranks; ++r) {
        auto [c, k] = call.colour_key[size_t(r)];
        if (c != kNcclNoColor) by_colour[c].push_back({k, r});
      }
      for (auto& [c, members] : by_colour) {
        std::sort(members.begin(), members.end());
        auto sub = std::make_shared<FakeCuda::World>();
        sub->nranks = int(members.size());
        sub->joined = sub->nranks;
        for (size_t i = 0; i < members.size(); ++i) {
          auto* m = cuda_->new_comm(sub, int(i), w.members[size_t(members[i].second)]->device);
          sub->members.push_back(m);
          call.result[size_t(members[i].second)] = m;
        }
      }
      call.ready = true;
      cuda_->cv_.notify_all();
    }
    if (!cuda_->cv_.wait_for(lock, std::chrono::seconds(20), [&] { return call.ready; })) {
      last_ = "the other ranks never split (fake, 20 s)";
      return NcclResult::SystemError;
    }
    *out = call.result[size_t(p->rank)];
    return NcclResult::Success;
  }
  NcclResult comm_abort(Comm c) override {
    ++cuda_->comm_aborts;
    std::lock_guard lock(cuda_->mu_);
    static_cast<Comm_*>(c)->aborted = true;  // kept: Works may still ask
    return NcclResult::Success;
  }
  NcclResult comm_destroy(Comm c) override {
    ++cuda_->comm_destroys;
    std::lock_guard lock(cuda_->mu_);
    static_cast<Comm_*>(c)->aborted = true;  // kept: the world still lists it
    return NcclResult::Success;
  }
  NcclResult comm_async_error(Comm c, NcclResult* out) override {
    std::lock_guard lock(cuda_->mu_);
    auto* comm = static_cast<Comm_*>(c);
    *out = comm->rank == cuda_->injected_rank_ ? cuda_->injected_ : NcclResult::Success;
    if (!comm->world->error.empty()) {
      last_ = comm->world->error;
      *out = NcclResult::InvalidUsage;
    }
    return NcclResult::Success;
  }
  std::string error_string(NcclResult r, Comm) override {
    static const char* names[] = {"no error", "unhandled cuda error", "unhandled system error",
                                  "internal error", "invalid argument", "invalid usage",
                                  "remote process exited or there was a network error",
                                  "NCCL operation in progress"};
    std::string s = names[int(r)];
    if (!last_.empty()) s += " (" + last_ + ")";
    return s;
  }

  NcclResult all_reduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                        Comm c, Stream s) override {
    return collective(c, s, {"all_reduce", send, recv, count, t, op, 0});
  }
  NcclResult broadcast(const void* send, void* recv, size_t count, DataType t, int root, Comm c,
                       Stream s) override {
    return collective(c, s, {"broadcast", send, recv, count, t, ReduceOp::kSum, root});
  }
  NcclResult reduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op, int root,
                    Comm c, Stream s) override {
    return collective(c, s, {"reduce", send, recv, count, t, op, root});
  }
  NcclResult all_gather(const void* send, void* recv, size_t count, DataType t, Comm c,
                        Stream s) override {
    return collective(c, s, {"all_gather", send, recv, count, t, ReduceOp::kSum, 0});
  }
  NcclResult reduce_scatter(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                            Comm c, Stream s) override {
    return collective(c, s, {"reduce_scatter", send, recv, count, t, op, 0});
  }
  NcclResult send(const void* buf, size_t count, DataType t, int peer, Comm c, Stream s) override {
    return p2p(c, s, buf, nullptr, count * element_size(t), peer);
  }
  NcclResult recv(void* buf, size_t count, DataType t, int peer, Comm c, Stream s) override {
    return p2p(c, s, nullptr, buf, count * element_size(t), peer);
  }
  NcclResult group_start() override { return NcclResult::Success; }
  NcclResult group_end() override { return NcclResult::Success; }

  // The ReduceOps this rank's collectives were given, in order.
  std::vector<ReduceOp> ops_seen() {
    std::lock_guard lock(cuda_->mu_);
    return ops_;
  }

 private:
  NcclResult collective(Comm c, Stream s, FakeCuda::Part part) {
    auto* comm = static_cast<Comm_*>(c);
    std::lock_guard lock(cuda_->mu_);
    if (comm->aborted) return NcclResult::InvalidUsage;
    rt_->log("nccl " + part.kind + " " + FakeRuntime::id(s));
    ops_.push_back(part.op);
    auto& w = *comm->world;
    auto& slot = w.slots[comm->next_seq++];
    slot.parts.resize(size_t(w.nranks));
    slot.parts[size_t(comm->rank)] = part;
    static_cast<FakeCuda::FakeStream*>(s)->pending.push_back(slot.op);
    if (++slot.arrived == w.nranks) {
      cuda_->execute(w, slot);
      w.slots.erase(comm->next_seq - 1);
    }
    return NcclResult::Success;
  }
  NcclResult p2p(Comm c, Stream s, const void* send, void* recv, size_t bytes, int peer) {
    auto* comm = static_cast<Comm_*>(c);
    std::lock_guard lock(cuda_->mu_);
    if (comm->aborted) return NcclResult::InvalidUsage;
    auto& w = *comm->world;
    if (peer < 0 || peer >= w.nranks) return NcclResult::InvalidArgument;
    rt_->log(std::string("nccl ") + (send ? "send " : "recv ") + FakeRuntime::id(s));
    FakeCuda::P2P m{send, recv, bytes};
    static_cast<FakeCuda::FakeStream*>(s)->pending.push_back(m.op);
    std::pair<int, int> channel = send ? std::pair{comm->rank, peer} : std::pair{peer, comm->rank};
    (send ? w.sends : w.recvs)[channel].push_back(m);
    cuda_->match(w, channel);
    return NcclResult::Success;
  }

  std::shared_ptr<FakeCuda> cuda_;
  std::shared_ptr<FakeRuntime> rt_;
  std::string last_;
  std::vector<ReduceOp> ops_;  // guarded by cuda_->mu_
};

inline Devices FakeCuda::devices_for_rank() {
  auto rt = std::make_shared<FakeRuntime>(shared_from_this());
  return Devices{rt, std::make_shared<FakeNccl>(shared_from_this(), rt)};
}

}  // namespace ccrun::test

// CollectivesBackend::kAuto: host buffers to Gloo, CUDA buffers to NCCL (see
// dispatch_group.h and docs/collectives.md, "Two backends in one group").
//
// Routing reads Buffer::device, nothing else: no pointer query, no map, no
// allocation. The NCCL group is made once, at the first CUDA buffer, under
// a mutex; after that the route is one atomic load.
//
// The group's progress slot (progress_writer.h) is its own: both halves
// record into its GroupProgress, so each call is recorded once, by the
// backend that runs it, and the halves have no slots of their own.
#include "dispatch_group.h"

#include <signal.h>

#include <atomic>
#include <mutex>

#include "ccrun/prefix_store.h"
#include "gloo_group.h"
#include "mpi_group.h"
#include "nccl_group.h"
#include "progress_writer.h"

namespace ccrun::collectives {
namespace {

class DispatchGroup : public ProcessGroup {
 public:
  // `nccl` may be null: made at the first CUDA buffer, from `nccl_store`.
  // `gloo` and `nccl` record into `progress`, as the NCCL half made later will.
  DispatchGroup(std::shared_ptr<ProcessGroup> gloo, std::shared_ptr<ProcessGroup> nccl,
                std::shared_ptr<store::Store> nccl_store, std::chrono::milliseconds timeout,
                Devices dev, std::vector<int> global, std::shared_ptr<GroupProgress> progress)
      : gloo_(std::move(gloo)),
        nccl_store_(std::move(nccl_store)),
        timeout_(timeout),
        dev_(std::move(dev)),
        global_(std::move(global)),
        progress_(std::move(progress)) {
    owned_nccl_ = std::move(nccl);
    nccl_.store(owned_nccl_.get());
  }

  int rank() const override { return gloo_->rank(); }
  int size() const override { return gloo_->size(); }
  CollectivesBackend backend() const override { return CollectivesBackend::kAuto; }

  std::shared_ptr<Work> all_reduce(Buffer b, ReduceOp op) override {
    return route(b).all_reduce(b, op);
  }
  std::shared_ptr<Work> broadcast(Buffer b, int root) override {
    return route(b).broadcast(b, root);
  }
  std::shared_ptr<Work> reduce(Buffer b, int root, ReduceOp op) override {
    return route(b).reduce(b, root, op);
  }
  std::shared_ptr<Work> all_gather(Buffer send, Buffer recv) override {
    return route("all_gather", send, recv).all_gather(send, recv);
  }
  // recv matters on root only: the send buffer decides.
  std::shared_ptr<Work> gather(Buffer send, Buffer recv, int root) override {
    return route(send).gather(send, recv, root);
  }
  // send matters on root only: the recv buffer decides.
  std::shared_ptr<Work> scatter(Buffer send, Buffer recv, int root) override {
    return route(recv).scatter(send, recv, root);
  }
  std::shared_ptr<Work> reduce_scatter(Buffer send, Buffer recv, ReduceOp op) override {
    return route("reduce_scatter", send, recv).reduce_scatter(send, recv, op);
  }
  std::shared_ptr<Work> all_to_all(Buffer send, Buffer recv) override {
    return route("all_to_all", send, recv).all_to_all(send, recv);
  }
  std::shared_ptr<Work> all_to_all(Buffer send, std::vector<size_t> sc, Buffer recv,
                                   std::vector<size_t> rc) override {
    return route("all_to_all", send, recv).all_to_all(send, std::move(sc), recv, std::move(rc));
  }
  std::shared_ptr<Work> send(Buffer b, int dst, int tag) override {
    return route(b).send(b, dst, tag);
  }
  std::shared_ptr<Work> recv(Buffer b, int src, int tag) override {
    return route(b).recv(b, src, tag);
  }
  // Over Gloo: it orders the ranks' host threads, not their CUDA streams
  // (wait on CUDA operations' Works for that).
  std::shared_ptr<Work> barrier() override { return gloo_->barrier(); }

  // Splits both backends: Gloo's subgroup now; NCCL's by ncclCommSplit when
  // this group's communicator exists (every rank made it at the same CUDA
  // operation), else made from its own unique id at its first CUDA buffer.
  // The subgroup's progress slot is taken on members only, once made.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks) override {
    auto progress = std::make_shared<GroupProgress>(progress_->record());
    auto gloo_sub = split_gloo_group(*gloo_, ranks, progress);  // checks the ranks; collective
    const int id = ++groups_made_;  // every rank counts, members or not
    std::shared_ptr<ProcessGroup> nccl_sub;
    if (ProcessGroup* n = nccl_.load(std::memory_order_acquire)) {
      nccl_sub = split_nccl_group(*n, ranks, progress);
    }
    if (!gloo_sub) return nullptr;
    std::vector<int> global;
    for (int r : ranks) global.push_back(global_[size_t(r)]);
    const uint64_t progress_id = subgroup_id(global);
    auto store = std::make_shared<store::PrefixStore>("group" + std::to_string(id), nccl_store_);
    auto group = std::make_shared<DispatchGroup>(std::move(gloo_sub), std::move(nccl_sub), store,
                                                 timeout_, dev_, std::move(global), progress);
    progress->open(progress_id, uint32_t(ranks.size()));
    return group;
  }

 private:
  ProcessGroup& route(const Buffer& b) {
    if (b.device == DeviceType::kHost) return *gloo_;
    if (ProcessGroup* n = nccl_.load(std::memory_order_acquire)) return *n;
    return make_nccl();
  }
  ProcessGroup& route(const char* op, const Buffer& send, const Buffer& recv) {
    if (send.device != recv.device) {
      throw Error(std::string(op) + " on group rank " + std::to_string(global_[size_t(rank())]) +
                  ": send is a " + (send.device == DeviceType::kCuda ? "CUDA" : "host") +
                  " buffer and recv a " + (recv.device == DeviceType::kCuda ? "CUDA" : "host") +
                  " one; an operation runs on one backend, so pass both on the same side");
    }
    return route(send);
  }
  // The first CUDA buffer: every rank reaches it at the same operation.
  ProcessGroup& make_nccl() {
    std::lock_guard lock(make_mu_);
    if (!owned_nccl_) {
      owned_nccl_ = create_nccl_group(nccl_store_, rank(), size(), timeout_, dev_, global_,
                                      progress_);
      nccl_.store(owned_nccl_.get(), std::memory_order_release);
    }
    return *owned_nccl_;
  }

  std::shared_ptr<ProcessGroup> gloo_;
  std::shared_ptr<store::Store> nccl_store_;
  std::chrono::milliseconds timeout_;
  Devices dev_;
  std::vector<int> global_;
  std::shared_ptr<GroupProgress> progress_;  // both halves' (see the file comment)
  std::mutex make_mu_;
  std::shared_ptr<ProcessGroup> owned_nccl_;   // guarded by make_mu_ until published
  std::atomic<ProcessGroup*> nccl_{nullptr};  // owned_nccl_, once made
  int groups_made_ = 0;                        // caller's thread only
};

}  // namespace

void require_nccl(Devices& devices) {
  if (!devices.nccl) {
    throw NotSupportedError("init_process_group: backend \"nccl\": this build has no NCCL backend "
                            "(CUDA and NCCL were not found when it was configured); use \"gloo\" "
                            "or \"auto\" with host buffers");
  }
  if (devices.runtime->device_count() <= 0) {
    std::string v = devices.runtime->visible_devices();
    throw NotSupportedError("init_process_group: backend \"nccl\": no CUDA device is visible (" +
                            (v.empty() ? std::string("CUDA_VISIBLE_DEVICES unset")
                                       : "CUDA_VISIBLE_DEVICES=" + v) +
                            "); use \"gloo\" or \"auto\" with host buffers");
  }
}

namespace {

// A group writes to its peers' sockets (Gloo's pairs use writev, which
// raises SIGPIPE): a peer that died must give this rank an error it reports
// (EPIPE), not SIGPIPE's default death with no word. Python ignores SIGPIPE
// at start-up, so torch's ranks never meet it; native ranks get the same
// here. Only the default disposition changes: a program's own handler, or
// an earlier SIG_IGN, stays.
void ignore_sigpipe_if_default() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> make_group(const GroupSpec& s, Devices devices) {
  ignore_sigpipe_if_default();
  // Each backend's prefix of the job's store (the MPI group has none).
  auto gloo_store = [&] { return std::make_shared<store::PrefixStore>("gloo", s.store); };
  auto nccl_store = [&] { return std::make_shared<store::PrefixStore>("nccl", s.store); };
  // The world group's slot, opened once the group is made.
  auto progress = std::make_shared<GroupProgress>(s.progress_record);
  std::shared_ptr<ProcessGroup> group;
  switch (s.backend) {
    case CollectivesBackend::kGloo:
      group = make_gloo_group(gloo_store(), s.rank, s.size, s.timeout, s.host, progress);
      break;
    case CollectivesBackend::kNccl:
      require_nccl(devices);
      group = create_nccl_group(nccl_store(), s.rank, s.size, s.timeout, std::move(devices), {},
                                progress);
      break;
    case CollectivesBackend::kMpi:
      group = make_mpi_group(s.rank, s.size, s.timeout, progress);
      break;
    case CollectivesBackend::kAuto: {
      auto gloo = make_gloo_group(gloo_store(), s.rank, s.size, s.timeout, s.host, progress);
      std::shared_ptr<ProcessGroup> nccl;
      auto nccl_prefixed = nccl_store();
      if (s.nccl_at_init && devices.nccl && devices.runtime->device_count() > 0) {
        nccl = create_nccl_group(nccl_prefixed, s.rank, s.size, s.timeout, devices, {}, progress);
      }
      std::vector<int> global(size_t(s.size));
      for (int i = 0; i < s.size; ++i) global[size_t(i)] = i;
      group = std::make_shared<DispatchGroup>(std::move(gloo), std::move(nccl), nccl_prefixed,
                                              s.timeout, std::move(devices), std::move(global),
                                              progress);
      break;
    }
  }
  progress->open(kWorldGroupId, uint32_t(group->size()));
  return group;
}

}  // namespace ccrun::collectives

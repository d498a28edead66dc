//===- ccrun/collectives.h - Process groups for workers ---------*- C++ -*-===//
//
// The collective library that workers launched by ccrun link
// (ccrun::collectives). A ProcessGroup is bootstrapped from a Store (by
// default the env:// variables ccrun and torchrun set). The default group
// takes both kinds of buffers, as torch 2.x's "cpu:gloo,cuda:nccl" does: host
// buffers run over Gloo's TCP transport, CUDA buffers over NCCL (in builds
// that found CUDA and NCCL, CCRUN_WITH_NCCL). CollectivesBackend::kMpi runs
// host buffers over MPI instead (builds that found MPI, CCRUN_WITH_MPI; ranks
// started by mpiexec or `ccrun --mpi`).
//
//   auto pg = ccrun::init_process_group();            // RANK, WORLD_SIZE, ...
//   std::vector<float> grad(n);
//   pg->all_reduce({grad.data(), grad.size(), ccrun::DataType::kFloat32},
//                  ccrun::ReduceOp::kAvg)->wait();
//
// Every operation returns at once with a Work; the group's own thread runs
// operations in the order they were issued. Work::wait() blocks until this
// rank's part is done and rethrows its error; an operation that does not
// complete within InitOptions::timeout fails with ccrun::TimeoutError, and
// a failed group fails every later operation (never a hang).
//
// Operations are collective: every rank of the group issues them in the
// same order (host and CUDA operations each in their own order: see
// docs/collectives.md, "Two backends in one group").
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/error.h"
#include "ccrun/store.h"

namespace ccrun {

enum class DataType { kInt8, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64 };
enum class ReduceOp { kSum, kProd, kMin, kMax, kAvg };  // kAvg on integers truncates
enum class DeviceType { kHost, kCuda };

// The collectives backend a group runs on (not to be confused with
// rendezvous::Backend, how the agents meet). Chosen once, at
// init_process_group.
enum class CollectivesBackend {
  kAuto,  // "auto" (alias "cpu:gloo,cuda:nccl"): host buffers to Gloo, CUDA buffers to NCCL
  kGloo,  // "gloo": host buffers only
  kNccl,  // "nccl": CUDA buffers only; needs nccl_available()
  kMpi,   // "mpi": host buffers over MPI_COMM_WORLD (builds with MPI: CCRUN_WITH_MPI);
          // every rank started by one MPI process manager (ccrun --mpi, mpiexec)
};

// The backend a name means ("auto", "cpu:gloo,cuda:nccl", "gloo", "nccl",
// "mpi"); throws ConfigError naming the valid ones for any other. A build
// without MPI parses "mpi" too: init_process_group then says what is missing.
CollectivesBackend parse_collectives_backend(std::string_view name);
// The canonical name: "auto", "gloo", "nccl" or "mpi".
std::string_view collectives_backend_name(CollectivesBackend backend);

// Bytes of one element of `t`.
size_t element_size(DataType t);

// A buffer the caller owns and keeps alive until the operation's Work is done.
// `device` says where it lives, as a tensor's device does; a group with
// CollectivesBackend::kAuto routes by it (kHost to Gloo, kCuda to NCCL), and the NCCL
// backend checks that a Cuda buffer really is memory of its device.
struct Buffer {
  void* data;
  size_t count;  // elements
  DataType dtype;
  DeviceType device = DeviceType::kHost;
};

// The completion of one operation on this rank.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until done; rethrows the operation's error.
  virtual void wait() = 0;
  // Waits at most `timeout`; false if not done yet. Rethrows its error.
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;
  virtual bool is_completed() = 0;
};

struct InitOptions {
  // kAuto: one group for both kinds of buffers (Gloo for host, NCCL for
  // CUDA); kGloo or kNccl: that backend only. From a string:
  // parse_collectives_backend.
  CollectivesBackend backend = CollectivesBackend::kAuto;
  std::string init_method = "env://";  // "env://", "tcp://host:port", "file:///path"
  int rank = -1, world_size = -1;      // -1: from the environment (RANK, WORLD_SIZE)
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // CollectivesBackend::kAuto only. false (the default): the NCCL communicator is made
  // at the group's first operation on CUDA buffers, so a program that never
  // passes one never touches CUDA or NCCL. true: made at init when a CUDA
  // device is visible (needed when a rank's first CUDA operation is a
  // send/recv, which not every rank joins).
  bool nccl_at_init = false;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual CollectivesBackend backend() const = 0;

  // In place: every rank's buf becomes the reduction of all ranks' bufs.
  virtual std::shared_ptr<Work> all_reduce(Buffer buf, ReduceOp op = ReduceOp::kSum) = 0;
  // In place: every rank's buf becomes root's.
  virtual std::shared_ptr<Work> broadcast(Buffer buf, int root) = 0;
  // In place on root; other ranks' buffers are left unchanged.
  virtual std::shared_ptr<Work> reduce(Buffer buf, int root, ReduceOp op = ReduceOp::kSum) = 0;
  // recv.count == size() * send.count; rank i's send lands at i * send.count.
  virtual std::shared_ptr<Work> all_gather(Buffer send, Buffer recv) = 0;
  // recv used on root only (size() * send.count).
  virtual std::shared_ptr<Work> gather(Buffer send, Buffer recv, int root) = 0;
  // send used on root only (size() * recv.count).
  virtual std::shared_ptr<Work> scatter(Buffer send, Buffer recv, int root) = 0;
  // send.count == size() * recv.count; rank i receives the reduction of slice i.
  virtual std::shared_ptr<Work> reduce_scatter(Buffer send, Buffer recv,
                                               ReduceOp op = ReduceOp::kSum) = 0;
  // Equal splits: send.count == recv.count == size() * k.
  virtual std::shared_ptr<Work> all_to_all(Buffer send, Buffer recv) = 0;
  // Uneven splits: send_counts[i] elements go to rank i; recv_counts[i] come from it.
  virtual std::shared_ptr<Work> all_to_all(Buffer send, std::vector<size_t> send_counts,
                                           Buffer recv, std::vector<size_t> recv_counts) = 0;
  // Point to point. On Gloo, `tag` (0 or more) tells apart concurrent
  // messages between two ranks. The NCCL backend checks it and otherwise
  // ignores it, as torch's does: its sends and recvs between two ranks
  // match in the order they are issued, whatever their tags.
  virtual std::shared_ptr<Work> send(Buffer buf, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(Buffer buf, int src, int tag = 0) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
  // Collective over this group: every rank calls it with the same ranks.
  // Returns nullptr on ranks not in `ranks`.
  virtual std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks) = 0;
};

// A group of `size` ranks that meet through `store` (all ranks pass stores
// that share keys, e.g. TcpStores of one server or one HashStore).
// `host` is the address this rank's transport listens on.
std::shared_ptr<ProcessGroup> create_gloo_group(std::shared_ptr<store::Store> store,
                                                int rank, int size,
                                                std::chrono::milliseconds timeout,
                                                std::string host = "127.0.0.1");

// Whether this build has the NCCL backend and a CUDA device is visible.
// Creates no CUDA context.
bool nccl_available();

// Bootstraps the default group from options.init_method. CollectivesBackend::kNccl
// needs nccl_available(); CollectivesBackend::kAuto works everywhere (its CUDA buffers
// need nccl_available() when they come). CollectivesBackend::kMpi ignores
// init_method (MPI_COMM_WORLD is the world, no store is opened), blocks in
// MPI's start-up, and checks that MPI's world rank and size are the asked-for
// rank and world_size (or RANK and WORLD_SIZE; when neither is given, MPI's
// are taken); it needs a build with MPI.
std::shared_ptr<ProcessGroup> init_process_group(InitOptions options = {});

}  // namespace ccrun

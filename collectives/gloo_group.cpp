// The Gloo backend: a ProcessGroup over Gloo's TCP transport, bootstrapped
// through a ccrun Store (see include/ccrun/collectives.h). Operations run in
// issue order on the group's own thread; a failed operation breaks the group.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "ccrun/collectives.h"
#include "ccrun/prefix_store.h"
#include "argument_rules.h"
#include "direct_exchange.h"
#include "durations.h"
#include "gloo_group.h"
#include "host_work.h"
#include "local_copy.h"
#include "progress_writer.h"
#include "reduce_functions.h"
#include "ring_reduce_scatter.h"

namespace ccrun::collectives {
namespace {

using progress::Op;
using std::chrono::milliseconds;

// Slot prefixes of ccrun's own algorithms; gloo's use 0x01-0x08 (gloo/types.h).
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
constexpr uint8_t kDirectSlotPrefix = 0x41;
constexpr uint8_t kLocalAddressSlotPrefix = 0x42;
constexpr uint8_t kLocalAckSlotPrefix = 0x43;

// all_reduce, all_gather, broadcast and reduce_scatter use the one-step
// exchanges of direct_exchange.h instead of rings and trees while a rank
// sends at most this many bytes in all ((size - 1) x its message): measured
// on 2 and 4 ranks, the one-step all_reduce is 2-4x faster than gloo's ring
// up to 256 KiB and 2x slower at 4 MiB (docs/collectives.md).
// CCRUN_GLOO_DIRECT_BYTES overrides it (0 turns them off).
constexpr size_t kDirectMaxBytes = 1024 * 1024;

size_t direct_max_bytes_from_env() {
  const char* v = std::getenv("CCRUN_GLOO_DIRECT_BYTES");
  if (!v || !*v) return kDirectMaxBytes;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != '\0' || *v == '-') {
    throw Error(std::string("CCRUN_GLOO_DIRECT_BYTES=\"") + v +
                "\" is not a byte count; give one such as 65536, or 0 to turn the one-step "
                "algorithms off");
  }
  return size_t(n);
}

// gloo's Store interface onto ours.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<store::Store> store, milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    store_->wait({key}, timeout_);
    std::string v = store_->get(key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<store::Store> store_;
  milliseconds timeout_;
};

// Calls f.template operator()<T>() with T an unsigned type of dtype's size
// (gloo's options only use sizeof(T); reductions get their own functions).
template <typename F>
void with_width(DataType dtype, F&& f) {
  switch (element_size(dtype)) {
    case 1: f.template operator()<uint8_t>(); break;
    case 2: f.template operator()<uint16_t>(); break;
    case 4: f.template operator()<uint32_t>(); break;
    default: f.template operator()<uint64_t>(); break;
  }
}

class GlooGroup : public ProcessGroup, public std::enable_shared_from_this<GlooGroup> {
 public:
  GlooGroup(std::shared_ptr<store::Store> store, int rank, int size, milliseconds timeout,
            std::string host, std::vector<int> global_ranks,
            std::shared_ptr<GroupProgress> progress)
      : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout),
        host_(std::move(host)), global_(std::move(global_ranks)),
        direct_max_(direct_max_bytes_from_env()), progress_(std::move(progress)) {
    if (size < 1 || rank < 0 || rank >= size) {
      throw Error("process group: rank " + std::to_string(rank) + " is not in a group of " +
                  std::to_string(size) + "; check RANK and WORLD_SIZE");
    }
    names_ = "[";
    for (size_t i = 0; i < global_.size(); ++i) names_ += (i ? "," : "") + std::to_string(global_[i]);
    names_ += "]";
    locus_ = "on group " + names_ + " rank " + std::to_string(global_[rank_]);
    gloo::transport::tcp::attr attr;
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      attr.iface = ifname;
    } else {
      attr.hostname = host_;
    }
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
      ctx->setTimeout(timeout);
      GlooStore gs(store_, timeout);
      ctx->connectFullMesh(gs, device_);
      context_ = ctx;
      local_ = LocalPeers::probe(*store_, rank, size, timeout);
      spdlog::debug("process group {} rank {}: {}", names_, rank,
                    local_ ? "every rank reads the others' memory directly (process_vm_readv) "
                             "for large broadcasts and all_gathers"
                           : "large transfers go over TCP");
    } catch (const ccrun::Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("process group " + names_ + " rank " + std::to_string(rank) +
                  ": cannot connect the group: " + e.what());
    }
    thread_ = std::thread([this] { run(); });
  }

  ~GlooGroup() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  CollectivesBackend backend() const override { return CollectivesBackend::kGloo; }

  std::shared_ptr<Work> all_reduce(Buffer buf, ReduceOp op) override {
    check_host("all_reduce", buf);
    return submit("all_reduce", Op::kAllReduce, buf.count, [this, buf, op] {
      if (buf.count == 0) return;
      const size_t elem = element_size(buf.dtype), chunk = buf.count / size_;
      const ReduceFn fn = reduce_function(buf.dtype, op);
      char* data = static_cast<char*>(buf.data);
      if (use_direct(buf.count * elem) || chunk == 0) {
        direct_all_reduce(direct(), data, buf.count, elem, fn, scratch_);
      } else {
        // A reduce-scatter ring (ccrun's, pipelined, reducing in place into
        // chunk `rank`) then gloo's all_gather ring in place: each rank sends
        // 2(n-1)/n of the buffer, as in gloo's all_reduce, which measured
        // slower (docs/collectives.md). The count % size last elements, if
        // any, go in one step.
        const size_t main = chunk * size_;
        if (local_) {
          // Peers read chunk `rank` of this buffer while this rank writes
          // its own chunk; they are done before the gather below sends them
          // this rank's address, so no acknowledgement is needed here.
          local_reduce_scatter(local(), data, data + rank_ * chunk * elem, chunk, elem, fn, false,
                               scratch_);
        } else {
          ring_reduce_scatter(context_, data, data + rank_ * chunk * elem, chunk, elem, fn,
                              gloo::Slot::build(kReduceScatterSlotPrefix, next_tag()), timeout_,
                              scratch_);
        }
        if (main < buf.count) {
          direct_all_reduce(direct(), data + main * elem, buf.count - main, elem, fn, scratch_);
        }
        if (local_) {
          local_all_gather(local(), data + rank_ * chunk * elem, data, chunk * elem);
        } else {
          with_width(buf.dtype, [&]<typename T>() {
            gloo::AllgatherOptions o(context_);
            o.setOutput(reinterpret_cast<T*>(data), main);  // no input: in place
            o.setTimeout(timeout_);
            o.setTag(next_tag());
            gloo::allgather(o);
          });
        }
      }
      if (op == ReduceOp::kAvg) divide(buf.data, buf.count, buf.dtype, size_);
    });
  }

  std::shared_ptr<Work> broadcast(Buffer buf, int root) override {
    check_host("broadcast", buf);
    rules::check_peer(call("broadcast"), "root", root);
    return submit("broadcast", Op::kBroadcast, buf.count, [this, buf, root] {
      if (buf.count == 0) return;
      const size_t bytes = buf.count * element_size(buf.dtype);
      if (use_direct(bytes)) return direct_broadcast(direct(), buf.data, bytes, root);
      if (local_) return local_broadcast(local(), buf.data, bytes, root);
      with_width(buf.dtype, [&]<typename T>() {
        gloo::BroadcastOptions o(context_);
        o.setOutput(static_cast<T*>(buf.data), buf.count);
        o.setRoot(root);
        o.setTimeout(timeout_);
        o.setTag(next_tag());
        gloo::broadcast(o);
      });
    });
  }

  std::shared_ptr<Work> reduce(Buffer buf, int root, ReduceOp op) override {
    check_host("reduce", buf);
    rules::check_peer(call("reduce"), "root", root);
    return submit("reduce", Op::kReduce, buf.count, [this, buf, root, op] {
      if (buf.count == 0) return;
      const size_t elem = element_size(buf.dtype);
      const bool direct_path = use_direct(buf.count * elem);
      if (direct_path || local_) {
        if (direct_path) {
          direct_reduce(direct(), buf.data, buf.count, elem, reduce_function(buf.dtype, op), root,
                        scratch_);
        } else {
          local_reduce(local(), buf.data, buf.count, elem, reduce_function(buf.dtype, op), root,
                       scratch_);
        }
        if (rank_ == root && op == ReduceOp::kAvg) divide(buf.data, buf.count, buf.dtype, size_);
        return;
      }
      // Between hosts: the reduce-scatter ring (inputs untouched), then
      // every rank's reduced chunk gathered to root; the count % size last
      // elements in one step. (gloo's reduce copies the whole buffer on
      // every rank and took 337 ms for 64 MiB on 2 ranks.)
      const ReduceFn fn = reduce_function(buf.dtype, op);
      char* data = static_cast<char*>(buf.data);
      const size_t chunk = buf.count / size_, main = chunk * size_;
      if (chunk == 0) {
        direct_reduce(direct(), data, buf.count, elem, fn, root, scratch_);
      } else {
        part_.resize(chunk * elem);
        ring_reduce_scatter(context_, data, part_.data(), chunk, elem, fn,
                            gloo::Slot::build(kReduceScatterSlotPrefix, next_tag()), timeout_,
                            scratch_);
        if (main < buf.count) {
          direct_reduce(direct(), data + main * elem, buf.count - main, elem, fn, root, scratch_);
        }
        with_width(buf.dtype, [&]<typename T>() {
          gloo::GatherOptions o(context_);
          o.setInput(reinterpret_cast<T*>(part_.data()), chunk);
          if (rank_ == root) o.setOutput(reinterpret_cast<T*>(data), main);
          o.setRoot(root);
          o.setTimeout(timeout_);
          o.setTag(next_tag());
          gloo::gather(o);
        });
      }
      if (rank_ == root && op == ReduceOp::kAvg) divide(buf.data, buf.count, buf.dtype, size_);
    });
  }

  std::shared_ptr<Work> all_gather(Buffer send, Buffer recv) override {
    check_host("all_gather", send);
    check_host("all_gather", recv);
    rules::check_all_gather(call("all_gather"), send, recv);
    return submit("all_gather", Op::kAllGather, send.count, [this, send, recv] {
      if (send.count == 0) return;
      const size_t bytes = send.count * element_size(send.dtype);
      if (use_direct(bytes)) return direct_all_gather(direct(), send.data, recv.data, bytes);
      if (local_) return local_all_gather(local(), send.data, recv.data, bytes);
      with_width(send.dtype, [&]<typename T>() {
        gloo::AllgatherOptions o(context_);
        o.setInput(static_cast<T*>(send.data), send.count);
        o.setOutput(static_cast<T*>(recv.data), recv.count);
        o.setTimeout(timeout_);
        o.setTag(next_tag());
        gloo::allgather(o);
      });
    });
  }

  std::shared_ptr<Work> gather(Buffer send, Buffer recv, int root) override {
    check_host("gather", send);
    if (rank_ == root) check_host("gather", recv);
    rules::check_gather(call("gather"), send, recv, root);
    return submit("gather", Op::kGather, send.count, [this, send, recv, root] {
      if (send.count == 0) return;
      const size_t bytes = send.count * element_size(send.dtype);
      if (!use_direct(bytes) && local_) return local_gather(local(), send.data, recv.data, bytes, root);
      with_width(send.dtype, [&]<typename T>() {
        gloo::GatherOptions o(context_);
        o.setInput(static_cast<T*>(send.data), send.count);
        if (rank_ == root) o.setOutput(static_cast<T*>(recv.data), recv.count);
        o.setRoot(root);
        o.setTimeout(timeout_);
        o.setTag(next_tag());
        gloo::gather(o);
      });
    });
  }

  std::shared_ptr<Work> scatter(Buffer send, Buffer recv, int root) override {
    check_host("scatter", recv);
    if (rank_ == root) check_host("scatter", send);
    rules::check_scatter(call("scatter"), send, recv, root);
    return submit("scatter", Op::kScatter, recv.count, [this, send, recv, root] {
      if (recv.count == 0) return;
      const size_t bytes = recv.count * element_size(recv.dtype);
      if (!use_direct(bytes) && local_) return local_scatter(local(), send.data, recv.data, bytes, root);
      with_width(recv.dtype, [&]<typename T>() {
        gloo::ScatterOptions o(context_);
        std::vector<T*> parts;
        if (rank_ == root) {
          for (int i = 0; i < size_; ++i) parts.push_back(static_cast<T*>(send.data) + i * recv.count);
          o.setInputs(parts, recv.count);
        }
        o.setOutput(static_cast<T*>(recv.data), recv.count);
        o.setRoot(root);
        o.setTimeout(timeout_);
        o.setTag(next_tag());
        gloo::scatter(o);
      });
    });
  }

  std::shared_ptr<Work> reduce_scatter(Buffer send, Buffer recv, ReduceOp op) override {
    check_host("reduce_scatter", send);
    check_host("reduce_scatter", recv);
    rules::check_reduce_scatter(call("reduce_scatter"), send, recv);
    return submit("reduce_scatter", Op::kReduceScatter, send.count, [this, send, recv, op] {
      if (recv.count == 0) return;
      if (use_direct(recv.count * element_size(send.dtype))) {
        direct_reduce_scatter(direct(), send.data, recv.data, recv.count, element_size(send.dtype),
                              reduce_function(send.dtype, op), scratch_);
      } else if (local_) {
        local_reduce_scatter(local(), send.data, recv.data, recv.count, element_size(send.dtype),
                             reduce_function(send.dtype, op), true, scratch_);
      } else {
        ring_reduce_scatter(context_, send.data, recv.data, recv.count, element_size(send.dtype),
                            reduce_function(send.dtype, op),
                            gloo::Slot::build(kReduceScatterSlotPrefix, next_tag()), timeout_,
                            scratch_);
      }
      if (op == ReduceOp::kAvg) divide(recv.data, recv.count, recv.dtype, size_);
    });
  }

  std::shared_ptr<Work> all_to_all(Buffer send, Buffer recv) override {
    std::vector<size_t> counts = rules::equal_split(call("all_to_all"), send, recv);
    return all_to_all(send, counts, recv, counts);
  }

  std::shared_ptr<Work> all_to_all(Buffer send, std::vector<size_t> send_counts, Buffer recv,
                                   std::vector<size_t> recv_counts) override {
    check_host("all_to_all", send);
    check_host("all_to_all", recv);
    rules::check_all_to_all(call("all_to_all"), send, send_counts, recv, recv_counts);
    const size_t st = send.count, rt = recv.count;  // the sums of the counts
    return submit("all_to_all", Op::kAllToAll, send.count,
                  [this, send, recv, send_counts, recv_counts, st, rt] {
      if (st == 0 && rt == 0) {
        barrier_now();  // gloo refuses empty buffers; stay collective
        return;
      }
      // gloo needs non-null buffers: a zero-sized side gets one element.
      std::vector<char> pad(element_size(send.dtype) * 2);
      void* in = st ? send.data : pad.data();
      void* out = rt ? recv.data : pad.data() + element_size(send.dtype);
      with_width(send.dtype, [&]<typename T>() {
        gloo::AlltoallvOptions o(context_);
        o.setInput(static_cast<T*>(in), std::vector<int64_t>(send_counts.begin(), send_counts.end()));
        o.setOutput(static_cast<T*>(out), std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
        o.setTimeout(timeout_);
        o.setTag(next_tag());
        gloo::alltoallv(o);
      });
    });
  }

  std::shared_ptr<Work> send(Buffer buf, int dst, int tag) override {
    check_host("send", buf);
    rules::check_peer(call("send"), "dst", dst);
    rules::check_tag(call("send"), tag);
    // Posted now from the caller's thread (as torch does), waited for in
    // order on the group thread: a large send whose peer first sends too
    // cannot deadlock, since the peer's recv is posted when it is called.
    std::shared_ptr<gloo::transport::UnboundBuffer> ub;
    try {
      ub = context_->createUnboundBuffer(buf.data, buf.count * element_size(buf.dtype));
      ub->send(dst, static_cast<uint64_t>(tag));
    } catch (const std::exception& e) {
      throw Error(where("send") + ": cannot post to rank " + std::to_string(dst) + ": " + e.what());
    }
    return submit("send", Op::kSend, buf.count, [this, ub] {
      if (!ub->waitSend(nullptr, timeout_)) throw Error("aborted");
    });
  }

  std::shared_ptr<Work> recv(Buffer buf, int src, int tag) override {
    check_host("recv", buf);
    rules::check_peer(call("recv"), "src", src);
    rules::check_tag(call("recv"), tag);
    std::shared_ptr<gloo::transport::UnboundBuffer> ub;
    try {
      ub = context_->createUnboundBuffer(buf.data, buf.count * element_size(buf.dtype));
      ub->recv(src, static_cast<uint64_t>(tag));
    } catch (const std::exception& e) {
      throw Error(where("recv") + ": cannot post to rank " + std::to_string(src) + ": " + e.what());
    }
    return submit("recv", Op::kRecv, buf.count, [this, ub] {
      if (!ub->waitRecv(nullptr, timeout_)) throw Error("aborted");
    });
  }

  std::shared_ptr<Work> barrier() override {
    return submit("barrier", Op::kBarrier, 0, [this] { barrier_now(); });
  }

  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks) override {
    return split(std::move(ranks), nullptr);
  }

  // new_group, the subgroup recording into `progress`; null: into a slot
  // of its own, from this group's record.
  std::shared_ptr<ProcessGroup> split(std::vector<int> ranks, std::shared_ptr<GroupProgress> progress) {
    rules::check_group_ranks(call("new_group"), ranks);
    // Every rank counts the call, members or not, so prefixes agree.
    int id = ++groups_made_;
    int mine = -1;
    std::vector<int> global;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank_) mine = int(i);
      global.push_back(global_[ranks[i]]);
    }
    if (mine < 0) return nullptr;
    auto sub = std::make_shared<store::PrefixStore>("group" + std::to_string(id), store_);
    const bool own = !progress;
    if (own) progress = std::make_shared<GroupProgress>(progress_->record());
    auto group = std::make_shared<GlooGroup>(sub, mine, int(ranks.size()), timeout_, host_, global,
                                             progress);
    if (own) progress->open(subgroup_id(global), uint32_t(ranks.size()));
    return group;
  }

 private:
  std::string where(const std::string& op) const { return op + " " + locus_; }
  rules::Call call(const char* op) const { return {op, locus_, rank_, size_}; }

  void check_host(const char* op, const Buffer& b) const {
    rules::check_buffer(call(op), b, DeviceType::kHost);
  }

  uint32_t next_tag() { return tag_++; }

  // Whether an operation that sends `message` bytes to each peer is
  // exchanged in one step (see kDirectMaxBytes).
  bool use_direct(size_t message) const { return message * (size_ - 1) <= direct_max_; }

  // The next one-step exchange's slot, context and timeout.
  Exchange direct() { return {context_, gloo::Slot::build(kDirectSlotPrefix, next_tag()), timeout_}; }

  // The next single-copy transfer's (local_ must be set).
  LocalExchange local() {
    uint32_t tag = next_tag();
    return {context_, local_.get(), gloo::Slot::build(kLocalAddressSlotPrefix, tag),
            gloo::Slot::build(kLocalAckSlotPrefix, tag), timeout_};
  }

  void barrier_now() {
    gloo::BarrierOptions o(context_);
    o.setTimeout(timeout_);
    o.setTag(next_tag());
    gloo::barrier(o);
  }

  // Queues fn; records the call (`what`, `count` elements) in the group's
  // progress slot, issued in queue order and completed when fn returns.
  std::shared_ptr<Work> submit(const std::string& op, Op what, size_t count,
                               std::function<void()> fn) {
    auto work = std::make_shared<HostWork>();
    {
      std::lock_guard lock(mu_);
      ProgressTicket ticket = progress_->issue(what, count);
      queue_.push_back([this, op, fn = std::move(fn), work, ticket] {
        if (!broken_.empty()) {
          work->finish(std::make_exception_ptr(
              Error(where(op) + ": the group failed earlier (" + broken_ + "); create a new one")));
          return;
        }
        try {
          fn();
          ticket.complete();  // a failed call stays issued, not completed
          work->finish(nullptr);
        } catch (const std::exception& e) {
          std::string what = e.what();
          bool timed_out = what.find("imed out") != std::string::npos ||
                           what.find("Timeout") != std::string::npos;
          broken_ = what.substr(0, 300);
          if (timed_out) {
            work->finish(std::make_exception_ptr(TimeoutError(
                where(op) + ": timed out after " + format_secs(timeout_) +
                " waiting for the other ranks (" + broken_ + ")")));
          } else {
            work->finish(std::make_exception_ptr(Error(where(op) + ": " + broken_ +
                                                       "; a peer may have died")));
          }
        }
      });
    }
    cv_.notify_all();
    return work;
  }

  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::shared_ptr<store::Store> store_;
  int rank_, size_;
  milliseconds timeout_;
  std::string host_;
  std::vector<int> global_;  // global rank of each group rank
  std::string names_;        // "[0,1,2]"
  std::string locus_;        // "on group [0,1,2] rank 1", for errors
  size_t direct_max_;        // see kDirectMaxBytes
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<LocalPeers> local_;  // set when every rank can read every other's memory
  uint32_t tag_ = 0;         // worker thread only
  int groups_made_ = 0;      // caller's thread only
  std::string broken_;       // worker thread only
  std::vector<char> scratch_;  // worker thread only: reduce_scatter's and direct_*'s buffers
  std::vector<char> part_;     // worker thread only: reduce's reduced chunk between hosts
  std::shared_ptr<GroupProgress> progress_;  // issue() under mu_; may be another group's too

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::thread thread_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<store::Store> store, int rank,
                                              int size, std::chrono::milliseconds timeout,
                                              std::string host,
                                              std::shared_ptr<GroupProgress> progress) {
  std::vector<int> global(size_t(std::max(size, 0)));
  for (int i = 0; i < size; ++i) global[size_t(i)] = i;
  return std::make_shared<GlooGroup>(std::move(store), rank, size, timeout, std::move(host),
                                     std::move(global), std::move(progress));
}

std::shared_ptr<ProcessGroup> split_gloo_group(ProcessGroup& gloo, std::vector<int> ranks,
                                               std::shared_ptr<GroupProgress> progress) {
  auto* g = dynamic_cast<GlooGroup*>(&gloo);
  if (!g) throw Error("split_gloo_group: the group is not a Gloo group (a bug in ccrun)");
  return g->split(std::move(ranks), std::move(progress));
}

}  // namespace ccrun::collectives

namespace ccrun {

std::shared_ptr<ProcessGroup> create_gloo_group(std::shared_ptr<store::Store> store, int rank,
                                                int size, std::chrono::milliseconds timeout,
                                                std::string host) {
  auto progress = std::make_shared<collectives::GroupProgress>();
  auto group = collectives::make_gloo_group(std::move(store), rank, size, timeout, std::move(host),
                                            progress);
  progress->open(collectives::kWorldGroupId, uint32_t(size));
  return group;
}

}  // namespace ccrun

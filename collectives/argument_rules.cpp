// The shared argument rules of the collective backends (see argument_rules.h).
#include "argument_rules.h"

namespace ccrun::collectives::rules {
namespace {

[[noreturn]] void fail(const Call& call, const std::string& why) {
  throw Error(call.where() + ": " + why);
}

void check_same_type(const Call& call, const Buffer& send, const Buffer& recv) {
  if (send.dtype != recv.dtype) fail(call, "send and recv have different data types");
}

void check_count(const Call& call, const char* which, size_t have, size_t need) {
  if (have != need) {
    fail(call, std::string(which) + " holds " + std::to_string(have) + " elements; it must hold " +
                   std::to_string(need));
  }
}

size_t sum(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

}  // namespace

std::string Call::where() const { return std::string(op) + " " + locus; }

void check_buffer(const Call& call, const Buffer& b, DeviceType device) {
  if (b.device != device) {
    throw NotSupportedError(
        call.where() +
        (device == DeviceType::kHost
             ? ": a gloo group takes host buffers; pass CUDA buffers to an auto (the default) "
               "or nccl group"
             : ": the NCCL backend takes CUDA buffers (Buffer::device = Cuda); pass host "
               "buffers to a gloo or auto group"));
  }
  if (!b.data && b.count > 0) fail(call, "null buffer of " + std::to_string(b.count) + " elements");
}

void check_peer(const Call& call, const char* role, int peer) {
  if (peer < 0 || peer >= call.size) {
    fail(call, std::string(role) + " " + std::to_string(peer) + " is outside the group (size " +
                   std::to_string(call.size) + ")");
  }
}

void check_tag(const Call& call, int tag) {
  if (tag < 0) fail(call, "tag " + std::to_string(tag) + " is negative; give 0 or more");
}

void check_all_gather(const Call& call, const Buffer& send, const Buffer& recv) {
  check_same_type(call, send, recv);
  check_count(call, "recv", recv.count, send.count * size_t(call.size));
}

void check_reduce_scatter(const Call& call, const Buffer& send, const Buffer& recv) {
  check_same_type(call, send, recv);
  check_count(call, "send", send.count, recv.count * size_t(call.size));
}

void check_gather(const Call& call, const Buffer& send, const Buffer& recv, int root) {
  check_peer(call, "root", root);
  if (call.rank == root) check_all_gather(call, send, recv);
}

void check_scatter(const Call& call, const Buffer& send, const Buffer& recv, int root) {
  check_peer(call, "root", root);
  if (call.rank == root) check_reduce_scatter(call, send, recv);
}

std::vector<size_t> equal_split(const Call& call, const Buffer& send, const Buffer& recv) {
  if (send.count % size_t(call.size) != 0 || recv.count != send.count) {
    fail(call, "send.count (" + std::to_string(send.count) + ") and recv.count (" +
                   std::to_string(recv.count) + ") must be equal and a multiple of the group size " +
                   std::to_string(call.size) + "; use the all_to_all with counts for uneven splits");
  }
  return std::vector<size_t>(size_t(call.size), send.count / size_t(call.size));
}

void check_all_to_all(const Call& call, const Buffer& send, const std::vector<size_t>& send_counts,
                      const Buffer& recv, const std::vector<size_t>& recv_counts) {
  if (send_counts.size() != size_t(call.size) || recv_counts.size() != size_t(call.size)) {
    fail(call, "give one count per rank (" + std::to_string(call.size) + "); got " +
                   std::to_string(send_counts.size()) + " send and " +
                   std::to_string(recv_counts.size()) + " recv counts");
  }
  check_same_type(call, send, recv);
  check_count(call, "send", send.count, sum(send_counts));
  check_count(call, "recv", recv.count, sum(recv_counts));
}

void check_group_ranks(const Call& call, const std::vector<int>& ranks) {
  std::vector<bool> seen(size_t(call.size), false);
  for (int r : ranks) {
    if (r < 0 || r >= call.size) {
      fail(call, "rank " + std::to_string(r) + " is not in this group of " + std::to_string(call.size));
    }
    if (seen[size_t(r)]) fail(call, "rank " + std::to_string(r) + " is listed twice");
    seen[size_t(r)] = true;
  }
}

}  // namespace ccrun::collectives::rules

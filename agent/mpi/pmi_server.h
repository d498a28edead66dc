//===- mpi/pmi_server.h - One node's PMI-1 server, on the job's store -*- C++ -*-===//
//
// `PmiServer` lets the MPI programs of the MPICH family that ccrun starts
// (--mpi) form one MPI_COMM_WORLD equal to ccrun's world, as mpiexec's
// process manager would: each local rank gets one end of a socket pair as
// PMI_FD (descriptor 3) with PMI_RANK and PMI_SIZE, and the server answers
// its PMI-1 requests (mpi/pmi_wire.h) on the agent's io_context.
//
// The job's key-value space and its barriers live in the job's store, under
// the round (JobKeys::pmi), so that a restart starts with a fresh space of
// the new size:
//   - a put is kept on the node and answered at once; the node's puts go to
//     the store in one multi_set when its last local rank enters a barrier;
//   - a barrier adds the node's rank count to the barrier's counter; the
//     node that brings it to the world size sets its done key, on which the
//     others wait; then every local rank gets barrier_out;
//   - a get is answered from the node's puts and the values it already
//     read, else from the store (one read for the node however many of its
//     ranks ask).
// Store calls run in order on one thread of the server's, over a connection
// of its own, never on the io_context; its own StoreInterrupt ends a
// blocking one when the server is destroyed (the attempt ends).
//
//   PmiServer pmi(io, options, open_store, on_abort, on_error);
//   spec.pmi_fd = pmi.channel(lr);            // for each local rank, before its spawn
//   for (auto& [k, v] : pmi.variables(lr)) env.set(k, v);
//   ... spawn the workers ...
//   pmi.close_worker_ends();                  // the workers hold them now
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ccrun/store.h"
#include "ccrun/store_interrupt.h"
#include "mpi/pmi_wire.h"

namespace ccrun::agent::mpi {

// The descriptor a worker finds its PMI socket on (PMI_FD).
inline constexpr int kWorkerPmiFd = 3;

struct PmiServerOptions {
  PmiJob job;                  // what the ranks are told
  int local_ranks = 1;         // this node's ranks
  int rank_offset = 0;         // PMI_RANK of local rank 0
  std::string key_prefix;      // the space's keys in the store (JobKeys::pmi)
  // How long a node waits in a barrier for the other nodes' ranks. A rank
  // that fails meanwhile ends the attempt, and with it the wait.
  std::chrono::milliseconds barrier_timeout = std::chrono::minutes(30);
};

class PmiServer {
 public:
  // Opens the server's own connection to the job's store, on the server's
  // thread; `interrupt` must end its blocking calls.
  using StoreOpener =
      std::function<std::shared_ptr<store::Store>(std::shared_ptr<store::StoreInterrupt> interrupt)>;
  // A rank called PMI_Abort (MPI_Abort): its exit code and message.
  using AbortHandler =
      std::function<void(int local_rank, int exit_code, const std::string& message)>;
  // A store call failed: the ranks' connections are closed (their MPI_Init
  // or barrier fails), and this says why.
  using ErrorHandler = std::function<void(const std::string& what)>;

  // Serves on `io`; the handlers run there.
  PmiServer(boost::asio::io_context& io, PmiServerOptions options, StoreOpener open_store,
            AbortHandler on_abort, ErrorHandler on_error);
  // Ends a blocking store call, joins the store thread, closes every
  // connection; no handler runs after this.
  ~PmiServer();
  PmiServer(const PmiServer&) = delete;  // owns sockets and a thread
  PmiServer& operator=(const PmiServer&) = delete;

  // Makes local rank `local_rank`'s connection and serves the server's end;
  // returns the worker's end, which the server closes in close_worker_ends().
  // Throws ccrun::Error when no socket pair can be made.
  [[nodiscard]] int channel(int local_rank);

  // Closes the workers' ends in this process (call once they were spawned).
  void close_worker_ends();

  // The variables local rank `local_rank` needs: PMI_FD, PMI_RANK, PMI_SIZE.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> variables(int local_rank) const;

 private:
  struct Life;
  class Session;

  void handle(Session& s, const PmiRequest& r);
  void put(const std::string& key, const std::string& value);
  void get(const std::shared_ptr<Session>& s, const std::string& key);
  void enter_barrier();
  void barrier_done();
  void fail(const std::string& what);
  // What a store call leaves to do on the io_context.
  using Then = std::function<void(PmiServer&)>;
  using StoreCall = std::function<Then(store::Store&)>;
  // Runs `call` on the store thread with the server's store connection (opened
  // at its first call), then what it returns on the io_context; a call that
  // throws fails the server (fail()).
  void on_store(StoreCall call);
  void fetched(const std::string& key, std::optional<std::string> value);

  std::string kvs_key(const std::string& key) const { return options_.key_prefix + "kvs/" + key; }

  boost::asio::io_context& io_;
  const PmiServerOptions options_;
  StoreOpener open_store_;
  AbortHandler on_abort_;
  ErrorHandler on_error_;
  std::shared_ptr<Life> life_;  // what handlers check: the server still lives

  std::vector<std::shared_ptr<Session>> sessions_;
  std::vector<int> worker_ends_;
  std::map<std::string, std::string> known_;    // this node's puts, and values read
  std::map<std::string, std::string> unsent_;   // puts not in the store yet
  std::map<std::string, std::vector<std::shared_ptr<Session>>> fetching_;  // reads in flight
  int in_barrier_ = 0;                          // local ranks in the current barrier
  int barriers_ = 0;                            // barriers the node passed
  bool failed_ = false;

  std::shared_ptr<store::StoreInterrupt> interrupt_;
  std::shared_ptr<store::Store> store_;  // the store thread's alone
  boost::asio::thread_pool thread_{1};   // last: joined before the rest goes
};

}  // namespace ccrun::agent::mpi

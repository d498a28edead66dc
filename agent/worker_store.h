//===- worker_store.h - The store a dynamic round's workers meet in -*- C++ -*-===//
//
// torch 2.x's agent shares a TCPStore with its workers: in a dynamic
// rendezvous (c10d, etcd) the rank-0 agent serves one, and every worker is a
// client of MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True,
// keys under /worker/attempt_<restart count>), so no worker has to host the
// store, and no free port is picked, released and bound again by another
// process (a race). TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 opts out, as in
// torch: rank 0's first worker hosts one at a port free on its node.
//
// Each ccrun agent of a dynamic job holds a WorkerStore and publishes its
// port when it joins a round; the round's node rank 0 serves its workers.
// Where torch keeps one store for the agent's life, ccrun renews it before
// each round: a round whose membership changed keeps TORCHELASTIC_RESTART_COUNT
// (torchrun counts only failures), so the workers' keys of the round before
// (Gloo's addresses, a barrier's counts) would otherwise be read back as new.
//
//   WorkerStore ws({"0.0.0.0", token});
//   int port = ws.port();      // published at the first join
//   ws.renew();                // before a later join: empty, on a new port
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ccrun/rendezvous_backend.h"
#include "ccrun/store_server.h"

namespace ccrun::agent {

class WorkerStore {
 public:
  // Serves at once on `bind_host` ("127.0.0.1", "0.0.0.0" or "::"), a free
  // port. Throws ccrun::Error when it cannot bind.
  explicit WorkerStore(std::string bind_host);
  // Closes the current store (its connections too) and serves an empty one
  // on a new free port.
  void renew();
  [[nodiscard]] uint16_t port() const { return port_; }

 private:
  void start();

  std::string bind_host_;
  std::unique_ptr<store::StoreServer> server_;
  uint16_t port_ = 0;
};

}  // namespace ccrun::agent

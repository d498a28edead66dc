//===- job_store.h - The job's store, hosted or joined ----------*- C++ -*-===//
//
// Before an agent can rendezvous it needs the job's store: it hosts one
// (--standalone, node 0 of a static job, the c10d endpoint's own machine)
// or joins one (another node's, ccrun-rendezvous, etcd), and learns the
// address the other nodes reach it on from that connection.
//
//   JobStore js = open_job_store(spec, plan_store(spec, opt_out), interrupt);  // may wait join_timeout
//   auto rdzv = create_rendezvous_handler(options(js.master_port), js.connector());
//
// Every store is opened through store::open_store (tcp:// or etcd://).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ccrun/endpoint.h"
#include "ccrun/job_spec.h"
#include "ccrun/rendezvous.h"
#include "ccrun/store_address.h"
#include "ccrun/store_interrupt.h"
#include "ccrun/store_server.h"
#include "store_plan.h"

namespace ccrun::agent {

struct JobStore {
  std::unique_ptr<store::StoreServer> server;  // set when this agent hosts it
  std::string address;      // tcp://host:port or etcd://...
  store::Endpoint endpoint;  // the store (etcd: its first member), for messages and workers
  bool etcd = false;         // the rendezvous lives in etcd (--rdzv-backend etcd)
  uint16_t master_port = 0;  // the rendezvous' master port (0: chosen by rank 0)
  std::string local_addr;    // this node's address, as the other nodes reach it
  // How the rendezvous reopens the store: a store that stops answering for
  // the keep-alive window is lost (the first connection waited join_timeout).
  store::OpenStoreOptions reopen;

  // The rendezvous' StoreConnector: a new connection each call, with
  // `reopen`'s options. (Not the first connection: that one may spend
  // join_timeout reconnecting, and a store lost mid-job must be noticed
  // within the keep-alive window.)
  rendezvous::StoreConnector connector() const;
};

// Serves or joins the store as `plan` says (store_plan.h), waiting up to
// join_timeout for one that starts later. Throws ConfigError (token file),
// ConnectionError (no store within join_timeout) or InterruptedError.
JobStore open_job_store(const JobSpec& spec, const StorePlan& plan,
                        std::shared_ptr<store::StoreInterrupt> interrupt);

}  // namespace ccrun::agent

//===- store_plan.h - Where the job's store is, and who serves it -*- C++ -*-===//
//
// Every agent needs the job's store before it can rendezvous. Which store,
// whether this agent serves it, where it listens and whether the workers
// meet in a store of the agent's are one decision, made once from the
// validated spec (the launcher has already turned --standalone into c10d on
// 127.0.0.1:0) by a pure function that a unit test drives case by case:
//
//   --standalone           serve a store on 127.0.0.1, a free port
//   static, node 0         serve it at --master-port (all addresses)
//   static, other nodes    join node 0's at --master-addr:--master-port
//   c10d, endpoint here    serve it, or join it when another agent of this
//                          machine already does (is_host=1: serve or fail)
//   c10d, endpoint elsewhere  join it (ccrun-rendezvous, another node)
//   etcd                   join etcd; nothing served here
//
//   StorePlan plan = plan_store(spec, node_env.no_shared_worker_store);
//   JobStore js = open_job_store(spec, plan, interrupt);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>

#include "ccrun/endpoint.h"
#include "ccrun/job_spec.h"

namespace ccrun::agent {

struct StorePlan {
  enum class Mode {
    kServe,         // this agent serves it; failing to is an error
    kServeOrJoin,   // serve it, or join the one another agent here serves
    kJoin,          // another node's, or ccrun-rendezvous
    kEtcd,          // etcd's (the rounds live there; nothing served here)
  };
  Mode mode = Mode::kJoin;
  store::Endpoint endpoint;  // where it is (port 0: a free one, when served)
  std::string address;       // tcp://host:port or etcd://...
  std::string bind_host;     // where a served store listens
  // Dynamic rounds: the workers meet in a store the agent serves beside the
  // job's (torch 2.x's shared TCPStore).
  bool worker_store = false;
  // --standalone: the job's id (when none was given) and port are drawn at
  // start and said, ready to paste into `ccrun status`.
  bool announce = false;
  bool random_id = false;

  bool serves() const { return mode == Mode::kServe || mode == Mode::kServeOrJoin; }
  // Where the workers' store listens, given this node's address as the
  // other nodes reach it: the loopback for a job of one machine's loopback,
  // else every address of that address' family.
  std::string worker_bind_host(const std::string& local_addr) const;
};

// The plan for `spec`. `no_shared_worker_store`: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
// (the workers' rank 0 hosts their store, as with torch 1.x:
// node_environment.h). Throws ConfigError for a malformed endpoint.
[[nodiscard]] StorePlan plan_store(const JobSpec& spec, bool no_shared_worker_store);

// Where the store is, for messages before it answered.
[[nodiscard]] std::string store_address_hint(const JobSpec& spec, const StorePlan& plan);

// What to check when the store has not answered for a while: for a c10d
// endpoint on this machine (kServeOrJoin), that some other program may hold
// its port without serving a store (then no agent here could listen on
// it); else "".
[[nodiscard]] std::string store_wait_hint(const StorePlan& plan);

// How the store of `plan` forgets a finished run of `run_id`, for the
// message of an agent that arrives after that run (ccrun/finished_run.h):
// etcd keeps keys until deleted (the etcdctl command that deletes the id's);
// ccrun-rendezvous deletes them --finished-job-ttl after their last write.
[[nodiscard]] std::string forget_hint(const StorePlan& plan, const std::string& run_id);

}  // namespace ccrun::agent

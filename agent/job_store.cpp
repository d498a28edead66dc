// Hosting or joining the job's store (see job_store.h).
#include "job_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"

namespace ccrun::agent {
namespace {

using std::chrono::milliseconds;

// Options of every connection: one reply never takes longer than the
// keep-alive window either (a hung store is as lost as a dead one).
store::OpenStoreOptions open_options(const JobSpec& spec,
                                     std::shared_ptr<store::StoreInterrupt> interrupt,
                                     const std::string& token) {
  const auto& r = spec.rdzv;
  store::OpenStoreOptions o;
  o.conf = r.conf;
  o.interrupt = std::move(interrupt);
  o.token = token;
  o.timeout = std::max(std::min(r.read_timeout, r.keep_alive_interval * r.keep_alive_max_attempt),
                       milliseconds(1000));
  o.connect_timeout = r.join_timeout;
  return o;
}

}  // namespace

rendezvous::StoreConnector JobStore::connector() const {
  return [address = address, reopen = reopen] { return store::open_store(address, reopen); };
}

JobStore open_job_store(const JobSpec& spec, const StorePlan& plan,
                        std::shared_ptr<store::StoreInterrupt> interrupt) {
  const auto& r = spec.rdzv;
  JobStore js;
  std::string token = store::store_token_from_env();
  js.address = plan.address;
  js.endpoint = plan.endpoint;
  js.etcd = plan.mode == StorePlan::Mode::kEtcd;
  if (!js.etcd) js.master_port = plan.endpoint.port;
  if (plan.serves()) {
    store::StoreServerOptions so;
    so.host = plan.bind_host;
    so.port = plan.endpoint.port;
    so.token = token;
    auto server = std::make_unique<store::StoreServer>(so);
    try {
      server->start();
      js.endpoint.port = js.master_port = server->port();
      js.address = store::tcp_address(js.endpoint);
      js.server = std::move(server);
    } catch (const Error& e) {
      // Another agent of this machine may serve it already: that is
      // normal, not an error.
      if (plan.mode == StorePlan::Mode::kServe) throw;
      spdlog::debug("ccrun: another process serves {} ({}); joining it as a client",
                    plan.endpoint.to_string(), e.what());
    }
  }
  // The first connection may wait for a store that starts later (another
  // node's agent, etcd coming up) for join_timeout; it tells the address
  // the other nodes reach this one on.
  auto first = open_options(spec, std::move(interrupt), token);
  js.reopen = first;
  js.reopen.connect_timeout = r.keep_alive_interval * r.keep_alive_max_attempt;
  auto probe = store::open_store(js.address, first);
  js.local_addr = spec.local_addr.empty() ? probe->local_address() : spec.local_addr;
  return js;
}

}  // namespace ccrun::agent

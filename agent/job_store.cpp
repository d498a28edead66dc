// Hosting or joining the job's store (see job_store.h).
#include "job_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "worker_env.h"

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

// Where a tcp:// store is, and whether this agent serves it.
struct TcpPlan {
  std::string host;
  uint16_t port = 0;
  bool hosting = false;
  std::string bind_host = "0.0.0.0";
};

TcpPlan plan_tcp(const JobSpec& spec) {
  const auto& r = spec.rdzv;
  TcpPlan p;
  if (spec.standalone) {
    p.host = "127.0.0.1";
    p.hosting = true;
  } else if (r.backend == rendezvous::Backend::kStatic) {
    p.host = spec.master_addr;
    p.port = uint16_t(spec.master_port);
    p.hosting = spec.node_rank == 0;
  } else {
    auto ep = store::parse_endpoint(r.endpoint, rendezvous::kDefaultRendezvousPort);
    p.host = ep.host;
    p.port = ep.port;
    p.hosting = r.is_host.value_or(is_local_host(p.host));
  }
  if (p.host.rfind("127.", 0) == 0 || p.host == "localhost") p.bind_host = "127.0.0.1";
  // An IPv6 store: "::" (dual-stack) or the loopback itself.
  if (p.host.find(':') != std::string::npos) p.bind_host = p.host == "::1" ? p.host : "::";
  return p;
}

}  // namespace

rendezvous::StoreConnector JobStore::connector() const {
  return [address = address, reopen = reopen] { return store::open_store(address, reopen); };
}

JobStore open_job_store(const JobSpec& spec, std::shared_ptr<store::StoreInterrupt> interrupt) {
  const auto& r = spec.rdzv;
  JobStore js;
  std::string token = store::store_token_from_env();
  if (r.backend == rendezvous::Backend::kEtcd && !spec.standalone) {
    // The rounds live in etcd (nothing is hosted here); the workers meet
    // on MASTER_ADDR:MASTER_PORT, where rank 0 serves them.
    js.address = store::etcd_address(r.endpoint);
    js.endpoint = store::parse_store_address(js.address).hosts.front();
    js.etcd = true;
  } else {
    TcpPlan p = plan_tcp(spec);
    if (p.hosting) {
      store::StoreServerOptions so;
      so.host = p.bind_host;
      so.port = p.port;
      so.token = token;
      auto server = std::make_unique<store::StoreServer>(so);
      try {
        server->start();
        p.port = server->port();
        js.server = std::move(server);
      } catch (const Error& e) {
        // With c10d, another agent of this machine may host it already:
        // that is normal, not an error.
        if (r.backend == rendezvous::Backend::kStatic || spec.standalone || r.is_host.value_or(false)) throw;
        spdlog::debug("ccrun: another process serves {} ({}); joining it as a client",
                      store::format_host_port(p.host, p.port), e.what());
      }
    }
    js.endpoint = store::Endpoint{p.host, p.port};
    js.address = "tcp://" + js.endpoint.to_string();
    js.master_port = p.port;
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

std::string store_address_hint(const JobSpec& spec) {
  if (spec.standalone) return "127.0.0.1";
  if (spec.rdzv.backend == rendezvous::Backend::kStatic) {
    return store::format_host_port(spec.master_addr, spec.master_port);
  }
  return spec.rdzv.endpoint;
}

std::string store_wait_hint(const JobSpec& spec) {
  if (spec.standalone || spec.rdzv.backend != rendezvous::Backend::kC10d) return "";
  TcpPlan p = plan_tcp(spec);
  if (!p.hosting) return "";
  return fmt::format("; if no ccrun agent on this machine serves it, another program holds port {} "
                     "without listening there (`ss -tanp | grep :{}` names it): choose another "
                     "--rdzv-endpoint port",
                     p.port, p.port);
}

}  // namespace ccrun::agent

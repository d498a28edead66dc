// Where the job's store is, and who serves it (see store_plan.h).
#include "store_plan.h"

#include <fmt/format.h>

#include "ccrun/job_keys.h"
#include "ccrun/store_address.h"
#include "worker_env.h"

namespace ccrun::agent {
namespace {

bool is_loopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "::1";
}

// Where a served store listens: the loopback for a loopback address,
// "::" (dual-stack) for an IPv6 one, else every IPv4 address.
std::string bind_host_for(const std::string& host) {
  if (is_loopback(host)) return host == "::1" ? host : "127.0.0.1";
  return host.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

}  // namespace

std::string StorePlan::worker_bind_host(const std::string& local_addr) const {
  if (is_loopback(endpoint.host)) return "127.0.0.1";
  return local_addr.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

StorePlan plan_store(const JobSpec& spec, bool no_shared_worker_store) {
  const auto& r = spec.rdzv;
  StorePlan p;
  bool dynamic = r.backend != rendezvous::Backend::kStatic;
  p.worker_store = dynamic && !no_shared_worker_store;
  p.announce = spec.standalone;
  p.random_id = spec.standalone && r.id == "none";
  if (r.backend == rendezvous::Backend::kEtcd) {
    p.mode = StorePlan::Mode::kEtcd;
    p.address = store::etcd_address(r.endpoint);
    p.endpoint = store::parse_store_address(p.address).hosts.front();
    return p;
  }
  if (r.backend == rendezvous::Backend::kStatic) {
    p.endpoint = {spec.master_addr, uint16_t(spec.master_port)};
    p.mode = spec.node_rank == 0 ? StorePlan::Mode::kServe : StorePlan::Mode::kJoin;
  } else {
    p.endpoint = store::parse_endpoint(r.endpoint, rendezvous::kDefaultRendezvousPort);
    bool here = r.is_host.value_or(is_local_host(p.endpoint.host));
    bool must = spec.standalone || r.is_host.value_or(false);
    p.mode = !here ? StorePlan::Mode::kJoin
             : must ? StorePlan::Mode::kServe
                    : StorePlan::Mode::kServeOrJoin;
  }
  p.bind_host = bind_host_for(p.endpoint.host);
  p.address = store::tcp_address(p.endpoint);
  return p;
}

std::string store_address_hint(const JobSpec& spec, const StorePlan& plan) {
  if (plan.mode == StorePlan::Mode::kEtcd) return spec.rdzv.endpoint;
  if (spec.standalone) return "127.0.0.1";
  return plan.endpoint.to_string();
}

std::string store_wait_hint(const StorePlan& plan) {
  if (plan.mode != StorePlan::Mode::kServeOrJoin) return "";
  return fmt::format("; if no ccrun agent on this machine serves it, another program holds port {} "
                     "without listening there (`ss -tanp | grep :{}` names it): choose another "
                     "--rdzv-endpoint port",
                     plan.endpoint.port, plan.endpoint.port);
}

std::string forget_hint(const StorePlan& plan, const std::string& run_id) {
  if (plan.mode == StorePlan::Mode::kEtcd) {
    std::string prefix = store::parse_store_address(plan.address).path;
    if (prefix.empty()) prefix = "ccrun/";  // EtcdStoreOptions' default
    if (prefix.back() != '/') prefix += '/';
    return "delete the id's keys from etcd, which keeps them until then: etcdctl del --prefix '" +
           prefix + JobKeys(run_id).base() + "'";
  }
  return "wait until the store forgets it (ccrun-rendezvous deletes a finished job's keys once "
         "nothing was written under them for its --finished-job-ttl, 600 s by default)";
}

}  // namespace ccrun::agent

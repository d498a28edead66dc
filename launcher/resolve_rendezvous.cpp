// The rendezvous settings, and the checks that tie them to the node settings
// (see resolve.h).
#include <cstdio>
#include <optional>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/store_address.h"
#include "rdzv_conf.h"
#include "resolve.h"

namespace ccrun::launcher {
namespace {

using rendezvous::Backend;

// --rdzv-conf over the job file's rdzv: conf: into the spec; unknown keys
// are warned about here.
void resolve_conf(const Sources& src, RendezvousSpec& rdzv) {
  std::map<std::string, Raw> conf = src.yaml().rdzv_conf;
  Raw conf_raw = src.get("rdzv_conf");
  if (!conf_raw.value.empty() && !conf_raw.yaml) {
    for (auto& [key, r] : split_rdzv_conf(conf_raw)) conf[key] = r;  // the flag's win
  }
  for (const auto& w : apply_rdzv_conf(conf, rdzv)) std::fprintf(stderr, "ccrun: warning: %s\n", w.c_str());
}

// The endpoint's host and port, when one is given.
std::optional<store::Endpoint> parse_rdzv_endpoint(const Raw& endpoint, Backend backend) {
  if (endpoint.value.empty()) return std::nullopt;
  try {
    if (backend != Backend::kEtcd) return store::parse_endpoint(endpoint.value, rendezvous::kDefaultRendezvousPort);
    // host:port[,host:port...][/prefix], with or without etcd://
    auto parsed = store::parse_store_address(store::etcd_address(endpoint.value));
    return store::Endpoint{parsed.hosts.front().host, parsed.hosts.front().port};
  } catch (const ConfigError& e) {
    throw ConfigError(endpoint.where + ": " + e.what());
  }
}

// What a job's rendezvous leaves unused of the settings given, said once:
// --standalone serves its own c10d store; the static rendezvous meets at
// node 0's --master-addr/--master-port.
void warn_unused(const Sources& src, const JobSpec& spec, Backend given_backend) {
  auto warn = [](const std::string& what) { std::fprintf(stderr, "ccrun: warning: %s\n", what.c_str()); };
  Raw endpoint = src.get("rdzv_endpoint");
  bool endpoint_given = src.given("rdzv_endpoint") && !endpoint.value.empty();
  if (spec.standalone) {
    if (endpoint_given) {
      warn(endpoint.label() + " is ignored: --standalone serves its own store on a free local port; "
           "drop one of them");
    }
    if (src.given("rdzv_backend") && given_backend != Backend::kC10d) {
      warn(src.get("rdzv_backend").label() + " is ignored: --standalone uses c10d on its own store; "
           "drop one of them");
    }
  } else if (spec.rdzv.backend == Backend::kStatic && endpoint_given) {
    warn(endpoint.label() + " is ignored by the static rendezvous, which meets at --master-addr and "
         "--master-port; give --rdzv-backend c10d to use the endpoint");
  }
}

}  // namespace

void resolve_rendezvous(const Sources& src, JobSpec& spec) {
  auto raw = [&](const char* key) { return src.get(key); };
  Raw backend = raw("rdzv_backend");
  try {
    spec.rdzv.backend = rendezvous::parse_backend(backend.value);
  } catch (const ConfigError& e) {
    fail(backend, e.what());
  }
  if (auto notice = rendezvous::backend_alias_notice(backend.value); !notice.empty()) {
    std::fprintf(stderr, "ccrun: %s: %.*s\n", backend.label().c_str(), int(notice.size()),
                 notice.data());
  }
  Raw endpoint = raw("rdzv_endpoint");
  if (endpoint.value.empty() && spec.rdzv.backend == Backend::kC10d && !spec.standalone) {
    // torch's parse_rendezvous_endpoint: an empty endpoint is localhost:29400.
    endpoint.value = "localhost:" + std::to_string(rendezvous::kDefaultRendezvousPort);
    endpoint.where += " (empty: torchrun's localhost)";
    if (spec.max_nodes > 1) {
      std::fprintf(stderr, "ccrun: --rdzv-backend c10d without --rdzv-endpoint: the store is "
                           "localhost:%d, as torchrun takes it; agents of other machines cannot "
                           "reach it (give --rdzv-endpoint HOST:PORT of one node)\n",
                   int(rendezvous::kDefaultRendezvousPort));
    }
  }
  std::optional<store::Endpoint> ep = parse_rdzv_endpoint(endpoint, spec.rdzv.backend);
  spec.rdzv.endpoint = endpoint.value;
  Raw id = raw("rdzv_id");
  if (id.value.empty()) fail(id, "the job id is empty; give one, e.g. job7 (agents with one id meet)");
  spec.rdzv.id = id.value;
  resolve_conf(src, spec.rdzv);
  warn_unused(src, spec, spec.rdzv.backend);
  Raw nnodes = raw("nnodes");
  if (spec.standalone) {
    spec.rdzv.backend = Backend::kC10d;
    spec.rdzv.endpoint = "127.0.0.1:0";
    if (spec.min_nodes != 1 || spec.max_nodes != 1) {
      fail(nnodes, "--standalone runs one node; drop --nnodes or --standalone");
    }
  } else if (spec.rdzv.backend == Backend::kStatic) {
    if (spec.min_nodes != spec.max_nodes) {
      fail(nnodes, "the static rendezvous needs a fixed node count; use --rdzv-backend c10d "
                   "with --rdzv-endpoint for an elastic job");
    }
    if (spec.node_rank >= spec.max_nodes) {
      Raw nr = raw("node_rank");
      fail(nr, "must be less than the number of nodes (" + std::to_string(spec.max_nodes) + ")");
    }
    if (spec.master_port == 0 && spec.max_nodes > 1) {
      fail(raw("master_port"), "0 (a free port) works for one node only: the other nodes must know "
                               "node 0's port; give a port that is free on node 0, e.g. " +
                               std::to_string(rendezvous::kDefaultMasterPort));
    }
  } else if (!ep) {
    fail(backend, "needs --rdzv-endpoint host[:port] (the store every node reaches)");
  } else if (ep->port == 0 && spec.max_nodes > 1) {
    fail(endpoint, "port 0 (a free port) works for one node only: the other nodes must know the "
                   "store's port; give one, e.g. " + ep->host + ":" +
                   std::to_string(rendezvous::kDefaultRendezvousPort));
  }
}

}  // namespace ccrun::launcher

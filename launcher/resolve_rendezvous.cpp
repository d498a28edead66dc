// The rendezvous settings, and the checks that tie them to the node settings
// (see resolve.h).
#include <optional>
#include <set>
#include <sstream>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/store_address.h"
#include "resolve.h"

namespace ccrun::launcher {
namespace {

constexpr uint16_t kDefaultRdzvPort = 29400;  // torchrun's c10d default

// --rdzv-conf / rdzv: conf: into the spec's typed fields.
void apply_conf(const std::map<std::string, Raw>& conf, RendezvousSpec& rdzv) {
  const std::vector<std::string> conf_keys = {"join_timeout", "last_call_timeout", "close_timeout",
                                              "read_timeout", "keep_alive_interval",
                                              "keep_alive_max_attempt", "is_host"};
  for (const auto& [k, r] : conf) {
    rdzv.conf[k] = r.value;
    if (k == "join_timeout") rdzv.join_timeout = to_seconds(r);
    else if (k == "last_call_timeout") rdzv.last_call_timeout = to_seconds(r);
    else if (k == "close_timeout") rdzv.close_timeout = to_seconds(r);
    else if (k == "read_timeout") rdzv.read_timeout = to_seconds(r);
    else if (k == "keep_alive_interval") rdzv.keep_alive_interval = to_seconds(r);
    else if (k == "keep_alive_max_attempt") rdzv.keep_alive_max_attempt = int(to_int(r, 1, 1000, "a count"));
    else if (k == "is_host") rdzv.is_host = to_bool(r);
    else if (k.rfind("etcd_", 0) == 0 && rdzv.backend == "etcd") continue;  // open_store reads them
    else {
      std::string known;
      for (const auto& c : conf_keys) known += (known.empty() ? "" : ", ") + c;
      throw ConfigError(r.where + ": unknown rendezvous setting \"" + k + "\"" +
                        closest(k, conf_keys) + " (known: " + known + ")");
    }
  }
  if (rdzv.keep_alive_interval.count() == 0) {
    throw ConfigError("rendezvous setting keep_alive_interval must be more than 0");
  }
}

}  // namespace

void resolve_rendezvous(const Sources& src, JobSpec& spec) {
  auto raw = [&](const char* key) { return src.get(key); };
  Raw backend = raw("rdzv_backend");
  if (backend.value != "static" && backend.value != "c10d" && backend.value != "etcd") {
    fail(backend, "unknown backend; use static, c10d or etcd");
  }
  spec.rdzv.backend = backend.value;
  Raw endpoint = raw("rdzv_endpoint");
  std::optional<store::Endpoint> ep;
  if (spec.rdzv.backend == "etcd" && !endpoint.value.empty()) {
    // host:port[,host:port...][/prefix], with or without etcd://
    std::string address = store::etcd_address(endpoint.value);
    try {
      auto parsed = store::parse_store_address(address);
      ep = store::Endpoint{parsed.hosts.front().host, parsed.hosts.front().port};
    } catch (const ConfigError& e) {
      throw ConfigError(endpoint.where + ": " + e.what());
    }
  } else if (!endpoint.value.empty()) {
    try {
      ep = store::parse_endpoint(endpoint.value, kDefaultRdzvPort);
    } catch (const ConfigError& e) {
      throw ConfigError(endpoint.where + ": " + e.what());
    }
  }
  spec.rdzv.endpoint = endpoint.value;
  Raw id = raw("rdzv_id");
  if (id.value.empty()) fail(id, "the job id is empty; give one, e.g. job7 (agents with one id meet)");
  spec.rdzv.id = id.value;
  std::map<std::string, Raw> conf = src.yaml().rdzv_conf;
  Raw conf_raw = raw("rdzv_conf");
  if (!conf_raw.value.empty() && !conf_raw.yaml) {
    std::stringstream ss(conf_raw.value);
    std::set<std::string> seen;  // in this flag (it overrides the job file's)
    for (std::string item; std::getline(ss, item, ',');) {
      auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0) fail(conf_raw, "expected key=value pairs separated by commas");
      std::string key = item.substr(0, eq);
      if (!seen.insert(key).second) fail(conf_raw, "\"" + key + "\" is given twice; keep one");
      conf[key] = Raw{item.substr(eq + 1), conf_raw.where + " " + key, false};
    }
  }
  apply_conf(conf, spec.rdzv);
  Raw nnodes = raw("nnodes");
  if (spec.standalone) {
    spec.rdzv.backend = "c10d";
    spec.rdzv.endpoint = "127.0.0.1:0";
    if (spec.min_nodes != 1 || spec.max_nodes != 1) {
      fail(nnodes, "--standalone runs one node; drop --nnodes or --standalone");
    }
  } else if (spec.rdzv.backend == "static") {
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
                               "node 0's port; give a port that is free on node 0, e.g. 29500");
    }
  } else if (!ep) {
    fail(backend, "needs --rdzv-endpoint host[:port] (the store every node reaches)");
  } else if (ep->port == 0 && spec.max_nodes > 1) {
    fail(endpoint, "port 0 (a free port) works for one node only: the other nodes must know the "
                   "store's port; give one, e.g. " + ep->host + ":29400");
  }
}

}  // namespace ccrun::launcher

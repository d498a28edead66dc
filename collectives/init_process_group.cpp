// init_process_group: the default group from env://, tcp:// or file://
// (see include/ccrun/collectives.h).
#include <spdlog/spdlog.h>

#include <array>
#include <cstdlib>
#include <mutex>

#include "ccrun/collectives.h"
#include "ccrun/endpoint.h"
#include "ccrun/job_store_env.h"
#include "ccrun/prefix_store.h"
#include "ccrun/store_server.h"
#include "ccrun/store_address.h"
#include "ccrun/name_table.h"
#include "dispatch_group.h"

namespace ccrun {
namespace {

// Every name parse_collectives_backend takes; the first of each backend is its own.
constexpr std::array<NamedValue<CollectivesBackend>, 5> kCollectivesBackendNames{{
    {"auto", CollectivesBackend::kAuto},
    {"gloo", CollectivesBackend::kGloo},
    {"nccl", CollectivesBackend::kNccl},
    {"mpi", CollectivesBackend::kMpi},
    {"cpu:gloo,cuda:nccl", CollectivesBackend::kAuto},  // torch 2.x's spelling
}};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

int env_int(const char* name, int given) {
  if (given >= 0) return given;
  const char* v = std::getenv(name);
  if (!v || !*v) {
    throw ConfigError(std::string("init_process_group: ") + name +
                      " is not set; launch with ccrun (or torchrun) or pass it in InitOptions");
  }
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    throw ConfigError(std::string("init_process_group: ") + name + "=\"" + v + "\" is not a number");
  }
}

// `given` when 0 or more, else the variable when set, else -1.
int env_int_or_unset(const char* name, int given) {
  if (given >= 0) return given;
  const char* v = std::getenv(name);
  return v && *v ? env_int(name, -1) : -1;
}

// The store a rank-0 process hosts lives as long as the process.
std::mutex g_server_mu;
std::shared_ptr<store::StoreServer> g_server;

}  // namespace

CollectivesBackend parse_collectives_backend(std::string_view name) {
  if (const auto* b = find_name(kCollectivesBackendNames, name)) return b->value;
  throw ConfigError("unknown collectives backend \"" + std::string(name) +
                    "\"; valid: " + names_text(kCollectivesBackendNames));
}

std::string_view collectives_backend_name(CollectivesBackend backend) {
  return name_of(kCollectivesBackendNames, backend, "unknown");
}

bool nccl_available() {
  auto d = collectives::default_devices();
  return d.nccl && d.runtime->device_count() > 0;
}

std::shared_ptr<ProcessGroup> init_process_group(InitOptions o) {
  return collectives::init_process_group_with(std::move(o), collectives::default_devices());
}

namespace collectives {

std::shared_ptr<ProcessGroup> init_process_group_with(InitOptions o, Devices devices) {
  if (o.backend == CollectivesBackend::kNccl) require_nccl(devices);
  if (o.backend == CollectivesBackend::kMpi) {
    // MPI_COMM_WORLD is the world: no store; RANK and WORLD_SIZE, when
    // given, are checked against MPI's.
    GroupSpec spec;
    spec.backend = o.backend;
    spec.rank = env_int_or_unset("RANK", o.rank);
    spec.size = env_int_or_unset("WORLD_SIZE", o.world_size);
    spec.timeout = o.timeout;
    return make_group(spec, std::move(devices));
  }
  int rank = env_int("RANK", o.rank);
  int size = env_int("WORLD_SIZE", o.world_size);
  std::shared_ptr<store::Store> store;
  std::string host = "127.0.0.1";
  const std::string& m = o.init_method;
  store::OpenStoreOptions so;
  so.timeout = o.timeout;
  so.connect_timeout = o.timeout;
  if (m.rfind("file://", 0) == 0) {
    store = store::open_store(m, so);
  } else {
    std::string addr;
    uint16_t port = 0;
    bool host_store = false;
    std::string prefix = "collectives";
    if (m.rfind("tcp://", 0) == 0) {
      try {
        auto ep = store::parse_endpoint(std::string_view(m).substr(6));
        addr = ep.host;
        port = ep.port;
      } catch (const ConfigError& e) {
        throw ConfigError("init_process_group: \"" + m + "\": " + e.what());
      }
      host_store = rank == 0;
    } else if (m == "env://") {
      std::optional<worker_env::JobStore> job;
      try {
        job = worker_env::job_store();
      } catch (const ConfigError& e) {
        throw ConfigError(std::string("init_process_group: ") + e.what());
      }
      if (job) {
        // ccrun's agent advertises its store: no second store is needed.
        addr = job->endpoint.host;
        port = job->endpoint.port;
        prefix = job->collectives_prefix();
        spdlog::debug("init_process_group: using the agent's store {}", job->endpoint.to_string());
      } else {
        addr = env_or("MASTER_ADDR", "");
        std::string p = env_or("MASTER_PORT", "");
        if (addr.empty() || p.empty()) {
          throw ConfigError("init_process_group: env:// needs MASTER_ADDR and MASTER_PORT; "
                            "launch with ccrun or set them");
        }
        try {
          port = store::parse_port(p);
        } catch (const ConfigError& e) {
          throw ConfigError("init_process_group: MASTER_PORT=\"" + p + "\": " + e.what());
        }
        host_store = rank == 0 && env_or("TORCHELASTIC_USE_AGENT_STORE", "") != "True";
      }
    } else {
      throw ConfigError("init_process_group: unknown init_method \"" + m +
                        "\"; use env://, tcp://host:port or file:///path");
    }
    if (host_store) {
      std::lock_guard lock(g_server_mu);
      store::StoreServerOptions server;
      server.host = addr.find(':') != std::string::npos ? "::" : "0.0.0.0";
      server.port = port;
      server.token = store::store_token_from_env();
      g_server = std::make_shared<store::StoreServer>(server);
      g_server->start();
    }
    auto tcp = store::open_store(store::tcp_address(store::Endpoint{addr, port}), so);
    host = tcp->local_address();
    store = std::make_shared<store::PrefixStore>(prefix, tcp);
  }
  GroupSpec spec;
  spec.backend = o.backend;
  spec.store = std::move(store);
  spec.rank = rank;
  spec.size = size;
  spec.timeout = o.timeout;
  spec.host = host;
  spec.nccl_at_init = o.nccl_at_init;
  return make_group(spec, std::move(devices));
}

}  // namespace collectives
}  // namespace ccrun

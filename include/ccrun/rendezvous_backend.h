//===- ccrun/rendezvous_backend.h - Rendezvous backends and ports -*- C++ -*-===//
//
// The rendezvous backends ccrun knows, with their one name table, and the
// default ports of the stores the agents meet on. A backend's name is
// parsed once, where it enters (the launcher's --rdzv-backend, `ccrun
// status`); everything after that compares the enum:
//
//   Backend b = parse_backend("c10d");   // throws ConfigError naming the valid ones
//   std::string_view name = backend_name(b);  // "c10d"
//   auto ep = store::parse_endpoint("h", kDefaultRendezvousPort);  // h:29400
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ccrun/error.h"
#include "ccrun/name_table.h"

namespace ccrun::rendezvous {

// How the agents of a job find each other (the rendezvous backend; the
// collectives backend a worker's process group runs on is
// ccrun::CollectivesBackend, include/ccrun/collectives.h).
enum class Backend {
  kStatic,  // "static": node ranks given; node 0 hosts the store at master_addr:master_port
  kC10d,    // "c10d": dynamic rounds on a ccrun store at the endpoint (torchrun's name)
  kEtcd,    // "etcd": dynamic rounds on an etcd v3 cluster (torchrun's etcd-v2 role)
};

// torchrun's c10d default, also ccrun-rendezvous's: a --rdzv-endpoint
// without a port means this one.
inline constexpr uint16_t kDefaultRendezvousPort = 29400;
// torchrun's --master-port default: node 0's store with the static backend.
inline constexpr uint16_t kDefaultMasterPort = 29500;

// Every backend's name, in the order errors and --help list them.
inline constexpr std::array<NamedValue<Backend>, 3> kBackendNames{{
    {"static", Backend::kStatic},
    {"c10d", Backend::kC10d},
    {"etcd", Backend::kEtcd},
}};

// "static, c10d or etcd": the valid names, for help lines and errors.
inline std::string backend_names() { return names_text(kBackendNames); }

// torchrun's names that ccrun serves with one of its own backends: a job
// file written for torchrun runs unchanged, with a one-line notice.
struct BackendAlias {
  std::string_view name;
  Backend value;
  std::string_view notice;  // why the mapping is sound, and what to write instead
};
inline constexpr std::array<BackendAlias, 1> kBackendAliases{{
    {"etcd-v2", Backend::kEtcd,
     "torchrun's etcd-v2 backend; ccrun's etcd backend keeps the rendezvous in the same etcd "
     "servers through their v3 API (write --rdzv-backend etcd to silence this)"},
}};

// The notice for a torchrun alias (`name` is not one of kBackendNames), or
// empty for a name that is ccrun's own.
[[nodiscard]] inline std::string_view backend_alias_notice(std::string_view name) {
  const auto* a = find_name(kBackendAliases, name);
  return a ? a->notice : std::string_view();
}

// The backend `name` means (torchrun's aliases included). Throws ConfigError "unknown backend; use
// static, c10d or etcd" for any other name (the caller adds where it came
// from).
[[nodiscard]] inline Backend parse_backend(std::string_view name) {
  if (const auto* b = find_name(kBackendNames, name)) return b->value;
  if (const auto* a = find_name(kBackendAliases, name)) return a->value;
  throw ConfigError("unknown backend; use " + backend_names());
}

// The backend's name, as parse_backend reads it back.
[[nodiscard]] inline std::string_view backend_name(Backend backend) {
  return name_of(kBackendNames, backend, "unknown");
}

}  // namespace ccrun::rendezvous

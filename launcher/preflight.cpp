// A node's input checked before its agent starts (see preflight.h).
#include "preflight.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "ccrun/error.h"
#include "ccrun/store_address.h"
#include "ccrun/token_file.h"
#include "ccrun/numa_plan.h"
#include "ccrun/numa_topology.h"

namespace ccrun::launcher {
namespace {

namespace fs = std::filesystem;

void check_token_file(const Environment& env) {
  auto path = env.get(store::kStoreTokenFileEnv);
  if (path && !path->empty()) (void)store::read_token_file(*path, store::kStoreTokenFileEnv);
}

void check_log_dir(const std::string& dir) {
  if (dir.empty()) return;
  const std::string where = "--log-dir \"" + dir + "\": ";
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw ConfigError(where + "is not a directory; give a directory, or a path where one can be created");
  }
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError(where + "cannot create it (" + ec.message() + "); give a directory you can write to");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(where + "cannot write there (" + std::strerror(errno) +
                      "); give a directory you can write to");
  }
}

void check_numa_binding(const JobSpec& spec) {
  if (spec.numa_binding == NumaBinding::kNone) return;
  try {
    agent::Topology topo = agent::load_topology({});
    for (int lr = 0; lr < spec.nproc_per_node; ++lr) {
      (void)agent::plan_numa_binding(topo, spec.numa_binding, lr);
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace

void check_node_inputs(const JobSpec& spec, const Environment& env) {
  check_token_file(env);
  check_log_dir(spec.logs.log_dir);
  check_numa_binding(spec);
}

}  // namespace ccrun::launcher

// Reading the job's store from a worker's environment
// (include/ccrun/job_store_env.h).
#include "ccrun/job_store_env.h"

#include <cstdlib>

#include "ccrun/error.h"
#include "ccrun/job_keys.h"

namespace ccrun::worker_env {
namespace {

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

[[noreturn]] void malformed(const char* name, const char* value, const std::string& why) {
  throw ConfigError(std::string(name) + "=\"" + value + "\": " + why +
                    "; it is set by ccrun's agent: unset it, or run the program under ccrun");
}

int parse_attempt(const char* value) {
  char* end = nullptr;
  long n = std::strtol(value, &end, 10);
  if (*end != '\0' || n < 0 || n > 1'000'000'000) malformed(kAttempt, value, "not a restart count");
  return int(n);
}

}  // namespace

std::string JobStore::collectives_prefix() const { return JobKeys(run_id).collectives(attempt); }

std::optional<JobStore> job_store() {
  const char* addr = get(kStoreAddr);
  const char* port = get(kStorePort);
  if (!addr || !port) return std::nullopt;
  JobStore js;
  js.endpoint.host = addr;
  try {
    js.endpoint.port = store::parse_port(port);
  } catch (const ConfigError& e) {
    malformed(kStorePort, port, e.what());
  }
  const char* run = get(kRunId);
  js.run_id = run ? run : "none";
  if (const char* attempt = get(kAttempt)) js.attempt = parse_attempt(attempt);
  return js;
}

}  // namespace ccrun::worker_env

// worker_env::job_store: how a worker finds the store its agent advertises,
// and how a malformed advertisement is said.
#include "ccrun/job_store_env.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include "ccrun/error.h"
#include "ccrun/job_keys.h"

using ccrun::ConfigError;
namespace worker_env = ccrun::worker_env;

namespace {

// Sets the agent's variables for one scope (nullptr: unset), then clears them.
class AdvertisedEnv {
 public:
  AdvertisedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : kNames) unsetenv(name);
    for (const auto& [name, value] : vars) {
      if (value) setenv(name, value, 1);
    }
  }
  ~AdvertisedEnv() {
    for (const char* name : kNames) unsetenv(name);
  }

 private:
  static constexpr const char* kNames[] = {worker_env::kStoreAddr, worker_env::kStorePort,
                                           worker_env::kRunId, worker_env::kAttempt};
};

}  // namespace

TEST_CASE("job_store: the agent's store, run and attempt", "[store][worker_env]") {
  AdvertisedEnv env{{worker_env::kStoreAddr, "10.0.0.7"},
                    {worker_env::kStorePort, "29400"},
                    {worker_env::kRunId, "job7"},
                    {worker_env::kAttempt, "3"}};
  auto js = worker_env::job_store();
  REQUIRE(js);
  CHECK(js->endpoint.to_string() == "10.0.0.7:29400");
  CHECK(js->run_id == "job7");
  CHECK(js->attempt == 3);
  CHECK(js->collectives_prefix() == ccrun::JobKeys("job7").collectives(3));
}

TEST_CASE("job_store: none without an address and a port, defaults for the rest",
          "[store][worker_env]") {
  {
    AdvertisedEnv env{{worker_env::kStorePort, "29400"}};
    CHECK_FALSE(worker_env::job_store());
  }
  {
    AdvertisedEnv env{{worker_env::kStoreAddr, "::1"}, {worker_env::kStorePort, ""}};
    CHECK_FALSE(worker_env::job_store());
  }
  AdvertisedEnv env{{worker_env::kStoreAddr, "::1"}, {worker_env::kStorePort, "1"}};
  auto js = worker_env::job_store();
  REQUIRE(js);
  CHECK(js->endpoint.to_string() == "[::1]:1");
  CHECK(js->run_id == "none");
  CHECK(js->attempt == 0);
}

TEST_CASE("job_store: a malformed variable is named with its value and the fix",
          "[store][worker_env]") {
  {
    AdvertisedEnv env{{worker_env::kStoreAddr, "h"}, {worker_env::kStorePort, "70000"}};
    CHECK_THROWS_AS(worker_env::job_store(), ConfigError);
    CHECK_THROWS_WITH(worker_env::job_store(), Catch::Contains("CCRUN_STORE_PORT=\"70000\"") &&
                                                   Catch::Contains("run the program under ccrun"));
  }
  for (const char* bad : {"x", "-1", "2x"}) {
    AdvertisedEnv env{{worker_env::kStoreAddr, "h"},
                      {worker_env::kStorePort, "1"},
                      {worker_env::kAttempt, bad}};
    CHECK_THROWS_WITH(worker_env::job_store(),
                      Catch::Contains(std::string("CCRUN_ATTEMPT=\"") + bad + "\": not a restart count"));
  }
}

// A process's environment while it is built (agent/env_builder.h).
#include "env_builder.h"

#include <catch2/catch.hpp>

using namespace ccrun::agent;

TEST_CASE("set, defaults, paths and one flattening", "[env]") {
  EnvBuilder env;
  env.set("B", "2");
  env.set_default("B", "ignored");
  env.set_default("A", "1");
  env.prepend_path("PYTHONPATH", "/hook");
  env.prepend_path("PYTHONPATH", "/first");
  env.set("GONE", "x");
  env.erase("GONE");
  REQUIRE(*env.get("B") == "2");
  REQUIRE(env.get("GONE") == nullptr);
  REQUIRE(env.flatten() == std::vector<std::string>{"A=1", "B=2", "PYTHONPATH=/first:/hook"});
}

TEST_CASE("from_environ holds this process's variables", "[env]") {
  ::setenv("CCRUN_ENV_BUILDER_TEST", "v=w", 1);
  EnvBuilder env = EnvBuilder::from_environ();
  REQUIRE(env.get("CCRUN_ENV_BUILDER_TEST"));
  REQUIRE(*env.get("CCRUN_ENV_BUILDER_TEST") == "v=w");
}

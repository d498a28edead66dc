// The worker's arguments (worker_env.h): torchrun's ${local_rank} macro,
// each case checked against Python's string.Template.safe_substitute,
// which torchrun's macros.substitute calls (but "$$": worker_env.h).
#include <catch2/catch.hpp>

#include "hang_evidence.h"
#include "worker_env.h"

using ccrun::agent::worker_arguments;

namespace {

std::string one(const std::string& arg) { return worker_arguments({"prog", arg}, 3)[1]; }

}  // namespace

TEST_CASE("worker arguments: ${local_rank} and $local_rank become the local rank", "[worker_env]") {
  CHECK(one("--local_rank=${local_rank}") == "--local_rank=3");
  CHECK(one("$local_rank") == "3");
  CHECK(one("${local_rank}${local_rank}") == "33");
  CHECK(one("$local_rank_x/${local_rank}}") == "$local_rank_x/3}");
}

TEST_CASE("worker arguments: other macros are kept, $$ too", "[worker_env]") {
  // Python makes "$$" one "$"; ccrun keeps a shell's "$$" (worker_env.h).
  CHECK(one("kill -SEGV $$") == "kill -SEGV $$");
  CHECK(one("$${local_rank}") == "$${local_rank}");
  CHECK(one("${local_rank") == "${local_rank");
  CHECK(one("$1x") == "$1x");
  CHECK(one("${LOCAL_RANK}") == "${LOCAL_RANK}");
  CHECK(one("$") == "$");
  CHECK(one("x${}y") == "x${}y");
  CHECK(one("cost$5") == "cost$5");
}

TEST_CASE("worker arguments: the program itself is not substituted", "[worker_env]") {
  auto argv = worker_arguments({"/bin/${local_rank}", "-u", "${local_rank}"}, 1);
  CHECK(argv == std::vector<std::string>{"/bin/${local_rank}", "-u", "1"});
}

TEST_CASE("substitute_macros: several names, as torch's log line prefix uses it", "[worker_env]") {
  const std::map<std::string, std::string, std::less<>> v{
      {"role_name", "trainer"}, {"rank", "7"}, {"local_rank", "3"}};
  CHECK(ccrun::agent::substitute_macros("[${role_name}${local_rank}]:", v) == "[trainer3]:");
  CHECK(ccrun::agent::substitute_macros("$rank/$ranks/${rank}", v) == "7/$ranks/7");
}

TEST_CASE("virtual local rank: each rank gets its entry of the agent's CUDA_VISIBLE_DEVICES", "[worker_env]") {
  using ccrun::agent::virtual_visible_device;
  // torch 2.x's LocalElasticAgent._set_local_rank_env
  CHECK(virtual_visible_device(std::nullopt, 3) == "3");
  CHECK(virtual_visible_device(std::string("4, 6,7"), 1) == "6");
  CHECK(virtual_visible_device(std::string("GPU-ab,GPU-cd"), 1) == "GPU-cd");
  CHECK(virtual_visible_device(std::string(""), 0) == "");
  CHECK_THROWS_WITH(virtual_visible_device(std::string("4,6"), 2),
                    Catch::Contains("local rank 2 exceeds available GPUs in CUDA_VISIBLE_DEVICES=4,6"));
}

TEST_CASE("node environment: both names of NCCL's async error handling, the user's value in each", "[worker_env]") {
  using ccrun::agent::node_environment;
  ccrun::JobSpec spec;
  const char* names[] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"};
  for (const char* n : names) ::unsetenv(n);
  auto env = node_environment(spec);
  for (const char* n : names) CHECK(*env.get(n) == "1");  // torchrun's default
  // Set under either name (the job's env, or the launcher's own), it is read under both.
  for (const char* theirs : names) {
    spec.env = {{theirs, "0"}};
    env = node_environment(spec);
    for (const char* n : names) CHECK(*env.get(n) == "0");
    spec.env.clear();
    ::setenv(theirs, "3", 1);
    env = node_environment(spec);
    for (const char* n : names) CHECK(*env.get(n) == "3");
    ::unsetenv(theirs);
  }
}

TEST_CASE("flight recorder environment: both names of each setting, unless the user set either", "[worker_env]") {
  using ccrun::agent::EnvBuilder;
  EnvBuilder env;
  ccrun::agent::add_flight_recorder_env("/logs/a0/", env);
  CHECK(*env.get("TORCH_FR_BUFFER_SIZE") == "2000");
  CHECK(*env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") == "2000");
  CHECK(*env.get("TORCH_FR_DUMP_TEMP_FILE") == "/logs/a0/nccl_trace_rank_");
  CHECK(*env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == "/logs/a0/nccl_trace_rank_");
  CHECK(*env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == "/logs/a0/nccl_pipe_rank_");
  EnvBuilder theirs;
  theirs.set("TORCH_NCCL_TRACE_BUFFER_SIZE", "50");
  theirs.set("TORCH_FR_DUMP_TEMP_FILE", "/mine/fr_");
  ccrun::agent::add_flight_recorder_env("/logs/a0/", theirs);
  CHECK(*theirs.get("TORCH_NCCL_TRACE_BUFFER_SIZE") == "50");
  CHECK(theirs.get("TORCH_FR_BUFFER_SIZE") == nullptr);
  CHECK(*theirs.get("TORCH_FR_DUMP_TEMP_FILE") == "/mine/fr_");
  CHECK(theirs.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == nullptr);
}

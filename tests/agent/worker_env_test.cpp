// The worker's arguments (worker_env.h): torchrun's ${local_rank} macro,
// each case checked against Python's string.Template.safe_substitute,
// which torchrun's macros.substitute calls (but "$$": worker_env.h).
#include <catch2/catch.hpp>

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

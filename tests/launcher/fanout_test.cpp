// The ssh fan-out's pieces: quoting, ssh command words, each host's agent
// flags (which must parse back into the same job), forwarded variables.
#include "fanout.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ccrun/error.h"

using ccrun::ConfigError;
using namespace ccrun::launcher;
using V = std::vector<std::string>;

namespace {
std::string write_hostfile(const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / ("fanout-hosts-" + std::to_string(getpid()));
  std::ofstream(path) << text;
  return path.string();
}
std::string split_error(std::string_view text) {
  try {
    (void)split_words(text, "--ssh-command");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("fanout: shell quoting and ssh command words", "[fanout]") {
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
  CHECK(split_words("ssh -o BatchMode=yes", "x") == V{"ssh", "-o", "BatchMode=yes"});
  CHECK(split_words("  ssh  -o 'Proxy Jump=a b' -o \"X=\\\"y\\\"\" a\\ b", "x") ==
        V{"ssh", "-o", "Proxy Jump=a b", "-o", "X=\"y\"", "a b"});
  CHECK_THAT(split_error("ssh -o 'x"), Catch::Contains("--ssh-command: column 8: unclosed ' quote"));
  CHECK_THAT(split_error("   "), Catch::Contains("empty"));
}

TEST_CASE("fanout: each host's agent flags parse back into the job", "[fanout]") {
  auto hf = write_hostfile("n1 slots=2\nn2\nn3 slots=4\n");
  auto job = parse_command_line({"--hostfile", hf, "--nproc-per-node", "3", "--include", "n1@n2@n3:1,3",
                                 "--max-restarts", "2", "--stop-without-progress", "3", "--stop-grace", "2.5",
                                 "--rdzv-conf", "join_timeout=9",
                                 "--log-dir", "/tmp/l d", "-r", "0:1", "--master-port", "29999", "--role", "trainer",
                                 "--no-python", "./train", "--lr", "0.1"},
                                {})
                 .spec;
  REQUIRE(job.hosts.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    auto args = agent_args(job, i);
    auto node = parse_command_line(args, {}).spec;
    CHECK(node.hosts.empty());  // an agent, not another fan-out
    CHECK(node.node_rank == int(i));
    CHECK(node.min_nodes == 3);
    CHECK(node.max_nodes == 3);
    CHECK(node.master_addr == "n1");
    CHECK(node.master_port == 29999);
    CHECK(node.nproc_per_node == int(job.hosts[i].devices.size()));
    CHECK(node.max_restarts == 2);
    CHECK(node.stop_without_progress == 3);
    CHECK(node.stop_grace == std::chrono::milliseconds(2500));
    CHECK(node.rdzv.join_timeout == std::chrono::seconds(9));
    CHECK(node.logs.log_dir == "/tmp/l d");
    CHECK(node.logs.redirects == std::map<int, int>{{0, 1}});
    CHECK(node.role == "trainer");
    CHECK(node.exit_on_stdin_eof);
    CHECK(node.started_by_fanout);
    CHECK(node.entrypoint == V{"./train", "--lr", "0.1"});
  }
  CHECK(parse_command_line(agent_args(job, 0), {}).spec.nproc_per_node == 2);
  CHECK(parse_command_line(agent_args(job, 1), {}).spec.nproc_per_node == 3);
  CHECK(parse_command_line(agent_args(job, 2), {}).spec.nproc_per_node == 2);  // slots 1 and 3

  auto line = remote_command(job, 2, "/w d", {{"A", "x y"}}, "/opt/ccrun");
  CHECK_THAT(line, Catch::StartsWith("cd '/w d' && exec env 'A=x y' 'CUDA_VISIBLE_DEVICES=1,3' '/opt/ccrun' "
                                     "'--nnodes' '3' '--node-rank' '2' '--nproc-per-node' '2'"));
  CHECK_THAT(remote_command(job, 0, "/w", {}, "ccrun"), !Catch::Contains("CUDA_VISIBLE_DEVICES"));
  std::filesystem::remove(hf);
}

TEST_CASE("fanout: forwarded variables", "[fanout]") {
  ccrun::JobSpec spec;
  spec.fanout.exports = {"MINE"};
  spec.env = {{"FROM_YAML", "1"}};
  Environment env{{{"PYTHONPATH", "/p"}, {"NCCL_DEBUG", "INFO"}, {"TORCH_DISTRIBUTED_DEBUG", "DETAIL"},
                   {"MINE", "m"}, {"HOME", "/root"}, {"GLOO_SOCKET_IFNAME", "eth0"}}};
  auto vars = forwarded_env(spec, env);
  CHECK(vars == std::map<std::string, std::string>{{"PYTHONPATH", "/p"},
                                                   {"NCCL_DEBUG", "INFO"},
                                                   {"TORCH_DISTRIBUTED_DEBUG", "DETAIL"},
                                                   {"MINE", "m"},
                                                   {"FROM_YAML", "1"}});
  spec.fanout.exports = {"MISSING"};
  CHECK_THROWS_WITH(forwarded_env(spec, env), Catch::Contains("--export MISSING: MISSING is not set here"));
}

TEST_CASE("fanout: --export, exports:, --ssh-command, CCRUN_SSH and ssh_command:", "[fanout][launcher]") {
  auto hf = write_hostfile("n1\n");
  auto spec = parse_command_line({"--hostfile", hf, "--export", "A,B", "--export", "C", "x"}, {}).spec;
  CHECK(spec.fanout.exports == V{"A", "B", "C"});
  CHECK(spec.fanout.ssh_command == V{"ssh", "-o", "BatchMode=yes"});
  Environment env{{{"CCRUN_SSH", "myssh -p 2222"}}};
  CHECK(parse_command_line({"--hostfile", hf, "x"}, env).spec.fanout.ssh_command == V{"myssh", "-p", "2222"});
  CHECK(parse_command_line({"--hostfile", hf, "--ssh-command", "other", "x"}, env).spec.fanout.ssh_command ==
        V{"other"});
  CHECK_THROWS_WITH(parse_command_line({"--hostfile", hf, "--export", "A-B", "x"}, {}),
                    Catch::Contains("--export \"A-B\": expected a variable name"));
  CHECK_THROWS_WITH(parse_command_line({"--export", "A", "x"}, {}), Catch::Contains("give --hostfile too"));
  auto yaml = std::filesystem::temp_directory_path() / ("fanout-job-" + std::to_string(getpid()) + ".yaml");
  std::ofstream(yaml) << "hosts: [n1, n2]\nssh_command: ssh -i key\nexports: [WANDB_API_KEY]\nprogram: x\n";
  spec = parse_command_line({"--config", yaml.string()}, {}).spec;
  CHECK(spec.fanout.ssh_command == V{"ssh", "-i", "key"});
  CHECK(spec.fanout.exports == V{"WANDB_API_KEY"});
  CHECK(parse_command_line({"--config", yaml.string()}, env).spec.fanout.ssh_command == V{"myssh", "-p", "2222"});
  // --print-config keeps them.
  auto again = std::filesystem::temp_directory_path() / ("fanout-again-" + std::to_string(getpid()) + ".yaml");
  std::ofstream(again) << to_yaml(spec);
  auto back = parse_command_line({"--config", again.string()}, {}).spec;
  CHECK(back.fanout.ssh_command == V{"ssh", "-i", "key"});
  CHECK(back.fanout.exports == V{"WANDB_API_KEY"});
  CHECK(back.hosts.size() == 2);
  for (const auto& p : {std::filesystem::path(hf), yaml, again}) std::filesystem::remove(p);
}

TEST_CASE("fanout: --nproc-per-node gpu is counted on each host, not here", "[fanout][hosts]") {
  auto hf = write_hostfile("n1\nn2 slots=2\n");
  Environment no_gpu{{{"CUDA_VISIBLE_DEVICES", ""}}};
  auto spec = parse_command_line({"--hostfile", hf, "--nproc-per-node", "gpu", "x"}, no_gpu).spec;
  REQUIRE(spec.hosts.size() == 2);
  CHECK(spec.hosts[0].slots == 0);
  CHECK(spec.hosts[1].slots == 2);
  auto a0 = agent_args(spec, 0), a1 = agent_args(spec, 1);
  CHECK(std::find(a0.begin(), a0.end(), "gpu") != a0.end());
  CHECK(parse_command_line(a1, {}).spec.nproc_per_node == 2);
  CHECK_THAT(to_yaml(spec), Catch::Contains("nproc_per_node: gpu\n") && Catch::Contains("- {host: n1}\n"));
  CHECK_THROWS_WITH(parse_command_line({"--hostfile", hf, "--nproc-per-node", "gpu", "--include", "n1:0", "x"},
                                       no_gpu),
                    Catch::Contains("host \"n1\" counts its slots itself"));
  // Per-rank settings are checked by each host's agent, against its own slots.
  auto per_rank = parse_command_line({"--hostfile", hf, "--nproc-per-node", "gpu", "-r", "1:3",
                                      "--local-ranks-filter", "1", "x"}, no_gpu).spec;
  CHECK(per_rank.logs.redirects.at(1) == 3);
  // Without a host list, no GPU here is still an error.
  CHECK_THROWS_WITH(parse_command_line({"--nproc-per-node", "gpu", "x"}, no_gpu), Catch::Contains("no CUDA device"));
  std::filesystem::remove(hf);
}

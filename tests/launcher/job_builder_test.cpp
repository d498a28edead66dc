// The launcher's parsing: both spellings of every flag, PET_* variables,
// precedence, YAML errors with line numbers, program resolution.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "ccrun/error.h"
#include "job_builder.h"

using ccrun::ConfigError;
using ccrun::launcher::Environment;
using ccrun::launcher::parse_command_line;

namespace {
ccrun::JobSpec parse(std::vector<std::string> args, Environment env = {}) {
  return parse_command_line(args, env).spec;
}
std::string error_of(std::vector<std::string> args, Environment env = {}) {
  try {
    parse_command_line(args, env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
std::string write_yaml(const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              ("ccrun-job-" + std::to_string(getpid()) + "-" + std::to_string(std::rand()) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}
}  // namespace

TEST_CASE("defaults are torchrun's", "[launcher]") {
  auto s = parse({"train.py"}, Environment{{{"PYTHON_EXEC", "/usr/bin/python3"}}});
  CHECK(s.min_nodes == 1);
  CHECK(s.max_nodes == 1);
  CHECK(s.nproc_per_node == 1);
  CHECK(s.master_addr == "127.0.0.1");
  CHECK(s.master_port == 29500);
  CHECK(s.rdzv.backend == ccrun::rendezvous::Backend::kStatic);
  CHECK(s.rdzv.id == "none");
  CHECK(s.max_restarts == 0);
  CHECK(s.role == "default");
  CHECK(s.entrypoint == std::vector<std::string>{"/usr/bin/python3", "-u", "train.py"});
}

TEST_CASE("both spellings of every flag", "[launcher]") {
  for (const char* flag : {"--nproc-per-node", "--nproc_per_node"}) {
    CHECK(parse({flag, "3", "--no-python", "a"}).nproc_per_node == 3);
  }
  for (const char* flag : {"--max-restarts", "--max_restarts"}) {
    CHECK(parse({flag, "2", "--no_python", "a"}).max_restarts == 2);
  }
  auto s = parse({"--nnodes", "2", "--node_rank", "1", "--master_addr", "10.1.2.3", "--master-port",
                  "1234", "--local_addr", "10.1.2.4", "--no-python", "a"});
  CHECK(s.node_rank == 1);
  CHECK(s.master_addr == "10.1.2.3");
  CHECK(s.master_port == 1234);
  CHECK(s.local_addr == "10.1.2.4");
}

TEST_CASE("rdzv flags and conf", "[launcher]") {
  auto s = parse({"--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv_endpoint", "h:1", "--rdzv-id",
                  "j", "--rdzv-conf", "join_timeout=5,last_call_timeout=0.5,keep_alive_interval=1,"
                  "keep_alive_max_attempt=2,is_host=1", "--no-python", "a"});
  CHECK(s.min_nodes == 1);
  CHECK(s.max_nodes == 4);
  CHECK(s.rdzv.endpoint == "h:1");
  CHECK(s.rdzv.join_timeout == std::chrono::seconds(5));
  CHECK(s.rdzv.last_call_timeout == std::chrono::milliseconds(500));
  CHECK(s.rdzv.keep_alive_max_attempt == 2);
  CHECK(s.rdzv.is_host == true);
  // A key nobody knows is ignored with a warning (as torchrun ignores it;
  // rdzv_conf_test.cpp checks the warning).
  CHECK(parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h", "--rdzv-conf", "join_timout=1", "a"})
            .rdzv.join_timeout == std::chrono::seconds(600));
}

TEST_CASE("impossible values name the flag and the fix", "[launcher]") {
  CHECK(error_of({"--nnodes", "3:2", "a"}) == "--nnodes \"3:2\": min is larger than max");
  CHECK_THAT(error_of({"--master-port", "70000", "a"}), Catch::Contains("between 0 and 65535"));
  CHECK_THAT(error_of({"--nproc-per-node", "0", "a"}), Catch::Contains("--nproc-per-node \"0\""));
  CHECK_THAT(error_of({"--max-restarts", "-1", "a"}), Catch::Contains("--max-restarts"));
  CHECK_THAT(error_of({"--nnodes", "1:2", "a"}), Catch::Contains("static rendezvous needs a fixed"));
  CHECK_THAT(error_of({"--rdzv-backend", "etcd", "a"}), Catch::Contains("needs --rdzv-endpoint"));
  // torchrun's parse_rendezvous_endpoint: c10d without one is localhost:29400.
  CHECK(parse({"--rdzv-backend", "c10d", "a"}).rdzv.endpoint == "localhost:29400");
  CHECK_THAT(error_of({"--rdzv-backend", "zookeeper", "a"}), Catch::Contains("use static, c10d or etcd"));
  CHECK_THAT(error_of({"--signals-to-handle", "SIGFOO", "a"}), Catch::Contains("SIGFOO"));
  CHECK_THAT(error_of({"--nnodes", "2", "--node-rank", "2", "a"}), Catch::Contains("less than the number of nodes"));
  CHECK_THAT(error_of({"--bogus", "a"}), Catch::Contains("--bogus"));
  CHECK_THAT(error_of({}), Catch::Contains("no program to run"));
  CHECK_THAT(error_of({"--nproc-per-node", "gpu", "a"}, Environment{{{"CUDA_VISIBLE_DEVICES", ""}}}),
             Catch::Contains("no CUDA device"));
}

TEST_CASE("PET_ variables, and flags beat them", "[launcher]") {
  Environment env{{{"PET_NPROC_PER_NODE", "5"}, {"PET_MAX_RESTARTS", "4"}}};
  auto s = parse({"--no-python", "a"}, env);
  CHECK(s.nproc_per_node == 5);
  CHECK(s.max_restarts == 4);
  CHECK(parse({"--nproc-per-node", "2", "--no-python", "a"}, env).nproc_per_node == 2);
  CHECK_THAT(error_of({"a"}, Environment{{{"PET_NNODES", "x"}}}), Catch::Contains("PET_NNODES \"x\""));
}

TEST_CASE("a switch's PET_ variable set but empty is on, as Kubeflow's operator writes it", "[launcher]") {
  CHECK(parse({"--no-python", "a"}, Environment{{{"PET_STANDALONE", ""}}}).standalone);
  CHECK_FALSE(parse({"--no-python", "a"}, Environment{{{"PET_STANDALONE", "0"}}}).standalone);
  CHECK_FALSE(parse({"--no-python", "a"}, Environment{{{"PET_STANDALONE", "false"}}}).standalone);
  CHECK(parse({"a"}, Environment{{{"PET_NO_PYTHON", ""}}}).entrypoint.front() == "a");
  // Settings with a value keep an empty one empty (and say so).
  CHECK_THAT(error_of({"a"}, Environment{{{"PET_MASTER_ADDR", ""}}}), Catch::Contains("PET_MASTER_ADDR"));
}

TEST_CASE("nproc auto, cpu and gpu", "[launcher]") {
  CHECK(parse({"--nproc-per-node", "gpu", "--no-python", "a"},
              Environment{{{"CUDA_VISIBLE_DEVICES", "0,1,3"}}}).nproc_per_node == 3);
  CHECK(parse({"--nproc-per-node", "cpu", "--no-python", "a"}).nproc_per_node >= 1);
  CHECK(parse({"--nproc-per-node", "auto", "--no-python", "a"},
              Environment{{{"CUDA_VISIBLE_DEVICES", ""}}}).nproc_per_node >= 1);
}

TEST_CASE("program resolution", "[launcher]") {
  Environment env{{{"PYTHON_EXEC", "py"}}};
  CHECK(parse({"-m", "pkg.train", "--lr", "1"}, env).entrypoint ==
        std::vector<std::string>{"py", "-u", "-m", "pkg.train", "--lr", "1"});
  CHECK(parse({"train.py", "--nproc-per-node", "9"}, env).entrypoint ==
        std::vector<std::string>{"py", "-u", "train.py", "--nproc-per-node", "9"});
  CHECK(parse({"--no-python", "train.py"}, env).entrypoint == std::vector<std::string>{"train.py"});
  CHECK(parse({"./trainer", "-x"}, env).entrypoint == std::vector<std::string>{"./trainer", "-x"});
  CHECK(parse({"--", "./trainer", "--max-restarts", "3"}, env).entrypoint ==
        std::vector<std::string>{"./trainer", "--max-restarts", "3"});
  CHECK(parse({"-r", "0:1,1:2", "-t", "3", "--nproc-per-node", "3", "--local-ranks-filter", "0,2",
               "--no-python", "a"})
            .logs.redirects == std::map<int, int>{{0, 1}, {1, 2}});
}

TEST_CASE("YAML job files: values, precedence, and errors with lines", "[launcher][yaml]") {
  auto path = write_yaml(
      "nnodes: 1\n"
      "nproc_per_node: 3\n"
      "max_restarts: 2\n"
      "rdzv:\n"
      "  backend: static\n"
      "  conf:\n"
      "    join_timeout: 7\n"
      "env:\n"
      "  FOO: bar\n"
      "no_python: true\n"
      "program: /bin/true\n"
      "args: [a, b]\n");
  auto s = parse({"--config", path});
  CHECK(s.nproc_per_node == 3);
  CHECK(s.max_restarts == 2);
  CHECK(s.rdzv.join_timeout == std::chrono::seconds(7));
  CHECK(s.env.at("FOO") == "bar");
  CHECK(s.entrypoint == std::vector<std::string>{"/bin/true", "a", "b"});
  CHECK(parse({"--config", path, "--nproc-per-node", "1"}).nproc_per_node == 1);
  CHECK(parse({"--config", path}, Environment{{{"PET_NPROC_PER_NODE", "2"}}}).nproc_per_node == 2);

  auto bad = write_yaml("nproc_per_node: 2\n\nnnodes: \"3:2\"\nprogram: x\n");
  CHECK(error_of({"--config", bad}) == bad + ":3: nnodes: \"3:2\": min is larger than max");
  auto typo = write_yaml("nproc_per_node: 2\nmax_restart: 1\n");
  CHECK_THAT(error_of({"--config", typo}),
             Catch::Contains(typo + ":2: max_restart: unknown key") && Catch::Contains("max_restarts"));
  auto type = write_yaml("master_port: [1, 2]\nprogram: x\n");
  CHECK_THAT(error_of({"--config", type}), Catch::Contains(type + ":1: master_port"));
  auto syntax = write_yaml("nnodes: [1\n");
  CHECK_THAT(error_of({"--config", syntax}), Catch::Contains("not valid YAML"));
  CHECK_THAT(error_of({"--config", "/nonexistent.yaml"}), Catch::Contains("cannot read"));
  for (auto p : {path, bad, typo, type, syntax}) std::filesystem::remove(p);
}

TEST_CASE("print-config output round-trips through --config", "[launcher][yaml]") {
  auto first = parse_command_line({"--nproc-per-node", "3", "--max-restarts", "2", "--rdzv-conf",
                                   "join_timeout=9", "--no-python", "./t", "x"}, {});
  auto path = write_yaml(ccrun::launcher::to_yaml(first.spec));
  auto again = parse({"--config", path});
  CHECK(again.nproc_per_node == 3);
  CHECK(again.max_restarts == 2);
  CHECK(again.rdzv.join_timeout == std::chrono::seconds(9));
  CHECK(again.entrypoint == first.spec.entrypoint);
  std::filesystem::remove(path);
}

TEST_CASE("print-config writes the program as given, and the file builds the same worker "
          "command on any node, under that node's PYTHON_EXEC", "[launcher][yaml]") {
  struct Case {
    std::vector<std::string> args;
    std::string yaml;  // what the program's part of the file holds
  };
  const std::vector<Case> cases{
      {{"train.py", "--lr", "1"}, "program: train.py\nargs: [--lr, 1]"},
      {{"-m", "pkg.train", "x"}, "module: true\nprogram: pkg.train\nargs: [x]"},
      {{"--module", "pkg.train"}, "module: true\nprogram: pkg.train\nargs: []"},
      {{"--run-path", "tool", "y"}, "run_path: true\nprogram: tool\nargs: [y]"},
      {{"--no-python", "./t", "x"}, "no_python: true\nprogram: ./t\nargs: [x]"},
      {{"--no-python", "run.py"}, "no_python: true\nprogram: run.py\nargs: []"},
      {{"./t", "x"}, "program: ./t\nargs: [x]"},
      // An interpreter the user named is theirs: kept, with its flags.
      {{"python3", "-u", "train.py"}, "program: python3\nargs: [-u, train.py]"},
  };
  const std::vector<Environment> nodes{
      Environment{},  // python3
      Environment{{{"PYTHON_EXEC", "/usr/bin/python3"}}},
      Environment{{{"PYTHON_EXEC", "/opt/venv/bin/python"}}},
  };
  for (const auto& c : cases) {
    for (const auto& here : nodes) {
      INFO(c.yaml << " printed with PYTHON_EXEC=" << here.get("PYTHON_EXEC").value_or("(unset)"));
      std::string yaml = ccrun::launcher::to_yaml(parse(c.args, here));
      CHECK_THAT(yaml, Catch::EndsWith(c.yaml + "\n"));
      CHECK_THAT(yaml, !Catch::Contains("/usr/bin/python3") && !Catch::Contains("/opt/venv"));
      auto path = write_yaml(yaml);
      for (const auto& there : nodes) {
        INFO("run with PYTHON_EXEC=" << there.get("PYTHON_EXEC").value_or("(unset)"));
        CHECK(parse({"--config", path}, there).entrypoint == parse(c.args, there).entrypoint);
      }
      std::filesystem::remove(path);
    }
  }
}

TEST_CASE("print-config of a job file prints its program as the file gives it", "[launcher][yaml]") {
  auto path = write_yaml("module: true\nprogram: pkg.train\nargs: [--lr, '1']\n");
  Environment venv{{{"PYTHON_EXEC", "/opt/venv/bin/python"}}};
  auto spec = parse({"--config", path}, venv);
  CHECK(spec.entrypoint ==
        std::vector<std::string>{"/opt/venv/bin/python", "-u", "-m", "pkg.train", "--lr", "1"});
  CHECK_THAT(ccrun::launcher::to_yaml(spec),
             Catch::EndsWith("module: true\nprogram: pkg.train\nargs: [--lr, 1]\n"));
  std::filesystem::remove(path);
}

TEST_CASE("every bad value is an error, never a wrap or a silent choice", "[launcher]") {
  CHECK_THAT(error_of({"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:abc", "a"}),
             Catch::StartsWith("--rdzv-endpoint: endpoint \"127.0.0.1:abc\"") &&
                 Catch::Contains("not a number"));
  CHECK_THAT(error_of({"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:99999", "a"}),
             Catch::Contains("above 65535"));
  CHECK_THAT(error_of({"--nproc-per-node", "2", "--local-ranks-filter", "0,99", "a"}),
             Catch::Contains("--local-ranks-filter \"99\": local rank 99 does not exist") &&
                 Catch::Contains("local ranks 0 to 1"));
  CHECK(parse({"--nproc-per-node", "2", "--local-ranks-filter", "1", "a"}).logs.local_ranks_filter ==
        std::set<int>{1});
  CHECK_THAT(error_of({"--config", "/tmp", "a"}), Catch::Contains("is a directory"));
  CHECK_THAT(error_of({"--rdzv-conf", "join_timeout=1,join_timeout=2", "a"}),
             Catch::Contains("\"join_timeout\" is given twice"));
  CHECK_THAT(error_of({"--rdzv-conf", "=1", "a"}), Catch::Contains("expected key=value"));
  CHECK_THAT(error_of({"--rdzv-id", "", "a"}), Catch::Contains("--rdzv-id \"\": the job id is empty"));
  CHECK_THAT(error_of({"--master-addr", "", "a"}), Catch::Contains("--master-addr \"\": empty"));
}

TEST_CASE("port 0 (a free port) where one node can use it", "[launcher]") {
  CHECK(parse({"--master-port", "0", "--no-python", "a"}).master_port == 0);
  CHECK_THAT(error_of({"--nnodes", "2", "--master-port", "0", "a"}),
             Catch::Contains("--master-port \"0\": 0 (a free port) works for one node only"));
  CHECK(parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "a"}).rdzv.endpoint ==
        "127.0.0.1:0");
  CHECK_THAT(error_of({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:0", "a"}),
             Catch::Contains("port 0 (a free port) works for one node only") && Catch::Contains("h:29400"));
}

TEST_CASE("torch 1.13's --start_method is accepted", "[launcher]") {
  for (const char* m : {"spawn", "fork", "forkserver"}) {
    CHECK(parse({"--start_method", m, "--no-python", "a"}).entrypoint == std::vector<std::string>{"a"});
    CHECK(parse({"--start-method", m, "--no-python", "a"}).entrypoint == std::vector<std::string>{"a"});
  }
  CHECK_THAT(error_of({"--start-method", "thread", "a"}), Catch::Contains("spawn, fork or forkserver"));
}

TEST_CASE("YAML: duplicate keys, bad env names and lists for scalars are errors", "[launcher][yaml]") {
  auto dup = write_yaml("nproc_per_node: 2\nmax_restarts: 1\nnproc_per_node: 3\nprogram: x\n");
  CHECK(error_of({"--config", dup}) ==
        dup + ":3: nproc_per_node: duplicate key (first on line 1); keep one of them");
  auto dup_rdzv = write_yaml("rdzv:\n  backend: c10d\n  backend: static\nprogram: x\n");
  CHECK_THAT(error_of({"--config", dup_rdzv}), Catch::Contains(":3: rdzv.backend: duplicate key (first on line 2)"));
  auto dup_env = write_yaml("env:\n  A: 1\n  B: 2\n  A: 3\nprogram: x\n");
  CHECK_THAT(error_of({"--config", dup_env}), Catch::Contains(":4: env.A: duplicate key (first on line 2)"));
  auto eq = write_yaml("env:\n  A=B: 1\nprogram: x\n");
  CHECK_THAT(error_of({"--config", eq}), Catch::Contains(":2: env.A=B: a variable name cannot hold '='"));
  auto empty = write_yaml("env:\n  \"\": 1\nprogram: x\n");
  CHECK_THAT(error_of({"--config", empty}), Catch::Contains(":2: env: an empty variable name"));
  auto list = write_yaml("nproc_per_node: [2]\nprogram: x\n");
  CHECK(error_of({"--config", list}) ==
        list + ":1: nproc_per_node: expected a single value, not a list (write the value without [ ])");
  auto env_list = write_yaml("env:\n  A: [1, 2]\nprogram: x\n");
  CHECK_THAT(error_of({"--config", env_list}), Catch::Contains(":2: env.A: expected a single value"));
  auto lists_ok = write_yaml("nproc_per_node: 3\nsignals_to_handle: [SIGTERM, SIGUSR1]\n"
                             "local_ranks_filter: [0, 2]\nprogram: x\n");
  auto s = parse({"--config", lists_ok});
  CHECK(s.signals_to_handle == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK(s.logs.local_ranks_filter == std::set<int>{0, 2});
  for (auto p : {dup, dup_rdzv, dup_env, eq, empty, list, env_list, lists_ok}) std::filesystem::remove(p);
}

TEST_CASE("print-config: shortest numbers, quoted MIN:MAX", "[launcher][yaml]") {
  auto spec = parse({"--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h",
                     "--monitor-interval", "0.1", "--stop-grace", "2.5", "--nproc-per-node", "2",
                     "-r", "0:1,1:2", "a"});
  auto yaml = ccrun::launcher::to_yaml(spec);
  CHECK_THAT(yaml, Catch::Contains("\nmonitor_interval: 0.1\n"));
  CHECK_THAT(yaml, Catch::Contains("\nstop_grace: 2.5\n"));
  CHECK_THAT(yaml, Catch::Contains("nnodes: \"1:4\"\n"));
  CHECK_THAT(yaml, Catch::Contains("redirects: \"0:1,1:2\"\n"));
  auto path = write_yaml(yaml);
  auto again = parse({"--config", path});
  CHECK(again.min_nodes == 1);
  CHECK(again.max_nodes == 4);
  CHECK(again.monitor_interval == std::chrono::milliseconds(100));
  std::filesystem::remove(path);
}

TEST_CASE("stop_without_progress: the flag, PET_, YAML, default and bad values", "[launcher]") {
  CHECK(parse({"--no-python", "a"}).stop_without_progress == 0);  // off: --max-restarts is torchrun's
  CHECK(parse({"--stop-without-progress", "4", "--no-python", "a"}).stop_without_progress == 4);
  CHECK(parse({"--stop_without_progress", "2", "--no-python", "a"}).stop_without_progress == 2);
  Environment env{{{"PET_STOP_WITHOUT_PROGRESS", "5"}}};
  CHECK(parse({"--no-python", "a"}, env).stop_without_progress == 5);
  CHECK(parse({"--stop-without-progress", "0", "--no-python", "a"}, env).stop_without_progress == 0);
  auto path = write_yaml("stop_without_progress: 6\nno_python: true\nprogram: a\n");
  CHECK(parse({"--config", path}).stop_without_progress == 6);
  CHECK_THAT(ccrun::launcher::to_yaml(parse({"--config", path})),
             Catch::Contains("\nstop_without_progress: 6\n"));
  std::filesystem::remove(path);
  CHECK_THAT(error_of({"--stop-without-progress", "1", "a"}),
             Catch::Contains("--stop-without-progress \"1\": one attempt has nothing to repeat") &&
                 Catch::Contains("or 0 to never stop this way"));
  CHECK_THAT(error_of({"--stop-without-progress", "-2", "a"}),
             Catch::Contains("--stop-without-progress \"-2\""));
  CHECK_THAT(error_of({"--stop-without-progress", "many", "a"}),
             Catch::Contains("--stop-without-progress \"many\": expected 0 (never) or a number of attempts"));
}

TEST_CASE("hang_timeout: the flag, PET_, YAML, default and bad values", "[launcher]") {
  CHECK(parse({"--no-python", "a"}).hang_timeout == std::chrono::milliseconds(600'000));
  CHECK(parse({"--hang-timeout", "2.5", "--no-python", "a"}).hang_timeout ==
        std::chrono::milliseconds(2500));
  CHECK(parse({"--hang_timeout", "0", "--no-python", "a"}).hang_timeout.count() == 0);
  Environment env{{{"PET_HANG_TIMEOUT", "7"}}};
  CHECK(parse({"--no-python", "a"}, env).hang_timeout == std::chrono::milliseconds(7000));
  CHECK(parse({"--hang-timeout", "9", "--no-python", "a"}, env).hang_timeout ==
        std::chrono::milliseconds(9000));
  auto path = write_yaml("hang_timeout: 42\nno_python: true\nprogram: a\n");
  CHECK(parse({"--config", path}).hang_timeout == std::chrono::milliseconds(42'000));
  CHECK_THAT(ccrun::launcher::to_yaml(parse({"--config", path})),
             Catch::Contains("\nhang_timeout: 42\n"));
  std::filesystem::remove(path);
  CHECK_THAT(error_of({"--hang-timeout", "-1", "a"}), Catch::Contains("--hang-timeout \"-1\""));
  CHECK_THAT(error_of({"--hang-timeout", "soon", "a"}), Catch::Contains("--hang-timeout \"soon\""));
}

TEST_CASE("logs specs: torch 2.x's only spec, default", "[launcher]") {
  Environment env;
  CHECK_NOTHROW(parse_command_line({"--logs-specs", "default", "--no-python", "x"}, env));
  CHECK_NOTHROW(parse_command_line({"--logs_specs=default", "--no-python", "x"}, env));
  CHECK_THROWS_WITH(parse_command_line({"--logs-specs", "mine", "--no-python", "x"}, env),
                    Catch::Contains("default"));
}

TEST_CASE("an unknown flag gets the nearest flag, its value and '_' aside", "[launcher]") {
  auto suggests = [](const std::string& flag, const std::string& best) {
    CHECK_THAT(error_of({flag, "x"}), Catch::Contains("unknown flag \"" + flag + "\"; did you mean \"" +
                                                      best + "\"?"));
  };
  suggests("--nproc_per_nodes=2", "--nproc_per_node");
  suggests("--nproc-per-nodes=2", "--nproc-per-node");
  suggests("--master_address", "--master_addr");
  suggests("--master-address=10.0.0.1", "--master-addr");
  suggests("--ssh_commands=ssh", "--ssh-command");  // the one spelling it has
  CHECK_THAT(error_of({"--completely-unrelated", "x"}), !Catch::Contains("did you mean"));
}

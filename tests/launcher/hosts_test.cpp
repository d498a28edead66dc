// Host lists: DeepSpeed hostfiles, `hosts:` in the job file, and the
// --include/--exclude filters, with the column of every error.
#include "hosts.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ccrun/error.h"
#include "ccrun/job_state.h"
#include "exclusion_file.h"
#include "job_builder.h"

using ccrun::ConfigError;
using ccrun::HostSpec;
using namespace ccrun::launcher;

namespace {
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
std::string write_file(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(getpid()));
  std::ofstream(path) << text;
  return path.string();
}
std::vector<HostSpec> resolve(const std::string& text, std::string include, std::string exclude,
                              int default_slots = 8) {
  return resolve_host_list(parse_hostfile(text, "hf"), default_slots, include, "--include \"" + include + "\"",
                           exclude, "--exclude \"" + exclude + "\"");
}
}  // namespace

TEST_CASE("hostfile: DeepSpeed's format, comments, blank lines", "[hosts]") {
  auto hosts = parse_hostfile("# the cluster\n\nnode1 slots=4\n  node2   # slots default\n"
                              "10.0.0.7\tslots=2 # two\n\r\n",
                              "hf");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].name == "node1");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[0].where == "hf:3:1");
  CHECK(hosts[1].name == "node2");
  CHECK(!hosts[1].slots);
  CHECK(hosts[1].where == "hf:4:3");
  CHECK(hosts[2].slots == 2);
  CHECK(parse_hostfile("", "hf").empty());
}

TEST_CASE("hostfile: errors name file, line and column", "[hosts]") {
  auto err = [](const char* text) { return error_of([&] { (void)parse_hostfile(text, "hf"); }); };
  CHECK_THAT(err("a slots=4\nb slots=x\n"), Catch::StartsWith("hf:2:3: \"slots=x\": N in slots=N"));
  CHECK_THAT(err("a slots=0\n"), Catch::StartsWith("hf:1:3:"));
  CHECK_THAT(err("a gpus=4\n"), Catch::StartsWith("hf:1:3: \"gpus=4\": expected slots=N"));
  CHECK_THAT(err("a slots=1 slots=2\n"), Catch::StartsWith("hf:1:11: slots given twice"));
  CHECK_THAT(err("a\n\nb\n  a slots=2\n"),
             Catch::StartsWith("hf:4:3: host \"a\" is listed twice (first on line 1)"));
  CHECK_THAT(err("-oProxyCommand=x slots=1\n"), Catch::Contains("cannot start with '-'"));
  auto path = write_file("empty-hostfile", "# nothing\n");
  CHECK_THAT(error_of([&] { (void)read_hostfile(path); }), Catch::Contains("no hosts in it"));
  CHECK_THAT(error_of([&] { (void)read_hostfile("/nonexistent"); }), Catch::Contains("cannot read"));
  CHECK_THAT(error_of([&] { (void)read_hostfile("/tmp"); }), Catch::Contains("is a directory"));
  std::filesystem::remove(path);
}

TEST_CASE("host lists: --include / --exclude filters", "[hosts]") {
  const std::string list = "a slots=4\nb slots=2\nc\n";
  auto all = resolve(list, "", "");
  REQUIRE(all.size() == 3);
  CHECK(all[2].slots == 8);
  CHECK(all[1].devices == std::vector<int>{0, 1});

  auto inc = resolve(list, "c@a:0,2", "");
  REQUIRE(inc.size() == 2);
  CHECK(inc[0].name == "a");  // list order, not filter order
  CHECK(inc[0].devices == std::vector<int>{0, 2});
  CHECK(inc[1].name == "c");
  CHECK(inc[1].devices.size() == 8);
  CHECK(resolve(list, "a:1@a:3", "")[0].devices == std::vector<int>{1, 3});
  CHECK(resolve(list, "a:1@a", "")[0].devices.size() == 4);

  auto exc = resolve(list, "", "b@a:3");
  REQUIRE(exc.size() == 2);
  CHECK(exc[0].devices == std::vector<int>{0, 1, 2});
  CHECK(exc[1].name == "c");
  CHECK(resolve(list, "", "b:0,1").size() == 2);  // no slot left: host dropped

  auto v6 = resolve("[::1] slots=2\n", "[::1]:1", "");
  CHECK(v6[0].name == "::1");
  CHECK(v6[0].devices == std::vector<int>{1});
}

TEST_CASE("filters: errors name the column", "[hosts]") {
  const std::string list = "a slots=4\nb slots=2\n";
  auto err = [&](std::string inc, std::string exc = "") { return error_of([&] { (void)resolve(list, inc, exc); }); };
  CHECK_THAT(err("a@b:x"), Catch::StartsWith("--include \"a@b:x\": column 5: slot \"x\" is not a slot number"));
  CHECK_THAT(err("a@@b"), Catch::StartsWith("--include \"a@@b\": column 3: an empty host"));
  CHECK_THAT(err("a:0,"), Catch::Contains("column 5: slot \"\""));
  CHECK_THAT(err("z"), Catch::Contains("host \"z\" is not in the host list (a, b)"));
  CHECK_THAT(err("b:2"), Catch::Contains("host \"b\" has slots 0 to 1; there is no slot 2"));
  CHECK_THAT(err("a", "b"), Catch::Contains("cannot go together"));
  CHECK_THAT(err("", "a@b"), Catch::Contains("no host is left"));
  CHECK_THAT(err("[::1"), Catch::Contains("column 1: '[' without ']'"));
}

TEST_CASE("host lists through the command line and the job file", "[hosts][launcher]") {
  auto hf = write_file("hostfile", "n1 slots=2\nn2\nn3 slots=1\n");
  auto s = parse_command_line({"--hostfile", hf, "--nproc-per-node", "4", "--no-python", "x"}, {}).spec;
  REQUIRE(s.hosts.size() == 3);
  CHECK(s.hosts[1].slots == 4);
  CHECK(s.min_nodes == 3);
  CHECK(s.max_nodes == 3);
  CHECK(s.master_addr == "n1");
  s = parse_command_line({"--hostfile", hf, "--exclude", "n2", "--master-addr", "10.0.0.1", "x"}, {}).spec;
  CHECK(s.hosts.size() == 2);
  CHECK(s.master_addr == "10.0.0.1");
  CHECK_THAT(error_of([&] { parse_command_line({"--hostfile", hf, "--nnodes", "2", "x"}, {}); }),
             Catch::Contains("--nnodes \"2\": the host list") && Catch::Contains("has 3 host(s)"));
  CHECK_THAT(error_of([&] { parse_command_line({"--include", "a", "x"}, {}); }),
             Catch::Contains("--include \"a\": needs a host list"));

  auto job = write_file("hosts.yaml",
                        "nproc_per_node: 2\nhosts:\n  - n1\n  - {host: n2, slots: 3}\n  - host: n3\n"
                        "include: n1@n2:0,2\nprogram: x\n");
  s = parse_command_line({"--config", job}, {}).spec;
  REQUIRE(s.hosts.size() == 2);
  CHECK(s.hosts[0].slots == 2);
  CHECK(s.hosts[1].devices == std::vector<int>{0, 2});
  // --print-config writes it back so that it loads the same.
  auto again = write_file("hosts-again.yaml", to_yaml(s));
  auto s2 = parse_command_line({"--config", again}, {}).spec;
  REQUIRE(s2.hosts.size() == 2);
  CHECK(s2.hosts[1].devices == std::vector<int>{0, 2});
  CHECK(s2.master_addr == "n1");

  auto bad = write_file("hosts-bad.yaml", "hosts:\n  - n1\n  - {host: n2, slot: 3}\nprogram: x\n");
  CHECK_THAT(error_of([&] { parse_command_line({"--config", bad}, {}); }),
             Catch::Contains(bad + ":3:") && Catch::Contains("unknown key \"slot\"; did you mean \"slots\"?"));
  auto dup = write_file("hosts-dup.yaml", "hosts:\n  - n1\n  - n1\nprogram: x\n");
  CHECK_THAT(error_of([&] { parse_command_line({"--config", dup}, {}); }),
             Catch::Contains(dup + ":3:5: hosts: \"n1\" is listed twice (first at " + dup + ":2:5)"));
  auto slots0 = write_file("hosts-slots.yaml", "hosts:\n  - {host: n2, slots: 0}\nprogram: x\n");
  CHECK_THAT(error_of([&] { parse_command_line({"--config", slots0}, {}); }),
             Catch::Contains(slots0 + ":2:") && Catch::Contains("slots"));
  auto both = write_file("hosts-both.yaml", "hostfile: " + hf + "\nhosts: [n1]\nprogram: x\n");
  CHECK_THAT(error_of([&] { parse_command_line({"--config", both}, {}); }), Catch::Contains("give the hosts once"));
  for (auto p : {hf, job, again, bad, dup, slots0, both}) std::filesystem::remove(p);
}

TEST_CASE("host lists: an elastic job's hosts beyond its maximum are hot spares, hosts an "
          "earlier launch excluded are left out", "[hosts][launcher][exclusion]") {
  auto hf = write_file("spares-hostfile", "n1\nn2\nn3\n");
  std::vector<std::string> elastic = {"--hostfile", hf, "--nnodes", "1:2", "--rdzv-backend", "c10d",
                                      "--rdzv-endpoint", "n1:29400", "--rdzv-id", "job", "x"};
  auto s = parse_command_line(elastic, {}).spec;
  CHECK(s.hosts.size() == 3);  // one waits as a spare
  CHECK(s.max_nodes == 2);

  // The launching host's record (exclusion_file.h): n1 excluded for a minute.
  auto state = std::filesystem::temp_directory_path() / ("ccrun-state-" + std::to_string(getpid()));
  std::filesystem::remove_all(state);
  Environment env;
  env.vars["CCRUN_STATE_DIR"] = state.string();
  ccrun::ExclusionList list;
  list.add("n1", "its health gate failed", ccrun::wall_clock_ms(), std::chrono::minutes(1));
  std::filesystem::path file = exclusion_file(env, "job");
  CHECK(file == state / "exclusions" / "job.json");
  REQUIRE(record_exclusion(file, list.by_host["n1"]).empty());
  s = parse_command_line(elastic, env).spec;
  REQUIRE(s.hosts.size() == 2);
  CHECK(s.hosts[0].name == "n2");
  CHECK(s.master_addr == "n2");  // the first host that is left
  // Another job's id has its own record.
  std::vector<std::string> other = elastic;
  other[9] = "other";
  CHECK(parse_command_line(other, env).spec.hosts.size() == 3);
  // A static job cannot go without it.
  CHECK_THAT(error_of([&] {
               parse_command_line({"--hostfile", hf, "--rdzv-id", "job", "x"}, env);
             }),
             Catch::Contains("once n1 (excluded, above) are left out; the job needs all 3"));
  std::filesystem::remove_all(state);
  std::filesystem::remove(hf);
}

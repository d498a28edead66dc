// Slurm: the hostlist expander and the srun variables as settings, with
// their precedence under flags and PET_ variables.
#include "slurm.h"

#include <catch2/catch.hpp>

#include "ccrun/error.h"
#include "job_builder.h"

using ccrun::ConfigError;
using namespace ccrun::launcher;
using V = std::vector<std::string>;

namespace {
std::string error_of(std::string_view text) {
  try {
    (void)expand_hostlist(text, "SLURM_JOB_NODELIST");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
V expand(std::string_view text) { return expand_hostlist(text, "L"); }

Environment srun_env(std::map<std::string, std::string> more = {}) {
  Environment env{{{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NUM_NODES", "4"},
                   {"SLURM_NNODES", "4"}, {"SLURM_NODEID", "2"}, {"SLURM_LOCALID", "0"},
                   {"SLURM_JOB_NODELIST", "gpu[01-04]"}}};
  for (auto& [k, v] : more) env.vars[k] = v;
  return env;
}
}  // namespace

TEST_CASE("hostlist: plain names, ranges, padding, several brackets", "[slurm]") {
  CHECK(expand("node1") == V{"node1"});
  CHECK(expand("a,b,c") == V{"a", "b", "c"});
  CHECK(expand("gpu[01-04,07],cpu3") == V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"});
  CHECK(expand("n[8-11]") == V{"n8", "n9", "n10", "n11"});
  CHECK(expand("n[08-10]") == V{"n08", "n09", "n10"});
  CHECK(expand("n[001-002]") == V{"n001", "n002"});
  CHECK(expand("10.0.0.[1-2]") == V{"10.0.0.1", "10.0.0.2"});
  CHECK(expand("rack[1-2]-n[1-2]") == V{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand("n[1-2]x,m[5]") == V{"n1x", "n2x", "m5"});
  CHECK(expand("n[3,1]") == V{"n3", "n1"});
  CHECK(expand("n[0-1023]").size() == 1024);
}

TEST_CASE("hostlist: bad input names the column", "[slurm]") {
  CHECK_THAT(error_of("gpu[01-04"), Catch::StartsWith("SLURM_JOB_NODELIST \"gpu[01-04\": column 4: '[' without ']'"));
  CHECK_THAT(error_of("gpu01-04]"), Catch::Contains("column 9: ']' without '['"));
  CHECK_THAT(error_of("a,,b"), Catch::Contains("column 3: an empty host"));
  CHECK_THAT(error_of("a,"), Catch::Contains("column 3: an empty host"));
  CHECK_THAT(error_of("n[]"), Catch::Contains("column 2: empty brackets"));
  CHECK_THAT(error_of("n[1-x]"), Catch::Contains("column 5: 'x' in a range"));
  CHECK_THAT(error_of("n[1,,2]"), Catch::Contains("column 5: an empty range"));
  CHECK_THAT(error_of("n[5-2]"), Catch::Contains("column 3: range \"5-2\" runs backwards"));
  CHECK_THAT(error_of("n[-2]"), Catch::Contains("numbers on both sides"));
  CHECK_THAT(error_of("a,b c"), Catch::Contains("column 4: a space"));
  CHECK_THAT(error_of("n[0-99999999]"), Catch::Contains("too large"));
  CHECK_THAT(error_of(""), Catch::Contains("is empty"));
}

TEST_CASE("srun's variables give the node settings, flags and PET_ win", "[slurm][launcher]") {
  auto s = parse_command_line({"--no-python", "x"}, srun_env()).spec;
  CHECK(s.min_nodes == 4);
  CHECK(s.max_nodes == 4);
  CHECK(s.node_rank == 2);
  CHECK(s.master_addr == "gpu01");
  CHECK(s.rdzv.id == "4242");
  // A step on fewer nodes than the job: the step's variables.
  s = parse_command_line({"--no-python", "x"},
                         srun_env({{"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NODELIST", "gpu[03-04]"},
                                   {"SLURM_NODEID", "1"}})).spec;
  CHECK(s.max_nodes == 2);
  CHECK(s.master_addr == "gpu03");
  // Flags and PET_ variables win.
  s = parse_command_line({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--no-python", "x"},
                         srun_env({{"PET_RDZV_ID", "mine"}})).spec;
  CHECK(s.max_nodes == 2);
  CHECK(s.node_rank == 1);
  CHECK(s.master_addr == "10.0.0.1");
  CHECK(s.rdzv.id == "mine");
  // Outside a job step (a batch script itself), Slurm's variables are ignored.
  auto batch = srun_env();
  batch.vars.erase("SLURM_STEP_ID");
  CHECK(parse_command_line({"--no-python", "x"}, batch).spec.max_nodes == 1);
}

TEST_CASE("srun's variables: bad ones are errors naming the variable", "[slurm][launcher]") {
  auto err = [](Environment env) {
    try {
      parse_command_line({"--no-python", "x"}, env);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(err(srun_env({{"SLURM_LOCALID", "1"}})), Catch::Contains("--ntasks-per-node=1"));
  CHECK_THAT(err(srun_env({{"SLURM_JOB_NODELIST", "gpu[1-"}})), Catch::StartsWith("SLURM_JOB_NODELIST \"gpu[1-\""));
  CHECK_THAT(err(srun_env({{"SLURM_NODEID", "9"}})),
             Catch::Contains("SLURM_NODEID \"9\": must be less than the number of nodes (4)"));
}

// torchrun's abbreviated long flags (flag_prefixes.h), alone and through the
// launcher's parser.
#include <catch2/catch.hpp>

#include "ccrun/error.h"
#include "flag_prefixes.h"
#include "job_builder.h"

using namespace ccrun::launcher;
using Args = std::vector<std::string>;

namespace {

const std::vector<FlagNames> kFlags = {
    {{"--redirects"}, {"-r"}, true},
    {{"--nproc-per-node", "--nproc_per_node"}, {}, true},
    {{"--nnodes"}, {}, true},
    {{"--no-python", "--no_python"}, {}, false},
};

}  // namespace

TEST_CASE("flag prefixes: a unique prefix becomes its flag", "[launcher]") {
  CHECK(expand_flag_prefixes(kFlags, {"--redirect=3", "t.py"}) == Args{"--redirects=3", "t.py"});
  // Both spellings of one option are one option.
  CHECK(expand_flag_prefixes(kFlags, {"--nproc", "4", "--no-p", "t"}) ==
        Args{"--nproc-per-node", "4", "--no-python", "t"});
  CHECK(expand_flag_prefixes(kFlags, {"--nproc_", "4"}) == Args{"--nproc_per_node", "4"});
}

TEST_CASE("flag prefixes: the program's own flags are left alone", "[launcher]") {
  // A value is skipped, then the program ends the expansion.
  CHECK(expand_flag_prefixes(kFlags, {"--nnodes", "--redir", "t.py", "--redir"}) ==
        Args{"--nnodes", "--redir", "t.py", "--redir"});
  CHECK(expand_flag_prefixes(kFlags, {"-r", "3", "t.py", "--nproc"}) ==
        Args{"-r", "3", "t.py", "--nproc"});
  CHECK(expand_flag_prefixes(kFlags, {"--", "--nproc"}) == Args{"--", "--nproc"});
  CHECK(expand_flag_prefixes(kFlags, {"--unknown", "t.py"}) == Args{"--unknown", "t.py"});
}

TEST_CASE("flag prefixes: an ambiguous prefix names the candidates", "[launcher]") {
  CHECK_THROWS_WITH(expand_flag_prefixes(kFlags, {"--n", "2"}),
                    Catch::Contains("--n: ambiguous abbreviation, it could be "
                                    "--nproc-per-node, --nnodes, --no-python"));
}

TEST_CASE("flag prefixes: through the parser, as torchrun takes them", "[launcher]") {
  Environment env;
  auto spec = parse_command_line({"--nproc=2", "--redirect=3", "--max-r", "2", "--no-py", "x"},
                                 env)
                  .spec;
  CHECK(spec.nproc_per_node == 2);
  CHECK(spec.logs.default_redirects == 3);
  CHECK(spec.max_restarts == 2);
  CHECK(spec.entrypoint == Args{"x"});
  CHECK_THROWS_AS(parse_command_line({"--r", "x"}, env), ccrun::ConfigError);
}

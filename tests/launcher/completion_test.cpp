// The bash completion script (completion.h): made from the flags it is
// given, and from the launcher's own flag table through --print-completion.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "ccrun/error.h"
#include "completion.h"
#include "job_builder.h"

using namespace ccrun::launcher;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string print_completion(const std::string& shell) {
  return parse_command_line({"--print-completion", shell}, Environment{}).message;
}

}  // namespace

TEST_CASE("completion: flags, values and the program's words", "[launcher]") {
  std::string s = bash_completion_script(
      "ccrun", {{{"--rdzv-backend", "--rdzv_backend"}, true, {"static", "c10d"}},
                {{"--log-dir"}, true, {}},
                {{"--standalone"}, false, {}}});
  // A flag with fixed values offers them; one without leaves bash's default.
  CHECK(contains(s, "    --rdzv-backend|--rdzv_backend)\n"
                    "      COMPREPLY=($(compgen -W \"static c10d\" -- \"$cur\"))\n"));
  CHECK(contains(s, "    --log-dir)\n      return 0 ;;\n"));
  // The value flags are skipped when looking for the program.
  CHECK(contains(s, "      --rdzv-backend|--rdzv_backend|--log-dir) skip=1 ;;\n"));
  CHECK(contains(s, "compgen -W \"--rdzv-backend --rdzv_backend --log-dir --standalone\""));
  CHECK(contains(s, "complete -o default -F _ccrun ccrun\n"));
  CHECK_FALSE(contains(s, "--standalone)"));  // a switch takes no value
}

TEST_CASE("completion: a word the script cannot hold unquoted is refused", "[launcher]") {
  CHECK_THROWS_AS(bash_completion_script("ccrun", {{{"--a"}, true, {"two words"}}}), std::invalid_argument);
  CHECK_THROWS_AS(bash_completion_script("ccrun", {{{"--a"}, true, {"$(x)"}}}), std::invalid_argument);
  CHECK_THROWS_AS(bash_completion_script("ccrun", {{{""}, false, {}}}), std::invalid_argument);
}

TEST_CASE("completion: --print-completion bash reads the flag table", "[launcher]") {
  std::string s = print_completion("bash");
  // Every backend of the name table, the nproc keywords, the start methods.
  CHECK(contains(s, "--rdzv-backend|--rdzv_backend)\n"
                    "      COMPREPLY=($(compgen -W \"static c10d etcd\""));
  CHECK(contains(s, "--nproc-per-node|--nproc_per_node)\n"
                    "      COMPREPLY=($(compgen -W \"auto cpu gpu\""));
  CHECK(contains(s, "compgen -W \"spawn fork forkserver\""));
  // Flags outside the table (--config, --export, -r) are there; hidden ones are not.
  CHECK(contains(s, "--config)"));
  CHECK(contains(s, " --export"));
  CHECK(contains(s, "-r|"));
  CHECK_FALSE(contains(s, "--exit-on-stdin-eof"));
  CHECK_THROWS_WITH(print_completion("zsh"),
                    Catch::Contains("--print-completion \"zsh\": only bash is supported"));
}

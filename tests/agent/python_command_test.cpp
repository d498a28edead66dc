// What a worker's command line runs, for a warm start (ccrun/python_command.h).
#include "ccrun/python_command.h"

#include <catch2/catch.hpp>

using namespace ccrun::agent;

TEST_CASE("a script with the interpreter's flags", "[python_command]") {
  auto c = parse_python_command({"/usr/bin/python3", "-u", "-X", "dev", "train.py", "--lr", "1"});
  REQUIRE(c);
  REQUIRE(c->interpreter == std::vector<std::string>{"/usr/bin/python3", "-u", "-X", "dev"});
  REQUIRE(c->kind == PythonCommand::Kind::kScript);
  REQUIRE(c->target == "train.py");
  REQUIRE(c->args == std::vector<std::string>{"--lr", "1"});
}

TEST_CASE("a module and code", "[python_command]") {
  auto m = parse_python_command({"python3.11", "-u", "-m", "pkg.train", "-x"});
  REQUIRE((m && m->kind == PythonCommand::Kind::kModule && m->target == "pkg.train"));
  REQUIRE(m->args == std::vector<std::string>{"-x"});
  auto c = parse_python_command({"python3", "-c", "print(1)", "a"});
  REQUIRE((c && c->kind == PythonCommand::Kind::kCode && c->target == "print(1)"));
  REQUIRE(std::string(c->kind_name()) == "code");
}

TEST_CASE("what is not a Python command here starts cold", "[python_command]") {
  REQUIRE_FALSE(parse_python_command({"./trainer", "x.py"}));       // not an interpreter
  REQUIRE_FALSE(parse_python_command({"python3", "-Q", "x.py"}));   // a flag it does not know
  REQUIRE_FALSE(parse_python_command({"python3", "-"}));            // stdin
  REQUIRE_FALSE(parse_python_command({"python3", "-m"}));           // no module
  REQUIRE_FALSE(parse_python_command({"python3", "-u"}));           // nothing to run
  REQUIRE_FALSE(parse_python_command({}));
}

// The launcher's own error record (failure_report.h): torch's
// dump_error_file for a worker record, a generated record otherwise.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "failure_report.h"

using namespace ccrun::agent;
using json = nlohmann::json;

namespace {

Failure failed(int rank, int exit_code, int signal, int64_t time_ms) {
  Failure f;
  f.node_rank = 1;
  f.hostname = "h1";
  f.rank = rank;
  f.local_rank = rank % 2;
  f.exit_code = exit_code;
  f.signal = signal;
  f.time_ms = time_ms;
  f.stderr_tail = "last words\n";
  return f;
}

}  // namespace

TEST_CASE("launcher error record: the worker's record, errorCode set", "[failure_report]") {
  std::string worker = R"({"message": {"message": "ValueError: boom", "extraInfo":)"
                       R"( {"py_callstack": "tb", "timestamp": "1"}}})";
  json j = json::parse(launcher_error_record(failed(3, 1, 0, 5000), worker));
  CHECK(j["message"]["message"] == "ValueError: boom");
  CHECK(j["message"]["extraInfo"]["py_callstack"] == "tb");
  CHECK(j["message"]["errorCode"] == 1);
  // A signal is torch's negative exit code; a plain-string message is kept.
  CHECK(json::parse(launcher_error_record(failed(3, 0, 11, 0), worker))["message"]["errorCode"] ==
        -11);
  CHECK(json::parse(launcher_error_record(failed(3, 1, 0, 0), R"({"message": "new"})")) ==
        json{{"message", "new"}});
}

TEST_CASE("launcher error record: generated when the worker wrote none", "[failure_report]") {
  json j = json::parse(launcher_error_record(failed(3, 7, 0, 42'000), ""));
  CHECK(j["message"]["message"] == "ChildFailedError: rank 3 (local_rank 1) on h1: exit code 7");
  CHECK(j["message"]["extraInfo"]["py_callstack"] == "last words\n");
  CHECK(j["message"]["extraInfo"]["timestamp"] == "42");
  CHECK(j["message"]["errorCode"] == 7);
}

TEST_CASE("root cause: the earliest failure", "[failure_report]") {
  CHECK(root_cause({failed(1, 1, 0, 20), failed(2, 1, 0, 10)}).rank == 2);
  CHECK(root_cause({}).rank == -1);
}

TEST_CASE("a Python program's report names its interpreter, and a missing module's fix",
          "[failure_report]") {
  using ccrun::Failure;
  Failure f;
  f.stderr_tail = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n";
  std::string lines = interpreter_lines("python3", {f});
  REQUIRE(lines.find("python    : python3 (PYTHON_EXEC, else python3 on PATH)") != std::string::npos);
  REQUIRE(lines.find("hint      : ModuleNotFoundError: No module named 'torch' in python3; set "
                     "PYTHON_EXEC") != std::string::npos);
  REQUIRE(interpreter_lines("python3", {Failure{}}).find("hint") == std::string::npos);
  REQUIRE(interpreter_lines("", {f}).empty());
}

// The incident folder's pure parts and its layout: stacks merged into
// classes, the program's frame, log tails, and what write_incident writes.
#include "incident.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <unistd.h>

using namespace ccrun::agent;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string python_in(const char* func, int line, const char* thread) {
  return std::string("Thread ") + thread + " (most recent call first):\n" +
         "  File \"/srv/job/train.py\", line " + std::to_string(line) + " in " + func + "\n" +
         "  File \"/srv/job/train.py\", line 200 in main\n";
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("stack_classes: same place, other addresses and ids, one class, in first-rank order") {
  json stacks = json::array();
  for (int r = 0; r < 6; ++r) {
    bool odd_one = r == 4;
    std::string thread = "0x00007f3e7" + std::to_string(r) + "e31040";
    stacks.push_back({{"rank", r},
                      {"pid", 100 + r},
                      {"python", odd_one ? python_in("next_batch", 41, thread.c_str())
                                         : python_in("step", 88, thread.c_str())},
                      {"native", "PID " + std::to_string(100 + r) + "\nTID 7: #0 0x7f00" +
                                     std::to_string(r) + " poll"}});
  }
  auto classes = stack_classes(stacks);
  REQUIRE(classes.size() == 2);
  CHECK(classes[0].ranks == std::vector<int>{0, 1, 2, 3, 5});
  CHECK(classes[0].pids == std::vector<int>{100, 101, 102, 103, 105});
  CHECK(classes[0].title() == "ranks 0-3,5 (5) <- train.py:88 in step");
  CHECK(classes[1].title() == "rank 4 <- train.py:41 in next_batch");
}

TEST_CASE("stack_classes: without Python stacks the native ones are compared") {
  json stacks = json::array({{{"rank", 0}, {"pid", 1}, {"python", ""}, {"native", "TID 1: #0 0x1 a"}},
                             {{"rank", 1}, {"pid", 2}, {"python", ""}, {"native", "TID 2: #0 0x2 a"}},
                             {{"rank", 2}, {"pid", 3}, {"python", ""}, {"native", "TID 3: #0 0x3 b"}}});
  auto classes = stack_classes(stacks);
  REQUIRE(classes.size() == 2);
  CHECK(classes[0].title() == "ranks 0,1 (2)");
  CHECK(normalize_stack("PID 12 TID 13 at 0xdeadBEEF") == "PID ? TID ? at 0x?");
}

TEST_CASE("program_frame: the dumping thread's first frame, else the first thread's") {
  std::string two = python_in("worker_loop", 10, "0x1") + "\nCurrent thread 0x2 (most recent call first):\n" +
                    "  File \"x/hang_demo.py\", line 17 in wait_for_the_data_loader\n";
  CHECK(program_frame(two) == "hang_demo.py:17 in wait_for_the_data_loader");
  CHECK(program_frame(python_in("step", 88, "0x1")) == "train.py:88 in step");
  CHECK(program_frame("") == "");
}

TEST_CASE("program_frame: the program's own line, past torch, Python's library and the hook") {
  std::string in_torch =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1541 in all_reduce\n"
      "  File \"/opt/ccrun/python/ccrun_progress.py\", line 590 in wrapper\n"
      "  File \"/srv/job/train.py\", line 91 in step\n"
      "  File \"/srv/job/train.py\", line 200 in main\n"
      "\nThread 0x2 (most recent call first):\n"
      "  File \"/srv/job/loader.py\", line 5 in fill\n";
  CHECK(program_frame(in_torch) == "train.py:91 in step");
  std::string in_a_queue =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/root/.pyenv/versions/3.12.1/lib/python3.12/threading.py\", line 355 in wait\n"
      "  File \"/root/.pyenv/versions/3.12.1/lib/python3.12/queue.py\", line 180 in get\n"
      "  File \"/venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py\", line 1133 in _try_get_data\n"
      "  File \"/home/me/data.py\", line 41 in __next__\n";
  CHECK(program_frame(in_a_queue) == "data.py:41 in __next__");
  // Library code alone (a rank stopped while importing): its innermost frame.
  std::string importing =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"<frozen importlib._bootstrap>\", line 241 in _call_with_frames_removed\n"
      "  File \"/usr/lib64/python3.9/importlib/__init__.py\", line 127 in import_module\n";
  CHECK(program_frame(importing) == "<frozen importlib._bootstrap>:241 in _call_with_frames_removed");
}

TEST_CASE("is_library_file: Python's own, installed packages and the hook, not the program's") {
  for (const char* lib : {"/usr/lib/python3.11/threading.py", "/usr/lib/python3/dist-packages/torch/x.py",
                          "/opt/conda/lib/python3.10/site-packages/a.py", "lib/python3.12/queue.py",
                          "<frozen runpy>", "/home/me/ccrun/agent/python/ccrun_progress.py"}) {
    CHECK(is_library_file(lib));
  }
  for (const char* own : {"/srv/job/train.py", "train.py", "<string>", "/home/me/mylib/python_utils.py",
                          "/data/lib/pythonic/model.py", "/home/me/lib/python/model.py"}) {
    CHECK_FALSE(is_library_file(own));
  }
}

TEST_CASE("last_lines: the last n lines, with or without a final newline") {
  CHECK(last_lines("a\nb\nc\n", 2) == "b\nc\n");
  CHECK(last_lines("a\nb\nc", 2) == "b\nc");
  CHECK(last_lines("a\nb\n", 5) == "a\nb\n");
  CHECK(last_lines("", 3) == "");
  CHECK(last_lines("a\n", 0) == "");
}

TEST_CASE("write_incident: verdict, merged and per-rank stacks, log tails, RAS, flight recorders") {
  fs::path root = fs::temp_directory_path() / ("incident_test_" + std::to_string(::getpid()));
  fs::create_directories(root / "attempt_1" / "0");
  {
    std::ofstream out(root / "attempt_1" / "0" / "stderr.log");
    for (int i = 0; i < 80; ++i) out << "line " << i << "\n";
  }
  {
    std::ofstream out(root / "attempt_1" / "0" / "stdout.log");  // 1.3 MB: read from its end
    for (int i = 0; i < 100000; ++i) out << "out line " << i << "\n";
  }
  std::ofstream(root / "nccl_trace_rank_0") << "flight recorder dump";
  IncidentMaterial m;
  m.attempt = 1;
  m.failures.push_back({{"rank", 0}, {"cause", "hang"}});
  m.hang = {{"headline", "rank 0 has not issued all_reduce #3"},
            {"stacks", json::array({{{"rank", 0}, {"pid", 9}, {"python", python_in("f", 1, "0x1")},
                                     {"native", "#0 poll"},
                                     {"nccl_trace", (root / "nccl_trace_rank_0").string()}}})}};
  m.logs.push_back({0, root / "attempt_1" / "0" / "stdout.log", root / "attempt_1" / "0" / "stderr.log"});
  m.nccl_ras = "Job summary\n";
  fs::path dir = write_incident(root, m);
  CHECK(dir == root / "incident_1");
  json v = json::parse(read(dir / "verdict.json"));
  CHECK(v["attempt"] == 1);
  CHECK(v["hang"]["headline"] == "rank 0 has not issued all_reduce #3");
  CHECK_FALSE(v["hang"].contains("stacks"));
  CHECK_THAT(read(dir / "stacks" / "merged.txt"), Catch::StartsWith("rank 0 <- train.py:1 in f\n"));
  CHECK(read(dir / "stacks" / "rank_0.native.txt") == "#0 poll");
  std::string log = read(dir / "logs" / "rank_0.log");
  CHECK_THAT(log, Catch::StartsWith("== stdout (last 50 lines) ==\nout line 99950\n"));
  CHECK_THAT(log, Catch::Contains("out line 99999\n== stderr (last 50 lines) ==\nline 30\n"));
  CHECK_THAT(log, Catch::EndsWith("line 79\n"));
  CHECK(read(dir / "nccl_ras.txt") == "Job summary\n");
  CHECK(read(dir / "nccl_flight_recorder" / "nccl_trace_rank_0") == "flight recorder dump");
  fs::remove_all(root);
}

TEST_CASE("write_incident: the comparing node's job-wide classes, and the nodes whose share did not come") {
  fs::path root = fs::temp_directory_path() / ("incident_job_test_" + std::to_string(::getpid()));
  IncidentMaterial m;
  m.attempt = 0;
  m.hang = {{"job_stacks", {{"classes", json::array({{{"title", "ranks 0-2 (3) on nodes 0,1"}, {"stack", "S\n"}}})}}},
            {"missing_nodes", {2}}};
  fs::path dir = write_incident(root, m);
  CHECK(read(dir / "stacks" / "job_merged.txt") ==
        "ranks 0-2 (3) on nodes 0,1\nS\n\n(the stacks of node 2 did not come: in its own incident folder)\n");
  json v = json::parse(read(dir / "verdict.json"));
  CHECK_FALSE(v["hang"].contains("job_stacks"));  // under stacks/
  CHECK(v["hang"]["missing_nodes"] == json{2});
  fs::remove_all(root);
}

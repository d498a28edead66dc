// FileStore shared by several processes at once: counters stay exact and
// blocked readers in one process are woken by writers in another.
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "ccrun/file_store.h"

using namespace ccrun::store;
using namespace std::chrono_literals;

TEST_CASE("FileStore: several processes add, set and wait on one file", "[filestore]") {
  auto path = std::filesystem::temp_directory_path() /
              ("ccrun-filestore-mp-" + std::to_string(getpid()));
  std::filesystem::remove(path);
  constexpr int kProcs = 6, kAdds = 100;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 0;
      try {
        FileStore store(path.string(), 20s);
        // Everyone waits for the starting gun set by the parent.
        store.wait({"go"});
        for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
        store.set("done/" + std::to_string(p), "1");
        // Each process reads what the next one wrote.
        std::string next = "done/" + std::to_string((p + 1) % kProcs);
        if (store.get(next) != "1") status = 3;
      } catch (...) {
        status = 2;
      }
      _exit(status);
    }
    children.push_back(pid);
  }
  FileStore store(path.string(), 20s);
  store.set("go", "1");
  for (pid_t pid : children) {
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(store.add("counter", 0) == kProcs * kAdds);
  CHECK(store.num_keys() == 2 + kProcs);
  std::filesystem::remove(path);
}

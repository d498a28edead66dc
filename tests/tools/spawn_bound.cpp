// spawn_bound: the physical bound of a launch, for scripts/bench-launch.sh.
// Starts N copies of a program with posix_spawn (glibc's, vfork-like), waits
// for all of them, and prints the wall time in seconds: what any launcher
// of N processes pays on this machine before any work of its own.
//
//   spawn_bound N [program]    (program: /bin/true)
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 2 || std::atoi(argv[1]) <= 0) {
    std::fprintf(stderr, "usage: spawn_bound N [program]   (N > 0; program: /bin/true)\n");
    return 2;
  }
  int n = std::atoi(argv[1]);
  std::string program = argc > 2 ? argv[2] : "/bin/true";
  std::vector<char*> args{program.data(), nullptr};
  std::vector<pid_t> pids(size_t(n), 0);
  auto t0 = std::chrono::steady_clock::now();
  for (pid_t& pid : pids) {
    int rc = posix_spawn(&pid, program.c_str(), nullptr, nullptr, args.data(), environ);
    if (rc != 0) {
      std::fprintf(stderr, "spawn_bound: cannot start %s: %s\n", program.c_str(), std::strerror(rc));
      return 1;
    }
  }
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;
  std::printf("%.4f\n", wall.count());
  return 0;
}

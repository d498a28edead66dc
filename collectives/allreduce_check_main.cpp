// ccrun-allreduce-check: a short all_reduce among N ranks of this host over
// ccrun's collectives (Gloo's TCP transport on loopback), each rank its own
// process, as a node's workers would be. The agent's health gate runs it
// before each round with the node's --nproc-per-node (docs/health.md): a
// node whose ranks cannot start, meet, connect over loopback or reduce
// correctly fails its gate before the job spends an attempt on it. People
// run it by hand to check a node: `ccrun-allreduce-check --ranks 8`.
//
// The ranks meet through a file store in a fresh temporary folder (no
// port to choose, nothing left behind). Exit 0 when every rank got the
// right sum; 1 with one line per failing rank; 2 for a bad flag.
#include <CLI/CLI.hpp>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ccrun/collectives.h"
#include "ccrun/store_address.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct CheckFlags {
  int ranks = 2;
  size_t elements = 64 * 1024;  // 256 KiB of float32: Gloo's ring, not only its small path
  double timeout_s = 10;
};

// One rank: meet the others, all_reduce rank + 1 everywhere, compare each
// element with 1 + 2 + ... + n. Returns the process's exit status.
int run_rank(int rank, const CheckFlags& f, const std::string& store_path) {
  try {
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
    ccrun::store::OpenStoreOptions so;
    so.timeout = timeout;
    auto store = ccrun::store::open_store("file://" + store_path, so);
    auto pg = ccrun::create_gloo_group(store, rank, f.ranks, timeout);
    std::vector<float> buf(f.elements, float(rank + 1));
    pg->all_reduce({buf.data(), buf.size(), ccrun::DataType::kFloat32})->wait();
    const float want = float(f.ranks) * float(f.ranks + 1) / 2;
    for (size_t i = 0; i < buf.size(); ++i) {
      if (buf[i] != want) {
        std::fprintf(stderr, "rank %d: element %zu of the sum is %g, expected %g\n", rank, i,
                     double(buf[i]), double(want));
        return 1;
      }
    }
    pg->barrier()->wait();  // no rank closes its connections while another still reads
    // Out now: the group's teardown (its threads, Gloo's pairs) would cost
    // more than the check itself.
    std::fflush(nullptr);
    ::_exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}

// Forks the ranks; returns their pids (a failed fork says so and stops there).
std::vector<pid_t> start_ranks(const CheckFlags& f, const std::string& store_path) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  pid_t check = ::getpid();
  for (int r = 0; r < f.ranks; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("ccrun-allreduce-check: fork");
      break;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the check killed at its bound takes its ranks
      if (::getppid() != check) ::_exit(1);  // it died before the line above
      int status = run_rank(r, f, store_path);
      std::fflush(nullptr);
      ::_exit(status);
    }
    pids.push_back(pid);
  }
  return pids;
}

// Waits for every rank; returns how many failed (a signal counts, named).
int wait_ranks(const std::vector<pid_t>& pids) {
  int failed = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "rank %zu: killed by signal %d\n", r, WTERMSIG(status));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed;
}

int run_check(const CheckFlags& f) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ccrun-allreduce-check.XXXXXX";
  if (!::mkdtemp(pattern.data())) {
    std::fprintf(stderr, "ccrun-allreduce-check: cannot make a folder like %s: %s\n",
                 pattern.c_str(), std::strerror(errno));
    return 1;
  }
  auto t0 = Clock::now();
  std::vector<pid_t> pids = start_ranks(f, pattern + "/store");
  int failed = wait_ranks(pids) + (f.ranks - int(pids.size()));
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::error_code ec;
  fs::remove_all(pattern, ec);
  if (failed > 0) {
    std::fprintf(stderr, "all_reduce over %d local ranks failed on %d of them (%.1f ms)\n",
                 f.ranks, failed, ms);
    return 1;
  }
  std::printf("all_reduce of %zu float32 over %d local ranks (gloo, loopback): correct in %.1f ms\n",
              f.elements, f.ranks, ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CheckFlags f;
  CLI::App app{
      "A short all_reduce among N ranks of this host over ccrun's collectives (Gloo on "
      "loopback), each rank its own process: can this node's ranks start, meet and reduce? "
      "ccrun's health gate runs it before each round with --nproc-per-node ranks. Exit 0 "
      "when every rank got the right sum, 1 otherwise (one line per failing rank).",
      "ccrun-allreduce-check"};
  app.add_option("--ranks", f.ranks, "Ranks (processes) to run")->check(CLI::Range(1, 4096));
  app.add_option("--elements", f.elements, "float32 elements each rank reduces")
      ->check(CLI::Range(size_t(1), size_t(1) << 30));
  app.add_option("--timeout", f.timeout_s, "Seconds each rank may wait for the others")
      ->check(CLI::PositiveNumber);
  app.set_version_flag("--version", std::string("ccrun-allreduce-check ") + CCRUN_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ccrun-allreduce-check: %s; see ccrun-allreduce-check --help\n",
                 e.what());
    return 2;
  }
  return run_check(f);
}

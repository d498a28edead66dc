// collectives_progress_sim: a rank that only writes its progress record, as
// a rank of a hung job would have left it, for the hang verdict at scale
// (tests/integration/test_hangs.py, and docs/hangs.md's 1,024-rank figures): hundreds of
// these on one host cost no network and no torch. Every rank records
// --calls all_reduces of --count floats in the world group (id 0,
// WORLD_SIZE members) as issued and completed, then:
//   a rank in --behind     stops there: it never issues the next call;
//   a rank in --stopped    does the same, then stops itself with SIGSTOP;
//   every other rank       issues call --calls + 1 and waits in it.
// Then it waits for the agent to stop it. RANKS: "3" or "3,7,100".
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "progress_writer.h"

namespace {

std::set<int> parse_ranks(const std::string& text) {
  std::set<int> out;
  std::stringstream ss(text);
  for (std::string r; std::getline(ss, r, ',');) {
    if (!r.empty()) out.insert(std::stoi(r));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"collectives_progress_sim"};
  uint64_t calls = 10, count = 1024;
  std::string behind, stopped;
  app.add_option("--calls", calls, "calls every rank completes first");
  app.add_option("--count", count, "floats per all_reduce");
  app.add_option("--behind", behind, "ranks that never issue the next call");
  app.add_option("--stopped", stopped, "ranks that stop themselves (SIGSTOP) instead");
  CLI11_PARSE(app, argc, argv);
  const char* rank_env = std::getenv("RANK");
  const char* world_env = std::getenv("WORLD_SIZE");
  if (!rank_env || !world_env) {
    std::fprintf(stderr, "collectives_progress_sim: run it under ccrun (RANK, WORLD_SIZE)\n");
    return 2;
  }
  int rank = std::atoi(rank_env);
  ccrun::collectives::GroupProgress world;
  world.open(0, uint32_t(std::atoi(world_env)));
  for (uint64_t i = 0; i < calls; ++i) world.issue(ccrun::progress::Op::kAllReduce, count).complete();
  if (parse_ranks(stopped).count(rank)) {
    raise(SIGSTOP);
  } else if (!parse_ranks(behind).count(rank)) {
    (void)world.issue(ccrun::progress::Op::kAllReduce, count);  // and never completes it
  }
  for (;;) pause();
}

// One node's PMI-1 server (agent/mpi/pmi_server.h): two nodes of two ranks
// over one in-process store, each rank a thread that speaks the protocol on
// its end of the socket pair, as MPICH's client does; and bad input.
#include "mpi/pmi_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>

#include "ccrun/hash_store.h"

using namespace ccrun;
using namespace ccrun::agent::mpi;

namespace {

// A rank's side of the protocol: blocking line I/O on its descriptor.
struct Client {
  int fd;
  void send(const std::string& line) {
    std::string l = line + "\n";
    REQUIRE(::write(fd, l.data(), l.size()) == ssize_t(l.size()));
  }
  // The next line, "" at end of file.
  std::string line() {
    std::string out;
    char c;
    while (::read(fd, &c, 1) == 1) {
      if (c == '\n') return out;
      out += c;
    }
    return out;
  }
  std::string ask(const std::string& request) {
    send(request);
    return line();
  }
};

PmiServerOptions node(int node_rank) {
  PmiServerOptions o;
  o.job.kvsname = "kvs_test";
  o.job.world_size = 4;
  o.job.num_nodes = 2;
  o.job.nproc_per_node = 2;
  o.local_ranks = 2;
  o.rank_offset = node_rank * 2;
  o.key_prefix = "ccrun/test/round/0/pmi/";
  return o;
}

// The io_context on a thread of its own while a test's clients run.
struct Loop {
  boost::asio::io_context io;
  std::thread thread;
  void start() {
    thread = std::thread([this] {
      auto guard = boost::asio::make_work_guard(io);
      io.run();
    });
  }
  void stop() {
    io.stop();
    if (thread.joinable()) thread.join();
  }
};

}  // namespace

TEST_CASE("pmi server: two nodes' ranks meet through the store", "[pmi]") {
  auto store = std::make_shared<store::HashStore>();
  auto open = [store](std::shared_ptr<store::StoreInterrupt>) { return store; };
  std::atomic<int> errors{0};
  Loop loop;
  std::vector<std::unique_ptr<PmiServer>> servers;
  std::vector<int> fds;
  for (int n = 0; n < 2; ++n) {
    servers.push_back(std::make_unique<PmiServer>(
        loop.io, node(n), open, [](int, int, const std::string&) {},
        [&](const std::string&) { ++errors; }));
    for (int lr = 0; lr < 2; ++lr) fds.push_back(servers.back()->channel(lr));
  }
  CHECK(servers[1]->variables(1) ==
        std::vector<std::pair<std::string, std::string>>{
            {"PMI_FD", "3"}, {"PMI_RANK", "3"}, {"PMI_SIZE", "4"}});
  loop.start();
  std::vector<std::string> seen(4);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 4; ++rank) {
    ranks.emplace_back([&, rank] {
      Client c{fds[size_t(rank)]};
      std::string out;
      out += c.ask("cmd=init pmi_version=1 pmi_subversion=1") + "|";
      out += c.ask("cmd=get kvsname=kvs_test key=PMI_process_mapping") + "|";
      out += c.ask("cmd=put kvsname=kvs_test key=bc-" + std::to_string(rank) +
                   " value=card" + std::to_string(rank)) + "|";
      out += c.ask("cmd=barrier_in") + "|";
      for (int peer = 0; peer < 4; ++peer) {
        out += c.ask("cmd=get kvsname=kvs_test key=bc-" + std::to_string(peer)) + "|";
      }
      out += c.ask("cmd=get kvsname=kvs_test key=nobody") + "|";
      out += c.ask("cmd=barrier_in") + "|";
      out += c.ask("cmd=finalize");
      seen[size_t(rank)] = out;
    });
  }
  for (auto& t : ranks) t.join();
  loop.stop();
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    CHECK(seen[size_t(rank)] ==
          "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0|"
          "cmd=get_result rc=0 msg=success value=(vector,(0,2,2))|"
          "cmd=put_result rc=0 msg=success|"
          "cmd=barrier_out rc=0|"
          "cmd=get_result rc=0 msg=success value=card0|"
          "cmd=get_result rc=0 msg=success value=card1|"
          "cmd=get_result rc=0 msg=success value=card2|"
          "cmd=get_result rc=0 msg=success value=card3|"
          "cmd=get_result rc=-1 msg=key_nobody_not_found|"
          "cmd=barrier_out rc=0|"
          "cmd=finalize_ack rc=0");
  }
  CHECK(store->get("ccrun/test/round/0/pmi/kvs/bc-2") == "card2");
  CHECK(errors == 0);
  servers.clear();  // after the loop stopped: no handler runs meanwhile
}

TEST_CASE("pmi server: bad lines close a connection, an abort is reported", "[pmi]") {
  auto store = std::make_shared<store::HashStore>();
  Loop loop;
  int aborted_rank = -1, aborted_code = 0;
  PmiServerOptions o = node(0);
  o.local_ranks = 3;
  auto server = std::make_unique<PmiServer>(
      loop.io, o, [store](std::shared_ptr<store::StoreInterrupt>) { return store; },
      [&](int lr, int code, const std::string&) { aborted_rank = lr, aborted_code = code; },
      [](const std::string&) {});
  Client garbage{server->channel(0)}, too_long{server->channel(1)}, aborts{server->channel(2)};
  loop.start();
  garbage.send("this is not pmi");
  CHECK(garbage.line().empty());  // closed
  too_long.send("cmd=put key=k value=" + std::string(kMaxLine + 10, 'v'));
  CHECK(too_long.line().empty());
  aborts.send("cmd=abort exitcode=9");
  CHECK(aborts.ask("cmd=get_appnum") == "cmd=appnum appnum=0 rc=0");  // the session lives on
  loop.stop();
  CHECK(aborted_rank == 2);
  CHECK(aborted_code == 9);
  server.reset();
}

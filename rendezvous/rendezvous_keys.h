//===- rendezvous_keys.h - Where rendezvous state lives in the store -*- C++ -*-//
//
// Every key of one job is under "ccrun/<run_id>/". Payloads are JSON.
//   current_round              decimal: the newest round agents should join
//   closed                     JSON {"reason"}: the job is over; joins fail
//   round/<R>/joined           counter: agents that joined round R (dynamic)
//   round/<R>/size             decimal: the participants of R once it closed
//   round/<R>/expected         decimal: nodes that will surely rejoin R
//   round/<R>/node/<slot>      JSON NodeInfo {addr, hostname, nproc, master_port,
//                              prev_rank}, by join slot (static: node rank)
//   round/<R>/hb/<rank>        counter: heartbeats of node <rank>
//   round/<R>/end              JSON {"kind", "node", "detail", "next_expected"}:
//                              why R ended; the first writer wins
//   round/<R>/failures         counter, and round/<R>/failure/<i> JSON reports
//   round/<R>/done/<rank>      "1": node <rank>'s workers all exited 0 (the
//                              exit barrier; one key per node, so a store
//                              that lost its state can be told again)
//   round/<R>/exited           counter: nodes that left the round
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace ccrun::rendezvous {

class RendezvousKeys {
 public:
  explicit RendezvousKeys(std::string run_id) : base_("ccrun/" + run_id + "/") {}
  std::string current_round() const { return base_ + "current_round"; }
  std::string closed() const { return base_ + "closed"; }
  std::string round(int r, const std::string& leaf) const {
    return base_ + "round/" + std::to_string(r) + "/" + leaf;
  }
  std::string node(int r, int rank) const { return round(r, "node/" + std::to_string(rank)); }
  std::string heartbeat(int r, int rank) const { return round(r, "hb/" + std::to_string(rank)); }
  std::string failure(int r, int i) const { return round(r, "failure/" + std::to_string(i)); }
  std::string done(int r, int rank) const { return round(r, "done/" + std::to_string(rank)); }

 private:
  std::string base_;
};

}  // namespace ccrun::rendezvous

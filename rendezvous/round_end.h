//===- round_end.h - A round's end, and the hot spares it admits -*- C++ -*-===//
//
// Every way a round ends goes through end_round(): the first end written to
// round/<R>/end wins (compare-and-set), and its writer alone does what
// follows from it. After an end the survivors rejoin from (a restart, a dead
// node), that writer sets how many nodes the next round waits for (its
// `expected`: the survivors, so the round closes as soon as they are back,
// not after last_call_timeout), and admits hot spares into it.
//
// Hot spares: an elastic job that has more agents than --nnodes' maximum
// runs the maximum; the others, arriving at a full round, wait on its spare
// list (round/<R>/spares) with no workers. When the round ends with room in
// the next (a node died, or left: excluded), the end's writer closes the
// list and admits the first spares that fit (round/<R>/admitted); the next
// round then waits for the survivors and them, so it keeps its size in one
// restart. A spare that is not admitted waits on the next round's list.
// Survivors never lose their place to a spare.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "ccrun/job_keys.h"
#include "ccrun/job_state.h"
#include "ccrun/store.h"

namespace ccrun::rendezvous {

// round/<R>/spares: JSON {closed, tokens}.
struct SpareList {
  bool closed = false;               // R ended: no more spares join this list
  std::vector<std::string> tokens;   // the waiting agents' tokens, oldest first

  [[nodiscard]] std::string to_json() const;
  [[nodiscard]] static SpareList from_json(const std::string& text);  // "": empty, open
};

// How many of `waiting` spares the next round admits after `survivors`
// rejoin a job of at most `max_nodes`.
[[nodiscard]] int spares_to_admit(int survivors, int waiting, int max_nodes);

// Ends round `r` with `end` unless it already ended; true when this call's
// end won. The winner of a restart's or a dead node's end with a known
// next_expected also admits spares and sets round r + 1's expected count.
bool end_round(store::Store& s, const JobKeys& keys, int r, const RoundEnd& end, int max_nodes);

// Adds `token` to round r's spare list; false when the list is closed (the
// round has ended: join the next one instead).
bool add_spare(store::Store& s, const JobKeys& keys, int r, const std::string& token);

}  // namespace ccrun::rendezvous

// A round's end and the hot spares it admits (see round_end.h). What only
// spares run is [[gnu::cold]]: out of the text pages every launch touches.
#include "round_end.h"

#include "ccrun/watch_lease.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace ccrun::rendezvous {
namespace {

using json = nlohmann::json;

bool rejoined_after(RoundEndKind kind) {
  return kind == RoundEndKind::kRestartRequested || kind == RoundEndKind::kNodeDead;
}

// Closes r's spare list (compare-and-set against spares joining it) and
// returns the tokens it held.
[[gnu::cold]] std::vector<std::string> close_spares(store::Store& s, const JobKeys& keys, int r) {
  SpareList list;
  (void)store::update_by_compare_set(s, keys.spares(r), [&](const std::string& before) {
    list = SpareList::from_json(before);
    list.closed = true;
    return std::optional<std::string>(list.to_json());
  });
  return list.tokens;
}

}  // namespace

[[gnu::cold]] std::string SpareList::to_json() const {
  return json{{"closed", closed}, {"tokens", tokens}}.dump();
}

[[gnu::cold]] SpareList SpareList::from_json(const std::string& text) {
  SpareList list;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return list;
  list.closed = j.value("closed", false);
  if (j.contains("tokens") && j["tokens"].is_array()) {
    for (const auto& t : j["tokens"]) {
      if (t.is_string()) list.tokens.push_back(t.get<std::string>());
    }
  }
  return list;
}

[[gnu::cold]] int spares_to_admit(int survivors, int waiting, int max_nodes) {
  return std::clamp(max_nodes - survivors, 0, std::max(waiting, 0));
}

bool end_round(store::Store& s, const JobKeys& keys, int r, const RoundEnd& end, int max_nodes) {
  // The job's last end says when the run ended, for a node that arrives for
  // its id later (ccrun/finished_run.h). Only there: other ends written twice
  // (a retry) must stay the same text.
  RoundEnd stamped = end;
  bool last = end.kind == RoundEndKind::kAllDone || end.kind == RoundEndKind::kClosed;
  if (last && stamped.time_ms == 0) stamped.time_ms = wall_clock_ms();
  std::string record = stamped.to_json();
  std::string written = s.compare_set(keys.end(r), "", record);
  // Whichever end won (this one or an earlier one whose writer may have
  // died before this step), every node's round watch is woken to read it.
  wake_round_watches(s, keys, r);
  if (written != record) return false;
  if (!rejoined_after(end.kind) || end.next_expected < 0) return true;
  std::vector<std::string> spares = close_spares(s, keys, r);
  int admit = spares_to_admit(end.next_expected, int(spares.size()), max_nodes);
  spares.resize(size_t(admit));
  // Before the admitted list: a spare reads it as its signal to join, and
  // the round must already wait for it then.
  s.compare_set(keys.expected(r + 1), "", std::to_string(end.next_expected + admit));
  s.set(keys.admitted(r), json(spares).dump());
  return true;
}

[[gnu::cold]] bool add_spare(store::Store& s, const JobKeys& keys, int r, const std::string& token) {
  auto written = store::update_by_compare_set(s, keys.spares(r), [&](const std::string& before) {
    SpareList list = SpareList::from_json(before);
    if (list.closed) return std::optional<std::string>();
    list.tokens.push_back(token);
    return std::optional<std::string>(list.to_json());
  });
  return written.has_value();
}

}  // namespace ccrun::rendezvous

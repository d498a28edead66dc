// The rendezvous protocol: static (node ranks given) and dynamic (c10d and
// etcd: agents join rounds) on top of any Store. Key layout: include/ccrun/job_keys.h.
//
// Joining round R, dynamic backend:
//   1. n = add(round/R/joined, 1); this agent's node rank is n - 1 (join
//      order: deterministic, and no agent needs another's identity).
//   2. The round closes (round/R/size is set) when max_nodes joined; or
//      when round/R/expected (the survivors of R - 1) joined; or, once
//      min_nodes joined, when last_call_timeout has passed: the min-th
//      joiner waits that long, then closes with whoever joined.
//   3. An agent whose rank is >= size came late: it counts itself waiting,
//      ends round R - its participants restart (kNodeWaiting) when R has
//      room - and joins R + 1.
//   4. Each node publishes its NodeInfo under its join slot as it joins
//      (a node that turns out late leaves it unread), with its
//      node rank of the previous round (-1 if none) and a free port of its
//      host. Everyone reads all NodeInfos; node ranks follow: nodes of the
//      previous round first, in their previous order, then newcomers in
//      join order. So a restart with unchanged membership keeps every
//      node's rank (as torchrun does), whatever order the agents rejoin in.
//      The port of the node that gets rank 0 becomes MASTER_PORT.
// Static backend: steps 1-3 are replaced by the given node rank; the round
// has exactly nnodes participants.
//
// Watching round R (one thread per agent): every keep_alive_interval the
// agent counts a beat into its heartbeat key and reads the others'; a counter
// that did not move for keep_alive_max_attempt intervals marks its node
// dead. Between beats the thread is parked in a store wait on round/R/end,
// so any end (a failure, a death, the exit barrier) reaches it at once.
// Each beat also checks that the store still holds this node's NodeInfo: a
// restarted ccrun-rendezvous starts empty, so the watcher publishes it and
// this node's exit-barrier mark again, and checks the barrier itself. A
// store that does not answer for the whole keep-alive window is lost
// (kStoreLost): the agent ends instead of waiting for it.
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <thread>

#include "ccrun/error.h"
#include "ccrun/host_name.h"
#include "ccrun/job_keys.h"
#include "ccrun/rendezvous.h"

namespace ccrun::rendezvous {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A port nobody listens on now, on this host (for MASTER_PORT).
int pick_free_port(const std::string& addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = INADDR_ANY;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    a.sin_addr.s_addr = INADDR_ANY;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

RoundEvent to_event(const RoundEnd& end) { return {end.kind, end.node, end.detail}; }

class Handler : public RendezvousHandler {
 public:
  Handler(RendezvousOptions o, StoreConnector connect)
      : o_(std::move(o)), connect_(std::move(connect)), keys_(o_.run_id) {
    dynamic_ = o_.backend != Backend::kStatic;  // c10d and etcd: the same rounds on another store
    store_ = connect_();
    std::random_device rd;
    token_ = host_name() + "/" + std::to_string(getpid()) + "/" + std::to_string(rd());
  }
  ~Handler() override { shutdown(); }

  RendezvousInfo next_rendezvous() override {
    stop_watcher();
    if (store_->check({keys_.closed()})) throw closed_error();
    int r = round_ + 1;  // after a round ends, everyone moves to the next
    if (round_ < 0) {    // first join: the round everybody is at
      r = 0;
      if (dynamic_ && store_->check({keys_.current_round()})) {
        r = static_cast<int>(store::parse_counter(keys_.current_round(), store_->get(keys_.current_round())));
      }
    }
    auto deadline = Clock::now() + o_.join_timeout;
    last_progress_ = -1;
    for (;;) {
      forming_round_ = r;
      std::optional<RendezvousInfo> info;
      try {
        info = dynamic_ ? join_dynamic(r, deadline) : join_static(r, deadline);
      } catch (const ConnectionError& e) {
        // The store went away mid-join (a restarting daemon): the client
        // reconnects on the next call, until join_timeout.
        if (Clock::now() >= deadline) throw;
        spdlog::warn("rendezvous '{}': {}; joining again", o_.run_id, e.what());
        continue;
      }
      if (info) {
        round_ = r;
        info_ = *info;
        done_ = false;
        // Static rounds too, so that `ccrun status` finds the round.
        if (!dynamic_) store_->set(keys_.current_round(), std::to_string(r));
        return *info;
      }
      ++r;  // came late: join the next round
    }
  }

  void watch(std::function<void(const RoundEvent&)> on_event) override {
    stop_watcher();
    stop_ = false;
    watcher_ = std::thread([this, on_event = std::move(on_event)] { watch_loop(on_event); });
  }

  void request_restart(const std::string& failure_json) override {
    int r = round_;
    int64_t i = store_->add(keys_.failures(r), 1);
    store_->set(keys_.failure(r, int(i - 1)), failure_json);
    end_round(r, {RoundEndKind::kRestartRequested, info_.node_rank, failure_json, info_.num_nodes});
  }

  void mark_done() override {
    done_ = true;
    store_->set(keys_.done(round_, info_.node_rank), "1");
    check_all_done(*store_, round_);
  }

  void set_closed(const ClosedRecord& record) override {
    store_->compare_set(keys_.closed(), "", record.to_json());
    if (round_ >= 0) end_round(round_, {RoundEndKind::kClosed, -1, record.reason});
  }

  std::vector<std::string> failures() override {
    int r = round_;
    int64_t n = store_->add(keys_.failures(r), 0);
    std::vector<std::string> ks;
    for (int i = 0; i < n; ++i) ks.push_back(keys_.failure(r, i));
    return ks.empty() ? std::vector<std::string>{} : store_->multi_get(ks);
  }

  // Counts this node out of the round and, on the node that hosts the
  // store, waits (at most `timeout`) until every node has: the store must
  // outlive every reader of the round's end.
  void leave(bool wait_for_all, milliseconds timeout) override {
    stop_watcher();
    if (round_ < 0) return;
    int64_t n = store_->add(keys_.exited(round_), 1);
    if (!wait_for_all || n >= info_.num_nodes) {
      if (n >= info_.num_nodes) store_->set(keys_.all_exited(round_), "1");
      return;
    }
    try {
      store_->wait({keys_.all_exited(round_)}, timeout);
    } catch (const Error& e) {
      spdlog::warn("rendezvous: not every node left round {} in time: {}", round_, e.what());
    }
  }

  void shutdown() override { stop_watcher(); }

  void set_attempt(int attempt) override { attempt_ = attempt; }

  void set_progress(const std::string& ranks_json) override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_ = ranks_json;
  }

  std::vector<std::string> node_statuses() override {
    int r = round_;
    std::vector<std::string> keys, out(size_t(std::max(info_.num_nodes, 0)));
    for (int i = 0; i < info_.num_nodes; ++i) keys.push_back(keys_.status(r, i));
    if (keys.empty()) return out;
    if (store_->check(keys)) return store_->multi_get(keys);
    for (int i = 0; i < info_.num_nodes; ++i) {  // some node has not beaten yet
      if (store_->check({keys[i]})) out[i] = store_->get(keys[i]);
    }
    return out;
  }

 private:
  RendezvousClosedError closed_error() {
    std::string reason = ClosedRecord::from_json(store_->get(keys_.closed())).reason;
    return RendezvousClosedError("rendezvous '" + o_.run_id + "' is closed: " + reason);
  }

  void end_round(int r, const RoundEnd& end) {
    store_->compare_set(keys_.end(r), "", end.to_json());
  }

  // Ends round r as a success once every node marked it done.
  void check_all_done(store::Store& s, int r) {
    std::vector<std::string> done;
    for (int i = 0; i < info_.num_nodes; ++i) done.push_back(keys_.done(r, i));
    if (s.check(done)) {
      s.compare_set(keys_.end(r), "",
                    RoundEnd{RoundEndKind::kAllDone, -1, "", info_.num_nodes}.to_json());
    }
  }

  // What a restarted store lost of this node in round r, told again.
  // For `ccrun status`: who this node is and when it last beat (wall clock:
  // the reader is another machine).
  void publish_status(store::Store& s, int r) {
    const NodeInfo& me = info_.nodes[info_.node_rank];
    int64_t now_ms = std::chrono::duration_cast<milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    json status{{"host", me.hostname}, {"addr", me.addr}, {"node_rank", info_.node_rank},
                {"first_rank", info_.rank_offset}, {"nproc", me.local_world_size},
                {"attempt", attempt_.load()}, {"beat_ms", now_ms}, {"pid", getpid()}};
    {
      std::lock_guard<std::mutex> lock(progress_mu_);
      json ranks = json::parse(progress_, nullptr, false);
      if (!progress_.empty() && !ranks.is_discarded()) status["ranks"] = std::move(ranks);
    }
    s.set(keys_.status(r, info_.node_rank), status.dump());
  }

  // (A set on a connection that broke unnoticed is lost without an error:
  // set has no reply. So the done mark is checked too, not only the node.)
  void republish_if_lost(store::Store& s, int r) {
    if (!s.check({keys_.node(r, slot_)})) {
      spdlog::warn("rendezvous '{}': the store lost round {} (was it restarted?); telling it "
                   "this node's state again", o_.run_id, r);
      s.set(keys_.node(r, slot_), published_);
    }
    if (!done_) return;
    if (!s.check({keys_.done(r, info_.node_rank)})) s.set(keys_.done(r, info_.node_rank), "1");
    check_all_done(s, r);
  }

  NodeInfo self_info() const {
    NodeInfo n;
    n.addr = o_.local_addr.empty() ? "127.0.0.1" : o_.local_addr;
    n.hostname = host_name();
    n.local_world_size = o_.local_world_size;
    return n;
  }

  // `also_key` (when not empty) := `also_value` in the same multi_set.
  void publish(int r, int slot, int master_port, const std::string& also_key = "",
               const std::string& also_value = "") {
    NodeInfo n = self_info();
    published_ = json{{"addr", n.addr},
                      {"hostname", n.hostname},
                      {"nproc", n.local_world_size},
                      {"master_port", master_port},
                      {"prev_rank", round_ >= 0 ? info_.node_rank : -1}}
                     .dump();
    slot_ = slot;
    if (!also_key.empty()) {
      store_->multi_set({also_key, keys_.node(r, slot)}, {also_value, published_});
    } else {
      store_->set(keys_.node(r, slot), published_);
    }
  }

  // Reads every participant's NodeInfo and derives this node's place.
  // `waited`: no wait first (the caller has waited for them, or reads them
  // at once and takes the store's TimeoutError itself).
  RendezvousInfo assemble(int r, int rank, int size, milliseconds timeout, bool waited = false) {
    std::vector<std::string> ks;
    for (int i = 0; i < size; ++i) ks.push_back(keys_.node(r, i));
    try {
      if (!waited) store_->wait(ks, timeout);
    } catch (const TimeoutError&) {
      int came = 0;
      for (const auto& k : ks) came += store_->check({k}) ? 1 : 0;
      throw TimeoutError("rendezvous '" + o_.run_id + "': timed out after " +
                         format_duration(o_.join_timeout) + ": " + std::to_string(came) +
                         " of " + std::to_string(size) +
                         " nodes joined; start the others (same --rdzv-id, --nnodes and "
                         "endpoint) or lower --nnodes");
    }
    auto values = store_->multi_get(ks);
    // Slots in node-rank order (step 4): previous ranks first, then slots.
    std::vector<json> nodes;
    std::vector<int> order;
    for (int i = 0; i < size; ++i) {
      nodes.push_back(json::parse(values[i]));
      order.push_back(i);
    }
    if (dynamic_) {
      auto key = [&](int slot) {
        int prev = nodes[slot].value("prev_rank", -1);
        return std::pair(prev < 0 ? INT32_MAX : prev, slot);
      };
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return key(a) < key(b); });
    }
    RendezvousInfo info;
    info.round = r;
    info.num_nodes = size;
    info.world_size = 0;
    for (int i = 0; i < size; ++i) {
      const json& j = nodes[order[i]];
      NodeInfo n{j.at("addr"), j.at("hostname"), j.at("nproc")};
      if (order[i] == rank) info.node_rank = i;
      info.world_size += n.local_world_size;
      if (i == 0) info.master_port = j.at("master_port");
      info.nodes.push_back(n);
    }
    for (int i = 0; i < info.node_rank; ++i) info.rank_offset += info.nodes[i].local_world_size;
    info.master_addr = info.nodes[0].addr;
    return info;
  }

  std::optional<RendezvousInfo> join_static(int r, Clock::time_point deadline) {
    publish(r, o_.node_rank, o_.master_port);
    std::vector<std::string> nodes;
    for (int i = 0; i < o_.max_nodes; ++i) nodes.push_back(keys_.node(r, i));
    // Re-publish between slices: a restarted store has lost what we set.
    try {
      while (!wait_joined(nodes, deadline,
                          [&] { return store_->check({keys_.node(r, o_.node_rank)}); })) {
        publish(r, o_.node_rank, o_.master_port);
      }
    } catch (const TimeoutError&) {
      // assemble() below reports how many nodes came.
    }
    auto info = assemble(r, o_.node_rank, o_.max_nodes, remaining(deadline));
    info.master_addr = o_.master_addr.empty() ? info.master_addr : o_.master_addr;
    info.master_port = o_.master_port;
    info.use_agent_store = true;
    return info;
  }

  // Waits for `keys` in slices of keep_alive_interval. Between slices it
  // checks that the store still knows this node joined (a restarted
  // standalone daemon has lost every key): false means "join again".
  bool wait_joined(const std::vector<std::string>& keys, Clock::time_point deadline,
                   const std::function<bool()>& still_joined) {
    for (;;) {
      auto slice = std::min(remaining(deadline), o_.keep_alive_interval);
      try {
        store_->wait(keys, slice);
        return true;
      } catch (const TimeoutError&) {
        if (Clock::now() >= deadline) throw;
        report_progress(deadline);
        if (!still_joined()) {
          spdlog::warn("rendezvous '{}': the store lost this node's join (was it "
                       "restarted?); joining again", o_.run_id);
          return false;
        }
      }
    }
  }

  // While forming: one line each time the number of nodes that joined the
  // round being formed changes ("2 of 3 nodes joined ...").
  void report_progress(Clock::time_point deadline) {
    int joined = 0;
    int r = forming_round_;
    if (dynamic_) {
      joined = static_cast<int>(store_->add(keys_.joined(r), 0));
    } else {
      for (int i = 0; i < o_.max_nodes; ++i) joined += store_->check({keys_.node(r, i)}) ? 1 : 0;
    }
    if (joined == last_progress_) return;
    last_progress_ = joined;
    std::string need = o_.min_nodes == o_.max_nodes
                           ? std::to_string(o_.max_nodes)
                           : std::to_string(o_.min_nodes) + " to " + std::to_string(o_.max_nodes);
    auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now());
    spdlog::info("rendezvous '{}': {} of {} nodes joined round {}; waiting for the others up to "
                 "{}s more (--rdzv-conf join_timeout)",
                 o_.run_id, joined, need, r, left.count());
  }

  std::optional<RendezvousInfo> join_dynamic(int r, Clock::time_point deadline) {
    for (;;) {
      if (auto info = try_join_dynamic(r, deadline)) return info;
      if (late_) {
        late_ = false;
        return std::nullopt;
      }
    }
  }

  // One attempt at joining round r; nullopt with late_ set when this node
  // came after the round closed, nullopt alone when the store lost the join.
  std::optional<RendezvousInfo> try_join_dynamic(int r, Clock::time_point deadline) {
    std::string size_key = keys_.size(r);
    std::string joined_key = keys_.joined(r);
    int rank = static_cast<int>(store_->add(joined_key, 1)) - 1;
    int joined = rank + 1;
    // Who holds this rank: after a store restart another node may take it,
    // and the counter alone could not tell. This node's NodeInfo goes with
    // it (nothing in it depends on the round's size): when the size comes,
    // the NodeInfos of the nodes that joined before it are there already,
    // and one read finds them instead of a wait woken by every node's set.
    // (A node that turns out late leaves an unread NodeInfo behind.)
    std::string member_key = keys_.member(r, rank);
    publish(r, rank, pick_free_port(self_info().addr), member_key, token_);
    auto still_joined = [&] {
      return store_->check({member_key}) && store_->get(member_key) == token_;
    };
    auto timed_out = [&]() -> TimeoutError {
      int64_t now = store_->add(joined_key, 0);
      return TimeoutError("rendezvous '" + o_.run_id + "': timed out after " +
                          format_duration(o_.join_timeout) + ": " + std::to_string(now) +
                          " of at least " + std::to_string(o_.min_nodes) +
                          " nodes joined; start the others or lower --nnodes");
    };
    int expected = 0;  // round 0 has none: only a round's end sets the next one's
    if (r > 0 && store_->check({keys_.expected(r)})) {
      expected = std::stoi(store_->get(keys_.expected(r)));
    }
    // The node that closes the round also makes it current (one write, not
    // one per node at the moment every node reads the round).
    auto close_round = [&](int64_t size) {
      store_->compare_set(size_key, "", std::to_string(size));
      store_->set(keys_.current_round(), std::to_string(r));
    };
    if (joined == o_.max_nodes || (expected >= o_.min_nodes && joined == expected)) {
      close_round(joined);
    } else if (joined == o_.min_nodes) {
      // The last call: wait for more nodes, then close with whoever came.
      auto last_call = std::min(Clock::now() + o_.last_call_timeout, deadline);
      try {
        if (!wait_joined({size_key}, last_call, still_joined)) return std::nullopt;
      } catch (const TimeoutError&) {
        int64_t now = store_->add(joined_key, 0);
        close_round(std::min<int64_t>(now, o_.max_nodes));
      }
    }
    try {
      if (!wait_joined({size_key}, deadline, still_joined)) return std::nullopt;
    } catch (const TimeoutError&) {
      throw timed_out();
    }
    int size = std::stoi(store_->get(size_key));
    if (rank >= size) {
      // Late: make room in the next round, and tell R's participants.
      if (size < o_.max_nodes) {
        end_round(r, {RoundEndKind::kNodeWaiting, -1, "a new node waits to join", size + 1});
      }
      store_->compare_set(keys_.expected(r + 1), "", std::to_string(size + 1));
      late_ = true;
      return std::nullopt;
    }
    // The NodeInfos came with the joins: read them at once (no check first:
    // one request fewer per node at the moment every node reads the round).
    // A node that joined but has not published yet makes that read wait
    // (the store's timeout); then wait for them until the join deadline,
    // checking between slices that this node's join still holds.
    try {
      auto info = assemble(r, rank, size, remaining(deadline), true);
      info.use_agent_store = false;
      return info;
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw timed_out();
    }
    std::vector<std::string> nodes;
    for (int i = 0; i < size; ++i) nodes.push_back(keys_.node(r, i));
    try {
      if (!wait_joined(nodes, deadline, still_joined)) return std::nullopt;
    } catch (const TimeoutError&) {
      throw timed_out();
    }
    auto info = assemble(r, rank, size, remaining(deadline), true);
    info.use_agent_store = false;
    return info;
  }

  milliseconds remaining(Clock::time_point deadline) const {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    return std::max(left, milliseconds(1));
  }

  void watch_loop(const std::function<void(const RoundEvent&)>& on_event) {
    int r = round_;
    int n = info_.num_nodes;
    std::shared_ptr<store::Store> conn;
    auto window = o_.keep_alive_interval * o_.keep_alive_max_attempt;
    auto lost_since = Clock::now();
    while (!conn) {
      try {
        conn = connect_();
      } catch (const InterruptedError&) {
        return;
      } catch (const ConnectionError& e) {
        if (Clock::now() - lost_since >= window) {
          if (!stop_) on_event({RoundEvent::Kind::kStoreLost, -1, e.what()});
          return;
        }
      } catch (const Error& e) {
        if (!stop_) on_event({RoundEvent::Kind::kStoreLost, -1, e.what()});
        return;
      }
      if (stop_) return;
    }
    std::vector<std::string> beats;
    for (int i = 0; i < n; ++i) beats.push_back(keys_.heartbeat(r, i));
    // The others' counters are not read on the first beat: every node has
    // just joined, and n nodes reading n counters would load the store while
    // the last joiners still read the round. Taking them as 1 (each node's
    // first beat), and on the second beat a counter still at 0 as one stall
    // more, finds a silent node after the same keep_alive_max_attempt
    // intervals as reading them at once would.
    std::vector<int64_t> last(n, 1);
    std::vector<int> stalls(n, 0);
    int beat = 0;            // completed beats of this node
    int64_t beats_sent = 0;  // its heartbeat value (each try counts)
    auto store_lost_since = Clock::time_point{};
    while (!stop_) {
      try {
        // Only this node writes its counter: a set (on etcd a plain put, no
        // counter journal to read back), read as a counter by the others.
        conn->set(beats[info_.node_rank], std::to_string(++beats_sent));
        publish_status(*conn, r);
        republish_if_lost(*conn, r);
        std::vector<int64_t> values;
        if (beat > 0) values = read_counters(*conn, beats);
        for (int i = 0; i < n && beat > 0; ++i) {
          if (i == info_.node_rank) continue;
          int64_t v = values[i];
          stalls[i] = (v == last[i] || (beat == 1 && v == 0)) ? stalls[i] + 1 : 0;
          last[i] = v;
          if (stalls[i] >= o_.keep_alive_max_attempt) {
            RoundEnd dead{RoundEndKind::kNodeDead, i,
                          "node " + std::to_string(i) + " (" + info_.nodes[i].addr +
                              ") sent no heartbeat for " + format_duration(window),
                          n - 1};
            conn->compare_set(keys_.end(r), "", dead.to_json());
          }
        }
        store_lost_since = {};
        ++beat;
        try {
          conn->wait({keys_.end(r)}, o_.keep_alive_interval);
        } catch (const TimeoutError&) {
          continue;
        }
        RoundEvent e = to_event(RoundEnd::from_json(conn->get(keys_.end(r))));
        if (e.kind == RoundEvent::Kind::kNodeDead) {
          // The survivors of this round are the next round's expected nodes.
          store_->compare_set(keys_.expected(r + 1), "", std::to_string(n - 1));
        }
        if (!stop_) on_event(e);
        return;
      } catch (const InterruptedError&) {
        return;  // the agent is stopping
      } catch (const Error& e) {
        // A store that refuses the connection or does not answer in time
        // (stopped, hung): lost once that lasts the keep-alive window.
        if (!dynamic_cast<const ConnectionError*>(&e) && !dynamic_cast<const TimeoutError*>(&e)) {
          if (!stop_) on_event({RoundEvent::Kind::kClosed, -1, e.what()});
          return;
        }
        if (store_lost_since == Clock::time_point{}) store_lost_since = Clock::now();
        if (Clock::now() - store_lost_since >= window) {
          if (!stop_) on_event({RoundEvent::Kind::kStoreLost, -1, e.what()});
          return;
        }
        std::unique_lock lock(stop_mu_);
        stop_cv_.wait_for(lock, o_.keep_alive_interval, [this] { return stop_.load(); });
      }
    }
  }

  // The values of counters `keys`: one multi_get when all exist (one
  // request), else add(key, 0) each (creates the missing ones at 0).
  static std::vector<int64_t> read_counters(store::Store& s, const std::vector<std::string>& keys) {
    std::vector<int64_t> values;
    if (s.check(keys)) {
      auto text = s.multi_get(keys);
      for (size_t i = 0; i < keys.size(); ++i) values.push_back(store::parse_counter(keys[i], text[i]));
    } else {
      for (const auto& k : keys) values.push_back(s.add(k, 0));
    }
    return values;
  }

  void stop_watcher() {
    {
      std::lock_guard lock(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    if (watcher_.joinable()) {
      if (watcher_.get_id() == std::this_thread::get_id()) {
        watcher_.detach();
      } else {
        watcher_.join();
      }
    }
  }

  RendezvousOptions o_;
  StoreConnector connect_;
  JobKeys keys_;
  bool dynamic_ = false;
  std::shared_ptr<store::Store> store_;
  int round_ = -1;
  bool late_ = false;
  std::atomic<bool> done_{false};  // mark_done() ran in this round
  std::string published_;          // this node's NodeInfo JSON in this round
  int slot_ = 0;                   // where it is published (join slot)
  std::atomic<int> attempt_{0};    // the agent's restart count, for status
  std::mutex progress_mu_;
  std::string progress_;           // the ranks' progress, JSON array (guarded by progress_mu_)
  int forming_round_ = 0;          // the round next_rendezvous() is joining
  int last_progress_ = -1;         // nodes joined, as last reported
  std::string token_;  // identifies this agent's joins  // the last join attempt came after its round closed
  RendezvousInfo info_;
  std::thread watcher_;
  std::atomic<bool> stop_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
};

}  // namespace

std::unique_ptr<RendezvousHandler> create_rendezvous_handler(
    const RendezvousOptions& options, StoreConnector connect) {
  return std::make_unique<Handler>(options, std::move(connect));
}

}  // namespace ccrun::rendezvous

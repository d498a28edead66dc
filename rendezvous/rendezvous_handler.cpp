// The rendezvous protocol: static (node ranks given) and dynamic ("c10d",
// "etcd": agents join rounds) on top of any Store. Key layout:
// include/ccrun/job_keys.h; the cost of each step is in docs/rendezvous.md.
//
// Joining round R, dynamic backend:
//   1. n = add(round/R/joined, 1); this agent's join slot is n - 1 (join
//      order: deterministic, and no agent needs another's identity). With
//      it, in one multi_set, it publishes its NodeInfo under the slot and
//      its token under round/R/member/<slot> (who holds the slot, should a
//      restarted store hand it out again).
//   2. The round closes (round/R/size is set) when max_nodes joined; or
//      when round/R/expected (the survivors of R - 1) joined; or, once
//      min_nodes joined, when last_call_timeout has passed: the min-th
//      joiner waits that long, then closes with whoever joined.
//   3. An agent whose slot is >= size came late: it ends round R - its
//      participants restart (kNodeWaiting) when R has room - and joins R + 1.
//      When R is full, it waits as a hot spare on R's list instead, until a
//      round's end admits it (round_end.h), and then joins the round after.
//   4. The agent of slot 0 plans the round: it reads the size NodeInfos once
//      and writes round/R/plan and one round/R/place/<slot> per node
//      (round_plan.h: node ranks keep the previous round's order, so a
//      restart with unchanged membership keeps every node's rank). Every
//      other agent reads only the plan and its own place. Should the plan
//      not come within the keep-alive window (slot 0's agent died), any
//      agent plans: the plan is a pure function of the NodeInfos.
// Static backend: step 1 uses the given node rank as the slot (and counts
// the node into round/R/joined for progress lines), steps 2-3 are replaced
// by the round having exactly nnodes participants, and step 4 keeps the
// node ranks as given.
//
// Watching round R: round_watch.h (one counter read per node per interval).
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <mutex>
#include <random>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <thread>

#include "ccrun/error.h"
#include "ccrun/finished_run.h"
#include "ccrun/host_name.h"
#include "ccrun/job_keys.h"
#include "ccrun/rendezvous.h"
#include "round_end.h"
#include "round_plan.h"
#include "round_watch.h"

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
    watch_.reset();
    refuse_a_finished_run();
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
        if (resume_round_ >= 0) {  // a spare admitted: its wait was no join
          r = std::exchange(resume_round_, -1);
          deadline = Clock::now() + o_.join_timeout;
          continue;
        }
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
    watch_.reset();
    RoundWatchOptions w{o_.run_id,        round_,      info_.node_rank,
                        info_.num_nodes,  o_.max_nodes, place_.watch,
                        place_.watch_addr, o_.keep_alive_interval, o_.keep_alive_max_attempt};
    RoundWatchHooks hooks{[this] { return status_record(); }, [this] { return done_.load(); },
                          std::move(on_event)};
    watch_ = std::make_unique<RoundWatch>(std::move(w), connect_, std::move(hooks));
  }

  bool request_restart(const Failure& failure, bool leaves) override {
    int r = round_;
    std::string text = failure.to_json().dump();
    int64_t i = store_->add(keys_.failures(r), 1);
    store_->set(keys_.failure(r, int(i - 1)), text);
    return end_round(r, {RoundEndKind::kRestartRequested, info_.node_rank, text,
                         info_.num_nodes - (leaves ? 1 : 0)});
  }

  bool waiting_as_spare() const override { return spare_.load(); }

  [[gnu::cold]] int spares_waiting() override {
    if (round_ < 0 || !store_->check({keys_.spares(round_)})) return 0;
    SpareList list = SpareList::from_json(store_->get(keys_.spares(round_)));
    return list.closed ? 0 : int(list.tokens.size());
  }

  [[gnu::cold]] StandByEnd stand_by(int64_t until_ms, bool hosts_store,
                                     milliseconds leave_timeout) override {
    watch_.reset();
    refuse_a_finished_run();  // an excluded node that arrives after the run
    int r = current_round();
    for (;;) {
      if (store_->check({keys_.closed()})) return StandByEnd::kClosed;
      int64_t left = until_ms - wall_clock_ms();
      if (left <= 0) return StandByEnd::kTimeUp;
      try {
        store_->wait({keys_.end(r)}, std::min(milliseconds(left), o_.keep_alive_interval));
      } catch (const TimeoutError&) {
        r = std::max(r, current_round());  // the job may have moved on meanwhile
        continue;
      }
      RoundEnd end = RoundEnd::from_json(store_->get(keys_.end(r)));
      bool over = end.kind == RoundEndKind::kClosed || end.kind == RoundEndKind::kAllDone;
      if (!over) {
        ++r;
        continue;
      }
      // The nodes of the last round read its end from the store this node serves.
      if (hosts_store) wait_all_left(r, leave_timeout);
      return end.kind == RoundEndKind::kAllDone ? StandByEnd::kFinished : StandByEnd::kClosed;
    }
  }

  // The last node to mark done ends the round (one counter: O(1) per node).
  // Its done key stays for node 0's watch, which checks them all should a
  // restarted store have lost the counter (round_watch.h).
  void mark_done() override {
    done_ = true;
    store_->set(keys_.done(round_, info_.node_rank), "1");
    if (store_->add(keys_.finished(round_), 1) >= info_.num_nodes) {
      end_round(round_, {RoundEndKind::kAllDone, -1, "", info_.num_nodes});
    }
  }

  void set_closed(const ClosedRecord& record) override {
    ClosedRecord stamped = record;
    if (stamped.time_ms == 0) stamped.time_ms = wall_clock_ms();
    store_->compare_set(keys_.closed(), "", stamped.to_json());
    if (round_ >= 0) {
      end_round(round_, {RoundEndKind::kClosed, -1, record.reason, -1, record.stop_signal,
                         stamped.time_ms});
    }
  }

  std::vector<Failure> failures() override {
    int r = round_;
    int64_t n = store_->add(keys_.failures(r), 0);
    std::vector<std::string> ks;
    for (int i = 0; i < n; ++i) ks.push_back(keys_.failure(r, i));
    std::vector<Failure> out;
    if (ks.empty()) return out;
    for (const auto& text : store_->multi_get(ks)) {
      out.push_back(Failure::from_json(json::parse(text, nullptr, false)));
    }
    return out;
  }

  // Counts this node out of the round and, on the node that hosts the
  // store, waits (at most `timeout`) until every node has: the store must
  // outlive every reader of the round's end.
  void leave(bool wait_for_all, milliseconds timeout) override {
    watch_.reset();
    if (round_ < 0) return;
    int64_t n = store_->add(keys_.exited(round_), 1);
    if (!wait_for_all || n >= info_.num_nodes) {
      if (n >= info_.num_nodes) store_->set(keys_.all_exited(round_), "1");
      return;
    }
    wait_all_left(round_, timeout);
  }

  void shutdown() override { watch_.reset(); }

  void set_attempt(int attempt) override { attempt_ = attempt; }

  void set_progress(std::vector<RankView> ranks) override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_ = std::move(ranks);
    sampled_ms_ = wall_clock_ms();
  }

  void publish_status() override {
    if (round_ < 0) return;
    store_->set(keys_.status(round_, info_.node_rank), status_record());
  }

  std::vector<std::optional<NodeStatus>> node_statuses() override {
    int r = round_;
    std::vector<std::string> keys;
    for (int i = 0; i < info_.num_nodes; ++i) keys.push_back(keys_.status(r, i));
    std::vector<std::string> texts = values_present(keys);  // "": a node that has not beaten yet
    std::vector<std::optional<NodeStatus>> out(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      if (!texts[i].empty()) out[i] = NodeStatus::from_json(json::parse(texts[i], nullptr, false));
    }
    return out;
  }

  void publish_hang_evidence(const std::string& mine) override {
    store_->set(keys_.hang_evidence(round_, info_.node_rank), mine);
  }

  std::vector<std::string> hang_evidence(milliseconds wait) override {
    auto keys = hang_evidence_keys();
    if (wait.count() > 0) await_all(keys, wait);
    return values_present(keys);  // those that have come
  }

  bool await_hang_evidence(milliseconds wait) override { return await_all(hang_evidence_keys(), wait); }

 private:
  std::vector<std::string> hang_evidence_keys() const {
    int r = round_;
    std::vector<std::string> keys;
    for (int i = 0; i < info_.num_nodes; ++i) keys.push_back(keys_.hang_evidence(r, i));
    return keys;
  }

  // Waits at most `wait` for every key to be set; true when all are. On a
  // connection of its own: a client serves one call at a time, and a wait
  // of seconds on store_ would hold up this node's other calls meanwhile
  // (node 0's restart request, which the other nodes wait for).
  bool await_all(const std::vector<std::string>& keys, milliseconds wait) {
    if (wait.count() <= 0) return store_->check(keys);
    std::shared_ptr<store::Store> waits;
    {
      std::lock_guard lock(waits_mu_);
      if (!waits_) waits_ = connect_();
      waits = waits_;
    }
    try {
      waits->wait(keys, wait);
      return true;
    } catch (const TimeoutError&) {
      return false;
    }
  }

  // The value of each key, "" for a key not set: one multi_get when all are.
  std::vector<std::string> values_present(const std::vector<std::string>& keys) {
    if (!keys.empty() && store_->check(keys)) return store_->multi_get(keys);
    std::vector<std::string> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (store_->check({keys[i]})) out[i] = store_->get(keys[i]);
    }
    return out;
  }

  // Once, when this node arrives (its first join, or its first stand-by):
  // the id's run may have ended already (a store that outlives its jobs
  // keeps their keys a while). That end is not this node's: refuse the id,
  // saying how and when that run ended.
  void refuse_a_finished_run() {
    if (arrived_) return;
    std::optional<ClosedRecord> closed;
    if (store_->check({keys_.closed()})) closed = ClosedRecord::from_json(store_->get(keys_.closed()));
    std::optional<RoundEnd> end;
    if (!closed && store_->check({keys_.current_round()})) {
      int r = current_round();
      if (store_->check({keys_.end(r)})) end = RoundEnd::from_json(store_->get(keys_.end(r)));
    }
    arrived_ = true;  // read: a store call that broke above tries again next time
    if (auto run = finished_run(closed, end)) {
      throw JobAlreadyRanError(
          already_ran_message(o_.run_id, *run, wall_clock_ms(), o_.forget_hint));
    }
  }

  RendezvousClosedError closed_error() {
    std::string reason = ClosedRecord::from_json(store_->get(keys_.closed())).reason;
    return RendezvousClosedError("rendezvous '" + o_.run_id + "' is closed: " + reason);
  }

  bool end_round(int r, const RoundEnd& end) {
    return rendezvous::end_round(*store_, keys_, r, end, o_.max_nodes);
  }

  void wait_all_left(int r, milliseconds timeout) {
    try {
      store_->wait({keys_.all_exited(r)}, timeout);
    } catch (const Error& e) {
      spdlog::warn("rendezvous: not every node left round {} in time: {}", r, e.what());
    }
  }

  // The round the job is at (0 before any round closed).
  int current_round() {
    if (!store_->check({keys_.current_round()})) return 0;
    return int(store::parse_counter(keys_.current_round(), store_->get(keys_.current_round())));
  }

  // For `ccrun status`: who this node is and when it last beat (wall clock:
  // the reader is another machine), with its ranks' progress.
  std::string status_record() {
    NodeStatus status;
    status.host = info_.self.hostname;
    status.addr = info_.self.addr;
    status.node_rank = info_.node_rank;
    status.first_rank = info_.rank_offset;
    status.nproc = info_.self.local_world_size;
    status.attempt = attempt_.load();
    status.beat_ms = wall_clock_ms();
    status.pid = getpid();
    std::lock_guard<std::mutex> lock(progress_mu_);
    status.ranks = progress_;
    status.sampled_ms = sampled_ms_;
    return status.to_json().dump();
  }

  JoinedNode self_node(int master_port, bool agent_store = false) const {
    JoinedNode n;
    n.addr = o_.local_addr.empty() ? "127.0.0.1" : o_.local_addr;
    n.hostname = host_name();
    n.nproc = o_.local_world_size;
    n.master_port = master_port;
    n.prev_rank = round_ >= 0 ? info_.node_rank : -1;
    n.role = o_.role;
    n.agent_store = agent_store;
    return n;
  }

  // `also_key` (when not empty) := `also_value` in the same multi_set.
  void publish(int r, int slot, int master_port, const std::string& also_key = "",
               const std::string& also_value = "", bool agent_store = false) {
    std::string published = self_node(master_port, agent_store).to_json();
    if (!also_key.empty()) {
      store_->multi_set({also_key, keys_.node(r, slot)}, {also_value, published});
    } else {
      store_->set(keys_.node(r, slot), published);
    }
  }

  std::optional<RendezvousInfo> join_static(int r, Clock::time_point deadline) {
    publish(r, o_.node_rank, o_.master_port);
    store_->add(keys_.joined(r), 1);  // for the progress lines and `ccrun status`
    auto still_joined = [&] {
      if (store_->check({keys_.node(r, o_.node_rank)})) return true;
      publish(r, o_.node_rank, o_.master_port);  // a restarted store lost it
      return true;
    };
    auto timed_out = [&] { return static_timeout(r); };
    auto info = settle(r, o_.node_rank, o_.max_nodes, deadline, still_joined, timed_out);
    if (!info) return std::nullopt;
    info->master_addr = o_.master_addr.empty() ? info->master_addr : o_.master_addr;
    info->master_port = o_.master_port;
    info->use_agent_store = true;
    return info;
  }

  TimeoutError static_timeout(int r) {
    int came = 0;
    for (int i = 0; i < o_.max_nodes; ++i) came += store_->check({keys_.node(r, i)}) ? 1 : 0;
    return TimeoutError("rendezvous '" + o_.run_id + "': timed out after " +
                        format_duration(o_.join_timeout) + ": " + std::to_string(came) + " of " +
                        std::to_string(o_.max_nodes) +
                        " nodes joined; start the others (same --rdzv-id, --nnodes and "
                        "endpoint) or lower --nnodes");
  }

  // Step 4: the round's participants are known (`size` slots). Slot 0 plans
  // at once; the others read their place and the plan, and plan themselves
  // if none came within the keep-alive window. nullopt: the store lost this
  // node's join (join again).
  std::optional<RendezvousInfo> settle(int r, int slot, int size, Clock::time_point deadline,
                                       const std::function<bool()>& still_joined,
                                       const std::function<TimeoutError()>& timed_out) {
    std::vector<std::string> mine{keys_.plan(r), keys_.place(r, slot)};
    auto grace = Clock::now() + o_.keep_alive_interval * o_.keep_alive_max_attempt;
    bool planned = false;
    for (;;) {
      if (!planned && (slot == 0 || Clock::now() >= grace)) {
        if (!plan(r, size, deadline, still_joined, timed_out)) return std::nullopt;
        planned = true;
      }
      try {
        if (!wait_joined(mine, planned ? deadline : std::min(grace, deadline), still_joined)) {
          return std::nullopt;
        }
        break;
      } catch (const TimeoutError&) {
        if (Clock::now() >= deadline) throw timed_out();
      }
    }
    auto values = store_->multi_get(mine);
    return info_from(r, RoundShape::from_json(values[0]), Place::from_json(values[1]));
  }

  // Reads the participants' NodeInfos and writes the plan (round_plan.h).
  bool plan(int r, int size, Clock::time_point deadline,
            const std::function<bool()>& still_joined,
            const std::function<TimeoutError()>& timed_out) {
    std::vector<std::string> ks;
    for (int i = 0; i < size; ++i) ks.push_back(keys_.node(r, i));
    try {
      if (!wait_joined(ks, deadline, still_joined)) return false;
    } catch (const TimeoutError&) {
      throw timed_out();
    }
    std::vector<JoinedNode> nodes;
    for (const auto& text : store_->multi_get(ks)) nodes.push_back(JoinedNode::from_json(text));
    if (!dynamic_ && r > 0 && o_.clear_worker_keys) o_.clear_worker_keys();
    RoundPlan p = plan_round(nodes, dynamic_);
    std::vector<std::string> keys, values;
    for (int i = 0; i < size; ++i) {
      keys.push_back(keys_.place(r, i));
      values.push_back(p.places[size_t(i)].to_json());
    }
    keys.push_back(keys_.plan(r));  // last: a reader waits for it with its place
    values.push_back(p.shape.to_json());
    store_->multi_set(keys, values);
    return true;
  }

  RendezvousInfo info_from(int r, const RoundShape& shape, const Place& place) {
    RendezvousInfo info;
    info.round = r;
    info.node_rank = place.node_rank;
    info.num_nodes = shape.num_nodes;
    info.rank_offset = place.rank_offset;
    info.world_size = shape.world_size;
    info.role_rank_offset = place.role_rank_offset;
    info.role_world_size = place.role_world_size;
    JoinedNode me = self_node(0);
    info.self = NodeInfo{place.addr, me.hostname, me.nproc};
    info.master_addr = shape.master_addr;
    info.master_port = shape.master_port;
    info.use_agent_store = shape.agent_store;
    place_ = place;
    return info;
  }

  // Which setting bounds a wait, as the progress line names it.
  enum class Bound { kJoinTimeout, kLastCall };

  // Waits for `keys` in slices of keep_alive_interval. Between slices it
  // checks that the store still knows this node joined (a restarted
  // standalone daemon has lost every key): false means "join again"; and
  // that the job is not closed (RendezvousClosedError: a node that will not
  // come closed it). `bound` is the setting that set `deadline`.
  bool wait_joined(const std::vector<std::string>& keys, Clock::time_point deadline,
                   const std::function<bool()>& still_joined, Bound bound = Bound::kJoinTimeout) {
    for (;;) {
      auto slice = std::min(remaining(deadline), o_.keep_alive_interval);
      try {
        store_->wait(keys, slice);
        return true;
      } catch (const TimeoutError&) {
        // A node that will not come may have closed the job (its health
        // gate failed): the round never forms, so end the wait now.
        if (store_->check({keys_.closed()})) throw closed_error();
        if (Clock::now() >= deadline) throw;
        report_progress(deadline, bound);
        if (!still_joined()) {
          spdlog::warn("rendezvous '{}': the store lost this node's join (was it "
                       "restarted?); joining again", o_.run_id);
          return false;
        }
      }
    }
  }

  // While forming: one line each time the number of nodes that joined the
  // round being formed changes ("2 of 3 nodes joined ..."), naming the
  // setting that bounds the wait.
  void report_progress(Clock::time_point deadline, Bound bound) {
    int r = forming_round_;
    int joined = static_cast<int>(store_->add(keys_.joined(r), 0));
    if (joined == last_progress_) return;
    last_progress_ = joined;
    std::string need = o_.min_nodes == o_.max_nodes
                           ? std::to_string(o_.max_nodes)
                           : std::to_string(o_.min_nodes) + " to " + std::to_string(o_.max_nodes);
    auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now());
    if (bound == Bound::kLastCall) {
      spdlog::info("rendezvous '{}': {} of {} nodes joined round {}; waiting {}s more for others "
                   "(--rdzv-conf last_call_timeout), then starting with those that joined",
                   o_.run_id, joined, need, r, left.count());
      return;
    }
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
    int slot = static_cast<int>(store_->add(keys_.joined(r), 1)) - 1;
    // Who holds this slot: after a store restart another node may take it,
    // and the counter alone could not tell. This node's NodeInfo goes with
    // it (nothing in it depends on the round's size), so the planner finds
    // it there when the size comes. (A late node leaves it unread.)
    std::string member_key = keys_.member(r, slot);
    int worker_store = o_.worker_store_port ? o_.worker_store_port() : 0;
    publish(r, slot, worker_store ? worker_store : pick_free_port(self_node(0).addr), member_key,
            token_, worker_store != 0);
    auto still_joined = [&] {
      return store_->check({member_key}) && store_->get(member_key) == token_;
    };
    auto timed_out = [&]() -> TimeoutError {
      int64_t now = store_->add(keys_.joined(r), 0);
      return TimeoutError("rendezvous '" + o_.run_id + "': timed out after " +
                          format_duration(o_.join_timeout) + ": " + std::to_string(now) +
                          " of at least " + std::to_string(o_.min_nodes) +
                          " nodes joined; start the others or lower --nnodes");
    };
    std::optional<int> size = wait_for_size(r, slot + 1, deadline, still_joined, timed_out);
    if (!size) return std::nullopt;
    if (slot >= *size) {
      late_ = true;
      if (*size >= o_.max_nodes) {  // a full round: wait as a hot spare
        resume_round_ = wait_as_spare(r);
        return std::nullopt;
      }
      // Late: make room in the next round, and tell R's participants.
      end_round(r, {RoundEndKind::kNodeWaiting, -1, "a new node waits to join", *size + 1});
      store_->compare_set(keys_.expected(r + 1), "", std::to_string(*size + 1));
      return std::nullopt;
    }
    return settle(r, slot, *size, deadline, still_joined, timed_out);
  }

  // Steps 2: closes the round when this joiner completes it, then waits for
  // its size. nullopt: the store lost this node's join.
  std::optional<int> wait_for_size(int r, int joined, Clock::time_point deadline,
                                   const std::function<bool()>& still_joined,
                                   const std::function<TimeoutError()>& timed_out) {
    std::string size_key = keys_.size(r);
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
      auto last_call = Clock::now() + o_.last_call_timeout;
      Bound bound = last_call < deadline ? Bound::kLastCall : Bound::kJoinTimeout;
      try {
        if (!wait_joined({size_key}, std::min(last_call, deadline), still_joined, bound)) {
          return std::nullopt;
        }
      } catch (const TimeoutError&) {
        int64_t now = store_->add(keys_.joined(r), 0);
        close_round(std::min<int64_t>(now, o_.max_nodes));
      }
    }
    try {
      if (!wait_joined({size_key}, deadline, still_joined)) return std::nullopt;
    } catch (const TimeoutError&) {
      throw timed_out();
    }
    return std::stoi(store_->get(size_key));
  }

  // A hot spare (round_end.h): waits on round r's spare list, and on the
  // next round's when r's end admits others, until an end admits this node;
  // returns the round to join then. Throws JobFinishedError or
  // RendezvousClosedError when the job ends first.
  [[gnu::cold]] int wait_as_spare(int r) {
    spare_ = true;  // until admitted: a stop meanwhile finds it set
    spdlog::info("rendezvous '{}': round {} is full ({} nodes, --nnodes' maximum); this node "
                 "waits as a hot spare and joins when a node leaves or dies",
                 o_.run_id, r, o_.max_nodes);
    for (;; ++r) {
      if (!add_spare(*store_, keys_, r, token_)) {  // r ended meanwhile
        spare_ = false;
        return r + 1;
      }
      for (;;) {  // no join_timeout: a spare may wait as long as the job runs
        try {
          store_->wait({keys_.end(r)}, o_.keep_alive_interval);
          break;
        } catch (const TimeoutError&) {
          if (store_->check({keys_.closed()})) throw closed_error();
          SpareList list = SpareList::from_json(store_->check({keys_.spares(r)})
                                                    ? store_->get(keys_.spares(r)) : "");
          bool listed = std::find(list.tokens.begin(), list.tokens.end(), token_) !=
                        list.tokens.end();
          if (!listed && !add_spare(*store_, keys_, r, token_)) break;  // a restarted store
        }
      }
      RoundEnd end = RoundEnd::from_json(store_->get(keys_.end(r)));
      if (end.kind == RoundEndKind::kAllDone) {
        throw JobFinishedError("rendezvous '" + o_.run_id +
                               "': the job succeeded while this node waited as a hot spare; "
                               "this node ran nothing");
      }
      if (end.kind == RoundEndKind::kClosed) throw closed_error();
      if (admitted(r)) {
        spdlog::info("rendezvous '{}': round {} ended ({}); this spare joins round {}", o_.run_id,
                     r, to_string(end.kind), r + 1);
        spare_ = false;
        return r + 1;
      }
    }
  }

  // Whether round r's end admitted this spare. The end's writer lists the
  // admitted right after the end; should it die in between, after the
  // keep-alive window the spare joins the next round as any late node does.
  [[gnu::cold]] bool admitted(int r) {
    try {
      store_->wait({keys_.admitted(r)}, o_.keep_alive_interval * o_.keep_alive_max_attempt);
    } catch (const TimeoutError&) {
      return true;
    }
    json list = json::parse(store_->get(keys_.admitted(r)), nullptr, false);
    if (!list.is_array()) return true;
    for (const auto& t : list) {
      if (t.is_string() && t.get<std::string>() == token_) return true;
    }
    return false;
  }

  milliseconds remaining(Clock::time_point deadline) const {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    return std::max(left, milliseconds(1));
  }

  RendezvousOptions o_;
  StoreConnector connect_;
  JobKeys keys_;
  bool dynamic_ = false;
  std::shared_ptr<store::Store> store_;
  std::mutex waits_mu_;
  std::shared_ptr<store::Store> waits_;  // await_all's connection, made at its first wait
  int round_ = -1;
  bool arrived_ = false;  // refuse_a_finished_run() ran
  bool late_ = false;  // the last join attempt came after its round closed
  int resume_round_ = -1;  // a spare was admitted: the round to join (else -1)
  std::atomic<bool> spare_{false};  // wait_as_spare() runs
  std::atomic<bool> done_{false};  // mark_done() ran in this round
  std::atomic<int> attempt_{0};    // the agent's restart count, for status
  std::mutex progress_mu_;
  std::vector<RankView> progress_;  // the ranks' progress (guarded by progress_mu_)
  int64_t sampled_ms_ = 0;          // when progress_ was sampled (guarded by progress_mu_)
  int forming_round_ = 0;          // the round next_rendezvous() is joining
  int last_progress_ = -1;         // nodes joined, as last reported
  std::string token_;              // identifies this agent's joins
  RendezvousInfo info_;
  Place place_;                    // this node's place in the current round
  std::unique_ptr<RoundWatch> watch_;
};

}  // namespace

std::unique_ptr<RendezvousHandler> create_rendezvous_handler(
    const RendezvousOptions& options, StoreConnector connect) {
  return std::make_unique<Handler>(options, std::move(connect));
}

}  // namespace ccrun::rendezvous

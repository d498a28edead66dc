// EtcdStore: the Store on etcd v3 (see include/ccrun/etcd_store.h). The
// HTTP and fail-over half is EtcdConnection (etcd_connection.cpp); this file
// maps each Store operation onto etcd requests.
#include "ccrun/endpoint.h"
#include "ccrun/etcd_store.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>

#include "etcd_connection.h"
#include "etcd_requests.h"
#include "store_util.h"

namespace ccrun::store {

using etcd::base64_decode;
using etcd::base64_encode;
using etcd::Clock;
using etcd::int_field;
using etcd::json;
using etcd::conflict_backoff;
using etcd::failure_state;
using etcd::guarded_txn;
using etcd::journal_prefix;
using etcd::journal_range_op;
using etcd::key_state;
using etcd::range_op;
using etcd::read_with_journal;
using etcd::KeyState;
using etcd::kMaxTxnOps;
using etcd::prefix_end;
using etcd::put_op;
using etcd::read_keys;
using etcd::txn_once;

namespace {

// Sequence-number keys live under "<prefix>\0ccrun-ops/": inside the prefix
// (so the same etcd permissions cover them), apart from every user key.
const std::string kOpsNamespace("\0ccrun-ops/", 11);
constexpr int kGrpcNotFound = 5;

std::string random_id() {
  std::random_device rd;
  uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(r));
  return buf;
}

}  // namespace

struct EtcdStore::Shared : etcd::ClientState {
  using ClientState::ClientState;
};

class EtcdStore::Connection : public etcd::EtcdConnection {
 public:
  Connection(std::shared_ptr<etcd::ClientState> s, int slot)
      : EtcdConnection(std::move(s)), slot(slot) {}
  const int slot;     // names this connection's sequence-number key
  uint64_t seq = 0;   // last sequence number used on it
};

// A connection lent to the calling thread, returned to the pool on scope exit.
class EtcdStore::Borrowed {
 public:
  Borrowed(EtcdStore& store, std::unique_ptr<Connection> c)
      : store_(store), c_(std::move(c)) {}
  Borrowed(Borrowed&&) = default;
  ~Borrowed() {
    if (!c_) return;
    std::lock_guard lock(store_.pool_mu_);
    store_.idle_.push_back(std::move(c_));
  }
  Connection& operator*() { return *c_; }
  Connection* operator->() { return c_.get(); }

 private:
  EtcdStore& store_;
  std::unique_ptr<Connection> c_;
};

EtcdStore::Borrowed EtcdStore::borrow() {
  std::unique_ptr<Connection> c;
  int slot = 0;
  {
    std::lock_guard lock(pool_mu_);
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    } else {
      slot = next_slot_++;
    }
  }
  if (!c) c = std::make_unique<Connection>(shared_, slot);
  return Borrowed(*this, std::move(c));
}

EtcdStore::EtcdStore(EtcdStoreOptions options)
    : Store(options.timeout), options_(std::move(options)), client_id_(random_id()) {
  if (options_.endpoints.empty()) {
    throw ConfigError("etcd store: no endpoint given; list the cluster's client URLs "
                      "as host:port[,host:port...]");
  }
  for (const auto& ep : options_.endpoints) {
    if (ep.host.empty() || ep.port == 0) {
      throw ConfigError("etcd store: endpoint \"" + format_host_port(ep.host, ep.port) +
                        "\" needs a host and a port (1-65535)");
    }
  }
  if (options_.prefix.empty()) {
    throw ConfigError("etcd store: the key prefix is empty; give one (e.g. \"ccrun/\") so the "
                      "store's keys stay apart from the cluster's other keys");
  }
  if (options_.prefix.back() != '/') options_.prefix += '/';
  if (options_.user.empty() != options_.password.empty()) {
    throw ConfigError("etcd store: give both etcd_user and etcd_password, or neither");
  }
  if (options_.cert_file.empty() != options_.key_file.empty()) {
    throw ConfigError("etcd store: give both etcd_cert and etcd_key (client certificate), "
                      "or neither");
  }
  if (!options_.tls && (!options_.ca_file.empty() || !options_.cert_file.empty())) {
    throw ConfigError("etcd store: TLS files given but TLS is off; set etcd_tls=1 (or use "
                      "the etcds:// scheme)");
  }
  shared_ = std::make_shared<Shared>(options_);
  (void)ping();  // reach a member now, as TcpStore connects now
}

EtcdStore::~EtcdStore() {
  if (!wrote_sequence_keys_) return;
  // Remove this client's sequence-number keys. Best effort and brief: at
  // exit the cluster may be gone, and a leftover key is a few bytes that
  // num_keys() does not count.
  options_.connect_timeout = std::min(options_.connect_timeout, std::chrono::milliseconds(2000));
  options_.request_timeout = std::min(options_.request_timeout, std::chrono::milliseconds(2000));
  try {
    std::string p = options_.prefix + kOpsNamespace + client_id_ + "/";
    borrow()->post("/v3/kv/deleterange",
                   {{"key", base64_encode(p)}, {"range_end", base64_encode(prefix_end(p))}}, true);
  } catch (const ccrun::Error&) {
    // See above: nothing to do about an unreachable cluster at exit.
  }
}

std::string EtcdStore::local_address() { return borrow()->local_address(); }

std::string EtcdStore::endpoints() const {
  std::string out;
  for (const auto& ep : options_.endpoints) {
    if (!out.empty()) out += ",";
    out += format_host_port(ep.host, ep.port);
  }
  return out;
}

std::string EtcdStore::sequence_key(int slot) const {
  return options_.prefix + kOpsNamespace + client_id_ + "/" + std::to_string(slot);
}

void EtcdStore::wait_keys(Connection& c, const std::vector<std::string>& keys,
                          Clock::time_point deadline, std::chrono::milliseconds timeout,
                          bool known_missing) {
  auto timed_out = [&] {
    return TimeoutError("etcd store " + c.member_name() + " (prefix \"" + options_.prefix +
                        "\"): timed out after " + format_duration(timeout) +
                        " waiting for key(s) " + quote_keys(keys));
  };
  bool read = false;  // the keys were read during this call
  // 1. Already there? (One read, skipped when the caller just read them.)
  if (!known_missing) {
    read = true;
    int64_t revision = 0;
    auto state = read_keys(c, options_.prefix, keys, false, revision);
    if (std::all_of(state.begin(), state.end(), [](const KeyState& s) { return s.exists; })) {
      return;
    }
  }
  // The watch covers the span of all the keys: a key present now may be
  // deleted before the watch starts.
  std::set<std::string> wanted;
  for (const auto& k : keys) wanted.insert(full(k));
  const json create{{"key", base64_encode(*wanted.begin())},
                    {"range_end", base64_encode(*wanted.rbegin() + std::string(1, '\0'))}};
  for (;;) {
    if (Clock::now() >= deadline) throw timed_out();
    // 2. Watch from now on; once etcd confirms the watch at revision W, read
    // the keys as they were at W (on another connection): every change
    // after W arrives as an event, so no set is missed. (A watch started
    // at an older revision would be served by etcd's 100 ms catch-up loop.)
    std::set<std::string> missing;
    bool cancelled = false;
    auto end = c.stream(
        "/v3/watch", {{"create_request", create}}, deadline, [&](const json& m) {
          const json& r = m.contains("result") ? m["result"] : m;
          if (r.value("canceled", false)) {
            cancelled = true;  // e.g. compacted: start again
            return true;
          }
          if (r.value("created", false)) {
            read = true;
            int64_t at = int_field(r["header"], "revision");
            auto now = read_keys(*borrow(), options_.prefix, keys, false, at);
            for (size_t i = 0; i < keys.size(); ++i) {
              if (!now[i].exists) missing.insert(full(keys[i]));
            }
          }
          for (const auto& ev : r.value("events", json::array())) {
            std::string key = base64_decode(ev["kv"].value("key", ""));
            if (!wanted.count(key)) continue;
            if (ev.value("type", "PUT") == "DELETE") {
              missing.insert(key);
            } else {
              missing.erase(key);
            }
          }
          return missing.empty();
        });
    if (end == etcd::StreamEnd::kTimedOut) {
      // Timed out before the keys were ever read (a short timeout, a slow
      // member): keys present all along are no timeout.
      if (!read) {
        int64_t revision = 0;
        auto state = read_keys(c, options_.prefix, keys, false, revision);
        if (std::all_of(state.begin(), state.end(), [](const KeyState& s) { return s.exists; })) {
          return;
        }
      }
      throw timed_out();
    }
    if (end == etcd::StreamEnd::kDone && !cancelled) return;
    // kBroken or cancelled: the member went away; watch again.
  }
}

void EtcdStore::set(const std::string& key, const std::string& value) {
  borrow()->post("/v3/kv/put",
                 {{"key", base64_encode(full(key))}, {"value", base64_encode(value)}}, true);
}

void EtcdStore::set(const std::string& key, const std::string& value, int64_t lease) {
  borrow()->post("/v3/kv/put",
                 {{"key", base64_encode(full(key))},
                  {"value", base64_encode(value)},
                  {"lease", std::to_string(lease)}},
                 true);
}

std::string EtcdStore::get(const std::string& key) {
  return std::move(multi_get({key})[0]);
}

std::vector<std::string> EtcdStore::multi_get(const std::vector<std::string>& keys) {
  auto t = timeout();
  auto deadline = Clock::now() + t;
  auto c = borrow();
  for (;;) {
    int64_t revision = 0;
    auto state = read_keys(*c, options_.prefix, keys, true, revision);
    bool all = true;
    for (const auto& s : state) all = all && s.exists;
    if (all) {
      std::vector<std::string> values;
      values.reserve(state.size());
      for (auto& s : state) values.push_back(std::move(s.value));
      return values;
    }
    wait_keys(*c, keys, deadline, t, true);  // then read again (a key may go meanwhile)
  }
}

// add: one transaction, never retried for contention (a counter journal,
// etcd_requests.h). append and compare_set: put_guarded, a read, then
// guarded_txn until it applies.

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  const std::string k = full(key);
  const std::string jp = journal_prefix(options_.prefix, key);
  auto c = borrow();
  if (delta == 0) {  // a read, unless the key is missing (then created at 0)
    int64_t revision = 0;
    KeyState s = read_with_journal(*c, k, jp, revision);
    if (s.exists && !s.not_counter) return parse_counter(key, s.value);
    if (s.exists) (void)parse_counter(key, s.value);  // throws when not a number
  }
  wrote_sequence_keys_ = true;
  const std::string marker = sequence_key(c->slot);
  const std::string seq = std::to_string(++c->seq);
  // The entry's name is unique: this client, connection and operation.
  const std::string entry = jp + client_id_ + "/" + std::to_string(c->slot) + "/" + seq;
  json present = json::array({put_op(entry, std::to_string(delta)), put_op(marker, seq),
                              range_op(k, false, 0), journal_range_op(jp, 0)});
  json missing = present;
  missing.insert(missing.begin(), put_op(k, "0"));
  json txn{{"compare", json::array({{{"key", base64_encode(k)},
                                     {"target", "CREATE"},
                                     {"result", "EQUAL"},
                                     {"create_revision", "0"}}})},
           {"success", std::move(missing)},
           {"failure", std::move(present)}};
  json reads;  // the key and its journal just after this add
  int64_t revision = 0;
  for (;;) {
    try {
      json r = c->post("/v3/kv/txn", txn, false);
      revision = int_field(r["header"], "revision");
      const json& rs = r["responses"];
      reads = json{{"responses", json::array({rs[rs.size() - 2], rs[rs.size() - 1]})}};
      break;
    } catch (const etcd::AmbiguousError&) {
      // Applied or not? The sequence number tells; if it was, read the
      // state as of its revision.
      KeyState m = key_state(c->post("/v3/kv/range", {{"key", base64_encode(marker)}}, true));
      if (m.value != seq) continue;
      revision = m.mod_revision;
      reads = c->post("/v3/kv/txn",
                      {{"success", json::array({range_op(k, false, revision),
                                                journal_range_op(jp, revision)})}},
                      true);
      break;
    }
  }
  int64_t at = 0;
  KeyState s = failure_state(reads, at);
  if (s.not_counter) {
    // Take this add back (best effort: a stale entry is ignored once the key
    // is put again), then report the value as every store does.
    try {
      c->post("/v3/kv/deleterange", {{"key", base64_encode(entry)}}, true);
    } catch (const ccrun::Error&) {
    }
    (void)add_or_throw(key, s.value, s.live_sum);  // throws: not a counter, or overflow
    throw Error("etcd store: add on key \"" + key + "\": its journal under \"" + options_.prefix +
                "\" holds an entry that is not an integer; delete the key and start it again");
  }
  if (s.live >= etcd::kJournalFold && s.live % etcd::kJournalFold == 0) {
    // Fold the journal into the key's value; a race lost leaves it as it is.
    json put = put_op(k, s.value);
    put["request_put"]["ignore_lease"] = true;
    try {
      c->post("/v3/kv/txn", guarded_txn(k, jp, s.mod_revision, revision, std::move(put)), true);
    } catch (const ccrun::Error&) {
    }
  }
  return parse_counter(key, s.value);
}

void EtcdStore::put_guarded(
    const std::string& key,
    const std::function<std::optional<std::string>(const std::string* current)>& next) {
  const std::string k = full(key);
  const std::string jp = journal_prefix(options_.prefix, key);
  auto c = borrow();
  int64_t revision = 0;
  KeyState s = read_with_journal(*c, k, jp, revision);
  for (;;) {
    std::optional<std::string> value = next(s.exists ? &s.value : nullptr);
    if (!value) return;
    wrote_sequence_keys_ = true;
    auto sent = Clock::now();
    json r = txn_once(*c, sequence_key(c->slot), c->seq,
                      guarded_txn(k, jp, s.mod_revision, revision, put_op(k, *value)));
    if (r.value("succeeded", false)) return;
    s = failure_state(r, revision);
    conflict_backoff(*c, Clock::now() - sent);
  }
}

void EtcdStore::append(const std::string& key, const std::string& value) {
  put_guarded(key, [&](const std::string* current) {
    return std::optional<std::string>((current ? *current : std::string()) + value);
  });
}

// The rule of every ccrun store (torch's, store_util.h): a matching value is
// replaced; a missing key is created only when `expected` is empty, and
// otherwise `expected` itself is returned; the value now stored is returned.
std::string EtcdStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  std::string reply;
  put_guarded(key, [&](const std::string* current) -> std::optional<std::string> {
    reply = compare_set_reply(current, expected, desired);
    if (!compare_set_writes(current, expected)) return std::nullopt;
    return desired;
  });
  return reply;
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  int64_t revision = 0;
  auto c = borrow();
  for (const auto& s : read_keys(*c, options_.prefix, keys, false, revision)) {
    if (!s.exists) return false;
  }
  return true;
}

// Straight to the watch: it reads the keys when etcd confirms it (callers
// wait mostly for keys that are missing; a read first would be one request
// more for them, and saves one only when all are there).
void EtcdStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto c = borrow();
  wait_keys(*c, keys, Clock::now() + timeout, timeout, true);
}

bool EtcdStore::delete_key(const std::string& key) {
  const std::string jp = journal_prefix(options_.prefix, key);
  json del_key{{"request_delete_range", {{"key", base64_encode(full(key))}}}};
  json del_journal{{"request_delete_range",
                    {{"key", base64_encode(jp)}, {"range_end", base64_encode(prefix_end(jp))}}}};
  json r = borrow()->post("/v3/kv/txn", {{"success", json::array({del_key, del_journal})}}, true);
  return int_field(r["responses"][0]["response_delete_range"], "deleted") > 0;
}

int64_t EtcdStore::num_keys() {
  const std::string& p = options_.prefix;
  const std::string ops = p + kOpsNamespace;
  json count_all{{"request_range",
                  {{"key", base64_encode(p)}, {"range_end", base64_encode(prefix_end(p))},
                   {"count_only", true}}}};
  json count_ops{{"request_range",
                  {{"key", base64_encode(ops)}, {"range_end", base64_encode(prefix_end(ops))},
                   {"count_only", true}}}};
  const std::string journals = p + std::string("\0ccrun-add/", 11);
  json count_journals{{"request_range",
                       {{"key", base64_encode(journals)},
                        {"range_end", base64_encode(prefix_end(journals))},
                        {"count_only", true}}}};
  json r = borrow()->post(
      "/v3/kv/txn", {{"success", json::array({count_all, count_ops, count_journals})}}, true);
  const auto& rs = r["responses"];
  return int_field(rs[0]["response_range"], "count") -
         int_field(rs[1]["response_range"], "count") -
         int_field(rs[2]["response_range"], "count");
}

void EtcdStore::multi_set(const std::vector<std::string>& keys,
                          const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw Error("etcd store: multi_set got " + std::to_string(keys.size()) + " keys and " +
                std::to_string(values.size()) + " values; give one value per key");
  }
  auto c = borrow();
  for (size_t i = 0; i < keys.size(); i += kMaxTxnOps) {
    json ops = json::array();
    for (size_t k = i; k < keys.size() && k < i + kMaxTxnOps; ++k) {
      ops.push_back(put_op(full(keys[k]), values[k]));
    }
    c->post("/v3/kv/txn", {{"success", ops}}, true);
  }
}

std::chrono::microseconds EtcdStore::ping() {
  auto c = borrow();
  auto start = Clock::now();
  c->post("/v3/kv/range", {{"key", base64_encode(options_.prefix)}, {"count_only", true}}, true);
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
}

int64_t EtcdStore::grant_lease(std::chrono::seconds ttl) {
  // Sent again after an ambiguous failure: a spare lease expires unused.
  json r = borrow()->post("/v3/lease/grant", {{"TTL", std::to_string(ttl.count())}}, true);
  if (r.contains("error") && !r["error"].get<std::string>().empty()) {
    throw Error("etcd store: lease grant of " + std::to_string(ttl.count()) +
                "s failed: " + r["error"].get<std::string>());
  }
  return int_field(r, "ID");
}

std::chrono::seconds EtcdStore::keep_alive(int64_t lease) {
  auto c = borrow();
  auto give_up = Clock::now() + options_.connect_timeout;
  for (;;) {
    std::optional<int64_t> ttl;
    auto end = c->stream("/v3/lease/keepalive", {{"ID", std::to_string(lease)}},
                         Clock::now() + options_.request_timeout, [&](const json& m) {
                           const json& r = m.contains("result") ? m["result"] : m;
                           ttl = int_field(r, "TTL");
                           return true;
                         });
    if (end == etcd::StreamEnd::kDone && ttl) {
      if (*ttl <= 0) {
        throw Error("etcd store: lease " + std::to_string(lease) +
                    " has expired and its keys are gone; grant a new lease and set them again");
      }
      return std::chrono::seconds(*ttl);
    }
    if (Clock::now() >= give_up) {
      throw ConnectionError("etcd store: keep-alive of lease " + std::to_string(lease) +
                            " got no answer from " + endpoints() + "; check the etcd cluster");
    }
  }
}

void EtcdStore::revoke_lease(int64_t lease) {
  try {
    borrow()->post("/v3/lease/revoke", {{"ID", std::to_string(lease)}}, true);
  } catch (const etcd::GrpcError& e) {
    if (e.code != kGrpcNotFound) throw;  // not found: expired already, as documented
  }
}

}  // namespace ccrun::store

// Request builders and the read/transaction patterns of EtcdStore (see
// etcd_requests.h).
#include "etcd_requests.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>

#include "store_util.h"

namespace ccrun::store::etcd {

std::string prefix_end(std::string p) {
  while (!p.empty()) {
    if (static_cast<uint8_t>(p.back()) < 0xff) {
      p.back() = static_cast<char>(static_cast<uint8_t>(p.back()) + 1);
      return p;
    }
    p.pop_back();
  }
  return std::string(1, '\0');  // every key
}

json put_op(const std::string& key, const std::string& value) {
  return {{"request_put", {{"key", base64_encode(key)}, {"value", base64_encode(value)}}}};
}

json range_op(const std::string& key, bool count_only, int64_t revision) {
  json r{{"key", base64_encode(key)}};
  if (count_only) r["count_only"] = true;
  if (revision > 0) r["revision"] = std::to_string(revision);
  return {{"request_range", r}};
}

std::string journal_prefix(const std::string& prefix, const std::string& key) {
  return prefix + std::string("\0ccrun-add/", 11) + std::to_string(key.size()) + ":" + key + "/";
}

json journal_range_op(const std::string& jp, int64_t revision) {
  json r{{"key", base64_encode(jp)}, {"range_end", base64_encode(prefix_end(jp))}};
  if (revision > 0) r["revision"] = std::to_string(revision);
  return {{"request_range", r}};
}

void apply_journal(KeyState& s, const json& journal_range_reply) {
  auto it = journal_range_reply.find("kvs");
  if (it != journal_range_reply.end()) {
    for (const auto& kv : *it) {
      // Entries from before the key's last put (or of a deleted key) are
      // stale: the next fold removes them.
      if (!s.exists || int_field(kv, "create_revision") < s.mod_revision) continue;
      int64_t sum = 0;
      if (add_to_counter(base64_decode(kv.value("value", "")), s.live_sum, sum) !=
          CounterResult::kOk) {
        s.not_counter = true;
      }
      s.live_sum = sum;
      ++s.live;
    }
  }
  if (s.live == 0 || s.not_counter) return;
  int64_t total = 0;
  if (add_to_counter(s.value, s.live_sum, total) != CounterResult::kOk) {
    s.not_counter = true;
    return;
  }
  s.value = std::to_string(total);
}

KeyState key_state(const json& range_reply) {
  KeyState s;
  auto it = range_reply.find("kvs");
  if (it == range_reply.end() || it->empty()) return s;
  const json& kv = (*it)[0];
  s.exists = true;
  s.value = base64_decode(kv.value("value", ""));
  s.mod_revision = int_field(kv, "mod_revision");
  return s;
}

json txn_once(EtcdConnection& c, const std::string& marker, uint64_t& seq_counter,
              json txn) {
  const std::string seq = std::to_string(++seq_counter);
  txn["success"].push_back(put_op(marker, seq));
  for (;;) {
    try {
      return c.post("/v3/kv/txn", txn, false);
    } catch (const AmbiguousError&) {
      json r = c.post("/v3/kv/range", {{"key", base64_encode(marker)}}, true);
      if (key_state(r).value == seq) return json{{"succeeded", true}};
    }
  }
}

namespace {

// read_keys of many keys in a few ranges: the span from the least key to the
// greatest (the keys of one rendezvous step are neighbours: node/0..node/63),
// and for values the span of their journals per key length (journal names
// sort by length first). A span holding many other keys comes back
// truncated at its limit: nullopt, and the caller reads key by key.
std::optional<std::vector<KeyState>> read_spans(EtcdConnection& c, const std::string& prefix,
                                                const std::vector<std::string>& keys, bool values,
                                                int64_t& revision) {
  const std::string lo = prefix + *std::min_element(keys.begin(), keys.end());
  const std::string hi = prefix + *std::max_element(keys.begin(), keys.end());
  auto span = [&](const std::string& from, const std::string& to_end, size_t limit) {
    json r{{"key", base64_encode(from)},
           {"range_end", base64_encode(to_end)},
           {"limit", std::to_string(limit)}};
    if (!values) r["keys_only"] = true;
    if (revision > 0) r["revision"] = std::to_string(revision);
    return json{{"request_range", r}};
  };
  json ops = json::array({span(lo, hi + std::string(1, '\0'), 2 * keys.size() + 32)});
  std::map<size_t, std::pair<std::string, std::string>> by_length;  // least, greatest key
  if (values) {
    for (const auto& k : keys) {
      auto [it, fresh] = by_length.try_emplace(k.size(), k, k);
      if (!fresh) {
        it->second.first = std::min(it->second.first, k);
        it->second.second = std::max(it->second.second, k);
      }
    }
    if (by_length.size() + 1 > kMaxTxnOps) return std::nullopt;
    for (const auto& [len, range] : by_length) {
      ops.push_back(span(journal_prefix(prefix, range.first),
                         prefix_end(journal_prefix(prefix, range.second)),
                         kJournalFold * 2 * keys.size() + 64));
    }
  }
  json r = c.post("/v3/kv/txn", {{"success", ops}}, true);
  if (revision == 0) revision = int_field(r["header"], "revision");
  const json responses = r.value("responses", json::array());
  std::map<std::string, const json*> found;  // full key -> kv
  std::map<std::string, json> journals;      // journal prefix -> its entries
  for (size_t n = 0; n < responses.size(); ++n) {
    const json& range = responses[n]["response_range"];
    if (range.value("more", false)) return std::nullopt;
    if (!range.contains("kvs")) continue;
    for (const auto& kv : range["kvs"]) {  // `found` points into `responses`
      std::string key = base64_decode(kv.value("key", ""));
      if (n == 0) {
        found.emplace(std::move(key), &kv);
        continue;
      }
      // <prefix>\0ccrun-add/<length>:<key>/<entry>: the journal of <key>.
      size_t colon = key.find(':', prefix.size() + 11);
      if (colon == std::string::npos) continue;
      size_t len = std::strtoull(key.c_str() + prefix.size() + 11, nullptr, 10);
      if (colon + 1 + len >= key.size()) continue;
      journals[key.substr(0, colon + 2 + len)]["kvs"].push_back(kv);
    }
  }
  std::vector<KeyState> out;
  out.reserve(keys.size());
  for (const auto& k : keys) {
    KeyState st;
    auto it = found.find(prefix + k);
    if (it != found.end()) {
      st.exists = true;
      if (values) {
        st.value = base64_decode(it->second->value("value", ""));
        st.mod_revision = int_field(*it->second, "mod_revision");
        auto j = journals.find(journal_prefix(prefix, k));
        if (j != journals.end()) apply_journal(st, j->second);
      }
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace

std::vector<KeyState> read_keys(EtcdConnection& c, const std::string& prefix,
                                const std::vector<std::string>& keys, bool values,
                                int64_t& revision) {
  if (keys.size() >= 4) {
    if (auto out = read_spans(c, prefix, keys, values, revision)) return std::move(*out);
  }
  std::vector<KeyState> out;
  out.reserve(keys.size());
  // Values come with each key's counter journal (two ranges per key).
  const size_t per_txn = values ? kMaxTxnOps / 2 : kMaxTxnOps;
  size_t i = 0;
  do {
    json ops = json::array();
    for (size_t k = i; k < keys.size() && k < i + per_txn; ++k) {
      ops.push_back(range_op(prefix + keys[k], !values, revision));
      if (values) ops.push_back(journal_range_op(journal_prefix(prefix, keys[k]), revision));
    }
    json r = c.post("/v3/kv/txn", {{"success", ops}}, true);
    if (revision == 0) revision = int_field(r["header"], "revision");
    const json responses = r.value("responses", json::array());
    for (size_t n = 0; n < responses.size(); n += values ? 2 : 1) {
      const json& range = responses[n]["response_range"];
      if (values) {
        out.push_back(key_state(range));
        if (n + 1 < responses.size()) {
          apply_journal(out.back(), responses[n + 1]["response_range"]);
        }
      } else {
        KeyState st;
        st.exists = int_field(range, "count") > 0;
        out.push_back(std::move(st));
      }
    }
    i += per_txn;
  } while (i < keys.size());
  return out;
}

KeyState read_with_journal(EtcdConnection& c, const std::string& key, const std::string& jp,
                           int64_t& revision) {
  json r = c.post("/v3/kv/txn",
                  {{"success", json::array({range_op(key, false, 0), journal_range_op(jp, 0)})}},
                  true);
  return failure_state(r, revision);  // the same two reads
}

json guarded_txn(const std::string& key, const std::string& jp, int64_t mod_revision,
                 int64_t revision, json success) {
  json unchanged{{"key", base64_encode(key)},
                 {"target", "MOD"},
                 {"result", "EQUAL"},
                 {"mod_revision", std::to_string(mod_revision)}};
  json no_new_entry{{"key", base64_encode(jp)},
                    {"range_end", base64_encode(prefix_end(jp))},
                    {"target", "MOD"},
                    {"result", "LESS"},
                    {"mod_revision", std::to_string(revision + 1)}};
  json clear_journal{
      {"request_delete_range",
       {{"key", base64_encode(jp)}, {"range_end", base64_encode(prefix_end(jp))}}}};
  return {{"compare", json::array({unchanged, no_new_entry})},
          {"success", json::array({std::move(success), clear_journal})},
          {"failure", json::array({range_op(key, false, 0), journal_range_op(jp, 0)})}};
}

KeyState failure_state(const json& reply, int64_t& revision) {
  revision = reply.contains("header") ? int_field(reply["header"], "revision") : 0;
  KeyState s = key_state(reply["responses"][0]["response_range"]);
  apply_journal(s, reply["responses"][1]["response_range"]);
  return s;
}

void conflict_backoff(EtcdConnection& c, Clock::duration rtt) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  auto window = std::chrono::duration_cast<std::chrono::microseconds>(rtt).count();
  if (window <= 0) return;
  c.pause_until(Clock::now() + std::chrono::microseconds(rng() % static_cast<uint64_t>(window)));
}

}  // namespace ccrun::store::etcd

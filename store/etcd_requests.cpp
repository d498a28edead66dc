// Request builders and the read/transaction patterns of EtcdStore (see
// etcd_requests.h).
#include "etcd_requests.h"

#include <random>

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

std::vector<KeyState> read_keys(EtcdConnection& c, const std::string& prefix,
                                const std::vector<std::string>& keys, bool values,
                                int64_t& revision) {
  std::vector<KeyState> out;
  out.reserve(keys.size());
  size_t i = 0;
  do {
    json ops = json::array();
    for (size_t k = i; k < keys.size() && k < i + kMaxTxnOps; ++k) {
      ops.push_back(range_op(prefix + keys[k], !values, revision));
    }
    json r = c.post("/v3/kv/txn", {{"success", ops}}, true);
    if (revision == 0) revision = int_field(r["header"], "revision");
    for (const auto& resp : r.value("responses", json::array())) {
      const json& range = resp["response_range"];
      if (values) {
        out.push_back(key_state(range));
      } else {
        KeyState st;
        st.exists = int_field(range, "count") > 0;
        out.push_back(std::move(st));
      }
    }
    i += kMaxTxnOps;
  } while (i < keys.size());
  return out;
}

json guarded_txn(const std::string& key, int64_t mod_revision, json success) {
  return {{"compare", json::array({{{"key", base64_encode(key)},
                                    {"target", "MOD"},
                                    {"result", "EQUAL"},
                                    {"mod_revision", std::to_string(mod_revision)}}})},
          {"success", json::array({std::move(success)})},
          {"failure", json::array({range_op(key, false, 0)})}};
}

KeyState failure_state(const json& reply) {
  return key_state(reply["responses"][0]["response_range"]);
}

void conflict_backoff(EtcdConnection& c, Clock::duration rtt) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  auto window = std::chrono::duration_cast<std::chrono::microseconds>(rtt).count();
  if (window <= 0) return;
  c.pause_until(Clock::now() + std::chrono::microseconds(rng() % static_cast<uint64_t>(window)));
}

}  // namespace ccrun::store::etcd

// The --rdzv-conf parser and the table of torch's rendezvous keys (see
// rdzv_conf.h).
#include "rdzv_conf.h"

#include <sstream>

#include "ccrun/error.h"

namespace ccrun::launcher {
namespace {

using R = RendezvousSpec;
using Ms = std::chrono::milliseconds;

// The keys, where torch reads them (torch/distributed/elastic/rendezvous/):
// dynamic = dynamic_rendezvous.py (c10d and etcd-v2), c10d =
// c10d_rendezvous_backend.py, etcd-v2 = etcd_rendezvous_backend.py, etcd =
// etcd_rendezvous.py, static = static_tcp_rendezvous.py, torchrun =
// torch/distributed/launcher/api.py (--rdzv-timeout).
const RdzvConfKey kKeys[] = {
    {"join_timeout", "dynamic", [](const Raw& v, R& r) { r.join_timeout = to_seconds(v); },
     [](const R& r) { return seconds_text(r.join_timeout); }},
    {"last_call_timeout", "dynamic, etcd",
     [](const Raw& v, R& r) { r.last_call_timeout = to_seconds(v); },
     [](const R& r) { return seconds_text(r.last_call_timeout); }},
    {"read_timeout", "c10d, etcd-v2", [](const Raw& v, R& r) { r.read_timeout = to_seconds(v); },
     [](const R& r) { return seconds_text(r.read_timeout); }},
    {"keep_alive_interval", "dynamic",
     [](const Raw& v, R& r) { r.keep_alive_interval = to_seconds(v); },
     [](const R& r) { return seconds_text(r.keep_alive_interval); }},
    {"keep_alive_max_attempt", "dynamic",
     [](const Raw& v, R& r) { r.keep_alive_max_attempt = int(to_int(v, 1, 1000, "a count")); },
     [](const R& r) { return std::to_string(r.keep_alive_max_attempt); }},
    {"is_host", "c10d", [](const Raw& v, R& r) { r.is_host = to_bool(v); },
     [](const R& r) { return r.is_host ? std::string(*r.is_host ? "true" : "false") : ""; }},
    // How long the nodes wait for each other: ccrun's join_timeout, unless
    // join_timeout is given too (apply_rdzv_conf applies this one first).
    {"timeout", "torchrun, static, etcd", [](const Raw& v, R& r) { r.join_timeout = to_seconds(v); },
     nullptr},
    // The store's address, protocol and credentials: open_store reads them.
    {"protocol", "etcd, etcd-v2", nullptr, nullptr},
    {"cacert", "etcd", nullptr, nullptr},
    {"cert", "etcd", nullptr, nullptr},
    {"key", "etcd", nullptr, nullptr},
    {"ca_cert", "etcd-v2", nullptr, nullptr, "etcd_ca"},
    {"ssl_cert", "etcd-v2", nullptr, nullptr, "etcd_cert"},
    {"ssl_cert_key", "etcd-v2", nullptr, nullptr, "etcd_key"},
    {"etcd_user", "ccrun", nullptr, nullptr},
    {"etcd_password", "ccrun", nullptr, nullptr},
    {"etcd_tls", "ccrun", nullptr, nullptr},
    {"etcd_ca", "ccrun", nullptr, nullptr},
    {"etcd_cert", "ccrun", nullptr, nullptr},
    {"etcd_key", "ccrun", nullptr, nullptr},
    {"etcd_request_timeout", "ccrun", nullptr, nullptr},
    // Accepted and dropped: ccrun has no use for them.
    {"heartbeat_timeout", "dynamic", nullptr, nullptr, nullptr, true},  // a beat is one bounded store call
    // A close is one store write, which the nodes' watchers (parked on the
    // round's end) see at once: no wait to bound. Checked as seconds.
    {"close_timeout", "dynamic", [](const Raw& v, R&) { (void)to_seconds(v); }, nullptr, nullptr,
     true},
    {"use_libuv", "c10d", nullptr, nullptr, nullptr, true},  // ccrun's store is its own (Asio)
    {"store_type", "c10d",
     [](const Raw& v, R&) {
       if (v.value != "tcp") fail(v, "ccrun's c10d rendezvous runs on a TCP store only; use tcp or drop it");
     },
     nullptr, nullptr, true},
    {"rank", "static", nullptr, nullptr, nullptr, true},               // ccrun reads --node-rank
    {"etcd_prefix", "etcd", nullptr, nullptr, nullptr, true},          // give it in --rdzv-endpoint
};

// `text` without surrounding blanks and one pair of surrounding quotes.
std::string unquote(std::string text) {
  auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  text = text.substr(first, text.find_last_not_of(" \t") - first + 1);
  if (text.size() >= 2 && (text[0] == '\'' || text[0] == '"') && text.back() == text[0]) {
    text = text.substr(1, text.size() - 2);
  }
  return text;
}

std::string unknown_key(const std::string& key, const Raw& r) {
  std::vector<std::string> known;
  for (const auto& k : kKeys) known.push_back(k.name);
  return r.where + ": unknown rendezvous setting \"" + key + "\"" + closest(key, known) +
         "; ignored (known: " + join(known, ", ") + ")";
}

}  // namespace

std::span<const RdzvConfKey> rdzv_conf_keys() { return kKeys; }

const RdzvConfKey* find_rdzv_conf_key(const std::string& name) {
  for (const auto& k : kKeys) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

std::map<std::string, Raw> split_rdzv_conf(const Raw& text) {
  std::map<std::string, Raw> pairs;
  std::stringstream items(unquote(text.value));
  for (std::string item; std::getline(items, item, ',');) {
    item = unquote(item);
    auto eq = item.find('=');
    std::string key = unquote(item.substr(0, eq));
    if (eq == std::string::npos || key.empty()) fail(text, "expected key=value pairs separated by commas");
    Raw value{unquote(item.substr(eq + 1)), text.where + " " + key, text.yaml};
    if (!pairs.emplace(key, value).second) fail(text, "\"" + key + "\" is given twice; keep one");
  }
  return pairs;
}

std::vector<std::string> apply_rdzv_conf(const std::map<std::string, Raw>& pairs, RendezvousSpec& rdzv) {
  std::vector<std::string> warnings;
  auto apply = [&](const std::string& key, const Raw& r) {
    const RdzvConfKey* k = find_rdzv_conf_key(key);
    if (!k) return warnings.push_back(unknown_key(key, r));
    if (k->apply) k->apply(r, rdzv);
    if (!k->ignored) rdzv.conf[k->alias_of ? k->alias_of : k->name] = r.value;
  };
  if (auto t = pairs.find("timeout"); t != pairs.end()) apply(t->first, t->second);
  for (const auto& [key, r] : pairs) {
    if (key != "timeout") apply(key, r);
  }
  if (rdzv.keep_alive_interval.count() == 0) {
    throw ConfigError("rendezvous setting keep_alive_interval must be more than 0");
  }
  return warnings;
}

}  // namespace ccrun::launcher

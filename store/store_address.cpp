// open_store and the address parsers (see include/ccrun/store_address.h).
#include "ccrun/store_address.h"

#include <charconv>
#include <cstdlib>
#include <optional>

#include "ccrun/error.h"
#include "ccrun/etcd_store.h"
#include "ccrun/file_store.h"
#include "ccrun/tcp_store.h"
#include "ccrun/token_file.h"

namespace ccrun::store {

namespace {

constexpr std::string_view kAcceptedForms =
    "tcp://host:port, file:///path, or etcd://host:port[,host:port...][/prefix]";

ConfigError bad_address(std::string_view text, const std::string& why) {
  return ConfigError("store address \"" + std::string(text) + "\": " + why +
                     "; accepted forms: " + std::string(kAcceptedForms));
}

// The value of option `key`, also accepted under torch's name `alias`.
const std::string* find_conf(const std::map<std::string, std::string>& conf,
                             const std::string& key, const std::string& alias = "") {
  auto it = conf.find(key);
  if (it == conf.end() && !alias.empty()) it = conf.find(alias);
  return it == conf.end() ? nullptr : &it->second;
}

bool parse_flag(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  throw ConfigError("store option " + key + "=\"" + value + "\": expected 1/0 (true/false)");
}

EtcdStoreOptions etcd_options(const StoreAddress& a, const OpenStoreOptions& o) {
  static const char* const kKnown[] = {"etcd_user", "etcd_password", "etcd_tls", "etcd_ca",
                                       "etcd_cert", "etcd_key",      "etcd_request_timeout"};
  for (const auto& [key, value] : o.conf) {
    if (key.rfind("etcd_", 0) != 0) continue;
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) {
      std::string list;
      for (const char* k : kKnown) list += std::string(list.empty() ? "" : ", ") + k;
      throw ConfigError("unknown etcd option \"" + key + "\"; known: " + list);
    }
  }
  EtcdStoreOptions e;
  for (const auto& h : a.hosts) e.endpoints.push_back({h.host, h.port});
  if (!a.path.empty()) e.prefix = a.path;
  e.timeout = o.timeout;
  e.connect_timeout = o.connect_timeout;
  e.interrupt = o.interrupt;
  if (auto v = find_conf(o.conf, "etcd_user")) e.user = *v;
  if (auto v = find_conf(o.conf, "etcd_password")) e.password = *v;
  if (auto v = find_conf(o.conf, "etcd_tls")) e.tls = parse_flag("etcd_tls", *v);
  if (auto v = find_conf(o.conf, "protocol")) {
    if (*v != "http" && *v != "https") {
      throw ConfigError("store option protocol=\"" + *v + "\": expected http or https");
    }
    e.tls = e.tls || *v == "https";
  }
  if (auto v = find_conf(o.conf, "etcd_ca", "cacert")) e.ca_file = *v;
  if (auto v = find_conf(o.conf, "etcd_cert", "cert")) e.cert_file = *v;
  if (auto v = find_conf(o.conf, "etcd_key", "key")) e.key_file = *v;
  if (!e.ca_file.empty() || !e.cert_file.empty()) e.tls = true;
  if (auto v = find_conf(o.conf, "etcd_request_timeout")) {
    double secs = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), secs);
    if (ec != std::errc() || p != v->data() + v->size() || secs <= 0) {
      throw ConfigError("store option etcd_request_timeout=\"" + *v +
                        "\": expected a positive number of seconds");
    }
    e.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
  }
  return e;
}

// One host of a store address: host:port as everywhere (endpoint.h), but a
// store needs a real port (0 would mean "any free one").
Endpoint parse_store_host(std::string_view text, std::string_view hosts,
                          std::optional<uint16_t> default_port) {
  Endpoint ep;
  try {
    ep = default_port ? parse_endpoint(hosts, *default_port) : parse_endpoint(hosts);
  } catch (const ConfigError& e) {
    throw bad_address(text, e.what());
  }
  if (ep.port == 0) throw bad_address(text, "port 0 names no store; give the store's port");
  return ep;
}

}  // namespace

std::string etcd_address(std::string_view endpoint) {
  std::string text(endpoint);
  if (text.rfind("etcd://", 0) == 0) return text;
  if (auto sep = text.find("://"); sep != std::string::npos) {
    throw ConfigError("etcd endpoint \"" + text + "\": \"" + text.substr(0, sep + 3) +
                      "\" is not taken; drop it and give host:port[,host:port...] (for TLS "
                      "add --rdzv-conf protocol=https)");
  }
  return "etcd://" + text;
}

std::string tcp_address(const Endpoint& endpoint) { return "tcp://" + endpoint.to_string(); }

StoreAddress parse_store_address(std::string_view text) {
  auto sep = text.find("://");
  if (sep == std::string_view::npos) throw bad_address(text, "no scheme");
  std::string_view scheme = text.substr(0, sep);
  std::string_view rest = text.substr(sep + 3);
  StoreAddress a;
  if (scheme == "file") {
    a.scheme = StoreScheme::kFile;
    if (rest.rfind("localhost/", 0) == 0) rest.remove_prefix(9);
    if (rest.empty() || rest.front() != '/') {
      throw bad_address(text, "a file address needs an absolute path (file:///dir/file)");
    }
    a.path = std::string(rest);
    return a;
  }
  std::string_view hosts = rest;
  auto slash = rest.find('/');
  if (slash != std::string_view::npos) {
    hosts = rest.substr(0, slash);
    a.path = std::string(rest.substr(slash + 1));
  }
  if (scheme == "tcp") {
    a.scheme = StoreScheme::kTcp;
    if (!a.path.empty()) throw bad_address(text, "a tcp address has no path");
    if (hosts.find(',') != std::string_view::npos) {
      throw bad_address(text, "a tcp address names one host:port");
    }
    a.hosts.push_back(parse_store_host(text, hosts, std::nullopt));
    return a;
  }
  if (scheme == "etcd") {
    a.scheme = StoreScheme::kEtcd;
    while (!a.path.empty() && a.path.front() == '/') a.path.erase(0, 1);
    while (!hosts.empty()) {
      auto comma = hosts.find(',');
      std::string_view one = hosts.substr(0, comma);
      a.hosts.push_back(parse_store_host(text, one, 2379));
      hosts = comma == std::string_view::npos ? std::string_view{} : hosts.substr(comma + 1);
    }
    if (a.hosts.empty()) throw bad_address(text, "no etcd endpoint");
    return a;
  }
  throw bad_address(text, "unknown scheme \"" + std::string(scheme) + "\"");
}

std::string store_token_from_env() {
  const char* path = std::getenv(kStoreTokenFileEnv);
  if (!path || !*path) return {};
  return read_token_file(path, kStoreTokenFileEnv);
}

std::shared_ptr<Store> open_store(std::string_view address, const OpenStoreOptions& options) {
  StoreAddress a = parse_store_address(address);
  switch (a.scheme) {
    case StoreScheme::kTcp: {
      TcpStoreOptions t;
      t.host = a.hosts[0].host;
      t.port = a.hosts[0].port;
      t.timeout = options.timeout;
      t.connect_timeout = options.connect_timeout;
      t.interrupt = options.interrupt;
      t.token = options.token.empty() ? store_token_from_env() : options.token;
      return std::make_shared<TcpStore>(t);
    }
    case StoreScheme::kFile:
      return std::make_shared<FileStore>(a.path, options.timeout);
    case StoreScheme::kEtcd:
      return std::make_shared<EtcdStore>(etcd_options(a, options));
  }
  throw bad_address(address, "unknown scheme");
}

}  // namespace ccrun::store

//===- ccrun/store_address.h - Open any Store from one address --*- C++ -*-===//
//
// One entry point turns an address into a Store, so the agent, the workers'
// init and the tools never pick an implementation by hand:
//
//   tcp://host:port                          TcpStore (ccrun-rendezvous, an
//                                            agent's store, torch's TCPStore)
//   file:///path/to/file                     FileStore (shared filesystem)
//   etcd://host:port[,host:port...][/prefix] EtcdStore (etcd v3 cluster; keys
//                                            under "<prefix>/", default "ccrun/";
//                                            port 2379 when left out)
//
//   OpenStoreOptions o;
//   o.conf = {{"etcd_user", "job"}, {"etcd_password", "..."}};   // --rdzv-conf
//   std::shared_ptr<Store> s = open_store("etcd://10.0.0.1:2379,10.0.0.2:2379/ccrun/job7", o);
//
// IPv6 hosts go in brackets: tcp://[fd00::1]:29400.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/endpoint.h"
#include "ccrun/store.h"
#include "ccrun/store_interrupt.h"

namespace ccrun::store {

enum class StoreScheme { kTcp, kFile, kEtcd };

struct StoreAddress {
  StoreScheme scheme = StoreScheme::kTcp;
  std::vector<Endpoint> hosts;  // tcp: exactly one; etcd: one or more
  std::string path;             // file: the file; etcd: the key prefix, "" = default
};

// `--rdzv-endpoint` of the etcd backend (host:port[,host:port...][/prefix],
// etcd:// optional) as a store address. Throws ConfigError for another
// scheme ("http://"): etcd's protocol is the `protocol` option.
[[nodiscard]] std::string etcd_address(std::string_view endpoint);

// The address of the TCP store at `endpoint`: tcp://host:port (IPv6 hosts
// in brackets).
[[nodiscard]] std::string tcp_address(const Endpoint& endpoint);

// Parses a store address. Throws ConfigError naming the text and the
// accepted forms.
[[nodiscard]] StoreAddress parse_store_address(std::string_view text);

struct OpenStoreOptions {
  // Timeout of blocking calls (get, wait) of the store opened.
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // How long to keep trying to reach the store (TcpStore, EtcdStore).
  std::chrono::milliseconds connect_timeout{60'000};
  // `--rdzv-conf` style options. Keys this function does not know are left
  // for the caller (the rendezvous has its own), except misspelled etcd_*
  // keys, which are errors. Read for etcd:// (torch's names in brackets):
  //   etcd_user, etcd_password   etcd authentication (both or neither)
  //   etcd_tls=1 (protocol=https) TLS to every member
  //   etcd_ca (cacert)           PEM CA bundle to verify members (implies TLS)
  //   etcd_cert, etcd_key (cert, key)  client certificate (implies TLS)
  //   etcd_request_timeout       seconds one member may take before fail-over
  std::map<std::string, std::string> conf;
  // Wakes blocked calls (TcpStore, EtcdStore), see store_interrupt.h.
  std::shared_ptr<StoreInterrupt> interrupt;
  // tcp://: the shared secret of a store started with --token-file. Empty:
  // store_token_from_env(), so that workers reach a protected agent store
  // with the variable they inherit.
  std::string token;
};

// The variable naming a file with the secret of a protected tcp:// store,
// for every client of it: workers, agents, `ccrun status` (docs/cli.md).
inline constexpr const char* kStoreTokenFileEnv = "CCRUN_STORE_TOKEN_FILE";

// The secret in the file kStoreTokenFileEnv names, read as
// ccrun-rendezvous --token-file reads its file (read_token_file,
// token_file.h), or "" when the variable is unset. Throws ConfigError when
// the file is unreadable, empty or holds more than one line.
[[nodiscard]] std::string store_token_from_env();

// Opens the store `address` names (parse_store_address), connected and
// ready. Throws ConfigError for a bad address or option, ConnectionError
// when the store cannot be reached within connect_timeout.
[[nodiscard]] std::shared_ptr<Store> open_store(std::string_view address,
                                                const OpenStoreOptions& options = {});

}  // namespace ccrun::store

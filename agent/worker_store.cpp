// The store a dynamic round's workers meet in (see worker_store.h).
#include "worker_store.h"

#include <cstring>
#include <utility>

namespace ccrun::agent {

WorkerStore::WorkerStore(std::string bind_host) : bind_host_(std::move(bind_host)) { start(); }

void WorkerStore::renew() {
  server_.reset();  // stops it: the old round's workers lose it with their keys
  start();
}

void WorkerStore::start() {
  // No token: torch's workers cannot authenticate (docs/store.md), and the
  // store holds only what the round's workers put there.
  store::StoreServerOptions o;
  o.host = bind_host_;
  o.port = 0;
  server_ = std::make_unique<store::StoreServer>(o);
  server_->start();
  port_ = server_->port();
}

}  // namespace ccrun::agent

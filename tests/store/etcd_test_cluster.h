// EtcdTestCluster: real etcd members (Debian's /usr/bin/etcd) on loopback
// for the tests. Each member gets free ports on its own 127.0.0.x address
// and a data directory in /dev/shm (fast fsync); readiness is the member's
// "ready to serve client requests" log line, read from its stderr by a
// thread (no polling). Killed with SIGKILL and removed at destruction.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ccrun/etcd_store.h"
#include "etcd_connection.h"

namespace ccrun::testing {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

inline bool etcd_available() { return ::access(kEtcdBinary, X_OK) == 0; }

inline const char* etcd_skip_reason() {
  return "skipped: /usr/bin/etcd is missing (install Debian's etcd-server; "
         "scripts/setup.sh does)";
}

// A free TCP port on `host` (bound and released: another process could
// take it in between, which the tests accept).
inline uint16_t free_port(const std::string& host) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot bind a free port on " + host);
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class EtcdTestCluster {
 public:
  // Starts `n` members and returns once every one serves clients; with
  // `cert_file`/`key_file` (PEM), clients are served over TLS (https).
  explicit EtcdTestCluster(int n, std::string cert_file = "", std::string key_file = "")
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {
    std::random_device rd;
    dir_ = "/dev/shm/ccrun-etcd-test-" + std::to_string(::getpid()) + "-" +
           std::to_string(rd() % 1000000);
    std::filesystem::create_directories(dir_);
    std::string initial;
    for (int i = 0; i < n; ++i) {
      auto m = std::make_unique<Member>();
      m->name = "m" + std::to_string(i);
      m->host = n == 1 ? "127.0.0.1" : "127.0.0." + std::to_string(21 + i);
      m->client_port = free_port(m->host);
      m->peer_port = free_port(m->host);
      if (!initial.empty()) initial += ",";
      initial += m->name + "=http://" + m->host + ":" + std::to_string(m->peer_port);
      members_.push_back(std::move(m));
    }
    for (auto& m : members_) start(*m, initial);
    for (auto& m : members_) wait_ready(*m);
  }

  ~EtcdTestCluster() {
    for (auto& m : members_) kill(*m);
    std::error_code ignored;  // a leftover test directory in /dev/shm is harmless
    std::filesystem::remove_all(dir_, ignored);
  }
  EtcdTestCluster(const EtcdTestCluster&) = delete;

  size_t size() const { return members_.size(); }

  std::vector<store::EtcdEndpoint> endpoints() const {
    std::vector<store::EtcdEndpoint> eps;
    for (const auto& m : members_) eps.push_back({m->host, m->client_port});
    return eps;
  }

  // "etcd://h:p,h:p/<prefix>"
  std::string address(const std::string& prefix) const {
    std::string a = "etcd://";
    for (size_t i = 0; i < members_.size(); ++i) {
      if (i) a += ",";
      a += members_[i]->host + ":" + std::to_string(members_[i]->client_port);
    }
    return a + "/" + prefix;
  }

  store::EtcdStoreOptions options(const std::string& prefix) const {
    store::EtcdStoreOptions o;
    o.endpoints = endpoints();
    o.prefix = prefix;
    o.connect_timeout = std::chrono::seconds(30);
    o.request_timeout = std::chrono::seconds(3);
    return o;
  }

  // The index of the member that leads now (asks each live member).
  int leader() {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i]->pid < 0) continue;
      store::EtcdStoreOptions o;
      o.endpoints = {{members_[i]->host, members_[i]->client_port}};
      o.connect_timeout = std::chrono::seconds(5);
      auto state = std::make_shared<store::etcd::ClientState>(o);
      store::etcd::EtcdConnection c(state);
      auto status = c.post("/v3/maintenance/status", nlohmann::json::object(), true);
      auto leader = status.value("leader", std::string());
      for (size_t j = 0; j < members_.size(); ++j) {
        if (!members_[j]->id.empty() && members_[j]->id == leader) return static_cast<int>(j);
      }
      if (status["header"].value("member_id", std::string()) == leader) {
        members_[i]->id = leader;
        return static_cast<int>(i);
      }
      // Learn the others' ids from the member list.
      auto list = c.post("/v3/cluster/member/list", nlohmann::json::object(), true);
      for (const auto& mem : list["members"]) {
        for (size_t j = 0; j < members_.size(); ++j) {
          if (mem.value("name", std::string()) == members_[j]->name) {
            members_[j]->id = mem.value("ID", std::string());
          }
        }
      }
      for (size_t j = 0; j < members_.size(); ++j) {
        if (members_[j]->id == leader) return static_cast<int>(j);
      }
    }
    throw std::runtime_error("no live etcd member knows a leader");
  }

  // SIGKILLs member `i` (as a crashed machine).
  void kill(size_t i) { kill(*members_[i]); }

  std::string log(size_t i) {
    std::lock_guard lock(members_[i]->mu);
    return members_[i]->log;
  }

 private:
  struct Member {
    std::string name, host, id;
    uint16_t client_port = 0, peer_port = 0;
    pid_t pid = -1;
    int out = -1;  // read end of its stderr
    std::thread drain;
    std::mutex mu;
    std::condition_variable cv;
    std::string log;  // guarded by mu
    bool ready = false, ended = false;  // guarded by mu
  };

  void start(Member& m, const std::string& initial) {
    std::string client = (cert_file_.empty() ? "http://" : "https://") + m.host + ":" +
                         std::to_string(m.client_port);
    std::string peer = "http://" + m.host + ":" + std::to_string(m.peer_port);
    std::vector<std::string> args = {
        kEtcdBinary, "--name", m.name, "--data-dir", dir_ + "/" + m.name,
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", initial, "--initial-cluster-state", "new",
        "--initial-cluster-token", "ccrun-test-" + std::to_string(::getpid()),
        "--heartbeat-interval", "50", "--election-timeout", "500"};
    if (!cert_file_.empty()) {
      args.insert(args.end(), {"--cert-file", cert_file_, "--key-file", key_file_});
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = ::fork();
    if (pid == 0) {  // only async-signal-safe calls until exec
      ::dup2(fds[1], 2);
      ::dup2(fds[1], 1);
      ::execv(kEtcdBinary, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    m.pid = pid;
    m.out = fds[0];
    m.drain = std::thread([&m] {
      char buf[4096];
      for (;;) {
        ssize_t r = ::read(m.out, buf, sizeof buf);
        if (r <= 0) break;
        std::lock_guard lock(m.mu);
        m.log.append(buf, static_cast<size_t>(r));
        if (!m.ready && m.log.find("ready to serve client requests") != std::string::npos) {
          m.ready = true;
          m.cv.notify_all();
        }
      }
      std::lock_guard lock(m.mu);
      m.ended = true;
      m.cv.notify_all();
    });
  }

  void wait_ready(Member& m) {
    std::unique_lock lock(m.mu);
    if (!m.cv.wait_for(lock, std::chrono::seconds(30), [&] { return m.ready || m.ended; }) ||
        !m.ready) {
      throw std::runtime_error("etcd member " + m.name + " did not become ready in 30 s; its log:\n" +
                               m.log.substr(m.log.size() > 3000 ? m.log.size() - 3000 : 0));
    }
  }

  void kill(Member& m) {
    if (m.pid > 0) {
      ::kill(m.pid, SIGKILL);
      ::waitpid(m.pid, nullptr, 0);
      m.pid = -1;
    }
    if (m.drain.joinable()) m.drain.join();
    if (m.out >= 0) ::close(m.out);
    m.out = -1;
  }

  std::string cert_file_, key_file_;
  std::string dir_;
  std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace ccrun::testing

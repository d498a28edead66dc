// The environment and arguments of each worker (see worker_env.h).
#include "worker_env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <net/if.h>

#include <cctype>
#include <cstring>
#include <string_view>

#include "ccrun/error.h"
#include "ccrun/job_keys.h"


namespace ccrun::agent {

EnvBuilder node_environment(const JobSpec& spec) {
  EnvBuilder env = EnvBuilder::from_environ();
  for (const auto& [k, v] : spec.env) env.set(k, v);
  // torch 2.2+ reads TORCH_NCCL_ASYNC_ERROR_HANDLING, torch 1.13 the older
  // name; torchrun sets its torch's to 1 unless the user did. Both are set,
  // to the user's value where they set either (whichever torch runs, it
  // reads theirs); the start-up hook drops the older one where torch 2.2+
  // runs, which warns of it (agent/python/ccrun_progress.py).
  const char* names[] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"};
  const std::string* theirs = env.get(names[0]) ? env.get(names[0]) : env.get(names[1]);
  std::string async_errors = theirs ? *theirs : "1";
  for (const char* name : names) env.set_default(name, async_errors);
  if (spec.nproc_per_node > 1) env.set_default("OMP_NUM_THREADS", "1");
  return env;
}

EnvBuilder worker_environment(const EnvContext& c, int local_rank, const std::string& error_file) {
  const JobSpec& spec = *c.spec;
  const auto& info = *c.info;
  EnvBuilder env = node_environment(spec);
  auto set = [&](std::string_view k, const std::string& v) { env.set(k, v); };
  set("LOCAL_RANK", std::to_string(local_rank));
  if (spec.virtual_local_rank) {  // each worker sees its own GPU as device 0
    const std::string* visible = env.get("CUDA_VISIBLE_DEVICES");
    set("CUDA_VISIBLE_DEVICES",
        virtual_visible_device(visible ? std::optional(*visible) : std::nullopt, local_rank));
    set("LOCAL_RANK", "0");
  }
  set("RANK", std::to_string(info.rank_offset + local_rank));
  set("GROUP_RANK", std::to_string(info.node_rank));
  set("ROLE_RANK", std::to_string(info.role_rank_offset + local_rank));
  set("ROLE_NAME", spec.role);
  set("LOCAL_WORLD_SIZE", std::to_string(spec.nproc_per_node));
  set("WORLD_SIZE", std::to_string(info.world_size));
  set("GROUP_WORLD_SIZE", std::to_string(info.num_nodes));
  set("ROLE_WORLD_SIZE", std::to_string(info.role_world_size));
  set("MASTER_ADDR", info.master_addr);
  set("MASTER_PORT", std::to_string(info.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(c.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(spec.max_restarts));
  set("TORCHELASTIC_RUN_ID", c.run_id);
  set("TORCHELASTIC_USE_AGENT_STORE", info.use_agent_store ? "True" : "False");
  set("TORCHELASTIC_ERROR_FILE", error_file);
  if (!c.gloo_ifname.empty()) env.set_default("GLOO_SOCKET_IFNAME", c.gloo_ifname);
  if (!c.store_host.empty()) {  // none with etcd: workers meet on MASTER_ADDR:MASTER_PORT
    set(worker_env::kStoreAddr, c.store_host);
    set(worker_env::kStorePort, std::to_string(c.store_port));
  }
  set(worker_env::kAttempt, std::to_string(c.restart_count));
  set(worker_env::kRunId, c.run_id);
  for (const auto& [k, v] : spec.env) set(k, v);
  return env;
}

std::string virtual_visible_device(const std::optional<std::string>& agent_visible, int local_rank) {
  if (!agent_visible) return std::to_string(local_rank);
  std::vector<std::string> gpus;
  size_t start = 0;
  for (;;) {  // Python's str.split(","): every piece, empty ones too
    size_t comma = agent_visible->find(',', start);
    gpus.push_back(agent_visible->substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (local_rank >= int(gpus.size())) {
    throw Error("--virtual-local-rank: local rank " + std::to_string(local_rank) +
                " exceeds available GPUs in CUDA_VISIBLE_DEVICES=" + *agent_visible +
                "; run at most " + std::to_string(gpus.size()) + " worker(s) per node or widen it");
  }
  std::string gpu = gpus[size_t(local_rank)];
  size_t b = gpu.find_first_not_of(" \t\n\r"), e = gpu.find_last_not_of(" \t\n\r");
  return b == std::string::npos ? "" : gpu.substr(b, e - b + 1);
}

namespace {

bool is_name_start(char c) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)); }
bool is_name_char(char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); }

}  // namespace

// The alternatives in Template's pattern, in its order: "$$", "$name",
// "${name}", else a lone "$" kept (worker_env.h: "$$" is not unescaped).
std::string substitute_macros(const std::string& arg,
                            const std::map<std::string, std::string, std::less<>>& values) {
  std::string out;
  size_t i = 0;
  while (i < arg.size()) {
    size_t dollar = arg.find('$', i);
    out.append(arg, i, dollar == std::string::npos ? std::string::npos : dollar - i);
    if (dollar == std::string::npos) break;
    i = dollar + 1;
    bool braced = i < arg.size() && arg[i] == '{';
    size_t start = braced ? i + 1 : i;
    size_t end = start;
    if (end < arg.size() && is_name_start(arg[end])) {
      while (end < arg.size() && is_name_char(arg[end])) ++end;
    }
    if (i < arg.size() && arg[i] == '$') {  // "$$": an escape, kept as written
      out += "$$";
      ++i;
    } else if (end == start || (braced && (end == arg.size() || arg[end] != '}'))) {
      out += '$';  // no name, or "${" unclosed: kept, scanning goes on after "$"
    } else {
      auto it = values.find(std::string_view(arg.data() + start, end - start));
      size_t stop = braced ? end + 1 : end;
      out += it != values.end() ? it->second : arg.substr(dollar, stop - dollar);
      i = stop;
    }
  }
  return out;
}

std::vector<std::string> worker_arguments(const std::vector<std::string>& entrypoint,
                                          int local_rank) {
  std::vector<std::string> argv = entrypoint;
  const std::map<std::string, std::string, std::less<>> values{
      {"local_rank", std::to_string(local_rank)}};
  for (size_t k = 1; k < argv.size(); ++k) argv[k] = substitute_macros(argv[k], values);
  return argv;
}

namespace {
std::string addr_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}
}  // namespace

std::string interface_of(const std::string& addr) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string name;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && addr_string(i->ifa_addr) == addr) {
      name = i->ifa_name;
      break;
    }
  }
  freeifaddrs(list);
  return name;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1") return true;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool local = false;
  for (addrinfo* a = res; a && !local; a = a->ai_next) {
    std::string s = addr_string(a->ai_addr);
    local = s.rfind("127.", 0) == 0 || s == "::1" || !interface_of(s).empty();
  }
  freeaddrinfo(res);
  return local;
}

}  // namespace ccrun::agent

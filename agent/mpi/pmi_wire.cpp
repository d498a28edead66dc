// PMI-1 lines parsed and formatted, and what a node's server does with each
// request (see pmi_wire.h): no socket, no store.
#include "mpi/pmi_wire.h"

#include <algorithm>
#include <charconv>

namespace ccrun::agent::mpi {

namespace {

[[gnu::cold]] std::string_view trim_line_end(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

// Reads one token at `line`'s front into `out`; false when it is not key=value.
[[gnu::cold]] bool take_token(std::string_view& line, std::pair<std::string, std::string>& out) {
  size_t eq = line.find('=');
  size_t space = line.find(' ');
  if (eq == std::string_view::npos || eq == 0 || space < eq) return false;
  out.first = std::string(line.substr(0, eq));
  // `value=` is the last token and may hold spaces.
  size_t end = out.first == "value" ? line.size() : std::min(space, line.size());
  out.second = std::string(line.substr(eq + 1, end - eq - 1));
  line.remove_prefix(end);
  return true;
}

[[gnu::cold]] std::string error_reply(std::string_view cmd, const std::string& why) {
  return format_reply(cmd, {{"rc", "-1"}, {"msg", why}});
}

[[gnu::cold]] int to_int(const std::string* text, int fallback) {
  if (!text) return fallback;
  int v = fallback;
  auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  return ec == std::errc() && p == text->data() + text->size() ? v : fallback;
}

// A put or a get must name the job's space (or none, as a PMI-1.1 client
// may); returns the reason it cannot be served, "" when it can.
[[gnu::cold]] std::string check_key(const PmiRequest& r, const PmiJob& job, std::string_view cmd) {
  const std::string* kvs = r.arg("kvsname");
  const std::string* key = r.arg("key");
  if (kvs && *kvs != job.kvsname) return "kvsname_" + *kvs + "_is_not_this_job's";
  if (!key || key->empty()) return "no_key";
  if (key->size() > size_t(kKeyMax)) return "key_longer_than_" + std::to_string(kKeyMax);
  if (cmd == "put") {
    const std::string* value = r.arg("value");
    if (!value) return "no_value";
    if (value->size() > size_t(kValueMax)) return "value_longer_than_" + std::to_string(kValueMax);
  }
  return "";
}

[[gnu::cold]] PmiAction reply(std::string line) {
  PmiAction a;
  a.kind = PmiAction::Kind::kReply;
  a.reply = std::move(line);
  return a;
}

[[gnu::cold]] PmiAction decide_init(const PmiRequest& r) {
  bool v1 = to_int(r.arg("pmi_version"), -1) == 1;
  return reply(format_reply("response_to_init", {{"pmi_version", "1"},
                                                 {"pmi_subversion", "1"},
                                                 {"rc", v1 ? "0" : "-1"}}));
}

[[gnu::cold]] PmiAction decide_put(const PmiRequest& r, const PmiJob& job) {
  if (std::string why = check_key(r, job, "put"); !why.empty()) {
    return reply(error_reply("put_result", why));
  }
  PmiAction a;
  a.kind = PmiAction::Kind::kPut;
  a.key = *r.arg("key");
  a.value = *r.arg("value");
  a.reply = format_reply("put_result", {{"rc", "0"}, {"msg", "success"}});
  return a;
}

[[gnu::cold]] PmiAction decide_get(const PmiRequest& r, const PmiJob& job) {
  if (std::string why = check_key(r, job, "get"); !why.empty()) {
    return reply(error_reply("get_result", why));
  }
  const std::string& key = *r.arg("key");
  if (key == kProcessMappingKey) {
    std::string map = process_mapping(job.num_nodes, job.nproc_per_node, job.world_size);
    return reply(get_reply(key, map.empty() ? std::nullopt : std::optional(map)));
  }
  PmiAction a;
  a.kind = PmiAction::Kind::kGet;
  a.key = key;
  return a;
}

[[gnu::cold]] PmiAction decide_abort(const PmiRequest& r) {
  PmiAction a;
  a.kind = PmiAction::Kind::kAbort;
  a.exit_code = to_int(r.arg("exitcode"), 1);
  if (const std::string* m = r.arg("message")) a.message = *m;
  return a;
}

}  // namespace

[[gnu::cold]] const std::string* PmiRequest::arg(std::string_view key) const {
  for (const auto& [k, v] : args) {
    if (k == key) return &v;
  }
  return nullptr;
}

[[gnu::cold]] std::optional<PmiRequest> parse_request(std::string_view line) {
  if (line.size() > kMaxLine) return std::nullopt;
  line = trim_line_end(line);
  PmiRequest r;
  bool first = true;
  while (true) {
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty()) break;
    std::pair<std::string, std::string> token;
    if (!take_token(line, token)) return std::nullopt;
    if (first) {
      if (token.first != "cmd" || token.second.empty()) return std::nullopt;
      r.cmd = std::move(token.second);
      first = false;
    } else {
      r.args.push_back(std::move(token));
    }
  }
  if (first) return std::nullopt;
  return r;
}

std::string format_reply(std::string_view cmd,
                         std::initializer_list<std::pair<std::string_view, std::string>> args) {
  std::string out = "cmd=";
  out += cmd;
  for (const auto& [k, v] : args) {
    out += ' ';
    out += k;
    out += '=';
    for (char c : v) out += (c == ' ' || c == '\n' || c == '\r') ? '_' : c;
  }
  out += '\n';
  return out;
}

[[gnu::cold]] std::string process_mapping(int num_nodes, int per_node, int world_size) {
  if (num_nodes < 1 || per_node < 1 || num_nodes * per_node != world_size) return "";
  return "(vector,(0," + std::to_string(num_nodes) + "," + std::to_string(per_node) + "))";
}

[[gnu::cold]] std::string kvs_name(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, size_t(kKvsNameMax))) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-' || c == '.';
    out += keep ? c : '_';
  }
  return out;
}

[[gnu::cold]] std::string get_reply(const std::string& key, const std::optional<std::string>& value) {
  if (!value) return error_reply("get_result", "key_" + key + "_not_found");
  return format_reply("get_result", {{"rc", "0"}, {"msg", "success"}, {"value", *value}});
}

[[gnu::cold]] PmiAction decide(const PmiRequest& r, const PmiJob& job) {
  const std::string& cmd = r.cmd;
  if (cmd == "init") return decide_init(r);
  if (cmd == "get_maxes") {
    return reply(format_reply("maxes", {{"kvsname_max", std::to_string(kKvsNameMax)},
                                        {"keylen_max", std::to_string(kKeyMax)},
                                        {"vallen_max", std::to_string(kValueMax)},
                                        {"rc", "0"}}));
  }
  if (cmd == "get_appnum") {
    return reply(format_reply("appnum", {{"appnum", std::to_string(job.appnum)}, {"rc", "0"}}));
  }
  if (cmd == "get_universe_size") {
    return reply(format_reply("universe_size", {{"size", std::to_string(job.world_size)}, {"rc", "0"}}));
  }
  if (cmd == "get_my_kvsname") {
    return reply(format_reply("my_kvsname", {{"kvsname", job.kvsname}, {"rc", "0"}}));
  }
  if (cmd == "put") return decide_put(r, job);
  if (cmd == "get") return decide_get(r, job);
  if (cmd == "barrier_in") {
    PmiAction a;
    a.kind = PmiAction::Kind::kBarrier;
    return a;
  }
  if (cmd == "finalize") {
    PmiAction a = reply(format_reply("finalize_ack", {{"rc", "0"}}));
    a.kind = PmiAction::Kind::kFinalize;
    return a;
  }
  if (cmd == "abort") return decide_abort(r);
  // publish_name, lookup_name, spawn, ...: not served. The reply names the
  // command, so a client waiting for its own reply sees the failure.
  return reply(error_reply(cmd + "_result", "command_" + cmd + "_is_not_served_by_ccrun"));
}

}  // namespace ccrun::agent::mpi

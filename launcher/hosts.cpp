// Host lists: hostfiles, --include/--exclude (see hosts.h).
#include "hosts.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ccrun/error.h"

namespace ccrun::launcher {
namespace {

// A positive slot count or slot index from `digits`; nullopt when it is not
// a number in [lo, 1 << 16].
std::optional<int> small_number(std::string_view digits, int lo) {
  if (digits.empty() || digits.size() > 6) return std::nullopt;
  int v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > (1 << 16)) return std::nullopt;
  return v;
}

std::string at(const std::string& path, size_t line, size_t col) {
  return path + ":" + std::to_string(line) + ":" + std::to_string(col);
}

}  // namespace

std::string host_name(std::string_view text) {
  if (text.size() > 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  return std::string(text);
}

std::string bad_host_name(std::string_view name) {
  if (name.empty()) return "an empty host name";
  if (name.front() == '-') return "a host name cannot start with '-' (ssh would read it as an option)";
  for (char c : name) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\'' || c == '"' || c == '@' || c == ',') {
      return "a host name cannot hold spaces, quotes, '@' or ','";
    }
  }
  return "";
}

std::vector<HostLine> parse_hostfile(std::string_view text, const std::string& path) {
  std::vector<HostLine> hosts;
  std::map<std::string, size_t> seen;  // host -> line
  size_t line_no = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    // Tokens with their 1-based columns.
    std::vector<std::pair<std::string_view, size_t>> tokens;
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
        ++i;
        continue;
      }
      size_t j = line.find_first_of(" \t\r", i);
      if (j == std::string_view::npos) j = line.size();
      tokens.emplace_back(line.substr(i, j - i), i + 1);
      i = j;
    }
    start = end + 1;
    if (tokens.empty()) continue;
    HostLine h;
    h.name = host_name(tokens[0].first);
    h.where = at(path, line_no, tokens[0].second);
    if (auto why = bad_host_name(h.name); !why.empty()) {
      throw ConfigError(h.where + ": \"" + h.name + "\": " + why);
    }
    for (size_t t = 1; t < tokens.size(); ++t) {
      auto [tok, col] = tokens[t];
      std::string where = at(path, line_no, col);
      if (tok.rfind("slots=", 0) != 0) {
        throw ConfigError(where + ": \"" + std::string(tok) +
                          "\": expected slots=N after the host (a line is `host [slots=N]`)");
      }
      if (h.slots) throw ConfigError(where + ": slots given twice for " + h.name);
      h.slots = small_number(tok.substr(6), 1);
      if (!h.slots) {
        throw ConfigError(where + ": \"" + std::string(tok) + "\": N in slots=N must be a number from 1 to 65536");
      }
    }
    if (auto [it, fresh] = seen.emplace(h.name, line_no); !fresh) {
      throw ConfigError(h.where + ": host \"" + h.name + "\" is listed twice (first on line " +
                        std::to_string(it->second) + "); keep one line per host");
    }
    hosts.push_back(std::move(h));
  }
  return hosts;
}

std::vector<HostLine> read_hostfile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError("--hostfile \"" + path + "\": is a directory; give the hostfile in it");
  }
  std::ifstream in(path);
  if (!in) throw ConfigError("--hostfile \"" + path + "\": cannot read the file; check the path");
  std::stringstream text;
  text << in.rdbuf();
  auto hosts = parse_hostfile(text.str(), path);
  if (hosts.empty()) {
    throw ConfigError("--hostfile \"" + path + "\": no hosts in it; write one `host slots=N` per line");
  }
  return hosts;
}

std::vector<HostFilterEntry> parse_host_filter(std::string_view text, const std::string& label) {
  std::vector<HostFilterEntry> out;
  auto bad = [&](size_t col, const std::string& why) -> void {
    throw ConfigError(label + ": column " + std::to_string(col) + ": " + why +
                      " (the form is host[:slot,slot...] joined by '@', e.g. node1@node2:0,1)");
  };
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('@', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view entry = text.substr(start, end - start);
    size_t col = start + 1;
    if (entry.empty()) bad(col, "an empty host");
    HostFilterEntry e;
    size_t colon;
    if (entry.front() == '[') {  // [v6] or [v6]:slots
      size_t close = entry.find(']');
      if (close == std::string_view::npos) bad(col, "'[' without ']'");
      e.host = std::string(entry.substr(1, close - 1));
      colon = close + 1;
      if (colon < entry.size() && entry[colon] != ':') bad(col + colon, "expected ':' after ']'");
    } else {
      colon = entry.find(':');
      e.host = std::string(entry.substr(0, colon));
    }
    if (auto why = bad_host_name(e.host); !why.empty()) bad(col, why);
    if (colon < entry.size()) {
      std::string_view slots = entry.substr(colon + 1);
      size_t pos = 0;
      for (;;) {
        size_t comma = slots.find(',', pos);
        std::string_view one = slots.substr(pos, comma == std::string_view::npos ? slots.npos : comma - pos);
        auto v = small_number(one, 0);
        if (!v) bad(col + colon + 1 + pos, "slot \"" + std::string(one) + "\" is not a slot number (0, 1, ...)");
        e.slots.push_back(*v);
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
      }
    }
    out.push_back(std::move(e));
    start = end + 1;
  }
  return out;
}

std::vector<HostSpec> resolve_host_list(const std::vector<HostLine>& lines, int default_slots,
                                        std::string_view include, const std::string& include_label,
                                        std::string_view exclude, const std::string& exclude_label) {
  if (!include.empty() && !exclude.empty()) {
    throw ConfigError(include_label + " and " + exclude_label +
                      " cannot go together; name the hosts to use, or the ones to leave out");
  }
  std::vector<HostSpec> hosts;
  for (const auto& l : lines) {
    HostSpec h;
    h.name = l.name;
    h.slots = l.slots.value_or(default_slots);
    for (int d = 0; d < h.slots; ++d) h.devices.push_back(d);
    hosts.push_back(std::move(h));
  }
  bool including = !include.empty();
  const std::string& label = including ? include_label : exclude_label;
  if (include.empty() && exclude.empty()) return hosts;
  auto filter = parse_host_filter(including ? include : exclude, label);

  // Per named host: the whole host, or the union of the slots named.
  struct Named {
    bool whole = false;
    std::set<int> slots;
  };
  std::map<std::string, Named> named;
  for (const auto& f : filter) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const HostSpec& h) { return h.name == f.host; });
    if (it == hosts.end()) {
      std::string known;
      for (const auto& h : hosts) known += (known.empty() ? "" : ", ") + h.name;
      throw ConfigError(label + ": host \"" + f.host + "\" is not in the host list (" + known + ")");
    }
    if (!f.slots.empty() && it->slots == 0) {
      throw ConfigError(label + ": host \"" + f.host + "\" counts its slots itself (--nproc-per-node "
                        "auto, cpu or gpu); give it slots=N in the host list to name slots");
    }
    for (int s : f.slots) {
      if (s >= it->slots) {
        throw ConfigError(label + ": host \"" + f.host + "\" has slots 0 to " +
                          std::to_string(it->slots - 1) + "; there is no slot " + std::to_string(s));
      }
    }
    Named& n = named[f.host];
    n.whole = n.whole || f.slots.empty();
    n.slots.insert(f.slots.begin(), f.slots.end());
  }
  std::vector<HostSpec> out;
  for (auto& h : hosts) {
    auto it = named.find(h.name);
    if (including) {
      if (it == named.end()) continue;
      if (!it->second.whole) h.devices.assign(it->second.slots.begin(), it->second.slots.end());
    } else if (it != named.end()) {
      if (it->second.whole) continue;
      std::erase_if(h.devices, [&](int d) { return it->second.slots.count(d) > 0; });
      if (h.devices.empty()) continue;
    }
    out.push_back(std::move(h));
  }
  if (out.empty()) throw ConfigError(label + ": no host is left to run on");
  return out;
}

}  // namespace ccrun::launcher

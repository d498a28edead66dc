// A hang's stacks merged across the job's nodes (see job_stacks.h).
#include "job_stacks.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ccrun/rank_progress.h"

namespace ccrun::agent {
using json = nlohmann::json;

namespace {

constexpr const char* kShareKey = "stack_classes";

// A class's digest as its share carries it.
std::string digest_text(const StackClass& c) { return fmt::format("{:016x}", c.digest); }

std::vector<int> int_list(const json& j) {
  std::vector<int> out;
  if (!j.is_array()) return out;
  for (const auto& v : j) {
    if (v.is_number_integer()) out.push_back(v.get<int>());
  }
  return out;
}

std::string string_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Merges classes into the job's by digest, keeping the first one's stack.
class Merger {
 public:
  // A class without ranks is none: it is not added.
  void add(int node, const std::string& key, std::vector<int> ranks, std::string where, std::string stack,
           bool python) {
    if (ranks.empty()) return;
    auto [it, fresh] = by_key_.try_emplace(key, classes_.size());
    if (fresh) classes_.push_back({{}, {}, std::move(where), std::move(stack), python});
    JobStackClass& c = classes_[it->second];
    c.ranks.insert(c.ranks.end(), ranks.begin(), ranks.end());
    c.nodes.push_back(node);
  }

  std::vector<JobStackClass> take() {
    for (auto& c : classes_) {
      std::sort(c.ranks.begin(), c.ranks.end());
      c.ranks.erase(std::unique(c.ranks.begin(), c.ranks.end()), c.ranks.end());
      std::sort(c.nodes.begin(), c.nodes.end());
      c.nodes.erase(std::unique(c.nodes.begin(), c.nodes.end()), c.nodes.end());
    }
    std::stable_sort(classes_.begin(), classes_.end(),
                     [](const auto& a, const auto& b) { return a.ranks.front() < b.ranks.front(); });
    return std::move(classes_);
  }

 private:
  std::vector<JobStackClass> classes_;
  std::map<std::string, size_t> by_key_;
};

}  // namespace

std::string JobStackClass::title() const {
  std::string t = (ranks.size() == 1 ? "rank " : "ranks ") + compress_ranks(ranks);
  if (ranks.size() > 1) t += " (" + std::to_string(ranks.size()) + ")";
  t += (nodes.size() == 1 ? " on node " : " on nodes ") + compress_ranks(nodes);
  if (!where.empty()) t += " <- " + where;
  return t;
}

json JobStacks::to_json() const {
  json out = json::array();
  for (const auto& c : classes) {
    out.push_back({{"title", c.title()}, {"ranks", c.ranks}, {"nodes", c.nodes}, {"where", c.where},
                   {"python", c.python}, {"stack", c.stack}});
  }
  return {{"classes", out}};
}

void add_stack_classes(json& share, const std::vector<StackClass>& classes, size_t cap) {
  json out = json::array();
  for (const auto& c : classes) {
    const std::string& stack = c.shown();
    std::string text = stack.size() <= cap ? stack
                                           : stack.substr(0, cap) + "\n... (cut at " + std::to_string(cap) +
                                                 " bytes: the whole is in its node's incident folder)\n";
    out.push_back({{"key", digest_text(c)}, {"ranks", c.ranks}, {"where", c.where},
                   {"stack", std::move(text)}, {"python", !c.python.empty()}});
  }
  share[kShareKey] = std::move(out);
}

JobStacks job_stack_classes(const std::vector<StackClass>& mine, const std::vector<json>& shares, int node_rank) {
  Merger merged;
  for (const auto& c : mine) merged.add(node_rank, digest_text(c), c.ranks, c.where, c.shown(), !c.python.empty());
  for (size_t node = 0; node < shares.size(); ++node) {
    auto theirs = shares[node].is_object() ? shares[node].find(kShareKey) : shares[node].end();
    if (int(node) == node_rank || theirs == shares[node].end() || !theirs->is_array()) continue;
    for (const auto& c : *theirs) {
      if (!c.is_object() || string_of(c, "key").empty()) continue;
      auto python = c.find("python");
      merged.add(int(node), string_of(c, "key"), int_list(c.value("ranks", json())), string_of(c, "where"),
                 string_of(c, "stack"), python != c.end() && python->is_boolean() && python->get<bool>());
    }
  }
  return JobStacks{merged.take()};
}

}  // namespace ccrun::agent

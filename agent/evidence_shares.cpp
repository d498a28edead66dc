// The nodes' shares of a hang's evidence, as the comparing node reads them
// (evidence_shares.h).
#include "evidence_shares.h"

#include <fmt/format.h>

#include "ccrun/rank_progress.h"

namespace ccrun::agent {

using nlohmann::json;

std::vector<json> parse_shares(const std::vector<std::string>& texts) {
  std::vector<json> shares;
  for (const auto& t : texts) {
    json j = t.empty() ? json() : json::parse(t, nullptr, false);
    shares.push_back(j.is_discarded() ? json() : std::move(j));
  }
  return shares;
}

std::vector<int> missing_shares(const std::vector<json>& shares, int node_rank) {
  std::vector<int> missing;
  for (size_t node = 0; node < shares.size(); ++node) {
    if (int(node) != node_rank && !shares[node].is_object()) missing.push_back(int(node));
  }
  return missing;
}

std::string missing_shares_line(const std::vector<int>& nodes, std::chrono::milliseconds waited) {
  if (nodes.empty()) return "";
  bool one = nodes.size() == 1;
  return fmt::format("the evidence of node{} {} did not come within {:.0f}s: {} ranks' stacks and flight "
                     "records are in {} own report",
                     one ? "" : "s", compress_ranks(nodes), double(waited.count()) / 1000, one ? "its" : "their",
                     one ? "its" : "their");
}

}  // namespace ccrun::agent

// Slurm's hostlists and srun variables (see slurm.h).
#include "slurm.h"

#include "ccrun/error.h"

namespace ccrun::launcher {
namespace {

constexpr size_t kMaxHosts = 1 << 20;

// Reads one hostlist item (no top-level commas) starting at column `col0`.
class ItemExpander {
 public:
  ItemExpander(std::string_view item, size_t col0, std::string_view text, const std::string& label)
      : item_(item), col0_(col0), text_(text), label_(label) {}

  std::vector<std::string> expand() {
    std::vector<std::string> out{""};
    for (size_t i = 0; i < item_.size();) {
      if (item_[i] == '[') {
        size_t close = item_.find(']', i);
        if (close == std::string_view::npos) bad(i, "'[' without ']'");
        auto choices = range_list(i + 1, close);
        if (out.size() * choices.size() > kMaxHosts) {
          bad(i, "expands to more than " + std::to_string(kMaxHosts) + " hosts");
        }
        std::vector<std::string> next;
        next.reserve(out.size() * choices.size());
        for (const auto& prefix : out) {
          for (const auto& c : choices) next.push_back(prefix + c);
        }
        out = std::move(next);
        i = close + 1;
      } else {
        size_t j = item_.find('[', i);
        if (j == std::string_view::npos) j = item_.size();
        std::string_view lit = item_.substr(i, j - i);
        for (size_t k = 0; k < lit.size(); ++k) {
          char c = lit[k];
          if (c == ']') bad(i + k, "']' without '['");
          if (c == ' ' || c == '\t' || c == '\n') bad(i + k, "a space in a host name");
        }
        for (auto& o : out) o += lit;
        i = j;
      }
    }
    return out;
  }

 private:
  [[noreturn]] void bad(size_t pos, const std::string& why) const {
    throw ConfigError(label_ + " \"" + std::string(text_) + "\": column " + std::to_string(col0_ + pos) +
                      ": " + why + " (Slurm's hostlist form is name[1-4,7],other)");
  }

  // The bracket's contents, item_[b, e): "01-04,7".
  std::vector<std::string> range_list(size_t b, size_t e) {
    if (b == e) bad(b - 1, "empty brackets");
    std::vector<std::string> out;
    for (size_t s = b; s <= e;) {
      size_t comma = item_.find(',', s);
      if (comma == std::string_view::npos || comma > e) comma = e;
      std::string_view part = item_.substr(s, comma - s);
      if (part.empty()) bad(s, "an empty range");
      size_t dash = part.find('-');
      std::string_view lo = part.substr(0, dash);
      std::string_view hi = dash == std::string_view::npos ? lo : part.substr(dash + 1);
      size_t lo_v = number(lo, s), hi_v = number(hi, dash == std::string_view::npos ? s : s + dash + 1);
      if (hi_v < lo_v) bad(s, "range \"" + std::string(part) + "\" runs backwards");
      if (hi_v - lo_v >= kMaxHosts) bad(s, "range \"" + std::string(part) + "\" is too large");
      for (size_t v = lo_v; v <= hi_v; ++v) {
        std::string digits = std::to_string(v);
        if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
        out.push_back(std::move(digits));
      }
      s = comma + 1;
    }
    return out;
  }

  size_t number(std::string_view digits, size_t pos) const {
    if (digits.empty()) bad(pos, "a range needs numbers on both sides of '-'");
    if (digits.size() > 9) bad(pos, "the number \"" + std::string(digits) + "\" is too long");
    size_t v = 0;
    for (size_t k = 0; k < digits.size(); ++k) {
      char c = digits[k];
      if (c < '0' || c > '9') bad(pos + k, std::string("'") + c + "' in a range; expected digits such as 01-04");
      v = v * 10 + size_t(c - '0');
    }
    return v;
  }

  std::string_view item_;
  size_t col0_;
  std::string_view text_;
  const std::string& label_;
};

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view text, const std::string& label) {
  if (text.empty()) throw ConfigError(label + " is empty; expected hosts such as node[01-04]");
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') --depth;
    if (i < text.size() && (text[i] != ',' || depth > 0)) continue;
    if (i == start) {
      throw ConfigError(label + " \"" + std::string(text) + "\": column " + std::to_string(i + 1) +
                        ": an empty host (two commas, or a comma at an end)");
    }
    auto more = ItemExpander(text.substr(start, i - start), start + 1, text, label).expand();
    if (hosts.size() + more.size() > kMaxHosts) {
      throw ConfigError(label + ": more than " + std::to_string(kMaxHosts) + " hosts");
    }
    hosts.insert(hosts.end(), more.begin(), more.end());
    start = i + 1;
  }
  return hosts;
}

std::map<std::string, Raw> slurm_settings(const Environment& env) {
  std::map<std::string, Raw> out;
  if (!env.get("SLURM_STEP_ID") && !env.get("SLURM_STEPID")) return out;  // not under srun
  auto first_of = [&](std::initializer_list<const char*> names) -> std::optional<Raw> {
    for (const char* n : names) {
      if (auto v = env.get(n); v && !v->empty()) return Raw{*v, n, false};
    }
    return std::nullopt;
  };
  if (auto local = env.get("SLURM_LOCALID"); local && *local != "0") {
    throw ConfigError("SLURM_LOCALID=" + *local +
                      ": srun started more than one ccrun on this node; ccrun starts the node's "
                      "workers itself: use srun --ntasks-per-node=1 (and --nproc-per-node for the "
                      "workers)");
  }
  if (auto n = first_of({"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"})) {
    out["nnodes"] = *n;
  }
  if (auto r = first_of({"SLURM_NODEID"})) out["node_rank"] = *r;
  if (auto list = first_of({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    auto hosts = expand_hostlist(list->value, list->where);
    out["master_addr"] = Raw{hosts.front(), list->where + " (its first host)", false};
  }
  if (auto id = first_of({"SLURM_JOB_ID", "SLURM_JOBID"})) out["rdzv_id"] = *id;
  return out;
}

}  // namespace ccrun::launcher

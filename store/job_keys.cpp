// Taking a store key apart by ccrun's job key layout (include/ccrun/job_keys.h):
// what a standalone store needs to expire finished jobs.
#include "ccrun/job_keys.h"

#include <algorithm>

namespace ccrun {

std::optional<JobKeys::Split> JobKeys::split(std::string_view key) {
  if (!key.starts_with(kRoot)) return std::nullopt;
  size_t slash = key.find('/', kRoot.size());
  if (slash == std::string_view::npos || slash == kRoot.size()) return std::nullopt;
  Split out{key.substr(0, slash + 1)};
  std::string_view rest = key.substr(slash + 1);
  if (rest == "closed") {
    out.done_marker = true;
    return out;
  }
  // round/<digits>/all_exited
  constexpr std::string_view kRound = "round/";
  std::string_view exited = kAllExited;
  if (!rest.starts_with(kRound) || !rest.ends_with(exited)) return out;
  std::string_view digits = rest.substr(kRound.size(), rest.size() - kRound.size() - exited.size());
  out.done_marker = digits.size() > 1 && digits.back() == '/' &&
                    std::all_of(digits.begin(), digits.end() - 1,
                                [](char c) { return c >= '0' && c <= '9'; });
  return out;
}

}  // namespace ccrun

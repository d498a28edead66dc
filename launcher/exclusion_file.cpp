// A host-list job's exclusions on the launching host (see exclusion_file.h).
// [[gnu::cold]]: run only with a host list, out of every launch's text pages.
#include "exclusion_file.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace ccrun::launcher {

namespace fs = std::filesystem;

[[gnu::cold]] fs::path exclusion_file(const Environment& env, const std::string& run_id) {
  fs::path dir;
  if (auto d = env.get("CCRUN_STATE_DIR"); d && !d->empty()) {
    dir = *d;
  } else if (auto x = env.get("XDG_STATE_HOME"); x && !x->empty()) {
    dir = fs::path(*x) / "ccrun";
  } else if (auto h = env.get("HOME"); h && !h->empty()) {
    dir = fs::path(*h) / ".local" / "state" / "ccrun";
  } else {
    return {};
  }
  std::string name = run_id.empty() ? "none" : run_id;
  for (char& c : name) {
    if (c == '/') c = '_';  // one file per id, never a folder
  }
  return dir / "exclusions" / (name + ".json");
}

}  // namespace ccrun::launcher

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

[[gnu::cold]] ExclusionList read_exclusion_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return ExclusionList::from_json(text.str());
}

[[gnu::cold]] std::string record_exclusion(const fs::path& file, const Exclusion& e) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return "cannot make " + file.parent_path().string() + ": " + ec.message();
  ExclusionList list = read_exclusion_file(file);
  list.by_host[e.host] = e;
  fs::path temp = file;
  temp += ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temp);
    out << list.to_json() << "\n";
    if (!out) return "cannot write " + temp.string();
  }
  fs::rename(temp, file, ec);
  if (ec) return "cannot write " + file.string() + ": " + ec.message();
  return "";
}

}  // namespace ccrun::launcher

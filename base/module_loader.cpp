// Finding and loading ccrun's optional modules (see module_loader.h).
#include "module_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "ccrun/error.h"

namespace ccrun {
namespace {

namespace fs = std::filesystem;

// The directories to try, in order (module_loader.h).
std::vector<fs::path> module_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("CCRUN_MODULE_DIR"); env && *env) dirs.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path() / CCRUN_MODULE_DIR_FROM_BINDIR);
  dirs.emplace_back(CCRUN_BUILD_MODULE_DIR);
  dirs.emplace_back(CCRUN_INSTALL_MODULE_DIR);
  return dirs;
}

void* load(const std::string& name) {
  std::string file = "libccrun_" + name + ".so";
  std::string tried;
  for (const fs::path& dir : module_dirs()) {
    fs::path path = dir / file;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      tried += "\n  " + path.string() + ": not there";
      continue;
    }
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* why = ::dlerror();
    tried += "\n  " + path.string() + ": " + (why ? why : "cannot be loaded");
  }
  throw Error("ccrun's module " + file + " is needed here and was not found or not loadable:" +
              tried + "\ninstall it (Debian: the ccrun package holds it) or set CCRUN_MODULE_DIR "
              "to its directory");
}

}  // namespace

std::string module_path(const std::string& name) {
  const std::string file = "libccrun_" + name + ".so";
  for (const fs::path& dir : module_dirs()) {
    std::error_code ec;
    if (fs::exists(dir / file, ec)) return (dir / file).string();
  }
  return "";
}

void* module_symbol(const std::string& name, const char* symbol) {
  static std::mutex mu;
  static std::map<std::string, void*> loaded;
  std::lock_guard lock(mu);
  void*& handle = loaded[name];
  if (!handle) handle = load(name);
  void* address = ::dlsym(handle, symbol);
  if (!address) {
    throw Error("ccrun's module libccrun_" + name + ".so has no " + symbol +
                ": it is from another version of ccrun; reinstall ccrun");
  }
  return address;
}

}  // namespace ccrun

// Signal names and numbers (see include/ccrun/signal_names.h). Lives in the
// store library, the lowest layer, so every binary can use it.
#include "ccrun/signal_names.h"

#include <signal.h>
#include <string.h>

namespace ccrun {

std::string signal_name(int sig) {
  const char* abbrev = sig > 0 && sig < NSIG ? sigabbrev_np(sig) : nullptr;
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

int signal_number(std::string_view name) {
  if (name.substr(0, 3) != "SIG") return 0;
  name.remove_prefix(3);
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev && name == abbrev) return s;
  }
  return 0;
}

}  // namespace ccrun

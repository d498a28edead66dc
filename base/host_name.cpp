// This machine's name (see include/ccrun/host_name.h).
#include "ccrun/host_name.h"

#include <unistd.h>

namespace ccrun {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

}  // namespace ccrun

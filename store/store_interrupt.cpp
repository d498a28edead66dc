// StoreInterrupt: an eventfd that blocked store calls poll beside their
// socket (see include/ccrun/store_interrupt.h).
#include "ccrun/store_interrupt.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "ccrun/error.h"

namespace ccrun::store {

StoreInterrupt::StoreInterrupt() {
  fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd_ < 0) throw Error(std::string("eventfd: ") + std::strerror(errno));
}

StoreInterrupt::~StoreInterrupt() { ::close(fd_); }

void StoreInterrupt::trigger() {
  uint64_t one = 1;
  // Only fails when the counter would overflow: it is non-zero already.
  while (::write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void StoreInterrupt::reset() {
  uint64_t value;
  while (::read(fd_, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

bool StoreInterrupt::triggered() const {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

}  // namespace ccrun::store

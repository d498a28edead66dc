//===- unbound_waits.h - Waiting on gloo's unbound buffers -*- C++ -*-===//
//
// ccrun's own algorithms post several sends and receives on one unbound
// buffer and then wait for all of them; gloo reports a timeout by throwing
// and an abort by returning false, which these turn into an exception too.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>

namespace ccrun::collectives {

inline void wait_recvs(gloo::transport::UnboundBuffer& b, int count, std::chrono::milliseconds timeout) {
  for (int i = 0; i < count; ++i) {
    if (!b.waitRecv(nullptr, timeout)) throw gloo::IoException("receive aborted");
  }
}

inline void wait_sends(gloo::transport::UnboundBuffer& b, int count, std::chrono::milliseconds timeout) {
  for (int i = 0; i < count; ++i) {
    if (!b.waitSend(nullptr, timeout)) throw gloo::IoException("send aborted");
  }
}

}  // namespace ccrun::collectives

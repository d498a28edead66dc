//===- ccrun/event_log_handler.h - --event-log-handler's names --*- C++ -*-===//
//
// torch 2.x's --event-log-handler names a handler of its registry
// (torch/distributed/elastic/events/handlers.py) that receives the
// agent's end-of-run event, one JSON object: "null" drops it, "console"
// writes it to stderr, "dynamic_rendezvous" is torch's rendezvous-events
// handler, also a null one. This is the one name table: the launcher's flag,
// its help and error, and the shell completion read it.
//
//   EventLogHandler h = parse_event_log_handler("console");  // throws ConfigError naming the valid ones
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "ccrun/error.h"
#include "ccrun/name_table.h"

namespace ccrun {

enum class EventLogHandler {
  kNull,               // "null" (torch's default): the event is dropped
  kConsole,            // "console": one JSON line on the agent's stderr
  kDynamicRendezvous,  // "dynamic_rendezvous": a null handler in torch's registry
};

// torch's registry, in its order.
inline constexpr std::array<NamedValue<EventLogHandler>, 3> kEventLogHandlerNames{{
    {"console", EventLogHandler::kConsole},
    {"dynamic_rendezvous", EventLogHandler::kDynamicRendezvous},
    {"null", EventLogHandler::kNull},
}};

// "console, dynamic_rendezvous or null".
inline std::string event_log_handler_names() { return names_text(kEventLogHandlerNames); }

// Throws ConfigError "unknown handler; use console, dynamic_rendezvous or
// null" (the caller adds where it came from).
[[nodiscard]] inline EventLogHandler parse_event_log_handler(std::string_view name) {
  if (const auto* h = find_name(kEventLogHandlerNames, name)) return h->value;
  throw ConfigError("unknown handler; use " + event_log_handler_names());
}

[[nodiscard]] inline std::string_view event_log_handler_name(EventLogHandler handler) {
  return name_of(kEventLogHandlerNames, handler, "null");
}

}  // namespace ccrun

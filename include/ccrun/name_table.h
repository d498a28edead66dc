//===- ccrun/name_table.h - An enum's names, written once -------*- C++ -*-===//
//
// Every enum a user spells by name (rendezvous backends, NUMA binding
// modes, event-log handlers, collectives backends) has one table of
// entries with a `name` and a `value` (NamedValue, or a struct of its own
// when an entry carries more, as NUMA modes carry a help line); these three
// functions read any such table, so the help line, the parser, its error
// and the name printed back cannot disagree:
//
//   enum class Color { kRed, kBlue };
//   constexpr std::array<NamedValue<Color>, 2> kColors{{{"red", Color::kRed},
//                                                       {"blue", Color::kBlue}}};
//   std::string help = names_text(kColors);        // "red or blue"
//   Color c = find_name(kColors, "blue")->value;   // find_name: nullptr for an unknown name
//   std::string_view name = name_of(kColors, c, "?");  // "blue"
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

namespace ccrun {

// One entry of a name table.
template <typename Value>
struct NamedValue {
  std::string_view name;
  Value value;
};

// "a, b or c": the table's names, for help lines and errors.
template <typename Table>
std::string names_text(const Table& table) {
  std::string out;
  size_t i = 0;
  for (const auto& entry : table) {
    out += i == 0 ? "" : i + 1 == std::size(table) ? " or " : ", ";
    out += entry.name;
    ++i;
  }
  return out;
}

// The entry named `name`, or nullptr.
template <typename Table>
const auto* find_name(const Table& table, std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return &entry;
  }
  return static_cast<decltype(&*std::begin(table))>(nullptr);
}

// The first name of `value` (a table may give one value several names), or
// `fallback`.
template <typename Table, typename Value>
std::string_view name_of(const Table& table, Value value, std::string_view fallback) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return fallback;
}

}  // namespace ccrun

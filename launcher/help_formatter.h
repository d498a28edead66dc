//===- help_formatter.h - --help in 100 columns, values named -----*- C++ -*-===//
//
// The help of `ccrun` and `ccrun status`: an option's dashed names only
// (torchrun's underscored spellings work too, and the help says so once),
// its value by name (N, SECONDS, HOST:PORT: Setting's value_name, not
// CLI11's TEXT), its default after its text, and the text wrapped so that
// no line passes 100 columns. The text starts two spaces at least after
// the names, or on the next line when they leave no room: help2man, which
// makes the man page from the help, takes two spaces as the end of the
// names.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace ccrun::launcher {

class HelpFormatter : public CLI::Formatter {
 public:
  // The dashed names only: torchrun's underscored spellings work too, and
  // --help says so once, not on every line.
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return opt->get_name(true, false);
    std::string names;
    for (const auto& n : opt->get_snames()) names += (names.empty() ? "-" : ",-") + n;
    for (const auto& n : opt->get_lnames()) {
      if (n.find('_') == std::string::npos) names += (names.empty() ? "--" : ",--") + n;
    }
    return names;
  }

  // The value's name (a switch has none); its default goes with the text.
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return "";
    return " " + opt->get_type_name();
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string text = opt->get_description();
    const std::string& def = opt->get_default_str();
    if (opt->get_type_size() != 0 && !def.empty()) text += " (default: " + def + ")";
    if (opt->get_required()) text += " (required)";
    return text;
  }

  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    std::string names = make_option_name(opt, is_positional) + make_option_opts(opt);
    std::vector<std::string> lines = wrap(make_option_desc(opt));
    std::ostringstream out;
    size_t column = get_column_width();
    bool same_line = names.size() + 4 <= column;  // "  names  text"
    out << "  " << names;
    for (size_t i = 0; i < lines.size(); ++i) {
      size_t at = i == 0 && same_line ? names.size() + 2 : 0;
      if (at == 0) out << "\n";
      out << std::string(column - at, ' ') << lines[i];
    }
    out << "\n";
    return out.str();
  }

 private:
  static constexpr size_t kWidth = 100;  // every line of --help fits in it

  // `text` in lines that fit between the column and kWidth, at spaces.
  std::vector<std::string> wrap(const std::string& text) const {
    size_t room = kWidth - get_column_width();
    std::vector<std::string> lines;
    std::istringstream words(text);
    std::string line;
    for (std::string w; words >> w;) {
      if (!line.empty() && line.size() + 1 + w.size() > room) {
        lines.push_back(line);
        line.clear();
      }
      line += (line.empty() ? "" : " ") + w;
    }
    if (!line.empty()) lines.push_back(line);
    return lines;
  }
};

}  // namespace ccrun::launcher

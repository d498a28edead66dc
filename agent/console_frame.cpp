// Worker lines framed for the launching ccrun's console (see ccrun/console_frame.h).
#include "ccrun/console_frame.h"


#include <charconv>

namespace ccrun::agent {
namespace {

void append_escaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
}

std::optional<std::string> unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) return std::nullopt;
    switch (text[i]) {
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      default: return std::nullopt;
    }
  }
  return out;
}

// An integer of `text` up to the next space, which it consumes.
std::optional<int> take_int(std::string_view& text) {
  size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + space, value);
  if (ec != std::errc() || end != text.data() + space) return std::nullopt;
  text.remove_prefix(space + 1);
  return value;
}

class FramingSink final : public LineSink {
 public:
  explicit FramingSink(int fd) : fd_(fd) {}

  void submit(int rank, int local_rank, const std::string& text) override {
    std::string out;
    for (auto& frame : frame_console_unit({rank, local_rank, text})) out += frame + '\n';
    (void)write_all(fd_, out);  // a closed pipe must not stop the job
  }

 private:
  int fd_;
};

}  // namespace

std::vector<std::string> frame_console_unit(const ConsoleUnit& unit) {
  std::vector<std::string> frames;
  std::string_view text = unit.text;
  do {
    std::string_view part = text.substr(0, kMaxFramedText);
    text.remove_prefix(part.size());
    std::string f(kConsoleUnitMarker);
    f += std::to_string(unit.rank) + ' ' + std::to_string(unit.local_rank) + ' ';
    append_escaped(f, part);
    frames.push_back(std::move(f));
  } while (!text.empty());
  return frames;
}

std::optional<ConsoleUnit> parse_console_frame(std::string_view line) {
  if (line.substr(0, kConsoleUnitMarker.size()) != kConsoleUnitMarker) return std::nullopt;
  line.remove_prefix(kConsoleUnitMarker.size());
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  auto rank = take_int(line);
  auto local_rank = rank ? take_int(line) : std::nullopt;
  if (!local_rank) return std::nullopt;
  auto text = unescape(line);
  if (!text) return std::nullopt;
  return ConsoleUnit{*rank, *local_rank, std::move(*text)};
}

std::shared_ptr<LineSink> make_framing_sink(int fd) { return std::make_shared<FramingSink>(fd); }

}  // namespace ccrun::agent

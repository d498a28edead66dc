// Worker lines framed for the launching ccrun's console (see ccrun/console_frame.h).
#include "ccrun/console_frame.h"


#include <charconv>

namespace ccrun::agent {
namespace {

void append_escaped(std::string& out, std::string_view text) {
  if (text.find_first_of("\\\n\r") == std::string_view::npos) {
    out += text;  // most lines: nothing to escape
    return;
  }
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

// The frames of one unit, each ending in '\n'.
void append_frames(std::string& out, int rank, int local_rank, std::string_view text) {
  do {
    std::string_view part = text.substr(0, kMaxFramedText);
    text.remove_prefix(part.size());
    out += kConsoleUnitMarker;
    out += std::to_string(rank);
    out += ' ';
    out += std::to_string(local_rank);
    out += ' ';
    append_escaped(out, part);
    out += '\n';
  } while (!text.empty());
}

class FramingSink final : public LineSink {
 public:
  FramingSink(boost::asio::io_context& io, int fd) : out_(io, fd) {}

  void submit(int rank, int local_rank, std::string_view text) override {
    frames_.clear();
    append_frames(frames_, rank, local_rank, text);
    out_.append(frames_);
  }
  void flush_all() override { out_.flush(); }

 private:
  std::string frames_;  // reused: no allocation a line
  BatchedWriter out_;   // a closed pipe must not stop the job: its errors are ignored
};

}  // namespace

std::vector<std::string> frame_console_unit(const ConsoleUnit& unit) {
  std::string all;
  append_frames(all, unit.rank, unit.local_rank, unit.text);
  std::vector<std::string> frames;
  for (size_t start = 0; start < all.size();) {  // escaped: a '\n' only ends a frame
    size_t nl = all.find('\n', start);
    frames.emplace_back(all, start, nl - start);
    start = nl + 1;
  }
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

std::shared_ptr<LineSink> make_framing_sink(boost::asio::io_context& io, int fd) {
  return std::make_shared<FramingSink>(io, fd);
}

}  // namespace ccrun::agent

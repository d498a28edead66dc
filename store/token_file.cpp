// The token-file rule (see include/ccrun/token_file.h).
#include "ccrun/token_file.h"

#include <fstream>
#include <iterator>
#include <sstream>

#include "ccrun/error.h"

namespace ccrun::store {
namespace {

constexpr std::string_view kWhitespace = " \t\r\n\v\f";

std::string strip_trailing(std::string s) {
  s.erase(s.find_last_not_of(kWhitespace) + 1);
  return s;
}

}  // namespace

std::string read_token_file(const std::string& path, std::string_view source) {
  const std::string where = std::string(source) + " \"" + path + "\": ";
  std::ifstream in(path, std::ios::binary);
  std::string content(std::istreambuf_iterator<char>(in), {});
  if (!in.is_open() || in.bad()) {
    throw ConfigError(where + "cannot be read; check the path and its permissions");
  }
  if (content.empty()) {
    throw ConfigError(where + "the file is empty; put the store's shared secret on its first line");
  }
  std::istringstream text(content);
  std::string token;
  std::getline(text, token);
  token = strip_trailing(std::move(token));
  if (token.empty()) {
    throw ConfigError(where + "the first line is empty; put the store's shared secret on it");
  }
  for (std::string line; std::getline(text, line);) {
    if (line.find_first_not_of(kWhitespace) != std::string::npos) {
      throw ConfigError(where + "holds more than one line; put the shared secret alone on "
                        "the first line (the daemon and every client read that line only)");
    }
  }
  return token;
}

}  // namespace ccrun::store

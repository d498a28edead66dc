// The token-file rule (see include/ccrun/token_file.h).
#include "ccrun/token_file.h"

#include <cerrno>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>

#include "ccrun/error.h"

namespace ccrun::store {
namespace {

constexpr std::string_view kWhitespace = " \t\r\n\v\f";

std::string strip_trailing(std::string s) {
  s.erase(s.find_last_not_of(kWhitespace) + 1);
  return s;
}

// The whole file; throws ConfigError (starting with `where`) naming the
// system's reason when it cannot be read. libstdc++ reports a read error
// (a directory: EISDIR) by throwing from the stream buffer, so the read is
// guarded as well as the open.
std::string read_whole(const std::string& path, const std::string& where) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(where + "is a directory; give the file that holds the secret");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    throw ConfigError(where + "cannot be opened (" + std::strerror(errno) +
                      "); check the path and its permissions");
  }
  const ConfigError unreadable(where + "cannot be read; check that it is a plain file");
  std::string content;
  try {
    content.assign(std::istreambuf_iterator<char>(in), {});
  } catch (const std::ios_base::failure&) {
    throw unreadable;
  }
  if (in.bad()) throw unreadable;
  return content;
}

}  // namespace

std::string read_token_file(const std::string& path, std::string_view source) {
  const std::string where = std::string(source) + " \"" + path + "\": ";
  std::string content = read_whole(path, where);
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

// read_token_file: the one rule by which ccrun-rendezvous --token-file and
// the clients (CCRUN_STORE_TOKEN_FILE) read a store's shared secret.
#include "ccrun/token_file.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "ccrun/error.h"
#include "ccrun/store_address.h"

using ccrun::ConfigError;
using ccrun::store::read_token_file;

namespace {

// A file holding `text`, removed at the end of the scope.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text)
      : path("/tmp/ccrun-token-test-" + std::to_string(getpid()) + "-" +
             std::to_string(counter()++)) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

TEST_CASE("token file: the first line, trailing whitespace stripped", "[token_file]") {
  CHECK(read_token_file(TempFile("secret").path, "--token-file") == "secret");
  CHECK(read_token_file(TempFile("secret\n").path, "--token-file") == "secret");
  CHECK(read_token_file(TempFile("secret \n").path, "--token-file") == "secret");
  CHECK(read_token_file(TempFile("secret\t\r\n\n  \n").path, "--token-file") == "secret");
  CHECK(read_token_file(TempFile(" se cret\n").path, "--token-file") == " se cret");
}

TEST_CASE("token file: two lines of text are an error naming the file", "[token_file]") {
  TempFile f("secret\nother\n");
  CHECK_THROWS_AS(read_token_file(f.path, "--token-file"), ConfigError);
  CHECK_THROWS_WITH(read_token_file(f.path, "--token-file"),
                    Catch::Contains("--token-file \"" + f.path + "\"") &&
                        Catch::Contains("more than one line"));
}

TEST_CASE("token file: an empty file or a blank first line is an error", "[token_file]") {
  TempFile empty("");
  CHECK_THROWS_WITH(read_token_file(empty.path, "CCRUN_STORE_TOKEN_FILE"),
                    Catch::Contains("CCRUN_STORE_TOKEN_FILE \"" + empty.path + "\"") &&
                        Catch::Contains("the file is empty"));
  TempFile blank(" \nsecret\n");
  CHECK_THROWS_WITH(read_token_file(blank.path, "--token-file"),
                    Catch::Contains("first line is empty"));
}

TEST_CASE("token file: a missing file is an error naming it", "[token_file]") {
  const std::string path = "/nonexistent-dir/ccrun-token";
  CHECK_THROWS_AS(read_token_file(path, "--token-file"), ConfigError);
  CHECK_THROWS_WITH(read_token_file(path, "--token-file"),
                    Catch::Contains(path) && Catch::Contains("cannot be opened"));
}

TEST_CASE("token file: CCRUN_STORE_TOKEN_FILE is read by the same rule", "[token_file]") {
  TempFile f("secret \n");
  setenv("CCRUN_STORE_TOKEN_FILE", f.path.c_str(), 1);
  CHECK(ccrun::store::store_token_from_env() == "secret");
  unsetenv("CCRUN_STORE_TOKEN_FILE");
  CHECK(ccrun::store::store_token_from_env().empty());
}

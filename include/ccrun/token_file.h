//===- ccrun/token_file.h - The store's shared secret, read from a file -*- C++ -*-//
//
// A protected store (ccrun-rendezvous --token-file, or an agent's store with
// CCRUN_STORE_TOKEN_FILE) and every client of it read the same file, so they
// read it by one rule, here:
//
//   the secret is the file's first line, trailing whitespace (spaces, tabs,
//   '\r') stripped; a blank first line, or anything but whitespace on a
//   later line, is an error naming the file.
//
// So "s3cret\n", "s3cret \n" and "s3cret\r\n" all hold the secret "s3cret",
// and a file of two secrets is refused rather than read one way by the
// daemon and another by its clients.
//
//   std::string token = read_token_file("/etc/ccrun/token", "--token-file");
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

namespace ccrun::store {

// The secret in the file at `path`, by the rule above. `source` says where
// the path came from ("--token-file", "CCRUN_STORE_TOKEN_FILE") and starts
// every error. Throws ConfigError when the file cannot be read, is empty or
// its first line blank, or holds more than one line of text.
[[nodiscard]] std::string read_token_file(const std::string& path, std::string_view source);

}  // namespace ccrun::store

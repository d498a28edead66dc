// store_cli: runs Store operations given on the command line through
// TcpStore, one result line each. Used by the torch interoperability tests.
//
//   store_cli --port 29400 --protocol torch113 set k v get k add n 5 num_keys
#include <CLI/CLI.hpp>

#include <iostream>

#include "ccrun/error.h"
#include "ccrun/tcp_store.h"

using namespace ccrun::store;

int main(int argc, char** argv) {
  CLI::App app{"Run Store operations against a TCP store"};
  TcpStoreOptions opts;
  std::string protocol = "torch2";
  double timeout_s = 10;
  std::vector<std::string> ops;
  app.add_option("--host", opts.host);
  app.add_option("--port", opts.port)->required();
  app.add_option("--protocol", protocol)->check(CLI::IsMember({"torch2", "torch113"}));
  app.add_option("--timeout", timeout_s, "seconds");
  app.add_option("--token", opts.token);
  app.add_option("ops", ops, "op args... (set k v | get k | add k n | compare_set k e d | "
                             "check k | wait k | delete k | num_keys | ping)");
  CLI11_PARSE(app, argc, argv);
  opts.protocol = protocol == "torch113" ? TcpStoreOptions::Protocol::kTorch113
                                         : TcpStoreOptions::Protocol::kTorch2;
  opts.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  opts.connect_timeout = opts.timeout;
  try {
    TcpStore store(opts);
    size_t i = 0;
    auto arg = [&]() -> std::string {
      if (i >= ops.size()) throw ccrun::ConfigError("missing argument");
      return ops[i++];
    };
    while (i < ops.size()) {
      std::string op = arg();
      if (op == "set") {
        std::string k = arg(), v = arg();
        store.set(k, v);
        std::cout << "ok\n";
      } else if (op == "get") {
        std::cout << store.get(arg()) << "\n";
      } else if (op == "add") {
        std::string k = arg();
        std::cout << store.add(k, std::stoll(arg())) << "\n";
      } else if (op == "compare_set") {
        std::string k = arg(), e = arg(), d = arg();
        std::cout << store.compare_set(k, e == "-" ? "" : e, d) << "\n";
      } else if (op == "check") {
        std::cout << (store.check({arg()}) ? "true" : "false") << "\n";
      } else if (op == "wait") {
        store.wait({arg()});
        std::cout << "ok\n";
      } else if (op == "delete") {
        std::cout << (store.delete_key(arg()) ? "true" : "false") << "\n";
      } else if (op == "num_keys") {
        std::cout << store.num_keys() << "\n";
      } else if (op == "ping") {
        store.ping();
        std::cout << "ok\n";
      } else {
        std::cerr << "store_cli: unknown op \"" << op << "\"\n";
        return 2;
      }
      std::cout.flush();
    }
  } catch (const ccrun::TimeoutError& e) {
    std::cout << "timeout: " << e.what() << "\n";
    return 3;
  } catch (const ccrun::Error& e) {
    std::cerr << "store_cli: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// ccrun's optional modules (base/module_loader.h): found in the build tree,
// and a missing one is an error naming the paths tried and the fix.
#include "module_loader.h"

#include <catch2/catch.hpp>

#include "ccrun/error.h"
#include "etcd_tls.h"

using ccrun::module_symbol;

TEST_CASE("a module of the build is found and gives its entry point", "[module_loader]") {
  CHECK(module_symbol("etcd_tls", ccrun::store::etcd::kMakeTlsClientSymbol) != nullptr);
  // Loaded once: the same address again.
  CHECK(module_symbol("etcd_tls", ccrun::store::etcd::kMakeTlsClientSymbol) ==
        module_symbol("etcd_tls", ccrun::store::etcd::kMakeTlsClientSymbol));
}

TEST_CASE("a missing module or symbol names what was tried and the fix", "[module_loader]") {
  CHECK_THROWS_WITH(module_symbol("no_such", "f"),
                    Catch::Contains("libccrun_no_such.so") && Catch::Contains("not there") &&
                        Catch::Contains("CCRUN_MODULE_DIR"));
  CHECK_THROWS_WITH(module_symbol("etcd_tls", "no_such_symbol"),
                    Catch::Contains("has no no_such_symbol") && Catch::Contains("reinstall"));
}

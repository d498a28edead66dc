//===- module_loader.h - ccrun's optional modules, loaded on first use -*- C++ -*-===//
//
// Parts of ccrun that need a large library most jobs never use live in
// modules, shared objects loaded the first time a job uses them: TLS to etcd
// (libccrun_etcd_tls.so, OpenSSL), NUMA binding (libccrun_numa.so, hwloc)
// and the collectives' MPI group (libccrun_mpi_group.so, libmpich; loaded by
// the worker that asks for backend "mpi"). A plain job's launcher then maps
// none of these libraries: loading libcrypto and libssl alone cost each
// launch about 3 ms and 3 MiB resident, hwloc and libudev about 1 MiB
// (docs/benchmarks.md, "What a launch costs"); and a worker that links
// ccrun's collectives names no MPI library, so `ccrun` starts it without --mpi.
//
//   using Make = TlsClient* (*)(const EtcdStoreOptions*);
//   auto make = reinterpret_cast<Make>(module_symbol("etcd_tls", "ccrun_etcd_tls_client"));
//
// A module is looked for, in order, in $CCRUN_MODULE_DIR, beside the running
// program as installed (<bindir>/../<libdir>/ccrun, so an unpacked package or
// a moved prefix works), in the build tree, and in the configured install
// directory (<prefix>/<libdir>/ccrun, for programs that link ccrun's
// libraries). A module is loaded once and stays loaded.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace ccrun {

// The address of `symbol` in module `name` (libccrun_<name>.so), loading it
// on first use. Throws ccrun::Error naming every path tried, dlerror's
// reason, and the fix (install the package that holds it, or set
// CCRUN_MODULE_DIR).
void* module_symbol(const std::string& name, const char* symbol);

// The path of module `name` (libccrun_<name>.so) in the first directory
// above that holds it, or "" when none does: for a module that ccrun does
// not load but hands to its workers (--mpi preloads libccrun_mpi_progress.so).
std::string module_path(const std::string& name);

}  // namespace ccrun

// Which MPI a program links (launcher/mpi_program.h): the libraries that
// tell each MPI, the needed libraries of a real ELF file, and the
// refusals a job spec gets.
#include "mpi_program.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <random>

using namespace ccrun;
using namespace ccrun::launcher;

TEST_CASE("an MPI is told by the libraries a program needs") {
  using V = std::vector<std::string>;
  CHECK(mpi_of_libraries(V{"libc.so.6", "libm.so.6"}).family == MpiFamily::kNone);
  CHECK(mpi_of_libraries(V{"libmpi.so.12", "libc.so.6"}).family == MpiFamily::kMpich);
  CHECK(mpi_of_libraries(V{"libmpich.so.12"}).family == MpiFamily::kMpich);
  CHECK(mpi_of_libraries(V{"libmpi.so.40"}).family == MpiFamily::kOpenMpi);
  CHECK(mpi_of_libraries(V{"libmpi.so.20"}).family == MpiFamily::kOpenMpi);
  CHECK(mpi_of_libraries(V{"libopen-pal.so.80"}).family == MpiFamily::kOpenMpi);
  // Open MPI's runtime beside an MPICH name: Open MPI's world is the one it needs.
  auto both = mpi_of_libraries(V{"libmpi.so.12", "libopen-rte.so.40"});
  CHECK(both.family == MpiFamily::kOpenMpi);
  CHECK(both.library == "libopen-rte.so.40");
  CHECK(mpi_of_libraries(V{"libmpiwrap.so"}).family == MpiFamily::kNone);
}

TEST_CASE("a real ELF file's needed libraries are read, and other files have none") {
  auto sh = elf_needed_libraries("/bin/sh");
  CHECK(std::find(sh.begin(), sh.end(), "libc.so.6") != sh.end());
  std::string text = "/tmp/ccrun-mpi-program-test.txt";
  std::ofstream(text) << "#!/bin/sh\necho not an ELF file\n";
  CHECK(elf_needed_libraries(text).empty());
  std::ofstream(text) << "\x7f" "ELF";  // a cut header
  CHECK(elf_needed_libraries(text).empty());
  CHECK(elf_needed_libraries("/no/such/file").empty());
  std::remove(text.c_str());
}

TEST_CASE("a program that needs no MPI, or runs as one rank, is left alone") {
  JobSpec spec;
  spec.nproc_per_node = 4;
  spec.entrypoint = {"sh", "-c", "true"};
  CHECK(mpi_program_problem(spec).empty());
  spec.entrypoint = {"/no/such/program"};
  CHECK(mpi_program_problem(spec).empty());  // another node's to check
}

TEST_CASE("a damaged ELF file is read without a fault") {
  // Bytes of a real ELF file changed at random, in its headers and anywhere,
  // or the file cut short: read as far as it holds, never past it (the
  // sanitizer build runs this).
  std::ifstream in("/bin/sh", std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(good.size() > 4096);
  std::mt19937 rng(20261128);
  std::string path = "/tmp/ccrun-mpi-program-damaged.bin";
  for (int i = 0; i < 300; ++i) {
    std::string bad = good;
    for (int f = 0, n = 1 + int(rng() % 16); f < n; ++f) {
      size_t span = rng() % 2 ? 128 : bad.size();
      bad[rng() % span] = char(rng());
    }
    if (rng() % 5 == 0) bad.resize(rng() % bad.size());
    std::ofstream(path, std::ios::binary) << bad;
    (void)elf_needed_libraries(path);
  }
  std::remove(path.c_str());
}

// Which MPI a program links, before it is launched (see mpi_program.h).
#include "mpi_program.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ccrun::launcher {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Open MPI's libraries: its libmpi's sonames (.so.20 for 2.x and 3.x, .so.40
// for 4.x and 5.x) and its runtime's.
[[gnu::cold]] bool open_mpi_library(const std::string& name) {
  return starts_with(name, "libmpi.so.20") || starts_with(name, "libmpi.so.40") ||
         starts_with(name, "libopen-pal.so") || starts_with(name, "libopen-rte.so") ||
         starts_with(name, "libmpi_mpifh.so") || starts_with(name, "libmpi_cxx.so.40");
}

// The MPICH ABI's: MPICH, Intel MPI and MVAPICH all ship libmpi.so.12.
[[gnu::cold]] bool mpich_library(const std::string& name) {
  return starts_with(name, "libmpich.so") || starts_with(name, "libmpi.so.12") ||
         starts_with(name, "libmpichcxx.so") || starts_with(name, "libmpifort.so.12");
}

// A read-only mapping of a whole file, unmapped when it goes.
struct Mapped {
  const unsigned char* data = nullptr;
  size_t size = 0;
  explicit Mapped(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) data = static_cast<const unsigned char*>(p), size = size_t(st.st_size);
    }
    ::close(fd);
  }
  ~Mapped() {
    if (data) ::munmap(const_cast<unsigned char*>(data), size);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  bool holds(uint64_t offset, uint64_t length) const {
    return offset <= size && length <= size - offset;
  }
};

// One `T` at `offset` of the file, copied out (an offset in a damaged file
// may be misaligned); false when the file is too short for it.
template <typename T>
bool read_at(const Mapped& m, uint64_t offset, T& out) {
  if (!m.holds(offset, sizeof(T))) return false;
  std::memcpy(&out, m.data + offset, sizeof(T));
  return true;
}

// The header of a 64-bit ELF file with section headers it can hold.
bool elf_header(const Mapped& m, Elf64_Ehdr& eh) {
  return read_at(m, 0, eh) && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
         eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_shentsize == sizeof(Elf64_Shdr) &&
         m.holds(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr));
}

// The names the .dynamic section `dyn` needs, from its string table.
[[gnu::cold]] std::vector<std::string> needed_of(const Mapped& m, const Elf64_Shdr& dyn, const Elf64_Shdr& strtab) {
  std::vector<std::string> out;
  if (!m.holds(dyn.sh_offset, dyn.sh_size) || !m.holds(strtab.sh_offset, strtab.sh_size)) return out;
  const char* strings = reinterpret_cast<const char*>(m.data + strtab.sh_offset);
  for (uint64_t i = 0; i < dyn.sh_size / sizeof(Elf64_Dyn); ++i) {
    Elf64_Dyn d{};
    if (!read_at(m, dyn.sh_offset + i * sizeof(Elf64_Dyn), d) || d.d_tag == DT_NULL) break;
    if (d.d_tag != DT_NEEDED || d.d_un.d_val >= strtab.sh_size) continue;
    const char* name = strings + d.d_un.d_val;
    out.emplace_back(name, strnlen(name, strtab.sh_size - d.d_un.d_val));
  }
  return out;
}

// `name` as execvp would find it: itself when it holds a '/', else the
// first executable file of that name on PATH; "" when none.
[[gnu::cold]] std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

}  // namespace

[[gnu::cold]] MpiLink mpi_of_libraries(const std::vector<std::string>& needed) {
  for (const auto& n : needed) {
    if (open_mpi_library(n)) return {MpiFamily::kOpenMpi, n};
  }
  for (const auto& n : needed) {
    if (mpich_library(n)) return {MpiFamily::kMpich, n};
  }
  return {};
}

[[gnu::cold]] std::vector<std::string> elf_needed_libraries(const std::string& path) {
  Mapped m(path);
  Elf64_Ehdr eh{};
  if (!m.data || !elf_header(m, eh)) return {};
  auto section = [&](uint64_t i, Elf64_Shdr& sh) {
    return i < eh.e_shnum && read_at(m, eh.e_shoff + i * sizeof(Elf64_Shdr), sh);
  };
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr dyn{}, strtab{};
    if (!section(i, dyn) || dyn.sh_type != SHT_DYNAMIC) continue;
    return section(dyn.sh_link, strtab) ? needed_of(m, dyn, strtab) : std::vector<std::string>{};
  }
  return {};
}

[[gnu::cold]] std::string mpi_program_problem(const JobSpec& spec) {
  bool one_rank = spec.nproc_per_node <= 1 && spec.max_nodes <= 1;
  if (spec.entrypoint.empty() || one_rank) return "";
  std::string path = on_path(spec.entrypoint[0]);
  if (path.empty()) return "";
  MpiLink mpi = mpi_of_libraries(elf_needed_libraries(path));
  const std::string& prog = spec.entrypoint[0];
  if (mpi.family == MpiFamily::kOpenMpi) {
    return prog + " links Open MPI (" + mpi.library +
           "), which takes its world from a PMIx server, and ccrun serves PMI-1 (--mpi) to "
           "MPICH-family MPIs only: build it with MPICH's mpicc (libmpich-dev), or launch it "
           "with Open MPI's mpirun (docs/mpi.md)";
  }
  if (mpi.family == MpiFamily::kMpich && !spec.mpi) {
    return prog + " links an MPI of the MPICH family (" + mpi.library +
           "): without --mpi each of its ranks would be an MPI world of its own; add --mpi "
           "(mpi: true in a job file, PET_MPI=1) so that they form one MPI_COMM_WORLD "
           "(docs/mpi.md)";
  }
  return "";
}

}  // namespace ccrun::launcher

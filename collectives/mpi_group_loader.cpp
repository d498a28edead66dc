// make_mpi_group: loads the mpi_group module (libccrun_mpi_group.so, see
// mpi_group.h) and asks it for the world group. In builds without MPI
// (CCRUN_WITH_MPI=OFF, or no MPI found when the build was configured) there
// is no module: the "mpi" backend's name parses everywhere, and asking for
// it here says what to install.
#include "mpi_group.h"

#include "module_loader.h"

namespace ccrun::collectives {

std::shared_ptr<ProcessGroup> make_mpi_group(int rank, int size, std::chrono::milliseconds timeout,
                                             std::shared_ptr<GroupProgress> progress) {
#if CCRUN_HAVE_MPI
  MakeMpiGroup make = nullptr;
  try {
    make = reinterpret_cast<MakeMpiGroup>(module_symbol("mpi_group", kMakeMpiGroupSymbol));
  } catch (const Error& e) {
    // module_symbol's message names every path tried and the fix; say who needed it.
    throw Error(std::string("init_process_group: backend \"mpi\" needs MPI, which only ccrun's "
                            "mpi_group module links: ") + e.what());
  }
  MpiGroupArgs args{rank, size, timeout, std::move(progress)};
  return std::shared_ptr<ProcessGroup>(make(&args));
#else
  (void)rank, (void)size, (void)timeout, (void)progress;
  throw NotSupportedError("init_process_group: backend \"mpi\": this build has no MPI; rebuild "
                          "with libmpich-dev installed (CCRUN_WITH_MPI=AUTO or ON), or use "
                          "\"gloo\"");
#endif
}

}  // namespace ccrun::collectives

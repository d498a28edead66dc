// make_mpi_group in builds without MPI (CCRUN_WITH_MPI=OFF, or no MPI found
// when the build was configured): the "mpi" backend's name parses
// everywhere, and asking for it here says what to install.
#include "mpi_group.h"

namespace ccrun::collectives {

std::shared_ptr<ProcessGroup> make_mpi_group(int, int, std::chrono::milliseconds,
                                             std::shared_ptr<GroupProgress>) {
  throw NotSupportedError("init_process_group: backend \"mpi\": this build has no MPI; rebuild "
                          "with libmpich-dev installed (CCRUN_WITH_MPI=AUTO or ON), or use "
                          "\"gloo\"");
}

}  // namespace ccrun::collectives

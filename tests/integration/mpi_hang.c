/* An MPI program for the hang verdicts of --mpi workers (test_mpi.py), as
 * its ranks report their calls through libccrun_mpi_progress.so: STEPS
 * all-reduces of one long over MPI_COMM_WORLD, then MPI_Finalize.
 *   SLEEP_RANK=<r> SLEEP_BEFORE=<n> [SLEEP_S=<s>]: rank r sleeps s seconds
 *     (default 300) before its n-th all-reduce, which the others wait in;
 *   DESYNC_RANK=<r> DESYNC_AT=<n>: rank r calls MPI_Bcast (root 0) as its
 *     n-th call where the others call MPI_Allreduce;
 *   PAIRS=1: the calls go to a communicator of each pair of ranks ({0,1},
 *     {2,3}, ...: MPI_Comm_split), not MPI_COMM_WORLD.
 * It prints "mpi hang rank <r> done <steps>" when it gets to the end. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

/* Call `n` (from 1) of this rank: an all-reduce, or what the fault makes it. */
static void call(MPI_Comm comm, int rank, int n) {
  long mine = rank + 1, sum = 0;
  if (rank == env_int("SLEEP_RANK", -1) && n == env_int("SLEEP_BEFORE", -1)) {
    sleep((unsigned)env_int("SLEEP_S", 300));
  }
  if (rank == env_int("DESYNC_RANK", -1) && n == env_int("DESYNC_AT", -1)) {
    MPI_Bcast(&mine, 1, MPI_LONG, 0, comm);
    return;
  }
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm comm = MPI_COMM_WORLD;
  if (env_int("PAIRS", 0)) MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &comm);
  int steps = env_int("STEPS", 40);
  for (int n = 1; n <= steps; ++n) call(comm, rank, n);
  if (comm != MPI_COMM_WORLD) MPI_Comm_free(&comm);
  printf("mpi hang rank %d done %d\n", rank, steps);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}

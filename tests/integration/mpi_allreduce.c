/* An MPI program for ccrun's --mpi tests (test_mpi.py): every rank checks
 * that MPI_COMM_WORLD is ccrun's world (its rank is $RANK, its size
 * $WORLD_SIZE), all-reduces rank+1 and checks the sum, and prints one line.
 * MPI_ABORT_RANK=<r> makes rank r call MPI_Abort(MPI_COMM_WORLD, 7) after
 * the all-reduce; FAIL_RANK=<r> makes rank r exit 1 before MPI_Init on the
 * first attempt (TORCHELASTIC_RESTART_COUNT=0). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

int main(int argc, char** argv) {
  int attempt = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  if (attempt == 0 && env_int("FAIL_RANK", -1) == env_int("RANK", -2)) {
    fprintf(stderr, "rank %d fails on purpose\n", env_int("RANK", -1));
    return 1;
  }
  MPI_Init(&argc, &argv);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Under mpiexec (a timing baseline) there is no RANK to compare with. */
  int ccrun = getenv("RANK") != NULL;
  if (ccrun && (rank != env_int("RANK", -1) || size != env_int("WORLD_SIZE", -1))) {
    fprintf(stderr, "MPI rank %d size %d, ccrun RANK %s WORLD_SIZE %s\n", rank, size,
            getenv("RANK"), getenv("WORLD_SIZE"));
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  long want = (long)size * (size + 1) / 2;
  if (env_int("MPI_ABORT_RANK", -1) == rank) MPI_Abort(MPI_COMM_WORLD, 7);
  printf("mpi rank %d size %d sum %ld attempt %d %s\n", rank, size, sum, attempt,
         sum == want ? "ok" : "WRONG");
  fflush(stdout);
  MPI_Finalize();
  return sum == want ? 0 : 2;
}

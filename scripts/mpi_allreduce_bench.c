/* The time of an 8-byte MPI_Allreduce (one double), for
 * scripts/bench-mpi-progress.sh: after a warm-up, BATCHES batches of
 * BATCH calls; rank 0 prints one JSON line with the median batch's time per
 * call, and the fastest, in ns. Usage: mpi_allreduce_bench [BATCHES [BATCH]]. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Per-call ns of `batches` batches of `batch` all-reduces each. */
static void measure(double* per_call, int batches, int batch) {
  double in = 1.0, out = 0.0;
  for (int b = 0; b < batches; ++b) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns();
    for (int i = 0; i < batch; ++i) MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    per_call[b] = (now_ns() - t0) / batch;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int batches = argc > 1 ? atoi(argv[1]) : 200;
  int batch = argc > 2 ? atoi(argv[2]) : 1000;
  double* per_call = malloc(sizeof(double) * (size_t)batches);
  measure(per_call, batches / 10 + 1, batch); /* warm-up */
  measure(per_call, batches, batch);
  qsort(per_call, (size_t)batches, sizeof(double), by_value);
  if (rank == 0) {
    printf("{\"ranks\": %d, \"calls\": %d, \"median_ns\": %.1f, \"min_ns\": %.1f}\n", size,
           batches * batch, per_call[batches / 2], per_call[0]);
  }
  free(per_call);
  MPI_Finalize();
  return 0;
}

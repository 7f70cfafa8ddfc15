// mpi_allreduce: per-call time of MPI_Allreduce(fp32, sum) for the sizes given
// (median of 5 samples, each the slowest rank's mean over the iterations).
// Built and run by docs/benchmarks/tcp-lean-run.sh.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  int samples = 5;
  for (int a = 1; a < argc; a++) {
    long bytes = atol(argv[a]); long n = bytes / 4;
    float *s = malloc(bytes), *r = malloc(bytes);
    for (long i = 0; i < n; i++) s[i] = (float)(i % 100) * 0.5f + rank;
    int iters = bytes <= 65536 ? 2000 : bytes <= (1 << 20) ? 200 : 3;
    double t[64];
    for (int w = 0; w < iters / 10 + 1; w++) MPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < samples; k++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters; i++) MPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = (MPI_Wtime() - t0) / iters, mx;
      MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[k] = mx;
    }
    qsort(t, samples, sizeof(double), cmp);
    if (rank == 0) printf("W=%d bytes=%ld median_us=%.2f min_us=%.2f max_us=%.2f samples=%d iters=%d\n", size, bytes, t[samples/2]*1e6, t[0]*1e6, t[samples-1]*1e6, samples, iters);
    free(s); free(r);
  }
  MPI_Finalize();
  return 0;
}

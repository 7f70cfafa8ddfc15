/* mpi_bench: Open MPI's MPI_Allreduce, MPI_Allgather and
 * MPI_Reduce_scatter_block, fp32 and bf16, timed the way `detcoll bench`
 * times its rows, for docs/benchmarks/peers/run.sh.
 *
 *   mpicc -O2 -o mpi_bench mpi_bench.c
 *   mpirun -np 4 --mca btl self,vader ./mpi_bench -n mpi_shm -i 20 -s 3 -w 3 4096 65536
 *
 * Sizes are detcoll's input_bytes per rank: all_reduce the buffer each rank
 * sends; all_gather the block each rank sends (it receives W times that);
 * reduce_scatter the W blocks each rank sends (it receives one).
 *
 * A sample is the mean time of -i iterations after a barrier, and the
 * slowest rank's (MPI_MAX over ranks), as in detcoll bench. Rank 0 prints
 * one JSON line per (op, dtype, size):
 *   {"name":..., "op":..., "dtype":..., "world_size":W, "bytes":B, "samples_us":[...]}
 *
 * bf16: MPI 4.1 has no bfloat16 type. The data are MPI_UINT16_T and the sum
 * is a user-defined commutative op (widen to float, add, round to nearest
 * even), which is what an MPI user has to do; user ops take Open MPI's
 * generic (non-vectorised) reduction path, so this is the realistic bf16
 * peer, not the fp32 one.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static float bf16_to_f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    uint16_t *a = in, *b = inout;
    for (int i = 0; i < *len; i++) b[i] = f_to_bf16(bf16_to_f(a[i]) + bf16_to_f(b[i]));
}


int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, w;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    const char *name = "mpi";
    int iters = 10, samples = 3, warmup = 3, opt;
    const char *ops = "all_reduce,all_gather,reduce_scatter", *dtypes = "fp32,bf16";
    while ((opt = getopt(argc, argv, "n:i:s:w:o:d:")) != -1) {
        switch (opt) {
        case 'n': name = optarg; break;
        case 'i': iters = atoi(optarg); break;
        case 's': samples = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'o': ops = optarg; break;
        case 'd': dtypes = optarg; break;
        default:
            if (rank == 0) fprintf(stderr, "usage: mpi_bench [-n name] [-i iters] [-s samples] [-w warmup] [-o ops] [-d dtypes] sizes...\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Op bf16op;
    MPI_Op_create(bf16_sum, 1, &bf16op);
    const char *opnames[] = {"all_reduce", "all_gather", "reduce_scatter"};
    const char *dtnames[] = {"fp32", "bf16"};
    double *ts = calloc(samples, sizeof(double));
    for (int d = 0; d < 2; d++) {
        if (!strstr(dtypes, dtnames[d])) continue;
        int esz = d == 0 ? 4 : 2;
        MPI_Datatype dt = d == 0 ? MPI_FLOAT : MPI_UINT16_T;
        MPI_Op sum = d == 0 ? MPI_SUM : bf16op;
        for (int o = 0; o < 3; o++) {
            if (!strstr(ops, opnames[o])) continue;
            for (int a = optind; a < argc; a++) {
                long req = atol(argv[a]);
                long n = req / esz; /* elements each rank sends */
                if (o == 2) n = n / w * w;
                if (n < (o == 2 ? w : 1)) n = o == 2 ? w : 1;
                long sendb = n * esz, recvb = o == 1 ? n * esz * w : (o == 2 ? n / w * esz : n * esz);
                char *sb = malloc(sendb), *rb = malloc(recvb);
                /* small finite values: 1 + rank/8 in either type */
                for (long i = 0; i < n; i++) {
                    float v = 1.0f + (float)((rank + i) % 8) / 8.0f;
                    if (d == 0) ((float *)sb)[i] = v;
                    else ((uint16_t *)sb)[i] = f_to_bf16(v);
                }
                memset(rb, 0, recvb);
                for (int s = -1; s < samples; s++) {
                    int k = s < 0 ? warmup : iters;
                    MPI_Barrier(MPI_COMM_WORLD);
                    double t0 = MPI_Wtime();
                    for (int i = 0; i < k; i++) {
                        if (o == 0) MPI_Allreduce(sb, rb, (int)n, dt, sum, MPI_COMM_WORLD);
                        else if (o == 1) MPI_Allgather(sb, (int)n, dt, rb, (int)n, dt, MPI_COMM_WORLD);
                        else MPI_Reduce_scatter_block(sb, rb, (int)(n / w), dt, sum, MPI_COMM_WORLD);
                    }
                    double t = (MPI_Wtime() - t0) / k * 1e6, tmax;
                    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    if (s >= 0) ts[s] = tmax;
                }
                if (rank == 0) {
                    printf("{\"name\":\"%s\",\"op\":\"%s\",\"dtype\":\"%s\",\"world_size\":%d,\"bytes\":%ld,\"samples_us\":[", name, opnames[o], dtnames[d], w, sendb);
                    for (int s = 0; s < samples; s++) printf("%s%.3f", s ? "," : "", ts[s]);
                    printf("]}\n");
                    fflush(stdout);
                }
                free(sb);
                free(rb);
            }
        }
    }
    MPI_Op_free(&bf16op);
    MPI_Finalize();
    return 0;
}

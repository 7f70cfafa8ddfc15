// detcoll row gather (pure data movement, no arithmetic):
//
//   dst row i = src row idx[i], for i < rows, each row_bytes bytes
//
// Used for the zigzag -> logical reorder of the all-gathered Q, K, V,
// position ids and output gradient (idx = the inverse of the rank-ordered
// layout), for a rank's own shard of the output (idx = its logical rows) and
// for the root's rank-ordered blocks of dQ, dK, dV (idx = the layout).
// Byte-wise and grid-stride, so any row size and alignment works.

extern "C" __global__ void detcoll_gather_rows(unsigned char* dst, const unsigned char* src, const int* idx,
                                               long long rows, long long row_bytes) {
    long long total = rows * row_bytes;
    long long step = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x; i < total; i += step) {
        long long r = i / row_bytes;
        long long c = i - r * row_bytes;
        dst[i] = src[(long long)idx[r] * row_bytes + c];
    }
}

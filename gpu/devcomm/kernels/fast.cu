// detcoll fast reduce kernels for a few ranks (W = 2, 4, 8 known at compile
// time). This file is appended to gpu/kernels/reduce.cu and uses its element
// types (dc_bf16_native, …, dc_fp64: widen, add, narrow) and its 16-byte
// vector I/O, so the arithmetic is the same code; only the loop differs.
//
// Kernel: detcoll_fast_<type>_w<W>(out, src, count, head, nvec)
//   src.p[0..W-1]  the inputs in rank order; out may equal one exactly
//   head           elements [0, head) one at a time (to reach 16-byte
//                  alignment), then nvec 16-byte vectors, then the rest one
//                  at a time; the host sets head/nvec, nvec > 0 only when
//                  out and every input have the same address modulo 16
//
// The tree is the definition of docs/contract.md, unrolled at compile
// time: combine adjacent pairs (v0,v1), (v2,v3), … with the lower rank on
// the left, carry an odd last value up, repeat until one value is left.
// Each thread loads U vectors of every input before adding (more bytes in
// flight than the generic kernel), with a grid-stride loop over the vectors.

struct dc_fsrc {
    const char* p[8];
};

// dc_level<T, N, LEN>::run reduces v[0..LEN-1] (N lanes each) to v[0].
template <class T, int N, int LEN>
struct dc_level {
    static __device__ __forceinline__ void run(typename T::acc (*v)[N]) {
#pragma unroll
        for (int i = 0; i < LEN / 2; ++i) {
#pragma unroll
            for (int j = 0; j < N; ++j) v[i][j] = T::add(v[2 * i][j], v[2 * i + 1][j]);
        }
        if (LEN & 1) {
#pragma unroll
            for (int j = 0; j < N; ++j) v[LEN / 2][j] = v[LEN - 1][j];
        }
        dc_level<T, N, (LEN + 1) / 2>::run(v);
    }
};

template <class T, int N>
struct dc_level<T, N, 1> {
    static __device__ __forceinline__ void run(typename T::acc (*)[N]) {}
};

template <class T, int W, int U>
__device__ __forceinline__ void dc_fast(char* out, const dc_fsrc& src, long long count, long long head,
                                        long long nvec) {
    typedef typename T::acc A;
    enum { N = 16 / T::SZ };
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long hb = head * T::SZ;  // byte offset of the vector body
    for (long long v0 = tid; v0 < nvec; v0 += step * U) {
        dc_v16 raw[U][W];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long v = v0 + u * step;
            if (v < nvec) {
#pragma unroll
                for (int r = 0; r < W; ++r) raw[u][r] = dc_io<T, N>::load(src.p[r] + hb + v * 16);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long v = v0 + u * step;
            if (v < nvec) {
                A c[W][N];
#pragma unroll
                for (int r = 0; r < W; ++r) dc_io<T, N>::widen(raw[u][r], c[r]);
                dc_level<T, N, W>::run(c);
                dc_io<T, N>::store(out + hb + v * 16, c[0]);
            }
        }
    }
    // The scalar head and tail.
    const long long tail0 = head + nvec * N;
    const long long scalars = head + (count - tail0);
    for (long long e = tid; e < scalars; e += step) {
        const long long el = e < head ? e : tail0 + (e - head);
        A c[W][1];
#pragma unroll
        for (int r = 0; r < W; ++r) dc_io<T, 1>::widen(dc_io<T, 1>::load(src.p[r] + el * T::SZ), c[r]);
        dc_level<T, 1, W>::run(c);
        dc_io<T, 1>::store(out + el * T::SZ, c[0]);
    }
}

#define DC_FAST(TNAME, T, W, U)                                                                   \
    extern "C" __global__ void __launch_bounds__(512) detcoll_fast_##TNAME##_w##W(                \
        char* out, const DC_GRID_CONST dc_fsrc src, long long count, long long head, long long nvec) { \
        dc_fast<T, W, U>(out, src, count, head, nvec);                                            \
    }

#define DC_FAST_W(TNAME, T) \
    DC_FAST(TNAME, T, 2, 4) \
    DC_FAST(TNAME, T, 4, 2) \
    DC_FAST(TNAME, T, 8, 1)

DC_FAST_W(bf16_native, dc_bf16_native)
DC_FAST_W(bf16_f32, dc_bf16_f32)
DC_FAST_W(fp16_native, dc_fp16_native)
DC_FAST_W(fp16_f32, dc_fp16_f32)
DC_FAST_W(fp32, dc_fp32)
DC_FAST_W(fp64, dc_fp64)

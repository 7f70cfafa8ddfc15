// detcoll deterministic reduce kernels (docs/contract.md).
//
// Compiled at run time by NVRTC, and by hiprtc for AMD GPUs (ROCm: same
// source, internal/hiprtc), with no headers at all:
// every 16-bit conversion below is written out in integer code, round to
// nearest even, subnormals kept, overflow to infinity, NaN canonical. Every
// addition is __fadd_rn / __dadd_rn (never contracted into an FMA), and the
// program is compiled with --ftz=false --fmad=false (NVRTC) or
// -ffp-contract=off -fno-fast-math -fno-gpu-flush-denormals-to-zero
// (hiprtc). Nothing depends on the warp/wavefront size (32 on NVIDIA, 64 on
// AMD CDNA): each thread reduces its own items, with no cross-lane operation.
//
// Kernel: detcoll_reduce_<type>(out, src, list, w, count, head, nvec)
//   <type>  bf16_native, bf16_f32, fp16_native, fp16_f32, fp32, fp64
//           (native: every tree node rounded to the type; f32: float32 tree,
//           rounded once at the root; fp32/fp64 have one mode)
//   w       1 .. 65536 inputs
//   out     output, count elements; may equal an input exactly (in place)
//   src     inputs: list != 0 → src.ptr[0..w-1] (w <= 64), each its own
//           buffer; list == 0 → input r at src.base + r*src.stride bytes
//           (slabs in one workspace)
//   head    elements [0, head) are done one at a time (to reach 16-byte
//           alignment), then nvec 16-byte vectors, then the rest one at a
//           time. The host computes head/nvec: nvec > 0 only when out and
//           every input have the same address modulo 16.
//
// Work item t of a grid-stride loop is one scalar head element, one 16-byte
// vector, or one scalar tail element. Each item reduces its elements over
// the W inputs with the canonical tree, evaluated as a binary counter:
// pushing input r merges the pending blocks of sizes 2^0, 2^1, ... while bit
// k of r is set (the pending block is the left operand), then parks the
// result in slot k; at the end the pending blocks (the set bits of W) are
// folded from the smallest (rightmost ranks) to the largest, each as the
// left operand. This is exactly the pairwise tree with "carry the odd last
// value up": e.g. W=5 → ((r0+r1)+(r2+r3))+r4, W=7 → ((r0+r1)+(r2+r3))+((r4+r5)+r6).
// Inputs are taken in aligned blocks of 16 whose counter lives in registers;
// for W > 16 a second counter over the block roots lives in local memory.

typedef unsigned short dc_u16;
typedef unsigned int dc_u32;
typedef unsigned long long dc_u64;

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 700) && !defined(__HIPCC__)
#define DC_GRID_CONST __grid_constant__
#else
#define DC_GRID_CONST
#endif

#define DC_MAX_PTRS 64

struct dc_src {
    const char* base;
    long long stride;
    const char* ptr[DC_MAX_PTRS];
};

// ---- 16-bit conversions (bit-identical to detcoll/dtype) ----

__device__ __forceinline__ float dc_bf16_to_f32(dc_u16 h) {
    return __uint_as_float(((dc_u32)h) << 16);
}

__device__ __forceinline__ dc_u16 dc_f32_to_bf16(float f) {
    dc_u32 u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (dc_u16)0x7FC0u;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (dc_u16)(u >> 16);
}

// nearest bf16 as a float; NaN passes through (canonicalised at the root)
__device__ __forceinline__ float dc_round_bf16(float f) {
    dc_u32 u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return f;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xFFFF0000u);
}

__device__ __forceinline__ float dc_f16_to_f32(dc_u16 h) {
    dc_u32 sign = ((dc_u32)h & 0x8000u) << 16;
    dc_u32 exp = ((dc_u32)h >> 10) & 0x1Fu;
    dc_u32 frac = (dc_u32)h & 0x3FFu;
    dc_u32 bits;
    if (exp == 0x1Fu) {
        bits = sign | 0x7F800000u | (frac ? (0x400000u | (frac << 13)) : 0u);
    } else if (exp != 0u) {
        bits = sign | ((exp + 112u) << 23) | (frac << 13);
    } else if (frac == 0u) {
        bits = sign;
    } else {
        // subnormal: frac * 2^-24; top set bit p in 0..9
        int p = 31 - __clz((int)frac);
        bits = sign | ((dc_u32)(p + 103) << 23) | ((frac << (23 - p)) & 0x7FFFFFu);
    }
    return __uint_as_float(bits);
}

__device__ __forceinline__ dc_u16 dc_f32_to_f16(float f) {
    dc_u32 u = __float_as_uint(f);
    dc_u32 sign = (u >> 16) & 0x8000u;
    dc_u32 a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (dc_u16)0x7E00u;
    if (a >= 0x477FF000u) return (dc_u16)(sign | 0x7C00u);  // >= 65520 rounds to inf
    if (a >= 0x38800000u) {                                  // normal fp16
        dc_u32 v = a - (112u << 23);
        v += 0xFFFu + ((v >> 13) & 1u);
        return (dc_u16)(sign | (v >> 13));
    }
    if (a < 0x33000000u) return (dc_u16)sign;                // < 2^-25 rounds to zero
    dc_u32 e = a >> 23;                                      // 102..112
    dc_u32 m = (a & 0x7FFFFFu) | 0x800000u;
    dc_u32 shift = 126u - e;                                 // 14..24
    dc_u32 r = m >> shift;
    dc_u32 rem = m & ((1u << shift) - 1u);
    dc_u32 half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (dc_u16)(sign | r);
}

__device__ __forceinline__ float dc_round_f16(float f) {
    dc_u32 u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return f;
    return dc_f16_to_f32(dc_f32_to_f16(f));
}

// ---- element types: storage, accumulator, widen, add, narrow ----

struct dc_bf16_native {
    typedef dc_u16 st; typedef float acc; enum { SZ = 2 };
    static __device__ __forceinline__ acc widen(st x) { return dc_bf16_to_f32(x); }
    static __device__ __forceinline__ acc add(acc a, acc b) { return dc_round_bf16(__fadd_rn(a, b)); }
    static __device__ __forceinline__ st narrow(acc x) { return dc_f32_to_bf16(x); }
};
struct dc_bf16_f32 {
    typedef dc_u16 st; typedef float acc; enum { SZ = 2 };
    static __device__ __forceinline__ acc widen(st x) { return dc_bf16_to_f32(x); }
    static __device__ __forceinline__ acc add(acc a, acc b) { return __fadd_rn(a, b); }
    static __device__ __forceinline__ st narrow(acc x) { return dc_f32_to_bf16(x); }
};
struct dc_fp16_native {
    typedef dc_u16 st; typedef float acc; enum { SZ = 2 };
    static __device__ __forceinline__ acc widen(st x) { return dc_f16_to_f32(x); }
    static __device__ __forceinline__ acc add(acc a, acc b) { return dc_round_f16(__fadd_rn(a, b)); }
    static __device__ __forceinline__ st narrow(acc x) { return dc_f32_to_f16(x); }
};
struct dc_fp16_f32 {
    typedef dc_u16 st; typedef float acc; enum { SZ = 2 };
    static __device__ __forceinline__ acc widen(st x) { return dc_f16_to_f32(x); }
    static __device__ __forceinline__ acc add(acc a, acc b) { return __fadd_rn(a, b); }
    static __device__ __forceinline__ st narrow(acc x) { return dc_f32_to_f16(x); }
};
struct dc_fp32 {
    typedef dc_u32 st; typedef float acc; enum { SZ = 4 };
    static __device__ __forceinline__ acc widen(st x) { return __uint_as_float(x); }
    static __device__ __forceinline__ acc add(acc a, acc b) { return __fadd_rn(a, b); }
    static __device__ __forceinline__ st narrow(acc x) {
        dc_u32 u = __float_as_uint(x);
        return ((u & 0x7FFFFFFFu) > 0x7F800000u) ? 0x7FC00000u : u;
    }
};
struct dc_fp64 {
    typedef dc_u64 st; typedef double acc; enum { SZ = 8 };
    static __device__ __forceinline__ acc widen(st x) { return __longlong_as_double((long long)x); }
    static __device__ __forceinline__ acc add(acc a, acc b) { return __dadd_rn(a, b); }
    static __device__ __forceinline__ st narrow(acc x) {
        dc_u64 u = (dc_u64)__double_as_longlong(x);
        return ((u & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull) ? 0x7FF8000000000000ull : u;
    }
};

// ---- N elements at a time: N = 16/SZ (one 16-byte vector) or 1 ----

// The 16-byte vector: CUDA's uint4; under HIP a clang vector of four
// unsigned ints (HIP's uint4 has user-defined copy operations, which C++
// does not allow in a union), loaded and stored as one 16-byte access too.
#if defined(__HIPCC__) || defined(__HIP__)
typedef unsigned int dc_vec4 __attribute__((ext_vector_type(4)));
#else
typedef uint4 dc_vec4;
#endif

union dc_v16 {
    dc_vec4 v;
    dc_u16 h[8];
    dc_u32 w[4];
    dc_u64 d[2];
};

__device__ __forceinline__ dc_u16 dc_lane(const dc_v16& u, int j, dc_u16*) { return u.h[j]; }
__device__ __forceinline__ dc_u32 dc_lane(const dc_v16& u, int j, dc_u32*) { return u.w[j]; }
__device__ __forceinline__ dc_u64 dc_lane(const dc_v16& u, int j, dc_u64*) { return u.d[j]; }
__device__ __forceinline__ void dc_set(dc_v16& u, int j, dc_u16 x) { u.h[j] = x; }
__device__ __forceinline__ void dc_set(dc_v16& u, int j, dc_u32 x) { u.w[j] = x; }
__device__ __forceinline__ void dc_set(dc_v16& u, int j, dc_u64 x) { u.d[j] = x; }

template <class T, int N>
struct dc_io {  // one 16-byte vector
    typedef dc_v16 raw;
    static __device__ __forceinline__ raw load(const char* p) {
        dc_v16 u;
        u.v = *reinterpret_cast<const dc_vec4*>(p);
        return u;
    }
    static __device__ __forceinline__ void widen(const raw& u, typename T::acc* c) {
#pragma unroll
        for (int j = 0; j < N; ++j) c[j] = T::widen(dc_lane(u, j, (typename T::st*)0));
    }
    static __device__ __forceinline__ void store(char* p, const typename T::acc* c) {
        dc_v16 u;
#pragma unroll
        for (int j = 0; j < N; ++j) dc_set(u, j, T::narrow(c[j]));
        *reinterpret_cast<dc_vec4*>(p) = u.v;
    }
};

template <class T>
struct dc_io<T, 1> {  // one element
    typedef typename T::st raw;
    static __device__ __forceinline__ raw load(const char* p) {
        return *reinterpret_cast<const typename T::st*>(p);
    }
    static __device__ __forceinline__ void widen(const raw& u, typename T::acc* c) { c[0] = T::widen(u); }
    static __device__ __forceinline__ void store(char* p, const typename T::acc* c) {
        *reinterpret_cast<typename T::st*>(p) = T::narrow(c[0]);
    }
};

__device__ __forceinline__ const char* dc_input(const dc_src& src, int list, int r) {
    return list ? src.ptr[r] : src.base + (long long)r * src.stride;
}

// dc_block reduces the N elements at byte offset off over the m <= 16
// inputs lo .. lo+m-1 (a block aligned to 16 ranks) into c, with the tree
// state in registers.
template <class T, int N>
__device__ __forceinline__ void dc_block(const dc_src& src, int list, int lo, int m, long long off,
                                         typename T::acc* c) {
    typedef typename T::acc A;
    typedef dc_io<T, N> IO;
    A s[5][N];  // s[k]: pending block of 2^k inputs
    typename IO::raw cur = IO::load(dc_input(src, list, lo) + off);
    typename IO::raw nxt = cur;
    for (int r = 0; r < m; ++r) {
        if (r + 1 < m) nxt = IO::load(dc_input(src, list, lo + r + 1) + off);  // prefetch
        IO::widen(cur, c);
        bool parked = false;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (!parked) {
                if ((r >> k) & 1) {
#pragma unroll
                    for (int j = 0; j < N; ++j) c[j] = T::add(s[k][j], c[j]);
                } else {
#pragma unroll
                    for (int j = 0; j < N; ++j) s[k][j] = c[j];
                    parked = true;
                }
            }
        }
        if (!parked) {
#pragma unroll
            for (int j = 0; j < N; ++j) s[4][j] = c[j];
        }
        cur = nxt;
    }
    bool have = false;
#pragma unroll
    for (int k = 0; k <= 4; ++k) {
        if ((m >> k) & 1) {
            if (have) {
#pragma unroll
                for (int j = 0; j < N; ++j) c[j] = T::add(s[k][j], c[j]);
            } else {
#pragma unroll
                for (int j = 0; j < N; ++j) c[j] = s[k][j];
                have = true;
            }
        }
    }
}

// dc_item reduces the N elements at byte offset off over the w inputs. For
// w > 16 the roots of the aligned 16-rank blocks are combined by the same
// binary counter (the tree over W is the tree over those roots,
// docs/contract.md), kept in local memory since it runs once per 16 inputs.
template <class T, int N>
__device__ __forceinline__ void dc_item(char* out, const dc_src& src, int list, int w, long long off) {
    typedef typename T::acc A;
    A c[N];
    const int nb = (w + 15) >> 4;  // <= 4096
    A s2[13][N];
    for (int b = 0; b < nb; ++b) {
        const int lo = b << 4;
        dc_block<T, N>(src, list, lo, min(16, w - lo), off, c);
        if (nb > 1) {
            int k = 0;
#pragma unroll 1
            for (; (b >> k) & 1; ++k) {
#pragma unroll
                for (int j = 0; j < N; ++j) c[j] = T::add(s2[k][j], c[j]);
            }
#pragma unroll
            for (int j = 0; j < N; ++j) s2[k][j] = c[j];
        }
    }
    if (nb > 1) {
        bool have = false;
#pragma unroll 1
        for (int k = 0; k < 13; ++k) {
            if ((nb >> k) & 1) {
                if (have) {
#pragma unroll
                    for (int j = 0; j < N; ++j) c[j] = T::add(s2[k][j], c[j]);
                } else {
#pragma unroll
                    for (int j = 0; j < N; ++j) c[j] = s2[k][j];
                    have = true;
                }
            }
        }
    }
    dc_io<T, N>::store(out + off, c);
}

template <class T>
__device__ __forceinline__ void dc_reduce(char* out, const dc_src& src, int list, int w,
                                          long long count, long long head, long long nvec) {
    const long long E = 16 / T::SZ;
    const long long body_end = head + nvec;
    const long long items = body_end + (count - head - nvec * E);
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < items; t += step) {
        if (t >= head && t < body_end) {
            dc_item<T, 16 / T::SZ>(out, src, list, w, (head + (t - head) * E) * T::SZ);
        } else {
            long long e = t < head ? t : head + nvec * E + (t - body_end);
            dc_item<T, 1>(out, src, list, w, e * T::SZ);
        }
    }
}

#define DC_KERNEL(TNAME, T)                                                                 \
    extern "C" __global__ void __launch_bounds__(256) detcoll_reduce_##TNAME(               \
        char* out, const DC_GRID_CONST dc_src src, int list, int w, long long count,       \
        long long head, long long nvec) {                                                  \
        dc_reduce<T>(out, src, list, w, count, head, nvec);                                \
    }

DC_KERNEL(bf16_native, dc_bf16_native)
DC_KERNEL(bf16_f32, dc_bf16_f32)
DC_KERNEL(fp16_native, dc_fp16_native)
DC_KERNEL(fp16_f32, dc_fp16_f32)
DC_KERNEL(fp32, dc_fp32)
DC_KERNEL(fp64, dc_fp64)

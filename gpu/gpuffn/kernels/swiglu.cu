// detcoll SwiGLU activation kernels (bf16), the formulas of package
// parallel (arith.go) written out operation by operation.
//
// Compiled at run time by NVRTC with --fmad=false --ftz=false
// --prec-div=true (no contraction, no flush to zero, IEEE division), and no
// headers: every operation below is one IEEE binary32 operation rounded to
// nearest even (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn), so the bits
// equal the host reference's for the same bf16 inputs.
//
//   Exp32(x)     Cody-Waite reduction by ln 2 and the Cephes expf polynomial
//   Sigmoid32(x) = 1 / (1 + Exp32(-x))
//   SiLU32(x)    = x * Sigmoid32(x)
//   forward      a  = bf16(SiLU32(g) * u)
//   backward     s = Sigmoid32(g)
//                du = bf16(da * (g * s))
//                dg = bf16((da * u) * (s * (1 + g * (1 - s))))
//
// Kernels (grid-stride; element i of block b at offset b*stride + i, for
// i < per_block and b < blocks, so that column-blocked tensors with padded
// block strides are handled in one launch):
//   detcoll_swiglu_fwd_bf16(a, g, u, per_block, blocks, stride)
//   detcoll_swiglu_bwd_bf16(dg, du, g, u, da, per_block, blocks, stride)

typedef unsigned short dc_u16;
typedef unsigned int dc_u32;

__device__ __forceinline__ float dc_bf16_to_f32(dc_u16 h) {
    return __uint_as_float(((dc_u32)h) << 16);
}

// round to nearest even; any NaN becomes the canonical quiet NaN 0x7FC0
__device__ __forceinline__ dc_u16 dc_f32_to_bf16(float f) {
    dc_u32 u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (dc_u16)0x7FC0u;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (dc_u16)(u >> 16);
}

__device__ __forceinline__ float dc_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float dc_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float dc_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float dc_div(float a, float b) { return __fdiv_rn(a, b); }

// 2^k as a float, -126 <= k <= 127
__device__ __forceinline__ float dc_pow2(int k) { return __uint_as_float(((dc_u32)(k + 127)) << 23); }

// floor of a finite float of magnitude < 2^31 (exact)
__device__ __forceinline__ float dc_floor(float v) {
    float t = (float)(int)v; // truncation toward zero, exact here
    return t > v ? dc_sub(t, 1.0f) : t;
}

__device__ __forceinline__ float dc_exp32(float x) {
    if (x != x) return x;
    if (x > 88.72283905206835f) return __uint_as_float(0x7F800000u);
    if (x < -103.97207708f) return 0.0f;
    const float log2e = 1.44269504088896341f;
    const float c1 = 0.693359375f;
    const float c2 = -2.12194440e-4f;
    float z = dc_floor(dc_add(dc_mul(log2e, x), 0.5f));
    int n = (int)z;
    float r = dc_sub(x, dc_mul(z, c1));
    r = dc_sub(r, dc_mul(z, c2));
    float rr = dc_mul(r, r);
    float p = 1.9875691500e-4f;
    p = dc_add(dc_mul(p, r), 1.3981999507e-3f);
    p = dc_add(dc_mul(p, r), 8.3334519073e-3f);
    p = dc_add(dc_mul(p, r), 4.1665795894e-2f);
    p = dc_add(dc_mul(p, r), 1.6666665459e-1f);
    p = dc_add(dc_mul(p, r), 5.0000001201e-1f);
    p = dc_add(dc_add(dc_mul(p, rr), r), 1.0f);
    if (n > 127) {
        p = dc_mul(p, 2.0f); // exact
        n = n - 1;
    }
    if (n < -126) {
        // two steps: the first exact (normal result), the second rounds once
        return dc_mul(dc_mul(p, dc_pow2(n + 64)), dc_pow2(-64));
    }
    return dc_mul(p, dc_pow2(n));
}

__device__ __forceinline__ float dc_sigmoid32(float x) { return dc_div(1.0f, dc_add(1.0f, dc_exp32(-x))); }

__device__ __forceinline__ float dc_silu32(float x) { return dc_mul(x, dc_sigmoid32(x)); }

__device__ __forceinline__ float dc_swiglu(float g, float u) { return dc_mul(dc_silu32(g), u); }

__device__ __forceinline__ void dc_swiglu_grad(float g, float u, float da, float* dg, float* du) {
    float s = dc_sigmoid32(g);
    *du = dc_mul(da, dc_mul(g, s));
    float dsilu = dc_mul(s, dc_add(1.0f, dc_mul(g, dc_sub(1.0f, s))));
    *dg = dc_mul(dc_mul(da, u), dsilu);
}

extern "C" __global__ void detcoll_swiglu_fwd_bf16(dc_u16* a, const dc_u16* g, const dc_u16* u,
        long long per_block, long long blocks, long long stride) {
    const long long total = per_block * blocks;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        long long b = i / per_block;
        long long off = b * stride + (i - b * per_block);
        a[off] = dc_f32_to_bf16(dc_swiglu(dc_bf16_to_f32(g[off]), dc_bf16_to_f32(u[off])));
    }
}

extern "C" __global__ void detcoll_swiglu_bwd_bf16(dc_u16* dg, dc_u16* du, const dc_u16* g, const dc_u16* u,
        const dc_u16* da, long long per_block, long long blocks, long long stride) {
    const long long total = per_block * blocks;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        long long b = i / per_block;
        long long off = b * stride + (i - b * per_block);
        float vg, vu;
        dc_swiglu_grad(dc_bf16_to_f32(g[off]), dc_bf16_to_f32(u[off]), dc_bf16_to_f32(da[off]), &vg, &vu);
        dg[off] = dc_f32_to_bf16(vg);
        du[off] = dc_f32_to_bf16(vu);
    }
}

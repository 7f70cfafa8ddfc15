// detcoll peer-memory (CUDA IPC) collectives, part 2: the data movement of
// a block (plain and LL), the kernels as steps and their entry points.
// Appended to ipc_proto.cu (the protocol: layout, sequence numbers, flags,
// signature lines, bounded waits), which explains the whole design.

// ---- data movement of one block: thread t of nt ----

// dc_ipc_copy copies bytes [lo, hi) of src to dst (and to dst2 when not
// null), 16-byte vectors when every address is 16-byte aligned.
__device__ __forceinline__ void dc_ipc_copy(char* dst, char* dst2, const char* src, long long lo, long long hi, int t,
                                            int nt) {
    if (hi <= lo) return;
    long long n = hi - lo;
    dst += lo;
    src += lo;
    if (dst2) dst2 += lo;
    long long nvec = 0;
    if ((((unsigned long long)dst | (unsigned long long)src | (unsigned long long)dst2) & 15ull) == 0) nvec = n / 16;
    enum { U = 4 };
    for (long long v0 = t; v0 < nvec; v0 += (long long)nt * U) {
        uint4 x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            long long v = v0 + (long long)u * nt;
            if (v < nvec) x[u] = reinterpret_cast<const uint4*>(src)[v];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            long long v = v0 + (long long)u * nt;
            if (v < nvec) {
                reinterpret_cast<uint4*>(dst)[v] = x[u];
                if (dst2) reinterpret_cast<uint4*>(dst2)[v] = x[u];
            }
        }
    }
    for (long long i = nvec * 16 + t; i < n; i += nt) {
        char c = src[i];
        dst[i] = c;
        if (dst2) dst2[i] = c;
    }
}

// dc_ipc_reduce reduces elements [lo, hi) of the W inputs src[r] + e*SZ
// with the tree into out (and, when push, also into push_to[p] for every
// peer p), vectors when every address is aligned.
template <class T, int W>
__device__ __forceinline__ void dc_ipc_reduce(char* out, const char* const* src, char* const* push_to, int rank,
                                              long long lo, long long hi, int t, int nt) {
    typedef typename T::acc A;
    enum { N = 16 / T::SZ };
    if (hi <= lo) return;
    unsigned long long or_ = (unsigned long long)(out + lo * T::SZ);
#pragma unroll
    for (int r = 0; r < W; ++r) {
        or_ |= (unsigned long long)(src[r] + lo * T::SZ);
        if (push_to && r != rank) or_ |= (unsigned long long)(push_to[r] + lo * T::SZ);
    }
    long long nvec = (or_ & 15ull) == 0 ? (hi - lo) / N : 0;
    for (long long v = t; v < nvec; v += nt) {
        const long long off = (lo + v * N) * T::SZ;
        dc_v16 raw[W];
#pragma unroll
        for (int r = 0; r < W; ++r) raw[r] = dc_io<T, N>::load(src[r] + off);
        A c[W][N];
#pragma unroll
        for (int r = 0; r < W; ++r) dc_io<T, N>::widen(raw[r], c[r]);
        dc_level<T, N, W>::run(c);
        dc_io<T, N>::store(out + off, c[0]);
        if (push_to) {
#pragma unroll
            for (int r = 0; r < W; ++r)
                if (r != rank) dc_io<T, N>::store(push_to[r] + off, c[0]);
        }
    }
    for (long long e = lo + nvec * N + t; e < hi; e += nt) {
        const long long off = e * T::SZ;
        A c[W][1];
#pragma unroll
        for (int r = 0; r < W; ++r) dc_io<T, 1>::widen(dc_io<T, 1>::load(src[r] + off), c[r]);
        dc_level<T, 1, W>::run(c);
        dc_io<T, 1>::store(out + off, c[0]);
        if (push_to) {
#pragma unroll
            for (int r = 0; r < W; ++r)
                if (r != rank) dc_io<T, 1>::store(push_to[r] + off, c[0]);
        }
    }
}

// ---- LL data movement (chunks of 8 data bytes, one 16-byte line each) ----

// dc_ll_get reads data bytes [8i, 8i+8) of src (n bytes; zero past n).
__device__ __forceinline__ unsigned long long dc_ll_get(const char* src, long long n, long long i) {
    const long long o = i * 8;
    if (o + 8 <= n && (((unsigned long long)(src + o)) & 7ull) == 0)
        return *reinterpret_cast<const unsigned long long*>(src + o);
    unsigned long long d = 0;
    for (int k = 0; k < 8 && o + k < n; ++k) d |= (unsigned long long)(unsigned char)src[o + k] << (8 * k);
    return d;
}

// dc_ll_put writes data bytes [8i, 8i+8) of dst (n bytes; nothing past n).
__device__ __forceinline__ void dc_ll_put(char* dst, long long n, long long i, unsigned long long d) {
    const long long o = i * 8;
    if (o + 8 <= n && (((unsigned long long)(dst + o)) & 7ull) == 0) {
        *reinterpret_cast<unsigned long long*>(dst + o) = d;
        return;
    }
    for (int k = 0; k < 8 && o + k < n; ++k) dst[o + k] = (char)(d >> (8 * k));
}

// dc_ll_wait waits for line p of this call; false (and the block stopped)
// on timeout, abort or an earlier failure.
__device__ __forceinline__ bool dc_ll_wait(const dc_ipc& a, dc_ipc_blk& s, int peer, const char* p, unsigned long long* d) {
    const unsigned* derr = dc_ipc_ctl(a.stage[a.rank]) + 2;
    unsigned long long deadline = 0;
    for (unsigned n = 0;; ++n) {
        if (dc_ll_load(p, s.seq, d)) return true;
        DC_IPC_PAUSE();
        if (n % DC_IPC_SPIN == DC_IPC_SPIN - 1) {
            unsigned long long now = dc_now_ns();
            if (peer >= 0 && dc_ipc_sigcheck(a, s, peer)) return false;
            if (deadline == 0) deadline = now + (unsigned long long)a.timeout_ns;
            if (*a.habort) {
                dc_ipc_fail(a, s, DC_IPC_ERR_ABORT);
                return false;
            }
            if (*(volatile const unsigned*)derr) {
                s.stop = 1;
                return false;
            }
            if (now > deadline) {
                dc_ipc_fail(a, s, DC_IPC_ERR_TIMEOUT);
                return false;
            }
        }
    }
}

// dc_ll_push writes chunks [lo, hi) of src (n bytes) as lines into slot.
__device__ __forceinline__ void dc_ll_push(char* slot, const char* src, long long n, long long lo, long long hi,
                                           unsigned seq, int t, int nt) {
    for (long long i = lo + t; i < hi; i += nt) dc_ll_store(slot + i * 16, dc_ll_get(src, n, i), seq);
}

// dc_ll_reduce reduces chunks [lo, hi): this rank's data from own (n bytes),
// every peer's from its LL slot in this rank's half, into out.
template <class T, int W>
__device__ __forceinline__ void dc_ll_reduce(const dc_ipc& a, dc_ipc_blk& s, char* out, const char* own, long long n,
                                             long long lo, long long hi, int t, int nt) {
    typedef typename T::acc A;
    typedef typename T::st S;
    enum { E = 8 / T::SZ };
    const char* half = dc_ipc_half(a, a.rank, s.seq);
    for (long long i = lo + t; i < hi; i += nt) {
        unsigned long long d[W];
#pragma unroll
        for (int p = 0; p < W; ++p) {
            if (p == a.rank) {
                d[p] = dc_ll_get(own, n, i);
            } else if (!dc_ll_wait(a, s, p, half + dc_ipc_slot(p, a.rank) * a.slot + i * 16, &d[p])) {
                return;
            }
        }
        A c[W][E];
#pragma unroll
        for (int p = 0; p < W; ++p) {
#pragma unroll
            for (int e = 0; e < E; ++e) c[p][e] = T::widen((S)(d[p] >> (8 * T::SZ * e)));
        }
        dc_level<T, E, W>::run(c);
        unsigned long long r = 0;
#pragma unroll
        for (int e = 0; e < E; ++e) r |= (unsigned long long)T::narrow(c[0][e]) << (8 * T::SZ * e);
        dc_ll_put(out, n, i, r);
    }
}

// ---- the kernels as steps (the wrappers put a __syncthreads between steps
// and stop the block when a step set s.stop) ----

// Two-shot AllReduce: 0 begin, 1 push shards, 2 signal, 3 wait, 4 reduce the
// own shard and push it, 5 signal, 6 wait, 7 copy the peers' shards.
// A half holds W-1 input slots, then W-1 result slots.
template <class T, int W>
struct dc_ipc_ar2 {
    enum { STEPS = 8 };
    static __device__ __forceinline__ void step(int k, const dc_ipc& a, dc_ipc_blk& s, int b, int g, int t, int nt) {
        enum { N = 16 / T::SZ };
        long long slo, shi, lo, hi;
        switch (k) {
        case 0: dc_ipc_begin(a, s, b, g, t); break;
        case 1:
            for (int p = 0; p < W; ++p) {
                if (p == a.rank) continue;
                dc_ipc_shard(a.count, N, W, p, &slo, &shi);
                dc_ipc_portion(shi - slo, N, g, b, &lo, &hi);
                char* slot = dc_ipc_half(a, p, s.seq) + dc_ipc_slot(a.rank, p) * a.slot;
                dc_ipc_copy(slot, 0, a.in + slo * T::SZ, lo * T::SZ, hi * T::SZ, t, nt);
            }
            break;
        case 2: dc_ipc_signal(a, s, 0, b, t); break;
        case 3: dc_ipc_wait(a, s, 0, b, t); break;
        case 4: {
            dc_ipc_shard(a.count, N, W, a.rank, &slo, &shi);
            dc_ipc_portion(shi - slo, N, g, b, &lo, &hi);
            const char* src[W];
            char* push[W];
            char* half = dc_ipc_half(a, a.rank, s.seq);
#pragma unroll
            for (int p = 0; p < W; ++p) {
                src[p] = p == a.rank ? a.in + slo * T::SZ : half + dc_ipc_slot(p, a.rank) * a.slot;
                push[p] = p == a.rank ? 0 : dc_ipc_half(a, p, s.seq) + (W - 1 + dc_ipc_slot(a.rank, p)) * a.slot;
            }
            dc_ipc_reduce<T, W>(a.out + slo * T::SZ, src, push, a.rank, lo, hi, t, nt);
            break;
        }
        case 5: dc_ipc_signal(a, s, 1, b, t); break;
        case 6: dc_ipc_wait(a, s, 1, b, t); break;
        case 7: {
            char* half = dc_ipc_half(a, a.rank, s.seq);
            for (int p = 0; p < W; ++p) {
                if (p == a.rank) continue;
                dc_ipc_shard(a.count, N, W, p, &slo, &shi);
                dc_ipc_portion(shi - slo, N, g, b, &lo, &hi);
                dc_ipc_copy(a.out + slo * T::SZ, 0, half + (W - 1 + dc_ipc_slot(p, a.rank)) * a.slot, lo * T::SZ,
                            hi * T::SZ, t, nt);
            }
            break;
        }
        }
    }
};

// ReduceScatter: 0 begin, 1 push block p to rank p, 2 signal, 3 wait,
// 4 reduce the own block. With in_stride 0 every peer gets the whole input
// and this is the one-shot AllReduce.
template <class T, int W>
struct dc_ipc_rs {
    enum { STEPS = 5 };
    static __device__ __forceinline__ void step(int k, const dc_ipc& a, dc_ipc_blk& s, int b, int g, int t, int nt) {
        long long lo, hi;
        dc_ipc_portion(a.count, 16 / T::SZ, g, b, &lo, &hi);
        switch (k) {
        case 0: dc_ipc_begin(a, s, b, g, t); break;
        case 1:
            for (int p = 0; p < W; ++p) {
                if (p == a.rank) continue;
                char* slot = dc_ipc_half(a, p, s.seq) + dc_ipc_slot(a.rank, p) * a.slot;
                dc_ipc_copy(slot, 0, a.in + p * a.in_stride, lo * T::SZ, hi * T::SZ, t, nt);
            }
            break;
        case 2: dc_ipc_signal(a, s, 0, b, t); break;
        case 3: dc_ipc_wait(a, s, 0, b, t); break;
        case 4: {
            const char* src[W];
            char* half = dc_ipc_half(a, a.rank, s.seq);
#pragma unroll
            for (int p = 0; p < W; ++p)
                src[p] = p == a.rank ? a.in + a.rank * a.in_stride : half + dc_ipc_slot(p, a.rank) * a.slot;
            dc_ipc_reduce<T, W>(a.out, src, 0, a.rank, lo, hi, t, nt);
            break;
        }
        }
    }
};

// AllGather of count bytes per rank: 0 begin, 1 push the input to every peer
// and copy it into the own block, 2 signal, 3 wait, 4 copy the peers'
// blocks.
struct dc_ipc_ag {
    enum { STEPS = 5 };
    static __device__ __forceinline__ void step(int k, const dc_ipc& a, dc_ipc_blk& s, int b, int g, int t, int nt) {
        long long lo, hi;
        dc_ipc_portion(a.count, 16, g, b, &lo, &hi);
        switch (k) {
        case 0: dc_ipc_begin(a, s, b, g, t); break;
        case 1: {
            char* own = a.out + a.rank * a.out_stride;
            if (own == a.in) own = 0;  // in place
            for (int p = 0; p < a.w; ++p) {
                if (p == a.rank) continue;
                char* slot = dc_ipc_half(a, p, s.seq) + dc_ipc_slot(a.rank, p) * a.slot;
                dc_ipc_copy(slot, own, a.in, lo, hi, t, nt);
                own = 0;
            }
            break;
        }
        case 2: dc_ipc_signal(a, s, 0, b, t); break;
        case 3: dc_ipc_wait(a, s, 0, b, t); break;
        case 4: {
            char* half = dc_ipc_half(a, a.rank, s.seq);
            for (int p = 0; p < a.w; ++p) {
                if (p == a.rank) continue;
                dc_ipc_copy(a.out + p * a.out_stride, 0, half + dc_ipc_slot(p, a.rank) * a.slot, lo, hi, t, nt);
            }
            break;
        }
        }
    }
};

// LL ReduceScatter: 0 begin, 1 push block p's lines to rank p, 2 wait and
// reduce the own block (in_stride 0: the LL one-shot AllReduce).
template <class T, int W>
struct dc_ipc_rsll {
    enum { STEPS = 4 };
    static __device__ __forceinline__ void step(int k, const dc_ipc& a, dc_ipc_blk& s, int b, int g, int t, int nt) {
        const long long n = a.count * T::SZ;
        long long lo, hi;
        dc_ipc_portion((n + 7) / 8, 1, g, b, &lo, &hi);
        switch (k) {
        case 0: dc_ipc_begin(a, s, b, g, t); break;
        case 1:
            for (int p = 0; p < W; ++p)
                if (p != a.rank)
                    dc_ll_push(dc_ipc_half(a, p, s.seq) + dc_ipc_slot(a.rank, p) * a.slot, a.in + p * a.in_stride, n, lo,
                               hi, s.seq, t, nt);
            break;
        case 2: dc_ll_reduce<T, W>(a, s, a.out, a.in + a.rank * a.in_stride, n, lo, hi, t, nt); break;
        case 3: dc_ipc_sigwait(a, s, b, t); break;
        }
    }
};

// LL AllGather of count bytes: 0 begin, 1 push lines to every peer and copy
// the own block, 2 wait for every peer's lines and store them.
struct dc_ipc_agll {
    enum { STEPS = 4 };
    static __device__ __forceinline__ void step(int k, const dc_ipc& a, dc_ipc_blk& s, int b, int g, int t, int nt) {
        const long long n = a.count;
        long long lo, hi;
        dc_ipc_portion((n + 7) / 8, 1, g, b, &lo, &hi);
        switch (k) {
        case 0: dc_ipc_begin(a, s, b, g, t); break;
        case 1: {
            char* own = a.out + a.rank * a.out_stride;
            for (long long i = lo + t; i < hi; i += nt) {
                const unsigned long long d = dc_ll_get(a.in, n, i);
                for (int p = 0; p < a.w; ++p)
                    if (p != a.rank) dc_ll_store(dc_ipc_half(a, p, s.seq) + dc_ipc_slot(a.rank, p) * a.slot + i * 16, d, s.seq);
                if (own != a.in) dc_ll_put(own, n, i, d);
            }
            break;
        }
        case 2: {
            const char* half = dc_ipc_half(a, a.rank, s.seq);
            for (long long i = lo + t; i < hi; i += nt) {
                for (int p = 0; p < a.w; ++p) {
                    if (p == a.rank) continue;
                    unsigned long long d;
                    if (!dc_ll_wait(a, s, p, half + dc_ipc_slot(p, a.rank) * a.slot + i * 16, &d)) return;
                    dc_ll_put(a.out + p * a.out_stride, n, i, d);
                }
            }
            break;
        }
        case 3: dc_ipc_sigwait(a, s, b, t); break;
        }
    }
};

#if !defined(DC_HOST_EMU)
template <class K>
__device__ __forceinline__ void dc_ipc_run(const dc_ipc& a) {
    __shared__ dc_ipc_blk s;
    for (int k = 0; k < K::STEPS; ++k) {
        K::step(k, a, s, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
        __syncthreads();
        if (s.stop) return;
        __syncthreads();  // nobody may set s.stop before everyone has read it
    }
}

#define DC_IPC_KERNELS(TNAME, T)                                                                                 \
    extern "C" __global__ void __launch_bounds__(512) detcoll_ipc_ar2_##TNAME(const DC_GRID_CONST dc_ipc a) {   \
        dc_ipc_run<dc_ipc_ar2<T, DC_IPC_W> >(a);                                                             \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(512) detcoll_ipc_rs_##TNAME(const DC_GRID_CONST dc_ipc a) {    \
        dc_ipc_run<dc_ipc_rs<T, DC_IPC_W> >(a);                                                              \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(512) detcoll_ipc_rsll_##TNAME(const DC_GRID_CONST dc_ipc a) {  \
        dc_ipc_run<dc_ipc_rsll<T, DC_IPC_W> >(a);                                                            \
    }

DC_IPC_KERNELS(bf16_native, dc_bf16_native)
DC_IPC_KERNELS(bf16_f32, dc_bf16_f32)
DC_IPC_KERNELS(fp16_native, dc_fp16_native)
DC_IPC_KERNELS(fp16_f32, dc_fp16_f32)
DC_IPC_KERNELS(fp32, dc_fp32)
DC_IPC_KERNELS(fp64, dc_fp64)

extern "C" __global__ void __launch_bounds__(512) detcoll_ipc_ag(const DC_GRID_CONST dc_ipc a) {
    dc_ipc_run<dc_ipc_ag>(a);
}
extern "C" __global__ void __launch_bounds__(512) detcoll_ipc_agll(const DC_GRID_CONST dc_ipc a) {
    dc_ipc_run<dc_ipc_agll>(a);
}
#endif

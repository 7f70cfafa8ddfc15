// detcoll peer-memory (CUDA IPC) collectives: one-shot and two-shot
// AllReduce, ReduceScatter and AllGather in one kernel each, reading and
// writing the staging buffers that every rank of one node maps from every
// other. Appended to gpu/kernels/reduce.cu and kernels/fast.cu (the element
// types, the 16-byte vector I/O and the unrolled tree dc_level), so the
// arithmetic is the same code and the bits are those of the host oracle.
// DC_IPC_W (the world size, 2..8) is defined by the host before this file.
//
// Staging allocation of every rank (DC_IPC_HDR bytes of control, then two
// halves of cap bytes; call k uses half k & 1):
//   flags[phase][src][block]  u32, written by rank src's block `block`
//   ctl[0] = seq              the number of IPC calls completed
//   ctl[1] = started          blocks of the running call that have read ctl[0]
//   ctl[2] = err              device-side copy of the error word
//   sigline[parity][src]      u64 {seq, signature hash}, written by rank src's
//                             block 0 at the start of every call (parity seq & 1)
//
// Protocol. All traffic between GPUs is stores into a peer's staging buffer
// (posted writes, one NVLink hop), never loads. Block b of a call only ever
// waits for block b of the peers, which handle the same portion of the data,
// so no co-residency of blocks is needed. A block signals a phase after a
// __syncthreads, with a system-scope fence and a release store of the call's
// sequence number into the peer's flag; the peer acquires it (thread p polls
// peer p) and __syncthreads before reading. The sequence number lives in
// device memory (ctl[0]), read by every block at the start and advanced by
// the last block to read it, so a CUDA graph replays correctly. A half is
// written again two calls later, when every block of this rank has seen a
// flag of the call in between from every peer, that is after every peer has
// finished the call that read it.
//
// Signatures. Every call carries the 32-bit hash of its collective's
// signature (a.sig). Block 0 publishes {seq, sig} into every peer's
// sigline at its start; a block that sees a peer's sigline of this sequence
// number with another hash (when a flag arrives, while it waits, and in the
// LL kernels' last step) records DC_IPC_ERR_MISMATCH: two ranks called
// different collectives at this point (e.g. two already-validated
// collectives in different orders), which would otherwise pair up and read
// each other's data. A peer is at most one call ahead (its next call needs
// this rank's data), so the two parities never hold a newer line.
//
// Faults. Every wait is bounded: after timeout_ns (globaltimer) or when the
// host sets the abort word, the block records an error code in the device
// and host error words and returns without signalling, so the peers time out
// too. Every later call sees the device error word and returns at once.
//
// Kernels (T: element type, W: DC_IPC_W):
//   detcoll_ipc_ar2_<type>   two-shot AllReduce: push shard j to rank j; rank
//                            j reduces it, writes it to its output and pushes
//                            it to every peer; copy the peers' shards in
//   detcoll_ipc_rs_<type>    ReduceScatter: push block j to rank j, reduce;
//                            with in_stride 0 (every peer gets the whole
//                            input, all W reduced locally) the one-shot
//                            AllReduce
//   detcoll_ipc_ag           AllGather (bytes): push the input to every peer,
//                            copy the peers' blocks in
//   detcoll_ipc_rsll_<type>, detcoll_ipc_agll
//                            the same ReduceScatter (and one-shot AllReduce)
//                            and AllGather for small messages with low-latency
//                            lines (LL): every 16-byte store carries 8 data
//                            bytes and the call's sequence number twice, so
//                            the data is its own flag (no fence, no separate
//                            flag store, one NVLink trip); twice the bytes.

#define DC_IPC_MAXW 8
#define DC_IPC_MAXB 256
#define DC_IPC_FLAGS (2 * DC_IPC_MAXW * DC_IPC_MAXB)  // u32 flags
#define DC_IPC_HDR 32768                              // control bytes before the halves
#define DC_IPC_SPIN 256                               // polls between clock checks

#define DC_IPC_SIGLINES (DC_IPC_FLAGS * 4 + 64)           // byte offset of sigline[2][MAXW]

enum { DC_IPC_ERR_TIMEOUT = 1, DC_IPC_ERR_ABORT = 2, DC_IPC_ERR_PEER = 3, DC_IPC_ERR_MISMATCH = 4 };

struct dc_ipc {
    char* stage[DC_IPC_MAXW];  // every rank's staging base as mapped here (own at [rank])
    const char* in;            // this rank's input (this piece)
    char* out;                 // this rank's output (this piece)
    long long count;           // elements: AR the piece; RS one block's piece; AG bytes
    long long in_stride;       // RS: bytes between the W blocks of in
    long long out_stride;      // AG: bytes between the W blocks of out
    long long cap;             // bytes of one half
    long long slot;            // bytes of one slot in a half
    long long base;            // offset of slot 0 in a half (the LL area for LL kernels)
    long long timeout_ns;
    unsigned* herr;                  // host-mapped error word
    const volatile unsigned* habort;  // host-mapped abort word
    int rank;
    int w;
    unsigned sig;  // the call's signature hash (never 0)
    unsigned pad_;
};

// ---- memory-model primitives ----

#if defined(DC_HOST_EMU)
__device__ __forceinline__ unsigned dc_ld_acquire(const unsigned* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
__device__ __forceinline__ void dc_st_release(unsigned* p, unsigned v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
__device__ __forceinline__ void dc_fence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
__device__ __forceinline__ unsigned long long dc_now_ns() { return dc_emu_now_ns(); }
__device__ __forceinline__ unsigned dc_atomic_inc(unsigned* p) { return __atomic_fetch_add(p, 1u, __ATOMIC_ACQ_REL); }
__device__ __forceinline__ unsigned long long dc_ld_acquire64(const unsigned long long* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
__device__ __forceinline__ void dc_st_release64(unsigned long long* p, unsigned long long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
#define DC_IPC_PAUSE() dc_emu_pause()
#elif defined(__HIPCC__)
__device__ __forceinline__ unsigned dc_ld_acquire(const unsigned* p) {
    return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void dc_st_release(unsigned* p, unsigned v) {
    __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void dc_fence_system() { __threadfence_system(); }
// wall_clock64 counts at a constant 100 MHz on CDNA GPUs.
__device__ __forceinline__ unsigned long long dc_now_ns() { return (unsigned long long)wall_clock64() * 10ull; }
__device__ __forceinline__ unsigned dc_atomic_inc(unsigned* p) { return atomicAdd(p, 1u); }
__device__ __forceinline__ unsigned long long dc_ld_acquire64(const unsigned long long* p) {
    return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void dc_st_release64(unsigned long long* p, unsigned long long v) {
    __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
#define DC_IPC_PAUSE()
#else
__device__ __forceinline__ unsigned dc_ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void dc_st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void dc_fence_system() { __threadfence_system(); }
__device__ __forceinline__ unsigned long long dc_now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned dc_atomic_inc(unsigned* p) { return atomicAdd(p, 1u); }
__device__ __forceinline__ unsigned long long dc_ld_acquire64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void dc_st_release64(unsigned long long* p, unsigned long long v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
#define DC_IPC_PAUSE()
#endif

// LL line: {data low, seq, data high, seq}, written with one 16-byte store;
// each 8-byte half (data word, sequence) arrives whole, so a reader that
// sees the sequence number twice holds all 8 data bytes of this call.
#if defined(DC_HOST_EMU)
__device__ __forceinline__ void dc_ll_store(char* p, unsigned long long d, unsigned seq) {
    unsigned long long* q = reinterpret_cast<unsigned long long*>(p);
    __atomic_store_n(q, (d & 0xFFFFFFFFull) | ((unsigned long long)seq << 32), __ATOMIC_RELAXED);
    __atomic_store_n(q + 1, (d >> 32) | ((unsigned long long)seq << 32), __ATOMIC_RELAXED);
}
__device__ __forceinline__ bool dc_ll_load(const char* p, unsigned seq, unsigned long long* d) {
    const unsigned long long* q = reinterpret_cast<const unsigned long long*>(p);
    unsigned long long a = __atomic_load_n(q, __ATOMIC_RELAXED), b = __atomic_load_n(q + 1, __ATOMIC_RELAXED);
    if ((unsigned)(a >> 32) != seq || (unsigned)(b >> 32) != seq) return false;
    *d = (a & 0xFFFFFFFFull) | (b << 32);
    return true;
}
#elif defined(__HIPCC__)
__device__ __forceinline__ void dc_ll_store(char* p, unsigned long long d, unsigned seq) {
    unsigned long long* q = reinterpret_cast<unsigned long long*>(p);
    __hip_atomic_store(q, (d & 0xFFFFFFFFull) | ((unsigned long long)seq << 32), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    __hip_atomic_store(q + 1, (d >> 32) | ((unsigned long long)seq << 32), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ bool dc_ll_load(const char* p, unsigned seq, unsigned long long* d) {
    const unsigned long long* q = reinterpret_cast<const unsigned long long*>(p);
    unsigned long long a = __hip_atomic_load(q, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    unsigned long long b = __hip_atomic_load(q + 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    if ((unsigned)(a >> 32) != seq || (unsigned)(b >> 32) != seq) return false;
    *d = (a & 0xFFFFFFFFull) | (b << 32);
    return true;
}
#else
__device__ __forceinline__ void dc_ll_store(char* p, unsigned long long d, unsigned seq) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"((unsigned)d), "r"(seq),
                 "r"((unsigned)(d >> 32)), "r"(seq)
                 : "memory");
}
__device__ __forceinline__ bool dc_ll_load(const char* p, unsigned seq, unsigned long long* d) {
    unsigned a, f0, b, f1;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(f0), "=r"(b), "=r"(f1) : "l"(p) : "memory");
    if (f0 != seq || f1 != seq) return false;
    *d = (unsigned long long)a | ((unsigned long long)b << 32);
    return true;
}
#endif

// ---- layout ----

__device__ __forceinline__ unsigned* dc_ipc_flag(char* stage, int phase, int src, int b) {
    return reinterpret_cast<unsigned*>(stage) + (phase * DC_IPC_MAXW + src) * DC_IPC_MAXB + b;
}
__device__ __forceinline__ unsigned* dc_ipc_ctl(char* stage) {
    return reinterpret_cast<unsigned*>(stage) + DC_IPC_FLAGS;
}
__device__ __forceinline__ unsigned long long* dc_ipc_sigline(char* stage, unsigned seq, int src) {
    return reinterpret_cast<unsigned long long*>(stage + DC_IPC_SIGLINES) + (seq & 1u) * DC_IPC_MAXW + src;
}
// The slots of this call in rank r's half: the LL kernels use their own
// area of every half (a.base), where only LL lines of earlier calls (older
// sequence numbers) are ever found, so stale data can never pass for a
// line of this call.
__device__ __forceinline__ char* dc_ipc_half(const dc_ipc& a, int r, unsigned seq) {
    return a.stage[r] + DC_IPC_HDR + (long long)(seq & 1u) * a.cap + a.base;
}
// Slot of source rank src in rank dst's half: the W-1 peers in rank order.
__device__ __forceinline__ int dc_ipc_slot(int src, int dst) { return src > dst ? src - 1 : src; }

// Portion of block b in a range of m elements split over g blocks: equal
// multiples of nv elements (one 16-byte vector), the same on every rank.
__device__ __forceinline__ void dc_ipc_portion(long long m, long long nv, int g, int b, long long* lo, long long* hi) {
    long long per = (m + g - 1) / g;
    per = (per + nv - 1) / nv * nv;
    long long l = per * b, h = l + per;
    *lo = l < m ? l : m;
    *hi = h < m ? h : m;
}

// Shard p of a two-shot AllReduce of m elements: whole 16-byte vectors
// split as evenly as possible (the first ones one vector more), the last
// shard cut at m. The bits do not depend on the split.
__device__ __forceinline__ void dc_ipc_shard(long long m, long long nv, int w, int p, long long* lo, long long* hi) {
    long long vecs = (m + nv - 1) / nv, q = vecs / w, e = vecs % w;
    long long l = (p * q + (p < e ? p : e)) * nv, h = l + (q + (p < e ? 1 : 0)) * nv;
    *lo = l < m ? l : m;
    *hi = h < m ? h : m;
}

// ---- block state and the steps every kernel shares ----

struct dc_ipc_blk {
    unsigned seq;
    int stop;
};

// dc_ipc_begin: thread 0 reads the sequence number of this call and stops
// the block if an earlier call failed; the last of the g blocks to read it
// advances it for the next call (every block has read it by then, and the
// next call starts after this kernel has ended), so no block waits for it
// at the end.
__device__ __forceinline__ void dc_ipc_begin(const dc_ipc& a, dc_ipc_blk& s, int b, int g, int t) {
    if (t != 0) return;
    unsigned* ctl = dc_ipc_ctl(a.stage[a.rank]);
    const unsigned seq = *(volatile unsigned*)&ctl[0] + 1u;
    s.seq = seq;
    s.stop = *(volatile unsigned*)&ctl[2] != 0u;
    if (b == 0) {
        const unsigned long long line = ((unsigned long long)a.sig << 32) | seq;
        for (int p = 0; p < a.w; ++p)
            if (p != a.rank) dc_st_release64(dc_ipc_sigline(a.stage[p], seq, a.rank), line);
    }
    if (dc_atomic_inc(&ctl[1]) == (unsigned)(g - 1)) {
        *(volatile unsigned*)&ctl[1] = 0u;
        *(volatile unsigned*)&ctl[0] = seq;
    }
}

// dc_ipc_signal: thread 0 publishes phase `phase` of this block to every peer.
__device__ __forceinline__ void dc_ipc_signal(const dc_ipc& a, dc_ipc_blk& s, int phase, int b, int t) {
    if (t != 0) return;
    dc_fence_system();
    for (int p = 0; p < a.w; ++p)
        if (p != a.rank) dc_st_release(dc_ipc_flag(a.stage[p], phase, a.rank, b), s.seq);
}

__device__ __forceinline__ void dc_ipc_fail(const dc_ipc& a, dc_ipc_blk& s, unsigned code) {
    unsigned* ctl = dc_ipc_ctl(a.stage[a.rank]);
    *(volatile unsigned*)&ctl[2] = code;
    *(volatile unsigned*)a.herr = code;
    dc_fence_system();
    s.stop = 1;
}

// dc_ipc_sigcheck compares peer p's signature line of this call with ours:
// 1 (and the block stopped with DC_IPC_ERR_MISMATCH) when it differs, 0
// when it matches or has not arrived yet.
__device__ __forceinline__ int dc_ipc_sigcheck(const dc_ipc& a, dc_ipc_blk& s, int p) {
    const unsigned long long v = dc_ld_acquire64(dc_ipc_sigline(a.stage[a.rank], s.seq, p));
    if ((unsigned)v != s.seq || (unsigned)(v >> 32) == a.sig) return 0;
    dc_ipc_fail(a, s, DC_IPC_ERR_MISMATCH);
    return 1;
}

// dc_ipc_sigwait: in block 0, thread p waits (bounded) for peer p's
// signature line of this call and compares it: the LL kernels' verdict,
// whose data lines carry no signature.
__device__ __forceinline__ void dc_ipc_sigwait(const dc_ipc& a, dc_ipc_blk& s, int b, int t) {
    if (b != 0 || t >= a.w || t == a.rank) return;
    const unsigned long long* l = dc_ipc_sigline(a.stage[a.rank], s.seq, t);
    const unsigned* derr = dc_ipc_ctl(a.stage[a.rank]) + 2;
    unsigned long long deadline = 0;
    for (unsigned n = 0;; ++n) {
        if ((unsigned)dc_ld_acquire64(l) == s.seq) {
            dc_ipc_sigcheck(a, s, t);
            return;
        }
        DC_IPC_PAUSE();
        if (n % DC_IPC_SPIN == DC_IPC_SPIN - 1) {
            unsigned long long now = dc_now_ns();
            if (deadline == 0) deadline = now + (unsigned long long)a.timeout_ns;
            if (*a.habort) {
                dc_ipc_fail(a, s, DC_IPC_ERR_ABORT);
                return;
            }
            if (*(volatile const unsigned*)derr) {
                s.stop = 1;
                return;
            }
            if (now > deadline) {
                dc_ipc_fail(a, s, DC_IPC_ERR_TIMEOUT);
                return;
            }
        }
    }
}

// dc_ipc_wait: thread p waits for peer p's flag of this phase and block.
__device__ __forceinline__ void dc_ipc_wait(const dc_ipc& a, dc_ipc_blk& s, int phase, int b, int t) {
    if (t >= a.w || t == a.rank) return;
    const unsigned* f = dc_ipc_flag(a.stage[a.rank], phase, t, b);
    const unsigned* derr = dc_ipc_ctl(a.stage[a.rank]) + 2;
    unsigned long long deadline = 0;
    for (unsigned n = 0;; ++n) {
        if ((int)(dc_ld_acquire(f) - s.seq) >= 0) {
            // Block 0's flag follows the peer's signature line (same
            // thread, release), so block 0 always gets a verdict here.
            dc_ipc_sigcheck(a, s, t);
            return;
        }
        DC_IPC_PAUSE();
        if (n % DC_IPC_SPIN == DC_IPC_SPIN - 1) {
            unsigned long long now = dc_now_ns();
            if (dc_ipc_sigcheck(a, s, t)) return;
            if (deadline == 0) deadline = now + (unsigned long long)a.timeout_ns;
            if (*a.habort) {
                dc_ipc_fail(a, s, DC_IPC_ERR_ABORT);
                return;
            }
            if (*(volatile const unsigned*)derr) {  // another block failed
                s.stop = 1;
                return;
            }
            if (now > deadline) {
                dc_ipc_fail(a, s, DC_IPC_ERR_TIMEOUT);
                return;
            }
        }
    }
}

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

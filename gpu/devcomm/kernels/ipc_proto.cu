// detcoll peer-memory (CUDA IPC) collectives, part 1: the protocol (this
// file; ipc.cu after it has the data movement and the kernels). One-shot
// and two-shot AllReduce, ReduceScatter and AllGather in one kernel each,
// reading and
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
//   ctl[3]                    claimed by the first block to report a mismatch
//   sigline[parity][src]      u64 {seq, signature hash}, written by rank src's
//                             block 0 at the start of every call (parity seq & 1)
//   callline[parity][src]     u64 {seq, call number}, written just before
//                             sigline[parity][src]
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
// Signatures. Every call carries its identity from the host's agreement
// (internal/agree): the 32-bit fold of its signature hash (a.sig) and the
// low 32 bits of its call number (a.call). Block 0 publishes {seq, call}
// into every peer's callline and then {seq, sig} into its sigline (both
// release) at its start; a block that sees a peer's sigline of this sequence number
// with another hash, or whose callline then holds another call number
// (when a flag arrives, while it waits, and in the LL kernels' last step),
// records DC_IPC_ERR_MISMATCH: two ranks called different collectives at
// this point (e.g. two already-validated collectives in different orders),
// or one rank made a call the other did not (one that launched no
// peer-memory kernel), which would otherwise pair up and read each other's
// data. The call number is a kernel argument, so a graph replays the
// numbers of its capture: every rank must replay where its peers replay.
// A healthy peer is at most one call ahead (its next call needs this
// rank's data), so the two parities never hold a newer line; a failed peer
// may run ahead (its later calls return at once), but both lines name
// their sequence number, so a newer one is never compared as this call's.
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
#define DC_IPC_CALLLINES (DC_IPC_SIGLINES + 2 * DC_IPC_MAXW * 8)  // byte offset of callline[2][MAXW] (u64)

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
    unsigned* herr;                  // host-mapped error word, then the mismatch record (herr[2..6])
    const volatile unsigned* habort;  // host-mapped abort word
    int rank;
    int w;
    unsigned sig;   // the call's folded signature hash (never 0 from the host)
    unsigned call;  // the low 32 bits of the call's number
};

// ---- memory-model primitives ----

#if defined(DC_HOST_EMU)
__device__ __forceinline__ unsigned dc_ld_acquire(const unsigned* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
__device__ __forceinline__ void dc_st_release(unsigned* p, unsigned v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
__device__ __forceinline__ void dc_fence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
__device__ __forceinline__ unsigned long long dc_now_ns() { return dc_emu_now_ns(); }
__device__ __forceinline__ unsigned dc_atomic_inc(unsigned* p) { return __atomic_fetch_add(p, 1u, __ATOMIC_ACQ_REL); }
__device__ __forceinline__ unsigned dc_atomic_cas(unsigned* p, unsigned cmp, unsigned v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return cmp;
}
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
__device__ __forceinline__ unsigned dc_atomic_cas(unsigned* p, unsigned cmp, unsigned v) { return atomicCAS(p, cmp, v); }
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
__device__ __forceinline__ unsigned dc_atomic_cas(unsigned* p, unsigned cmp, unsigned v) { return atomicCAS(p, cmp, v); }
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
__device__ __forceinline__ unsigned long long* dc_ipc_callline(char* stage, unsigned seq, int src) {
    return reinterpret_cast<unsigned long long*>(stage + DC_IPC_CALLLINES) + (seq & 1u) * DC_IPC_MAXW + src;
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
        const unsigned long long cline = ((unsigned long long)a.call << 32) | seq;
        for (int p = 0; p < a.w; ++p)
            if (p != a.rank) {
                dc_st_release64(dc_ipc_callline(a.stage[p], seq, a.rank), cline);
                dc_st_release64(dc_ipc_sigline(a.stage[p], seq, a.rank), line);
            }
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

// dc_ipc_mismatch stops the block with DC_IPC_ERR_MISMATCH: peer p's line
// of this call named call number `call` and hash `sig`. The first block of
// the rank to find one (ctl[3]) writes both calls into the host words
// before the error code (the peer word last, a fence before the code), so
// the host that reads the code reads the record; the others only set the
// device error word.
__device__ __forceinline__ void dc_ipc_mismatch(const dc_ipc& a, dc_ipc_blk& s, int p, unsigned call, unsigned sig) {
    unsigned* ctl = dc_ipc_ctl(a.stage[a.rank]);
    if (dc_atomic_cas(&ctl[3], 0u, 1u) != 0u) {
        *(volatile unsigned*)&ctl[2] = DC_IPC_ERR_MISMATCH;
        s.stop = 1;
        return;
    }
    volatile unsigned* h = a.herr;
    h[3] = call;
    h[4] = sig;
    h[5] = a.call;
    h[6] = a.sig;
    dc_fence_system();
    h[2] = (unsigned)p + 1u;
    dc_fence_system();
    dc_ipc_fail(a, s, DC_IPC_ERR_MISMATCH);
}

// dc_ipc_sigcheck compares peer p's signature line and call line of this
// call with ours: 1 (and the block stopped with DC_IPC_ERR_MISMATCH) when
// the hash or the call number differs, 0 when both match or a line of this
// call has not arrived. The call line was written before the signature
// line (release), so once the signature line of this call is seen, the
// call line of this call (or a newer one, of a failed peer: no verdict) is
// too.
__device__ __forceinline__ int dc_ipc_sigcheck(const dc_ipc& a, dc_ipc_blk& s, int p) {
    const unsigned long long v = dc_ld_acquire64(dc_ipc_sigline(a.stage[a.rank], s.seq, p));
    if ((unsigned)v != s.seq) return 0;
    const unsigned long long c = dc_ld_acquire64(dc_ipc_callline(a.stage[a.rank], s.seq, p));
    if ((unsigned)c != s.seq) return 0;
    if ((unsigned)(v >> 32) == a.sig && (unsigned)(c >> 32) == a.call) return 0;
    dc_ipc_mismatch(a, s, p, (unsigned)(c >> 32), (unsigned)(v >> 32));
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


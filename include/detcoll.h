/*
 * detcoll.h — C API of detcoll, deterministic collective communication.
 *
 * This is the public, hand-maintained header of libdetcoll.so (built with
 * `go build -buildmode=c-shared -o bin/libdetcoll.so ./capi`). The header
 * that cgo generates next to the library is an implementation detail; do not
 * include it.
 *
 * The API is shaped like NCCL's so that porting is mechanical: ncclX becomes
 * detcollX, ncclComm_t detcollComm_t, ncclUniqueId detcollUniqueId, and the
 * reduction operator argument disappears (detcoll only sums). See
 * docs/nccl-mapping.md for the call-by-call table.
 *
 * The promise: the output bits of every reduction are a pure function of the
 * input bits of every rank, the number of ranks, the dtype and the
 * accumulate mode. Every element is summed with one fixed tree over the ranks
 * (adjacent pairs, lower rank on the left, an odd last value carried up:
 * ((r0+r1)+(r2+r3))+... ; (r0+r1)+r2 for three ranks), IEEE round to nearest
 * even in the element type, canonical NaNs. Every rank receives the same
 * bits, whatever the algorithm, message size, transport or device.
 *
 * Conventions
 *
 *   - Every function returns a detcollResult_t; detcollSuccess is 0. On any
 *     other result a human-readable message is available from
 *     detcollGetLastError (see there).
 *   - No function panics, aborts or exits the process on bad input: invalid
 *     handles, NULL pointers, unknown dtypes and size overflows are reported
 *     as results. (A non-NULL pointer to memory that is not valid for the
 *     stated size is undefined behaviour, as in NCCL; detcoll probes the
 *     first and last byte of host buffers and reports an unreadable one as
 *     detcollInvalidArgument, which catches most device pointers passed to a
 *     Host function.)
 *   - Collectives are matched across ranks by call order: every rank of a
 *     communicator must issue the same collectives, with the same counts and
 *     dtypes, in the same order. The first time a rank sees a new
 *     (operation, count, dtype) the ranks compare it before any data moves;
 *     a disagreement is detcollMismatch on every rank. When some rank's call
 *     matches one it has already compared, it skips the comparison; every
 *     message carries a tag naming its phase and signature, so the ranks
 *     still notice the disagreement from the messages and report
 *     detcollMismatch. (A peer whose process exits at once after its own
 *     error can, rarely, leave another rank with detcollRemoteError.) No
 *     data is mixed up either way.
 *   - A communicator is safe to use from several threads, but its
 *     collectives run one at a time in call order: issue them from one
 *     thread. detcollCommAbort may be called from any thread to unblock a
 *     collective in progress.
 *   - Any failure during a collective other than an argument error
 *     (detcollInvalidArgument, detcollUnsupported) poisons the communicator:
 *     its peers are disconnected so that they fail fast too, and every later
 *     collective returns the same result. Destroy it.
 *
 * Environment (read at the time of the call, through getenv):
 *   DETCOLL_TIMEOUT       Go duration ("90s", "5m"; default 5m) bounding each
 *                         collective; a rank that waits longer gets
 *                         detcollTimeout.
 *   DETCOLL_INIT_TIMEOUT  Go duration (default 5m) bounding
 *                         detcollCommInitRank and detcollCommInitFromEnv
 *                         (the first detcollCommInitFromEnv of a process
 *                         also gives up after 60 s waiting for its peers'
 *                         connections once it has reached the store).
 *   DETCOLL_ACCUMULATE    "native" (default: fp16/bf16 every tree node
 *                         rounded to the type, as CUDA __hadd) or "f32" (the
 *                         whole tree in float32, rounded once), fixed at
 *                         communicator creation; all ranks must agree.
 *   DETCOLL_CUDA_DEVICE   the GPU ordinal of device collectives (default:
 *                         see detcollAllReduce).
 *   DETCOLL_TCP_HOST      the address this process listens on and
 *                         advertises (default 127.0.0.1; set a routable one
 *                         for multi-node jobs). It is also where
 *                         detcollGetUniqueId's store listens.
 *   plus the launcher variables of detcollCommInitFromEnv.
 */
#ifndef DETCOLL_H_
#define DETCOLL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DETCOLL_MAJOR 0
#define DETCOLL_MINOR 1
#define DETCOLL_PATCH 0
/* Like NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z. */
#define DETCOLL_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define DETCOLL_VERSION_CODE DETCOLL_VERSION(DETCOLL_MAJOR, DETCOLL_MINOR, DETCOLL_PATCH)

/* Results. Codes 0-6 have the numbers of the ncclResult_t of the same
 * meaning; 7 (ncclInProgress) is reserved. */
typedef enum {
  detcollSuccess = 0,
  detcollUnhandledDeviceError = 1, /* a CUDA/HIP call failed (device backends) */
  detcollSystemError = 2,          /* the operating system or network failed */
  detcollInternalError = 3,        /* a bug in detcoll (a recovered panic) */
  detcollInvalidArgument = 4,      /* bad argument: NULL, unknown dtype, overflow, bad handle... */
  detcollInvalidUsage = 5,         /* bad use: inconsistent ranks, bad launch environment... */
  detcollRemoteError = 6,          /* a peer failed or went away */
  /* 7 is reserved (ncclInProgress) */
  detcollMismatch = 8,     /* ranks called different collectives, counts or dtypes */
  detcollTimeout = 9,      /* a collective or the rendezvous took too long */
  detcollClosed = 10,      /* the communicator was destroyed or aborted */
  detcollUnsupported = 11, /* valid request that cannot be done here (no CUDA driver or NCCL, integer sums) */
  detcollNumResults = 12
} detcollResult_t;

/* Element types, numbered as ncclDataType_t. Reductions accept
 * detcollFloat16, detcollFloat32, detcollFloat64 and detcollBfloat16;
 * AllGather accepts every type (it only moves bytes). */
typedef enum {
  detcollInt8 = 0,
  detcollChar = 0,
  detcollUint8 = 1,
  detcollInt32 = 2,
  detcollInt = 2,
  detcollUint32 = 3,
  detcollInt64 = 4,
  detcollUint64 = 5,
  detcollFloat16 = 6,
  detcollHalf = 6,
  detcollFloat32 = 7,
  detcollFloat = 7,
  detcollFloat64 = 8,
  detcollDouble = 8,
  detcollBfloat16 = 9,
  detcollFloat8e4m3 = 10,
  detcollFloat8e5m2 = 11,
  detcollNumTypes = 12
} detcollDataType_t;

/* An opaque communicator handle. It is not a pointer to memory: it names an
 * entry of the library's handle table, so a destroyed or forged handle is
 * reported (detcollClosed, detcollInvalidArgument) instead of crashing.
 * NULL is never a valid communicator. */
typedef struct detcollComm* detcollComm_t;

#define DETCOLL_UNIQUE_ID_BYTES 128
/* A job's rendezvous ticket, made by detcollGetUniqueId on one process and
 * copied (as plain bytes, by any means) to every rank. It encodes the
 * address of a rendezvous store, that store's token and a random job key. */
typedef struct {
  char internal[DETCOLL_UNIQUE_ID_BYTES];
} detcollUniqueId;

#ifndef DETCOLL_TYPES_ONLY /* (the library's own sources include only the types) */

/* Version of the library: DETCOLL_VERSION_CODE of the build. */
detcollResult_t detcollGetVersion(int* version);

/* Makes a fresh unique id. The first call in a process starts a rendezvous
 * store in that process (as ncclGetUniqueId starts NCCL's bootstrap root),
 * listening on $DETCOLL_TCP_HOST (default 127.0.0.1) on a free port with a
 * random token; later calls reuse it. Every id carries its own random job
 * key, so one store serves any number of communicators. The store lives
 * until the process exits: the process that calls detcollGetUniqueId must
 * stay alive until every rank's detcollCommInitRank has returned. */
detcollResult_t detcollGetUniqueId(detcollUniqueId* uniqueId);

/* Creates rank `rank` (0 <= rank < nranks) of a communicator of nranks
 * ranks. Every rank calls it with the same id and nranks; it returns once
 * all ranks are connected (or DETCOLL_INIT_TIMEOUT passes: detcollTimeout).
 * Ranks that disagree on nranks, or two callers with the same rank, are
 * detcollInvalidUsage on the caller that noticed and detcollRemoteError on
 * the others. */
detcollResult_t detcollCommInitRank(detcollComm_t* comm, int nranks, detcollUniqueId commId, int rank);

/* Creates a communicator from the launcher's environment, like
 * torch.distributed's env:// method: detcoll launch (DETCOLL_RANK,
 * DETCOLL_WORLD_SIZE, DETCOLL_STORE_ADDR, DETCOLL_TOKEN), torchrun (RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm (SLURM_PROCID,
 * SLURM_NTASKS, ...) or Open MPI (OMPI_COMM_WORLD_RANK, ...), in that order
 * of preference; without any of them, a world of one rank. detcoll's store
 * never takes torch's MASTER_PORT: under torchrun, Slurm and Open MPI it is
 * DETCOLL_STORE_ADDR if set, else MASTER_ADDR:DETCOLL_STORE_PORT if set,
 * else MASTER_ADDR:(MASTER_PORT+1), served by rank 0. A bad environment is
 * detcollInvalidUsage.
 *
 * Every rank must call it the same number of times in the same order; each
 * call makes a new communicator over all ranks of the job. The job's store
 * connection is released when the last of them is destroyed; after that a
 * process cannot join again (detcollInvalidUsage). */
detcollResult_t detcollCommInitFromEnv(detcollComm_t* comm);

/* A key-value store of the caller's, for detcollCommInitStore: the ranks
 * meet through it instead of a store of detcoll's (python/detcoll/torch
 * passes torch.distributed's c10d Store this way). The library calls the
 * callbacks from its own threads, possibly several at once; each returns 0
 * on success and any other value (except where said) on failure. Keys are
 * NUL-terminated ASCII; values are bytes.
 *   set: stores value (len bytes) at key, replacing any value.
 *   get: waits at most timeoutMs milliseconds for key to exist (it may
 *        also return at once: a non-blocking store). Returns 1 if it does
 *        not exist (the library asks again, backing off from 1 to 50 ms,
 *        until its own deadline); else 0 with *len set to the value's full
 *        length and min(*len, cap) bytes copied to buf (the library asks
 *        again with a larger buffer when *len > cap).
 *   add: adds delta to the integer at key (a missing key is 0), stored as
 *        decimal ASCII like torch's Store.add; *result is the new value.
 *   del: optional (NULL allowed): deletes key, *existed = 1 if it existed.
 * ctx is passed to every callback unchanged. */
typedef struct {
  void* ctx;
  int (*set)(void* ctx, const char* key, const void* value, size_t len);
  int (*get)(void* ctx, const char* key, int timeoutMs, void* buf, size_t cap, size_t* len);
  int (*add)(void* ctx, const char* key, int64_t delta, int64_t* result);
  int (*del)(void* ctx, const char* key, int* existed);
} detcollStore;

/* Creates rank `rank` of a communicator of nranks ranks that meet in the
 * caller's store under the key prefix `prefix` (every rank passes the same
 * prefix; a prefix names one communicator: use a fresh one for each). Each
 * rank publishes the address of its TCP listener there and connects a mesh
 * (no port of detcoll's own besides those listeners). The struct is copied;
 * the callbacks and ctx must stay valid until the communicator is destroyed
 * (device collectives use the store on their first call). timeoutMs > 0
 * bounds every collective (overriding DETCOLL_TIMEOUT) and the creation
 * (unless DETCOLL_INIT_TIMEOUT is set); 0 keeps the environment's or the
 * default (5 min). Device collectives use the calling thread's current GPU,
 * as for detcollCommInitRank. More than nranks ranks joining under one
 * prefix is detcollInvalidUsage. */
detcollResult_t detcollCommInitStore(detcollComm_t* comm, int nranks, int rank, const detcollStore* store,
                                     const char* prefix, int64_t timeoutMs);

/* Number of ranks of comm. */
detcollResult_t detcollCommCount(const detcollComm_t comm, int* count);
/* This process's rank in comm. */
detcollResult_t detcollCommUserRank(const detcollComm_t comm, int* rank);

/* Device-memory collectives (CUDA device pointers), enqueued on `stream` (a
 * cudaStream_t; NULL is the legacy default stream). Like NCCL's they return
 * once the work is enqueued, without synchronising: synchronise the stream
 * (or wait on an event) before reading the output on the host. Layouts are
 * those of the Host variants below; AllReduce may run in place, AllGather in
 * place when sendbuff == recvbuff + rank*sendcount*elementsize.
 *
 * The library's CUDA backend loads the CUDA driver, NCCL (libnccl.so.2, or
 * $DETCOLL_NCCL_LIB; a process that already loaded one, such as PyTorch, uses
 * that one) and NVRTC at run time, on a communicator's first device call:
 * every rank of the communicator must make that call (it is collective, like
 * any other), and it creates the communicator's device state: an NCCL
 * communicator over the same ranks (NCCL only moves bytes; detcoll's kernels
 * do every addition, so the bits equal the host calls'). Where CUDA or NCCL
 * cannot be loaded, every device call returns detcollUnsupported and
 * detcollGetLastError says which library is missing.
 *
 * The GPU: $DETCOLL_CUDA_DEVICE (an ordinal) if set; else, for a
 * communicator of detcollCommInitRank, the device current on the calling
 * thread (as ncclCommInitRank takes it; if none is current,
 * DETCOLL_LOCAL_RANK or LOCAL_RANK, else the rank); for a communicator of
 * detcollCommInitFromEnv, the local rank's GPU (LOCAL_RANK of torchrun,
 * DETCOLL_LOCAL_RANK of detcoll launch, ...; the only GPU when one is
 * visible), and a different device current on the calling thread is
 * detcollInvalidUsage (make the local rank's GPU current first, e.g.
 * torch.cuda.set_device(LOCAL_RANK) or cudaSetDevice). The buffers must be on
 * that GPU, and its primary context (the one the CUDA runtime uses) is used.
 * One rank of a communicator per process, as with NCCL without groups.
 * A failed first call is returned by every later device call on comm. */
detcollResult_t detcollAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 detcollDataType_t datatype, detcollComm_t comm, void* stream);
detcollResult_t detcollAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 detcollDataType_t datatype, detcollComm_t comm, void* stream);
detcollResult_t detcollReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     detcollDataType_t datatype, detcollComm_t comm, void* stream);

/* Host-memory collectives. They block until this rank's part is complete;
 * the library uses the buffers only during the call.
 *
 * AllReduce: count elements in, count out, identical on every rank.
 *   sendbuff == recvbuff runs in place; other overlaps are invalid.
 * AllGather: sendcount elements in; nranks*sendcount out, rank r's block at
 *   [r*sendcount, (r+1)*sendcount). In place when
 *   sendbuff == recvbuff + rank*sendcount*elementsize.
 * ReduceScatter: nranks*recvcount elements in; recvcount out on rank r, the
 *   sum over ranks of block r. Send and receive must not overlap.
 * A count of 0 is a valid (collective) no-op; NULL buffers are allowed then. */
detcollResult_t detcollHostAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     detcollDataType_t datatype, detcollComm_t comm);
detcollResult_t detcollHostAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                     detcollDataType_t datatype, detcollComm_t comm);
detcollResult_t detcollHostReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                         detcollDataType_t datatype, detcollComm_t comm);

/* Data movement and synchronisation on host memory (no arithmetic: every
 * bit arrives as sent; every datatype is accepted, its size is all that
 * matters). Matched and validated across ranks like the collectives above
 * (Send/Recv between their two ranks only). They block until this rank's
 * part is complete.
 *
 * Broadcast: count elements of root's buf into buf on every rank.
 * Scatter: block r (recvcount elements) of root's sendbuff (nranks*recvcount;
 *   ignored elsewhere, may be NULL) into rank r's recvbuff.
 * Gather: every rank's sendcount elements into root's recvbuff (nranks *
 *   sendcount, rank r's block at r*sendcount; ignored elsewhere, may be
 *   NULL).
 * AllToAllv: block p of sendbuff (sendcounts[p] elements at element offset
 *   sdispls[p]) goes to rank p, which receives it as its block r of recvbuff
 *   (recvcounts[r] elements at rdispls[r]); the four arrays have nranks
 *   entries. sendcounts[p] on rank r must equal recvcounts[r] on rank p: a
 *   disagreement is detcollMismatch on the receiver. Blocks may not overlap.
 * Send/Recv: count elements to/from peer, matched by the peer's Recv/Send
 *   with the same tag (>= 0) and count, in call order between the two ranks
 *   (interleaved with their collectives in call order). Send may wait until
 *   the peer posts the matching Recv: two ranks must not both Send to each
 *   other first. Another tag or count is detcollMismatch on the receiver.
 * Barrier: returns once every rank has entered it. */
detcollResult_t detcollHostBroadcast(void* buf, size_t count, detcollDataType_t datatype, int root, detcollComm_t comm);
detcollResult_t detcollHostScatter(const void* sendbuff, void* recvbuff, size_t recvcount, detcollDataType_t datatype,
                                   int root, detcollComm_t comm);
detcollResult_t detcollHostGather(const void* sendbuff, void* recvbuff, size_t sendcount, detcollDataType_t datatype,
                                  int root, detcollComm_t comm);
detcollResult_t detcollHostAllToAllv(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                                     void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                                     detcollDataType_t datatype, detcollComm_t comm);
detcollResult_t detcollHostSend(const void* buff, size_t count, detcollDataType_t datatype, int peer, int tag,
                                detcollComm_t comm);
detcollResult_t detcollHostRecv(void* buff, size_t count, detcollDataType_t datatype, int peer, int tag,
                                detcollComm_t comm);
detcollResult_t detcollBarrier(detcollComm_t comm);

/* Destroys comm: disconnects from its peers and frees the handle. A rank 0
 * that serves the job's store (torchrun, Slurm, Open MPI) waits, when its
 * last environment communicator goes, until every rank has released the
 * store (up to a minute). The handle is invalid afterwards even if a result
 * other than detcollSuccess is returned; a second destroy is detcollClosed. */
detcollResult_t detcollCommDestroy(detcollComm_t comm);

/* Like detcollCommDestroy, but never waits for peers: a collective blocked
 * in another thread returns detcollClosed, and the peers of comm fail their
 * collectives (detcollRemoteError) instead of hanging. Safe from any
 * thread. */
detcollResult_t detcollCommAbort(detcollComm_t comm);

/* A static description of a result ("invalid argument", ...), for every
 * value including unknown ones. Never NULL; never freed. */
const char* detcollGetErrorString(detcollResult_t result);

/* The detail message of the last failure.
 *   comm == NULL: the last failed detcoll call made by the calling thread,
 *     whatever it was (thread-local, like errno).
 *   comm != NULL and live: the last failure recorded on that communicator,
 *     by any thread.
 *   comm destroyed or invalid: as for NULL.
 * "" when there was none. Successful calls do not clear it. The string
 * belongs to the calling thread and stays valid until that thread's next
 * call of detcollGetLastError (comm != NULL) or next failed detcoll call
 * (comm == NULL); copy it to keep it. */
const char* detcollGetLastError(detcollComm_t comm);

#endif /* DETCOLL_TYPES_ONLY */

#ifdef __cplusplus
}
#endif

#endif /* DETCOLL_H_ */

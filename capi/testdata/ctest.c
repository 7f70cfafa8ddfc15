/* ctest: a rank of the C API test (capi_test.go), run under
 * `detcoll launch --standalone --nproc-per-node 3 -- ./ctest MODE OUTDIR`.
 *
 * MODE host: detcollCommInitFromEnv, then host collectives on generated
 *   inputs (NaN, inf, -0 and subnormals included). Each case writes this
 *   rank's input and output as raw little-endian bytes to
 *   OUTDIR/<case>.r<rank>.in and .out, and rank 0 lists the cases in
 *   OUTDIR/host.cases ("name op dtype count" per line); the Go test checks
 *   them against reduce.Oracle. Then misuse, which must yield result codes,
 *   never a crash: NULL comm and buffers, bad and unsupported dtypes,
 *   overflowing counts, overlapping buffers, unreadable pointers, device
 *   calls without a device backend, a count mismatch across ranks
 *   (detcollMismatch on every rank), use after destroy.
 * MODE uid: rank 0 makes two unique ids and publishes them as files; every
 *   rank joins both with detcollCommInitRank (the second with reversed ranks)
 *   and runs collectives on each (cases in OUTDIR/uid.cases).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "detcoll.h"

static int g_rank = -1;
static const char* g_dir;
static FILE* g_cases;

#define DIE(...)                                       \
  do {                                                 \
    fprintf(stderr, "ctest rank %d: ", g_rank);        \
    fprintf(stderr, __VA_ARGS__);                      \
    fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
    exit(1);                                           \
  } while (0)

/* OK(call): the call must succeed. */
#define OK(call)                                                                        \
  do {                                                                                  \
    detcollResult_t rc_ = (call);                                                       \
    if (rc_ != detcollSuccess)                                                          \
      DIE("%s = %d (%s): %s", #call, rc_, detcollGetErrorString(rc_), detcollGetLastError(NULL)); \
  } while (0)

/* EXPECT(call, code): the call must fail with code and leave a message that
 * names the function. */
#define EXPECT(call, code)                                                                        \
  do {                                                                                            \
    detcollResult_t rc_ = (call);                                                                 \
    const char* msg_ = detcollGetLastError(NULL);                                                 \
    if (rc_ != (code))                                                                            \
      DIE("%s = %d (%s), want %d (%s); last error: %s", #call, rc_, detcollGetErrorString(rc_), \
          (code), detcollGetErrorString(code), msg_);                                            \
    if (msg_ == NULL || strncmp(msg_, "detcoll", 7) != 0)                                         \
      DIE("%s: last error %s does not name the function", #call, msg_ ? msg_ : "(null)");       \
  } while (0)

/* ---- deterministic inputs ---------------------------------------------- */

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t h3(uint64_t seed, uint64_t rank, uint64_t i) {
  return mix(mix(mix(seed) ^ rank) ^ i);
}

static uint32_t gen_f32(uint64_t h) {
  uint32_t sign = (uint32_t)(h >> 63) << 31;
  switch (h % 64) {
    case 0: return 0x7FA00001u | sign; /* NaN with a payload */
    case 1: return 0x7F800000u;        /* +inf */
    case 2: return 0xFF800000u;        /* -inf */
    case 3: return 0x80000000u;        /* -0 */
    case 4: return sign | (uint32_t)((h >> 20) & 0x7FFFFF); /* subnormal */
    case 5: return sign | 0x7F7FFFFFu; /* max: sums overflow */
  }
  uint32_t exp = 127 - 24 + (uint32_t)((h >> 8) % 49);
  return sign | exp << 23 | (uint32_t)((h >> 24) & 0x7FFFFF);
}

static uint16_t gen_f16(uint64_t h) {
  uint16_t sign = (uint16_t)((h >> 63) << 15);
  switch (h % 64) {
    case 0: return 0x7E01 | sign;
    case 1: return 0x7C00;
    case 2: return 0xFC00;
    case 3: return 0x8000;
    case 4: return sign | (uint16_t)((h >> 20) & 0x3FF);
    case 5: return sign | 0x7BFF;
  }
  uint16_t exp = (uint16_t)(15 - 7 + (h >> 8) % 15);
  return sign | exp << 10 | (uint16_t)((h >> 24) & 0x3FF);
}

static uint64_t gen_f64(uint64_t h) {
  uint64_t sign = (h >> 63) << 63;
  switch (h % 64) {
    case 0: return 0x7FF0000000000001ull; /* signalling NaN */
    case 1: return 0x7FF0000000000000ull;
    case 2: return 0xFFF0000000000000ull;
    case 3: return 0x8000000000000000ull;
    case 4: return sign | (mix(h) & 0xFFFFFFFFFFFFFull);
  }
  uint64_t exp = 1023 - 40 + (h >> 8) % 81;
  return sign | exp << 52 | (mix(h) & 0xFFFFFFFFFFFFFull);
}

static size_t dt_size(detcollDataType_t dt) {
  switch (dt) {
    case detcollInt8: case detcollUint8: return 1;
    case detcollFloat16: case detcollBfloat16: return 2;
    case detcollInt32: case detcollUint32: case detcollFloat32: return 4;
    default: return 8;
  }
}

static const char* dt_name(detcollDataType_t dt) {
  switch (dt) {
    case detcollUint8: return "u8";
    case detcollInt32: return "i32";
    case detcollFloat16: return "fp16";
    case detcollBfloat16: return "bf16";
    case detcollFloat32: return "fp32";
    case detcollFloat64: return "fp64";
    default: return "?";
  }
}

/* fill writes n elements of dt for (seed, rank). */
static void fill(void* buf, size_t n, detcollDataType_t dt, uint64_t seed, int rank) {
  for (size_t i = 0; i < n; i++) {
    uint64_t h = h3(seed, (uint64_t)rank, i);
    switch (dt) {
      case detcollFloat32: ((uint32_t*)buf)[i] = gen_f32(h); break;
      case detcollBfloat16: ((uint16_t*)buf)[i] = (uint16_t)(gen_f32(h) >> 16); break;
      case detcollFloat16: ((uint16_t*)buf)[i] = gen_f16(h); break;
      case detcollFloat64: ((uint64_t*)buf)[i] = gen_f64(h); break;
      case detcollInt32: ((uint32_t*)buf)[i] = (uint32_t)h; break;
      default: ((uint8_t*)buf)[i] = (uint8_t)h; break;
    }
  }
}

static void write_file(const char* name, const char* ext, int rank, const void* p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.r%d.%s", g_dir, name, rank, ext);
  FILE* f = fopen(path, "wb");
  if (!f) DIE("open %s: %s", path, strerror(errno));
  if (n && fwrite(p, 1, n, f) != n) DIE("write %s", path);
  fclose(f);
}

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (!p) DIE("out of memory");
  return p;
}

enum { AR, AR_INPLACE, AG, AG_INPLACE, RS };
static const char* op_name[] = {"allreduce", "allreduce", "allgather", "allgather", "reducescatter"};

/* run_case runs one collective on comm (rank r of w) and writes its files. */
static void run_case(detcollComm_t comm, int r, int w, const char* name, int op, detcollDataType_t dt,
                     size_t count, uint64_t seed) {
  size_t sz = dt_size(dt);
  size_t in_n = op == RS ? (size_t)w * count : count;
  size_t out_n = (op == AG || op == AG_INPLACE) ? (size_t)w * count : op == RS ? count : count;
  void* in = xmalloc(in_n * sz);
  fill(in, in_n, dt, seed, r);
  write_file(name, "in", r, in, in_n * sz);
  void* out = xmalloc(out_n * sz);
  memset(out, 0xA5, out_n * sz);
  switch (op) {
    case AR: OK(detcollHostAllReduce(in, out, count, dt, comm)); break;
    case AR_INPLACE:
      memcpy(out, in, in_n * sz);
      OK(detcollHostAllReduce(out, out, count, dt, comm));
      break;
    case AG: OK(detcollHostAllGather(in, out, count, dt, comm)); break;
    case AG_INPLACE: {
      char* mine = (char*)out + (size_t)r * count * sz;
      memcpy(mine, in, count * sz);
      OK(detcollHostAllGather(mine, out, count, dt, comm));
      break;
    }
    case RS: OK(detcollHostReduceScatter(in, out, count, dt, comm)); break;
  }
  write_file(name, "out", r, out, out_n * sz);
  if (g_cases) fprintf(g_cases, "%s %s %s %zu\n", name, op_name[op], dt_name(dt), count);
  free(in);
  free(out);
}

static void open_cases(const char* file, int rank) {
  if (rank != 0) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", g_dir, file);
  g_cases = fopen(path, "w");
  if (!g_cases) DIE("open %s", path);
}

static void close_cases(void) {
  if (g_cases) fclose(g_cases);
  g_cases = NULL;
}

/* ---- host mode ----------------------------------------------------------- */

static void check_error_strings(void) {
  const char* seen[detcollNumResults + 1];
  for (int c = 0; c <= detcollNumResults; c++) {
    const char* s = detcollGetErrorString((detcollResult_t)c);
    if (s == NULL || s[0] == 0) DIE("detcollGetErrorString(%d) is empty", c);
    seen[c] = s;
    for (int d = 0; d < c; d++) {
      int unknown_c = c == 7 || c == detcollNumResults, unknown_d = d == 7 || d == detcollNumResults;
      if (!(unknown_c && unknown_d) && strcmp(s, seen[d]) == 0)
        DIE("detcollGetErrorString(%d) == detcollGetErrorString(%d) == %s", c, d, s);
    }
  }
  if (strcmp(detcollGetErrorString((detcollResult_t)-1), detcollGetErrorString((detcollResult_t)999)) != 0)
    DIE("unknown results describe differently");
}

static void misuse(detcollComm_t comm, int rank, int w) {
  float a[8] = {0}, b[8 * 16] = {0};
  int n;
  EXPECT(detcollGetVersion(NULL), detcollInvalidArgument);
  EXPECT(detcollGetUniqueId(NULL), detcollInvalidArgument);
  EXPECT(detcollCommInitFromEnv(NULL), detcollInvalidArgument);
  /* NULL and forged communicators. */
  EXPECT(detcollHostAllReduce(a, b, 4, detcollFloat32, NULL), detcollInvalidArgument);
  if (!strstr(detcollGetLastError(NULL), "NULL")) DIE("message does not say NULL: %s", detcollGetLastError(NULL));
  EXPECT(detcollHostAllReduce(a, b, 4, detcollFloat32, (detcollComm_t)(void*)a), detcollInvalidArgument);
  EXPECT(detcollHostAllReduce(a, b, 4, detcollFloat32, (detcollComm_t)(uintptr_t)0x7fffffff0dull), detcollInvalidArgument);
  EXPECT(detcollCommCount(NULL, &n), detcollInvalidArgument);
  EXPECT(detcollCommUserRank(NULL, &n), detcollInvalidArgument);
  EXPECT(detcollCommCount(comm, NULL), detcollInvalidArgument);
  EXPECT(detcollCommUserRank(comm, NULL), detcollInvalidArgument);
  EXPECT(detcollCommDestroy(NULL), detcollInvalidArgument);
  EXPECT(detcollCommAbort((detcollComm_t)(void*)b), detcollInvalidArgument);
  /* NULL buffers. */
  EXPECT(detcollHostAllReduce(NULL, b, 4, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostAllReduce(a, NULL, 4, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostAllGather(NULL, b, 4, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostReduceScatter(a, NULL, 1, detcollFloat32, comm), detcollInvalidArgument);
  /* The per-communicator message is the last failure on comm. */
  if (!strstr(detcollGetLastError(comm), "recvbuff is NULL"))
    DIE("detcollGetLastError(comm) = %s", detcollGetLastError(comm));
  /* Unreadable host pointers (as a device pointer would be). */
  EXPECT(detcollHostAllReduce((void*)0x10, b, 4, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostAllReduce((void*)(uintptr_t)0xdead0000ull, b, 4, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostAllReduce(a, (void*)(uintptr_t)0xdead0000ull, 4, detcollFloat32, comm), detcollInvalidArgument);
  /* Bad and unsupported dtypes. */
  EXPECT(detcollHostAllReduce(a, b, 4, (detcollDataType_t)99, comm), detcollInvalidArgument);
  EXPECT(detcollHostAllReduce(a, b, 4, (detcollDataType_t)-1, comm), detcollInvalidArgument);
  EXPECT(detcollHostAllReduce(a, b, 4, detcollInt32, comm), detcollUnsupported);
  EXPECT(detcollHostReduceScatter(a, b, 1, detcollFloat8e4m3, comm), detcollUnsupported);
  /* Overflowing counts. */
  EXPECT(detcollHostAllReduce(a, b, SIZE_MAX, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostReduceScatter(a, b, SIZE_MAX / 4, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostAllGather(a, b, SIZE_MAX / 2, detcollUint8, comm), detcollInvalidArgument);
  /* Partially overlapping buffers. */
  EXPECT(detcollHostAllReduce(b, b + 1, 4, detcollFloat32, comm), detcollInvalidArgument);
  EXPECT(detcollHostReduceScatter(b, b, 2, detcollFloat32, comm), detcollInvalidArgument);
  /* Device calls: no device backend in this build. */
  EXPECT(detcollAllReduce(a, b, 4, detcollFloat32, comm, NULL), detcollUnsupported);
  if (!strstr(detcollGetLastError(NULL), "device backend"))
    DIE("device message: %s", detcollGetLastError(NULL));
  EXPECT(detcollAllGather(a, b, 4, detcollBfloat16, comm, NULL), detcollUnsupported);
  EXPECT(detcollReduceScatter(a, b, 1, detcollFloat16, comm, NULL), detcollUnsupported);
  EXPECT(detcollAllReduce(NULL, b, 4, detcollFloat32, comm, NULL), detcollInvalidArgument);
  EXPECT(detcollAllReduce(a, b, 4, (detcollDataType_t)42, comm, NULL), detcollInvalidArgument);
  EXPECT(detcollAllReduce(a, b, 4, detcollFloat32, NULL, NULL), detcollInvalidArgument);

  /* None of that broke the communicator: argument errors never poison. */
  for (int i = 0; i < 4; i++) a[i] = (float)(rank + 1);
  OK(detcollHostAllReduce(a, b, 4, detcollFloat32, comm));
  float want = (float)(w * (w + 1) / 2);
  for (int i = 0; i < 4; i++)
    if (b[i] != want) DIE("after misuse: sum %g, want %g", b[i], want);
  /* count 0 is a valid no-op, NULL buffers allowed. */
  OK(detcollHostAllReduce(NULL, NULL, 0, detcollFloat32, comm));
  OK(detcollHostAllGather(NULL, NULL, 0, detcollBfloat16, comm));
}

static void mismatch_and_destroy(detcollComm_t comm, int rank) {
  float a[16], b[16];
  for (int i = 0; i < 16; i++) a[i] = (float)i;
  /* Ranks disagree on the count: every rank gets detcollMismatch. */
  EXPECT(detcollHostAllReduce(a, b, 8 + (size_t)rank, detcollFloat32, comm), detcollMismatch);
  if (!strstr(detcollGetLastError(comm), "mismatch")) DIE("mismatch message: %s", detcollGetLastError(comm));
  /* The communicator is poisoned: the same result again. */
  EXPECT(detcollHostAllReduce(a, b, 8, detcollFloat32, comm), detcollMismatch);
  OK(detcollCommDestroy(comm));
  /* Use after destroy. */
  int n;
  EXPECT(detcollHostAllReduce(a, b, 8, detcollFloat32, comm), detcollClosed);
  EXPECT(detcollCommCount(comm, &n), detcollClosed);
  EXPECT(detcollAllReduce(a, b, 8, detcollFloat32, comm, NULL), detcollClosed);
  EXPECT(detcollCommDestroy(comm), detcollClosed);
  EXPECT(detcollCommAbort(comm), detcollClosed);
  if (!strstr(detcollGetLastError(comm), "used after")) DIE("after destroy: %s", detcollGetLastError(comm));
}

static int host_mode(void) {
  int v;
  OK(detcollGetVersion(&v));
  if (v != DETCOLL_VERSION_CODE) DIE("version %d, header %d", v, DETCOLL_VERSION_CODE);
  check_error_strings();

  detcollComm_t comm;
  OK(detcollCommInitFromEnv(&comm));
  int w, r;
  OK(detcollCommCount(comm, &w));
  OK(detcollCommUserRank(comm, &r));
  g_rank = r;
  const char* er = getenv("DETCOLL_RANK");
  if (!er || atoi(er) != r) DIE("rank %d, DETCOLL_RANK %s", r, er ? er : "(unset)");

  open_cases("host.cases", r);
  run_case(comm, r, w, "ar_fp32", AR, detcollFloat32, 1001, 1);
  run_case(comm, r, w, "ar_fp32_big", AR, detcollFloat32, 70001, 2); /* > 64 KiB: a2a_tree */
  run_case(comm, r, w, "ar_fp32_inplace", AR_INPLACE, detcollFloat32, 999, 3);
  run_case(comm, r, w, "ar_bf16", AR, detcollBfloat16, 3001, 4);
  run_case(comm, r, w, "ar_bf16_big", AR, detcollBfloat16, 50000, 5);
  run_case(comm, r, w, "ar_fp16", AR, detcollFloat16, 1003, 6);
  run_case(comm, r, w, "ar_fp64", AR, detcollFloat64, 1005, 7);
  run_case(comm, r, w, "ag_fp32", AG, detcollFloat32, 777, 8);
  run_case(comm, r, w, "ag_bf16_inplace", AG_INPLACE, detcollBfloat16, 513, 9);
  run_case(comm, r, w, "ag_u8", AG, detcollUint8, 1000, 10);
  run_case(comm, r, w, "ag_i32", AG, detcollInt32, 100, 11);
  run_case(comm, r, w, "rs_fp32", RS, detcollFloat32, 1001, 12);
  run_case(comm, r, w, "rs_bf16", RS, detcollBfloat16, 4097, 13);
  run_case(comm, r, w, "rs_fp64", RS, detcollFloat64, 300, 14);
  run_case(comm, r, w, "rs_fp16_big", RS, detcollFloat16, 20000, 15);
  close_cases();

  misuse(comm, r, w);
  mismatch_and_destroy(comm, r);
  printf("ctest host: rank %d of %d OK\n", r, w);
  return 0;
}

/* ---- uid mode ------------------------------------------------------------ */

static void publish_id(const char* name, const detcollUniqueId* id) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", g_dir, name);
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE* f = fopen(tmp, "wb");
  if (!f || fwrite(id, sizeof *id, 1, f) != 1) DIE("write %s", tmp);
  fclose(f);
  if (rename(tmp, path) != 0) DIE("rename %s", tmp);
}

static void read_id(const char* name, detcollUniqueId* id) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  for (int i = 0; i < 6000; i++) { /* up to 60 s */
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got == 1) return;
    }
    usleep(10000);
  }
  DIE("no unique id at %s", path);
}

static int uid_mode(void) {
  const char* er = getenv("DETCOLL_RANK");
  const char* ew = getenv("DETCOLL_WORLD_SIZE");
  if (!er || !ew) DIE("run me under detcoll launch");
  int rank = atoi(er), w = atoi(ew);
  g_rank = rank;

  detcollUniqueId id1, id2, bad;
  detcollComm_t c1 = NULL, c2 = NULL;
  /* Misuse first (local: nothing reaches the store). */
  memset(&bad, 0x55, sizeof bad);
  EXPECT(detcollCommInitRank(NULL, w, bad, rank), detcollInvalidArgument);
  EXPECT(detcollCommInitRank(&c1, w, bad, rank), detcollInvalidArgument);
  if (c1 != NULL) DIE("failed init left a handle");
  EXPECT(detcollCommInitRank(&c1, 0, bad, 0), detcollInvalidArgument);
  EXPECT(detcollCommInitRank(&c1, w, bad, w), detcollInvalidArgument);
  EXPECT(detcollCommInitRank(&c1, w, bad, -1), detcollInvalidArgument);

  if (rank == 0) {
    OK(detcollGetUniqueId(&id1));
    OK(detcollGetUniqueId(&id2));
    if (memcmp(&id1, &id2, sizeof id1) == 0) DIE("two unique ids are equal");
    publish_id("uid1.bin", &id1);
    publish_id("uid2.bin", &id2);
  } else {
    read_id("uid1.bin", &id1);
    read_id("uid2.bin", &id2);
  }
  OK(detcollCommInitRank(&c1, w, id1, rank));
  OK(detcollCommInitRank(&c2, w, id2, w - 1 - rank)); /* reversed ranks */
  int n, r1, r2;
  OK(detcollCommCount(c1, &n));
  if (n != w) DIE("count %d, want %d", n, w);
  OK(detcollCommUserRank(c1, &r1));
  OK(detcollCommUserRank(c2, &r2));
  if (r1 != rank || r2 != w - 1 - rank) DIE("ranks %d %d", r1, r2);

  open_cases("uid.cases", rank);
  run_case(c1, r1, w, "uid1_ar_fp32", AR, detcollFloat32, 4099, 21);
  run_case(c2, r2, w, "uid2_ar_bf16", AR, detcollBfloat16, 2049, 22);
  run_case(c2, r2, w, "uid2_ag_fp32", AG, detcollFloat32, 300, 23);
  run_case(c1, r1, w, "uid1_rs_fp32", RS, detcollFloat32, 1000, 24);
  close_cases();

  OK(detcollCommAbort(c2));
  float a[4] = {0}, b[4];
  EXPECT(detcollHostAllReduce(a, b, 4, detcollFloat32, c2), detcollClosed);
  OK(detcollCommDestroy(c1));
  EXPECT(detcollCommUserRank(c1, &n), detcollClosed);
  printf("ctest uid: rank %d of %d OK\n", rank, w);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: ctest host|uid OUTDIR\n");
    return 2;
  }
  g_dir = argv[2];
  if (strcmp(argv[1], "host") == 0) return host_mode();
  if (strcmp(argv[1], "uid") == 0) return uid_mode();
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}

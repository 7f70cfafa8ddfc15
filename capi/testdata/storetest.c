/* storetest.c: detcollCommInitStore with a store of the caller's (a
 * mutex-protected in-memory table, as C callbacks) and the data-movement
 * calls, W ranks as threads of one process. Prints OK on success; any
 * failed check prints FAIL and exits 1. Run by capi's TestCStore. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "detcoll.h"

#define W 3
#define MAXKEYS 256

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;
  char* keys[MAXKEYS];
  char* vals[MAXKEYS];
  size_t lens[MAXKEYS];
  int calls_get, calls_set;
} memstore;

static int find(memstore* s, const char* k) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->keys[i], k) == 0) return i;
  return -1;
}

static void put(memstore* s, const char* k, const void* v, size_t n) {
  int i = find(s, k);
  if (i < 0) {
    if (s->n == MAXKEYS) abort();
    i = s->n++;
    s->keys[i] = strdup(k);
  } else {
    free(s->vals[i]);
  }
  s->vals[i] = malloc(n + 1);
  if (n) memcpy(s->vals[i], v, n);
  s->lens[i] = n;
  pthread_cond_broadcast(&s->cv);
}

static int cb_set(void* ctx, const char* key, const void* value, size_t len) {
  memstore* s = ctx;
  pthread_mutex_lock(&s->mu);
  s->calls_set++;
  put(s, key, value, len);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int cb_get(void* ctx, const char* key, int timeoutMs, void* buf, size_t cap, size_t* len) {
  memstore* s = ctx;
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeoutMs / 1000;
  dl.tv_nsec += (long)(timeoutMs % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&s->mu);
  s->calls_get++;
  int i;
  while ((i = find(s, key)) < 0) {
    if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0 && find(s, key) < 0) {
      pthread_mutex_unlock(&s->mu);
      return 1;
    }
  }
  *len = s->lens[i];
  memcpy(buf, s->vals[i], s->lens[i] < cap ? s->lens[i] : cap);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int cb_add(void* ctx, const char* key, int64_t delta, int64_t* result) {
  memstore* s = ctx;
  pthread_mutex_lock(&s->mu);
  int i = find(s, key);
  long long v = i < 0 ? 0 : atoll(s->vals[i]);
  v += delta;
  char b[32];
  int n = snprintf(b, sizeof b, "%lld", v);
  put(s, key, b, (size_t)n);
  pthread_mutex_unlock(&s->mu);
  *result = v;
  return 0;
}

static memstore g_store = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}, {0}, {0}, 0, 0};
static detcollStore g_cb = {&g_store, cb_set, cb_get, cb_add, NULL};
static detcollComm_t g_comms[W];

#define CHECK(cond, ...)                             \
  do {                                               \
    if (!(cond)) {                                   \
      fprintf(stderr, "FAIL rank %d line %d: ", r, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                  \
      fprintf(stderr, " (%s)\n", detcollGetLastError(NULL)); \
      exit(1);                                       \
    }                                                \
  } while (0)

static void* rank_main(void* arg) {
  int r = (int)(intptr_t)arg;
  detcollComm_t c;
  detcollResult_t rc = detcollCommInitStore(&c, W, r, &g_cb, "storetest/1", 20000);
  CHECK(rc == detcollSuccess, "init: %d", rc);
  g_comms[r] = c;
  /* AllReduce */
  float x = (float)(r + 1), y = 0;
  CHECK(detcollHostAllReduce(&x, &y, 1, detcollFloat32, c) == detcollSuccess && y == 6.0f, "allreduce %g", y);
  /* Broadcast from rank 1 */
  int32_t b[4] = {r, r, r, r};
  CHECK(detcollHostBroadcast(b, 4, detcollInt32, 1, c) == detcollSuccess && b[0] == 1 && b[3] == 1, "broadcast %d", b[0]);
  /* Gather to rank 2, Scatter from rank 0 */
  int64_t mine = 100 + r, all[W] = {0};
  CHECK(detcollHostGather(&mine, r == 2 ? all : NULL, 1, detcollInt64, 2, c) == detcollSuccess, "gather");
  if (r == 2) CHECK(all[0] == 100 && all[1] == 101 && all[2] == 102, "gather %lld %lld %lld", (long long)all[0], (long long)all[1], (long long)all[2]);
  int64_t src[W] = {7, 8, 9}, got = 0;
  CHECK(detcollHostScatter(r == 0 ? src : NULL, &got, 1, detcollInt64, 0, c) == detcollSuccess && got == 7 + r, "scatter %lld", (long long)got);
  /* AllToAllv: rank s sends s+1 bytes of value 10*s+d to rank d */
  uint8_t sb[W * W], rb[W * W];
  size_t sc[W], sd[W], rcn[W], rd[W], off = 0;
  for (int d = 0; d < W; d++) {
    sc[d] = (size_t)r + 1, sd[d] = off;
    for (size_t k = 0; k < sc[d]; k++) sb[off + k] = (uint8_t)(10 * r + d);
    off += sc[d];
  }
  off = 0;
  for (int s = 0; s < W; s++) rcn[s] = (size_t)s + 1, rd[s] = off, off += rcn[s];
  CHECK(detcollHostAllToAllv(sb, sc, sd, rb, rcn, rd, detcollUint8, c) == detcollSuccess, "alltoallv");
  for (int s = 0; s < W; s++)
    for (size_t k = 0; k < rcn[s]; k++) CHECK(rb[rd[s] + k] == 10 * s + r, "alltoallv from %d: %d", s, rb[rd[s] + k]);
  /* Send/Recv: 0 -> 1 -> 2 */
  double v = 0.5 + r;
  if (r == 0) CHECK(detcollHostSend(&v, 1, detcollFloat64, 1, 5, c) == detcollSuccess, "send");
  if (r == 1) {
    double w = 0;
    CHECK(detcollHostRecv(&w, 1, detcollFloat64, 0, 5, c) == detcollSuccess && w == 0.5, "recv %g", w);
    CHECK(detcollHostSend(&v, 1, detcollFloat64, 2, 5, c) == detcollSuccess, "send");
  }
  if (r == 2) {
    double w = 0;
    CHECK(detcollHostRecv(&w, 1, detcollFloat64, 1, 5, c) == detcollSuccess && w == 1.5, "recv %g", w);
  }
  /* Argument errors leave the communicator usable. */
  CHECK(detcollHostSend(&v, 1, detcollFloat64, r, 0, c) == detcollInvalidArgument, "send to self");
  CHECK(detcollHostSend(&v, 1, detcollFloat64, (r + 1) % W, -1, c) == detcollInvalidArgument, "negative tag");
  CHECK(detcollHostBroadcast(b, 4, detcollInt32, W, c) == detcollInvalidArgument, "root out of range");
  CHECK(detcollHostAllToAllv(sb, NULL, sd, rb, rcn, rd, detcollUint8, c) == detcollInvalidArgument, "NULL counts");
  CHECK(detcollBarrier(c) == detcollSuccess, "barrier");
  return NULL;
}

int main(void) {
  int r = -1;
  detcollComm_t c;
  detcollStore bad = {&g_store, cb_set, NULL, cb_add, NULL};
  CHECK(detcollCommInitStore(&c, 2, 0, &bad, "x", 0) == detcollInvalidArgument, "NULL get");
  CHECK(detcollCommInitStore(&c, 2, 0, NULL, "x", 0) == detcollInvalidArgument, "NULL store");
  CHECK(detcollCommInitStore(&c, 2, 0, &g_cb, NULL, 0) == detcollInvalidArgument, "NULL prefix");
  CHECK(detcollCommInitStore(&c, 2, 0, &g_cb, "x", -1) == detcollInvalidArgument, "negative timeout");
  pthread_t th[W];
  for (int i = 0; i < W; i++) pthread_create(&th[i], NULL, rank_main, (void*)(intptr_t)i);
  for (int i = 0; i < W; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < W; i++) CHECK(detcollCommDestroy(g_comms[i]) == detcollSuccess, "destroy %d", i);
  CHECK(g_store.calls_get > 0 && g_store.calls_set > 0, "the store was not used");
  printf("OK\n");
  return 0;
}

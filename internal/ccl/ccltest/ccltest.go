// Package ccltest builds a stand-in NCCL-API library with the host C
// compiler, for tests of the binding (internal/ccl) and of the typed
// packages over it (internal/nccl, internal/rccl) on machines without any
// GPU library. The library records every call and its arguments in the file
// named by $DETCOLL_FAKE_CCL_LOG, one line per call, and answers with fixed
// values:
//
//   - ncclGetVersion: 22803 (2.28.3); ncclGetUniqueId: bytes 0..127 = i+1
//   - ncclCommInitRank: the communicator handle 0x1000+rank; nranks 13
//     fails with ncclInternalError (3)
//   - every collective and point-to-point call succeeds, except a count of
//     999, which fails with ncclInvalidUsage (5)
//   - ncclGetErrorString: "fake error <code>"; ncclGetLastError: "fake last"
//   - ncclCommGetAsyncError: ncclSuccess
//   - ncclMemAlloc(n): the address 0x70000000+n (n = 999 fails with
//     ncclUnhandledCudaError); ncclCommWindowRegister(…, n, …): the window
//     0x9000+n; ncclMemFree and ncclCommWindowDeregister succeed. BuildOld
//     leaves these four out, as NCCL before 2.27 (and RCCL) do.
package ccltest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
)

// LogEnv names the file the stand-in appends its calls to.
const LogEnv = "DETCOLL_FAKE_CCL_LOG"

// Source is the stand-in library's C source.
const Source = `
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
typedef void* C;
static FILE* lg(void) {
	static FILE* f;
	if (!f) { f = fopen(getenv("DETCOLL_FAKE_CCL_LOG"), "a"); setvbuf(f, NULL, _IONBF, 0); }
	return f;
}
#define P(x) ((unsigned long long)(size_t)(x))
int ncclGetVersion(int* v) { *v = 22803; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) { for (int i = 0; i < 128; i++) id->internal[i] = (char)(i + 1); return 0; }
int ncclCommInitRank(C* c, int n, ncclUniqueId id, int rank) {
	unsigned sum = 0;
	for (int i = 0; i < 128; i++) sum += (unsigned char)id.internal[i];
	fprintf(lg(), "init %d %d %u %d %d\n", n, rank, sum, id.internal[0], id.internal[127]);
	if (n == 13) return 3;
	*c = (C)(size_t)(0x1000 + rank);
	return 0;
}
int ncclCommDestroy(C c) { fprintf(lg(), "destroy %llx\n", P(c)); return 0; }
int ncclCommAbort(C c) { fprintf(lg(), "abort %llx\n", P(c)); return 0; }
int ncclCommGetAsyncError(C c, int* r) { *r = 0; return 0; }
const char* ncclGetErrorString(int r) { static char b[64]; snprintf(b, sizeof b, "fake error %d", r); return b; }
const char* ncclGetLastError(C c) { return "fake last"; }
int ncclAllGather(const void* s, void* r, size_t n, int dt, C c, void* st) {
	fprintf(lg(), "allgather %llx %llx %zu %d %llx %llx\n", P(s), P(r), n, dt, P(c), P(st));
	return n == 999 ? 5 : 0;
}
int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, C c, void* st) {
	fprintf(lg(), "allreduce %llx %llx %zu %d %d %llx %llx\n", P(s), P(r), n, dt, op, P(c), P(st));
	return n == 999 ? 5 : 0;
}
int ncclReduceScatter(const void* s, void* r, size_t n, int dt, int op, C c, void* st) {
	fprintf(lg(), "reducescatter %llx %llx %zu %d %d %llx %llx\n", P(s), P(r), n, dt, op, P(c), P(st));
	return 0;
}
int ncclBroadcast(const void* s, void* r, size_t n, int dt, int root, C c, void* st) {
	fprintf(lg(), "broadcast %llx %llx %zu %d %d %llx %llx\n", P(s), P(r), n, dt, root, P(c), P(st));
	return 0;
}
int ncclSend(const void* b, size_t n, int dt, int peer, C c, void* st) {
	fprintf(lg(), "send %llx %zu %d %d %llx %llx\n", P(b), n, dt, peer, P(c), P(st));
	return 0;
}
int ncclRecv(void* b, size_t n, int dt, int peer, C c, void* st) {
	fprintf(lg(), "recv %llx %zu %d %d %llx %llx\n", P(b), n, dt, peer, P(c), P(st));
	return 0;
}
int ncclGroupStart(void) { fprintf(lg(), "groupstart\n"); return 0; }
int ncclGroupEnd(void) { fprintf(lg(), "groupend\n"); return 0; }
#ifndef CCLTEST_NO_WINDOWS
int ncclMemAlloc(void** p, size_t n) {
	fprintf(lg(), "memalloc %zu\n", n);
	if (n == 999) return 1;
	*p = (void*)(size_t)(0x70000000 + n);
	return 0;
}
int ncclMemFree(void* p) { fprintf(lg(), "memfree %llx\n", P(p)); return 0; }
int ncclCommWindowRegister(C c, void* b, size_t n, void** w, int flags) {
	fprintf(lg(), "winreg %llx %llx %zu %d\n", P(c), P(b), n, flags);
	*w = (void*)(size_t)(0x9000 + n);
	return 0;
}
int ncclCommWindowDeregister(C c, void* w) { fprintf(lg(), "windereg %llx %llx\n", P(c), P(w)); return 0; }
#endif
`

// Build compiles Source into dir/name and sets $DETCOLL_FAKE_CCL_LOG to a
// fresh log file in dir for the rest of the test; it returns the library's
// path and the log's. It skips the test, saying why, without a host C
// compiler.
func Build(t testing.TB, dir, name string) (lib, log string) {
	t.Helper()
	return build(t, dir, name)
}

// BuildOld is Build without the symmetric-memory entry points.
func BuildOld(t testing.TB, dir, name string) (lib, log string) {
	t.Helper()
	return build(t, dir, name, "-DCCLTEST_NO_WINDOWS")
}

func build(t testing.TB, dir, name string, defs ...string) (lib, log string) {
	t.Helper()
	lib = bindingtest.Build(t, dir, name, "NCCL-API library", Source, defs...)
	log = filepath.Join(dir, "calls.log")
	t.Setenv(LogEnv, log)
	return lib, log
}

// Calls reads the log written so far, one call per line.
func Calls(t testing.TB, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range splitLines(string(b)) {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

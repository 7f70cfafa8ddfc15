//go:build cgo

package cublas

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
	"github.com/detcoll/detcoll/internal/cuda"
)

// A stand-in libcublas built here with the host C compiler records every
// argument the shim hands it; the test binary re-runs itself with
// $DETCOLL_CUBLAS_LIB pointing at it (the library is loaded once per
// process) and the parent compares the log with the calls made. This checks
// the cgo shim's prototypes, argument order and scalar passing without a
// GPU.

const fakeLib = `
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
typedef void* H;
static FILE* lg(void) {
	static FILE* f;
	if (!f) { f = fopen(getenv("DETCOLL_FAKE_CUBLAS_LOG"), "a"); setvbuf(f, NULL, _IONBF, 0); }
	return f;
}
#define P(x) ((unsigned long long)(size_t)(x))
int cublasCreate_v2(H* h) { *h = (H)0x1234; fprintf(lg(), "create\n"); return 0; }
int cublasDestroy_v2(H h) { fprintf(lg(), "destroy %llx\n", P(h)); return 0; }
int cublasSetStream_v2(H h, void* s) { fprintf(lg(), "stream %llx %llx\n", P(h), P(s)); return 0; }
int cublasSetWorkspace_v2(H h, void* p, size_t n) { fprintf(lg(), "workspace %llx %llx %llu\n", P(h), P(p), (unsigned long long)n); return 0; }
int cublasSetMathMode(H h, int m) { fprintf(lg(), "math %llx %d\n", P(h), m); return 0; }
int cublasGetMathMode(H h, int* m) { *m = 2; return 0; }
int cublasSetAtomicsMode(H h, int a) { fprintf(lg(), "atomics %llx %d\n", P(h), a); return 0; }
int cublasGetVersion_v2(H h, int* v) { *v = 130001; return 0; }
int cublasGetProperty(int t, int* v) { *v = t == 0 ? 13 : t == 1 ? 0 : 7; return 0; }
const char* cublasGetStatusName(int s) { return s == 15 ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_OTHER"; }
const char* cublasGetStatusString(int s) { return "fake says no"; }
int cublasGemmEx(H h, int ta, int tb, int m, int n, int k, const void* alpha,
		const void* A, int at, int lda, const void* B, int bt, int ldb, const void* beta,
		void* C, int ct, int ldc, int compute, int algo) {
	fprintf(lg(), "gemm %llx %d %d %d %d %d %g %llx %d %d %llx %d %d %g %llx %d %d %d %d\n", P(h), ta, tb, m, n, k,
		*(const float*)alpha, P(A), at, lda, P(B), bt, ldb, *(const float*)beta, P(C), ct, ldc, compute, algo);
	return m == 999 ? 15 : 0;
}
int cublasGemmStridedBatchedEx(H h, int ta, int tb, int m, int n, int k, const void* alpha,
		const void* A, int at, int lda, long long sa, const void* B, int bt, int ldb, long long sb,
		const void* beta, void* C, int ct, int ldc, long long sc, int batch, int compute, int algo) {
	fprintf(lg(), "gemmsb %llx %d %d %d %d %d %g %llx %d %d %lld %llx %d %d %lld %g %llx %d %d %lld %d %d %d\n", P(h), ta, tb, m, n, k,
		*(const float*)alpha, P(A), at, lda, sa, P(B), bt, ldb, sb, *(const float*)beta, P(C), ct, ldc, sc, batch, compute, algo);
	return 0;
}
`

const fakeChildEnv = "DETCOLL_FAKE_CUBLAS_CHILD"

func TestFakeLibrary(t *testing.T) {
	if os.Getenv(fakeChildEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	so := bindingtest.Build(t, dir, "libcublas-fake.so", "cuBLAS", fakeLib, "-O1")
	logPath := filepath.Join(dir, "calls.log")
	bindingtest.RunChild(t, "TestFakeLibraryChild", fakeChildEnv+"=1", LibraryEnv+"="+so, "DETCOLL_FAKE_CUBLAS_LOG="+logPath)
	want := []string{
		"create",
		"stream 1234 abcd",
		"workspace 1234 7000000 33554432",
		"math 1234 2",
		"atomics 1234 0",
		// m' n' k ... the scalars arrive as floats.
		"gemm 1234 1 0 64 7 32 1 1000 14 256 2000 14 256 0 3000 14 64 68 -1",
		"gemm 1234 0 0 999 7 32 1 1000 14 999 2000 14 256 0 3000 14 999 69 -1",
		"gemmsb 1234 0 1 64 7 32 1.5 1000 14 64 2048 2000 14 7 32 0.25 3000 14 64 1024 8 68 -1",
		"destroy 1234",
	}
	bindingtest.WantCalls(t, logPath, want)
}

func TestFakeLibraryChild(t *testing.T) {
	if os.Getenv(fakeChildEnv) == "" {
		t.Skip("run by TestFakeLibrary")
	}
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	if maj, min, patch, err := Version(); err != nil || maj != 13 || min != 0 || patch != 7 {
		t.Fatalf("Version = %d.%d.%d, %v", maj, min, patch, err)
	}
	h, err := Create()
	if err != nil || h != 0x1234 {
		t.Fatalf("Create = %#x, %v", h, err)
	}
	if v, err := h.Version(); err != nil || v != 130001 {
		t.Fatalf("handle version %d %v", v, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.SetStream(cuda.Stream(0xabcd)))
	must(h.SetWorkspace(0x7000000, 32<<20))
	must(h.SetMathMode(PedanticMath))
	if m, err := h.MathMode(); err != nil || m != PedanticMath {
		t.Fatalf("MathMode = %v %v", m, err)
	}
	must(h.SetAtomicsMode(AtomicsNotAllowed))
	g := validGemm()
	g.TransA, g.LDB = OpT, 256
	g.LDA = 256
	must(h.GemmEx(g))
	g = validGemm()
	g.M, g.LDA, g.LDC, g.Compute = 999, 999, 999, Compute32FPedantic
	err = h.GemmEx(g)
	var e *Error
	if !errors.As(err, &e) || e.Code != StatusNotSupported || e.Name != "CUBLAS_STATUS_NOT_SUPPORTED" ||
		e.Message != "fake says no" || e.Call != "cublasGemmEx" {
		t.Fatalf("status mapping: %#v", err)
	}
	g = validGemm()
	g.TransB, g.LDB = OpT, 7
	g.Alpha, g.Beta = 1.5, 0.25
	g.Batch, g.StrideA, g.StrideB, g.StrideC = 8, 2048, 32, 1024
	must(h.GemmStridedBatchedEx(g))
	must(h.Destroy())
	if LibraryPath() == "" || !strings.Contains(LibraryPath(), "libcublas-fake.so") {
		t.Fatalf("LibraryPath = %q", LibraryPath())
	}
}

package cublas

import (
	"errors"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
)

func TestSymbolTable(t *testing.T) {
	bindingtest.CheckSymbols(t, syms.Symbols, func(api string) string { return api })
	// The exports cublas_api.h (12.x/13.x) maps the plain names to.
	want := map[string]string{
		"cublasCreate": "cublasCreate_v2", "cublasDestroy": "cublasDestroy_v2", "cublasSetStream": "cublasSetStream_v2",
		"cublasSetWorkspace": "cublasSetWorkspace_v2", "cublasGetVersion": "cublasGetVersion_v2",
		"cublasGemmEx": "cublasGemmEx", "cublasGemmStridedBatchedEx": "cublasGemmStridedBatchedEx",
		"cublasSetMathMode": "cublasSetMathMode",
	}
	for api, s := range want {
		if got := SymbolName(api); got != s {
			t.Errorf("SymbolName(%s) = %q, want %q", api, got, s)
		}
	}
	if SymbolName("cublasNoSuchThing") != "" {
		t.Error("unknown api has a symbol")
	}
	for _, req := range []sym{cublasCreate, cublasDestroy, cublasSetStream, cublasSetMathMode, cublasGemmEx, cublasGemmStridedBatchedEx} {
		if syms.Symbols[req].Optional {
			t.Errorf("%s must be required", syms.Symbols[req].API)
		}
	}
}

func TestLibraryNames(t *testing.T) {
	t.Setenv("CUDA_HOME", "/opt/cuda-x")
	t.Setenv("CUDA_PATH", "")
	names := LibraryNames()
	if names[0] != "libcublas.so.13" || names[1] != "libcublas.so.12" {
		t.Fatalf("plain names first, newest first: %v", names)
	}
	idx := func(s string) int {
		for i, n := range names {
			if n == s {
				return i
			}
		}
		return -1
	}
	a, b := idx("/opt/cuda-x/lib64/libcublas.so.13"), idx("/usr/local/cuda/lib64/libcublas.so.13")
	if a < 0 || b < 0 || a > b || idx("libcublas.so") > a {
		t.Fatalf("absolute candidates missing or out of order: %v", names)
	}
	t.Setenv("CUDA_HOME", "/usr/local/cuda")
	seen := map[string]bool{}
	for _, n := range LibraryNames() {
		if seen[n] {
			t.Fatalf("duplicate candidate %s", n)
		}
		seen[n] = true
	}
}

func TestErrors(t *testing.T) {
	e := &Error{Code: StatusNotSupported, Name: StatusName(StatusNotSupported), Message: "m", Call: "cublasGemmEx"}
	if got := e.Error(); got != "cublas: cublasGemmEx: CUBLAS_STATUS_NOT_SUPPORTED (m)" {
		t.Fatalf("Error() = %q", got)
	}
	if !errors.Is(e, &Error{Code: StatusNotSupported}) || errors.Is(e, &Error{Code: StatusInvalidValue}) {
		t.Fatal("Is by code")
	}
	if errors.Is(e, ErrUnavailable) {
		t.Fatal("a status error is not ErrUnavailable")
	}
	u := &Error{Code: StatusUnavailable, Name: StatusName(StatusUnavailable), Call: "dlopen"}
	if !errors.Is(u, ErrUnavailable) {
		t.Fatal("load errors wrap ErrUnavailable")
	}
	if StatusName(42) != "CUBLAS_STATUS_42" || StatusName(StatusExecutionFailed) != "CUBLAS_STATUS_EXECUTION_FAILED" {
		t.Fatal("status names")
	}
	if got := errorOf(cublasGemmEx, StatusSymbolNotFound).Error(); !strings.Contains(got, "does not export cublasGemmEx") {
		t.Fatalf("missing symbol message: %s", got)
	}
	if (PedanticMath | DisallowReducedPrecisionReduction).String() != "CUBLAS_PEDANTIC_MATH|CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION" {
		t.Fatal("math string")
	}
	if Compute32F.String() != "CUBLAS_COMPUTE_32F" || OpT.String() != "T" {
		t.Fatal("enum strings")
	}
}

func validGemm() Gemm {
	return Gemm{TransA: OpN, TransB: OpN, M: 64, N: 7, K: 32, Alpha: 1,
		A: 0x1000, AType: R16BF, LDA: 64, B: 0x2000, BType: R16BF, LDB: 256,
		C: 0x3000, CType: R16BF, LDC: 64, Compute: Compute32F, Algo: GemmDefault}
}

func TestGemmCheck(t *testing.T) {
	if err := validGemm().Check(false); err != nil {
		t.Fatalf("valid call rejected: %v", err)
	}
	b := validGemm()
	b.Batch, b.StrideA, b.StrideB, b.StrideC = 8, 32*64, 32, 1024
	if err := b.Check(true); err != nil {
		t.Fatalf("valid batched call rejected: %v", err)
	}
	tr := validGemm()
	tr.TransA, tr.LDA = OpT, 32 // A stored K×M: lda ≥ k
	tr.TransB, tr.LDB = OpT, 7  // B stored N×K: ldb ≥ n
	if err := tr.Check(false); err != nil {
		t.Fatalf("valid transposed call rejected: %v", err)
	}
	empty := validGemm()
	empty.K, empty.A, empty.B = 0, 0, 0
	if err := empty.Check(false); err != nil {
		t.Fatalf("k = 0 with nil A, B rejected: %v", err)
	}
	cases := map[string]func(g *Gemm){
		"lda < m":          func(g *Gemm) { g.LDA = 63 },
		"lda < k (T)":      func(g *Gemm) { g.TransA = OpT; g.LDA = 31 },
		"ldb < k":          func(g *Gemm) { g.LDB = 31 },
		"ldb < n (T)":      func(g *Gemm) { g.TransB = OpT; g.LDB = 6 },
		"ldc < m":          func(g *Gemm) { g.LDC = 10 },
		"negative m":       func(g *Gemm) { g.M = -1 },
		"huge k":           func(g *Gemm) { g.K = 1 << 33; g.LDB = 1 << 33 },
		"op C":             func(g *Gemm) { g.TransA = 2 },
		"nil C":            func(g *Gemm) { g.C = 0 },
		"nil A":            func(g *Gemm) { g.A = 0 },
		"double compute":   func(g *Gemm) { g.Compute = 70 },
		"half compute":     func(g *Gemm) { g.Compute = 64 },
		"bad type":         func(g *Gemm) { g.AType = 99 },
		"zero batch":       func(g *Gemm) { g.Batch = 0 },
		"negative strideB": func(g *Gemm) { g.Batch = 2; g.StrideB = -1 },
	}
	for name, mut := range cases {
		g := validGemm()
		mut(&g)
		batched := strings.Contains(name, "batch") || strings.Contains(name, "stride")
		err := g.Check(batched)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !errors.Is(err, &Error{Code: StatusInvalidValue}) {
			t.Errorf("%s: error %v is not CUBLAS_STATUS_INVALID_VALUE", name, err)
		}
	}
	// Argument errors are reported before the library is needed.
	var h Handle = 1
	g := validGemm()
	g.LDC = 1
	if err := h.GemmEx(g); !errors.Is(err, &Error{Code: StatusInvalidValue}) {
		t.Fatalf("GemmEx with a bad ldc: %v", err)
	}
	if err := Handle(0).GemmEx(validGemm()); !errors.Is(err, &Error{Code: StatusNotInitialized}) {
		t.Fatalf("zero handle: %v", err)
	}
	if err := h.SetWorkspace(0x1001, 64); !errors.Is(err, &Error{Code: StatusInvalidValue}) {
		t.Fatalf("misaligned workspace: %v", err)
	}
}

// Without a cuBLAS library (the CPU machines) every call says so and wraps
// ErrUnavailable; with one, the version is reported.
func TestAvailability(t *testing.T) {
	err := Available()
	if err == nil {
		maj, min, patch, verr := Version()
		t.Logf("cuBLAS %d.%d.%d loaded from %s (version err %v)", maj, min, patch, LibraryPath(), verr)
		return
	}
	t.Logf("cuBLAS unavailable here: %v", err)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("load error %v does not wrap ErrUnavailable", err)
	}
	if _, err := Create(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Create without cuBLAS: %v", err)
	}
	if LibraryPath() != "" || VersionString() != "" {
		t.Fatal("path or version without a library")
	}
	if err := Handle(1).GemmEx(validGemm()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("GemmEx without cuBLAS: %v", err)
	}
}

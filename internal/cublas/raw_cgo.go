//go:build cgo

package cublas

/*
#include <stdint.h>
#include <stddef.h>

// Our own declarations of the cuBLAS ABI (no cublas_api.h at build time).
// Handles and streams are pointers; every enum is an int.
typedef int cbStatus;
typedef void* cbHandle;

#define F(T) ((T)(fn))

static int w_create(uintptr_t fn, uintptr_t* h) { return F(cbStatus(*)(cbHandle*))((cbHandle*)h); }
static int w_h(uintptr_t fn, uintptr_t h) { return F(cbStatus(*)(cbHandle))((cbHandle)h); }
static int w_hp(uintptr_t fn, uintptr_t h, uintptr_t p) { return F(cbStatus(*)(cbHandle, void*))((cbHandle)h, (void*)p); }
static int w_ws(uintptr_t fn, uintptr_t h, uint64_t p, uint64_t n) {
	return F(cbStatus(*)(cbHandle, void*, size_t))((cbHandle)h, (void*)(uintptr_t)p, (size_t)n);
}
static int w_hi(uintptr_t fn, uintptr_t h, int v) { return F(cbStatus(*)(cbHandle, int))((cbHandle)h, v); }
static int w_hpi(uintptr_t fn, uintptr_t h, int* v) { return F(cbStatus(*)(cbHandle, int*))((cbHandle)h, v); }
static int w_prop(uintptr_t fn, int type, int* v) { return F(cbStatus(*)(int, int*))(type, v); }
static const char* w_str(uintptr_t fn, int s) { return F(const char*(*)(cbStatus))(s); }

// The scalars are copied into this frame, so cuBLAS reads C memory (host
// pointer mode: it reads them before the call returns).
static int w_gemm(uintptr_t fn, uintptr_t h, int ta, int tb, int m, int n, int k,
		float alpha, uint64_t A, int at, int lda, uint64_t B, int bt, int ldb,
		float beta, uint64_t C, int ct, int ldc, int compute, int algo) {
	float a = alpha, b = beta;
	return F(cbStatus(*)(cbHandle, int, int, int, int, int, const void*, const void*, int, int,
			const void*, int, int, const void*, void*, int, int, int, int))(
		(cbHandle)h, ta, tb, m, n, k, &a, (const void*)(uintptr_t)A, at, lda,
		(const void*)(uintptr_t)B, bt, ldb, &b, (void*)(uintptr_t)C, ct, ldc, compute, algo);
}

static int w_gemm_sb(uintptr_t fn, uintptr_t h, int ta, int tb, int m, int n, int k,
		float alpha, uint64_t A, int at, int lda, long long sa, uint64_t B, int bt, int ldb, long long sb,
		float beta, uint64_t C, int ct, int ldc, long long sc, int batch, int compute, int algo) {
	float a = alpha, b = beta;
	return F(cbStatus(*)(cbHandle, int, int, int, int, int, const void*, const void*, int, int, long long,
			const void*, int, int, long long, const void*, void*, int, int, long long, int, int, int))(
		(cbHandle)h, ta, tb, m, n, k, &a, (const void*)(uintptr_t)A, at, lda, sa,
		(const void*)(uintptr_t)B, bt, ldb, sb, &b, (void*)(uintptr_t)C, ct, ldc, sc, batch, compute, algo);
}
*/
import "C"

import "github.com/detcoll/detcoll/internal/binding"

func fn(s sym) C.uintptr_t { return C.uintptr_t(syms.Ptr(s)) }

func load() error {
	if err := syms.Open(LibraryEnv, LibraryNames()...); err != nil {
		return binding.LoadFailure[Status, vendor](err, StatusName(StatusUnavailable))
	}
	return nil
}

func rStatusName(r Status) (string, bool) {
	if !syms.Have(cublasGetStatusName) {
		return "", false
	}
	p := C.w_str(fn(cublasGetStatusName), C.int(r))
	if p == nil {
		return "", false
	}
	return C.GoString(p), true
}

func rStatusString(r Status) (string, bool) {
	if !syms.Have(cublasGetStatusString) {
		return "", false
	}
	p := C.w_str(fn(cublasGetStatusString), C.int(r))
	if p == nil {
		return "", false
	}
	return C.GoString(p), true
}

func rCreate(h *uintptr) Status {
	var v C.uintptr_t
	r := Status(C.w_create(fn(cublasCreate), &v))
	*h = uintptr(v)
	return r
}

func rHandle(s sym, h uintptr) Status { return Status(C.w_h(fn(s), C.uintptr_t(h))) }

func rHandlePtr(s sym, h, p uintptr) Status {
	return Status(C.w_hp(fn(s), C.uintptr_t(h), C.uintptr_t(p)))
}

func rSetWorkspace(h uintptr, p, n uint64) Status {
	return Status(C.w_ws(fn(cublasSetWorkspace), C.uintptr_t(h), C.uint64_t(p), C.uint64_t(n)))
}

func rHandleInt(s sym, h uintptr, v int32) Status {
	return Status(C.w_hi(fn(s), C.uintptr_t(h), C.int(v)))
}

func rHandleIntPtr(s sym, h uintptr, v *int32) Status {
	var c C.int
	r := Status(C.w_hpi(fn(s), C.uintptr_t(h), &c))
	*v = int32(c)
	return r
}

func rGetProperty(which int32, v *int32) Status {
	var c C.int
	r := Status(C.w_prop(fn(cublasGetProperty), C.int(which), &c))
	*v = int32(c)
	return r
}

func rGemmEx(h uintptr, g *Gemm) Status {
	return Status(C.w_gemm(fn(cublasGemmEx), C.uintptr_t(h), C.int(g.TransA), C.int(g.TransB),
		C.int(g.M), C.int(g.N), C.int(g.K),
		C.float(g.Alpha), C.uint64_t(g.A), C.int(g.AType), C.int(g.LDA),
		C.uint64_t(g.B), C.int(g.BType), C.int(g.LDB),
		C.float(g.Beta), C.uint64_t(g.C), C.int(g.CType), C.int(g.LDC),
		C.int(g.Compute), C.int(g.Algo)))
}

func rGemmStridedBatchedEx(h uintptr, g *Gemm) Status {
	return Status(C.w_gemm_sb(fn(cublasGemmStridedBatchedEx), C.uintptr_t(h), C.int(g.TransA), C.int(g.TransB),
		C.int(g.M), C.int(g.N), C.int(g.K),
		C.float(g.Alpha), C.uint64_t(g.A), C.int(g.AType), C.int(g.LDA), C.longlong(g.StrideA),
		C.uint64_t(g.B), C.int(g.BType), C.int(g.LDB), C.longlong(g.StrideB),
		C.float(g.Beta), C.uint64_t(g.C), C.int(g.CType), C.int(g.LDC), C.longlong(g.StrideC),
		C.int(g.Batch), C.int(g.Compute), C.int(g.Algo)))
}

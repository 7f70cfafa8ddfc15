package cublas

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/detcoll/detcoll/internal/binding"
	"github.com/detcoll/detcoll/internal/cuda"
)

// LibraryEnv names the environment variable that overrides LibraryNames.
const LibraryEnv = "DETCOLL_CUBLAS_LIB"

// LibraryNames are the candidates, newest first: the plain names (the
// loader's search path), then absolute paths under $CUDA_HOME, $CUDA_PATH
// and /usr/local/cuda, whose lib64 is often not on the loader path.
func LibraryNames() []string {
	plain := []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	names := append([]string(nil), plain...)
	var roots []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if r := os.Getenv(v); r != "" {
			roots = append(roots, r)
		}
	}
	roots = append(roots, "/usr/local/cuda")
	seen := map[string]bool{}
	for _, r := range roots {
		for _, n := range plain {
			p := filepath.Join(r, "lib64", n)
			if !seen[p] {
				seen[p] = true
				names = append(names, p)
			}
		}
	}
	return names
}

// ErrUnavailable is wrapped by every error that means "no usable cuBLAS
// here": library missing, a required symbol missing, built without cgo.
var ErrUnavailable = errors.New("cublas: unavailable")

// Status is a cublasStatus_t.
type Status int32

// Its values, and the Go constants detcoll uses (StatusInvalidValue, …;
// negative ones are detcoll's own), are the code lines of symbols.txt
// (symbols_gen.go).

func invalid(call, format string, args ...any) error {
	return &Error{Code: StatusInvalidValue, Name: StatusName(StatusInvalidValue), Message: fmt.Sprintf(format, args...), Call: call}
}

// Operation is a cublasOperation_t.
type Operation int32

const (
	OpN Operation = 0 // the matrix as stored (column-major)
	OpT Operation = 1 // its transpose
)

func (o Operation) String() string {
	switch o {
	case OpN:
		return "N"
	case OpT:
		return "T"
	}
	return fmt.Sprintf("op(%d)", int32(o))
}

// DataType is a cudaDataType_t.
type DataType int32

const (
	R32F  DataType = 0  // CUDA_R_32F
	R64F  DataType = 1  // CUDA_R_64F
	R16F  DataType = 2  // CUDA_R_16F
	R16BF DataType = 14 // CUDA_R_16BF
)

// ComputeType is a cublasComputeType_t.
type ComputeType int32

const (
	Compute32F         ComputeType = 68 // CUBLAS_COMPUTE_32F
	Compute32FPedantic ComputeType = 69 // CUBLAS_COMPUTE_32F_PEDANTIC
	Compute32FFast16F  ComputeType = 74 // CUBLAS_COMPUTE_32F_FAST_16F
	Compute32FFast16BF ComputeType = 75 // CUBLAS_COMPUTE_32F_FAST_16BF
	Compute32FFastTF32 ComputeType = 77 // CUBLAS_COMPUTE_32F_FAST_TF32
)

func (c ComputeType) String() string {
	switch c {
	case Compute32F:
		return "CUBLAS_COMPUTE_32F"
	case Compute32FPedantic:
		return "CUBLAS_COMPUTE_32F_PEDANTIC"
	case Compute32FFast16F:
		return "CUBLAS_COMPUTE_32F_FAST_16F"
	case Compute32FFast16BF:
		return "CUBLAS_COMPUTE_32F_FAST_16BF"
	case Compute32FFastTF32:
		return "CUBLAS_COMPUTE_32F_FAST_TF32"
	}
	return fmt.Sprintf("cublasComputeType_t(%d)", int32(c))
}

// float32Scalars reports whether alpha and beta are float for c.
func (c ComputeType) float32Scalars() bool {
	switch c {
	case Compute32F, Compute32FPedantic, Compute32FFast16F, Compute32FFast16BF, Compute32FFastTF32:
		return true
	}
	return false
}

// GemmAlgo is a cublasGemmAlgo_t.
type GemmAlgo int32

// GemmDefault is CUBLAS_GEMM_DEFAULT: cuBLAS's heuristic choice, a pure
// function of the call and the device (no autotuning).
const GemmDefault GemmAlgo = -1

// Math is a cublasMath_t.
type Math int32

const (
	DefaultMath      Math = 0 // CUBLAS_DEFAULT_MATH
	PedanticMath     Math = 2 // CUBLAS_PEDANTIC_MATH
	TF32TensorOpMath Math = 3 // CUBLAS_TF32_TENSOR_OP_MATH (never used by detcoll)
	// DisallowReducedPrecisionReduction may be or'ed into a mode
	// (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION).
	DisallowReducedPrecisionReduction Math = 16
)

func (m Math) String() string {
	base := m &^ DisallowReducedPrecisionReduction
	var s string
	switch base {
	case DefaultMath:
		s = "CUBLAS_DEFAULT_MATH"
	case PedanticMath:
		s = "CUBLAS_PEDANTIC_MATH"
	case TF32TensorOpMath:
		s = "CUBLAS_TF32_TENSOR_OP_MATH"
	case 1:
		s = "CUBLAS_TENSOR_OP_MATH"
	default:
		s = fmt.Sprintf("cublasMath_t(%d)", int32(base))
	}
	if m&DisallowReducedPrecisionReduction != 0 {
		s += "|CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION"
	}
	return s
}

// AtomicsMode is a cublasAtomicsMode_t.
type AtomicsMode int32

const (
	AtomicsNotAllowed AtomicsMode = 0
	AtomicsAllowed    AtomicsMode = 1
)

// Init loads the library once per process; later calls return the first
// outcome. Every call that needs the library calls it.
func Init() error { return syms.Load(load) }

// Available reports why cuBLAS cannot be used here, or nil.
func Available() error { return Init() }

// LibraryPath is the library loaded ("" if none).
func LibraryPath() string { return syms.LoadedPath(Init) }

// SymbolName is the exported symbol bound for a documented API name (e.g.
// "cublasCreate" → "cublasCreate_v2"): the one resolved when loaded, else
// the preferred candidate; "" for an unknown name.
func SymbolName(api string) string {
	return syms.SymbolName(api)
}

func errorOf(s sym, r Status) error {
	return binding.ErrorOf[sym, Status, vendor](syms, s, r, StatusSymbolNotFound, "cuBLAS", StatusName, describe)
}

// describe is the library's name and description of r, else the built-in
// description (cuBLAS before 11.4 has no strings of its own).
func describe(r Status) (name, message string) {
	if n, ok := rStatusName(r); ok && n != "" {
		name = n
	}
	shown := name
	if shown == "" {
		shown = StatusName(r)
	}
	if m, ok := rStatusString(r); ok && m != "" && m != shown {
		message = m
	} else if m, ok := resultMessages[r]; ok {
		message = m
	}
	return name, message
}

// call is the common prologue: load, check an optional symbol, map the status.
func call(s sym, f func() Status) error {
	return binding.Call(syms, Init, errorOf, StatusSymbolNotFound, s, f)
}

// Version is the loaded library's (major, minor, patch) from
// cublasGetProperty (no handle needed).
func Version() (major, minor, patch int, err error) {
	var v [3]int32
	for i := range v {
		p := int32(i) // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
		if err = call(cublasGetProperty, func() Status { return rGetProperty(p, &v[i]) }); err != nil {
			return 0, 0, 0, err
		}
	}
	return int(v[0]), int(v[1]), int(v[2]), nil
}

// VersionString is "major.minor.patch", "" when unavailable.
func VersionString() string {
	a, b, c, err := Version()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", a, b, c)
}

// Handle is a cublasHandle_t. The zero Handle is invalid.
type Handle uintptr

func (h Handle) check(callName string) error {
	if h == 0 {
		return &Error{Code: StatusNotInitialized, Name: StatusName(StatusNotInitialized), Message: "zero handle", Call: callName}
	}
	return nil
}

// Create makes a handle in the CUDA context current on this thread (call it
// inside gpu.Device.Do). Destroy it with Destroy, in the same context.
func Create() (Handle, error) {
	var h uintptr
	err := call(cublasCreate, func() Status { return rCreate(&h) })
	return Handle(h), err
}

// Destroy releases the handle (the zero handle is a no-op).
func (h Handle) Destroy() error {
	if h == 0 {
		return nil
	}
	return call(cublasDestroy, func() Status { return rHandle(cublasDestroy, uintptr(h)) })
}

// SetStream makes the handle enqueue on s (0: the legacy default stream).
// cuBLAS then returns to its default workspace pool: call SetWorkspace
// after SetStream.
func (h Handle) SetStream(s cuda.Stream) error {
	if err := h.check("cublasSetStream_v2"); err != nil {
		return err
	}
	return call(cublasSetStream, func() Status { return rHandlePtr(cublasSetStream, uintptr(h), uintptr(s)) })
}

// SetWorkspace gives the handle a workspace of bytes at p (device memory
// the caller owns and keeps alive while the handle uses it; 256-byte
// aligned, as cuMemAlloc returns). A fixed, caller-owned workspace keeps
// the kernel choice independent of cuBLAS's internal pool.
func (h Handle) SetWorkspace(p cuda.DevicePtr, bytes int) error {
	if err := h.check("cublasSetWorkspace_v2"); err != nil {
		return err
	}
	if bytes < 0 || (bytes > 0 && p == 0) || uint64(p)%256 != 0 {
		return invalid("cublasSetWorkspace_v2", "workspace %#x of %d bytes (want a 256-byte aligned buffer)", uint64(p), bytes)
	}
	return call(cublasSetWorkspace, func() Status { return rSetWorkspace(uintptr(h), uint64(p), uint64(bytes)) })
}

// SetMathMode sets the math mode.
func (h Handle) SetMathMode(m Math) error {
	if err := h.check("cublasSetMathMode"); err != nil {
		return err
	}
	return call(cublasSetMathMode, func() Status { return rHandleInt(cublasSetMathMode, uintptr(h), int32(m)) })
}

// MathMode reads the math mode.
func (h Handle) MathMode() (Math, error) {
	if err := h.check("cublasGetMathMode"); err != nil {
		return 0, err
	}
	var v int32
	err := call(cublasGetMathMode, func() Status { return rHandleIntPtr(cublasGetMathMode, uintptr(h), &v) })
	return Math(v), err
}

// SetAtomicsMode sets whether routines may use atomics (AtomicsNotAllowed,
// the default, keeps results reproducible).
func (h Handle) SetAtomicsMode(a AtomicsMode) error {
	if err := h.check("cublasSetAtomicsMode"); err != nil {
		return err
	}
	return call(cublasSetAtomicsMode, func() Status { return rHandleInt(cublasSetAtomicsMode, uintptr(h), int32(a)) })
}

// Version is cublasGetVersion_v2: major*10000 + minor*100 + patch for
// cuBLAS 11 and later (e.g. 130001).
func (h Handle) Version() (int, error) {
	if err := h.check("cublasGetVersion_v2"); err != nil {
		return 0, err
	}
	var v int32
	err := call(cublasGetVersion, func() Status { return rHandleIntPtr(cublasGetVersion, uintptr(h), &v) })
	return int(v), err
}

// Gemm describes one cublasGemmEx (or one cublasGemmStridedBatchedEx)
// call, in cuBLAS's column-major terms:
//
//	C = Alpha·op(A)·op(B) + Beta·C,  op(A) M×K, op(B) K×N, C M×N
//
// with A stored as LDA-strided columns (M×K when TransA is OpN, else K×M),
// and likewise B and C. The batched call repeats it Batch times, batch i
// at A + i·StrideA, B + i·StrideB, C + i·StrideC (strides in elements).
type Gemm struct {
	TransA, TransB Operation
	M, N, K        int
	Alpha, Beta    float32
	A              cuda.DevicePtr
	AType          DataType
	LDA            int
	B              cuda.DevicePtr
	BType          DataType
	LDB            int
	C              cuda.DevicePtr
	CType          DataType
	LDC            int
	Compute        ComputeType
	Algo           GemmAlgo

	StrideA, StrideB, StrideC int64 // batched only
	Batch                     int   // batched only (≥ 1)
}

func dataTypeOK(t DataType) bool { return t == R32F || t == R64F || t == R16F || t == R16BF }

// Check validates g by cuBLAS's rules for GemmEx (batched false) or
// GemmStridedBatchedEx (batched true) without calling the library.
func (g Gemm) Check(batched bool) error {
	name := "cublasGemmEx"
	if batched {
		name = "cublasGemmStridedBatchedEx"
	}
	bad := func(format string, args ...any) error { return invalid(name, format, args...) }
	if (g.TransA != OpN && g.TransA != OpT) || (g.TransB != OpN && g.TransB != OpT) {
		return bad("operations %v, %v (want N or T)", g.TransA, g.TransB)
	}
	for _, v := range []int{g.M, g.N, g.K, g.LDA, g.LDB, g.LDC} {
		if v < 0 || v > math.MaxInt32 {
			return bad("m=%d n=%d k=%d lda=%d ldb=%d ldc=%d: negative or beyond 32 bits", g.M, g.N, g.K, g.LDA, g.LDB, g.LDC)
		}
	}
	rowsA, rowsB := g.M, g.K
	if g.TransA == OpT {
		rowsA = g.K
	}
	if g.TransB == OpT {
		rowsB = g.N
	}
	if g.LDA < max(1, rowsA) || g.LDB < max(1, rowsB) || g.LDC < max(1, g.M) {
		return bad("leading dimensions lda=%d ldb=%d ldc=%d too small for op(A)=%v op(B)=%v m=%d n=%d k=%d (need ≥ %d, %d, %d)",
			g.LDA, g.LDB, g.LDC, g.TransA, g.TransB, g.M, g.N, g.K, max(1, rowsA), max(1, rowsB), max(1, g.M))
	}
	if !dataTypeOK(g.AType) || !dataTypeOK(g.BType) || !dataTypeOK(g.CType) {
		return bad("data types %d, %d, %d", g.AType, g.BType, g.CType)
	}
	if !g.Compute.float32Scalars() {
		return bad("compute type %v: this binding passes alpha and beta as float, so only the CUBLAS_COMPUTE_32F family is accepted", g.Compute)
	}
	if g.M > 0 && g.N > 0 {
		if g.C == 0 {
			return bad("nil C")
		}
		if g.K > 0 && (g.A == 0 || g.B == 0) {
			return bad("nil A or B")
		}
	}
	if batched {
		if g.Batch < 1 || g.Batch > math.MaxInt32 {
			return bad("batch count %d", g.Batch)
		}
		if g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0 {
			return bad("negative stride (%d, %d, %d)", g.StrideA, g.StrideB, g.StrideC)
		}
	}
	return nil
}

// GemmEx enqueues cublasGemmEx on the handle's stream.
func (h Handle) GemmEx(g Gemm) error {
	if err := h.check("cublasGemmEx"); err != nil {
		return err
	}
	if err := g.Check(false); err != nil {
		return err
	}
	return call(cublasGemmEx, func() Status { return rGemmEx(uintptr(h), &g) })
}

// GemmStridedBatchedEx enqueues cublasGemmStridedBatchedEx on the handle's
// stream.
func (h Handle) GemmStridedBatchedEx(g Gemm) error {
	if err := h.check("cublasGemmStridedBatchedEx"); err != nil {
		return err
	}
	if err := g.Check(true); err != nil {
		return err
	}
	return call(cublasGemmStridedBatchedEx, func() Status { return rGemmStridedBatchedEx(uintptr(h), &g) })
}

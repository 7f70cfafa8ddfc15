package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// Backend prepares benchmark cases on one kind of memory: "cpu" (host
// memory, package-level NewCPU) now, "cuda" later. A Backend belongs to one
// rank; every rank of the run has its own.
type Backend interface {
	// Name is the backend's short name, recorded as the report's backend.
	Name() string
	// Device describes this rank's device (kind, names and library
	// versions; the versions are empty on CPU).
	Device() DeviceInfo
	// Prepare allocates the buffers of one (operation, dtype, size) case and
	// fills this rank's input with FillInput(input, spec.DType, spec.Seed,
	// spec.Rank, 0). The runner relies on that: it regenerates every rank's
	// input locally to compute the oracle, so no input data moves.
	Prepare(ctx context.Context, spec CaseSpec) (Case, error)
}

// Case is one prepared (operation, dtype, size) on one rank: its input, the
// deterministic output, the native output and any native scratch. Every rank
// calls the same methods in the same order; the Run* methods are collective.
type Case interface {
	// RunDeterministic runs detcoll's collective iters times back to back
	// with the given algorithm (ignored by all_gather, which has one) and
	// accumulate mode, and returns the mean time of one iteration on this
	// rank (GPU backends: measured with events on the stream).
	RunDeterministic(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (perIter time.Duration, err error)
	// RunNative runs the native collective (CPU: internal/ring; GPU: NCCL)
	// on the same input iters times and returns the mean time of one iteration.
	RunNative(ctx context.Context, iters int) (perIter time.Duration, err error)
	// ResetOutput overwrites the deterministic output with 0xFF bytes (a NaN
	// in every float format), so that a run that writes nothing is caught.
	ResetOutput() error
	// Output is a host view or copy of the last deterministic output
	// (spec.OutputBytes() bytes). The caller does not modify it and does not
	// keep it past the next call on the Case.
	Output() ([]byte, error)
	// NativeOutput is the same for the last native output.
	NativeOutput() ([]byte, error)
	// ReleaseWorkspace frees detcoll's retained workspace and restarts the
	// peak that Workspace reports, so that each row reports its own.
	ReleaseWorkspace()
	// Workspace is detcoll's retained workspace now and its peak since the
	// last ReleaseWorkspace, in bytes.
	Workspace() (retained, peak int)
	// NativePeak is the most memory the native collective allocated beyond
	// the input and output buffers, in bytes.
	NativePeak() int
	// Close frees the case's buffers.
	Close() error
}

// InPlaceCase is a Case that can also run its deterministic collective in
// place (all_reduce: recv = send; all_gather: send = this rank's block of
// recv), as nccl-tests' in-place columns do. Run with Config.InPlace.
type InPlaceCase interface {
	Case
	// InPlaceSupported reports whether this case's operation runs in place.
	InPlaceSupported() bool
	// ResetInPlace writes this rank's input into the in-place buffer.
	ResetInPlace() error
	// RunInPlace runs the collective in place iters times back to back and
	// returns the mean time of one iteration. The buffer's contents drift
	// from one iteration to the next (each sums the last's output), as in
	// nccl-tests; ResetInPlace before a run whose output is checked.
	RunInPlace(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (time.Duration, error)
	// InPlaceOutput is a host view or copy of the in-place buffer.
	InPlaceOutput() ([]byte, error)
}

// SymmetricCase is a Case whose native collective can also run on
// symmetric registered buffers (NCCL ≥ 2.27: ncclMemAlloc +
// ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC), NCCL's fastest
// path for small messages. The runner measures it beside the default
// buffers and compares detcoll with the faster of the two.
type SymmetricCase interface {
	Case
	// PrepareSymmetric allocates the symmetric buffers and uploads the
	// input (local: nothing collective). It returns ErrNoSymmetric,
	// wrapped with the reason, when the library cannot.
	PrepareSymmetric(ctx context.Context) error
	// RunNativeSymmetric is RunNative on the symmetric buffers; its first
	// call registers the windows (collective: every rank calls it).
	RunNativeSymmetric(ctx context.Context, iters int) (perIter time.Duration, err error)
}

// ErrNoSymmetric says that the native library has no symmetric buffers.
var ErrNoSymmetric = errors.New("no symmetric-memory collectives in this library")

// Baseliner names what a backend's native columns run ("NCCL", "RCCL",
// "ring (detcoll's reference of Gloo's order)"), recorded as the report's
// baseline.
type Baseliner interface{ Baseline() string }

// DeviceInfo describes the device a backend runs on.
type DeviceInfo struct {
	Kind          string   `json:"kind"`           // "cpu", "cuda", "rocm"
	Names         []string `json:"names"`          // CPU model or GPU names
	DriverVersion string   `json:"driver_version"` // NVIDIA driver, or HIP driver (hipDriverGetVersion) on rocm; empty on CPU
	CUDAVersion   string   `json:"cuda_version"`   // empty on CPU and rocm
	NCCLVersion   string   `json:"nccl_version"`   // NCCL or RCCL actually loaded; empty on CPU
	// On rocm only: the HIP runtime version (hipRuntimeGetVersion) and the
	// collective library's name ("RCCL": nccl_version is then RCCL's).
	HIPVersion string `json:"hip_version,omitempty"`
	CCL        string `json:"ccl,omitempty"`
}

// CaseSpec is what a backend needs to prepare a case.
type CaseSpec struct {
	Op         Op
	DType      dtype.DType
	InputBytes int // per rank; see Op for what the input is
	Seed       uint64
	Rank       int
	WorldSize  int
	Graph      bool // capture the collectives in a CUDA graph (ignored on CPU)
}

// OutputBytes is the size of one rank's output buffer.
func (s CaseSpec) OutputBytes() int {
	switch s.Op {
	case AllGather:
		return s.WorldSize * s.InputBytes
	case ReduceScatter:
		return s.InputBytes / s.WorldSize
	}
	return s.InputBytes
}

func (s CaseSpec) check() error {
	sz := s.DType.Size()
	switch {
	case !s.Op.Valid():
		return fmt.Errorf("bench: unknown operation %q", s.Op)
	case !s.DType.Valid():
		return fmt.Errorf("bench: dtype %v is not reducible", s.DType)
	case s.WorldSize < 1 || s.Rank < 0 || s.Rank >= s.WorldSize:
		return fmt.Errorf("bench: rank %d of %d", s.Rank, s.WorldSize)
	case s.InputBytes <= 0 || s.InputBytes%sz != 0:
		return fmt.Errorf("bench: input of %d bytes is not a positive whole number of %v elements", s.InputBytes, s.DType)
	case s.Op == ReduceScatter && (s.InputBytes/sz)%s.WorldSize != 0:
		return fmt.Errorf("bench: reduce_scatter input of %d elements does not divide by W = %d", s.InputBytes/sz, s.WorldSize)
	}
	return nil
}

// FillInput writes elements offset, offset+1, … of rank's benchmark input
// into dst (a whole number of dt elements). The input is a pure function of
// (seed, rank, dtype, element index): it does not depend on the operation or
// the size, so rank r's input of n elements is the first n elements of one
// stream, and any rank can regenerate any part of any rank's input.
//
// Values are finite and normal: a random sign, a random significand and a
// binary exponent in [-10, 2], so sums are sensitive to their order and no
// element overflows or goes subnormal (subnormals would distort CPU timings).
func FillInput(dst []byte, dt dtype.DType, seed uint64, rank, offset int) {
	key := mix64(seed ^ mix64(uint64(rank)+1) ^ uint64(dt)<<56)
	sz := dt.Size()
	if sz == 0 {
		return
	}
	for i := 0; i < len(dst)/sz; i++ {
		h := mix64(key + uint64(offset+i)*0x9E3779B97F4A7C15)
		e := int((h>>52)&0xFF)%13 - 10
		sign := h >> 63
		var f32 uint32
		if dt != dtype.FP64 {
			f32 = uint32(sign)<<31 | uint32(127+e)<<23 | uint32(h&0x7FFFFF)
		}
		b := dst[i*sz:]
		switch dt {
		case dtype.FP64:
			putU64(b, sign<<63|uint64(1023+e)<<52|h&(1<<52-1))
		case dtype.FP32:
			putU32(b, f32)
		case dtype.BF16:
			putU16(b, dtype.Float32ToBF16(math.Float32frombits(f32)))
		case dtype.FP16:
			putU16(b, dtype.Float32ToFP16(math.Float32frombits(f32)))
		}
	}
}

// Input returns rank's whole input for spec.
func Input(spec CaseSpec, rank int) []byte {
	b := make([]byte, spec.InputBytes)
	FillInput(b, spec.DType, spec.Seed, rank, 0)
	return b
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

func putU16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
func putU64(b []byte, v uint64) { putU32(b, uint32(v)); putU32(b[4:], uint32(v>>32)) }
func getU16(b []byte) uint16    { return uint16(b[0]) | uint16(b[1])<<8 }
func getU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func getU64(b []byte) uint64 { return uint64(getU32(b)) | uint64(getU32(b[4:]))<<32 }

// elemFloat returns element i of b as a float64 (exact for every dtype).
func elemFloat(dt dtype.DType, b []byte, i int) float64 {
	switch dt {
	case dtype.FP32:
		return float64(math.Float32frombits(getU32(b[4*i:])))
	case dtype.FP64:
		return math.Float64frombits(getU64(b[8*i:]))
	case dtype.BF16:
		return float64(dtype.BF16ToFloat32(getU16(b[2*i:])))
	case dtype.FP16:
		return float64(dtype.FP16ToFloat32(getU16(b[2*i:])))
	}
	return float64(b[i])
}

// maxAbsDiff is the largest |a[i]-b[i]| as float64, skipping positions where
// both are NaN; a NaN against a number counts as +Inf.
func maxAbsDiff(dt dtype.DType, a, b []byte) float64 {
	m := 0.0
	n := min(len(a), len(b)) / max(dt.Size(), 1)
	for i := 0; i < n; i++ {
		x, y := elemFloat(dt, a, i), elemFloat(dt, b, i)
		xn, yn := x != x, y != y
		switch {
		case xn && yn, x == y:
			continue
		case xn || yn:
			return math.Inf(1)
		}
		if d := math.Abs(x - y); d > m { // never NaN: equal infinities were skipped above
			m = d
		}
	}
	return m
}

// Package reduce does the arithmetic of docs/contract.md, "add(a, b) per dtype" on host memory:
// the canonical tree over W rank buffers, per dtype and accumulate mode.
//
// Two implementations: Oracle, a deliberately naive per-element reference
// that is obviously right, and Reducer, the fast blocked, multi-core version
// that every test compares with Oracle bit for bit.
//
// Buffers are raw little-endian elements ([]byte), so the same code serves
// every transport; inputs[r] is rank r's buffer. The output may alias any
// input exactly (in place) but must not partially overlap one.
package reduce

import (
	"errors"
	"fmt"
	"math"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/tree"
)

// Accumulate selects how fp16 and bf16 are added; it has no effect on fp32 and fp64.
type Accumulate uint8

const (
	// Native rounds every node of the tree to the dtype (CUDA __hadd, PyTorch add). The default.
	Native Accumulate = iota
	// F32 evaluates the whole tree in float32 and rounds once at the root.
	F32
)

func (a Accumulate) String() string {
	switch a {
	case Native:
		return "native"
	case F32:
		return "f32"
	}
	return fmt.Sprintf("accumulate(%d)", uint8(a))
}

// ParseAccumulate accepts "native" and "f32" (also "fp32", "float32").
func ParseAccumulate(s string) (Accumulate, error) {
	switch s {
	case "native", "":
		return Native, nil
	case "f32", "fp32", "float32":
		return F32, nil
	}
	return 0, fmt.Errorf("reduce: unknown accumulate mode %q (want native or f32)", s)
}

// Valid reports whether a is a known mode.
func (a Accumulate) Valid() bool { return a <= F32 }

// ErrArgs is wrapped by every argument error of this package.
var ErrArgs = errors.New("reduce: invalid arguments")

// Check validates the shapes shared by Oracle and Reducer and returns the
// element count.
func Check(dt dtype.DType, acc Accumulate, inputs [][]byte, out []byte) (int, error) {
	if !dt.Valid() {
		return 0, fmt.Errorf("%w: dtype %v is not reducible (want bf16, fp16, fp32, fp64)", ErrArgs, dt)
	}
	if !acc.Valid() {
		return 0, fmt.Errorf("%w: accumulate mode %v", ErrArgs, acc)
	}
	if len(inputs) < 1 {
		return 0, fmt.Errorf("%w: no inputs", ErrArgs)
	}
	if len(out)%dt.Size() != 0 {
		return 0, fmt.Errorf("%w: output of %d bytes is not a whole number of %v elements", ErrArgs, len(out), dt)
	}
	for r, in := range inputs {
		if len(in) != len(out) {
			return 0, fmt.Errorf("%w: input %d has %d bytes, output %d", ErrArgs, r, len(in), len(out))
		}
	}
	return len(out) / dt.Size(), nil
}

// Oracle writes the canonical reduction of inputs into out, one element at a
// time, straight from the definition. It is the reference, not fast.
func Oracle(dt dtype.DType, acc Accumulate, inputs [][]byte, out []byte) error {
	n, err := Check(dt, acc, inputs, out)
	if err != nil {
		return err
	}
	w := len(inputs)
	levels := tree.Levels(w)
	sz := dt.Size()
	vals64 := make([]float64, w)
	vals32 := make([]float32, w)
	for i := 0; i < n; i++ {
		off := i * sz
		switch dt {
		case dtype.FP64:
			for r := range inputs {
				vals64[r] = math.Float64frombits(le64(inputs[r][off:]))
			}
			for _, l := range levels {
				for _, p := range l.Pairs {
					vals64[p.Dst] = vals64[p.Left] + vals64[p.Right]
				}
				if l.Carry >= 0 {
					vals64[l.CarryDst] = vals64[l.Carry]
				}
			}
			v := math.Float64bits(vals64[0])
			if vals64[0] != vals64[0] {
				v = dtype.CanonicalNaN64
			}
			put64(out[off:], v)
		case dtype.FP32:
			for r := range inputs {
				vals32[r] = math.Float32frombits(le32(inputs[r][off:]))
			}
			evalTree32(levels, vals32, nil)
			v := math.Float32bits(vals32[0])
			if vals32[0] != vals32[0] {
				v = dtype.CanonicalNaN32
			}
			put32(out[off:], v)
		case dtype.BF16, dtype.FP16:
			widen, narrow, round := dtype.BF16ToFloat32, dtype.Float32ToBF16, dtype.RoundBF16
			if dt == dtype.FP16 {
				widen, narrow, round = dtype.FP16ToFloat32, dtype.Float32ToFP16, dtype.RoundFP16
			}
			for r := range inputs {
				vals32[r] = widen(le16(inputs[r][off:]))
			}
			if acc == Native {
				evalTree32(levels, vals32, round)
			} else {
				evalTree32(levels, vals32, nil)
			}
			put16(out[off:], narrow(vals32[0])) // narrow canonicalises NaN
		}
	}
	return nil
}

func evalTree32(levels []tree.Level, v []float32, round func(float32) float32) {
	for _, l := range levels {
		for _, p := range l.Pairs {
			s := v[p.Left] + v[p.Right]
			if round != nil {
				s = round(s)
			}
			v[p.Dst] = s
		}
		if l.Carry >= 0 {
			v[l.CarryDst] = v[l.Carry]
		}
	}
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }
func put16(b []byte, v uint16) {
	b[0], b[1] = byte(v), byte(v>>8)
}
func put32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
func put64(b []byte, v uint64) { put32(b, uint32(v)); put32(b[4:], uint32(v>>32)) }

// Package kparams lays out GPU kernel parameters: the packer behind
// internal/cuda's and internal/hip's Args (the kernels are the same source
// on both vendors, so the layout rules are the same). It is pure Go and
// vendor-neutral; the binding names itself in errors through the type
// parameter.
package kparams

import (
	"fmt"
	"math"
)

// Kernel parameter limits of Args.
const (
	MaxArgBytes = 4096
	MaxArgs     = 64
)

// Vendor names the binding an Args belongs to, for its error messages: a
// zero-size type whose Name returns a constant such as "cuda" or "hip".
type Vendor interface{ Name() string }

// An Args[V, P] takes device pointers of type P (the binding's DevicePtr).

// Args lays out kernel parameters, one call per parameter of the kernel, in
// order, each at its natural alignment (little-endian scalars; a parameter
// of n bytes at the next multiple of its alignment). The zero value is ready to use;
// Reset reuses it. An Args is about 4.4 KB: keep one per launcher rather
// than one per launch. The launchers copy the bytes into C memory, so the
// Args may be reused as soon as a launch returns.
type Args[V Vendor, P ~uint64] struct {
	buf  [MaxArgBytes]byte
	offs [MaxArgs]int32
	n    int
	size int
	err  error
}

// Reset empties the parameter list.
func (a *Args[V, P]) Reset() { a.n, a.size, a.err = 0, 0, nil }

// Len is the number of parameters.
func (a *Args[V, P]) Len() int { return a.n }

// Err is the first layout error (too many or too large parameters).
func (a *Args[V, P]) Err() error { return a.err }

// Raw appends one parameter of len(b) bytes at the given alignment (a power
// of two ≤ 16); used for structs passed by value.
func (a *Args[V, P]) Raw(b []byte, align int) *Args[V, P] {
	if a.err != nil {
		return a
	}
	if align < 1 || align > 16 || align&(align-1) != 0 {
		var v V
		a.err = fmt.Errorf("%s: kernel parameter %d: alignment %d is not a power of two ≤ 16", v.Name(), a.n, align)
		return a
	}
	off := (a.size + align - 1) &^ (align - 1)
	if a.n >= MaxArgs || off+len(b) > MaxArgBytes {
		var v V
		a.err = fmt.Errorf("%s: kernel parameters exceed %d parameters or %d bytes", v.Name(), MaxArgs, MaxArgBytes)
		return a
	}
	copy(a.buf[off:], b)
	a.offs[a.n] = int32(off)
	a.n++
	a.size = off + len(b)
	return a
}

// put appends the size low bytes of v, little-endian, at alignment size.
func (a *Args[V, P]) put(v uint64, size int) *Args[V, P] {
	var b [8]byte
	for i := 0; i < size; i++ {
		b[i] = byte(v >> (8 * i))
	}
	return a.Raw(b[:size], size)
}

// Ptr appends a device pointer (8 bytes).
func (a *Args[V, P]) Ptr(p P) *Args[V, P] { return a.put(uint64(p), 8) }

// U64 appends an unsigned 64-bit integer.
func (a *Args[V, P]) U64(v uint64) *Args[V, P] { return a.put(v, 8) }

// I64 appends a signed 64-bit integer (long long).
func (a *Args[V, P]) I64(v int64) *Args[V, P] { return a.put(uint64(v), 8) }

// U32 appends an unsigned 32-bit integer.
func (a *Args[V, P]) U32(v uint32) *Args[V, P] { return a.put(uint64(v), 4) }

// I32 appends a signed 32-bit integer (int).
func (a *Args[V, P]) I32(v int32) *Args[V, P] { return a.put(uint64(uint32(v)), 4) }

// F32 appends a float.
func (a *Args[V, P]) F32(v float32) *Args[V, P] { return a.put(uint64(math.Float32bits(v)), 4) }

// F64 appends a double.
func (a *Args[V, P]) F64(v float64) *Args[V, P] { return a.put(math.Float64bits(v), 8) }

// Layout returns the laid-out buffer and the offset of each parameter in
// it (views of the Args: valid until the next change).
func (a *Args[V, P]) Layout() ([]byte, []int32) { return a.buf[:a.size], a.offs[:a.n] }

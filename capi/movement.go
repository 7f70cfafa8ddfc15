//go:build cgo

package main

import (
	"math"
	"unsafe"
)

// elemSize is the size of a detcollDataType_t (data movement takes every type).
func elemSize(dtc int32) (int, error) {
	if dtc < 0 || int(dtc) >= len(dtypes) {
		return 0, argError("datatype %d is not a detcollDataType_t", dtc)
	}
	return dtypes[dtc].size, nil
}

// movementArgs looks up the communicator and returns the byte length of
// count elements of dtc times mult, checked for overflow.
func movementArgs(h uintptr, dtc int32, count uint64, mult int) (*commEntry, int, error) {
	e, err := lookup(h)
	if err != nil {
		return nil, 0, err
	}
	sz, err := elemSize(dtc)
	if err != nil {
		return nil, 0, err
	}
	w := uint64(e.comm.Size())
	if count > uint64(math.MaxInt/4)/uint64(sz)/w/uint64(mult) {
		return nil, 0, argError("count %d of %s overflows", count, dtypes[dtc].name)
	}
	return e, int(count) * sz * mult, nil
}

// hostArg checks and views n bytes of host memory at p for one call.
func hostArg(what string, p unsafe.Pointer, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if p == nil {
		return nil, argError("%s is NULL (%d bytes)", what, n)
	}
	if err := probe(what, p, n); err != nil {
		return nil, err
	}
	return hostBytes(p, n), nil
}

// blocks views the W blocks of an alltoallv buffer: block p is counts[p]
// elements of sz bytes at element displacement displs[p].
func blocks(what string, base unsafe.Pointer, counts, displs []uint64, sz int) ([][]byte, error) {
	out := make([][]byte, len(counts))
	const limit = uint64(math.MaxInt / 4)
	for p := range counts {
		if counts[p] > limit/uint64(sz) || displs[p] > limit/uint64(sz) {
			return nil, argError("%s block %d: count %d at displacement %d overflows", what, p, counts[p], displs[p])
		}
		n := int(counts[p]) * sz
		if n == 0 {
			out[p] = []byte{}
			continue
		}
		if base == nil {
			return nil, argError("%sbuff is NULL (block %d has %d elements)", what, p, counts[p])
		}
		b, err := hostArg(what+"buff block", unsafe.Add(base, int(displs[p])*sz), n)
		if err != nil {
			return nil, err
		}
		out[p] = b
	}
	return out, nil
}

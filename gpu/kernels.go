package gpu

import (
	"fmt"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/kernels"
	"github.com/detcoll/detcoll/reduce"
)

// ReduceSource is the CUDA C source of the reduce kernels
// (gpu/kernels/reduce.cu, shared with the ROCm backend, which compiles it
// with hiprtc).
var ReduceSource = kernels.ReduceSource

// Limits of the reduce kernels.
const (
	// MaxListInputs is the largest W that Reduce (one pointer per input,
	// passed by value in the kernel parameters) accepts.
	MaxListInputs = 64
	// MaxStridedInputs is the largest W that ReduceStrided accepts (the
	// kernel's second-level counter has 13 slots of 16-rank blocks).
	MaxStridedInputs = 65536
	// blockThreads is the block size of every reduce launch.
	blockThreads = 256
)

// kernelVariant is the type part of a kernel name.
func kernelVariant(dt dtype.DType, acc reduce.Accumulate) (string, error) {
	if !acc.Valid() {
		return "", fmt.Errorf("%w: accumulate mode %v", reduce.ErrArgs, acc)
	}
	switch dt {
	case dtype.BF16, dtype.FP16:
		return dt.String() + "_" + acc.String(), nil
	case dtype.FP32, dtype.FP64:
		return dt.String(), nil // the accumulate mode has no effect
	}
	return "", fmt.Errorf("%w: dtype %v is not reducible on the GPU (want bf16, fp16, fp32, fp64)", reduce.ErrArgs, dt)
}

// kernelName is the extern "C" name of the kernel for dt, acc and w inputs.
func kernelName(dt dtype.DType, acc reduce.Accumulate, w int) (string, error) {
	v, err := kernelVariant(dt, acc)
	if err != nil {
		return "", err
	}
	if w > MaxStridedInputs {
		return "", fmt.Errorf("%w: %d inputs (at most %d)", reduce.ErrArgs, w, MaxStridedInputs)
	}
	return "detcoll_reduce_" + v, nil
}

// allKernelNames lists every kernel of ReduceSource.
func allKernelNames() []string {
	var out []string
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64} {
		accs := []reduce.Accumulate{reduce.Native}
		if dt.Size() == 2 {
			accs = append(accs, reduce.F32)
		}
		for _, acc := range accs {
			n, _ := kernelName(dt, acc, 1)
			out = append(out, n)
		}
	}
	return out
}

// plan is one reduce launch, computed on the host.
type plan struct {
	kernel string
	head   int64 // scalar elements before the vector body
	nvec   int64 // 16-byte vectors
	tail   int64 // scalar elements after
	items  int64 // work items (head + nvec + tail)
}

// srcDesc is the input description the kernel receives (struct dc_src).
type srcDesc struct {
	list   bool
	base   DevicePtr
	stride int64
	ptrs   []DevicePtr
}

func (s *srcDesc) input(r int) DevicePtr {
	if s.list {
		return s.ptrs[r]
	}
	return s.base + DevicePtr(int64(r)*s.stride)
}

// makePlan validates the arguments and lays out the launch. Nothing is
// dereferenced; all checks are on addresses and sizes.
func makePlan(dt dtype.DType, acc reduce.Accumulate, out DevicePtr, src *srcDesc, w, count int) (plan, error) {
	var p plan
	if w < 1 {
		return p, fmt.Errorf("%w: %d inputs (want at least 1)", reduce.ErrArgs, w)
	}
	if src.list && w > MaxListInputs {
		return p, fmt.Errorf("%w: %d input pointers (at most %d; use ReduceStrided for slabs in one buffer)", reduce.ErrArgs, w, MaxListInputs)
	}
	if !src.list && src.stride < 0 {
		return p, fmt.Errorf("%w: negative stride %d", reduce.ErrArgs, src.stride)
	}
	if count < 0 {
		return p, fmt.Errorf("%w: count %d", reduce.ErrArgs, count)
	}
	name, err := kernelName(dt, acc, w)
	if err != nil {
		return p, err
	}
	p.kernel = name
	if count == 0 {
		return p, nil
	}
	sz := int64(dt.Size())
	bytes := int64(count) * sz
	if out == 0 {
		return p, fmt.Errorf("%w: nil output pointer", reduce.ErrArgs)
	}
	if int64(out)%sz != 0 {
		return p, fmt.Errorf("%w: output %#x is not aligned to the %d-byte %v element", reduce.ErrArgs, uint64(out), sz, dt)
	}
	if !src.list && src.stride%sz != 0 {
		return p, fmt.Errorf("%w: stride %d is not a multiple of the %d-byte %v element", reduce.ErrArgs, src.stride, sz, dt)
	}
	mis := int64(out) % 16
	vector := true
	for r := 0; r < w; r++ {
		in := src.input(r)
		if in == 0 {
			return p, fmt.Errorf("%w: nil input pointer %d", reduce.ErrArgs, r)
		}
		if int64(in)%sz != 0 {
			return p, fmt.Errorf("%w: input %d at %#x is not aligned to the %d-byte %v element", reduce.ErrArgs, r, uint64(in), sz, dt)
		}
		if in != out && overlaps(uint64(in), uint64(out), uint64(bytes)) {
			return p, fmt.Errorf("%w: input %d [%#x, +%d) partially overlaps the output %#x (only exact aliasing is allowed)", reduce.ErrArgs, r, uint64(in), bytes, uint64(out))
		}
		if int64(in)%16 != mis {
			vector = false
		}
	}
	n := int64(count)
	e := 16 / sz
	if vector {
		p.head = ((16 - mis) % 16) / sz
		if p.head > n {
			p.head = n
		}
		p.nvec = (n - p.head) / e
	} else {
		p.head = n
	}
	p.tail = n - p.head - p.nvec*e
	p.items = p.head + p.nvec + p.tail
	return p, nil
}

func overlaps(a, b, n uint64) bool { return a < b+n && b < a+n }

// gridFor is the number of blocks for items work items, at most maxBlocks
// (the kernel loops over the rest).
func gridFor(items int64, maxBlocks int) uint32 {
	g := (items + blockThreads - 1) / blockThreads
	if g > int64(maxBlocks) {
		g = int64(maxBlocks)
	}
	if g < 1 {
		g = 1
	}
	return uint32(g)
}

// srcParamBytes is the size of struct dc_src: base, stride, 64 pointers.
const srcParamBytes = 8 + 8 + 8*MaxListInputs

// packSrc writes struct dc_src.
func packSrc(b *[srcParamBytes]byte, s *srcDesc) {
	*b = [srcParamBytes]byte{}
	put := func(off int, v uint64) {
		for i := 0; i < 8; i++ {
			b[off+i] = byte(v >> (8 * i))
		}
	}
	if s.list {
		for r, p := range s.ptrs {
			put(16+8*r, uint64(p))
		}
		return
	}
	put(0, uint64(s.base))
	put(8, uint64(s.stride))
}

package devcomm

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devrt"
)

// fastSource is appended to gpu.ReduceSource: reduce kernels for W = 2, 4
// and 8 with the tree unrolled at compile time and more bytes in flight per
// thread. Same element types, same tree, same bits (checked against the
// oracle on the host by an emulation test and on the GPU by Verify).
//
//go:embed kernels/fast.cu
var fastSource string

// FastReduceEnv, set to 0, turns the fast kernels off (the generic kernels
// of package gpu are used for every W).
const FastReduceEnv = "DETCOLL_NCCL_FAST_REDUCE"

const (
	fastBlock = 512
	// fastSideFreeSMs is how many SMs a reduce launched next to an NCCL
	// transfer (the pipelined algorithms) leaves free for NCCL's blocks.
	fastSideFreeSMs = 40
)

// fastUnroll is the vectors per thread per iteration of each W.
var fastUnroll = map[int]int{2: 4, 4: 2, 8: 1}

type fastKernels struct {
	dev  *gpu.Device
	mod  devrt.Module
	fns  map[string]devrt.Function
	sms  int
	args devrt.Args // used under the communicator's lock
	src  [64]byte
}

func fastName(dt dtype.DType, acc detcoll.Accumulate, w int) string {
	v := dt.String()
	if dt == dtype.BF16 || dt == dtype.FP16 {
		v += "_" + acc.String()
	}
	return fmt.Sprintf("detcoll_fast_%s_w%d", v, w)
}

func fastNames() []string {
	var out []string
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64} {
		accs := []detcoll.Accumulate{detcoll.AccumulateNative}
		if dt.Size() == 2 {
			accs = append(accs, detcoll.AccumulateF32)
		}
		for _, acc := range accs {
			for _, w := range []int{2, 4, 8} {
				out = append(out, fastName(dt, acc, w))
			}
		}
	}
	return out
}

// loadFast compiles (first use; cached by NVRTC in memory and on disk) and
// loads the fast kernels; nil, nil when FastReduceEnv turns them off.
func loadFast(dev *gpu.Device) (*fastKernels, error) {
	if os.Getenv(FastReduceEnv) == "0" {
		return nil, nil
	}
	rt := dev.Runtime()
	prog, err := rt.Build(gpu.ReduceSource+"\n"+fastSource, "detcoll_fast_reduce.cu", dev.Props())
	if err != nil {
		return nil, fmt.Errorf("devcomm: compiling the fast reduce kernels: %w", err)
	}
	f := &fastKernels{dev: dev, fns: map[string]devrt.Function{}, args: rt.NewArgs(), sms: dev.Multiprocessors()}
	err = dev.Do(func() error {
		m, err := rt.ModuleLoad(prog.Image)
		if err != nil {
			return err
		}
		for _, n := range fastNames() {
			fn, err := rt.ModuleFunction(m, n)
			if err != nil {
				_ = rt.ModuleUnload(m)
				return err
			}
			f.fns[n] = fn
		}
		f.mod = m
		return nil
	})
	if err != nil {
		rt.Invalidate(prog.Key)
		return nil, fmt.Errorf("devcomm: loading the fast reduce kernels: %w", err)
	}
	return f, nil
}

func (f *fastKernels) unload() error {
	if f == nil || f.mod == 0 {
		return nil
	}
	return f.dev.Do(func() error { return f.dev.Runtime().ModuleUnload(f.mod) })
}

// fastPlan is the head/vector/tail split of a fast launch, or ok=false
// when the fast kernels do not apply (then the generic kernel runs).
func fastPlan(dt dtype.DType, out DevicePtr, in []DevicePtr, count int) (head, nvec int64, ok bool) {
	sz := int64(dt.Size())
	if _, known := fastUnroll[len(in)]; !known || sz == 0 {
		return 0, 0, false
	}
	mis := int64(out) % 16
	vector := true
	for _, p := range in {
		if p == 0 || int64(p)%sz != 0 {
			return 0, 0, false
		}
		if int64(p)%16 != mis {
			vector = false
		}
	}
	n := int64(count)
	if !vector {
		return n, 0, true
	}
	head = min(((16-mis)%16)/sz, n)
	return head, (n - head) / (16 / sz), true
}

// launch enqueues the fast kernel for len(in) inputs on s and reports
// whether it applied. side limits the grid so that NCCL's blocks still find
// free SMs (a reduce running next to a transfer).
func (f *fastKernels) launch(s Stream, dt dtype.DType, acc detcoll.Accumulate, out DevicePtr, in []DevicePtr, count int, side bool) (bool, error) {
	if f == nil || count == 0 {
		return false, nil
	}
	head, nvec, ok := fastPlan(dt, out, in, count)
	if !ok {
		return false, nil
	}
	fn, ok := f.fns[fastName(dt, acc, len(in))]
	if !ok {
		return false, nil
	}
	per := int64(fastBlock * fastUnroll[len(in)])
	blocks := (nvec + per - 1) / per
	if scalars := int64(count) - nvec*int64(16/dt.Size()); blocks == 0 && scalars > 0 {
		blocks = (scalars + fastBlock - 1) / fastBlock
	}
	limit := int64(2 * f.sms)
	if side {
		limit = int64(max(f.sms-fastSideFreeSMs, f.sms/2))
	}
	blocks = max(min(blocks, limit), 1)
	f.src = [64]byte{}
	for r, p := range in {
		for i := 0; i < 8; i++ {
			f.src[8*r+i] = byte(uint64(p) >> (8 * i))
		}
	}
	f.args.Reset()
	f.args.Ptr(out).Raw(f.src[:], 8).I64(int64(count)).I64(head).I64(nvec)
	grid := devrt.Dim3{X: uint32(blocks), Y: 1, Z: 1}
	block := devrt.Dim3{X: fastBlock, Y: 1, Z: 1}
	return true, f.dev.Runtime().Launch(fn, grid, block, 0, s, f.args)
}

// reduce enqueues the tree reduction of the inputs in (rank order) into out
// on s: the fast kernel when it applies, else the generic one. Called inside
// c.dev.Do with c.mu held.
func (c *Comm) reduce(s Stream, dt dtype.DType, acc detcoll.Accumulate, out DevicePtr, in []DevicePtr, count int, side bool) error {
	if done, err := c.fast.launch(s, dt, acc, out, in, count, side); done || err != nil {
		return err
	}
	return c.k.Reduce(s, dt, acc, out, in, count)
}

// reduceStrided is reduce over w inputs at base + r*stride.
func (c *Comm) reduceStrided(s Stream, dt dtype.DType, acc detcoll.Accumulate, out, base DevicePtr, stride, w, count int) error {
	if _, ok := fastUnroll[w]; ok && c.fast != nil {
		var in [8]DevicePtr
		for r := 0; r < w; r++ {
			in[r] = base.Add(r * stride)
		}
		if done, err := c.fast.launch(s, dt, acc, out, in[:w], count, false); done || err != nil {
			return err
		}
	}
	return c.k.ReduceStrided(s, dt, acc, out, base, stride, w, count)
}

// FastReduce reports whether the fast reduce kernels (W = 2, 4, 8) are
// loaded (FastReduceEnv=0 turns them off).
func (c *Comm) FastReduce() bool { return c.fast != nil }

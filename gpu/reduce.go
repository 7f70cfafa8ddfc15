package gpu

import (
	"fmt"
	"sync"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/reduce"
)

// ReduceKernels is the reduce module loaded on one device.
type ReduceKernels struct {
	dev       *Device
	mod       devrt.Module
	fns       map[string]devrt.Function
	prog      *devrt.Program
	maxBlocks int
	args      sync.Pool // *launchArgs
}

type launchArgs struct {
	a   devrt.Args
	src [srcParamBytes]byte
}

// KernelInfo describes the loaded module.
type KernelInfo struct {
	Arch      string         // e.g. "sm_90" (CUBIN) or "compute_90" (PTX, JIT by the driver)
	From      string         // "compiled", "memory" or "disk"
	NVRTC     string         // NVRTC version
	CacheKey  string         // nvrtc cache key
	Options   []string       // compiler options
	Functions []FunctionInfo // per kernel
}

// FunctionInfo reports the resources of one kernel.
type FunctionInfo struct {
	Name       string
	Registers  int
	LocalBytes int // spills and stack
}

// Kernels compiles (first use; cached on disk) and loads the reduce module
// on this device.
func (d *Device) Kernels() (*ReduceKernels, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.kernels != nil {
		return d.kernels, nil
	}
	k, err := loadKernels(d)
	if err != nil {
		return nil, err
	}
	d.kernels = k
	return k, nil
}

func loadKernels(d *Device) (*ReduceKernels, error) {
	var k *ReduceKernels
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		prog, err := d.rt.Build(ReduceSource, "detcoll_reduce.cu", d.props)
		if err != nil {
			return nil, fmt.Errorf("gpu: compiling the reduce kernels: %w", err)
		}
		k = &ReduceKernels{dev: d, prog: prog, fns: map[string]devrt.Function{}, maxBlocks: d.props.Multiprocessors * 2048 / blockThreads}
		if k.maxBlocks < 1 {
			k.maxBlocks = 1
		}
		lastErr = d.ctx.Do(func() error {
			m, err := d.rt.ModuleLoad(prog.Image)
			if err != nil {
				return err
			}
			for _, n := range allKernelNames() {
				f, err := d.rt.ModuleFunction(m, n)
				if err != nil {
					_ = d.rt.ModuleUnload(m)
					return err
				}
				k.fns[n] = f
			}
			k.mod = m
			return nil
		})
		if lastErr == nil {
			return k, nil
		}
		if prog.From == "compiled" {
			break
		}
		d.rt.Invalidate(prog.Key) // a stale or damaged cache entry: compile afresh once
	}
	return nil, fmt.Errorf("gpu: loading the reduce kernels: %w", lastErr)
}

// Info describes the module and each kernel's registers and local memory.
func (k *ReduceKernels) Info() KernelInfo {
	info := KernelInfo{Arch: k.prog.Arch, From: k.prog.From, NVRTC: k.prog.Version,
		CacheKey: k.prog.Key, Options: k.prog.Options}
	for _, n := range allKernelNames() {
		fi := FunctionInfo{Name: n}
		f := k.fns[n]
		_ = k.dev.ctx.Do(func() error {
			fi.Registers, fi.LocalBytes, _ = k.dev.rt.FunctionResources(f)
			return nil
		})
		info.Functions = append(info.Functions, fi)
	}
	return info
}

// Reduce enqueues on stream the tree reduction of w = len(in) inputs, each
// count elements of dt at in[r], into out. out may be one of the inputs
// (in place) but must not partially overlap any. Pointers need only be
// aligned to the element size; 16-byte vector accesses are used when out and
// every input share their address modulo 16. At most MaxListInputs inputs.
// Arguments are checked before anything is enqueued (errors wrap
// reduce.ErrArgs). count == 0 enqueues nothing.
func (k *ReduceKernels) Reduce(stream Stream, dt dtype.DType, acc reduce.Accumulate, out DevicePtr, in []DevicePtr, count int) error {
	src := srcDesc{list: true, ptrs: in}
	return k.launch(stream, dt, acc, out, &src, len(in), count)
}

// ReduceStrided is Reduce over w inputs laid out in one buffer: input r at
// base + r*strideBytes (slabs in a workspace, e.g. after an all-gather).
// Up to MaxStridedInputs inputs.
func (k *ReduceKernels) ReduceStrided(stream Stream, dt dtype.DType, acc reduce.Accumulate, out, base DevicePtr, strideBytes, w, count int) error {
	src := srcDesc{base: base, stride: int64(strideBytes)}
	return k.launch(stream, dt, acc, out, &src, w, count)
}

func (k *ReduceKernels) launch(stream Stream, dt dtype.DType, acc reduce.Accumulate, out DevicePtr, src *srcDesc, w, count int) error {
	if k == nil || k.dev == nil {
		return fmt.Errorf("%w: nil ReduceKernels", reduce.ErrArgs)
	}
	p, err := makePlan(dt, acc, out, src, w, count)
	if err != nil {
		return err
	}
	if p.items == 0 {
		return nil
	}
	f, ok := k.fns[p.kernel]
	if !ok {
		return fmt.Errorf("gpu: kernel %s not loaded", p.kernel)
	}
	la, _ := k.args.Get().(*launchArgs)
	if la == nil {
		la = &launchArgs{a: k.dev.rt.NewArgs()}
	}
	defer k.args.Put(la)
	packSrc(&la.src, src)
	listFlag := int32(0)
	if src.list {
		listFlag = 1
	}
	la.a.Reset()
	la.a.Ptr(out).Raw(la.src[:], 8).I32(listFlag).I32(int32(w)).I64(int64(count)).I64(p.head).I64(p.nvec)
	grid := devrt.Dim3{X: gridFor(p.items, k.maxBlocks), Y: 1, Z: 1}
	block := devrt.Dim3{X: blockThreads, Y: 1, Z: 1}
	return k.dev.Do(func() error { return k.dev.rt.Launch(f, grid, block, 0, stream, la.a) })
}

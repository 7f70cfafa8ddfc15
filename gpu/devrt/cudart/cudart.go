// Package cudart is the CUDA implementation of package gpu/devrt: the CUDA
// driver API (internal/cuda), NVRTC (internal/nvrtc) and NCCL
// (internal/nccl). Importing it registers the "cuda" runtime; the import
// sites are build-constrained (`cgo && (cuda || !rocm)`, docs/rocm.md), so a
// ROCm-only build never links it.
//
// Every method forwards to exactly the internal/cuda call that gpu and
// gpu/devcomm made before the runtime abstraction (same flags, same
// errors), converting only the neutral handle types.
package cudart

import (
	"fmt"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/gpu/devrt/rtshared"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/nccl"
	"github.com/detcoll/detcoll/internal/nvrtc"
)

func init() { devrt.Register(Runtime) }

// Runtime is the CUDA devrt.Runtime.
var Runtime devrt.Runtime = rt{rtshared.Ops[cuda.Runtime, cuda.Args, *cuda.Args]{Name: "cudart"}}

type rt struct {
	// streams, events, modules, functions, graphs, memory, launches, IPC
	rtshared.Ops[cuda.Runtime, cuda.Args, *cuda.Args]
}

func (rt) Vendor() string  { return "cuda" }
func (rt) CCLName() string { return "NCCL" }

func (rt) CompilerName() string     { return "NVRTC" }
func (rt) CompilerAvailable() error { return nvrtc.Available() }
func (rt) CCLAvailable() error      { return nccl.Available() }

func (rt) DriverAvailable() error { return cuda.Available() }

// Available needs the CUDA driver with at least one GPU, NVRTC and NCCL.
func (rt) Available() error {
	if err := cuda.Available(); err != nil {
		return err
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("cuda: the driver sees no GPU")
	}
	if err := nvrtc.Available(); err != nil {
		return err
	}
	return nccl.Available()
}

func (rt) DeviceCount() (int, error) { return cuda.DeviceCount() }

func (rt) CCL() (*ccl.Lib, error) {
	l, err := nccl.Default()
	if err != nil {
		return nil, err
	}
	return l.Core(), nil
}

type context struct {
	dev cuda.Device
	ctx cuda.Context
}

// Open reads the device's properties and retains its primary context.
func (rt) Open(ordinal int) (devrt.Context, devrt.Props, error) {
	var p devrt.Props
	dev, err := cuda.DeviceGet(ordinal)
	if err != nil {
		return nil, p, err
	}
	if p.Name, err = dev.Name(); err != nil {
		return nil, p, err
	}
	if p.CCMajor, p.CCMinor, err = dev.ComputeCapability(); err != nil {
		return nil, p, err
	}
	p.Arch = fmt.Sprintf("sm_%d%d", p.CCMajor, p.CCMinor)
	p.WarpSize = 32
	if p.Multiprocessors, err = dev.Attribute(cuda.AttrMultiprocessorCount); err != nil {
		return nil, p, err
	}
	if p.TotalMem, err = dev.TotalMem(); err != nil {
		return nil, p, err
	}
	c := &context{dev: dev}
	if c.ctx, err = dev.PrimaryCtxRetain(); err != nil {
		return nil, p, err
	}
	return c, p, nil
}

func (c *context) Do(fn func() error) error  { return c.ctx.Do(fn) }
func (c *context) Release() error            { return c.dev.PrimaryCtxRelease() }
func (c *context) UUID() ([16]byte, error)   { return c.dev.UUID() }
func (c *context) PCIBusID() (string, error) { return c.dev.PCIBusID() }

func (c *context) CanAccessPeer(peer int) (bool, error) {
	d, err := cuda.DeviceGet(peer)
	if err != nil {
		return false, err
	}
	return c.dev.CanAccessPeer(d)
}

func (c *context) Capture(s devrt.Stream, fn func() error) (devrt.GraphExec, error) {
	g, err := cuda.Capture(c.ctx, cuda.Stream(s), gpurt.CaptureThreadLocal, fn)
	return devrt.GraphExec(g), err
}

// Context returns the CUDA primary context and device of a Context opened
// by this runtime (for CUDA-only code such as cuBLAS), ok false otherwise.
func Context(c devrt.Context) (ctx cuda.Context, dev cuda.Device, ok bool) {
	cc, ok := c.(*context)
	if !ok {
		return 0, 0, false
	}
	return cc.ctx, cc.dev, true
}

func (rt) Build(source, name string, p devrt.Props) (*devrt.Program, error) {
	prog, err := nvrtc.Build(source, name, p.CCMajor*10+p.CCMinor)
	if err != nil {
		return nil, err
	}
	kind := "compute_"
	if prog.CUBIN {
		kind = "sm_"
	}
	return &devrt.Program{Image: prog.Image, Key: prog.Key, From: prog.From, Arch: fmt.Sprintf("%s%d", kind, prog.Arch),
		Version: prog.Version, Options: prog.Options, Compiled: prog.From == "compiled"}, nil
}

func (rt) Invalidate(key string) { nvrtc.Invalidate(key) }

func (rt) DeviceUUID(ordinal int) ([16]byte, error) {
	d, err := cuda.DeviceGet(ordinal)
	if err != nil {
		return [16]byte{}, err
	}
	return d.UUID()
}

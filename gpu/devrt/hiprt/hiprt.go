// Package hiprt is the ROCm implementation of package gpu/devrt: the HIP
// runtime (internal/hip), hiprtc (internal/hiprtc) and RCCL
// (internal/rccl). Importing it registers the "rocm" runtime; the import
// sites are build-constrained (`cgo && (rocm || !cuda)`, docs/rocm.md), so a
// CUDA-only build never links it.
//
// None of this has run on an AMD GPU (docs/rocm.md): it is tested against
// the stand-in HIP runtime of internal/hip's tests and, for the kernels,
// real hiprtc compiles.
//
// HIP specifics: a Context is the device ordinal (hipSetDevice on a locked
// thread; HIP has no context retain); pinned host memory is hipHostMalloc
// with default flags, which ROCm maps into every device's address space at
// the same address (unified addressing), as the IPC path's host words need;
// HIP has no device UUID call bound here, so DeviceUUID is the PCI bus id
// (unique on one host, which is all the IPC path matches on).
package hiprt

import (
	"fmt"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/gpu/devrt/rtshared"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/hip"
	"github.com/detcoll/detcoll/internal/hiprtc"
	"github.com/detcoll/detcoll/internal/rccl"
)

func init() { devrt.Register(Runtime) }

// Runtime is the ROCm devrt.Runtime.
var Runtime devrt.Runtime = rt{rtshared.Ops[hip.Runtime, hip.Args, *hip.Args]{Name: "hiprt"}}

type rt struct {
	// streams, events, modules, functions, graphs, memory, launches, IPC
	rtshared.Ops[hip.Runtime, hip.Args, *hip.Args]
}

func (rt) Vendor() string  { return "rocm" }
func (rt) CCLName() string { return "RCCL" }

func (rt) CompilerName() string     { return "hiprtc" }
func (rt) CompilerAvailable() error { return hiprtc.Available() }
func (rt) CCLAvailable() error      { return rccl.Available() }

func (rt) DriverAvailable() error { return hip.Available() }

// Available needs the HIP runtime with at least one GPU, hiprtc and RCCL.
func (rt) Available() error {
	if err := hip.Available(); err != nil {
		return err
	}
	n, err := hip.DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("hip: the runtime sees no GPU")
	}
	if err := hiprtc.Available(); err != nil {
		return err
	}
	return rccl.Available()
}

func (rt) DeviceCount() (int, error) { return hip.DeviceCount() }

func (rt) CCL() (*ccl.Lib, error) {
	l, err := rccl.Default()
	if err != nil {
		return nil, err
	}
	return l.Core(), nil
}

type context struct{ dev hip.Device }

// Open reads the device's properties (gcnArchName is the compile target).
func (rt) Open(ordinal int) (devrt.Context, devrt.Props, error) {
	var p devrt.Props
	d := hip.Device(ordinal)
	props, err := d.Properties()
	if err != nil {
		return nil, p, err
	}
	p.Name, p.Arch, p.WarpSize = props.Name, props.GCNArchName, props.WarpSize
	if p.Multiprocessors, err = d.Attribute(hip.AttrMultiprocessorCount); err != nil {
		return nil, p, err
	}
	if p.TotalMem, err = d.TotalMem(); err != nil {
		return nil, p, err
	}
	return &context{dev: d}, p, nil
}

func (c *context) Do(fn func() error) error  { return c.dev.Do(fn) }
func (c *context) Release() error            { return nil }
func (c *context) UUID() ([16]byte, error)   { return uuidOf(c.dev) }
func (c *context) PCIBusID() (string, error) { return c.dev.PCIBusID() }

func (c *context) CanAccessPeer(peer int) (bool, error) { return c.dev.CanAccessPeer(hip.Device(peer)) }

func (c *context) Capture(s devrt.Stream, fn func() error) (devrt.GraphExec, error) {
	g, err := hip.Capture(c.dev, hip.Stream(s), gpurt.CaptureThreadLocal, fn)
	return devrt.GraphExec(g), err
}

// uuidOf identifies a device on this host by its PCI bus id.
func uuidOf(d hip.Device) ([16]byte, error) {
	var u [16]byte
	id, err := d.PCIBusID()
	if err != nil {
		return u, err
	}
	if id == "" {
		return u, fmt.Errorf("hip: device %d has no PCI bus id", int(d))
	}
	copy(u[:], id)
	return u, nil
}

func (rt) Build(source, name string, p devrt.Props) (*devrt.Program, error) {
	prog, err := hiprtc.Build(source, name, p.Arch)
	if err != nil {
		return nil, err
	}
	return &devrt.Program{Image: prog.Image, Key: prog.Key, From: prog.From, Arch: prog.Processor,
		Version: prog.Version, Options: prog.Options, Compiled: prog.From == "compiled"}, nil
}

func (rt) Invalidate(key string) { hiprtc.Invalidate(key) }

func (rt) DeviceUUID(ordinal int) ([16]byte, error) { return uuidOf(hip.Device(ordinal)) }

// Versions is the HIP driver and runtime versions (hipDriverGetVersion,
// hipRuntimeGetVersion) as "major.minor.patch", for the benchmark report's
// device info; empty where the runtime does not load or the call fails.
func Versions() (driver, runtime string) {
	if err := hip.Load(); err != nil {
		return "", ""
	}
	if v, err := hip.DriverVersion(); err == nil {
		driver = hip.VersionString(v)
	}
	if v, err := hip.RuntimeVersion(); err == nil {
		runtime = hip.VersionString(v)
	}
	return driver, runtime
}

package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/internal/ring"
)

// CPU is the host-memory backend: the deterministic collectives are the
// Comm's own, over its transport; native is the ring reduce-scatter +
// all-gather of internal/ring over the same transport (comm.Transport()),
// run one after the other, never interleaved with the Comm's traffic.
type CPU struct {
	comm  *detcoll.Comm
	cases uint32 // cases prepared, the native ring's tag
}

// NewCPU returns the CPU backend of this rank of comm. The Comm must be the
// one passed to Run.
func NewCPU(comm *detcoll.Comm) *CPU { return &CPU{comm: comm} }

// CPURingBaseline is the CPU backend's native column: detcoll's own ring,
// not Gloo or MPI (their figures come in with --peer).
const CPURingBaseline = "ring (detcoll's reference of Gloo's order)"

// Baseline is CPURingBaseline.
func (b *CPU) Baseline() string { return CPURingBaseline }

// Name is "cpu".
func (b *CPU) Name() string { return "cpu" }

// Device reports kind "cpu" and this host's CPU model, with its logical core
// count; the library versions are empty.
func (b *CPU) Device() DeviceInfo {
	return DeviceInfo{Kind: "cpu", Names: []string{fmt.Sprintf("%s, %d logical cores, %s/%s", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)}}
}

var cpuModel = sync.OnceValue(func() string {
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
})

// Prepare allocates send, deterministic and native outputs and the ring's
// scratch, and fills the input (FillInput).
func (b *CPU) Prepare(ctx context.Context, spec CaseSpec) (Case, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	if spec.Rank != b.comm.Rank() || spec.WorldSize != b.comm.Size() {
		return nil, fmt.Errorf("bench: case for rank %d of %d on a Comm of rank %d of %d", spec.Rank, spec.WorldSize, b.comm.Rank(), b.comm.Size())
	}
	b.cases++
	c := &cpuCase{comm: b.comm, spec: spec, tag: b.cases & 0xFFFFFF}
	c.send = Input(spec, spec.Rank)
	c.recv = make([]byte, spec.OutputBytes())
	c.nrecv = make([]byte, spec.OutputBytes())
	switch spec.Op {
	case AllReduce:
		c.scratch = make([]byte, ring.AllReduceScratchBytes(spec.InputBytes, spec.WorldSize, spec.DType))
	case ReduceScatter:
		c.scratch = make([]byte, ring.ReduceScatterScratchBytes(spec.OutputBytes()))
	}
	return c, nil
}

type cpuCase struct {
	comm    *detcoll.Comm
	spec    CaseSpec
	tag     uint32
	send    []byte
	recv    []byte // deterministic output
	inplace []byte // in-place buffer (all_reduce: the input's size; all_gather: the output's)
	nrecv   []byte // native output
	scratch []byte // the ring's
	peak    int
}

func (c *cpuCase) RunDeterministic(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (time.Duration, error) {
	if iters < 1 {
		return 0, fmt.Errorf("bench: %d iterations", iters)
	}
	opts := []detcoll.Option{detcoll.WithAlgorithm(alg), detcoll.WithAccumulate(acc)}
	dt := c.spec.DType
	start := time.Now()
	for i := 0; i < iters; i++ {
		var err error
		switch c.spec.Op {
		case AllReduce:
			err = c.comm.AllReduce(ctx, c.send, c.recv, dt, opts...)
		case AllGather:
			err = c.comm.AllGather(ctx, c.send, c.recv, dt)
		case ReduceScatter:
			err = c.comm.ReduceScatter(ctx, c.send, c.recv, dt, opts...)
		}
		if err != nil {
			return 0, err
		}
	}
	d := time.Since(start) / time.Duration(iters)
	c.peak = max(c.peak, c.comm.Stats().WorkspaceBytes)
	return d, nil
}

func (c *cpuCase) RunNative(ctx context.Context, iters int) (time.Duration, error) {
	if iters < 1 {
		return 0, fmt.Errorf("bench: %d iterations", iters)
	}
	t, dt := c.comm.Transport(), c.spec.DType
	start := time.Now()
	for i := 0; i < iters; i++ {
		var err error
		switch c.spec.Op {
		case AllReduce:
			err = ring.AllReduce(ctx, t, c.tag, c.send, c.nrecv, dt, c.scratch)
		case AllGather:
			err = ring.AllGather(ctx, t, c.tag, c.send, c.nrecv, dt)
		case ReduceScatter:
			err = ring.ReduceScatter(ctx, t, c.tag, c.send, c.nrecv, dt, c.scratch)
		}
		if err != nil {
			return 0, fmt.Errorf("bench: native %s: %w", c.spec.Op, err)
		}
	}
	return time.Since(start) / time.Duration(iters), nil
}

func (c *cpuCase) InPlaceSupported() bool { return c.spec.Op != ReduceScatter }

func (c *cpuCase) ResetInPlace() error {
	if !c.InPlaceSupported() {
		return fmt.Errorf("bench: %s does not run in place", c.spec.Op)
	}
	if c.inplace == nil {
		c.inplace = make([]byte, c.spec.OutputBytes())
	}
	switch c.spec.Op {
	case AllReduce:
		copy(c.inplace, c.send)
	case AllGather:
		for i := range c.inplace {
			c.inplace[i] = 0xFF
		}
		n := len(c.send)
		copy(c.inplace[c.spec.Rank*n:], c.send)
	}
	return nil
}

func (c *cpuCase) RunInPlace(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (time.Duration, error) {
	if iters < 1 {
		return 0, fmt.Errorf("bench: %d iterations", iters)
	}
	if c.inplace == nil {
		if err := c.ResetInPlace(); err != nil {
			return 0, err
		}
	}
	opts := []detcoll.Option{detcoll.WithAlgorithm(alg), detcoll.WithAccumulate(acc)}
	dt, n := c.spec.DType, len(c.send)
	start := time.Now()
	for i := 0; i < iters; i++ {
		var err error
		switch c.spec.Op {
		case AllReduce:
			err = c.comm.AllReduce(ctx, c.inplace, c.inplace, dt, opts...)
		case AllGather:
			err = c.comm.AllGather(ctx, c.inplace[c.spec.Rank*n:(c.spec.Rank+1)*n], c.inplace, dt)
		}
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start) / time.Duration(iters), nil
}

func (c *cpuCase) InPlaceOutput() ([]byte, error) { return c.inplace, nil }

func (c *cpuCase) ResetOutput() error {
	for i := range c.recv {
		c.recv[i] = 0xFF
	}
	return nil
}

func (c *cpuCase) Output() ([]byte, error)       { return c.recv, nil }
func (c *cpuCase) NativeOutput() ([]byte, error) { return c.nrecv, nil }

func (c *cpuCase) ReleaseWorkspace() {
	c.comm.ReleaseWorkspace()
	c.peak = 0
}

func (c *cpuCase) Workspace() (retained, peak int) {
	retained = c.comm.Stats().WorkspaceBytes
	return retained, max(c.peak, retained)
}

func (c *cpuCase) NativePeak() int { return len(c.scratch) }

func (c *cpuCase) Close() error {
	c.send, c.recv, c.nrecv, c.scratch, c.inplace = nil, nil, nil, nil, nil
	return nil
}

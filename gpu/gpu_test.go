package gpu

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt/cudart"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/reduce"
)

// GPU tests: they skip, with the reason, where no CUDA driver or GPU is
// usable. Run them on a GPU machine with
//
//	CGO_ENABLED=1 go test -c -o bin/gpu.test ./gpu/
//	./bin/gpu.test -test.v -test.run GPU
//
// DETCOLL_GPU_ORDINAL picks the device (default 0). One GPU is enough: the
// W ranks are synthetic slabs on that GPU.

var (
	testDevOnce sync.Once
	testDev     *Device
	testDevErr  error
)

func gpuDevice(t *testing.T) *Device {
	t.Helper()
	if err := cuda.Available(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	testDevOnce.Do(func() {
		ord := 0
		if s := os.Getenv("DETCOLL_GPU_ORDINAL"); s != "" {
			fmt.Sscan(s, &ord)
		}
		testDev, testDevErr = OpenWith(cudart.Runtime, ord)
	})
	if testDevErr != nil {
		if n, err := cuda.DeviceCount(); err == nil && n == 0 {
			t.Skipf("no CUDA device: %v", testDevErr)
		}
		t.Fatalf("open GPU: %v", testDevErr)
	}
	return testDev
}

func gpuKernels(t *testing.T, d *Device) *ReduceKernels {
	t.Helper()
	start := time.Now()
	k, err := d.Kernels()
	if err != nil {
		t.Fatalf("reduce kernels: %v", err)
	}
	t.Logf("reduce kernels ready in %v", time.Since(start).Round(time.Millisecond))
	return k
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestGPUProbe(t *testing.T) {
	d := gpuDevice(t)
	info := cudart.Probe()
	t.Logf("probe:\n%s", info)
	if len(info.GPUs) == 0 || info.CUDAVersion == "" || info.CUDAError != "" {
		t.Fatalf("probe found no GPU: %+v", info)
	}
	if info.NVRTCVersion == "" {
		t.Errorf("no NVRTC: %s", info.NVRTCError)
	}
	if info.NCCLVersion == "" {
		t.Logf("no NCCL: %s", info.NCCLError)
	}
	ma, mi := d.ComputeCapability()
	t.Logf("device %d: %s, cc %d.%d, %d SMs; driver symbols: cuMemAlloc→%s cuEventElapsedTime→%s cuStreamBeginCapture→%s cuGraphInstantiate→%s",
		d.Ordinal(), d.Name(), ma, mi, d.Multiprocessors(), cuda.SymbolName("cuMemAlloc"), cuda.SymbolName("cuEventElapsedTime"),
		cuda.SymbolName("cuStreamBeginCapture"), cuda.SymbolName("cuGraphInstantiate"))
	k := gpuKernels(t, d)
	info2 := k.Info()
	t.Logf("module: %s from %s, NVRTC %s, options %v", info2.Arch, info2.From, info2.NVRTC, info2.Options)
	for _, f := range info2.Functions {
		t.Logf("  %-32s %3d registers, %4d bytes local", f.Name, f.Registers, f.LocalBytes)
	}
}

// devSlabs holds w slabs on the device, each at its own byte offset.
type devSlabs struct {
	bufs []cuda.DevicePtr
	ptrs []cuda.DevicePtr
}

func uploadSlabs(t *testing.T, d *Device, slabs [][]byte, offs []int) *devSlabs {
	t.Helper()
	s := &devSlabs{}
	for r, b := range slabs {
		p, err := d.Alloc(len(b) + 64)
		must(t, err)
		s.bufs = append(s.bufs, p)
		s.ptrs = append(s.ptrs, p.Add(offs[r]))
		must(t, d.CopyHtoD(s.ptrs[r], b))
	}
	return s
}

func (s *devSlabs) free(d *Device) {
	for _, p := range s.bufs {
		_ = d.Free(p)
	}
}

type layout struct {
	name   string
	inOff  func(r, sz int) int
	outOff func(sz int) int
}

var layouts = []layout{
	{"aligned", func(r, sz int) int { return 0 }, func(sz int) int { return 0 }},
	{"offset-1-element", func(r, sz int) int { return sz }, func(sz int) int { return sz }},            // vector body after a scalar head
	{"mixed-offsets", func(r, sz int) int { return (r % 3) * sz }, func(sz int) int { return 2 * sz }}, // all scalar
}

func TestGPUReduce(t *testing.T) {
	d := gpuDevice(t)
	k := gpuKernels(t, d)
	stream, err := d.NewStream()
	must(t, err)
	defer d.DestroyStream(stream)

	const maxW = 16
	counts := []int{0, 1, 3, 7, 1000003}
	accs := []reduce.Accumulate{reduce.Native, reduce.F32}
	for di, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64} {
		sz := dt.Size()
		maxCount := counts[len(counts)-1]
		t0 := time.Now()
		slabs := genSlabs(dt, maxW, maxCount, uint64(1000+di))
		sets := make([]*devSlabs, len(layouts))
		for li, l := range layouts {
			offs := make([]int, maxW)
			for r := range offs {
				offs[r] = l.inOff(r, sz)
			}
			sets[li] = uploadSlabs(t, d, slabs, offs)
		}
		outBuf, err := d.Alloc(maxCount*sz + 64)
		must(t, err)
		inPlaceBuf, err := d.Alloc(maxCount*sz + 64)
		must(t, err)
		got := make([]byte, maxCount*sz)
		launches, compared := 0, 0
		for _, acc := range accs {
			for w := 1; w <= maxW; w++ {
				for _, count := range counts {
					in := prefix(slabs, dt, w, count)
					nb := count * sz
					want := make([]byte, nb)
					must(t, oracle(dt, acc, in, want))
					for li, l := range layouts {
						out := outBuf.Add(l.outOff(sz))
						must(t, d.Memset(out, 0xA5, nb)) // poison: unwritten elements show
						must(t, k.Reduce(stream, dt, acc, out, sets[li].ptrs[:w], count))
						must(t, d.Synchronize(stream))
						launches++
						must(t, d.CopyDtoH(got[:nb], out))
						if msg := diff(dt, in, got[:nb], want); msg != "" {
							t.Fatalf("%v/%v W=%d count=%d layout=%s: %s", dt, acc, w, count, l.name, msg)
						}
						compared += count
						if li == 2 {
							continue
						}
						// In place: the output is input 0 (a copy of it).
						ptrs := append([]cuda.DevicePtr(nil), sets[li].ptrs[:w]...)
						ip := inPlaceBuf.Add(l.inOff(0, sz))
						must(t, d.CopyDtoD(ip, ptrs[0], nb))
						ptrs[0] = ip
						must(t, k.Reduce(stream, dt, acc, ip, ptrs, count))
						must(t, d.Synchronize(stream))
						launches++
						must(t, d.CopyDtoH(got[:nb], ip))
						if msg := diff(dt, in, got[:nb], want); msg != "" {
							t.Fatalf("%v/%v W=%d count=%d layout=%s in place: %s", dt, acc, w, count, l.name, msg)
						}
						compared += count
					}
				}
			}
		}
		for _, s := range sets {
			s.free(d)
		}
		must(t, d.Free(outBuf))
		must(t, d.Free(inPlaceBuf))
		t.Logf("%v: %d launches, %d elements compared bit for bit with reduce.Oracle (W=1..%d, counts %v, native+f32, %d layouts + in place) in %v",
			dt, launches, compared, maxW, counts, len(layouts), time.Since(t0).Round(time.Millisecond))
	}
}

func TestGPUReduceWide(t *testing.T) {
	d := gpuDevice(t)
	k := gpuKernels(t, d)
	stream, err := d.NewStream()
	must(t, err)
	defer d.DestroyStream(stream)
	const count = 4099
	ws := []int{1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 64, 100, 128, 129, 257, 1000}
	type mode struct {
		dt  dtype.DType
		acc reduce.Accumulate
	}
	modes := []mode{{dtype.BF16, reduce.Native}, {dtype.BF16, reduce.F32}, {dtype.FP16, reduce.Native},
		{dtype.FP16, reduce.F32}, {dtype.FP32, reduce.Native}, {dtype.FP64, reduce.Native}}
	for mi, m := range modes {
		sz := m.dt.Size()
		slabs := genSlabs(m.dt, 1000, count, uint64(2000+mi))
		strides := []int{(count*sz + 15) / 16 * 16, count*sz + sz} // vector path; scalar path
		for _, stride := range strides {
			ws0, err := d.Alloc(1000*stride + 64)
			must(t, err)
			for r := range slabs {
				must(t, d.CopyHtoD(ws0.Add(r*stride), slabs[r]))
			}
			out, err := d.Alloc(count*sz + 64)
			must(t, err)
			got := make([]byte, count*sz)
			for _, w := range ws {
				in := prefix(slabs, m.dt, w, count)
				want := make([]byte, count*sz)
				must(t, oracle(m.dt, m.acc, in, want))
				must(t, d.Memset(out, 0xA5, count*sz))
				must(t, k.ReduceStrided(stream, m.dt, m.acc, out, ws0, stride, w, count))
				must(t, d.Synchronize(stream))
				must(t, d.CopyDtoH(got, out))
				if msg := diff(m.dt, in, got, want); msg != "" {
					t.Fatalf("strided %v/%v W=%d stride=%d: %s", m.dt, m.acc, w, stride, msg)
				}
				if w <= MaxListInputs {
					ptrs := make([]cuda.DevicePtr, w)
					for r := range ptrs {
						ptrs[r] = ws0.Add(r * stride)
					}
					must(t, d.Memset(out, 0xA5, count*sz))
					must(t, k.Reduce(stream, m.dt, m.acc, out, ptrs, count))
					must(t, d.Synchronize(stream))
					must(t, d.CopyDtoH(got, out))
					if msg := diff(m.dt, in, got, want); msg != "" {
						t.Fatalf("list %v/%v W=%d stride=%d: %s", m.dt, m.acc, w, stride, msg)
					}
				}
			}
			must(t, d.Free(out))
			must(t, d.Free(ws0))
		}
	}
	t.Logf("strided and pointer-list forms, W in %v, count %d, 6 type/modes, 2 strides: all equal to reduce.Oracle", ws, count)
}

func TestGPUGraphReplay(t *testing.T) {
	d := gpuDevice(t)
	k := gpuKernels(t, d)
	stream, err := d.NewStream()
	must(t, err)
	defer d.DestroyStream(stream)
	const w, count = 8, 1 << 20
	dt := dtype.BF16
	sz := dt.Size()
	offs := make([]int, w)
	slabs := genSlabs(dt, w, count, 31)
	set := uploadSlabs(t, d, slabs, offs)
	defer set.free(d)
	out, err := d.Alloc(count * sz)
	must(t, err)
	defer d.Free(out)

	g, err := d.Capture(stream, func() error {
		return k.Reduce(stream, dt, reduce.Native, out, set.ptrs, count)
	})
	must(t, err)
	defer d.DestroyGraph(g)

	got := make([]byte, count*sz)
	for rep := 0; rep < 3; rep++ {
		if rep > 0 { // new inputs in the same buffers: the graph reads them afresh
			slabs = genSlabs(dt, w, count, uint64(31+rep))
			for r := range slabs {
				must(t, d.CopyHtoD(set.ptrs[r], slabs[r]))
			}
		}
		want := make([]byte, count*sz)
		must(t, oracle(dt, reduce.Native, slabs, want))
		must(t, d.Memset(out, 0xA5, count*sz))
		must(t, d.LaunchGraph(g, stream))
		must(t, d.Synchronize(stream))
		must(t, d.CopyDtoH(got, out))
		if msg := diff(dt, slabs, got, want); msg != "" {
			t.Fatalf("graph replay %d: %s", rep, msg)
		}
	}

	// Timing (informative): direct launches and graph replays, CUDA events.
	timeIt := func(name string, iters int, fn func() error) {
		var ms float32
		must(t, d.Do(func() error {
			e0, err := cuda.EventCreate(gpurt.EventDefault)
			if err != nil {
				return err
			}
			defer e0.Destroy()
			e1, err := cuda.EventCreate(gpurt.EventDefault)
			if err != nil {
				return err
			}
			defer e1.Destroy()
			for i := 0; i < 5; i++ { // warm-up
				if err := fn(); err != nil {
					return err
				}
			}
			if err := e0.Record(cuda.Stream(stream)); err != nil {
				return err
			}
			for i := 0; i < iters; i++ {
				if err := fn(); err != nil {
					return err
				}
			}
			if err := e1.Record(cuda.Stream(stream)); err != nil {
				return err
			}
			if err := e1.Synchronize(); err != nil {
				return err
			}
			ms, err = cuda.ElapsedTime(e0, e1)
			return err
		}))
		us := float64(ms) * 1000 / float64(iters)
		bytes := float64((w + 1) * count * sz)
		t.Logf("%s: bf16 W=%d count=%d: %.1f µs per reduce, %.0f GB/s (inputs+output)", name, w, count, us, bytes/us/1e3)
	}
	timeIt("direct launch", 50, func() error { return k.Reduce(stream, dt, reduce.Native, out, set.ptrs, count) })
	timeIt("graph replay", 50, func() error { return cuda.GraphExec(g).Launch(cuda.Stream(stream)) })
}

func TestGPUArgumentErrors(t *testing.T) {
	d := gpuDevice(t)
	k := gpuKernels(t, d)
	p, err := d.Alloc(4096)
	must(t, err)
	defer d.Free(p)
	bad := []struct {
		name string
		err  error
	}{
		{"nil output", k.Reduce(0, dtype.FP32, reduce.Native, 0, []cuda.DevicePtr{p}, 4)},
		{"nil input", k.Reduce(0, dtype.FP32, reduce.Native, p, []cuda.DevicePtr{p.Add(1024), 0}, 4)},
		{"no inputs", k.Reduce(0, dtype.FP32, reduce.Native, p, nil, 4)},
		{"negative count", k.Reduce(0, dtype.FP32, reduce.Native, p, []cuda.DevicePtr{p.Add(1024)}, -1)},
		{"bad dtype", k.Reduce(0, dtype.Invalid, reduce.Native, p, []cuda.DevicePtr{p.Add(1024)}, 4)},
		{"misaligned", k.Reduce(0, dtype.FP32, reduce.Native, p.Add(2), []cuda.DevicePtr{p.Add(1024)}, 4)},
		{"overlap", k.Reduce(0, dtype.FP32, reduce.Native, p, []cuda.DevicePtr{p.Add(4)}, 4)},
		{"strided w=0", k.ReduceStrided(0, dtype.FP32, reduce.Native, p, p.Add(1024), 16, 0, 4)},
	}
	for _, b := range bad {
		if !errors.Is(b.err, reduce.ErrArgs) {
			t.Errorf("%s: %v", b.name, b.err)
		}
	}
	// The context is still healthy afterwards.
	must(t, k.Reduce(0, dtype.FP32, reduce.Native, p, []cuda.DevicePtr{p.Add(1024)}, 4))
	must(t, d.Synchronize(0))
}

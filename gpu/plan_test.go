package gpu

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt/cudart"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/nvrtc"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/tree"
)

// counterExpr evaluates the kernel's schedule symbolically, step for step
// as dc_item and dc_block in kernels/reduce.cu: a binary counter over each
// aligned block of 16 inputs, and a second one over the block roots.
func counterExpr(w int) string {
	counter := func(vals []string) string {
		s := make([]string, 14)
		var c string
		for r, v := range vals {
			c = v
			k := 0
			for ; (r>>k)&1 == 1; k++ {
				c = "(" + s[k] + "+" + c + ")"
			}
			s[k] = c
		}
		have := false
		for k := 0; k < len(s); k++ {
			if (len(vals)>>k)&1 == 1 {
				if have {
					c = "(" + s[k] + "+" + c + ")"
				} else {
					c = s[k]
					have = true
				}
			}
		}
		return c
	}
	var roots []string
	for lo := 0; lo < w; lo += 16 {
		var blk []string
		for r := lo; r < min(lo+16, w); r++ {
			blk = append(blk, "r"+itoa(r))
		}
		roots = append(roots, counter(blk))
	}
	return counter(roots)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}

func TestCounterScheduleIsTheTree(t *testing.T) {
	ws := []int{4095, 4096, 4097, 65535, 65536}
	for w := 1; w <= 1100; w++ {
		ws = append(ws, w)
	}
	for _, w := range ws {
		if got, want := counterExpr(w), tree.Expr(w); got != want {
			t.Fatalf("W=%d: kernel schedule %.200s, tree %.200s", w, got, want)
		}
	}
}

func TestKernelNames(t *testing.T) {
	names := allKernelNames()
	if len(names) != 6 {
		t.Fatalf("%d kernels: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(ReduceSource, "DC_KERNEL("+strings.TrimPrefix(n, "detcoll_reduce_")+",") {
			t.Errorf("kernel %s is not defined in reduce.cu", n)
		}
	}
	cases := []struct {
		dt   dtype.DType
		acc  reduce.Accumulate
		w    int
		want string
	}{
		{dtype.BF16, reduce.Native, 8, "detcoll_reduce_bf16_native"},
		{dtype.BF16, reduce.F32, 17, "detcoll_reduce_bf16_f32"},
		{dtype.FP16, reduce.F32, 16, "detcoll_reduce_fp16_f32"},
		{dtype.FP16, reduce.Native, 16, "detcoll_reduce_fp16_native"},
		{dtype.FP32, reduce.F32, 200, "detcoll_reduce_fp32"},
		{dtype.FP64, reduce.Native, 65536, "detcoll_reduce_fp64"},
	}
	for _, c := range cases {
		if got, err := kernelName(c.dt, c.acc, c.w); err != nil || got != c.want {
			t.Errorf("kernelName(%v,%v,%d) = %q, %v", c.dt, c.acc, c.w, got, err)
		}
	}
	for _, bad := range []struct {
		dt  dtype.DType
		acc reduce.Accumulate
		w   int
	}{{dtype.Invalid, reduce.Native, 2}, {dtype.DType(9), reduce.Native, 2}, {dtype.FP32, reduce.Accumulate(7), 2}, {dtype.FP32, reduce.Native, 65537}} {
		if _, err := kernelName(bad.dt, bad.acc, bad.w); !errors.Is(err, reduce.ErrArgs) {
			t.Errorf("kernelName(%v,%v,%d) error %v", bad.dt, bad.acc, bad.w, err)
		}
	}
}

const fakeBase = cuda.DevicePtr(0x7f0000000000)

func TestPlanLayout(t *testing.T) {
	list := func(ptrs ...cuda.DevicePtr) *srcDesc { return &srcDesc{list: true, ptrs: ptrs} }
	b := fakeBase
	cases := []struct {
		name              string
		dt                dtype.DType
		out               cuda.DevicePtr
		src               *srcDesc
		w, count          int
		head, nvec, items int64
	}{
		{"aligned bf16", dtype.BF16, b, list(b+0x1000, b+0x2000), 2, 20, 0, 2, 6},
		{"same misalignment", dtype.BF16, b + 2, list(b+0x1002, b+0x2002), 2, 20, 7, 1, 13},
		{"mixed misalignment", dtype.BF16, b + 2, list(b+0x1004, b+0x2002), 2, 20, 20, 0, 20},
		{"head longer than count", dtype.FP32, b + 4, list(b + 0x1004), 1, 2, 2, 0, 2},
		{"fp64 odd", dtype.FP64, b + 8, list(b+0x1008, b+0x2008, b+0x3008), 3, 7, 1, 3, 4},
		{"strided aligned", dtype.FP32, b, &srcDesc{base: b + 0x10000, stride: 4096}, 5, 1000, 0, 250, 250},
		{"strided odd stride", dtype.FP32, b, &srcDesc{base: b + 0x10000, stride: 4 * 1001}, 5, 1000, 1000, 0, 1000},
		{"in place", dtype.FP16, b + 0x1000, list(b+0x1000, b+0x2000), 2, 9, 0, 1, 2},
		{"count zero", dtype.FP16, 0, list(0, 0), 2, 0, 0, 0, 0},
	}
	for _, c := range cases {
		p, err := makePlan(c.dt, reduce.Native, c.out, c.src, c.w, c.count)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if p.head != c.head || p.nvec != c.nvec || p.items != c.items {
			t.Errorf("%s: head %d nvec %d items %d, want %d %d %d", c.name, p.head, p.nvec, p.items, c.head, c.nvec, c.items)
		}
		if p.head+p.nvec*int64(16/c.dt.Size())+p.tail != int64(c.count) {
			t.Errorf("%s: plan does not cover count", c.name)
		}
	}
}

func TestPlanRejects(t *testing.T) {
	b := fakeBase
	list := func(ptrs ...cuda.DevicePtr) *srcDesc { return &srcDesc{list: true, ptrs: ptrs} }
	many := make([]cuda.DevicePtr, MaxListInputs+1)
	for i := range many {
		many[i] = b + cuda.DevicePtr(i*4096)
	}
	cases := []struct {
		name  string
		dt    dtype.DType
		acc   reduce.Accumulate
		out   cuda.DevicePtr
		src   *srcDesc
		w, n  int
		match string
	}{
		{"no inputs", dtype.FP32, reduce.Native, b, list(), 0, 4, "inputs"},
		{"negative count", dtype.FP32, reduce.Native, b, list(b + 64), 1, -1, "count"},
		{"nil output", dtype.FP32, reduce.Native, 0, list(b + 64), 1, 4, "nil output"},
		{"nil input", dtype.FP32, reduce.Native, b, list(b+4096, 0), 2, 4, "nil input pointer 1"},
		{"bad dtype", dtype.Invalid, reduce.Native, b, list(b + 64), 1, 4, "dtype"},
		{"bad mode", dtype.BF16, reduce.Accumulate(3), b, list(b + 64), 1, 4, "accumulate"},
		{"misaligned element", dtype.FP32, reduce.Native, b + 2, list(b + 4096), 1, 4, "aligned"},
		{"misaligned input", dtype.FP64, reduce.Native, b, list(b + 4100), 1, 4, "input 0"},
		{"partial overlap", dtype.FP32, reduce.Native, b, list(b + 8), 1, 4, "overlaps"},
		{"too many pointers", dtype.FP32, reduce.Native, b + 0x1000000, list(many...), len(many), 4, "input pointers"},
		{"negative stride", dtype.FP32, reduce.Native, b, &srcDesc{base: b + 4096, stride: -16}, 2, 4, "stride"},
		{"odd stride", dtype.FP32, reduce.Native, b, &srcDesc{base: b + 4096, stride: 6}, 2, 4, "stride"},
		{"strided overlap", dtype.FP32, reduce.Native, b + 4096 + 8, &srcDesc{base: b + 4096, stride: 4096}, 2, 4, "overlaps"},
		{"too many strided", dtype.FP32, reduce.Native, b, &srcDesc{base: b + 4096, stride: 16}, 65537, 4, "inputs"},
	}
	for _, c := range cases {
		_, err := makePlan(c.dt, c.acc, c.out, c.src, c.w, c.n)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, reduce.ErrArgs) || !strings.Contains(err.Error(), c.match) {
			t.Errorf("%s: error %q (want ErrArgs mentioning %q)", c.name, err, c.match)
		}
	}
	var k *ReduceKernels
	if err := k.Reduce(0, dtype.FP32, reduce.Native, b, []cuda.DevicePtr{b}, 1); !errors.Is(err, reduce.ErrArgs) {
		t.Errorf("nil kernels: %v", err)
	}
}

func TestPackSrc(t *testing.T) {
	var buf [srcParamBytes]byte
	packSrc(&buf, &srcDesc{list: true, ptrs: []cuda.DevicePtr{0x1122, 0x3344}})
	if buf[16] != 0x22 || buf[17] != 0x11 || buf[24] != 0x44 || buf[0] != 0 {
		t.Fatalf("list layout % x", buf[:32])
	}
	packSrc(&buf, &srcDesc{base: 0x55, stride: 0x100})
	if buf[0] != 0x55 || buf[9] != 0x01 || buf[16] != 0 {
		t.Fatalf("strided layout % x", buf[:32])
	}
	if gridFor(0, 10) != 1 || gridFor(256, 10) != 1 || gridFor(257, 10) != 2 || gridFor(1<<30, 10) != 10 {
		t.Fatal("gridFor")
	}
}

func TestProbeWithoutGPU(t *testing.T) {
	info := cudart.Probe()
	if cuda.Available() == nil {
		t.Skip("a CUDA driver is present; TestGPUProbe covers it")
	}
	if !strings.HasPrefix(info.CUDAError, "no CUDA driver: ") || len(info.GPUs) != 0 {
		t.Fatalf("probe without driver: %+v", info)
	}
	s := info.String()
	if !strings.Contains(s, "CUDA driver    unavailable: no CUDA driver") {
		t.Fatalf("report:\n%s", s)
	}
	if _, err := Open(0); !errors.Is(err, cuda.ErrUnavailable) {
		t.Fatalf("Open without driver: %v", err)
	}
}

// TestCompileReduceSource needs NVRTC only (no GPU): the embedded source
// compiles for Ampere and Hopper with the contract's options.
func TestCompileReduceSource(t *testing.T) {
	if err := nvrtc.Available(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	t.Setenv(nvrtc.CacheEnv, t.TempDir())
	for _, cc := range []int{80, 90} {
		start := time.Now()
		p, err := nvrtc.Build(ReduceSource, "detcoll_reduce.cu", cc)
		if err != nil {
			t.Fatalf("cc %d: %v", cc, err)
		}
		t.Logf("NVRTC %s, cc %d: %d-byte %s image in %v (cubin %v); log: %q", p.Version, cc, len(p.Image), p.From,
			time.Since(start).Round(time.Millisecond), p.CUBIN, p.Log)
	}
}

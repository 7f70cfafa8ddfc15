package gpu

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/cudaemu"
	"github.com/detcoll/detcoll/reduce"
)

// The kernel source is plain C++ apart from a few CUDA built-ins. With a
// host C++ compiler and cudaemu.Shim, the very same reduce.cu runs on the
// CPU, one emulated thread at a time, over an emulated device memory arena:
// its tree, conversions, vector/scalar split and indexing are then checked
// against reduce.Oracle on every machine, GPU or not. (Host IEEE arithmetic
// on x86-64/arm64 with -ffp-contract=off matches __fadd_rn/__dadd_rn with
// --ftz=false.)

// emuMain: argv = kernel list w count head nvec grid out base stride nptr ptr...
// (addresses are arena offsets); stdin = arena; stdout = arena afterwards.
const emuMain = `
typedef void (*kfn)(char*, const dc_src, int, int, long long, long long, long long);
struct kent { const char* name; kfn fn; };
static const kent kernels[] = { KERNEL_TABLE };
int main(int argc, char** argv) {
	if (argc < 12) { fprintf(stderr, "usage\n"); return 2; }
	kfn fn = 0;
	for (const kent& k : kernels) if (std::string(k.name) == argv[1]) fn = k.fn;
	if (!fn) { fprintf(stderr, "no kernel %s\n", argv[1]); return 2; }
	int list = atoi(argv[2]), w = atoi(argv[3]);
	long long count = atoll(argv[4]), head = atoll(argv[5]), nvec = atoll(argv[6]);
	unsigned grid = (unsigned)atoi(argv[7]);
	long long outOff = atoll(argv[8]), baseOff = atoll(argv[9]), stride = atoll(argv[10]);
	int nptr = atoi(argv[11]);
	std::vector<char> in;
	char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) in.insert(in.end(), buf, buf + n);
	char* arena = (char*)aligned_alloc(64, (in.size() + 63) / 64 * 64 + 64);
	memcpy(arena, in.data(), in.size());
	dc_src src;
	memset(&src, 0, sizeof src);
	src.base = arena + baseOff;
	src.stride = stride;
	for (int i = 0; i < nptr; i++) src.ptr[i] = arena + atoll(argv[12 + i]);
	gridDim.x = grid; gridDim.y = gridDim.z = 1;
	blockDim.x = 256; blockDim.y = blockDim.z = 1;
	for (unsigned b = 0; b < grid; b++)
		for (unsigned t = 0; t < 256; t++) {
			blockIdx.x = b; threadIdx.x = t;
			fn(arena + outOff, src, list, w, count, head, nvec);
		}
	fwrite(arena, 1, in.size(), stdout);
	return 0;
}
`

func buildEmulator(t *testing.T) string {
	t.Helper()
	var table []string
	for _, n := range allKernelNames() {
		table = append(table, fmt.Sprintf("{%q, %s}", n, n))
	}
	return cudaemu.Build(t, "reduce-emu", cudaemu.Shim+ReduceSource+strings.Replace(emuMain, "KERNEL_TABLE", strings.Join(table, ", "), 1))
}

// emuCase places w slabs (and the output) in an arena at the given element
// offsets, runs the emulated kernel and returns the output bytes.
type emuCase struct {
	dt       dtype.DType
	acc      reduce.Accumulate
	w, count int
	strided  bool
	stride   int   // bytes, strided only
	inOff    []int // byte offset of each input from a 64-aligned slot (list)
	baseOff  int   // strided: byte offset of the base from a 64-aligned slot
	outOff   int   // byte offset of the output from a 64-aligned slot
	inPlace  int   // >= 0: out aliases input inPlace (list only)
}

func runEmu(t *testing.T, bin string, c emuCase, slabs [][]byte) []byte {
	t.Helper()
	sz := c.dt.Size()
	nb := c.count * sz
	slot := (nb + 64 + 63) / 64 * 64
	var arena []byte
	var ptrs []cuda.DevicePtr
	src := &srcDesc{list: !c.strided}
	var outAddr int
	if c.strided {
		base := c.baseOff
		arena = make([]byte, base+c.w*c.stride+slot+64)
		for r := 0; r < c.w; r++ {
			copy(arena[base+r*c.stride:], slabs[r])
		}
		src.base = fakeBase + cuda.DevicePtr(base)
		src.stride = int64(c.stride)
		outAddr = (len(arena)-slot)/64*64 + c.outOff
	} else {
		arena = make([]byte, (c.w+1)*slot)
		for r := 0; r < c.w; r++ {
			off := r*slot + c.inOff[r]
			copy(arena[off:], slabs[r])
			ptrs = append(ptrs, fakeBase+cuda.DevicePtr(off))
		}
		src.ptrs = ptrs
		outAddr = c.w*slot + c.outOff
		if c.inPlace >= 0 {
			outAddr = int(ptrs[c.inPlace] - fakeBase)
		}
	}
	// Poison the output region (when separate) to catch unwritten elements.
	if c.strided || c.inPlace < 0 {
		for i := 0; i < nb; i++ {
			arena[outAddr+i] = 0xA5
		}
	}
	p, err := makePlan(c.dt, c.acc, fakeBase+cuda.DevicePtr(outAddr), src, c.w, c.count)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	grid := gridFor(p.items, 3) // a small grid: exercises the grid-stride loop
	list := 0
	if !c.strided {
		list = 1
	}
	args := []string{p.kernel, fmt.Sprint(list), fmt.Sprint(c.w), fmt.Sprint(c.count), fmt.Sprint(p.head), fmt.Sprint(p.nvec),
		fmt.Sprint(grid), fmt.Sprint(outAddr), fmt.Sprint(int64(src.base - fakeBase)), fmt.Sprint(src.stride), fmt.Sprint(len(ptrs))}
	if c.strided {
		args[8] = fmt.Sprint(c.baseOff)
	}
	for _, q := range ptrs {
		args = append(args, fmt.Sprint(int64(q-fakeBase)))
	}
	if p.items == 0 {
		return arena[outAddr : outAddr+nb]
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(arena)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("emulator: %v: %s", err, stderr.String())
	}
	res := stdout.Bytes()
	if len(res) != len(arena) {
		t.Fatalf("emulator returned %d bytes, want %d", len(res), len(arena))
	}
	// Nothing outside the output may change (except the aliased input, which is the output).
	for i := range arena {
		if (i < outAddr || i >= outAddr+nb) && res[i] != arena[i] {
			t.Fatalf("byte %d outside the output changed", i)
		}
	}
	return res[outAddr : outAddr+nb]
}

func TestKernelSourceOnHost(t *testing.T) {
	bin := buildEmulator(t)
	type mode struct {
		dt  dtype.DType
		acc reduce.Accumulate
	}
	modes := []mode{{dtype.BF16, reduce.Native}, {dtype.BF16, reduce.F32}, {dtype.FP16, reduce.Native},
		{dtype.FP16, reduce.F32}, {dtype.FP32, reduce.Native}, {dtype.FP64, reduce.F32}}
	counts := []int{0, 1, 3, 7, 8, 17, 1001}
	if testing.Short() {
		counts = []int{1, 7, 1001}
	}
	for mi, m := range modes {
		sz := m.dt.Size()
		slabs := genSlabs(m.dt, 300, 1001, uint64(100+mi))
		for _, w := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 31, 32, 33, 48, 64, 100, 128, 130, 300} {
			for _, count := range counts {
				in := prefix(slabs, m.dt, w, count)
				want := make([]byte, count*sz)
				if err := oracle(m.dt, m.acc, in, want); err != nil {
					t.Fatal(err)
				}
				var cases []emuCase
				if w <= MaxListInputs {
					aligned := make([]int, w)
					same := make([]int, w)
					mixed := make([]int, w)
					for r := range same {
						same[r] = sz
						mixed[r] = (r % 3) * sz
					}
					cases = append(cases,
						emuCase{dt: m.dt, acc: m.acc, w: w, count: count, inOff: aligned, inPlace: -1},
						emuCase{dt: m.dt, acc: m.acc, w: w, count: count, inOff: same, outOff: sz, inPlace: -1},
						emuCase{dt: m.dt, acc: m.acc, w: w, count: count, inOff: mixed, outOff: 2 * sz, inPlace: -1},
						emuCase{dt: m.dt, acc: m.acc, w: w, count: count, inOff: same, inPlace: w - 1})
				}
				nb := count * sz
				cases = append(cases,
					emuCase{dt: m.dt, acc: m.acc, w: w, count: count, strided: true, stride: (nb + 15) / 16 * 16, inPlace: -1},
					emuCase{dt: m.dt, acc: m.acc, w: w, count: count, strided: true, stride: nb + sz, baseOff: sz, outOff: sz, inPlace: -1})
				for _, c := range cases {
					got := runEmu(t, bin, c, in)
					if d := diff(m.dt, in, got, want); d != "" {
						t.Fatalf("%v/%v W=%d count=%d strided=%v inOff=%v outOff=%d inPlace=%d: %s",
							m.dt, m.acc, w, count, c.strided, c.inOff, c.outOff, c.inPlace, d)
					}
				}
			}
		}
	}
}

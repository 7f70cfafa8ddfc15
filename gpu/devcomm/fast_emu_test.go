package devcomm

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/internal/cudaemu"
	"github.com/detcoll/detcoll/internal/gputest"
	"github.com/detcoll/detcoll/reduce"
)

// The fast kernels are plain C++ apart from a few CUDA built-ins, like
// gpu/kernels/reduce.cu they are appended to: compiled by the host C++
// compiler with cudaemu.Shim, the very same source runs on the CPU, one
// emulated thread at a time, and is compared with reduce.Oracle on every
// machine, GPU or not. (Host IEEE arithmetic with -ffp-contract=off matches
// __fadd_rn/__dadd_rn with --ftz=false.)

// argv: kernel count head nvec grid out nptr ptr... (arena offsets);
// stdin = arena; stdout = arena afterwards.
const fastEmuMain = `
typedef void (*kfn)(char*, const dc_fsrc, long long, long long, long long);
struct kent { const char* name; kfn fn; };
static const kent kernels[] = { KERNEL_TABLE };
int main(int argc, char** argv) {
	if (argc < 8) { fprintf(stderr, "usage\n"); return 2; }
	kfn fn = 0;
	for (const kent& k : kernels) if (std::string(k.name) == argv[1]) fn = k.fn;
	if (!fn) { fprintf(stderr, "no kernel %s\n", argv[1]); return 2; }
	long long count = atoll(argv[2]), head = atoll(argv[3]), nvec = atoll(argv[4]);
	unsigned grid = (unsigned)atoi(argv[5]);
	long long outOff = atoll(argv[6]);
	int nptr = atoi(argv[7]);
	std::vector<char> in;
	char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) in.insert(in.end(), buf, buf + n);
	char* arena = (char*)aligned_alloc(64, (in.size() + 63) / 64 * 64 + 64);
	memcpy(arena, in.data(), in.size());
	dc_fsrc src;
	memset(&src, 0, sizeof src);
	for (int i = 0; i < nptr; i++) src.p[i] = arena + atoll(argv[8 + i]);
	gridDim.x = grid; gridDim.y = gridDim.z = 1;
	blockDim.x = BLOCK; blockDim.y = blockDim.z = 1;
	for (unsigned b = 0; b < grid; b++)
		for (unsigned t = 0; t < BLOCK; t++) {
			blockIdx.x = b; threadIdx.x = t;
			fn(arena + outOff, src, count, head, nvec);
		}
	fwrite(arena, 1, in.size(), stdout);
	return 0;
}
`

func buildFastEmulator(t *testing.T) string {
	t.Helper()
	var table []string
	for _, n := range fastNames() {
		table = append(table, fmt.Sprintf("{%q, %s}", n, n))
	}
	main := strings.Replace(fastEmuMain, "KERNEL_TABLE", strings.Join(table, ", "), 1)
	main = strings.ReplaceAll(main, "BLOCK", fmt.Sprint(fastBlock))
	return cudaemu.Build(t, "fast-emu", cudaemu.Shim+gpu.ReduceSource+"\n"+fastSource+main)
}

const emuBase = DevicePtr(0x7f0000000000) // a 256-aligned fake device address

// runFastEmu lays the inputs out at the given byte offsets from 64-aligned
// slots, plans and runs the fast kernel on the host, and returns the output.
func runFastEmu(t *testing.T, bin string, dt dtype.DType, acc detcoll.Accumulate, in [][]byte, count int, inOff []int, outOff, inPlace, grid int) []byte {
	t.Helper()
	w, sz := len(in), dt.Size()
	nb := count * sz
	slot := (nb + 64 + 63) / 64 * 64
	arena := make([]byte, (w+1)*slot)
	ptrs := make([]DevicePtr, w)
	for r := range in {
		off := r*slot + inOff[r]
		copy(arena[off:], in[r])
		ptrs[r] = emuBase.Add(off)
	}
	outAddr := w*slot + outOff
	if inPlace >= 0 {
		outAddr = int(ptrs[inPlace] - emuBase)
	} else {
		for i := 0; i < nb; i++ {
			arena[outAddr+i] = 0xA5
		}
	}
	head, nvec, ok := fastPlan(dt, emuBase.Add(outAddr), ptrs, count)
	if !ok {
		t.Fatalf("fastPlan refused W=%d", w)
	}
	if count == 0 {
		return nil
	}
	args := []string{fastName(dt, acc, w), fmt.Sprint(count), fmt.Sprint(head), fmt.Sprint(nvec), fmt.Sprint(grid), fmt.Sprint(outAddr), fmt.Sprint(w)}
	for _, p := range ptrs {
		args = append(args, fmt.Sprint(int64(p-emuBase)))
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
	for i := range arena {
		if (i < outAddr || i >= outAddr+nb) && res[i] != arena[i] {
			t.Fatalf("byte %d outside the output changed", i)
		}
	}
	return res[outAddr : outAddr+nb]
}

// TestFastKernelsOnHost: every fast kernel equals reduce.Oracle bit for bit
// (random, special and cancelling values), aligned (vector body), offset by
// one element (scalar head, then vectors), mixed offsets (all scalar), in
// place, with a grid small enough to loop.
func TestFastKernelsOnHost(t *testing.T) {
	bin := buildFastEmulator(t)
	type mode struct {
		dt  dtype.DType
		acc detcoll.Accumulate
	}
	modes := []mode{{dtype.BF16, detcoll.AccumulateNative}, {dtype.BF16, detcoll.AccumulateF32}, {dtype.FP16, detcoll.AccumulateNative},
		{dtype.FP16, detcoll.AccumulateF32}, {dtype.FP32, detcoll.AccumulateNative}, {dtype.FP64, detcoll.AccumulateNative}}
	counts := []int{1, 3, 8, 17, 1001, 4099}
	if testing.Short() {
		counts = []int{7, 1001}
	}
	for mi, m := range modes {
		sz := m.dt.Size()
		for _, w := range []int{2, 4, 8} {
			for ci, count := range counts {
				in := make([][]byte, w)
				for r := range in {
					in[r] = make([]byte, count*sz)
					gputest.FillInput(in[r], m.dt, uint64(1000*mi+ci), r)
					if r%2 == 1 && ci%2 == 0 { // cancellation: x + (-x) and near misses
						for i := 0; i+sz <= len(in[r]); i += 3 * sz {
							copy(in[r][i:i+sz], in[r-1][i:i+sz])
							in[r][i+sz-1] ^= 0x80
						}
					}
				}
				want := make([]byte, count*sz)
				if err := reduce.Oracle(m.dt, m.acc, in, want); err != nil {
					t.Fatal(err)
				}
				aligned := make([]int, w)
				same := make([]int, w)
				mixed := make([]int, w)
				for r := range same {
					same[r] = sz
					mixed[r] = (r % 3) * sz
				}
				cases := []struct {
					name          string
					inOff         []int
					outOff, place int
					grid          int
				}{
					{"aligned", aligned, 0, -1, 2},
					{"aligned, one block", aligned, 0, -1, 1},
					{"offset one element", same, sz, -1, 2},
					{"mixed offsets", mixed, 2 * sz, -1, 3},
					{"in place", same, 0, w - 1, 2},
				}
				for _, c := range cases {
					got := runFastEmu(t, bin, m.dt, m.acc, in, count, c.inOff, c.outOff, c.place, c.grid)
					if !bytes.Equal(got, want) {
						i := 0
						for i < len(got) && got[i] == want[i] {
							i++
						}
						e := i / sz
						t.Fatalf("%v/%v W=%d count=%d %s: element %d differs: got %x want %x", m.dt, m.acc, w, count, c.name, e,
							got[e*sz:(e+1)*sz], want[e*sz:(e+1)*sz])
					}
				}
			}
		}
	}
}

func TestFastPlan(t *testing.T) {
	ptrs := []DevicePtr{0x1000, 0x2000}
	if h, n, ok := fastPlan(dtype.BF16, 0x3000, ptrs, 100); !ok || h != 0 || n != 12 {
		t.Fatalf("aligned: %d %d %v", h, n, ok)
	}
	if h, n, ok := fastPlan(dtype.BF16, 0x3002, []DevicePtr{0x1002, 0x2002}, 100); !ok || h != 7 || n != 11 {
		t.Fatalf("offset: %d %d %v", h, n, ok)
	}
	if h, n, ok := fastPlan(dtype.BF16, 0x3002, []DevicePtr{0x1000, 0x2002}, 100); !ok || h != 100 || n != 0 {
		t.Fatalf("mixed: %d %d %v", h, n, ok)
	}
	if _, _, ok := fastPlan(dtype.FP32, 0x3000, []DevicePtr{0x1000, 0x2000, 0x3000}, 5); ok {
		t.Fatal("W=3 has no fast kernel")
	}
	if _, _, ok := fastPlan(dtype.FP32, 0x3000, []DevicePtr{0x1002, 0x2000}, 5); ok {
		t.Fatal("a misaligned input was accepted")
	}
	if len(fastNames()) != 18 {
		t.Fatalf("%d fast kernels", len(fastNames()))
	}
}

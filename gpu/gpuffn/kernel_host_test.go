package gpuffn

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/cudaemu"
	"github.com/detcoll/detcoll/parallel"
)

// kernels/swiglu.cu is plain C++ apart from a few CUDA built-ins. With a
// host C++ compiler and cudaemu.Shim the very same source runs on the
// CPU, every emulated thread of the grid in turn: its formulas, conversions
// and block/stride indexing are checked bit for bit against package
// parallel's host formulas on every machine. (Host IEEE binary32 arithmetic
// on x86-64/arm64 with -ffp-contract=off is what __fmul_rn, __fadd_rn,
// __fsub_rn and __fdiv_rn compute with --ftz=false.)

// argv: mode (fwd|bwd|exp|f32) [per_block blocks stride grid]; stdin: the
// arrays (fwd: a g u, bwd: dg du g u da, each blocks*stride bf16; exp:
// float32s; f32: float32 triples g u da); stdout: the same arrays
// afterwards (exp: Exp32, Sigmoid32 and SiLU32 of each input; f32: the
// activation and both gradients before rounding, per triple).
const swigluMain = `
int main(int argc, char** argv) {
	std::vector<char> in;
	char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) in.insert(in.end(), buf, buf + n);
	std::string mode = argv[1];
	if (mode == "exp") {
		size_t k = in.size() / 4;
		std::vector<float> out(3 * k);
		for (size_t i = 0; i < k; i++) {
			float x;
			memcpy(&x, &in[4 * i], 4);
			out[i] = dc_exp32(x);
			out[k + i] = dc_sigmoid32(x);
			out[2 * k + i] = dc_silu32(x);
		}
		fwrite(out.data(), 4, out.size(), stdout);
		return 0;
	}
	if (mode == "f32") {
		size_t k = in.size() / 12;
		std::vector<float> out(3 * k);
		for (size_t i = 0; i < k; i++) {
			float v[3];
			memcpy(v, &in[12 * i], 12);
			out[3 * i] = dc_swiglu(v[0], v[1]);
			dc_swiglu_grad(v[0], v[1], v[2], &out[3 * i + 1], &out[3 * i + 2]);
		}
		fwrite(out.data(), 4, out.size(), stdout);
		return 0;
	}
	long long per = atoll(argv[2]), blocks = atoll(argv[3]), stride = atoll(argv[4]);
	unsigned grid = (unsigned)atoi(argv[5]);
	long long len = blocks * stride;
	dc_u16* p = (dc_u16*)in.data();
	gridDim.x = grid; gridDim.y = gridDim.z = 1;
	blockDim.x = 256; blockDim.y = blockDim.z = 1;
	for (unsigned b = 0; b < grid; b++)
		for (unsigned t = 0; t < 256; t++) {
			blockIdx.x = b; threadIdx.x = t;
			if (mode == "fwd") detcoll_swiglu_fwd_bf16(p, p + len, p + 2 * len, per, blocks, stride);
			else detcoll_swiglu_bwd_bf16(p, p + len, p + 2 * len, p + 3 * len, p + 4 * len, per, blocks, stride);
		}
	fwrite(in.data(), 1, in.size(), stdout);
	return 0;
}
`

func buildSwiGLUEmulator(t *testing.T) string {
	t.Helper()
	return cudaemu.Build(t, "swiglu-emu", cudaemu.Shim+SwiGLUSource+swigluMain)
}

func runEmu(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(buildSwiGLUEmulator(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("emulator %v: %v\n%s", args, err, errb.String())
	}
	return out.Bytes()
}

// bitsEqual32 compares float32 bits, NaNs equal to NaNs (both sides
// return their input's payload).
func bitsEqual32(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestKernelExpOnHost: the kernel's Exp32, Sigmoid32 and SiLU32 equal
// package parallel's bit for bit on random float32 bit patterns, every
// bf16 value, the range edges and the specials.
func TestKernelExpOnHost(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var xs []float32
	for i := 0; i < 1<<16; i++ {
		xs = append(xs, dtype.BF16ToFloat32(uint16(i)))
	}
	for i := 0; i < 200000; i++ {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
		xs = append(xs, float32(rng.NormFloat64()*30))
	}
	for _, e := range []float32{88.72283, 88.72284, 88.7229, -103.972, -103.97208, -103.9721, -87.3, -87.33655, -126 * 0.6931472,
		0, float32(math.Copysign(0, -1)), 1e-45, -1e-45, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		xs = append(xs, e, math.Nextafter32(e, 0), math.Nextafter32(e, float32(math.Inf(1))))
	}
	in := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(x))
	}
	out := runEmu(t, in, "exp")
	k := len(xs)
	if len(out) != 12*k {
		t.Fatalf("emulator returned %d bytes, want %d", len(out), 12*k)
	}
	get := func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])) }
	bad := 0
	for i, x := range xs {
		for f, want := range []float32{parallel.Exp32(x), parallel.Sigmoid32(x), parallel.SiLU32(x)} {
			if got := get(f*k + i); !bitsEqual32(got, want) {
				if bad < 10 {
					t.Errorf("%s(%g = %#08x): kernel %g (%#08x), host %g (%#08x)", []string{"Exp32", "Sigmoid32", "SiLU32"}[f],
						x, math.Float32bits(x), got, math.Float32bits(got), want, math.Float32bits(want))
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d values differ", bad, 3*k)
	}
	t.Logf("%d inputs: Exp32, Sigmoid32, SiLU32 bit-identical to package parallel", k)
}

// TestKernelSwiGLUOnHost: both kernels over every bf16 value of g (with
// random u and da), laid out in blocks with padded strides and run on a
// grid smaller than the work (the grid-stride loop), equal the host
// formulas rounded to bf16; the padding between blocks is not touched.
func TestKernelSwiGLUOnHost(t *testing.T) {
	const per, blocks, stride, grid = 1 << 14, 4, 1<<14 + 96, 7
	const n = blocks * stride
	rng := rand.New(rand.NewPCG(3, 4))
	g, u, da := make([]uint16, n), make([]uint16, n), make([]uint16, n)
	for i := range g {
		g[i] = uint16(i) // padding gets values too
		u[i] = dtype.Float32ToBF16(float32(rng.NormFloat64() * 2))
		da[i] = dtype.Float32ToBF16(float32(rng.NormFloat64()))
	}
	// every bf16 pattern lands on a real element
	for b := 0; b < blocks; b++ {
		for k := 0; k < per; k++ {
			g[b*stride+k] = uint16(b*per + k)
		}
	}
	const sentinel = 0x1234
	pack := func(as ...[]uint16) []byte {
		out := make([]byte, 0, 2*n*len(as))
		for _, a := range as {
			for _, v := range a {
				out = binary.LittleEndian.AppendUint16(out, v)
			}
		}
		return out
	}
	fill := func() []uint16 {
		s := make([]uint16, n)
		for i := range s {
			s[i] = sentinel
		}
		return s
	}
	unpack := func(b []byte, k int) []uint16 {
		out := make([]uint16, n)
		for i := range out {
			out[i] = binary.LittleEndian.Uint16(b[2*(k*n+i):])
		}
		return out
	}
	args := []string{fmt.Sprint(per), fmt.Sprint(blocks), fmt.Sprint(stride), fmt.Sprint(grid)}
	fwd := runEmu(t, pack(fill(), g, u), append([]string{"fwd"}, args...)...)
	bwd := runEmu(t, pack(fill(), fill(), g, u, da), append([]string{"bwd"}, args...)...)
	a, dg, du := unpack(fwd, 0), unpack(bwd, 0), unpack(bwd, 1)
	bad := 0
	check := func(what string, i int, got uint16, want float32) {
		if w := dtype.Float32ToBF16(want); got != w {
			if bad < 10 {
				t.Errorf("%s at %d (g %#04x u %#04x da %#04x): kernel %#04x, host %#04x", what, i, g[i], u[i], da[i], got, w)
			}
			bad++
		}
	}
	for b := 0; b < blocks; b++ {
		for i := b * stride; i < (b+1)*stride; i++ {
			if i-b*stride >= per {
				if a[i] != sentinel || dg[i] != sentinel || du[i] != sentinel {
					t.Fatalf("padding element %d was written", i)
				}
				continue
			}
			G, U, DA := dtype.BF16ToFloat32(g[i]), dtype.BF16ToFloat32(u[i]), dtype.BF16ToFloat32(da[i])
			check("a", i, a[i], hostSwiGLU(G, U))
			wg, wu := hostSwiGLUGrad(G, U, DA)
			check("dg", i, dg[i], wg)
			check("du", i, du[i], wu)
		}
	}
	if bad > 0 {
		t.Fatalf("%d values differ", bad)
	}
}

// TestKernelFormulasFloat32OnHost: the activation and its gradients before
// the rounding to bf16 (where a reassociated product would hide) equal the
// host formulas bit for bit.
func TestKernelFormulasFloat32OnHost(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const k = 300000
	in := make([]byte, 0, 12*k)
	vals := make([][3]float32, k)
	for i := range vals {
		g := float32(rng.NormFloat64() * 4)
		if i%7 == 0 {
			g = math.Float32frombits(rng.Uint32())
		}
		vals[i] = [3]float32{g, float32(rng.NormFloat64() * 2), float32(rng.NormFloat64())}
		for _, v := range vals[i] {
			in = binary.LittleEndian.AppendUint32(in, math.Float32bits(v))
		}
	}
	out := runEmu(t, in, "f32")
	if len(out) != 12*k {
		t.Fatalf("emulator returned %d bytes", len(out))
	}
	bad := 0
	for i, v := range vals {
		wg, wu := hostSwiGLUGrad(v[0], v[1], v[2])
		for j, want := range []float32{hostSwiGLU(v[0], v[1]), wg, wu} {
			got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*(3*i+j):]))
			if !bitsEqual32(got, want) {
				if bad < 10 {
					t.Errorf("%s(g %g, u %g, da %g): kernel %g (%#08x), host %g (%#08x)", []string{"a", "dg", "du"}[j],
						v[0], v[1], v[2], got, math.Float32bits(got), want, math.Float32bits(want))
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d values differ", bad, 3*k)
	}
}

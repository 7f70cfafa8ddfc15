package gpuffn

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/internal/cublas"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/gputest"
	"github.com/detcoll/detcoll/internal/nvrtc"
	"github.com/detcoll/detcoll/parallel"
)

// GPU tests. They run as every rank of a launched job, one GPU per rank:
//
//	CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
//	CGO_ENABLED=1 go test -c -o bin/gpuffn.test ./gpu/gpuffn
//	OUT=$PWD/out bin/detcoll launch --standalone --nproc-per-node 2 -- bin/gpuffn.test -test.run GPU -test.v
//
// TP = W (the world size, 1, 2, 4 or 8) runs over the job's GPUs; TP = 1
// runs on every rank's own GPU with no communication; the results are
// compared bit for bit. They skip, saying why, when the process was not
// started by a launcher or no GPU, CUDA driver, NVRTC, NCCL or cuBLAS is
// usable. Every rank runs the same steps in the same order; after each step
// the ranks exchange their status over the host communicator, so a failure
// on one rank fails the test on every rank instead of leaving the others
// waiting. Rank 0 writes gpuffn-<shape>.json and .md to $OUT (when set).

var (
	setupOnce sync.Once
	testJob   *cluster.Job
	testComm  *devcomm.Comm
	setupErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testComm != nil {
		if err := testComm.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the device communicator:", err)
			code = 1
		}
	}
	if testJob != nil {
		testJob.Close()
	}
	os.Exit(code)
}

func gpuSetup(t *testing.T) (*cluster.Job, *devcomm.Comm) {
	t.Helper()
	gputest.RequireLaunchedGPU(t, "gpuffn.test", true)
	if err := cublas.Available(); err != nil {
		t.Skipf("no cuBLAS: %v (set %s to the library)", err, cublas.LibraryEnv)
	}
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if testJob, setupErr = cluster.Init(ctx, cluster.Options{}); setupErr != nil {
			return
		}
		start := time.Now()
		testComm, setupErr = devcomm.New(ctx, testJob)
		if setupErr == nil {
			ma, mi, pa, _ := cublas.Version()
			fmt.Printf("rank %d of %d: GPU %d %s, NCCL %s, cuBLAS %d.%d.%d (%s), NVRTC %s, communicator ready in %v\n",
				testComm.Rank(), testComm.Size(), testComm.Device().Ordinal(), testComm.Device().Name(), testComm.NCCLVersion(),
				ma, mi, pa, cublas.LibraryPath(), nvrtc.VersionString(), time.Since(start).Round(time.Millisecond))
		}
	})
	if setupErr != nil {
		t.Fatalf("setting up the job and the device communicator: %v", setupErr)
	}
	return testJob, testComm
}

// tlog is what the shared test flow needs of a *testing.T (the emulated
// flow gives each goroutine rank its own).
type tlog interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// testEnv is one rank's view of the job: its host communicator, and how
// to make layers at TP = 1 (on its own device) and at TP = W.
type testEnv struct {
	host     *detcoll.Comm
	w, rank  int
	device   deviceInfo
	versions map[string]string
	layer    func(tpW bool, cfg Config) (*Layer, error)
}

func gpuEnv(job *cluster.Job, comm *devcomm.Comm) *testEnv {
	dev := comm.Device()
	host, _ := os.Hostname()
	major, minor := dev.ComputeCapability()
	return &testEnv{
		host: job.Comm, w: comm.Size(), rank: comm.Rank(),
		device: deviceInfo{Rank: comm.Rank(), Host: host, Ordinal: dev.Ordinal(), Name: dev.Name(),
			CC: fmt.Sprintf("%d.%d", major, minor), SMs: dev.Multiprocessors()},
		versions: map[string]string{"cublas": cublas.VersionString(), "cublas_path": cublas.LibraryPath(), "nccl": comm.NCCLVersion(),
			"nvrtc": nvrtc.VersionString(), "cuda_driver": driverVersion(), "git_commit": os.Getenv("DETCOLL_GIT_COMMIT")},
		layer: func(tpW bool, cfg Config) (*Layer, error) {
			if tpW {
				return New(nil, comm, cfg)
			}
			return New(dev, nil, cfg)
		},
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// agree exchanges every rank's status over the host communicator: nil on
// every rank when all succeeded, else (on every rank) an error naming each
// failing rank and its error.
func agree(ctx context.Context, c *detcoll.Comm, what string, err error) error {
	const slot = 2048
	mine := make([]byte, slot)
	if err != nil {
		mine[0] = 1
		copy(mine[1:slot-1], err.Error())
	}
	all := make([]byte, slot*c.Size())
	if gerr := c.AllGather(ctx, mine, all, dtype.Byte); gerr != nil {
		return fmt.Errorf("%s: exchanging the ranks' status: %w (this rank: %v)", what, gerr, err)
	}
	var msgs []string
	for r := 0; r < c.Size(); r++ {
		s := all[r*slot : (r+1)*slot]
		if s[0] == 1 {
			msg := s[1:]
			if i := strings.IndexByte(string(msg), 0); i >= 0 {
				msg = msg[:i]
			}
			msgs = append(msgs, fmt.Sprintf("[rank %d] %s", r, msg))
		}
	}
	if msgs != nil {
		return fmt.Errorf("%s failed: %s", what, strings.Join(msgs, "; "))
	}
	return nil
}

// allGatherJSON gathers every rank's v (JSON, at most 1 MiB) into out, a
// pointer to a slice of the same type.
func allGatherJSON(ctx context.Context, c *detcoll.Comm, v any, out any) error {
	const slot = 1 << 20
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	mine := make([]byte, slot)
	ok := len(b) <= slot-4
	if ok {
		binary.LittleEndian.PutUint32(mine, uint32(len(b)))
		copy(mine[4:], b)
	}
	all := make([]byte, slot*c.Size())
	if err := c.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("allGatherJSON: %d bytes do not fit", len(b))
	}
	parts := make([]json.RawMessage, c.Size())
	for r := range parts {
		s := all[r*slot:]
		n := binary.LittleEndian.Uint32(s)
		if n == 0 || int(n) > slot-4 {
			return fmt.Errorf("allGatherJSON: rank %d sent nothing", r)
		}
		parts[r] = json.RawMessage(s[4 : 4+n])
	}
	joined, _ := json.Marshal(parts)
	return json.Unmarshal(joined, out)
}

func digest(m *parallel.Matrix) string {
	if m == nil {
		return "-"
	}
	s := sha256.Sum256(m.Bytes())
	return hex.EncodeToString(s[:12])
}

// ---- shapes ----

type shapeSpec struct {
	name          string
	h, i, t       int
	warmup, iters int
	pedantic      bool  // also compare TP = W and TP = 1 in pedantic math
	refRows       []int // rows of y and dx checked against float64 (nil: all)
	refCols       []int // intermediate indices of the weight gradients checked (nil: all)
}

var (
	shapeSmall = shapeSpec{name: "small", h: 256, i: 512, t: 7, warmup: 3, iters: 20, pedantic: true}
	shapeQwen3 = shapeSpec{name: "qwen3-8b", h: 4096, i: 12288, t: 256, warmup: 3, iters: 20,
		refRows: []int{0, 1, 128, 255}, refCols: []int{0, 1, 1535, 1536, 6143, 6144, 9000, 12287}}
)

// TestGPUOpsMatchEmulator runs first: every kind of GEMM the layer issues
// (both transpositions, batched and per-chunk, an empty chunk), on inputs
// in {-1, 0, 1} whose sums are exact in bf16 whatever the order, must give
// the host emulator's bits through real cuBLAS; the SwiGLU kernels (every
// bf16 value of g, padded blocks) and the two-input tree must equal the host
// formulas bit for bit. A failure here points at one operation; each rank
// checks its own GPU.
func TestGPUOpsMatchEmulator(t *testing.T) {
	job, comm := gpuSetup(t)
	ctx := testCtx(t)
	var bad []string
	err := func() error {
		gl, err := New(comm.Device(), nil, opsCheckConfig)
		if err != nil {
			return err
		}
		defer gl.Close()
		hl, err := newLayer(opsCheckConfig, 1, 0)
		if err != nil {
			return err
		}
		hl.ops = newHostOps(nil)
		defer hl.Close()
		bad, err = opsCheck(gl, hl)
		return err
	}()
	if err := agree(ctx, job.Comm, "the operations test", err); err != nil {
		t.Fatalf("rank %d: %v", comm.Rank(), err)
	}
	for _, b := range bad {
		t.Errorf("rank %d: the GPU differs from the emulator: %s", comm.Rank(), b)
	}
	if len(bad) == 0 {
		t.Logf("rank %d: 12 GEMM cases (6 kinds × 2 token counts) through cuBLAS, SwiGLU forward and backward on every bf16 value and in padded blocks, and the tree of two: bit-identical to the emulator", comm.Rank())
	}
}

var opsCheckConfig = Config{Hidden: 64, Intermediate: 128}

// opsCheck runs the operations of TestGPUOpsMatchEmulator on layers gl and
// hl (TP = 1, opsCheckConfig) and lists the differences.
func opsCheck(gl, hl *Layer) (bad []string, err error) {
	const H, I, L = 64, 128, 8
	rng := rand.New(rand.NewPCG(11, 12))
	tern := func(r, c int) *parallel.Matrix {
		v := make([]float32, r*c)
		for i := range v {
			v[i] = float32(rng.IntN(3) - 1)
		}
		m, _ := parallel.MatrixFromFloat32(dtype.BF16, r, c, v)
		return m
	}
	// spec runs one GEMM kind on layer l and downloads the m×n result.
	type spec struct {
		name    string
		m, n, k int
		a, b    *parallel.Matrix
		ta, tb  bool
		chunked bool
	}
	run := func(l *Layer, s spec) (*parallel.Matrix, error) {
		A, err := l.Upload(s.a, 1, false)
		if err != nil {
			return nil, err
		}
		B, err := l.Upload(s.b, 1, false)
		if err != nil {
			return nil, err
		}
		out, err := l.NewTensor(s.m, s.n, 1, false)
		if err != nil {
			return nil, err
		}
		defer l.Free(A, B, out)
		if err := l.ensureWS(L * padBytes(s.m*s.n*2)); err != nil {
			return nil, err
		}
		gs := gemmSpec{m: s.m, n: s.n, k: s.k, a: operand{A.ptr, s.a.Cols(), s.ta}, b: operand{B.ptr, s.b.Cols(), s.tb}}
		err = l.ops.do(func() error {
			if s.chunked {
				return l.chunked(gs, out.ptr)
			}
			return l.ops.gemm(gs.call(0, s.k, out.ptr, l.cfg.compute()), false)
		})
		if err != nil {
			return nil, err
		}
		return l.Download(out)
	}
	nb := I / L
	for _, T := range []int{7, 16} {
		x, dy := tern(T, H), tern(T, H)
		wb, wd, act := tern(H, nb), tern(nb, H), tern(T, nb)
		for _, s := range []spec{
			{"gate x·Gate_j (K = H in L chunks)", T, nb, H, x, wb, false, false, true},
			{"da dy·Down_jᵀ (K = H in L chunks)", T, nb, H, dy, wd, false, true, true},
			{"down a_c·Down_c (one chunk)", T, H, nb, act, wd, false, false, false},
			{"dx lane dg_c·Gate_cᵀ (one chunk)", T, H, nb, act, wb, false, true, false},
			{"dGate xᵀ·dg_j (K = tokens in L chunks)", H, nb, T, x, act, true, false, true},
			{"dDown a_jᵀ·dy (K = tokens in L chunks)", nb, H, T, act, dy, true, false, true},
		} {
			got, err := run(gl, s)
			if err != nil {
				return bad, fmt.Errorf("T=%d %s on the GPU: %w", T, s.name, err)
			}
			want, err := run(hl, s)
			if err != nil {
				return bad, fmt.Errorf("T=%d %s in the emulator: %w", T, s.name, err)
			}
			if !parallel.BitsEqual(got, want) {
				bad = append(bad, fmt.Sprintf("T=%d %s: %s", T, s.name, firstDiff(got, want)))
			}
		}
	}
	// Elementwise: every bf16 value of g (plain), then padded blocks.
	all := make([]float32, 1<<16)
	for i := range all {
		all[i] = dtype.BF16ToFloat32(uint16(i))
	}
	gAll, _ := parallel.MatrixFromFloat32(dtype.BF16, 256, 256, all)
	for _, c := range []struct {
		name     string
		g, u, da *parallel.Matrix
		blocks   int
	}{{"every bf16 g", gAll, randBF16(21, 256, 256, 2), randBF16(22, 256, 256, 1), 1},
		{"padded blocks", randBF16(23, 5, 100, 3), randBF16(24, 5, 100, 2), randBF16(25, 5, 100, 1), 4}} {
		var outs [2][4]*parallel.Matrix
		for li, l := range []*Layer{gl, hl} {
			var ts [7]*Tensor
			for k, m := range []*parallel.Matrix{c.g, c.u, c.da, c.g, c.g, c.g, c.g} {
				if ts[k], err = l.Upload(m, c.blocks, true); err != nil {
					return bad, err
				}
			}
			g, u, da, a, dg, du, sum := ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6]
			per, stride := g.blockRows()*g.blockCols(), g.stride/2
			err := l.ops.do(func() error {
				if err := l.ops.swigluFwd(a.ptr, g.ptr, u.ptr, per, c.blocks, stride); err != nil {
					return err
				}
				if err := l.ops.swigluBwd(dg.ptr, du.ptr, g.ptr, u.ptr, da.ptr, per, c.blocks, stride); err != nil {
					return err
				}
				return l.ops.reduce2(sum.ptr, u.ptr, da.ptr, g.bytes()/2)
			})
			if err != nil {
				return bad, fmt.Errorf("%s on layer %d: %w", c.name, li, err)
			}
			for k, tt := range []*Tensor{a, dg, du, sum} {
				if outs[li][k], err = l.Download(tt); err != nil {
					return bad, err
				}
			}
			l.Free(ts[:]...)
		}
		for k, name := range []string{"SwiGLU a", "SwiGLU dg", "SwiGLU du", "u + da (tree of two)"} {
			if !parallel.BitsEqual(outs[0][k], outs[1][k]) {
				bad = append(bad, fmt.Sprintf("%s, %s: %s", name, c.name, firstDiff(outs[0][k], outs[1][k])))
			}
		}
	}
	return bad, nil
}

// TestGPUFFNSmall: hidden 256, intermediate 512, 7 tokens (uneven token
// chunks: per-chunk GEMMs and an empty chunk), default and pedantic math.
func TestGPUFFNSmall(t *testing.T) { runShape(t, shapeSmall) }

func runShape(t *testing.T, sh shapeSpec) {
	job, comm := gpuSetup(t)
	runShapeEnv(t, testCtx(t), gpuEnv(job, comm), sh)
}

// TestGPUFFNQwen3: a Qwen3-8B-like shape, hidden 4096, intermediate 12288,
// 256 tokens.
func TestGPUFFNQwen3(t *testing.T) { runShape(t, shapeQwen3) }

// ---- one configuration on this rank ----

type phaseSamples struct {
	Names      []string
	Collective []bool
	US         [][]float64 // [phase][iteration]
	WallUS     []float64   // host wall time of forward+backward per iteration
}

type configRun struct {
	res     ffnResult
	g, u, a *parallel.Matrix // saved activations, when asked
	repeat  string           // "" when a second run gave the same bits
	samples phaseSamples
}

// pass runs forward and backward once and downloads the results.
func pass(ctx context.Context, l *Layer, w Weights, x, dy *Tensor, acts bool) (res ffnResult, g, u, a *parallel.Matrix, err error) {
	y, s, err := l.Forward(ctx, x, w)
	if err != nil {
		return res, nil, nil, nil, err
	}
	defer l.Free(y)
	defer l.FreeSaved(s)
	gr, err := l.Backward(ctx, dy, w, s)
	if err != nil {
		return res, nil, nil, nil, err
	}
	defer l.FreeGrads(gr)
	for _, d := range []struct {
		dst **parallel.Matrix
		t   *Tensor
	}{{&res.y, y}, {&res.dx, gr.X}, {&res.dGate, gr.Gate}, {&res.dUp, gr.Up}, {&res.dDown, gr.Down}} {
		if *d.dst, err = l.Download(d.t); err != nil {
			return res, nil, nil, nil, err
		}
	}
	if acts {
		if g, err = l.Download(s.G); err == nil {
			if u, err = l.Download(s.U); err == nil {
				a, err = l.Download(s.A)
			}
		}
	}
	return res, g, u, a, err
}

func sameResult(a, b ffnResult) string {
	for _, c := range []struct {
		name string
		x, y *parallel.Matrix
	}{{"y", a.y, b.y}, {"dx", a.dx, b.dx}, {"dGate", a.dGate, b.dGate}, {"dUp", a.dUp, b.dUp}, {"dDown", a.dDown, b.dDown}} {
		if !parallel.BitsEqual(c.x, c.y) {
			return c.name + ": " + firstDiff(c.x, c.y)
		}
	}
	return ""
}

// runConfig builds a layer (tpW false: TP = 1 on this rank's device), runs
// forward and backward twice (the second must repeat the first's bits) and
// then the timed iterations. Every step ends with agree, so all ranks stay
// in step.
func runConfig(ctx context.Context, env *testEnv, tpW bool, cfg Config, in ffnInputs,
	sh shapeSpec, acts bool, what string) (*configRun, error) {
	run := &configRun{}
	l, err := env.layer(tpW, cfg)
	if err = agree(ctx, env.host, what+": creating the layer", err); err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	defer l.Close()
	var w Weights
	var x, dy *Tensor
	w, err = l.UploadWeights(in.gate, in.up, in.down)
	if err == nil {
		if x, err = l.Upload(in.x, 1, false); err == nil {
			dy, err = l.Upload(in.dy, 1, false)
		}
	}
	defer l.Free(w.Gate, w.Up, w.Down, x, dy)
	if err = agree(ctx, env.host, what+": uploading", err); err != nil {
		return nil, err
	}
	run.res, run.g, run.u, run.a, err = pass(ctx, l, w, x, dy, acts)
	if err = agree(ctx, env.host, what+": forward and backward", err); err != nil {
		return nil, err
	}
	again, _, _, _, err := pass(ctx, l, w, x, dy, false)
	if err == nil {
		run.repeat = sameResult(run.res, again)
	}
	if err = agree(ctx, env.host, what+": second forward and backward", err); err != nil {
		return nil, err
	}
	// Timed iterations: every phase between CUDA events on the layer's
	// stream; outputs are allocated before and freed after the events.
	l.SetTiming(true)
	idx := map[string]int{}
	for it := 0; it < sh.warmup+sh.iters && err == nil; it++ {
		start := time.Now()
		var y *Tensor
		var s *Saved
		var gr *Grads
		y, s, err = l.Forward(ctx, x, w)
		if err == nil {
			gr, err = l.Backward(ctx, dy, w, s)
		}
		var tm []Timing
		if err == nil {
			tm, err = l.Timings()
		}
		wall := time.Since(start)
		l.Free(y)
		l.FreeSaved(s)
		l.FreeGrads(gr)
		if err != nil || it < sh.warmup {
			continue
		}
		for _, p := range tm {
			k, ok := idx[p.Name]
			if !ok {
				k = len(run.samples.Names)
				idx[p.Name] = k
				run.samples.Names = append(run.samples.Names, p.Name)
				run.samples.Collective = append(run.samples.Collective, p.Collective)
				run.samples.US = append(run.samples.US, nil)
			}
			run.samples.US[k] = append(run.samples.US[k], p.Microseconds)
		}
		run.samples.WallUS = append(run.samples.WallUS, float64(wall.Microseconds()))
	}
	l.SetTiming(false)
	if err = agree(ctx, env.host, what+": timed iterations", err); err != nil {
		return nil, err
	}
	return run, nil
}

// ---- timing statistics (every sample the slowest rank's) ----

type stats struct {
	MedianUS  float64   `json:"median_us"`
	MinUS     float64   `json:"min_us"`
	MaxUS     float64   `json:"max_us"`
	SamplesUS []float64 `json:"samples_us"`
}

func statsOf(samples []float64) *stats {
	if len(samples) == 0 {
		return nil
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return &stats{MedianUS: round2(med), MinUS: round2(s[0]), MaxUS: round2(s[len(s)-1]), SamplesUS: roundAll(samples)}
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = round2(x)
	}
	return out
}

// slowest gathers every rank's samples and returns, per phase, the
// per-iteration maximum over ranks.
func slowest(ctx context.Context, c *detcoll.Comm, mine phaseSamples) (phaseSamples, error) {
	var all []phaseSamples
	if err := allGatherJSON(ctx, c, mine, &all); err != nil {
		return mine, err
	}
	out := phaseSamples{Names: mine.Names, Collective: mine.Collective, US: make([][]float64, len(mine.Names)), WallUS: append([]float64(nil), mine.WallUS...)}
	for k, name := range mine.Names {
		out.US[k] = append([]float64(nil), mine.US[k]...)
		for r, other := range all {
			if len(other.Names) != len(mine.Names) || other.Names[k] != name || len(other.US[k]) != len(mine.US[k]) {
				return mine, fmt.Errorf("rank %d timed other phases (%v) than this rank (%v)", r, other.Names, mine.Names)
			}
			for i, v := range other.US[k] {
				out.US[k][i] = math.Max(out.US[k][i], v)
			}
		}
	}
	for _, other := range all {
		for i := range out.WallUS {
			if i < len(other.WallUS) {
				out.WallUS[i] = math.Max(out.WallUS[i], other.WallUS[i])
			}
		}
	}
	return out, nil
}

// ---- float64 reference on samples ----

var bf16LUT = func() []float32 {
	t := make([]float32, 1<<16)
	for i := range t {
		t[i] = dtype.BF16ToFloat32(uint16(i))
	}
	return t
}()

type f64mat struct {
	rows, cols int
	b          []byte
}

func (m f64mat) at(i, j int) float64 {
	k := 2 * (i*m.cols + j)
	return float64(bf16LUT[uint16(m.b[k])|uint16(m.b[k+1])<<8])
}

func mat(m *parallel.Matrix) f64mat { return f64mat{m.Rows(), m.Cols(), m.Bytes()} }

func sigmoid64(g float64) float64 { return 1 / (1 + math.Exp(-g)) }

// relErr is the normwise relative error max|got − ref| / max|ref|.
type relErr struct{ maxDiff, maxRef float64 }

func (e *relErr) add(got, ref float64) {
	e.maxDiff = math.Max(e.maxDiff, math.Abs(got-ref))
	e.maxRef = math.Max(e.maxRef, math.Abs(ref))
}

func (e relErr) value() float64 {
	if e.maxRef == 0 {
		return e.maxDiff
	}
	return e.maxDiff / e.maxRef
}

// reference compares res (full TP = 1 results) with float64 arithmetic on
// the same bf16 inputs, nothing rounded in between: rows of y and dx, and
// columns k of dGate, dUp (column k) and dDown (row k).
func reference(in ffnInputs, res ffnResult, rows, cols []int) map[string]float64 {
	x, dy, wg, wu, wd := mat(in.x), mat(in.dy), mat(in.gate), mat(in.up), mat(in.down)
	H, I, T := wg.rows, wg.cols, x.rows
	if rows == nil {
		for i := 0; i < T; i++ {
			rows = append(rows, i)
		}
	}
	if cols == nil {
		for k := 0; k < I; k++ {
			cols = append(cols, k)
		}
	}
	ey, edx, eg, eu, ed := &relErr{}, &relErr{}, &relErr{}, &relErr{}, &relErr{}
	y, dxm := mat(res.y), mat(res.dx)
	gv, uv, dav := make([]float64, I), make([]float64, I), make([]float64, I)
	for _, i := range rows {
		for k := range gv {
			gv[k], uv[k], dav[k] = 0, 0, 0
		}
		for h := 0; h < H; h++ {
			xv := x.at(i, h)
			for k := 0; k < I; k++ {
				gv[k] += xv * wg.at(h, k)
				uv[k] += xv * wu.at(h, k)
			}
		}
		for k := 0; k < I; k++ {
			var s float64
			for q := 0; q < H; q++ {
				s += dy.at(i, q) * wd.at(k, q)
			}
			dav[k] = s
		}
		yv := make([]float64, H)
		dgv, duv := make([]float64, I), make([]float64, I)
		for k := 0; k < I; k++ {
			sg := sigmoid64(gv[k])
			a := gv[k] * sg * uv[k]
			for q := 0; q < H; q++ {
				yv[q] += a * wd.at(k, q)
			}
			duv[k] = dav[k] * gv[k] * sg
			dgv[k] = dav[k] * uv[k] * sg * (1 + gv[k]*(1-sg))
		}
		for q := 0; q < H; q++ {
			ey.add(y.at(i, q), yv[q])
		}
		for h := 0; h < H; h++ {
			var s float64
			for k := 0; k < I; k++ {
				s += dgv[k]*wg.at(h, k) + duv[k]*wu.at(h, k)
			}
			edx.add(dxm.at(i, h), s)
		}
	}
	dG, dU, dD := mat(res.dGate), mat(res.dUp), mat(res.dDown)
	gc, uc, dc, ac := make([]float64, T), make([]float64, T), make([]float64, T), make([]float64, T)
	dgc, duc := make([]float64, T), make([]float64, T)
	for _, k := range cols {
		for t := 0; t < T; t++ {
			var g, u, d float64
			for h := 0; h < H; h++ {
				g += x.at(t, h) * wg.at(h, k)
				u += x.at(t, h) * wu.at(h, k)
				d += dy.at(t, h) * wd.at(k, h)
			}
			gc[t], uc[t], dc[t] = g, u, d
			sg := sigmoid64(g)
			ac[t] = g * sg * u
			duc[t] = d * g * sg
			dgc[t] = d * u * sg * (1 + g*(1-sg))
		}
		for h := 0; h < H; h++ {
			var sg, su, sd float64
			for t := 0; t < T; t++ {
				sg += x.at(t, h) * dgc[t]
				su += x.at(t, h) * duc[t]
				sd += ac[t] * dy.at(t, h)
			}
			eg.add(dG.at(h, k), sg)
			eu.add(dU.at(h, k), su)
			ed.add(dD.at(k, h), sd)
		}
	}
	return map[string]float64{"y": ey.value(), "dx": edx.value(), "dGate": eg.value(), "dUp": eu.value(), "dDown": ed.value()}
}

// ---- the report ----

type checkRow struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

type phaseRow struct {
	Phase      string `json:"phase"`
	Collective bool   `json:"collective"`
	TP1        *stats `json:"tp1,omitempty"`
	TPW        *stats `json:"tp,omitempty"`
	TPWNative  *stats `json:"tp_native_nccl,omitempty"`
}

type deviceInfo struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"`
	Ordinal int    `json:"ordinal"`
	Name    string `json:"name"`
	CC      string `json:"compute_capability"`
	SMs     int    `json:"multiprocessors"`
}

type report struct {
	Schema     string             `json:"schema"`
	StartedAt  string             `json:"started_at"`
	Command    string             `json:"command"`
	Shape      map[string]any     `json:"shape"`
	WorldSize  int                `json:"world_size"`
	TP         int                `json:"tp"`
	Devices    []deviceInfo       `json:"devices"`
	Versions   map[string]string  `json:"versions"`
	CUBLAS     map[string]any     `json:"cublas_config"`
	Warmup     int                `json:"warmup"`
	Iterations int                `json:"iterations"`
	TimingNote string             `json:"timing_note"`
	Phases     []phaseRow         `json:"phases"`
	WallUS     map[string]*stats  `json:"host_wall_fwd_bwd_us"`
	Checks     []checkRow         `json:"checks"`
	RelErr     map[string]float64 `json:"rel_err_vs_float64"`
	RelErrNote string             `json:"rel_err_note"`
	AllOK      bool               `json:"all_checks_ok"`
}

// rankSummary is what each rank reports to the others after the runs.
type rankSummary struct {
	Rank      int               `json:"rank"`
	Device    deviceInfo        `json:"device"`
	Local     []checkRow        `json:"local"`  // this rank's own comparisons
	TP1       map[string]string `json:"tp1"`    // digests of the TP = 1 results (full)
	TPW       map[string]string `json:"tp"`     // digests of the TP = W results (y, dx full; grads this rank's shard)
	NativeEqY string            `json:"native"` // "" or how the native-NCCL run's y/dx differ
}

func digests(r ffnResult) map[string]string {
	return map[string]string{"y": digest(r.y), "dx": digest(r.dx), "dGate": digest(r.dGate), "dUp": digest(r.dUp), "dDown": digest(r.dDown)}
}

// shardOf cuts TP rank r's shard out of full TP = 1 weight gradients.
func shardOf(full ffnResult, tp, r int) ffnResult {
	il := full.dGate.Cols() / tp
	return ffnResult{y: full.y, dx: full.dx, dGate: full.dGate.ColSlice(r*il, (r+1)*il),
		dUp: full.dUp.ColSlice(r*il, (r+1)*il), dDown: full.dDown.RowSlice(r*il, (r+1)*il)}
}

func runShapeEnv(t tlog, ctx context.Context, env *testEnv, sh shapeSpec) {
	W, rank := env.w, env.rank
	L := parallel.DefaultChunks
	if L%W != 0 || (L/W)&(L/W-1) != 0 {
		t.Skipf("world size %d is not a TP size for L = %d (use 1, 2, 4 or 8 ranks)", W, L)
	}
	started := time.Now()
	me := env.device
	in := makeInputs(20261129, sh.h, sh.i, sh.t)
	t.Logf("rank %d: %s: H=%d I=%d T=%d, inputs ready in %v", rank, sh.name, sh.h, sh.i, sh.t, time.Since(started).Round(time.Millisecond))
	cfg := Config{Hidden: sh.h, Intermediate: sh.i}
	fatal := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}

	// TP = 1 on every rank's own GPU (no communication), then TP = W over
	// all of them, then TP = W with NCCL's own all-reduce (timing only).
	r1, err := runConfig(ctx, env, false, cfg, in, sh, true, "TP = 1")
	fatal(err)
	rW, err := runConfig(ctx, env, true, cfg, in, sh, true, fmt.Sprintf("TP = %d", W))
	fatal(err)
	// The optional runs (NCCL's all-reduce, pedantic math) report a failure
	// as a failed check and the test goes on to the report; runConfig's
	// status exchanges keep the ranks in step either way.
	var optional []checkRow
	var rN *configRun
	if W > 1 {
		ncfg := cfg
		ncfg.NativeCollectives = true
		rN, err = runConfig(ctx, env, true, ncfg, in, sh, false, fmt.Sprintf("TP = %d with NCCL's all-reduce", W))
		if err != nil {
			optional = append(optional, checkRow{Name: "the run with NCCL's own all-reduce (timing reference)", Detail: err.Error()})
			rN = nil
		}
	}

	// This rank's own comparisons: TP = W against TP = 1 on this GPU.
	var local []checkRow
	want := shardOf(r1.res, W, rank)
	for _, c := range []struct {
		name      string
		got, want *parallel.Matrix
	}{{"y", rW.res.y, want.y}, {"dx", rW.res.dx, want.dx}, {"dGate", rW.res.dGate, want.dGate},
		{"dUp", rW.res.dUp, want.dUp}, {"dDown", rW.res.dDown, want.dDown}} {
		row := checkRow{Name: fmt.Sprintf("rank %d: TP=%d %s == TP=1 %s (same GPU)", rank, W, c.name, c.name), OK: parallel.BitsEqual(c.got, c.want)}
		if !row.OK {
			row.Detail = firstDiff(c.got, c.want)
		}
		local = append(local, row)
	}
	// The forward activations (column-parallel: this rank's columns), which
	// tell a gate/up GEMM difference from a down or tree one.
	il := sh.i / W
	for _, c := range []struct {
		name      string
		got, want *parallel.Matrix
	}{{"g = x·Gate", rW.g, r1.g}, {"u = x·Up", rW.u, r1.u}, {"a = SwiGLU(g, u)", rW.a, r1.a}} {
		want := c.want.ColSlice(rank*il, (rank+1)*il)
		row := checkRow{Name: fmt.Sprintf("rank %d: TP=%d %s == TP=1 columns (same GPU)", rank, W, c.name), OK: parallel.BitsEqual(c.got, want)}
		if !row.OK {
			row.Detail = firstDiff(c.got, want)
		}
		local = append(local, row)
	}
	local = append(local,
		checkRow{Name: fmt.Sprintf("rank %d: TP=1 repeat run bitwise", rank), OK: r1.repeat == "", Detail: r1.repeat},
		checkRow{Name: fmt.Sprintf("rank %d: TP=%d repeat run bitwise", rank, W), OK: rW.repeat == "", Detail: rW.repeat})
	// The SwiGLU kernel equals the host formulas bit for bit on the GPU's
	// own g and u.
	kbad, kfirst := 0, ""
	for k := range r1.a.Rows() * r1.a.Cols() {
		i, j := k/r1.a.Cols(), k%r1.a.Cols()
		wantBits := dtype.Float32ToBF16(hostSwiGLU(r1.g.At(i, j), r1.u.At(i, j)))
		if uint16(r1.a.Bits(i, j)) != wantBits {
			if kbad == 0 {
				kfirst = fmt.Sprintf("first at (%d, %d): %#04x, host %#04x", i, j, r1.a.Bits(i, j), wantBits)
			}
			kbad++
		}
	}
	local = append(local, checkRow{Name: fmt.Sprintf("rank %d: SwiGLU kernel == host formulas on the GPU's g, u (%d elements)", rank, r1.a.Rows()*r1.a.Cols()),
		OK: kbad == 0, Detail: map[bool]string{true: "", false: fmt.Sprintf("%d differ; %s", kbad, kfirst)}[kbad == 0]})
	sum := rankSummary{Rank: rank, Device: me, Local: local, TP1: digests(r1.res), TPW: digests(rW.res)}
	if rN != nil {
		for _, c := range []struct {
			name string
			a, b *parallel.Matrix
		}{{"y", rW.res.y, rN.res.y}, {"dx", rW.res.dx, rN.res.dx}} {
			if !parallel.BitsEqual(c.a, c.b) && sum.NativeEqY == "" {
				sum.NativeEqY = c.name + ": " + firstDiff(c.a, c.b)
			}
		}
	}
	var all []rankSummary
	fatal(allGatherJSON(ctx, env.host, sum, &all))

	// Timing: per phase, the slowest rank of every iteration.
	s1, err := slowest(ctx, env.host, r1.samples)
	fatal(err)
	sW, err := slowest(ctx, env.host, rW.samples)
	fatal(err)
	var sN phaseSamples
	if rN != nil {
		sN, err = slowest(ctx, env.host, rN.samples)
		fatal(err)
	}

	// Pedantic math (small shapes): the same comparison of y and dx.
	var pedChecks []checkRow
	if sh.pedantic {
		pcfg := cfg
		pcfg.Pedantic = true
		psh := sh
		psh.warmup, psh.iters = 0, 0
		p1, err := runConfig(ctx, env, false, pcfg, in, psh, false, "pedantic TP = 1")
		var pW *configRun
		if err == nil {
			pW, err = runConfig(ctx, env, true, pcfg, in, psh, false, fmt.Sprintf("pedantic TP = %d", W))
		}
		switch {
		case err != nil && strings.Contains(err.Error(), "CUBLAS_STATUS_NOT_SUPPORTED"):
			t.Logf("rank %d: pedantic math not supported by this cuBLAS for these GEMMs: %v", rank, err)
		case err != nil:
			optional = append(optional, checkRow{Name: "the runs in pedantic math", Detail: err.Error()})
		default:
			pw := shardOf(p1.res, W, rank)
			d := sameResult(pW.res, pw)
			pedChecks = append(pedChecks, checkRow{Name: fmt.Sprintf("rank %d: pedantic math: TP=%d == TP=1 (y, dx, weight grads)", rank, W), OK: d == "", Detail: d})
			same := sameResult(p1.res, r1.res)
			t.Logf("rank %d: pedantic vs default math at TP=1: %s", rank, map[bool]string{true: "identical bits", false: "different bits (" + same + ")"}[same == ""])
		}
		var allPed [][]checkRow
		fatal(allGatherJSON(ctx, env.host, pedChecks, &allPed))
		pedChecks = nil
		for _, c := range allPed {
			pedChecks = append(pedChecks, c...)
		}
	}

	// Every rank checks the gathered summaries (so a failure shows on
	// every rank); rank 0 also measures the error against float64 and
	// writes the report.
	var checks []checkRow
	for _, s := range all {
		checks = append(checks, s.Local...)
	}
	checks = append(checks, pedChecks...)
	checks = append(checks, optional...) // the same on every rank (from the status exchange)
	for _, s := range all {
		for _, name := range []string{"y", "dx", "dGate", "dUp", "dDown"} {
			if s.TP1[name] != all[0].TP1[name] {
				checks = append(checks, checkRow{Name: fmt.Sprintf("TP=1 %s on GPU %d (rank %d) == on rank 0's GPU", name, s.Device.Ordinal, s.Rank),
					Detail: fmt.Sprintf("digest %s vs %s", s.TP1[name], all[0].TP1[name])})
			}
		}
		full := digests(shardOf(r1.res, W, s.Rank)) // this rank's TP = 1 result, cut as rank s's shard
		for _, name := range []string{"y", "dx", "dGate", "dUp", "dDown"} {
			d := full[name]
			row := checkRow{Name: fmt.Sprintf("rank %d's TP=%d %s == this rank's TP=1 %s", s.Rank, W, name, name), OK: s.TPW[name] == d}
			if !row.OK {
				row.Detail = fmt.Sprintf("digest %s vs %s", s.TPW[name], d)
			}
			checks = append(checks, row)
		}
	}
	// Identical TP = 1 results on every GPU are one check when they hold.
	crossOK := true
	for _, c := range checks {
		if strings.HasPrefix(c.Name, "TP=1 ") && !c.OK {
			crossOK = false
		}
	}
	if crossOK {
		checks = append(checks, checkRow{Name: fmt.Sprintf("TP=1 results bitwise identical on all %d GPUs", W), OK: true})
	}
	allOK := true
	for _, c := range checks {
		if !c.OK {
			allOK = false
			t.Errorf("rank %d: FAILED %s: %s", rank, c.Name, c.Detail)
		}
	}
	if rN != nil {
		for _, s := range all {
			if s.NativeEqY != "" {
				t.Logf("rank %d: with NCCL's own all-reduce y/dx differ from detcoll's: %s", s.Rank, s.NativeEqY)
			}
		}
	}
	if rank != 0 {
		fatal(agree(ctx, env.host, "report", nil))
		return
	}

	refStart := time.Now()
	rel := reference(in, r1.res, sh.refRows, sh.refCols)
	rows := "all rows"
	if sh.refRows != nil {
		rows = fmt.Sprintf("rows %v", sh.refRows)
	}
	cols := "all intermediate indices"
	if sh.refCols != nil {
		cols = fmt.Sprintf("intermediate indices %v", sh.refCols)
	}
	const bound = 3e-2
	for _, name := range []string{"y", "dx", "dGate", "dUp", "dDown"} {
		row := checkRow{Name: fmt.Sprintf("%s: normwise relative error vs float64 < %g", name, bound), OK: rel[name] < bound, Detail: fmt.Sprintf("%.3g", rel[name])}
		checks = append(checks, row)
		if !row.OK {
			allOK = false
			t.Errorf("%s: relative error %.3g against float64 (bound %g): the GPU results are wrong, not only different", name, rel[name], bound)
		}
	}
	t.Logf("float64 reference (%s; %s) in %v: %v", rows, cols, time.Since(refStart).Round(time.Millisecond), rel)

	rep := report{
		Schema:    "detcoll.gpuffn.v1",
		StartedAt: started.UTC().Format(time.RFC3339),
		Command:   strings.Join(os.Args, " "),
		Shape: map[string]any{"name": sh.name, "hidden": sh.h, "intermediate": sh.i, "tokens": sh.t, "dtype": "bf16",
			"chunks": L, "sequence_parallel": false, "cp": 1},
		WorldSize: W, TP: W,
		Versions: env.versions,
		CUBLAS: map[string]any{"math": cfg.math().String(), "compute": cfg.compute().String(), "algo": "CUBLAS_GEMM_DEFAULT",
			"workspace_bytes": CUBLASWorkspaceBytes, "atomics": "not allowed", "types": "A, B, C CUDA_R_16BF",
			"scalars": "alpha 1, beta 0 (float, host)"},
		Warmup: sh.warmup, Iterations: sh.iters,
		TimingNote: "CUDA events on the layer's stream around each phase; every sample is the slowest rank's (max over ranks of the same iteration); " +
			"a collective's time includes waiting for the slower rank; eager launches, no CUDA graph; tp1 runs on every rank's GPU at once",
		RelErr: rel,
		RelErrNote: fmt.Sprintf("max|gpu - ref| / max|ref| against float64 on the same bf16 inputs (TP = 1 results of rank 0); %s of y and dx, %s of the weight gradients",
			rows, cols),
		WallUS: map[string]*stats{"tp1": statsOf(s1.WallUS), "tp": statsOf(sW.WallUS)},
	}
	for _, s := range all {
		rep.Devices = append(rep.Devices, s.Device)
	}
	if rN != nil {
		rep.WallUS["tp_native_nccl"] = statsOf(sN.WallUS)
	}
	byName := func(p phaseSamples, name string) *stats {
		for k, n := range p.Names {
			if n == name {
				return statsOf(p.US[k])
			}
		}
		return nil
	}
	order := append([]string(nil), sW.Names...)
	coll := map[string]bool{}
	for k, n := range sW.Names {
		coll[n] = sW.Collective[k]
	}
	for _, n := range s1.Names {
		if _, ok := coll[n]; !ok {
			order = append(order, n)
		}
	}
	for _, n := range order {
		row := phaseRow{Phase: n, Collective: coll[n], TP1: byName(s1, n), TPW: byName(sW, n)}
		if rN != nil {
			row.TPWNative = byName(sN, n)
		}
		rep.Phases = append(rep.Phases, row)
	}
	rep.Checks = checks
	rep.AllOK = allOK
	if err := writeReport(rep); err != nil {
		t.Errorf("writing the report: %v", err)
	}
	t.Logf("\n%s", markdown(rep))
	fatal(agree(ctx, env.host, "report", nil))
}

func driverVersion() string {
	v, err := cuda.DriverVersion()
	if err != nil {
		return ""
	}
	return cuda.VersionString(v)
}

func writeReport(rep report) error {
	dir := os.Getenv("OUT")
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := fmt.Sprintf("gpuffn-%s", rep.Shape["name"])
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(markdown(rep)), 0o644)
}

func fmtStats(s *stats) string {
	if s == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f (%.1f–%.1f)", s.MedianUS, s.MinUS, s.MaxUS)
}

func markdown(rep report) string {
	var b strings.Builder
	dev := ""
	if len(rep.Devices) > 0 {
		dev = fmt.Sprintf("%d × %s (sm_%s, %d SMs)", len(rep.Devices), rep.Devices[0].Name, strings.ReplaceAll(rep.Devices[0].CC, ".", ""), rep.Devices[0].SMs)
	}
	fmt.Fprintf(&b, "# GPU FFN (%s): TP = %d vs TP = 1\n\n", rep.Shape["name"], rep.TP)
	fmt.Fprintf(&b, "- shape: hidden %v, intermediate %v, %v tokens, bf16, L = %v canonical chunks, no SP, CP = 1\n",
		rep.Shape["hidden"], rep.Shape["intermediate"], rep.Shape["tokens"], rep.Shape["chunks"])
	fmt.Fprintf(&b, "- machine: %s; host %s; started %s\n", dev, rep.Devices[0].Host, rep.StartedAt)
	fmt.Fprintf(&b, "- versions: cuBLAS %s (%s), NCCL %s, NVRTC %s, CUDA driver %s\n",
		rep.Versions["cublas"], rep.Versions["cublas_path"], rep.Versions["nccl"], rep.Versions["nvrtc"], rep.Versions["cuda_driver"])
	fmt.Fprintf(&b, "- cuBLAS: %v, %v, %v, workspace %v bytes, atomics %v\n", rep.CUBLAS["math"], rep.CUBLAS["compute"], rep.CUBLAS["algo"],
		rep.CUBLAS["workspace_bytes"], rep.CUBLAS["atomics"])
	fmt.Fprintf(&b, "- command: `%s`\n\n", rep.Command)
	verdict := "all bitwise checks passed"
	if !rep.AllOK {
		verdict = "SOME CHECKS FAILED"
	}
	fmt.Fprintf(&b, "## Checks: %s\n\n| check | ok | detail |\n|---|---|---|\n", verdict)
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "| %s | %v | %s |\n", c.Name, c.OK, strings.ReplaceAll(c.Detail, "|", "/"))
	}
	fmt.Fprintf(&b, "\n## Time per phase, µs: median (min–max) over %d iterations after %d warm-up\n\n", rep.Iterations, rep.Warmup)
	fmt.Fprintf(&b, "%s.\n\n", rep.TimingNote)
	fmt.Fprintf(&b, "| phase | collective | TP = 1 | TP = %d (detcoll all-reduce) | TP = %d (NCCL all-reduce) |\n|---|---|---|---|---|\n", rep.TP, rep.TP)
	for _, p := range rep.Phases {
		coll := ""
		if p.Collective {
			coll = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", p.Phase, coll, fmtStats(p.TP1), fmtStats(p.TPW), fmtStats(p.TPWNative))
	}
	fmt.Fprintf(&b, "| host wall time, forward + backward | | %s | %s | %s |\n", fmtStats(rep.WallUS["tp1"]), fmtStats(rep.WallUS["tp"]), fmtStats(rep.WallUS["tp_native_nccl"]))
	fmt.Fprintf(&b, "\n## Error against float64\n\n%s.\n\n| y | dx | dGate | dUp | dDown |\n|---|---|---|---|---|\n", rep.RelErrNote)
	fmt.Fprintf(&b, "| %.3g | %.3g | %.3g | %.3g | %.3g |\n", rep.RelErr["y"], rep.RelErr["dx"], rep.RelErr["dGate"], rep.RelErr["dUp"], rep.RelErr["dDown"])
	return b.String()
}

// ---- the parallel.GPUBackend hook ----

var registerOnce sync.Once

// TestGPUFFNBackendHook: parallel.NewFFN with cuda_ag_rs on the GPU runs
// this package's layer (registered as the GPU backend) and gives the same
// bits as the layer called directly.
func TestGPUFFNBackendHook(t *testing.T) {
	job, comm := gpuSetup(t)
	ctx := testCtx(t)
	W, rank := comm.Size(), comm.Rank()
	if 8%W != 0 || (8/W)&(8/W-1) != 0 {
		t.Skipf("world size %d is not a TP size for L = 8", W)
	}
	sh := shapeSmall
	in := makeInputs(77, sh.h, sh.i, sh.t)
	cfg := Config{Hidden: sh.h, Intermediate: sh.i}
	direct, err := runConfig(ctx, gpuEnv(job, comm), true, cfg, in, shapeSpec{}, false, "direct layer")
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	b := &Backend{Comm: comm}
	var regErr error
	registerOnce.Do(func() { regErr = parallel.RegisterGPUBackend(parallel.CUDAAgRs, b) })
	if _, err := b.NewAttention(nil, parallel.AttentionConfig{}); !errors.Is(err, parallel.ErrNoGPUBackend) {
		t.Errorf("NewAttention: %v, want ErrNoGPUBackend", err)
	}
	var got ffnResult
	err = func() error {
		if regErr != nil {
			return regErr
		}
		mesh, err := parallel.NewMesh(ctx, job.Comm, W, 1, 1)
		if err != nil {
			return err
		}
		defer mesh.Close()
		f, err := parallel.NewFFN(ctx, mesh, parallel.FFNConfig{Hidden: sh.h, Intermediate: sh.i, DType: dtype.BF16,
			Backend: parallel.CUDAAgRs, Device: parallel.DeviceGPU})
		if err != nil {
			return err
		}
		gf, ok := f.(*FFN)
		if !ok {
			return fmt.Errorf("NewFFN returned %T, not the GPU FFN", f)
		}
		l := gf.Layer()
		defer l.Close()
		w, err := l.UploadWeights(in.gate, in.up, in.down)
		if err != nil {
			return err
		}
		defer l.Free(w.Gate, w.Up, w.Down)
		x, err := l.Upload(in.x, 1, false)
		if err != nil {
			return err
		}
		dy, err := l.Upload(in.dy, 1, false)
		if err != nil {
			return err
		}
		defer l.Free(x, dy)
		pw := parallel.FFNWeights{Gate: w.Gate, Up: w.Up, Down: w.Down}
		y, saved, err := f.Forward(ctx, x, pw)
		if err != nil {
			return err
		}
		grads, err := f.Backward(ctx, dy, pw, saved)
		if err != nil {
			return err
		}
		defer l.FreeSaved(saved.(*Saved))
		defer l.Free(y.(*Tensor), grads.X.(*Tensor), grads.Gate.(*Tensor), grads.Up.(*Tensor), grads.Down.(*Tensor))
		for _, d := range []struct {
			dst **parallel.Matrix
			t   parallel.Tensor
		}{{&got.y, y}, {&got.dx, grads.X}, {&got.dGate, grads.Gate}, {&got.dUp, grads.Up}, {&got.dDown, grads.Down}} {
			if *d.dst, err = l.Download(d.t.(*Tensor)); err != nil {
				return err
			}
		}
		return nil
	}()
	if err := agree(ctx, job.Comm, "the FFN through parallel.NewFFN", err); err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	if d := sameResult(got, direct.res); d != "" {
		t.Errorf("rank %d: through parallel.NewFFN: %s", rank, d)
	}
}

package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// Rows reach OnRow as each finishes, in report order, before Run returns;
// OnStart comes first. The CPU backend names its baseline.
func TestRowsStreamAndBaseline(t *testing.T) {
	cfg := smallConfig()
	var mu sync.Mutex
	var order []string
	cfg.OnStart = func(rep *Report) {
		mu.Lock()
		defer mu.Unlock()
		if len(rep.Rows) != 0 {
			t.Errorf("OnStart with %d rows", len(rep.Rows))
		}
		order = append(order, "start")
	}
	cfg.OnRow = func(rep *Report, row Row) {
		mu.Lock()
		defer mu.Unlock()
		if rep.Rows[len(rep.Rows)-1].Algorithm != row.Algorithm || row.Deterministic.MedianUS <= 0 {
			t.Errorf("OnRow row %+v is not the last finished", row)
		}
		order = append(order, string(row.Operation)+" "+row.Algorithm+" "+strconv.FormatInt(row.InputBytes, 10))
	}
	rep := mustRun(t, 2, cfg, nil)
	// Two ranks call the hooks; each sees start, then every row.
	if len(order) != 2*(1+len(rep.Rows)) || order[0] != "start" {
		t.Fatalf("hooks ran %d times (%v), want %d", len(order), order, 2*(1+len(rep.Rows)))
	}
	if rep.Baseline != CPURingBaseline || strings.Contains(rep.Baseline, "native") {
		t.Fatalf("baseline %q", rep.Baseline)
	}
	var b bytes.Buffer
	rep.Table(&b)
	if !strings.Contains(b.String(), "baseline (base): ring (detcoll's reference of Gloo's order)") {
		t.Fatalf("the table does not name the ring:\n%s", b.String())
	}
}

// With InPlace, all_reduce and all_gather rows also run in place, checked
// against the oracle; reduce_scatter has no in-place form.
func TestInPlaceRows(t *testing.T) {
	cfg := smallConfig()
	cfg.SizesBytes = []int{4096}
	cfg.InPlace = true
	rep := mustRun(t, 3, cfg, nil)
	for _, row := range rep.Rows {
		if row.Operation == ReduceScatter {
			if row.InPlace != nil {
				t.Errorf("reduce_scatter has an in-place result")
			}
			continue
		}
		if row.InPlace == nil || !row.InPlace.OracleBitwise || row.InPlace.WrongElements != 0 || len(row.InPlace.Timing.SamplesUS) != cfg.Samples {
			t.Errorf("%s %s: in place %+v", row.Operation, row.Algorithm, row.InPlace)
		}
	}
	var b bytes.Buffer
	p := NewRowPrinter(&b, "nccl-tests")
	p.Header(rep)
	for _, row := range rep.Rows {
		p.Row(rep, row)
	}
	lines := 0
	for _, l := range strings.Split(b.String(), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines++
		f := strings.Fields(l)
		if len(f) != 14 {
			t.Fatalf("%d fields in %q", len(f), l)
		}
		if f[0] == "" || f[8] != "0" {
			t.Errorf("row %q: #wrong %s", l, f[8])
		}
	}
	if lines != len(rep.Rows) {
		t.Fatalf("%d rows printed, want %d:\n%s", lines, len(rep.Rows), b.String())
	}
}

// A corrupted output is counted element by element (nccl-tests' #wrong).
func TestWrongElementsCounted(t *testing.T) {
	cfg := smallConfig()
	cfg.SizesBytes = []int{4096}
	cfg.Operations = []Op{AllReduce}
	cfg.Algorithms = []detcoll.Algorithm{detcoll.GatherTree}
	rep := mustRun(t, 2, cfg, func(r int, b Backend) Backend { return flipBackend{b, true} })
	// flipCase flips a bit of element 0 of every rank's output; element 0
	// is in rank 0's checked shard only.
	if got := rep.Rows[0].WrongElements; got != 1 {
		t.Fatalf("wrong_elements %d, want 1", got)
	}
}

// nccl-tests' size, count and busbw conventions.
func TestNCCLTestsColumns(t *testing.T) {
	for _, c := range []struct {
		op          Op
		w           int
		in          int64
		size, count int64
		factor      float64
	}{
		{AllReduce, 4, 4096, 4096, 1024, 2 * 3.0 / 4},
		{AllGather, 4, 1024, 4096, 256, 3.0 / 4},
		{ReduceScatter, 4, 4096, 4096, 256, 3.0 / 4},
	} {
		size, count := NCCLTestsSize(c.op, dtype.FP32, c.w, c.in)
		if size != c.size || count != c.count {
			t.Errorf("%s: size %d count %d, want %d %d", c.op, size, count, c.size, c.count)
		}
		row := Row{Operation: c.op, DType: "fp32", Algorithm: "gather_tree", InputBytes: c.in, Deterministic: Timing{MedianUS: 1}, OracleBitwise: true}
		f := strings.Fields(ncclTestsLine(c.w, row))
		alg, _ := strconv.ParseFloat(f[6], 64)
		bus, _ := strconv.ParseFloat(f[7], 64)
		if math.Abs(alg-float64(c.size)/1e3) > 0.006 || math.Abs(bus-float64(c.size)/1e3*c.factor) > 0.006 {
			t.Errorf("%s: algbw %g busbw %g, want %g and ×%g", c.op, alg, bus, float64(c.size)/1e3, c.factor)
		}
		if f[2] != "float" || f[4] != "-1" || f[9] != "N/A" {
			t.Errorf("%s: %v", c.op, f)
		}
	}
}

func TestPeerFigures(t *testing.T) {
	good := `{"schema":"detcoll.peer.v1","name":"Open MPI 4.1 shm","world_size":2,
		"rows":[{"op":"all_reduce","dtype":"fp32","bytes":4096,"median_us":2}]}`
	p, err := ParsePeer([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	row := p.Apply(Row{Operation: AllReduce, DType: "fp32", InputBytes: 4096, Deterministic: Timing{MedianUS: 5}})
	if row.PeerMedianUS != 2 || row.LatencyRatioVsPeer != 2.5 {
		t.Fatalf("applied: %+v", row)
	}
	if row := p.Apply(Row{Operation: AllReduce, DType: "fp32", InputBytes: 8192}); row.PeerMedianUS != 0 {
		t.Fatalf("a size the peer does not have got %g", row.PeerMedianUS)
	}
	for name, bad := range map[string]string{
		"schema":    `{"schema":"x","name":"a","rows":[{"op":"all_reduce","dtype":"fp32","bytes":4,"median_us":1}]}`,
		"name":      `{"schema":"detcoll.peer.v1","rows":[{"op":"all_reduce","dtype":"fp32","bytes":4,"median_us":1}]}`,
		"rows":      `{"schema":"detcoll.peer.v1","name":"a","rows":[]}`,
		"op":        `{"schema":"detcoll.peer.v1","name":"a","rows":[{"op":"bcast","dtype":"fp32","bytes":4,"median_us":1}]}`,
		"bytes":     `{"schema":"detcoll.peer.v1","name":"a","rows":[{"op":"all_reduce","dtype":"fp32","bytes":6,"median_us":1}]}`,
		"median":    `{"schema":"detcoll.peer.v1","name":"a","rows":[{"op":"all_reduce","dtype":"fp32","bytes":4,"median_us":0}]}`,
		"duplicate": `{"schema":"detcoll.peer.v1","name":"a","rows":[{"op":"all_reduce","dtype":"fp32","bytes":4,"median_us":1},{"op":"all_reduce","dtype":"fp32","bytes":4,"median_us":2}]}`,
		"json":      `{`,
	} {
		if _, err := ParsePeer([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A rank that stops answering during the native baseline (as under
// SIGSTOP: it ignores its context) makes every other rank fail within
// Config.Timeout, not wait for it.
func TestStoppedRankBoundedByTimeout(t *testing.T) {
	cfg := smallConfig()
	cfg.SizesBytes = []int{4096}
	cfg.Operations = []Op{AllReduce}
	cfg.Timeout = 300 * time.Millisecond
	release := make(chan struct{})
	go func() { time.Sleep(1500 * time.Millisecond); close(release) }()
	_, errs := runAll(t, 3, func(int) Config { return cfg }, func(r int, b Backend) Backend {
		if r == 1 {
			return stallBackend{b, release}
		}
		return b
	})
	for r, err := range errs {
		if r == 1 {
			continue
		}
		// Waiting for rank 1 would end in its "stopped" error (errPeer
		// here), not in this rank's deadline.
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: %v, want a deadline error", r, err)
		}
	}
}

// stallBackend's native run ignores ctx until release (a stopped process).
type stallBackend struct {
	Backend
	release chan struct{}
}

func (b stallBackend) Prepare(ctx context.Context, spec CaseSpec) (Case, error) {
	c, err := b.Backend.Prepare(ctx, spec)
	return stallCase{c, b.release}, err
}

type stallCase struct {
	Case
	release chan struct{}
}

func (c stallCase) RunNative(ctx context.Context, iters int) (time.Duration, error) {
	<-c.release
	return 0, errors.New("stopped")
}

// The plots: latency and bandwidth, the whole canvas painted, the legend
// in an opaque box, fonts named with generic fallbacks.
func TestPlotsRenderable(t *testing.T) {
	cfg := smallConfig()
	rep := mustRun(t, 2, cfg, nil)
	dir := t.TempDir()
	svg := filepath.Join(dir, "p.svg")
	if err := rep.Plot(svg); err != nil {
		t.Fatal(err)
	}
	if err := rep.PlotBandwidth(BandwidthPlotPath(svg)); err != nil {
		t.Fatal(err)
	}
	if BandwidthPlotPath(svg) != filepath.Join(dir, "p-bandwidth.svg") {
		t.Fatal(BandwidthPlotPath(svg))
	}
	for _, f := range []string{svg, BandwidthPlotPath(svg)} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		m := regexp.MustCompile(`viewBox="0 0 ([0-9.]+) ([0-9.]+)"`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("%s: no viewBox", f)
		}
		first := regexp.MustCompile(`<path d="([^"]*)" style="fill:#FFFFFF"`).FindStringSubmatch(s)
		if first == nil || first[1] != "M0,0L"+m[1]+",0L"+m[1]+","+m[2]+"L0,"+m[2]+"Z" {
			t.Fatalf("%s: the first white fill does not cover the %sx%s canvas: %v", f, m[1], m[2], first)
		}
		if strings.Count(s, "fill:#FFFFFF") < 3 { // canvas, plot area, legend box
			t.Fatalf("%s: no opaque legend box", f)
		}
		if strings.Contains(s, "font-family:Liberation Serif") || !strings.Contains(s, "sans-serif") {
			t.Fatalf("%s: fonts without a generic fallback", f)
		}
	}
}

// symBackend gives the CPU cases a "symmetric" native run twice as fast as
// the default one (it runs the ring and reports half the time), on the
// ranks where ok.
type symBackend struct {
	Backend
	ok bool
}

func (b symBackend) Prepare(ctx context.Context, spec CaseSpec) (Case, error) {
	c, err := b.Backend.Prepare(ctx, spec)
	if err != nil {
		return c, err
	}
	return &symCase{Case: c, ok: b.ok}, nil
}

type symCase struct {
	Case
	ok       bool
	prepared bool
	runs     int
}

func (c *symCase) PrepareSymmetric(context.Context) error {
	if !c.ok {
		return ErrNoSymmetric
	}
	c.prepared = true
	return nil
}

func (c *symCase) RunNativeSymmetric(ctx context.Context, iters int) (time.Duration, error) {
	if !c.prepared {
		return 0, errors.New("not prepared")
	}
	c.runs++
	d, err := c.Case.RunNative(ctx, iters)
	return d / 2, err
}

// With symmetric buffers on every rank, both baselines are kept and the
// ratio is against the faster; if one rank lacks them, the column is left
// out everywhere and the run goes on.
func TestSymmetricBaseline(t *testing.T) {
	cfg := smallConfig()
	cfg.SizesBytes = []int{4096}
	rep := mustRun(t, 2, cfg, func(r int, b Backend) Backend { return symBackend{b, true} })
	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, row := range rep.Rows {
		s := row.NativeSymmetric
		if s == nil || len(s.SamplesUS) != cfg.Samples {
			t.Fatalf("%s %s: native_symmetric %+v", row.Operation, row.Algorithm, s)
		}
		best := min(s.MedianUS, row.Native.MedianUS)
		wantBest := "default"
		if s.MedianUS < row.Native.MedianUS {
			wantBest = "symmetric"
		}
		if row.NativeBest != wantBest || row.LatencyRatioVsNative != row.Deterministic.MedianUS/best ||
			row.LatencyRatioVsNativeDefault != row.Deterministic.MedianUS/row.Native.MedianUS {
			t.Fatalf("%s %s: best %q (want %q), ratios %g %g", row.Operation, row.Algorithm, row.NativeBest, wantBest,
				row.LatencyRatioVsNative, row.LatencyRatioVsNativeDefault)
		}
	}
	rep = mustRun(t, 2, cfg, func(r int, b Backend) Backend { return symBackend{b, r == 0} })
	for _, row := range rep.Rows {
		if row.NativeSymmetric != nil || row.NativeBest != "default" || row.LatencyRatioVsNative != row.LatencyRatioVsNativeDefault {
			t.Fatalf("%s: symmetric column with a rank that has none: %+v", row.Operation, row)
		}
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// runAll runs Run on every rank of an in-process group of w ranks, each in
// its own goroutine; wrap, when not nil, wraps rank r's CPU backend.
func runAll(t *testing.T, w int, cfgOf func(rank int) Config, wrap func(rank int, b Backend) Backend) ([]*Report, []error) {
	t.Helper()
	comms, err := detcoll.NewInProc(w, detcoll.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	reps := make([]*Report, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var b Backend = NewCPU(comms[r])
			if wrap != nil {
				b = wrap(r, b)
			}
			var prog func(done, total int)
			if r == 0 {
				prog = func(done, total int) {
					if done < 0 || done > total {
						t.Errorf("progress %d/%d", done, total)
					}
				}
			}
			reps[r], errs[r] = Run(context.Background(), comms[r], b, cfgOf(r), prog)
		}(r)
	}
	wg.Wait()
	return reps, errs
}

func smallConfig() Config {
	return Config{
		SizesBytes: []int{4096, 65536},
		DType:      dtype.FP32,
		Warmup:     1,
		Iterations: 2,
		Samples:    3,
		Seed:       42,
	}
}

func mustRun(t *testing.T, w int, cfg Config, wrap func(int, Backend) Backend) *Report {
	t.Helper()
	reps, errs := runAll(t, w, func(int) Config { return cfg }, wrap)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// Every rank returns the same report.
	want, _ := reps[0].Marshal()
	for r := 1; r < w; r++ {
		got, _ := reps[r].Marshal()
		if !bytes.Equal(got, want) {
			t.Fatalf("rank %d's report differs from rank 0's", r)
		}
	}
	return reps[0]
}

var (
	topKeys = []string{"schema", "detcoll_version", "git_commit", "git_dirty", "git_commit_source", "started_at", "world_size", "nodes", "device",
		"backend", "baseline", "contract", "warmup", "iterations", "samples", "graph", "seed", "all_rank_repeat_bitwise", "rows"}
	deviceKeys   = []string{"kind", "names", "driver_version", "cuda_version", "nccl_version"}
	contractKeys = []string{"version", "tree", "accumulate"}
	rowKeys      = []string{"operation", "dtype", "algorithm", "requested_size_bytes", "input_bytes", "deterministic",
		"native", "native_best", "latency_ratio_vs_native", "latency_ratio_vs_native_default", "input_gbps", "native_input_gbps",
		"bus_gbps", "native_bus_gbps", "repeat_bitwise", "oracle_bitwise", "wrong_elements", "max_abs_vs_native",
		"workspace_bytes", "peak_allocated_bytes", "native_peak_allocated_bytes"}
	timingKeys = []string{"median_us", "min_us", "max_us", "samples_us"}
)

func hasKeys(t *testing.T, where string, m map[string]any, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: missing %q", where, k)
		}
	}
}

// checkSchema checks that the JSON form has every field of docs/contract.md, "Benchmark report".
func checkSchema(t *testing.T, b []byte) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	hasKeys(t, "report", m, topKeys)
	if m["schema"] != SchemaV1 {
		t.Errorf("schema %v", m["schema"])
	}
	dev, _ := m["device"].(map[string]any)
	hasKeys(t, "device", dev, deviceKeys)
	if _, ok := dev["names"].([]any); !ok {
		t.Errorf("device.names is %T, want an array", dev["names"])
	}
	con, _ := m["contract"].(map[string]any)
	hasKeys(t, "contract", con, contractKeys)
	rows, _ := m["rows"].([]any)
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	for i, r := range rows {
		row, _ := r.(map[string]any)
		hasKeys(t, "row", row, rowKeys)
		for _, k := range []string{"deterministic", "native"} {
			tm, _ := row[k].(map[string]any)
			hasKeys(t, k, tm, timingKeys)
			if s, _ := tm["samples_us"].([]any); len(s) != 3 {
				t.Errorf("row %d %s: %d samples", i, k, len(s))
			}
		}
		for _, k := range []string{"latency_ratio_vs_native", "input_gbps", "native_input_gbps", "bus_gbps"} {
			if v, _ := row[k].(float64); !(v > 0) {
				t.Errorf("row %d: %s = %v, want > 0", i, k, row[k])
			}
		}
	}
}

func TestRunCPU(t *testing.T) {
	const w = 4
	cfg := smallConfig()
	rep := mustRun(t, w, cfg, nil)

	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := 2 * (2 + 1 + 2); len(rep.Rows) != want {
		t.Fatalf("%d rows, want %d", len(rep.Rows), want)
	}
	if rep.WorldSize != w || rep.Nodes != 1 || rep.Backend != "cpu" || rep.Device.Kind != "cpu" || rep.Transport != "inproc" {
		t.Errorf("header: %+v", rep)
	}
	if rep.Contract.Version != detcoll.ContractVersion || rep.Contract.Tree != ContractTree || rep.Contract.Accumulate != "native" {
		t.Errorf("contract %+v", rep.Contract)
	}
	if !rep.AllRankRepeatBitwise {
		t.Error("all_rank_repeat_bitwise false")
	}
	for _, row := range rep.Rows {
		name := string(row.Operation) + " " + row.Algorithm + " " + HumanBytes(row.InputBytes)
		if !row.RepeatBitwise || !row.OracleBitwise {
			t.Errorf("%s: repeat %v, oracle %v", name, row.RepeatBitwise, row.OracleBitwise)
		}
		if row.LatencyRatioVsNative <= 0 || row.InputGBps <= 0 || row.NativeInputGBps <= 0 || row.BusGBps <= 0 {
			t.Errorf("%s: non-positive figures %+v", name, row)
		}
		if row.Operation == AllGather {
			if row.Algorithm != DirectAlgorithm || row.MaxAbsVsNative != 0 || row.WorkspaceBytes != 0 {
				t.Errorf("%s: algorithm %q, max abs %v, workspace %d", name, row.Algorithm, row.MaxAbsVsNative, row.WorkspaceBytes)
			}
		} else if row.WorkspaceBytes <= 0 || row.PeakAllocatedBytes < row.WorkspaceBytes || row.NativePeakAllocatedBytes <= 0 {
			t.Errorf("%s: workspace %d, peak %d, native peak %d", name, row.WorkspaceBytes, row.PeakAllocatedBytes, row.NativePeakAllocatedBytes)
		}
		if row.Operation == ReduceScatter && (row.InputBytes/4)%w != 0 {
			t.Errorf("%s: %d input bytes do not divide by W", name, row.InputBytes)
		}
		if row.InputBytes != row.RequestedSizeBytes {
			t.Errorf("%s: input %d, requested %d", name, row.InputBytes, row.RequestedSizeBytes)
		}
		if math.Abs(row.BusGBps-BusBytes(row.Operation, w, int(row.InputBytes))/(row.Deterministic.MedianUS*1e3)) > 1e-9*row.BusGBps {
			t.Errorf("%s: bus_gbps %g inconsistent", name, row.BusGBps)
		}
	}
	// gather_tree and a2a_tree of a reduction move different data but give the same bits,
	// so their distance from native is the same.
	for i := 0; i+1 < len(rep.Rows); i++ {
		a, b := rep.Rows[i], rep.Rows[i+1]
		if a.Operation == b.Operation && a.Operation != AllGather && a.InputBytes == b.InputBytes && a.MaxAbsVsNative != b.MaxAbsVsNative {
			t.Errorf("%s %d B: max abs vs native %v (%s) vs %v (%s)", a.Operation, a.InputBytes, a.MaxAbsVsNative, a.Algorithm, b.MaxAbsVsNative, b.Algorithm)
		}
	}

	// JSON: every field, and a lossless round trip through a file.
	b, err := rep.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, b)
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Errorf("round trip changed the report:\n%+v\n%+v", back, rep)
	}

	// Table: a line per row.
	var tb strings.Builder
	if err := rep.Table(&tb); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(tb.String(), "\n")
	for _, row := range rep.Rows {
		found := false
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) > 4 && f[0] == string(row.Operation) && f[1] == row.DType && f[2] == row.Algorithm &&
				strings.Join(f[3:5], " ") == HumanBytes(row.InputBytes) && strings.Contains(l, "✓") {
				found = true
			}
		}
		if !found {
			t.Errorf("table has no line for %s %s %d B:\n%s", row.Operation, row.Algorithm, row.InputBytes, tb.String())
		}
	}
	t.Logf("\n%s", tb.String())

	// Plots.
	for _, name := range []string{"latency.svg", "latency.png"} {
		p := filepath.Join(dir, name)
		if err := rep.Plot(p); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			t.Fatalf("%s: %d bytes, %v", name, len(data), err)
		}
		if strings.HasSuffix(name, ".png") && !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG", name)
		}
		if strings.HasSuffix(name, ".svg") && !bytes.Contains(data, []byte("<svg")) {
			t.Errorf("%s is not an SVG", name)
		}
	}
	if err := rep.Plot(filepath.Join(dir, "latency.gif")); err == nil {
		t.Error("Plot accepted a .gif")
	}
}

// TestRunOddWorldAndHalf covers W = 3 (uneven shards, rounding of
// reduce_scatter sizes) and W = 1, bf16 and the f32 accumulate mode.
func TestRunOddWorldAndHalf(t *testing.T) {
	for _, w := range []int{1, 3} {
		cfg := smallConfig()
		cfg.SizesBytes = []int{1000, 4097}
		cfg.DType = dtype.BF16
		cfg.Accumulate = detcoll.AccumulateF32
		cfg.Warmup = 0
		rep := mustRun(t, w, cfg, nil)
		checkOddReport(t, w, rep)
	}
}

func checkOddReport(t *testing.T, w int, rep *Report) {
	t.Helper()
	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
	if rep.Contract.Accumulate != "f32" {
		t.Errorf("accumulate %q", rep.Contract.Accumulate)
	}
	for _, row := range rep.Rows {
		if !row.RepeatBitwise || !row.OracleBitwise {
			t.Errorf("%s %s %d: repeat %v oracle %v", row.Operation, row.Algorithm, row.InputBytes, row.RepeatBitwise, row.OracleBitwise)
		}
		if want := int64(InputBytes(row.Operation, dtype.BF16, w, int(row.RequestedSizeBytes))); row.InputBytes != want {
			t.Errorf("%s: input %d, want %d", row.Operation, row.InputBytes, want)
		}
	}
}

func TestPlotOneSize(t *testing.T) {
	tm := newTiming([]float64{0.5, 0.7, 0.6})
	rep := &Report{WorldSize: 2, Backend: "cpu", Rows: []Row{
		{Operation: AllReduce, DType: "fp32", Algorithm: "a2a_tree", InputBytes: 4, Deterministic: tm, Native: tm},
		{Operation: AllGather, DType: "fp32", Algorithm: "direct", InputBytes: 4, Deterministic: tm, Native: Timing{}}, // native 0: not drawn
	}}
	for _, name := range []string{"one.svg", "one.png"} {
		p := filepath.Join(t.TempDir(), name)
		if err := rep.Plot(p); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := (&Report{}).Plot(filepath.Join(t.TempDir(), "empty.svg")); err == nil {
		t.Error("Plot of an empty report succeeded")
	}
}

// flipBackend corrupts the deterministic output that the runner sees on
// the ranks it names.
type flipBackend struct {
	Backend
	flip bool
}

func (b flipBackend) Prepare(ctx context.Context, spec CaseSpec) (Case, error) {
	c, err := b.Backend.Prepare(ctx, spec)
	if err != nil || !b.flip {
		return c, err
	}
	return flipCase{c}, nil
}

type flipCase struct{ Case }

func (c flipCase) Output() ([]byte, error) {
	out, err := c.Case.Output()
	if err != nil {
		return nil, err
	}
	out = bytes.Clone(out)
	out[0] ^= 1
	return out, nil
}

func TestBrokenOutputFailsOracle(t *testing.T) {
	cfg := smallConfig()
	cfg.SizesBytes = []int{4096}

	// Every rank's output broken the same way: the ranks agree and every
	// repeat is identical, but the oracle check fails.
	rep := mustRun(t, 4, cfg, func(r int, b Backend) Backend { return flipBackend{b, true} })
	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, row := range rep.Rows {
		if row.OracleBitwise {
			t.Errorf("%s %s: oracle_bitwise true for a corrupted output", row.Operation, row.Algorithm)
		}
		if !row.RepeatBitwise {
			t.Errorf("%s %s: repeat_bitwise false although every run is corrupted alike", row.Operation, row.Algorithm)
		}
	}

	// One rank broken: outside its own shard, so only the cross-rank hash can tell.
	rep = mustRun(t, 4, cfg, func(r int, b Backend) Backend { return flipBackend{b, r == 3} })
	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
	if rep.AllRankRepeatBitwise {
		t.Error("all_rank_repeat_bitwise true with one rank's output corrupted")
	}
	for _, row := range rep.Rows {
		if row.OracleBitwise {
			t.Errorf("%s %s: oracle_bitwise true with rank 3's output corrupted", row.Operation, row.Algorithm)
		}
		if row.Operation != ReduceScatter && row.RepeatBitwise {
			t.Errorf("%s %s: repeat_bitwise true although rank 3 differs", row.Operation, row.Algorithm)
		}
	}
}

// failBackend fails to prepare on one rank.
type failBackend struct{ Backend }

var errNoMemory = errors.New("out of memory (test)")

func (failBackend) Prepare(context.Context, CaseSpec) (Case, error) { return nil, errNoMemory }

func TestLocalFailureReachesEveryRank(t *testing.T) {
	cfg := smallConfig()
	reps, errs := runAll(t, 3, func(int) Config { return cfg }, func(r int, b Backend) Backend {
		if r == 1 {
			return failBackend{b}
		}
		return b
	})
	for r, err := range errs {
		if err == nil || reps[r] != nil {
			t.Fatalf("rank %d: no error", r)
		}
		if r == 1 && !errors.Is(err, errNoMemory) {
			t.Errorf("rank 1: %v", err)
		}
		if r != 1 && !errors.Is(err, errPeer) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestConfigMismatch(t *testing.T) {
	_, errs := runAll(t, 3, func(r int) Config {
		c := smallConfig()
		c.Seed = uint64(r)
		return c
	}, nil)
	for r, err := range errs {
		// The field is named, with the two ranks.
		if !errors.Is(err, ErrConfigMismatch) || !strings.Contains(err.Error(), "seed differs between rank") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	_, errs = runAll(t, 2, func(r int) Config {
		c := smallConfig()
		if r == 1 {
			c.Iterations = 0
		}
		return c
	}, nil)
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d accepted an invalid configuration on rank 1", r)
		}
	}
}

func TestInputBytes(t *testing.T) {
	cases := []struct {
		op        Op
		dt        dtype.DType
		w, req    int
		wantBytes int
	}{
		{AllReduce, dtype.FP32, 4, 4096, 4096},
		{AllReduce, dtype.FP32, 4, 4099, 4096},
		{AllReduce, dtype.FP32, 4, 1, 4},
		{AllGather, dtype.BF16, 3, 1001, 1000},
		{ReduceScatter, dtype.FP32, 3, 4096, 4092}, // 1024 elements → 1023
		{ReduceScatter, dtype.FP64, 8, 8, 64},      // at least W elements
		{ReduceScatter, dtype.FP16, 1, 3, 2},
	}
	for _, c := range cases {
		if got := InputBytes(c.op, c.dt, c.w, c.req); got != c.wantBytes {
			t.Errorf("InputBytes(%s, %v, W=%d, %d) = %d, want %d", c.op, c.dt, c.w, c.req, got, c.wantBytes)
		}
	}
}

func TestBusBytes(t *testing.T) {
	// nccl-tests: all_reduce 2(W-1)/W·S; all_gather (W-1)/W·(W·S); reduce_scatter (W-1)/W·S.
	if got := BusBytes(AllReduce, 4, 1000); got != 1500 {
		t.Errorf("all_reduce: %g", got)
	}
	if got := BusBytes(AllGather, 4, 1000); got != 3000 {
		t.Errorf("all_gather: %g", got)
	}
	if got := BusBytes(ReduceScatter, 4, 1000); got != 750 {
		t.Errorf("reduce_scatter: %g", got)
	}
	if got := BusBytes(AllReduce, 1, 1000); got != 0 {
		t.Errorf("W=1: %g", got)
	}
}

func TestParseOp(t *testing.T) {
	for s, want := range map[string]Op{"all_reduce": AllReduce, "allreduce": AllReduce, "All-Gather": AllGather, "reduce_scatter": ReduceScatter} {
		if got, err := ParseOp(s); err != nil || got != want {
			t.Errorf("ParseOp(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseOp("broadcast"); err == nil {
		t.Error("ParseOp accepted broadcast")
	}
}

func TestFloatJSON(t *testing.T) {
	for _, v := range []float64{0, 1.5, -2e-300, math.Inf(1), math.Inf(-1), math.NaN()} {
		b, err := json.Marshal(Float(v))
		if err != nil {
			t.Fatal(err)
		}
		var back Float
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !(float64(back) == v || math.IsNaN(v) && math.IsNaN(float64(back))) {
			t.Errorf("%v → %s → %v", v, b, back)
		}
	}
}

func TestMaxAbsDiff(t *testing.T) {
	nan := float32(math.NaN())
	f := func(v ...float32) []byte { return detcoll.Float32Bytes(v) }
	inf := float32(math.Inf(1))
	cases := []struct {
		a, b []byte
		want float64
	}{
		{f(1, 2, 3), f(1, 2, 3), 0},
		{f(1, 2, 3), f(1, 2.5, 2), 1},
		{f(nan, 1), f(nan, 1), 0},         // both NaN: skipped
		{f(nan, 1), f(0, 1), math.Inf(1)}, // one NaN: +Inf
		{f(inf, 1), f(inf, 1), 0},
		{f(inf, 1), f(-inf, 1), math.Inf(1)},
	}
	for i, c := range cases {
		if got := maxAbsDiff(dtype.FP32, c.a, c.b); got != c.want {
			t.Errorf("case %d: %g, want %g", i, got, c.want)
		}
	}
}

func TestFillInput(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.FP32, dtype.FP64, dtype.BF16, dtype.FP16} {
		whole := make([]byte, 100*dt.Size())
		FillInput(whole, dt, 7, 2, 0)
		part := make([]byte, 30*dt.Size())
		FillInput(part, dt, 7, 2, 50)
		if !bytes.Equal(part, whole[50*dt.Size():80*dt.Size()]) {
			t.Errorf("%v: a slice of the stream differs from the stream", dt)
		}
		other := make([]byte, len(whole))
		FillInput(other, dt, 7, 3, 0)
		if bytes.Equal(other, whole) {
			t.Errorf("%v: ranks 2 and 3 have the same input", dt)
		}
		for i := 0; i < 100; i++ {
			v := math.Abs(elemFloat(dt, whole, i))
			if !(v >= 0x1p-11 && v < 8) {
				t.Errorf("%v: element %d = %g out of range", dt, i, v)
			}
		}
	}
}

func TestReadJSONRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"other schema": `{"schema":"detcoll.bench.v2"}`,
		"no schema":    `{"rows":[]}`,
		"incomplete":   `{"schema":"detcoll.bench.v1","rows":[]}`,
		"not json":     `schema`,
	} {
		if _, err := ParseJSON([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 512: "512 B", 4096: "4 KiB", 1536: "1.5 KiB", 1 << 20: "1 MiB", 256 << 20: "256 MiB", 1000: "1000 B", 4092: "4 KiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestProgressPlain(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, 4)
	p.MinInterval = time.Hour
	for i := 0; i <= 4; i++ {
		p.Update(i, 4)
	}
	p.Finish()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "bench: 0/4 rows") || !strings.HasPrefix(lines[1], "bench: 4/4 rows") {
		t.Errorf("plain progress:\n%s", buf.String())
	}
	buf.Reset()
	p = NewProgress(&buf, 4)
	p.MinInterval = 0
	p.Update(1, 4)
	p.Finish()
	if !strings.Contains(buf.String(), "bench: 1/4 rows") || !strings.Contains(buf.String(), "stopped after 1/4") {
		t.Errorf("interrupted progress:\n%s", buf.String())
	}
}

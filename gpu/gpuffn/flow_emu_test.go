package gpuffn

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
)

// rankT is the tlog of one emulated rank: errors are collected, Fatalf and
// Skipf end the rank's goroutine (recovered in run).
type rankT struct {
	t       *testing.T
	rank    int
	mu      sync.Mutex
	errs    []string
	fatal   string
	skipped string
}

type rankStop struct{}

func (r *rankT) Helper() {}
func (r *rankT) Logf(format string, args ...any) {
	r.t.Logf("[emulated rank %d] %s", r.rank, fmt.Sprintf(format, args...))
}
func (r *rankT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *rankT) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(rankStop{})
}
func (r *rankT) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(rankStop{})
}

func (r *rankT) run(fn func()) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(rankStop); !ok {
				panic(p)
			}
		}
	}()
	fn()
}

type emuOpts struct {
	failTPWLayer int // rank whose TP = W layer cannot be made (-1: none)
	failNative   int // rank whose TP = W layer with NCCL's all-reduce cannot be made (-1: none)
	corruptRank  int // rank whose TP = W GEMMs flip a bit (-1: none)
}

// runFlowEmulated runs the GPU tests' flow (runShapeEnv) on w goroutine
// ranks whose layers run on hostOps, with the report written to out.
func runFlowEmulated(t *testing.T, w int, sh shapeSpec, o emuOpts) []*rankT {
	host := newComms(t, w)
	tpc := newComms(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rts := make([]*rankT, w)
	var wg sync.WaitGroup
	for r := 0; r < w; r++ {
		rts[r] = &rankT{t: t, rank: r}
		env := &testEnv{host: host[r], w: w, rank: r,
			device:   deviceInfo{Rank: r, Host: "emulated", Ordinal: r, Name: "host emulation", CC: "0.0"},
			versions: map[string]string{"cublas": "emulated"},
			layer: func(tpW bool, cfg Config) (*Layer, error) {
				tp, rank, c := 1, 0, (*detcoll.Comm)(nil)
				if tpW {
					tp, rank, c = w, r, tpc[r]
					if r == o.failTPWLayer {
						return nil, fmt.Errorf("injected failure making the layer")
					}
					if r == o.failNative && cfg.NativeCollectives {
						return nil, fmt.Errorf("injected failure of the native run")
					}
				}
				l, err := newLayer(cfg, tp, rank)
				if err != nil {
					return nil, err
				}
				ho := newHostOps(c)
				ho.corrupt = tpW && r == o.corruptRank
				l.ops = ho
				return l, nil
			}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rts[r].run(func() { runShapeEnv(rts[r], ctx, env, sh) })
		}()
	}
	wg.Wait()
	return rts
}

var emuShape = shapeSpec{name: "emulated", h: 64, i: 128, t: 7, warmup: 1, iters: 3, pedantic: true}

// TestFlowEmulated: the GPU tests' whole flow — every step, the status
// exchanges, the comparisons, the float64 reference, timing statistics and
// the report — runs clean on two emulated ranks.
func TestFlowEmulated(t *testing.T) {
	out := t.TempDir()
	t.Setenv("OUT", out)
	for _, rt := range runFlowEmulated(t, 2, emuShape, emuOpts{failTPWLayer: -1, failNative: -1, corruptRank: -1}) {
		for _, e := range rt.errs {
			t.Errorf("[rank %d] %s", rt.rank, e)
		}
		if rt.fatal != "" || rt.skipped != "" {
			t.Errorf("[rank %d] fatal %q skipped %q", rt.rank, rt.fatal, rt.skipped)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "gpuffn-emulated.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"all bitwise checks passed", "| fwd.allreduce_y | yes |", "| bwd.allreduce_dx_lanes | yes |",
		"| fwd.total |", "| bwd.weight_grads |", "rank 1's TP=2 dDown == this rank's TP=1 dDown | true",
		"TP=1 results bitwise identical on all 2 GPUs | true", "pedantic math: TP=2 == TP=1", "host wall time"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	var rep report
	b, err := os.ReadFile(filepath.Join(out, "gpuffn-emulated.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.AllOK || len(rep.Phases) != 12 || rep.Phases[0].TPW == nil || len(rep.Phases[0].TPW.SamplesUS) != 3 {
		t.Errorf("report: ok %v, %d phases, first %+v", rep.AllOK, len(rep.Phases), rep.Phases[0])
	}
	for name, e := range rep.RelErr {
		if e <= 0 || e > 2e-2 {
			t.Errorf("relative error of %s = %g", name, e)
		}
	}
	t.Logf("report:\n%s", md)
}

// TestFlowEmulatedCatchesMismatch: if one rank's TP = 2 results differ
// (one flipped bit per GEMM), every rank reports failed checks, none hangs,
// and the report says so.
func TestFlowEmulatedCatchesMismatch(t *testing.T) {
	out := t.TempDir()
	t.Setenv("OUT", out)
	sh := emuShape
	sh.pedantic, sh.iters = false, 1
	for _, rt := range runFlowEmulated(t, 2, sh, emuOpts{failTPWLayer: -1, failNative: -1, corruptRank: 1}) {
		if rt.fatal != "" || len(rt.errs) == 0 {
			t.Errorf("[rank %d] fatal %q, %d errors: the mismatch went unnoticed", rt.rank, rt.fatal, len(rt.errs))
		}
		t.Logf("[rank %d] first error: %v", rt.rank, rt.errs[0])
	}
	md, err := os.ReadFile(filepath.Join(out, "gpuffn-emulated.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "SOME CHECKS FAILED") || !strings.Contains(string(md), "| rank 1: TP=2 y == TP=1 y (same GPU) | false |") {
		t.Errorf("report:\n%s", md)
	}
}

// TestFlowEmulatedFailure: a rank that cannot make its layer fails the
// test on every rank, with its reason, before any collective.
func TestFlowEmulatedFailure(t *testing.T) {
	t.Setenv("OUT", "")
	for _, rt := range runFlowEmulated(t, 2, emuShape, emuOpts{failTPWLayer: 1, failNative: -1, corruptRank: -1}) {
		if !strings.Contains(rt.fatal, "[rank 1] injected failure") || !strings.Contains(rt.fatal, "TP = 2: creating the layer") {
			t.Errorf("[rank %d] fatal %q", rt.rank, rt.fatal)
		}
	}
}

// TestFlowEmulatedOptionalFailure: a failing optional run (NCCL's
// all-reduce) is a failed check in the report, not the end of the test.
func TestFlowEmulatedOptionalFailure(t *testing.T) {
	out := t.TempDir()
	t.Setenv("OUT", out)
	sh := emuShape
	sh.iters = 1
	for _, rt := range runFlowEmulated(t, 2, sh, emuOpts{failTPWLayer: -1, failNative: 0, corruptRank: -1}) {
		if rt.fatal != "" || len(rt.errs) != 1 || !strings.Contains(rt.errs[0], "injected failure of the native run") {
			t.Errorf("[rank %d] fatal %q, errors %q", rt.rank, rt.fatal, rt.errs)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "gpuffn-emulated.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "SOME CHECKS FAILED") || !strings.Contains(string(md), "pedantic math: TP=2 == TP=1 (y, dx, weight grads) | true") {
		t.Errorf("report:\n%s", md)
	}
}

// TestOpsCheckHarness: the body of TestGPUOpsMatchEmulator, with a second
// emulator standing in for the GPU, finds no difference; with one flipped
// bit per GEMM it finds every GEMM kind.
func TestOpsCheckHarness(t *testing.T) {
	mk := func(corrupt bool) *Layer {
		l, err := newLayer(opsCheckConfig, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		ho := newHostOps(nil)
		ho.corrupt = corrupt
		l.ops = ho
		return l
	}
	bad, err := opsCheck(mk(false), mk(false))
	if err != nil || len(bad) != 0 {
		t.Fatalf("clean: %v %v", err, bad)
	}
	bad, err = opsCheck(mk(true), mk(false))
	if err != nil || len(bad) != 12 {
		t.Fatalf("corrupt: %v, %d differences: %v", err, len(bad), bad)
	}
	t.Logf("first difference found: %s", bad[0])
}

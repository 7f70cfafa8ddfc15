//go:build linux

package shm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// TestCalibrationDecides: one read wins only against both window copies.
func TestCalibrationDecides(t *testing.T) {
	for _, c := range []struct {
		c    Calibration
		want bool
	}{
		{Calibration{In: 5 * time.Microsecond, Out: 15 * time.Microsecond, Read: 28 * time.Microsecond}, false},  // 2026-12-07
		{Calibration{In: 25 * time.Microsecond, Out: 180 * time.Microsecond, Read: 60 * time.Microsecond}, true}, // 2026-12-06, 1 MiB
		{Calibration{In: 10 * time.Microsecond, Out: 10 * time.Microsecond, Read: 20 * time.Microsecond}, false},
	} {
		if got := c.c.ReadWins(); got != c.want {
			t.Errorf("%v: ReadWins %v, want %v", c.c, got, c.want)
		}
	}
}

// TestExposeModes: ExposeAuto times at Connect and exposes only where the
// read won; ExposeAlways exposes untimed; ExposeNever declines, and every
// rank then gets ErrNoExpose; ranks whose modes differ connect (no rank
// waits for a calibration another skips) and agree on the window.
func TestExposeModes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name  string
		modes [2]ExposeMode
	}{
		{"auto", [2]ExposeMode{ExposeAuto, ExposeAuto}},
		{"always", [2]ExposeMode{ExposeAlways, ExposeAlways}},
		{"never", [2]ExposeMode{ExposeNever, ExposeNever}},
		{"mixed", [2]ExposeMode{ExposeAuto, ExposeNever}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, prefix := store.NewMemory(), uniquePrefix("exposemode")
			ts := make([]*Transport, 2)
			errs := make([]error, 2)
			done := make(chan int, 2)
			for r := range ts {
				go func() {
					ts[r], errs[r] = Connect(ctx, st, prefix, r, 2, Options{Expose: c.modes[r]})
					done <- r
				}()
			}
			<-done
			<-done
			noErrors(t, "connect", errs)
			defer closeAll(ts)
			if !ts[0].readsAll() || ts[0].cpus < 2 {
				t.Skip("this process cannot read its own memory with process_vm_readv, or has one CPU: no exposure to choose")
			}
			c0, timed := ts[0].Calibration()
			switch c.name {
			case "auto":
				if !timed || c0.Bytes != calibBytes || c0.In <= 0 || c0.Out <= 0 || c0.Read <= 0 {
					t.Fatalf("auto: calibration %v, timed %v", c0, timed)
				}
				for r, tr := range ts {
					if tr.exposeOK != tr.calib.ReadWins() {
						t.Errorf("rank %d: exposes %v after %v", r, tr.exposeOK, tr.calib)
					}
				}
				t.Logf("rank 0: %v (read wins: %v)", c0, c0.ReadWins())
			default:
				if timed {
					t.Errorf("%s: timed at Connect (%v)", c.name, c0)
				}
			}
			bufs := [][]byte{pattern(4096, 0), pattern(4096, 1)}
			errs = eachRank(ts, func(r int, tr *Transport) error {
				if err := tr.Expose(ctx, transport.Tag{Phase: 7}, bufs[r]); err != nil {
					return err
				}
				if _, err := tr.Exposed(ctx); err != nil {
					return err
				}
				return tr.Unexpose(ctx)
			})
			want := c.name == "always" || c.name == "auto" && ts[0].exposeOK && ts[1].exposeOK
			for r, err := range errs {
				switch {
				case want && err != nil:
					t.Errorf("rank %d: %v, want an exposure", r, err)
				case !want && !errors.Is(err, transport.ErrNoExpose):
					t.Errorf("rank %d: %v, want ErrNoExpose", r, err)
				}
			}
		})
	}
}

// TestExposeModeInvalid: a mode that is none of the three fails Connect,
// naming the variable; the variable is read when the option is empty.
func TestExposeModeInvalid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Connect(ctx, store.NewMemory(), uniquePrefix("exposebad"), 0, 2, Options{Expose: "sometimes"})
	if err == nil || !strings.Contains(err.Error(), EnvExpose) || !strings.Contains(err.Error(), "sometimes") {
		t.Fatalf("Options.Expose sometimes: %v", err)
	}
	t.Setenv(EnvExpose, "often")
	_, err = Connect(ctx, store.NewMemory(), uniquePrefix("exposebad"), 0, 2, Options{})
	if err == nil || !strings.Contains(err.Error(), "often") {
		t.Fatalf("%s=often: %v", EnvExpose, err)
	}
	t.Setenv(EnvExpose, string(ExposeNever))
	if got := (Options{}).withDefaults(2, 2).Expose; got != ExposeNever {
		t.Fatalf("%s=never: mode %q", EnvExpose, got)
	}
}

package shm

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// Calibrating exposures. Whether a rank should read its peers' buffers with
// process_vm_readv (exposures, expose_linux.go) or go through the window
// depends on the host, not on the code: the window costs the owner a copy
// into its slot and the reader a copy out of it across cores, an exposure
// costs the reader one process_vm_readv, whose page pinning is what varies.
// On this project's 2-core machine the balance turned twice: on 2026-12-06
// the window's AllGather of 1 MiB at W = 2 took 210–250 µs and a CMA read
// 55–67 µs, so exposures won by 2×; on 2026-12-07 (another host kernel) a
// CMA read of 256 KiB took 28 µs, and the window beat exposures by 1.5–1.7×
// in AllGather and AllReduce from 64 KiB to 16 MiB (docs/shm.md,
// "Calibrated exposures"). So with ExposeAuto every rank times both at
// Connect, on the segment and on its peers, and takes part in exposures
// only where the read was the faster; since an exposure needs every rank
// willing (Exposed), one rank that measured otherwise makes all use the
// window, together.

const (
	calibBytes  = 256 << 10 // what one timed copy moves (or the slot, if smaller)
	calibRounds = 5         // rounds, each timed once; the medians decide
)

// Calibration is what Connect measured to choose between exposures and the
// window (ExposeAuto), per copy of Bytes bytes, medians of the rounds.
type Calibration struct {
	Bytes int
	In    time.Duration // this rank's buffer into its own slot
	Out   time.Duration // the next rank's slot into a buffer of this rank's, across cores
	Read  time.Duration // process_vm_readv of the next rank's buffer
}

// ReadWins reports whether one read costs less than the window's two copies.
func (c Calibration) ReadWins() bool { return c.Read < c.In+c.Out }

func (c Calibration) String() string {
	return fmt.Sprintf("%d bytes: slot in %v, slot out %v, process_vm_readv %v", c.Bytes, c.In, c.Out, c.Read)
}

// Calibration returns what Connect measured, and false when it measured
// nothing (not ExposeAuto, a group that does not expose, or a rank that
// could not take part).
func (t *Transport) Calibration() (Calibration, bool) { return t.calib, t.calibrated }

func calibKey(prefix, what string, round, r int) string {
	return prefix + "/shm/calib/" + what + "/" + strconv.Itoa(round) + "/" + strconv.Itoa(r)
}

// chooseExposure sets t.exposeOK from the options and, with ExposeAuto,
// from the calibration. Every rank of the group calls it during setup.
func (t *Transport) chooseExposure(ctx context.Context) error {
	t.exposeOK = t.opt.Expose == ExposeAlways
	// The ranks time in lockstep, so all must agree to take part: each says
	// whether it can (and where its buffer is) before any round, whatever
	// its own mode, so that a rank whose options differ makes the others
	// skip rather than wait for it.
	n := min(calibBytes, t.opt.WindowBytes)
	can := t.opt.Expose == ExposeAuto && n > 0 && t.size <= t.cpus && t.readsAll()
	var buf []byte
	v := "skip"
	if can {
		buf = make([]byte, n)
		for i := range buf {
			buf[i] = byte(i)
		}
		v = "ok " + strconv.FormatUint(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), 10)
	}
	if err := t.st.Set(ctx, calibKey(t.prefix, "join", 0, t.rank), []byte(v)); err != nil {
		return fmt.Errorf("shm: publishing rank %d's calibration: %w", t.rank, err)
	}
	next := (t.rank + 1) % t.size
	var peerBuf uintptr
	all := can
	for p := 0; p < t.size; p++ {
		if p == t.rank {
			continue
		}
		got, err := t.st.Get(ctx, calibKey(t.prefix, "join", 0, p))
		if err != nil {
			return fmt.Errorf("shm: waiting for rank %d's calibration: %w", p, err)
		}
		s, ok := strings.CutPrefix(string(got), "ok ")
		if !ok {
			all = false
			continue
		}
		a, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("shm: rank %d published calibration %q", p, got)
		}
		if p == next {
			peerBuf = uintptr(a)
		}
	}
	if !all {
		return nil
	}
	c, err := t.calibrate(ctx, buf, next, peerBuf)
	if err != nil {
		return err
	}
	t.calib, t.calibrated, t.exposeOK = c, true, c.ReadWins()
	return nil
}

// calibrate runs the timed rounds: this rank fills its slot, all meet, each
// copies the next rank's slot out and reads the next rank's buffer, all meet
// again.
func (t *Transport) calibrate(ctx context.Context, buf []byte, next int, peerBuf uintptr) (Calibration, error) {
	n := len(buf)
	mine := t.seg.mem[t.seg.l.winSlot(t.rank, 0):][:n]
	theirs := t.seg.mem[t.seg.l.winSlot(next, 0):][:n]
	dst := make([]byte, n)
	copy(dst, buf) // its pages faulted in before any timing
	var in, out, read []time.Duration
	meet := func(what string, round int) error {
		if err := t.st.Set(ctx, calibKey(t.prefix, what, round, t.rank), nil); err != nil {
			return fmt.Errorf("shm: calibration round %d: %w", round, err)
		}
		for p := 0; p < t.size; p++ {
			if p != t.rank {
				if _, err := t.st.Get(ctx, calibKey(t.prefix, what, round, p)); err != nil {
					return fmt.Errorf("shm: calibration round %d, waiting for rank %d: %w", round, p, err)
				}
			}
		}
		return nil
	}
	for round := 1; round <= calibRounds; round++ {
		buf[0] = byte(round)
		t0 := time.Now()
		copy(mine, buf) // below 1 MiB: through the cache, as the window's copies go
		in = append(in, time.Since(t0))
		if err := meet("filled", round); err != nil {
			return Calibration{}, err
		}
		t0 = time.Now()
		copy(dst, theirs)
		out = append(out, time.Since(t0))
		t0 = time.Now()
		err := readRemote(t.procs[next].pid, dst, peerBuf)
		read = append(read, time.Since(t0))
		if err != nil {
			return Calibration{}, fmt.Errorf("shm: calibration read of rank %d: %w", next, err)
		}
		if err := meet("read", round); err != nil {
			return Calibration{}, err
		}
	}
	runtime.KeepAlive(buf) // the next rank read it until the last meeting
	return Calibration{Bytes: n, In: median(in), Out: median(out), Read: median(read)}, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

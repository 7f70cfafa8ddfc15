package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/detcoll/detcoll"
)

// measure runs warm-up and the samples: per sample a barrier, Iterations
// iterations, and the slowest rank's per-iteration mean.
func (r *runner) measure(ctx context.Context, run func(ctx context.Context, iters int) (time.Duration, error)) (Timing, error) {
	if r.cfg.Warmup > 0 {
		pctx, cancel := r.phase(ctx)
		_, err := run(pctx, r.cfg.Warmup)
		err = r.agree(pctx, err, "warm-up")
		cancel()
		if err != nil {
			return Timing{}, err
		}
	}
	samples := make([]float64, r.cfg.Samples)
	for s := range samples {
		pctx, cancel := r.phase(ctx)
		defer cancel()
		if err := r.comm.Barrier(pctx); err != nil {
			return Timing{}, fmt.Errorf("bench: barrier: %w", err)
		}
		d, err := run(pctx, r.cfg.Iterations)
		us := d.Seconds() * 1e6
		if err != nil {
			us = math.NaN() // tells the other ranks
		}
		var mine [8]byte
		binary.LittleEndian.PutUint64(mine[:], math.Float64bits(us))
		all, gerr := r.gather(pctx, mine[:])
		if err != nil {
			return Timing{}, err
		}
		if gerr != nil {
			return Timing{}, fmt.Errorf("bench: collecting times: %w", gerr)
		}
		slowest := 0.0
		for p := 0; p < r.w; p++ {
			v := math.Float64frombits(binary.LittleEndian.Uint64(all[8*p:]))
			if math.IsNaN(v) {
				return Timing{}, fmt.Errorf("bench: rank %d: %w", p, errPeer)
			}
			slowest = max(slowest, v)
		}
		samples[s] = slowest
	}
	return newTiming(samples), nil
}

// rowMsgBytes is the size of one rank's row summary.
const rowMsgBytes = 56

// runRow measures one algorithm on a prepared case and runs the checks.
func (r *runner) runRow(ctx context.Context, c Case, spec CaseSpec, alg detcoll.Algorithm) (Row, error) {
	acc := r.cfg.Accumulate
	det := func(ctx context.Context, iters int) (time.Duration, error) {
		return c.RunDeterministic(ctx, alg, acc, iters)
	}
	// First run, untimed, into a poisoned output: the reference for the repeat check.
	c.ReleaseWorkspace()
	pctx, cancel := r.phase(ctx)
	defer cancel()
	first, err := firstOutput(pctx, c, det)
	if err := r.agree(pctx, err, "deterministic first run"); err != nil {
		return Row{}, err
	}
	timing, err := r.measure(ctx, det)
	if err != nil {
		return Row{}, err
	}

	// Local checks on the last timed iteration's output.
	var msg [rowMsgBytes]byte
	cctx, ccancel := r.phase(ctx)
	defer ccancel()
	lerr := r.checkOutput(c, spec, first, &msg)
	if lerr != nil {
		msg[0] = 1
	}
	all, gerr := r.gather(cctx, msg[:])
	if lerr != nil {
		return Row{}, lerr
	}
	if gerr != nil {
		return Row{}, fmt.Errorf("bench: collecting checks: %w", gerr)
	}
	row, err := r.rowFromChecks(spec, timing, all)
	if err != nil {
		return Row{}, err
	}
	if ic, ok := c.(InPlaceCase); ok && r.cfg.InPlace && ic.InPlaceSupported() {
		ip, err := r.runInPlace(ctx, ic, spec, alg)
		if err != nil {
			return Row{}, err
		}
		row.InPlace = ip
	}
	return row, nil
}

// firstOutput resets c's output, runs det once and returns a copy of the
// output.
func firstOutput(ctx context.Context, c Case, det func(ctx context.Context, iters int) (time.Duration, error)) ([]byte, error) {
	if err := c.ResetOutput(); err != nil {
		return nil, err
	}
	if _, err := det(ctx, 1); err != nil {
		return nil, err
	}
	out, err := c.Output()
	return bytes.Clone(out), err
}

// checkOutput checks c's output on this rank and fills msg, the rank's row
// summary: [1] the output repeats first bitwise, [2] it matches the oracle,
// then the output's hash, the largest difference from the native output,
// the workspace and peak allocations and the wrong elements.
func (r *runner) checkOutput(c Case, spec CaseSpec, first []byte, msg *[rowMsgBytes]byte) error {
	out, err := c.Output()
	if err != nil {
		return err
	}
	if len(out) != spec.OutputBytes() {
		return fmt.Errorf("backend output has %d bytes, want %d", len(out), spec.OutputBytes())
	}
	nat, err := c.NativeOutput()
	if err != nil {
		return err
	}
	if len(nat) != len(out) {
		return fmt.Errorf("backend native output has %d bytes, want %d", len(nat), len(out))
	}
	lo, hi := r.checkRange(spec)
	sz := spec.DType.Size()
	if bytes.Equal(first, out) {
		msg[1] = 1
	}
	wrong, err := verifyOracle(spec, r.cfg.Accumulate, out, lo, hi)
	if err != nil {
		return err
	}
	if wrong == 0 {
		msg[2] = 1
	}
	binary.LittleEndian.PutUint64(msg[48:], uint64(wrong))
	binary.LittleEndian.PutUint64(msg[8:], hashBytes(out))
	binary.LittleEndian.PutUint64(msg[16:], math.Float64bits(maxAbsDiff(spec.DType, out[lo*sz:hi*sz], nat[lo*sz:hi*sz])))
	ret, peak := c.Workspace()
	binary.LittleEndian.PutUint64(msg[24:], uint64(ret))
	binary.LittleEndian.PutUint64(msg[32:], uint64(peak))
	binary.LittleEndian.PutUint64(msg[40:], uint64(c.NativePeak()))
	return nil
}

// rowFromChecks is the row of every rank's summary (all, as checkOutput
// fills them): bitwise only if every rank is, the largest figures, the sum
// of the wrong elements.
func (r *runner) rowFromChecks(spec CaseSpec, timing Timing, all []byte) (Row, error) {
	row := Row{Operation: spec.Op, DType: spec.DType.String(), InputBytes: int64(spec.InputBytes), Deterministic: timing,
		RepeatBitwise: true, OracleBitwise: true}
	sameEverywhere := spec.Op != ReduceScatter // reduce_scatter outputs differ by rank by design
	maxAbs := 0.0
	for p := 0; p < r.w; p++ {
		m := all[p*rowMsgBytes : (p+1)*rowMsgBytes]
		if m[0] != 0 {
			return Row{}, fmt.Errorf("bench: checks: rank %d: %w", p, errPeer)
		}
		equal := !sameEverywhere || bytes.Equal(m[8:16], all[8:16])
		row.RepeatBitwise = row.RepeatBitwise && m[1] == 1 && equal
		row.OracleBitwise = row.OracleBitwise && m[2] == 1 && equal
		maxAbs = max(maxAbs, math.Float64frombits(binary.LittleEndian.Uint64(m[16:])))
		row.WorkspaceBytes = max(row.WorkspaceBytes, int64(binary.LittleEndian.Uint64(m[24:])))
		row.PeakAllocatedBytes = max(row.PeakAllocatedBytes, int64(binary.LittleEndian.Uint64(m[32:])))
		row.NativePeakAllocatedBytes = max(row.NativePeakAllocatedBytes, int64(binary.LittleEndian.Uint64(m[40:])))
		row.WrongElements += int64(binary.LittleEndian.Uint64(m[48:]))
	}
	row.MaxAbsVsNative = Float(maxAbs)
	return row, nil
}

// runInPlace measures and checks one algorithm in place: the samples (on
// drifting data, as nccl-tests), then one run from the input, checked
// against the oracle on every rank.
func (r *runner) runInPlace(ctx context.Context, c InPlaceCase, spec CaseSpec, alg detcoll.Algorithm) (*InPlace, error) {
	acc := r.cfg.Accumulate
	pctx, cancel := r.phase(ctx)
	err := r.agree(pctx, c.ResetInPlace(), "in-place set-up")
	cancel()
	if err != nil {
		return nil, err
	}
	timing, err := r.measure(ctx, func(ctx context.Context, iters int) (time.Duration, error) {
		return c.RunInPlace(ctx, alg, acc, iters)
	})
	if err != nil {
		return nil, err
	}
	pctx, cancel = r.phase(ctx)
	defer cancel()
	var msg [24]byte
	lerr := func() error {
		if err := c.ResetInPlace(); err != nil {
			return err
		}
		if _, err := c.RunInPlace(pctx, alg, acc, 1); err != nil {
			return err
		}
		out, err := c.InPlaceOutput()
		if err != nil {
			return err
		}
		if len(out) != spec.OutputBytes() {
			return fmt.Errorf("backend in-place output has %d bytes, want %d", len(out), spec.OutputBytes())
		}
		lo, hi := r.checkRange(spec)
		wrong, err := verifyOracle(spec, acc, out, lo, hi)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(msg[8:], uint64(wrong))
		binary.LittleEndian.PutUint64(msg[16:], hashBytes(out))
		return nil
	}()
	if lerr != nil {
		msg[0] = 1
	}
	all, gerr := r.gather(pctx, msg[:])
	if lerr != nil {
		return nil, fmt.Errorf("bench: in place: %w", lerr)
	}
	if gerr != nil {
		return nil, fmt.Errorf("bench: collecting in-place checks: %w", gerr)
	}
	ip := &InPlace{Timing: timing, OracleBitwise: true}
	for p := 0; p < r.w; p++ {
		m := all[p*24 : (p+1)*24]
		if m[0] != 0 {
			return nil, fmt.Errorf("bench: in-place checks: rank %d: %w", p, errPeer)
		}
		ip.WrongElements += int64(binary.LittleEndian.Uint64(m[8:]))
		ip.OracleBitwise = ip.OracleBitwise && bytes.Equal(m[16:24], all[16:24])
	}
	ip.OracleBitwise = ip.OracleBitwise && ip.WrongElements == 0
	return ip, nil
}

// measureSymmetric measures the native collective on symmetric buffers
// when every rank's case can (SymmetricCase, and the library has them);
// nil when any rank cannot.
func (r *runner) measureSymmetric(ctx context.Context, c Case) (*Timing, error) {
	sc, ok := c.(SymmetricCase)
	var local error
	if !ok {
		local = ErrNoSymmetric
	} else {
		pctx, cancel := r.phase(ctx)
		local = sc.PrepareSymmetric(pctx)
		cancel()
	}
	// Every rank learns whether every rank can; a rank that cannot is not
	// a failure, it leaves the column out.
	var b [1]byte
	if local != nil {
		b[0] = 1
		if !errors.Is(local, ErrNoSymmetric) {
			b[0] = 2
		}
	}
	pctx, cancel := r.phase(ctx)
	all, err := r.gather(pctx, b[:])
	cancel()
	if err != nil {
		return nil, fmt.Errorf("bench: agreeing on symmetric buffers: %w", err)
	}
	for p, v := range all {
		switch {
		case v == 2 && p == r.rank:
			return nil, fmt.Errorf("bench: preparing symmetric buffers: %w", local)
		case v == 2:
			return nil, fmt.Errorf("bench: preparing symmetric buffers: rank %d: %w", p, errPeer)
		case v == 1:
			return nil, nil
		}
	}
	pctx, cancel = r.phase(ctx)
	_, err = sc.RunNativeSymmetric(pctx, 1)
	err = r.agree(pctx, err, "native first run on symmetric buffers")
	cancel()
	if err != nil {
		return nil, err
	}
	t, err := r.measure(ctx, sc.RunNativeSymmetric)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// finish computes the derived figures of a row.
func (row *Row) finish(w int) {
	det, nat := row.Deterministic.MedianUS, row.Native.MedianUS
	if det > 0 && nat > 0 {
		row.LatencyRatioVsNativeDefault = det / nat
	}
	row.NativeBest = "default"
	if s := row.NativeSymmetric; s != nil && s.MedianUS > 0 && (s.MedianUS < nat || !(nat > 0)) {
		row.NativeBest, nat = "symmetric", s.MedianUS
	}
	if det > 0 && nat > 0 {
		row.LatencyRatioVsNative = det / nat
	}
	row.InputGBps = gbps(float64(row.InputBytes), det)
	row.NativeInputGBps = gbps(float64(row.InputBytes), nat)
	bus := BusBytes(row.Operation, w, int(row.InputBytes))
	row.BusGBps = gbps(bus, det)
	row.NativeBusGBps = gbps(bus, nat)
}

// gbps is bytes per us microseconds in 1e9 bytes per second (0 when us is not positive).
func gbps(bytes, us float64) float64 {
	if !(us > 0) {
		return 0
	}
	return bytes / (us * 1e3)
}

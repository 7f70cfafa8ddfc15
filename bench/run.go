package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/tree"
)

// Run runs the benchmark described by cfg on this rank. Every rank of comm
// calls it with the same cfg and its own backend; comm is the control plane
// (barriers, the slowest-rank reductions, the checks) and, for the CPU
// backend, also the communicator under test. Every rank returns the same
// report (started_at is rank 0's clock). progress, when not nil, is called
// with (0, total) first and after every row with the rows done.
//
// A local failure on one rank (a backend that cannot prepare a case, a
// native run that fails) is reported to every rank at the next agreement
// point, so all ranks return an error rather than waiting for each other.
func Run(ctx context.Context, comm *detcoll.Comm, backend Backend, cfg Config, progress func(done, total int)) (*Report, error) {
	if comm == nil || backend == nil {
		return nil, fmt.Errorf("bench: Run needs a Comm and a Backend")
	}
	r := &runner{comm: comm, backend: backend, w: comm.Size(), rank: comm.Rank()}
	ncfg, cerr := cfg.normalize()
	start := time.Now().UTC()
	if err := r.agreeConfig(ctx, ncfg, cerr, &start); err != nil {
		return nil, err
	}
	r.cfg = ncfg
	cfg = ncfg

	rep := &Report{
		Schema:         SchemaV1,
		DetcollVersion: cfg.DetcollVersion,
		StartedAt:      start.Format(time.RFC3339),
		WorldSize:      r.w,
		Nodes:          cfg.Nodes,
		Device:         backend.Device(),
		Backend:        backend.Name(),
		Contract:       Contract{Version: detcoll.ContractVersion, Tree: ContractTree, Accumulate: cfg.Accumulate.String()},
		Warmup:         cfg.Warmup,
		Iterations:     cfg.Iterations,
		Samples:        cfg.Samples,
		Graph:          cfg.Graph,
		Seed:           cfg.Seed,
		Rows:           []Row{},
	}
	if rep.DetcollVersion == "" {
		rep.DetcollVersion = moduleVersion()
	}
	build := cfg.Build
	if build.Commit == "" {
		build = ResolveBuild("", "")
	}
	rep.GitCommit, rep.GitDirty, rep.GitCommitSource = build.Commit, build.Dirty, build.Source
	if b, ok := backend.(Baseliner); ok {
		rep.Baseline = b.Baseline()
	}
	if n, ok := comm.Transport().(transport.Namer); ok {
		rep.Transport = n.Name()
	}
	if rep.Device.Names == nil {
		rep.Device.Names = []string{}
	}

	if cfg.OnStart != nil {
		cfg.OnStart(rep)
	}
	total := 0
	for _, op := range cfg.Operations {
		names, _ := cfg.rowAlgorithms(op)
		total += len(cfg.SizesBytes) * len(names)
	}
	done := 0
	if progress != nil {
		progress(0, total)
	}
	for _, op := range cfg.Operations {
		for _, req := range cfg.SizesBytes {
			spec := CaseSpec{Op: op, DType: cfg.DType, InputBytes: InputBytes(op, cfg.DType, r.w, req),
				Seed: cfg.Seed, Rank: r.rank, WorldSize: r.w, Graph: cfg.Graph}
			rows, err := r.runCase(ctx, spec, req)
			if err != nil {
				return nil, err
			}
			for _, row := range rows {
				rep.Rows = append(rep.Rows, row)
				if cfg.OnRow != nil {
					cfg.OnRow(rep, row)
				}
				done++
				if progress != nil {
					progress(done, total)
				}
			}
		}
	}
	rep.AllRankRepeatBitwise = len(rep.Rows) > 0
	for _, row := range rep.Rows {
		rep.AllRankRepeatBitwise = rep.AllRankRepeatBitwise && row.RepeatBitwise
	}
	return rep, nil
}

// phase bounds one step of the run (a case's preparation, a first run, a
// warm-up, a sample, the checks) and the agreement that follows it by
// cfg.Timeout, so that a stopped or dead peer makes every other rank fail
// within the timeout instead of waiting (the native baselines, which talk
// to the transport directly, have no other bound).
func (r *runner) phase(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.cfg.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, r.cfg.Timeout)
}

type runner struct {
	comm    *detcoll.Comm
	backend Backend
	cfg     Config
	w, rank int
}

// errPeer reports that another rank failed locally.
var errPeer = errors.New("another rank failed")

// agreeConfig checks that every rank normalised the same configuration and
// takes rank 0's start time. A rank whose configuration is invalid still
// takes part, so that every rank fails. A mismatch names the first field
// that differs and the two ranks.
func (r *runner) agreeConfig(ctx context.Context, cfg Config, cerr error, start *time.Time) error {
	fields := cfg.fingerprintFields()
	n := 16 + 8*len(fields)
	mine := make([]byte, n)
	if cerr != nil {
		mine[0] = 1
	}
	binary.LittleEndian.PutUint64(mine[8:], uint64(start.UnixNano()))
	for i, f := range fields {
		h := fnv.New64a()
		h.Write(f.value)
		binary.LittleEndian.PutUint64(mine[16+8*i:], h.Sum64())
	}
	pctx, cancel := r.phase(ctx)
	defer cancel()
	all, err := r.gather(pctx, mine)
	if err != nil {
		return fmt.Errorf("bench: agreeing on the configuration: %w", err)
	}
	if cerr != nil {
		return cerr
	}
	for p := 0; p < r.w; p++ {
		m := all[p*n : (p+1)*n]
		if m[0] != 0 {
			return fmt.Errorf("bench: rank %d has an invalid configuration", p)
		}
		for i, f := range fields {
			if !bytes.Equal(m[16+8*i:24+8*i], mine[16+8*i:24+8*i]) {
				return fmt.Errorf("bench: %w: %s differs between rank %d and rank %d (this rank has %s)", ErrConfigMismatch, f.name, p, r.rank, f.value)
			}
		}
	}
	*start = time.Unix(0, int64(binary.LittleEndian.Uint64(all[8:16]))).UTC()
	return nil
}

// ErrConfigMismatch is returned when the ranks run different configurations.
var ErrConfigMismatch = errors.New("configuration mismatch across ranks")

// gather all-gathers a fixed-size message from every rank.
func (r *runner) gather(ctx context.Context, mine []byte) ([]byte, error) {
	all := make([]byte, len(mine)*r.w)
	if err := r.comm.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		return nil, err
	}
	return all, nil
}

// agree tells every rank whether any rank failed locally; the local error
// wins, then errPeer naming the first failed rank.
func (r *runner) agree(ctx context.Context, local error, what string) error {
	var b [1]byte
	if local != nil {
		b[0] = 1
	}
	all, err := r.gather(ctx, b[:])
	if local != nil {
		return local
	}
	if err != nil {
		return fmt.Errorf("bench: %s: %w", what, err)
	}
	for p, v := range all {
		if v != 0 {
			return fmt.Errorf("bench: %s: rank %d: %w", what, p, errPeer)
		}
	}
	return nil
}

// runCase prepares one (op, dtype, size) case and returns its rows.
func (r *runner) runCase(ctx context.Context, spec CaseSpec, requested int) ([]Row, error) {
	pctx, cancel := r.phase(ctx)
	c, err := r.backend.Prepare(pctx, spec)
	if err != nil {
		err = fmt.Errorf("bench: preparing %s %v %d B: %w", spec.Op, spec.DType, spec.InputBytes, err)
	}
	err = r.agree(pctx, err, "preparing a case")
	cancel()
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, err
	}
	defer c.Close()

	// Native: one untimed run, then warm-up and samples.
	pctx, cancel = r.phase(ctx)
	_, err = c.RunNative(pctx, 1)
	err = r.agree(pctx, err, "native first run")
	cancel()
	if err != nil {
		return nil, err
	}
	native, err := r.measure(ctx, c.RunNative)
	if err != nil {
		return nil, err
	}
	sym, err := r.measureSymmetric(ctx, c)
	if err != nil {
		return nil, err
	}

	names, algs := r.cfg.rowAlgorithms(spec.Op)
	rows := make([]Row, 0, len(names))
	for i, alg := range algs {
		row, err := r.runRow(ctx, c, spec, alg)
		if err != nil {
			return nil, fmt.Errorf("bench: %s %v %s %d B: %w", spec.Op, spec.DType, names[i], spec.InputBytes, err)
		}
		row.Algorithm = names[i]
		row.RequestedSizeBytes = int64(requested)
		row.Native = native
		row.NativeSymmetric = sym
		row.finish(r.w)
		rows = append(rows, row)
	}
	return rows, nil
}

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
	err := c.ResetOutput()
	if err == nil {
		_, err = det(pctx, 1)
	}
	var first []byte
	if err == nil {
		var out []byte
		out, err = c.Output()
		first = bytes.Clone(out)
	}
	if err := r.agree(pctx, err, "deterministic first run"); err != nil {
		return Row{}, err
	}
	timing, err := r.measure(ctx, det)
	if err != nil {
		return Row{}, err
	}

	// Local checks on the last timed iteration's output.
	var msg [rowMsgBytes]byte
	local := func() error {
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
		wrong, err := verifyOracle(spec, acc, out, lo, hi)
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
	cctx, ccancel := r.phase(ctx)
	defer ccancel()
	lerr := local()
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
	if ic, ok := c.(InPlaceCase); ok && r.cfg.InPlace && ic.InPlaceSupported() {
		ip, err := r.runInPlace(ctx, ic, spec, alg)
		if err != nil {
			return Row{}, err
		}
		row.InPlace = ip
	}
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

// checkRange is the element range of this rank's output that this rank
// compares with the oracle. all_reduce and all_gather outputs are the same
// on every rank (checked by hash), so each rank checks its shard; a
// reduce_scatter output is this rank's own and is checked whole.
func (r *runner) checkRange(spec CaseSpec) (lo, hi int) {
	n := spec.OutputBytes() / spec.DType.Size()
	if spec.Op == ReduceScatter {
		return 0, n
	}
	off, cnt := tree.Shard(n, r.w, r.rank)
	return off, off + cnt
}

// verifyBlock is the number of output elements one oracle task covers.
const verifyBlock = 1 << 14

// verifyOracle compares out's elements [lo, hi) with the reference computed
// from the regenerated inputs of every rank: reduce.Oracle for the
// reductions, the concatenation for all_gather. Blocks run in parallel.
func verifyOracle(spec CaseSpec, acc detcoll.Accumulate, out []byte, lo, hi int) (wrong int64, err error) {
	dt, w := spec.DType, spec.WorldSize
	sz := dt.Size()
	inCount := spec.InputBytes / sz
	outCount := spec.OutputBytes() / sz
	var (
		bad      atomic.Bool
		nwrong   atomic.Int64
		firstErr error
		errOnce  sync.Once
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	next.Store(int64(lo))
	workers := min(runtime.GOMAXPROCS(0), (hi-lo+verifyBlock-1)/verifyBlock)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inputs := make([][]byte, w)
			for p := range inputs {
				inputs[p] = make([]byte, verifyBlock*sz)
			}
			want := make([]byte, verifyBlock*sz)
			for !bad.Load() {
				b := int(next.Add(verifyBlock)) - verifyBlock
				if b >= hi {
					return
				}
				e := min(b+verifyBlock, hi)
				n := e - b
				wb := want[:n*sz]
				switch spec.Op {
				case AllGather:
					for j := b; j < e; {
						p, off := j/inCount, j%inCount
						k := min(e-j, inCount-off)
						FillInput(wb[(j-b)*sz:(j-b+k)*sz], dt, spec.Seed, p, off)
						j += k
					}
				default:
					base := b // all_reduce: output element j is input element j
					if spec.Op == ReduceScatter {
						base = spec.Rank*outCount + b
					}
					ins := make([][]byte, w)
					for p := range ins {
						ins[p] = inputs[p][:n*sz]
						FillInput(ins[p], dt, spec.Seed, p, base)
					}
					if err := reduce.Oracle(dt, acc, ins, wb); err != nil {
						errOnce.Do(func() { firstErr = err })
						bad.Store(true)
						return
					}
				}
				if got := out[b*sz : e*sz]; !bytes.Equal(wb, got) {
					k := int64(0)
					for i := 0; i < n; i++ {
						if !bytes.Equal(wb[i*sz:(i+1)*sz], got[i*sz:(i+1)*sz]) {
							k++
						}
					}
					nwrong.Add(k)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return nwrong.Load(), nil
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// hashBytes fingerprints an output for the cross-rank comparison: CRC-32C
// and CRC-32 (IEEE) side by side, both hardware-accelerated on common CPUs.
func hashBytes(b []byte) uint64 {
	return uint64(crc32.Checksum(b, crc32c))<<32 | uint64(crc32.ChecksumIEEE(b))
}

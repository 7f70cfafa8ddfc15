package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/transport"
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

	rep := newReport(comm, backend, cfg, r.w, start)
	if cfg.OnStart != nil {
		cfg.OnStart(rep)
	}
	if err := r.runRows(ctx, rep, progress); err != nil {
		return nil, err
	}
	rep.AllRankRepeatBitwise = len(rep.Rows) > 0
	for _, row := range rep.Rows {
		rep.AllRankRepeatBitwise = rep.AllRankRepeatBitwise && row.RepeatBitwise
	}
	return rep, nil
}

// newReport is the report of a run of the normalised cfg on w ranks, with
// no rows yet.
func newReport(comm *detcoll.Comm, backend Backend, cfg Config, w int, start time.Time) *Report {
	rep := &Report{
		Schema:         SchemaV1,
		DetcollVersion: cfg.DetcollVersion,
		StartedAt:      start.Format(time.RFC3339),
		WorldSize:      w,
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
	return rep
}

// runRows runs every (operation, size) case of r.cfg in order and appends
// its rows to rep, calling OnRow and progress after each.
func (r *runner) runRows(ctx context.Context, rep *Report, progress func(done, total int)) error {
	cfg := r.cfg
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
				return err
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
	return nil
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

package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport/tcp"
)

// VerifyResult is one row of `detcoll verify`.
type VerifyResult struct {
	Transport string
	World     int
	Op        string
	DType     dtype.DType
	Algorithm string
	Accum     string
	Pass      bool
	Detail    string
}

// VerifyOptions is `detcoll verify`.
type VerifyOptions struct {
	WorldSizes []int
	Transports []string // inproc, tcp
	Counts     []int
	Out        io.Writer
	// Device selects the device check of a launched job (auto, cpu, cuda):
	// with a launcher, every rank runs the device collectives of the job
	// and rank 0 prints; without one, only the host groups run.
	Device string
	Getenv func(string) string
}

// JobVerifiers check a device's collectives across a launched job; GPU
// packages register themselves (see cuda.go).
var JobVerifiers = map[string]func(ctx context.Context, job *cluster.Job) ([]VerifyResult, error){}

// VerifyJob is `detcoll verify` as one rank of a launched job: the device
// collectives of the job (when the device has a verifier), and on rank 0 the
// in-process host groups too. Only rank 0 prints.
func VerifyJob(ctx context.Context, o VerifyOptions) ([]VerifyResult, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	dev, err := ResolveDevice(o.Device)
	if err != nil {
		if _, gpu := deviceTransports[o.Device]; gpu {
			fmt.Fprintf(o.Out, "device %s: NOT CHECKED: %v\n", o.Device, err)
			return nil, fmt.Errorf("verify: %w: --device %s: %v", ErrDeviceNotChecked, o.Device, err)
		}
		return nil, err
	}
	jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	job, err := cluster.Init(jctx, cluster.Options{Getenv: o.Getenv})
	cancel()
	if err != nil {
		return nil, err
	}
	defer job.Close()
	rank := job.Comm.Rank()
	rows := jobRows(ctx, job, dev, o)
	total, err := failedOnAllRanks(ctx, job.Comm, rows)
	if err != nil {
		return rows, err
	}
	missing, err := uncheckedRanks(ctx, job.Comm, RequireDevice(o.Device, dev, rows) != nil)
	if err != nil {
		return rows, err
	}
	if rank == 0 {
		printVerify(o.Out, rows)
		fmt.Fprintf(o.Out, "device %s, %d ranks: %d failed checks on all ranks together\n", dev, job.Comm.Size(), total)
		if len(missing) > 0 {
			fmt.Fprintf(o.Out, "device %s: NOT CHECKED on ranks %v\n", o.Device, missing)
		}
	}
	if total > 0 {
		return rows, fmt.Errorf("verify: %d checks failed across the job", total)
	}
	if len(missing) > 0 {
		return rows, fmt.Errorf("verify: %w: --device %s was asked for, but ranks %v checked no %s collective", ErrDeviceNotChecked, o.Device, missing, o.Device)
	}
	return rows, nil
}

// jobRows are this rank's rows: the job's device collectives, when dev has
// a verifier, and on rank 0 the in-process host groups.
func jobRows(ctx context.Context, job *cluster.Job, dev string, o VerifyOptions) []VerifyResult {
	var rows []VerifyResult
	if v, ok := JobVerifiers[dev]; ok {
		r, err := v(ctx, job)
		rows = append(rows, r...)
		if err != nil {
			rows = append(rows, VerifyResult{Transport: dev, World: job.Comm.Size(), Op: "setup", Detail: err.Error()})
		}
	}
	if job.Comm.Rank() == 0 {
		host, _ := Verify(ctx, VerifyOptions{WorldSizes: o.WorldSizes, Transports: o.Transports, Counts: o.Counts, Out: io.Discard})
		rows = append(rows, host...)
	}
	return rows
}

// failedOnAllRanks is the number of failed rows of every rank together,
// known to every rank.
func failedOnAllRanks(ctx context.Context, comm *detcoll.Comm, rows []VerifyResult) (int, error) {
	failed := 0
	for _, r := range rows {
		if !r.Pass {
			failed++
		}
	}
	rank := comm.Rank()
	all := make([]byte, 8*comm.Size())
	mine := all[8*rank : 8*rank+8]
	mine[0], mine[1] = byte(failed), byte(failed>>8)
	if err := comm.AllGather(ctx, append([]byte(nil), mine...), all, detcoll.Byte); err != nil {
		return 0, err
	}
	total := 0
	for p := 0; p < comm.Size(); p++ {
		total += int(all[8*p]) | int(all[8*p+1])<<8
	}
	return total, nil
}

// uncheckedRanks are the ranks that did not check the device asked for
// (unchecked says whether this one did not), known to every rank.
func uncheckedRanks(ctx context.Context, comm *detcoll.Comm, unchecked bool) ([]int, error) {
	rank := comm.Rank()
	mine := make([]byte, comm.Size())
	if unchecked {
		mine[rank] = 1
	}
	flags := make([]byte, comm.Size())
	if err := comm.AllGather(ctx, mine[rank:rank+1], flags, detcoll.Byte); err != nil {
		return nil, err
	}
	var missing []int
	for p, f := range flags {
		if f != 0 {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// ErrDeviceNotChecked is returned by a verify that was asked for a GPU
// device (--device cuda or rocm) and checked none of its collectives.
var ErrDeviceNotChecked = errors.New("device not checked")

// deviceTransports are the row transports that check each GPU kind.
var deviceTransports = map[string]string{"cuda": "nccl", "rocm": "rccl"}

// RequireDevice fails when asked names a GPU kind (cuda, rocm) and no row
// of rows checked that kind's collectives and passed setup (resolved is
// what ResolveDevice made of asked). auto and cpu require nothing.
func RequireDevice(asked, resolved string, rows []VerifyResult) error {
	tr, gpu := deviceTransports[asked]
	if !gpu {
		return nil
	}
	if resolved != asked {
		return fmt.Errorf("verify: %w: --device %s resolved to %s", ErrDeviceNotChecked, asked, resolved)
	}
	n := 0
	for _, r := range rows {
		if r.Transport == tr && r.Op != "setup" {
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("verify: %w: --device %s was asked for, but no %s collective was checked", ErrDeviceNotChecked, asked, asked)
	}
	return nil
}

// VerifyDevice is `detcoll verify --device D` without a launcher: the host
// groups, then, for a GPU kind, the device's collectives as a job of one
// rank. It fails when a GPU kind was asked for and none of its collectives
// ran (no GPU, no library, a build without the kind), saying why.
func VerifyDevice(ctx context.Context, o VerifyOptions) ([]VerifyResult, error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	o.Out = out
	if _, gpu := deviceTransports[o.Device]; !gpu {
		return Verify(ctx, o)
	}
	host, herr := Verify(ctx, o)
	dev, err := ResolveDevice(o.Device)
	if err != nil {
		fmt.Fprintf(out, "device %s: NOT CHECKED: %v\n", o.Device, err)
		return host, fmt.Errorf("verify: %w: --device %s: %v", ErrDeviceNotChecked, o.Device, err)
	}
	var rows []VerifyResult
	if v, ok := JobVerifiers[dev]; ok {
		jctx, cancel := context.WithTimeout(ctx, time.Minute)
		job, err := cluster.Init(jctx, cluster.Options{Getenv: func(string) string { return "" }})
		cancel()
		if err != nil {
			return host, err
		}
		r, verr := v(ctx, job)
		job.Close()
		rows = append(rows, r...)
		if verr != nil {
			rows = append(rows, VerifyResult{Transport: deviceTransports[dev], World: 1, Op: "setup", Detail: verr.Error()})
		}
	}
	failed := printVerify(out, rows)
	if err := RequireDevice(o.Device, dev, rows); err != nil {
		fmt.Fprintf(out, "device %s: NOT CHECKED (no device collective ran)\n", o.Device)
		return append(host, rows...), err
	}
	if herr != nil {
		return append(host, rows...), herr
	}
	if failed > 0 {
		return append(host, rows...), fmt.Errorf("verify: %d of %d device checks failed", failed, len(rows))
	}
	return append(host, rows...), nil
}

// GroupVerifiers run device checks (GPU packages register themselves) and
// return their rows; they run after the host transports.
var GroupVerifiers []func(ctx context.Context) ([]VerifyResult, error)

// Verify runs every collective, dtype, algorithm and accumulate mode over
// each transport and world size against the host oracle, prints a pass/fail
// table, and returns an error if any row failed.
func Verify(ctx context.Context, o VerifyOptions) ([]VerifyResult, error) {
	if len(o.WorldSizes) == 0 {
		o.WorldSizes = []int{1, 2, 3, 4, 5, 8}
	}
	if len(o.Transports) == 0 {
		o.Transports = []string{"inproc", "tcp"}
	}
	if len(o.Counts) == 0 {
		o.Counts = []int{1, 7, 1031, 65537}
	}
	var rows []VerifyResult
	for _, tr := range o.Transports {
		for _, w := range o.WorldSizes {
			comms, err := makeComms(ctx, tr, w)
			if err != nil {
				return rows, err
			}
			rows = append(rows, verifyGroup(ctx, tr, comms, o.Counts)...)
			for _, c := range comms {
				c.Close()
			}
		}
	}
	for _, v := range GroupVerifiers {
		more, err := v(ctx)
		rows = append(rows, more...)
		if err != nil {
			rows = append(rows, VerifyResult{Transport: "device", Op: "setup", Detail: err.Error()})
		}
	}
	failed := printVerify(o.Out, rows)
	if failed > 0 {
		return rows, fmt.Errorf("verify: %d of %d checks failed", failed, len(rows))
	}
	return rows, nil
}

func makeComms(ctx context.Context, tr string, w int) ([]*detcoll.Comm, error) {
	switch tr {
	case "inproc":
		return detcoll.NewInProc(w)
	case "tcp":
		st := store.NewMemory()
		prefix := fmt.Sprintf("verify/%d/%d", w, time.Now().UnixNano())
		comms := make([]*detcoll.Comm, w)
		errs := make([]error, w)
		var wg sync.WaitGroup
		for r := 0; r < w; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				t, err := tcp.Connect(ctx, st, prefix, r, w, tcp.Options{Host: "127.0.0.1", DialTimeout: 30 * time.Second})
				if err != nil {
					errs[r] = err
					return
				}
				comms[r], errs[r] = detcoll.New(t)
			}(r)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("verify: tcp W=%d: %w", w, err)
			}
		}
		return comms, nil
	}
	return nil, fmt.Errorf("verify: unknown transport %q (want inproc or tcp)", tr)
}

// verifyGroup checks one group of in-process ranks: every reduction per
// dtype, accumulate mode and algorithm, then the gathers per dtype.
func verifyGroup(ctx context.Context, tr string, comms []*detcoll.Comm, counts []int) []VerifyResult {
	g := &groupCheck{ctx: ctx, tr: tr, comms: comms, counts: counts, rng: rand.New(rand.NewPCG(uint64(len(comms)), 99))}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64} {
		accs := []reduce.Accumulate{reduce.Native}
		if dt.Size() == 2 {
			accs = append(accs, reduce.F32)
		}
		for _, acc := range accs {
			for _, alg := range []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree, detcoll.RecursiveDoubling, detcoll.HalvingDoubling} {
				g.checkReductions(dt, acc, alg)
			}
		}
		g.checkGathers(dt)
	}
	return g.rows
}

// groupCheck is verifyGroup's state: the group, the generator of its
// inputs (drawn in a fixed order, so that a run is reproducible) and the
// rows so far.
type groupCheck struct {
	ctx    context.Context
	tr     string
	comms  []*detcoll.Comm
	counts []int
	rng    *rand.Rand
	rows   []VerifyResult
}

// outcome is one collective's result over every count: whether all
// matched the oracle, and the first error.
type outcome struct {
	ok  bool
	err error
}

func (o *outcome) add(ok bool, err error) {
	o.ok = o.ok && ok
	o.err = firstErr(o.err, err)
}

// row adds the row of op's outcome.
func (g *groupCheck) row(op string, dt dtype.DType, alg, acc string, res outcome) {
	r := VerifyResult{Transport: g.tr, World: len(g.comms), Op: op, DType: dt, Algorithm: alg, Accum: acc, Pass: res.err == nil && res.ok}
	if res.err != nil {
		r.Detail = res.err.Error()
	} else if !res.ok {
		r.Detail = "differs from the host oracle"
	}
	g.rows = append(g.rows, r)
}

// inputs draws one input of size bytes per rank.
func (g *groupCheck) inputs(dt dtype.DType, size int) [][]byte {
	ins := make([][]byte, len(g.comms))
	for r := range ins {
		ins[r] = make([]byte, size)
		bench.FillInput(ins[r], dt, g.rng.Uint64(), r, 0)
	}
	return ins
}

// checkReductions checks AllReduce, ReduceScatter and ReduceScatterMany
// with alg and acc against the host oracle, at every count.
func (g *groupCheck) checkReductions(dt dtype.DType, acc reduce.Accumulate, alg detcoll.Algorithm) {
	opts := []detcoll.Option{detcoll.WithAlgorithm(alg), detcoll.WithAccumulate(acc)}
	ar, rs, rsm := outcome{ok: true}, outcome{ok: true}, outcome{ok: true}
	// recursive_doubling and halving_doubling have their own AllReduce and
	// ReduceScatter; ReduceScatterMany runs them as a2a_tree, checked
	// already.
	levels := alg == detcoll.RecursiveDoubling || alg == detcoll.HalvingDoubling
	for _, n := range g.counts {
		ins := g.inputs(dt, len(g.comms)*n*dt.Size())
		full := make([]byte, len(ins[0]))
		reduce.Oracle(dt, acc, ins, full)
		blk := n * dt.Size()
		ar.add(g.allReduce(ins, full, dt, opts))
		rs.add(g.reduceScatter(ins, full, blk, dt, opts))
		if !levels {
			rsm.add(g.reduceScatterMany(ins, full, blk, dt, opts))
		}
	}
	g.row("all_reduce", dt, alg.String(), acc.String(), ar)
	g.row("reduce_scatter", dt, alg.String(), acc.String(), rs)
	if !levels {
		g.row("reduce_scatter_many", dt, alg.String(), acc.String(), rsm)
	}
}

// allReduce runs AllReduce on ins; every rank must get full.
func (g *groupCheck) allReduce(ins [][]byte, full []byte, dt dtype.DType, opts []detcoll.Option) (bool, error) {
	outs := make([][]byte, len(g.comms))
	err := each(g.comms, func(c *detcoll.Comm) error {
		outs[c.Rank()] = make([]byte, len(full))
		return c.AllReduce(g.ctx, ins[c.Rank()], outs[c.Rank()], dt, opts...)
	})
	ok := true
	for _, o := range outs {
		ok = ok && bytes.Equal(o, full)
	}
	return ok, err
}

// reduceScatter runs ReduceScatter on ins; rank r must get block r of
// full.
func (g *groupCheck) reduceScatter(ins [][]byte, full []byte, blk int, dt dtype.DType, opts []detcoll.Option) (bool, error) {
	outs := make([][]byte, len(g.comms))
	err := each(g.comms, func(c *detcoll.Comm) error {
		outs[c.Rank()] = make([]byte, blk)
		return c.ReduceScatter(g.ctx, ins[c.Rank()], outs[c.Rank()], dt, opts...)
	})
	ok := true
	for r, o := range outs {
		ok = ok && bytes.Equal(o, full[r*blk:(r+1)*blk])
	}
	return ok, err
}

// reduceScatterMany runs ReduceScatterMany with two lanes, each the whole
// of ins; rank r must get block r of full in both.
func (g *groupCheck) reduceScatterMany(ins [][]byte, full []byte, blk int, dt dtype.DType, opts []detcoll.Option) (bool, error) {
	outs := make([][]byte, len(g.comms))
	err := each(g.comms, func(c *detcoll.Comm) error {
		outs[c.Rank()] = make([]byte, 2*blk)
		return c.ReduceScatterMany(g.ctx, [][]byte{ins[c.Rank()], ins[c.Rank()]}, [][]byte{outs[c.Rank()][:blk], outs[c.Rank()][blk:]}, dt, opts...)
	})
	ok := true
	for r, o := range outs {
		ok = ok && bytes.Equal(o[:blk], full[r*blk:(r+1)*blk]) && bytes.Equal(o[blk:], full[r*blk:(r+1)*blk])
	}
	return ok, err
}

// checkGathers checks AllGatherMany and AllGather (pure movement) at every
// count.
func (g *groupCheck) checkGathers(dt dtype.DType) {
	res := outcome{ok: true}
	for _, n := range g.counts {
		ins := g.inputs(dt, n*dt.Size())
		want := bytes.Join(ins, nil)
		res.add(g.allGatherMany(ins, want, dt))
		res.add(g.allGather(ins, want, dt))
	}
	g.row("all_gather", dt, "direct", "-", res)
}

// allGatherMany runs AllGatherMany with two lanes, each of ins; every rank
// must get want in both.
func (g *groupCheck) allGatherMany(ins [][]byte, want []byte, dt dtype.DType) (bool, error) {
	outs := make([][]byte, len(g.comms))
	err := each(g.comms, func(c *detcoll.Comm) error {
		outs[c.Rank()] = make([]byte, 2*len(want))
		o := outs[c.Rank()]
		return c.AllGatherMany(g.ctx, [][]byte{ins[c.Rank()], ins[c.Rank()]}, [][]byte{o[:len(want)], o[len(want):]}, dt)
	})
	ok := true
	for _, o := range outs {
		ok = ok && bytes.Equal(o[:len(want)], want) && bytes.Equal(o[len(want):], want)
	}
	return ok, err
}

// allGather runs AllGather on ins; every rank must get want.
func (g *groupCheck) allGather(ins [][]byte, want []byte, dt dtype.DType) (bool, error) {
	outs := make([][]byte, len(g.comms))
	err := each(g.comms, func(c *detcoll.Comm) error {
		outs[c.Rank()] = make([]byte, len(want))
		return c.AllGather(g.ctx, ins[c.Rank()], outs[c.Rank()], dt)
	})
	ok := true
	for _, o := range outs {
		ok = ok && bytes.Equal(o, want)
	}
	return ok, err
}

func each(comms []*detcoll.Comm, fn func(c *detcoll.Comm) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *detcoll.Comm) { defer wg.Done(); errs[i] = fn(c) }(i, c)
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func printVerify(out io.Writer, rows []VerifyResult) (failed int) {
	if out == nil {
		out = io.Discard
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "transport\tW\toperation\tdtype\talgorithm\taccumulate\tresult\t")
	for _, r := range rows {
		res := "pass"
		if !r.Pass {
			res = "FAIL: " + r.Detail
			failed++
		}
		dt := "-"
		if r.DType.Size() > 0 {
			dt = r.DType.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Transport, r.World, r.Op, dt, r.Algorithm, r.Accum, res)
	}
	tw.Flush()
	fmt.Fprintf(out, "%d checks, %d failed\n", len(rows), failed)
	return failed
}

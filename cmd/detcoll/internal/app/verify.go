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
	// Long on purpose: one job's steps in order: device checks, host groups, then the agreement all-gathers.
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
	out := o.Out
	if rank != 0 {
		o.Out = io.Discard
	}
	var rows []VerifyResult
	if v, ok := JobVerifiers[dev]; ok {
		r, err := v(ctx, job)
		rows = append(rows, r...)
		if err != nil {
			rows = append(rows, VerifyResult{Transport: dev, World: job.Comm.Size(), Op: "setup", Detail: err.Error()})
		}
	}
	if rank == 0 {
		host, _ := Verify(ctx, VerifyOptions{WorldSizes: o.WorldSizes, Transports: o.Transports, Counts: o.Counts, Out: io.Discard})
		rows = append(rows, host...)
	}
	// Every rank learns whether any rank failed.
	failed := 0
	for _, r := range rows {
		if !r.Pass {
			failed++
		}
	}
	all := make([]byte, 8*job.Comm.Size())
	mine := all[8*rank : 8*rank+8]
	mine[0], mine[1] = byte(failed), byte(failed>>8)
	if err := job.Comm.AllGather(ctx, append([]byte(nil), mine...), all, detcoll.Byte); err != nil {
		return rows, err
	}
	total := 0
	for p := 0; p < job.Comm.Size(); p++ {
		total += int(all[8*p]) | int(all[8*p+1])<<8
	}
	// Every rank learns whether every rank checked the device asked for.
	unchecked := make([]byte, job.Comm.Size())
	if RequireDevice(o.Device, dev, rows) != nil {
		unchecked[rank] = 1
	}
	flags := make([]byte, job.Comm.Size())
	if err := job.Comm.AllGather(ctx, unchecked[rank:rank+1], flags, detcoll.Byte); err != nil {
		return rows, err
	}
	var missing []int
	for p, f := range flags {
		if f != 0 {
			missing = append(missing, p)
		}
	}
	if rank == 0 {
		printVerify(out, rows)
		fmt.Fprintf(out, "device %s, %d ranks: %d failed checks on all ranks together\n", dev, job.Comm.Size(), total)
		if len(missing) > 0 {
			fmt.Fprintf(out, "device %s: NOT CHECKED on ranks %v\n", o.Device, missing)
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

// verifyGroup checks one group of in-process ranks.
func verifyGroup(ctx context.Context, tr string, comms []*detcoll.Comm, counts []int) []VerifyResult {
	// Long on purpose: a table of dtype × operation × algorithm checks; splitting it would scatter the table.
	w := len(comms)
	var rows []VerifyResult
	rng := rand.New(rand.NewPCG(uint64(w), 99))
	row := func(op string, dt dtype.DType, alg, acc string, err error, ok bool) {
		r := VerifyResult{Transport: tr, World: w, Op: op, DType: dt, Algorithm: alg, Accum: acc, Pass: err == nil && ok}
		if err != nil {
			r.Detail = err.Error()
		} else if !ok {
			r.Detail = "differs from the host oracle"
		}
		rows = append(rows, r)
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64} {
		accs := []reduce.Accumulate{reduce.Native}
		if dt.Size() == 2 {
			accs = append(accs, reduce.F32)
		}
		for _, acc := range accs {
			for _, alg := range []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree} {
				okAR, okRS, okRSM := true, true, true
				var errAR, errRS, errRSM error
				for _, n := range counts {
					ins := make([][]byte, w)
					for r := range ins {
						ins[r] = make([]byte, w*n*dt.Size())
						bench.FillInput(ins[r], dt, rng.Uint64(), r, 0)
					}
					full := make([]byte, len(ins[0]))
					reduce.Oracle(dt, acc, ins, full)
					outs := make([][]byte, w)
					errAR = firstErr(errAR, each(comms, func(c *detcoll.Comm) error {
						outs[c.Rank()] = make([]byte, len(full))
						return c.AllReduce(ctx, ins[c.Rank()], outs[c.Rank()], dt, detcoll.WithAlgorithm(alg), detcoll.WithAccumulate(acc))
					}))
					for _, o := range outs {
						okAR = okAR && bytes.Equal(o, full)
					}
					blk := n * dt.Size()
					errRS = firstErr(errRS, each(comms, func(c *detcoll.Comm) error {
						outs[c.Rank()] = make([]byte, blk)
						return c.ReduceScatter(ctx, ins[c.Rank()], outs[c.Rank()], dt, detcoll.WithAlgorithm(alg), detcoll.WithAccumulate(acc))
					}))
					for r, o := range outs {
						okRS = okRS && bytes.Equal(o, full[r*blk:(r+1)*blk])
					}
					// Two lanes: the whole input and its first half-block-per-rank view.
					errRSM = firstErr(errRSM, each(comms, func(c *detcoll.Comm) error {
						outs[c.Rank()] = make([]byte, 2*blk)
						return c.ReduceScatterMany(ctx, [][]byte{ins[c.Rank()], ins[c.Rank()]}, [][]byte{outs[c.Rank()][:blk], outs[c.Rank()][blk:]}, dt,
							detcoll.WithAlgorithm(alg), detcoll.WithAccumulate(acc))
					}))
					for r, o := range outs {
						okRSM = okRSM && bytes.Equal(o[:blk], full[r*blk:(r+1)*blk]) && bytes.Equal(o[blk:], full[r*blk:(r+1)*blk])
					}
				}
				row("all_reduce", dt, alg.String(), acc.String(), errAR, okAR)
				row("reduce_scatter", dt, alg.String(), acc.String(), errRS, okRS)
				row("reduce_scatter_many", dt, alg.String(), acc.String(), errRSM, okRSM)
			}
		}
		// AllGather and AllGatherMany: pure movement.
		ok := true
		var err error
		for _, n := range counts {
			var want []byte
			ins := make([][]byte, w)
			for r := range ins {
				ins[r] = make([]byte, n*dt.Size())
				bench.FillInput(ins[r], dt, rng.Uint64(), r, 0)
				want = append(want, ins[r]...)
			}
			outs := make([][]byte, w)
			err = firstErr(err, each(comms, func(c *detcoll.Comm) error {
				outs[c.Rank()] = make([]byte, 2*len(want))
				o := outs[c.Rank()]
				return c.AllGatherMany(ctx, [][]byte{ins[c.Rank()], ins[c.Rank()]}, [][]byte{o[:len(want)], o[len(want):]}, dt)
			}))
			for _, o := range outs {
				ok = ok && bytes.Equal(o[:len(want)], want) && bytes.Equal(o[len(want):], want)
			}
			err = firstErr(err, each(comms, func(c *detcoll.Comm) error {
				outs[c.Rank()] = make([]byte, len(want))
				return c.AllGather(ctx, ins[c.Rank()], outs[c.Rank()], dt)
			}))
			for _, o := range outs {
				ok = ok && bytes.Equal(o, want)
			}
		}
		row("all_gather", dt, "direct", "-", err, ok)
	}
	return rows
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

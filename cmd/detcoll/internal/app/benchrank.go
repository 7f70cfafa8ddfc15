package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/transport/tcp"
)

// rankRun is one rank of the benchmark: its job, its backend and the raw
// throughput it measured.
type rankRun struct {
	o       BenchOptions
	v       validated
	fault   fault
	arm     *atomic.Bool // the detcoll phase has begun (fault injection)
	job     *cluster.Job
	rank, w int
	backend bench.Backend
	// Raw TCP throughput, measured in the same run so the collectives'
	// bandwidth has a reference: one loopback stream (rank 0) and the
	// slowest rank's all-to-all.
	raw, rawA2A float64
}

// runRank is one rank of the benchmark.
func runRank(ctx context.Context, o BenchOptions, v validated) (err error) {
	r := &rankRun{o: o, v: v, arm: new(atomic.Bool)}
	if err := r.joinMesh(ctx); err != nil {
		return err
	}
	defer func() {
		// Say why first, then close: Close may wait on the peers.
		if err != nil && o.Report != nil {
			o.Report(err)
			err = ReportedError{err}
		}
		r.job.Close()
	}()
	r.rank, r.w = r.job.Comm.Rank(), r.job.Comm.Size()
	if err := r.setUpBackend(ctx); err != nil {
		return err
	}
	if err := r.measureRaw(ctx); err != nil {
		return err
	}
	out := io.Discard
	if r.rank == 0 {
		out = o.Stdout
	}
	printer := bench.NewRowPrinter(out, o.Format)
	rep, err := r.runRows(ctx, printer)
	if err != nil {
		return err
	}
	if r.rank != 0 {
		return nil
	}
	return r.report(rep, printer)
}

// joinMesh joins the job's mesh within InitTimeout, with the fault
// injection the environment asks for.
func (r *rankRun) joinMesh(ctx context.Context) error {
	o := &r.o
	f, err := parseFault(o.Getenv(envFault))
	if err != nil {
		return err
	}
	jctx, cancel := context.WithTimeout(ctx, o.InitTimeout)
	defer cancel()
	if f.phase != "" {
		env, err := launch.FromEnv(o.Getenv)
		if err != nil {
			return err
		}
		if err := rendezvousFault(jctx, f, env); err != nil {
			return fmt.Errorf("bench: mesh set-up (timeout %v): %w", o.InitTimeout, err)
		}
		f = f.mine(env.Rank)
	}
	r.fault = f
	job, err := cluster.Init(jctx, cluster.Options{Getenv: o.Getenv, CommOptions: []detcoll.CommOption{detcoll.WithTimeout(o.Timeout)},
		WrapTransport: wrapFault(f, r.arm)})
	if err != nil {
		return fmt.Errorf("bench: mesh set-up (timeout %v): %w", o.InitTimeout, err)
	}
	r.job = job
	return nil
}

// setUpBackend counts the job's nodes and makes the device's backend.
func (r *rankRun) setUpBackend(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	nodes, err := CountNodes(pctx, r.job.Comm, r.o.Getenv)
	cancel()
	if err != nil {
		return err
	}
	r.o.Config.Nodes = nodes
	backend, err := Backends[r.v.dev](ctx, r.job)
	if err != nil {
		return err
	}
	if r.fault.at("native") || r.fault.at("detcoll") {
		backend = faultBackend{Backend: backend, f: r.fault, arm: r.arm}
	}
	r.backend = backend
	return nil
}

// measureRaw measures raw TCP throughput on cpu, before the rows.
func (r *rankRun) measureRaw(ctx context.Context) error {
	if r.v.dev != "cpu" {
		return nil
	}
	if r.w > 1 {
		if err := r.measureRawAllToAll(ctx); err != nil {
			return err
		}
	}
	// After the all-to-all, which every rank enters at once: rank 0
	// measuring first would eat into the others' timeout.
	if r.rank == 0 {
		r.raw, _ = tcp.RawLoopbackThroughput(64<<20, 500*time.Millisecond)
	}
	return nil
}

// measureRawAllToAll runs plain TCP among the same processes on the same
// cores, all at once: the ceiling a collective's bus bandwidth compares
// with.
func (r *rankRun) measureRawAllToAll(ctx context.Context) error {
	o := &r.o
	largest := 0
	for _, s := range o.Config.SizesBytes {
		largest = max(largest, s)
	}
	per := min(max(2*largest/r.w, 1<<20), 64<<20)
	ropt := bench.RawOptions{Host: o.Getenv(tcp.EnvHost)}
	if r.fault.at("raw") {
		ropt.OnConnected = r.fault.fire
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	mine, err := bench.RawAllToAll(rctx, r.job.Store, "detcoll/bench/raw", r.rank, r.w, per, ropt)
	if err == nil {
		r.rawA2A, err = slowest(rctx, r.job.Comm, mine)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("bench: raw all-to-all throughput (timeout %v): %w", o.Timeout, err)
	}
	return nil
}

// progress is where rank 0 shows how many cases are done: the launcher's
// progress protocol or plain lines; other ranks show none.
func (r *rankRun) progress() progressSink {
	if r.rank != 0 {
		return nopProgress{}
	}
	if r.o.Getenv(envProgress) == "1" {
		return protocolProgress{r.o.Stderr}
	}
	return &plainProgress{w: r.o.Stderr, bar: r.o.Getenv(launch.EnvConsoleTTY) == "1"}
}

// runRows runs every case, printing each row (with the peer's figures, if
// any) as it is measured.
func (r *rankRun) runRows(ctx context.Context, printer *bench.RowPrinter) (*bench.Report, error) {
	peer := r.v.peer
	prog := r.progress()
	cfg := r.o.Config
	cfg.OnStart = func(rep *bench.Report) {
		if peer != nil {
			rep.SetPeer(peer, r.o.Peer)
		}
		printer.Header(rep)
	}
	cfg.OnRow = func(rep *bench.Report, row bench.Row) {
		if peer != nil {
			row = peer.Apply(row)
			rep.Rows[len(rep.Rows)-1] = row
		}
		printer.Row(rep, row)
	}
	rep, err := bench.Run(ctx, r.job.Comm, r.backend, cfg, prog.update)
	prog.finish()
	return rep, err
}

// report completes rank 0's report: its extras and footer, the JSON and
// plot files, and the check that every row was bitwise stable.
func (r *rankRun) report(rep *bench.Report, printer *bench.RowPrinter) error {
	o := &r.o
	r.addExtras(rep)
	printer.Footer(rep)
	if r.raw > 0 {
		fmt.Fprintf(o.Stdout, "raw loopback TCP throughput (one stream, same run): %.2f GB/s\n", r.raw/1e9)
	}
	if r.rawA2A > 0 {
		fmt.Fprintf(o.Stdout, "raw TCP all-to-all among the %d ranks (bytes each rank receives per second, slowest rank, same run): %.2f GB/s\n", r.w, r.rawA2A/1e9)
	}
	if err := r.writeFiles(rep); err != nil {
		return err
	}
	if !rep.AllRankRepeatBitwise {
		return fmt.Errorf("bench: a row was not bitwise stable across repeats and ranks")
	}
	for _, row := range rep.Rows {
		if !row.OracleBitwise {
			return fmt.Errorf("bench: %s %s %s at %d bytes differs from the host oracle", row.Operation, row.DType, row.Algorithm, row.InputBytes)
		}
	}
	return nil
}

// addExtras adds the backend's extra figures and the raw throughput to
// rep.Extra.
func (r *rankRun) addExtras(rep *bench.Report) {
	if x, ok := r.backend.(interface{ ReportExtra() map[string]any }); ok {
		for k, v := range x.ReportExtra() {
			if rep.Extra == nil {
				rep.Extra = map[string]any{}
			}
			rep.Extra[k] = v
		}
	}
	if n, ok := os.LookupEnv(launch.EnvNodeCPUs); ok {
		// The launcher bound the ranks (--bind-to): rank 0's share and the
		// node's CPUs, since binding changes the figures (docs/launcher.md).
		if rep.Extra == nil {
			rep.Extra = map[string]any{}
		}
		rep.Extra["cpu_binding"] = fmt.Sprintf("rank 0 on CPUs %s of %s shared by the node's ranks", cpusAllowed(), strings.TrimSpace(n))
	}
	if r.raw > 0 || r.rawA2A > 0 {
		if rep.Extra == nil {
			rep.Extra = map[string]any{}
		}
		rep.Extra["raw_loopback_gbps"] = r.raw / 1e9
		rep.Extra["raw_alltoall_per_rank_gbps"] = r.rawA2A / 1e9
	}
}

// writeFiles writes the JSON report and the plots asked for.
func (r *rankRun) writeFiles(rep *bench.Report) error {
	o := &r.o
	if o.Output != "" {
		if err := rep.WriteJSON(o.Output); err != nil {
			return err
		}
		fmt.Fprintf(o.Stdout, "report: %s\n", o.Output)
	}
	if o.Plot != "" {
		if err := rep.Plot(o.Plot); err != nil {
			return err
		}
		bw := bench.BandwidthPlotPath(o.Plot)
		if err := rep.PlotBandwidth(bw); err != nil {
			return err
		}
		fmt.Fprintf(o.Stdout, "plots: %s (latency), %s (bandwidth)\n", o.Plot, bw)
	}
	return nil
}

// slowest returns the smallest of every rank's v (the slowest rank's rate).
func slowest(ctx context.Context, c *detcoll.Comm, v float64) (float64, error) {
	all := make([]float64, c.Size())
	mine := []float64{v}
	if err := c.AllGather(ctx, detcoll.Float64Bytes(mine), detcoll.Float64Bytes(all), detcoll.FP64); err != nil {
		return 0, err
	}
	m := all[0]
	for _, x := range all[1:] {
		m = min(m, x)
	}
	return m, nil
}

// cpusAllowed is this process's Cpus_allowed_list from /proc, or "?".
func cpusAllowed() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

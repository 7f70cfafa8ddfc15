// Package app holds what the detcoll subcommands do, so that cmd/detcoll
// only parses flags and the environment.
package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/transport/tcp"
)

// BenchOptions is `detcoll bench`.
type BenchOptions struct {
	Config       bench.Config
	Device       string // auto, cpu, cuda, rocm
	NprocPerNode int    // ranks to spawn when no launcher started this process
	Output       string // JSON report path ("" = none)
	Plot         string // .svg or .png path ("" = none)
	Args         []string
	Stdout       io.Writer
	Stderr       io.Writer
	Getenv       func(string) string
}

// DefaultSizes finish within ~30 s of run time on 4 CPU ranks over loopback.
var DefaultSizes = []int{4 << 10, 64 << 10, 1 << 20, 4 << 20}

// Launched reports whether a launcher started this process as one rank of a
// job (launch.Launched).
func Launched(getenv func(string) string) bool { return launch.Launched(getenv) }

// Backends maps a device name to a constructor of its benchmark backend.
// GPU packages register themselves here; "cpu" is always present.
var Backends = map[string]func(ctx context.Context, job *cluster.Job) (bench.Backend, error){
	"cpu": func(_ context.Context, job *cluster.Job) (bench.Backend, error) { return bench.NewCPU(job.Comm), nil },
}

// DeviceProbes report whether a device kind is usable here (for --device auto).
var DeviceProbes = map[string]func() error{}

// ResolveDevice turns auto into the first usable GPU kind, else cpu.
func ResolveDevice(dev string) (string, error) {
	if dev == "" || dev == "auto" {
		for _, k := range []string{"cuda", "rocm"} {
			if _, ok := Backends[k]; !ok {
				continue // a kind this build only probes (rocm: docs/rocm.md)
			}
			if p, ok := DeviceProbes[k]; ok && p() == nil {
				return k, nil
			}
		}
		return "cpu", nil
	}
	if _, ok := Backends[dev]; !ok {
		if p, ok := DeviceProbes[dev]; ok {
			if err := p(); err != nil {
				return "", fmt.Errorf("device %s unavailable: %w", dev, err)
			}
		}
		have := make([]string, 0, len(Backends))
		for k := range Backends {
			have = append(have, k)
		}
		sort.Strings(have)
		return "", fmt.Errorf("device %q has no benchmark backend in this build (have %s)", dev, strings.Join(have, ", "))
	}
	return dev, nil
}

// Bench runs the benchmark: as one rank when launched, otherwise by
// launching NprocPerNode copies of this program on this host.
func Bench(ctx context.Context, o BenchOptions) error {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	dev, err := ResolveDevice(o.Device)
	if err != nil {
		return err
	}
	if !Launched(o.Getenv) && o.NprocPerNode > 1 {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cfg := launch.Config{NprocPerNode: o.NprocPerNode, Standalone: true, Cmd: append([]string{self}, o.Args...),
			Stdout: o.Stdout, Stderr: o.Stderr}
		return launch.Run(ctx, cfg)
	}
	jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	job, err := cluster.Init(jctx, cluster.Options{Getenv: o.Getenv})
	cancel()
	if err != nil {
		return err
	}
	defer job.Close()
	rank := job.Comm.Rank()
	newBackend := Backends[dev]
	backend, err := newBackend(ctx, job)
	if err != nil {
		return err
	}
	// Raw loopback TCP throughput, measured in the same run so the
	// collectives' bandwidth has a reference (rank 0, before the rows).
	var raw, rawA2A float64
	if dev == "cpu" {
		if rank == 0 {
			raw, _ = tcp.RawLoopbackThroughput(64<<20, 500*time.Millisecond)
		}
		if w := job.Comm.Size(); w > 1 {
			// Plain TCP among the same processes on the same cores, all at
			// once: the ceiling a collective's bus bandwidth compares with.
			largest := 0
			for _, s := range o.Config.SizesBytes {
				largest = max(largest, s)
			}
			per := min(max(2*largest/w, 1<<20), 64<<20)
			mine, err := tcp.RawAllToAllThroughput(ctx, job.Store, "detcoll/bench/raw", rank, w, per, o.Getenv("DETCOLL_TCP_HOST"))
			if err != nil {
				return fmt.Errorf("bench: raw all-to-all throughput: %w", err)
			}
			if rawA2A, err = slowest(ctx, job.Comm, mine); err != nil {
				return err
			}
		}
	}
	var prog *bench.Progress
	progress := func(done, total int) {
		if rank != 0 {
			return
		}
		if prog == nil {
			prog = bench.NewProgress(o.Stderr, total)
		}
		prog.Update(done, total)
	}
	rep, err := bench.Run(ctx, job.Comm, backend, o.Config, progress)
	if prog != nil {
		prog.Finish()
	}
	if err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	if x, ok := backend.(interface{ ReportExtra() map[string]any }); ok {
		for k, v := range x.ReportExtra() {
			if rep.Extra == nil {
				rep.Extra = map[string]any{}
			}
			rep.Extra[k] = v
		}
	}
	if raw > 0 || rawA2A > 0 {
		if rep.Extra == nil {
			rep.Extra = map[string]any{}
		}
		rep.Extra["raw_loopback_gbps"] = raw / 1e9
		rep.Extra["raw_alltoall_per_rank_gbps"] = rawA2A / 1e9
	}
	rep.Table(o.Stdout)
	if raw > 0 {
		fmt.Fprintf(o.Stdout, "raw loopback TCP throughput (one stream, same run): %.2f GB/s\n", raw/1e9)
	}
	if rawA2A > 0 {
		fmt.Fprintf(o.Stdout, "raw TCP all-to-all among the %d ranks (bytes each rank receives per second, slowest rank, same run): %.2f GB/s\n", job.Comm.Size(), rawA2A/1e9)
	}
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
		fmt.Fprintf(o.Stdout, "plot: %s\n", o.Plot)
	}
	if !rep.AllRankRepeatBitwise {
		return fmt.Errorf("bench: a row was not bitwise stable across repeats and ranks")
	}
	for _, r := range rep.Rows {
		if !r.OracleBitwise {
			return fmt.Errorf("bench: %s %s %s at %d bytes differs from the host oracle", r.Operation, r.DType, r.Algorithm, r.InputBytes)
		}
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

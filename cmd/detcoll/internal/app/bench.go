// Package app holds what the detcoll subcommands do, so that cmd/detcoll
// only parses flags and the environment.
package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
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
	Plot         string // .svg or .png path ("" = none); the bandwidth plot goes beside it (bench.BandwidthPlotPath)
	Format       string // "table" (default) or "nccl-tests"
	Peer         string // a peer's figures (bench.ReadPeer), "" = none
	Timeout      time.Duration
	// InitTimeout bounds the mesh set-up (joining the store, connecting
	// the transport); 0 means min(2 min, max(Timeout, 30 s)), room for
	// many ranks starting at once.
	InitTimeout time.Duration
	// Report, when set, is called once with this rank's error as soon as
	// the rank fails, before the job is closed (closing may wait on the
	// peers, and a launcher stopping the job may kill the rank meanwhile):
	// the rank's error line is out first. Bench's error is then a
	// ReportedError, so that the caller does not print it again.
	Report func(error)
	Args   []string
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
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
	if dev == "cpu" {
		return dev, nil
	}
	if _, ok := Backends[dev]; ok {
		// A kind built in but not usable here (no GPU, no library) fails
		// now, before any work, saying why.
		if p, ok := DeviceProbes[dev]; ok {
			if err := p(); err != nil {
				return "", fmt.Errorf("device %s unavailable: %w", dev, err)
			}
		}
		return dev, nil
	}
	{
		if dev != "cuda" && dev != "rocm" {
			return "", Usagef("--device", "%q is not auto, cpu, cuda or rocm", dev)
		}
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
}

// quietError is an error every rank returns but only rank 0 prints (a
// usage error found by every rank of a launched job alike).
type quietError struct{ error }

// Quiet tells cmd/detcoll not to print it.
func (quietError) Quiet() bool { return true }

// ExitCode keeps the wrapped error's status.
func (q quietError) ExitCode() int {
	var ec interface{ ExitCode() int }
	if errors.As(q.error, &ec) {
		return ec.ExitCode()
	}
	return 1
}

func (q quietError) Unwrap() error { return q.error }

// Bench runs the benchmark: as one rank when launched, otherwise by
// launching NprocPerNode copies of this program on this host. Every input
// is checked first (ValidateBench), before any rank starts.
func Bench(ctx context.Context, o BenchOptions) error {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	launched := Launched(o.Getenv)
	v, err := ValidateBench(&o)
	if err != nil {
		if launched {
			if env, eerr := launch.FromEnv(o.Getenv); eerr == nil && env.Rank != 0 {
				// Rank 0 reports it; the others leave it a moment to do so
				// before the launcher stops the job on their exit.
				time.Sleep(time.Second)
				return quietError{err}
			}
		}
		return err
	}
	if !launched && o.NprocPerNode > 1 {
		return spawn(ctx, o)
	}
	return runRank(ctx, o, v)
}

// validated is what ValidateBench found.
type validated struct {
	dev  string
	peer *bench.Peer
}

// ValidateBench checks every input of o before any work, naming the flag
// or variable of the first bad one (a *UsageError, exit status 2) or the
// resource that is missing. It fills defaults (Format, Timeout).
func ValidateBench(o *BenchOptions) (validated, error) {
	// Long on purpose: a flat list of checks in flag order, the first failure wins.
	var v validated
	dev, err := ResolveDevice(o.Device)
	if err != nil {
		return v, err
	}
	v.dev = dev
	cfg := &o.Config
	if o.Format == "" {
		o.Format = "table"
	}
	if o.Format != "table" && o.Format != "nccl-tests" {
		return v, Usagef("--format", "%q is not table or nccl-tests", o.Format)
	}
	cfg.InPlace = cfg.InPlace || o.Format == "nccl-tests" // its in-place columns
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Timeout < 0 {
		return v, Usagef("--timeout", "%v is not positive", o.Timeout)
	}
	cfg.Timeout = o.Timeout
	if o.InitTimeout < 0 {
		return v, Usagef("--init-timeout", "%v is not positive", o.InitTimeout)
	}
	if o.InitTimeout == 0 {
		o.InitTimeout = min(2*time.Minute, max(o.Timeout, 30*time.Second))
	}
	switch {
	case cfg.Warmup < 0:
		return v, Usagef("--warmup", "%d: want ≥ 0", cfg.Warmup)
	case cfg.Iterations < 1:
		return v, Usagef("--iterations", "%d: want ≥ 1", cfg.Iterations)
	case cfg.Samples < 1:
		return v, Usagef("--samples", "%d: want ≥ 1", cfg.Samples)
	case o.NprocPerNode < 1:
		return v, Usagef("--nproc-per-node", "%d: want ≥ 1", o.NprocPerNode)
	case cfg.Graph && dev == "cpu":
		return v, Usagef("--graph", "CUDA graphs need a GPU device; --device resolved to cpu")
	case !cfg.DType.Valid():
		return v, Usagef("--dtype", "%v is not bf16, fp16, fp32 or fp64", cfg.DType)
	}
	sz := cfg.DType.Size()
	for _, s := range cfg.SizesBytes {
		if s <= 0 {
			return v, Usagef("--size-bytes", "%d is not positive", s)
		}
		if s%sz != 0 {
			return v, Usagef("--size-bytes", "%d is not a whole number of %v elements (%d bytes each): use %d or %d", s, cfg.DType, sz, s/sz*sz, (s/sz+1)*sz)
		}
	}
	for _, a := range cfg.Algorithms {
		if !a.Valid() {
			return v, Usagef("--algorithms", "unknown algorithm %v", a)
		}
	}
	if err := checkWritable("--output", o.Output, ".json"); err != nil {
		return v, err
	}
	if o.Plot != "" {
		ext := strings.ToLower(filepath.Ext(o.Plot))
		if ext != ".svg" && ext != ".png" {
			return v, Usagef("--plot", "%s: want a .svg or .png file", o.Plot)
		}
		if err := checkWritable("--plot", o.Plot, ext); err != nil {
			return v, err
		}
		if err := checkWritable("--plot", bench.BandwidthPlotPath(o.Plot), ext); err != nil {
			return v, err
		}
	}
	if o.Peer != "" {
		p, err := bench.ReadPeer(o.Peer)
		if err != nil {
			return v, Usage("--peer", err)
		}
		v.peer = p
	}
	w, local := o.NprocPerNode, o.NprocPerNode
	if Launched(o.Getenv) {
		env, err := launch.FromEnv(o.Getenv)
		if err != nil {
			return v, err
		}
		w, local = env.WorldSize, max(env.LocalWorldSize, 1)
	}
	if v.peer != nil && v.peer.WorldSize != 0 && v.peer.WorldSize != w {
		return v, Usagef("--peer", "%s has world_size %d, this run has %d ranks", o.Peer, v.peer.WorldSize, w)
	}
	if err := checkMemory(*cfg, w, local); err != nil {
		return v, err
	}
	return v, nil
}

// checkWritable fails when path's directory does not exist or cannot take
// a new file, naming path (never a temporary name).
func checkWritable(field, path, ext string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return Usagef(field, "%s: directory %s does not exist", path, dir)
	}
	if !st.IsDir() {
		return Usagef(field, "%s: %s is not a directory", path, dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return Usagef(field, "%s is a directory", path)
	}
	f, err := os.CreateTemp(dir, ".detcoll-check-*"+ext)
	if err != nil {
		return Usagef(field, "%s: cannot write in %s", path, dir)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// checkMemory refuses sizes whose buffers cannot fit in this node's
// available memory (MemAvailable), before any rank allocates: local ranks
// each hold, for the largest case, the input, the deterministic and native
// outputs, the native ring's scratch and detcoll's workspace.
func checkMemory(cfg bench.Config, w, local int) error {
	ops := cfg.Operations
	if len(ops) == 0 {
		ops = bench.Ops
	}
	need, worst := 0.0, 0
	for _, s := range cfg.SizesBytes {
		for _, op := range ops {
			in := float64(bench.InputBytes(op, cfg.DType, w, s))
			out := in
			switch op {
			case bench.AllGather:
				out = in * float64(w)
			case bench.ReduceScatter:
				out = in / float64(w)
			}
			if n := 2*in + 3*out; n > need {
				need, worst = n, s
			}
		}
	}
	need *= float64(local)
	avail, ok := memAvailable()
	if !ok {
		return nil
	}
	if need > float64(avail) {
		return Usagef("--size-bytes", "%s per rank needs about %s of host memory for the %d ranks on this node, %s is available",
			bench.HumanBytes(int64(worst)), bench.HumanBytes(int64(need)), local, bench.HumanBytes(int64(avail)))
	}
	return nil
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == "MemAvailable" {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// spawn launches NprocPerNode copies of this program on this host; rank 0's
// progress lines become a progress bar on this process's terminal.
func spawn(ctx context.Context, o BenchOptions) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	con := newConsole(o.Stdout, o.Stderr)
	defer con.finish()
	cfg := launch.Config{NprocPerNode: o.NprocPerNode, Standalone: true, Cmd: append([]string{self}, o.Args...),
		Stdout: con.stdout(), Stderr: con.stderr()}
	if con.bar {
		cfg.Env = append(os.Environ(), envProgress+"=1")
	}
	return launch.Run(ctx, cfg)
}

// ReportedError is the error of a rank whose BenchOptions.Report has
// already printed it.
type ReportedError struct{ Err error }

func (e ReportedError) Error() string { return e.Err.Error() }
func (e ReportedError) Unwrap() error { return e.Err }

// ExitCode keeps the wrapped error's status.
func (e ReportedError) ExitCode() int { return quietError{e.Err}.ExitCode() }

// runRank is one rank of the benchmark.
func runRank(ctx context.Context, o BenchOptions, v validated) (err error) {
	// Long on purpose: one rank's run from start to report; the steps share the job, backend and printer.
	dev := v.dev
	fault, err := parseFault(o.Getenv(envFault))
	if err != nil {
		return err
	}
	arm := new(atomic.Bool) // the detcoll phase has begun (fault injection)
	jctx, cancel := context.WithTimeout(ctx, o.InitTimeout)
	if fault.phase != "" {
		env, err := launch.FromEnv(o.Getenv)
		if err != nil {
			cancel()
			return err
		}
		if err := rendezvousFault(jctx, fault, env); err != nil {
			cancel()
			return fmt.Errorf("bench: mesh set-up (timeout %v): %w", o.InitTimeout, err)
		}
		fault = fault.mine(env.Rank)
	}
	job, err := cluster.Init(jctx, cluster.Options{Getenv: o.Getenv, CommOptions: []detcoll.CommOption{detcoll.WithTimeout(o.Timeout)},
		WrapTransport: wrapFault(fault, arm)})
	cancel()
	if err != nil {
		return fmt.Errorf("bench: mesh set-up (timeout %v): %w", o.InitTimeout, err)
	}
	defer func() {
		// Say why first, then close: Close may wait on the peers.
		if err != nil && o.Report != nil {
			o.Report(err)
			err = ReportedError{err}
		}
		job.Close()
	}()
	rank, w := job.Comm.Rank(), job.Comm.Size()

	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	nodes, err := CountNodes(pctx, job.Comm, o.Getenv)
	cancel()
	if err != nil {
		return err
	}
	o.Config.Nodes = nodes
	newBackend := Backends[dev]
	backend, err := newBackend(ctx, job)
	if err != nil {
		return err
	}
	if fault.at("native") || fault.at("detcoll") {
		backend = faultBackend{Backend: backend, f: fault, arm: arm}
	}
	// Raw loopback TCP throughput, measured in the same run so the
	// collectives' bandwidth has a reference (rank 0, before the rows).
	var raw, rawA2A float64
	if dev == "cpu" {
		if w > 1 {
			// Plain TCP among the same processes on the same cores, all at
			// once: the ceiling a collective's bus bandwidth compares with.
			largest := 0
			for _, s := range o.Config.SizesBytes {
				largest = max(largest, s)
			}
			per := min(max(2*largest/w, 1<<20), 64<<20)
			ropt := bench.RawOptions{Host: o.Getenv(tcp.EnvHost)}
			if fault.at("raw") {
				ropt.OnConnected = fault.fire
			}
			rctx, cancel := context.WithTimeout(ctx, o.Timeout)
			mine, err := bench.RawAllToAll(rctx, job.Store, "detcoll/bench/raw", rank, w, per, ropt)
			if err == nil {
				rawA2A, err = slowest(rctx, job.Comm, mine)
			}
			cancel()
			if err != nil {
				return fmt.Errorf("bench: raw all-to-all throughput (timeout %v): %w", o.Timeout, err)
			}
		}
		// After the all-to-all, which every rank enters at once: rank 0
		// measuring first would eat into the others' timeout.
		if rank == 0 {
			raw, _ = tcp.RawLoopbackThroughput(64<<20, 500*time.Millisecond)
		}
	}
	var prog progressSink = nopProgress{}
	if rank == 0 {
		if o.Getenv(envProgress) == "1" {
			prog = protocolProgress{o.Stderr}
		} else {
			prog = &plainProgress{w: o.Stderr, bar: o.Getenv(launch.EnvConsoleTTY) == "1"}
		}
	}
	out := io.Discard
	if rank == 0 {
		out = o.Stdout
	}
	printer := bench.NewRowPrinter(out, o.Format)
	cfg := o.Config
	total := 0
	cfg.OnStart = func(rep *bench.Report) {
		if v.peer != nil {
			rep.SetPeer(v.peer, o.Peer)
		}
		printer.Header(rep)
	}
	cfg.OnRow = func(rep *bench.Report, row bench.Row) {
		if v.peer != nil {
			row = v.peer.Apply(row)
			rep.Rows[len(rep.Rows)-1] = row
		}
		printer.Row(rep, row)
	}
	rep, err := bench.Run(ctx, job.Comm, backend, cfg, func(done, t int) {
		total = t
		prog.update(done, total)
	})
	prog.finish()
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
	printer.Footer(rep)
	if raw > 0 {
		fmt.Fprintf(o.Stdout, "raw loopback TCP throughput (one stream, same run): %.2f GB/s\n", raw/1e9)
	}
	if rawA2A > 0 {
		fmt.Fprintf(o.Stdout, "raw TCP all-to-all among the %d ranks (bytes each rank receives per second, slowest rank, same run): %.2f GB/s\n", w, rawA2A/1e9)
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
		bw := bench.BandwidthPlotPath(o.Plot)
		if err := rep.PlotBandwidth(bw); err != nil {
			return err
		}
		fmt.Fprintf(o.Stdout, "plots: %s (latency), %s (bandwidth)\n", o.Plot, bw)
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

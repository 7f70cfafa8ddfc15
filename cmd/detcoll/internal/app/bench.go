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
	"time"

	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/launch"
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
	// The checks run in flag order: the first failure wins.
	var v validated
	dev, err := ResolveDevice(o.Device)
	if err != nil {
		return v, err
	}
	v.dev = dev
	if err := checkFormatAndTimeouts(o); err != nil {
		return v, err
	}
	if err := checkCases(o, dev); err != nil {
		return v, err
	}
	if err := checkOutputs(o); err != nil {
		return v, err
	}
	if o.Peer != "" {
		p, err := bench.ReadPeer(o.Peer)
		if err != nil {
			return v, Usage("--peer", err)
		}
		v.peer = p
	}
	if err := checkWorld(o, v.peer); err != nil {
		return v, err
	}
	return v, nil
}

// checkFormatAndTimeouts checks --format, --timeout and --init-timeout,
// filling their defaults.
func checkFormatAndTimeouts(o *BenchOptions) error {
	cfg := &o.Config
	if o.Format == "" {
		o.Format = "table"
	}
	if o.Format != "table" && o.Format != "nccl-tests" {
		return Usagef("--format", "%q is not table or nccl-tests", o.Format)
	}
	cfg.InPlace = cfg.InPlace || o.Format == "nccl-tests" // its in-place columns
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Timeout < 0 {
		return Usagef("--timeout", "%v is not positive", o.Timeout)
	}
	cfg.Timeout = o.Timeout
	if o.InitTimeout < 0 {
		return Usagef("--init-timeout", "%v is not positive", o.InitTimeout)
	}
	if o.InitTimeout == 0 {
		o.InitTimeout = min(2*time.Minute, max(o.Timeout, 30*time.Second))
	}
	return nil
}

// checkCases checks what the cases are: counts, ranks, dtype, sizes and
// algorithms, for device dev.
func checkCases(o *BenchOptions, dev string) error {
	cfg := &o.Config
	if _, err := launch.ParseBinding(os.Getenv(launch.EnvBindTo)); err != nil {
		return Usagef(launch.EnvBindTo, "%v", err) // read when this process launches the ranks
	}
	switch {
	case cfg.Warmup < 0:
		return Usagef("--warmup", "%d: want ≥ 0", cfg.Warmup)
	case cfg.Iterations < 1:
		return Usagef("--iterations", "%d: want ≥ 1", cfg.Iterations)
	case cfg.Samples < 1:
		return Usagef("--samples", "%d: want ≥ 1", cfg.Samples)
	case o.NprocPerNode < 1:
		return Usagef("--nproc-per-node", "%d: want ≥ 1", o.NprocPerNode)
	case cfg.Graph && dev == "cpu":
		return Usagef("--graph", "CUDA graphs need a GPU device; --device resolved to cpu")
	case !cfg.DType.Valid():
		return Usagef("--dtype", "%v is not bf16, fp16, fp32 or fp64", cfg.DType)
	}
	sz := cfg.DType.Size()
	for _, s := range cfg.SizesBytes {
		if s <= 0 {
			return Usagef("--size-bytes", "%d is not positive", s)
		}
		if s%sz != 0 {
			return Usagef("--size-bytes", "%d is not a whole number of %v elements (%d bytes each): use %d or %d", s, cfg.DType, sz, s/sz*sz, (s/sz+1)*sz)
		}
	}
	for _, a := range cfg.Algorithms {
		if !a.Valid() {
			return Usagef("--algorithms", "unknown algorithm %v", a)
		}
	}
	return nil
}

// checkOutputs checks that the --output and --plot files can be written.
func checkOutputs(o *BenchOptions) error {
	if err := checkWritable("--output", o.Output, ".json"); err != nil {
		return err
	}
	if o.Plot == "" {
		return nil
	}
	ext := strings.ToLower(filepath.Ext(o.Plot))
	if ext != ".svg" && ext != ".png" {
		return Usagef("--plot", "%s: want a .svg or .png file", o.Plot)
	}
	if err := checkWritable("--plot", o.Plot, ext); err != nil {
		return err
	}
	return checkWritable("--plot", bench.BandwidthPlotPath(o.Plot), ext)
}

// checkWorld checks the run's world size against the peer's figures (peer
// may be nil) and its buffers against this node's memory.
func checkWorld(o *BenchOptions, peer *bench.Peer) error {
	w, local := o.NprocPerNode, o.NprocPerNode
	if Launched(o.Getenv) {
		env, err := launch.FromEnv(o.Getenv)
		if err != nil {
			return err
		}
		w, local = env.WorldSize, max(env.LocalWorldSize, 1)
	}
	if peer != nil && peer.WorldSize != 0 && peer.WorldSize != w {
		return Usagef("--peer", "%s has world_size %d, this run has %d ranks", o.Peer, peer.WorldSize, w)
	}
	return checkMemory(o.Config, w, local)
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
		Stdout: con.stdout(), Stderr: con.stderr(), BindTo: launch.Binding(os.Getenv(launch.EnvBindTo))}
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

package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cmd/detcoll/internal/app"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
)

func init() { extraCommands = append(extraCommands, benchCmd) }

// benchFlags are `detcoll bench`'s flag values.
type benchFlags struct {
	dt, acc, device, output, plot, format, peer string
	ops, algs                                   []string
	sizes                                       []string
	minB, maxB                                  string
	factor                                      int
	warmup, iters, samples, nproc               int
	graph                                       bool
	seed                                        uint64
	timeout, initTimeout                        time.Duration
}

// benchLong is the description `detcoll bench --help` shows.
const benchLong = `bench times AllReduce, AllGather and ReduceScatter with every algorithm
against the native collective on the same buffers (NCCL/RCCL on GPUs; on
CPUs detcoll's own ring reduce-scatter + all-gather, the order Gloo uses,
or a real peer's figures with --peer), checks that results are bitwise
stable across repeats and ranks and equal to the host oracle, and prints a
row as each finishes. Every sample is the slowest rank's time.

Started by a launcher (detcoll launch, torchrun, Slurm, Open MPI) it runs as
one rank; otherwise it launches --nproc-per-node copies of itself on this
host over TCP loopback. Every input is checked before any work; a bad one
exits with status 2 naming the flag or variable.

Sizes are per-rank input bytes (see docs/contract.md, "Benchmark report"): a whole
number of elements of --dtype; reduce_scatter rows round down to a multiple
of W elements (the row records both). List flags take space- or
comma-separated values; -b/-e/-f sweep as nccl-tests does:
  detcoll bench --operations all_reduce all_gather --size-bytes 4096 65536
  detcoll bench -b 8K -e 64M -f 4 --format nccl-tests`

// benchCmd is `detcoll bench`: it parses the flags and runs app.Bench.
func benchCmd() *cobra.Command {
	var b benchFlags
	env := &envReader{}
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure the deterministic collectives against the native ones and write a detcoll.bench.v1 report",
		Long:  benchLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := env.err(); err != nil {
				return err
			}
			cfg, err := b.config(cmd)
			if err != nil {
				return err
			}
			return app.Bench(cmd.Context(), app.BenchOptions{
				Config: cfg, Device: b.device, NprocPerNode: b.nproc, Output: b.output, Plot: b.plot, Format: b.format, Peer: b.peer,
				Timeout: b.timeout, InitTimeout: b.initTimeout, Report: reportFailure, Args: os.Args[1:], Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
			})
		},
	}
	// In this order: env reports the first malformed variable.
	b.addCaseFlags(cmd, env)
	b.addOutputFlags(cmd)
	b.addRunFlags(cmd, env)
	return cmd
}

// addCaseFlags declares the flags that say what the cases are.
func (b *benchFlags) addCaseFlags(cmd *cobra.Command, env *envReader) {
	f := cmd.Flags()
	f.StringVar(&b.dt, "dtype", envDefault("DETCOLL_DTYPE", "bf16"), "bf16, fp16, fp32 or fp64 [DETCOLL_DTYPE]")
	f.StringSliceVar(&b.ops, "operations", strings.Fields(envDefault("DETCOLL_OPERATIONS", "all_reduce all_gather reduce_scatter")), "operations [DETCOLL_OPERATIONS]")
	f.StringSliceVar(&b.sizes, "size-bytes", strings.Fields(envDefault("DETCOLL_SIZE_BYTES", "")), "per-rank input sizes in bytes (K, M, G suffixes allowed), whole elements of --dtype [DETCOLL_SIZE_BYTES]")
	f.StringVarP(&b.minB, "minbytes", "b", "32M", "sweep: smallest size (as nccl-tests -b)")
	f.StringVarP(&b.maxB, "maxbytes", "e", "32M", "sweep: largest size (as nccl-tests -e)")
	f.IntVarP(&b.factor, "stepfactor", "f", 2, "sweep: size multiplier ≥ 2 (as nccl-tests -f)")
	f.StringSliceVar(&b.algs, "algorithms", strings.Fields(envDefault("DETCOLL_ALGORITHMS", "gather_tree a2a_tree")), "algorithms: auto, gather_tree, a2a_tree, one_shot, two_shot, recursive_doubling, halving_doubling (all_gather rows: direct for the NCCL ones, ipc for the peer-memory ones) [DETCOLL_ALGORITHMS]")
	f.StringVar(&b.acc, "accumulate", envDefault("DETCOLL_ACCUMULATE", "native"), "fp16/bf16 accumulation: native or f32 [DETCOLL_ACCUMULATE]")
	f.IntVar(&b.warmup, "warmup", env.int("DETCOLL_WARMUP", 3), "warm-up iterations ≥ 0 [DETCOLL_WARMUP]")
	f.IntVar(&b.iters, "iterations", env.int("DETCOLL_ITERATIONS", 5), "iterations per sample ≥ 1 [DETCOLL_ITERATIONS]")
	f.IntVar(&b.samples, "samples", env.int("DETCOLL_SAMPLES", 5), "samples per row ≥ 1 [DETCOLL_SAMPLES]")
}

// addOutputFlags declares the flags that say where the results go.
func (b *benchFlags) addOutputFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&b.output, "output", envDefault("DETCOLL_OUTPUT", "detcoll-bench.json"), "write the JSON report here; empty for none [DETCOLL_OUTPUT]")
	f.StringVar(&b.plot, "plot", envDefault("DETCOLL_PLOT", ""), "write latency and bandwidth plots (.svg or .png) [DETCOLL_PLOT]")
	f.StringVar(&b.format, "format", envDefault("DETCOLL_FORMAT", "table"), "rows as they finish: table (detcoll's columns) or nccl-tests (its columns and busbw factors) [DETCOLL_FORMAT]")
	f.StringVar(&b.peer, "peer", envDefault("DETCOLL_PEER", ""), "a peer's figures (JSON, docs/contract.md \"Peer figures\") for the ratio column, e.g. Open MPI's [DETCOLL_PEER]")
}

// addRunFlags declares the flags that say how the run goes: device, ranks,
// seed and timeouts.
func (b *benchFlags) addRunFlags(cmd *cobra.Command, env *envReader) {
	f := cmd.Flags()
	f.StringVar(&b.device, "device", envDefault("DETCOLL_DEVICE", "auto"), "auto, cpu, cuda or rocm [DETCOLL_DEVICE]")
	f.IntVar(&b.nproc, "nproc-per-node", env.int("DETCOLL_NPROC_PER_NODE", 4), "ranks (≥ 1) to start when no launcher started this process [DETCOLL_NPROC_PER_NODE]")
	f.BoolVar(&b.graph, "graph", env.bool("DETCOLL_GRAPH", false), "time CUDA-graph launches (GPU devices only) [DETCOLL_GRAPH=1]")
	f.Uint64Var(&b.seed, "seed", env.uint64("DETCOLL_SEED", 1), "input seed [DETCOLL_SEED]")
	f.DurationVar(&b.initTimeout, "init-timeout", env.duration("DETCOLL_INIT_TIMEOUT", 0), "bound of the mesh set-up (joining the store, connecting the transport); default min(2m, max(--timeout, 30s)) [DETCOLL_INIT_TIMEOUT]")
	f.DurationVar(&b.timeout, "timeout", env.duration("DETCOLL_TIMEOUT", 5*time.Minute), "bound of every phase: each collective, sample, the ring baseline and the raw TCP measurement [DETCOLL_TIMEOUT]")
}

// config parses the flag values into the benchmark's Config.
func (b *benchFlags) config(cmd *cobra.Command) (bench.Config, error) {
	cfg := bench.Config{Warmup: b.warmup, Iterations: b.iters, Samples: b.samples, Graph: b.graph, Seed: b.seed,
		DetcollVersion: version, Build: build()}
	var err error
	if cfg.DType, err = dtype.Parse(b.dt); err != nil || !cfg.DType.Valid() {
		return cfg, app.Usage("--dtype", fmt.Errorf("%q is not bf16, fp16, fp32 or fp64", b.dt))
	}
	if cfg.Accumulate, err = reduce.ParseAccumulate(b.acc); err != nil {
		return cfg, app.Usage("--accumulate", err)
	}
	for _, o := range splitList(b.ops) {
		op, err := bench.ParseOp(o)
		if err != nil {
			return cfg, app.Usage("--operations", err)
		}
		cfg.Operations = append(cfg.Operations, op)
	}
	for _, a := range splitList(b.algs) {
		alg, err := detcoll.ParseAlgorithm(a)
		if err != nil {
			return cfg, app.Usage("--algorithms", err)
		}
		cfg.Algorithms = append(cfg.Algorithms, alg)
	}
	if cfg.SizesBytes, err = b.sizesBytes(cmd); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// sizesBytes are the sizes of --size-bytes, or of the -b/-e/-f sweep, or
// the defaults.
func (b *benchFlags) sizesBytes(cmd *cobra.Command) ([]int, error) {
	var out []int
	for _, s := range splitList(b.sizes) {
		n, err := parseBytes(s)
		if err != nil {
			return nil, app.Usage("--size-bytes", err)
		}
		out = append(out, n)
	}
	fl := cmd.Flags()
	if fl.Changed("minbytes") || fl.Changed("maxbytes") || fl.Changed("stepfactor") {
		if len(out) > 0 {
			return nil, app.Usage("--size-bytes", fmt.Errorf("give either --size-bytes or the -b/-e/-f sweep, not both"))
		}
		var err error
		if out, err = sweepSizes(b.minB, b.maxB, b.factor); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		out = app.DefaultSizes
	}
	return out, nil
}

func splitList(v []string) []string {
	var out []string
	for _, s := range v {
		for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
			out = append(out, p)
		}
	}
	return out
}

// parseBytes accepts plain byte counts and K/M/G (binary) suffixes.
func parseBytes(s string) (int, error) {
	mult := 1
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	u := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(t), "IB"), "B"))
	switch {
	case strings.HasSuffix(u, "K"):
		mult, u = 1<<10, strings.TrimSuffix(u, "K")
	case strings.HasSuffix(u, "M"):
		mult, u = 1<<20, strings.TrimSuffix(u, "M")
	case strings.HasSuffix(u, "G"):
		mult, u = 1<<30, strings.TrimSuffix(u, "G")
	}
	n, err := strconv.Atoi(u)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q is not a positive byte count", s)
	}
	if n > math.MaxInt/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// sweepSizes is nccl-tests' -b/-e/-f: min, min·f, min·f², … up to max.
func sweepSizes(minS, maxS string, factor int) ([]int, error) {
	lo, err := parseBytes(minS)
	if err != nil {
		return nil, app.Usage("-b/--minbytes", err)
	}
	hi, err := parseBytes(maxS)
	if err != nil {
		return nil, app.Usage("-e/--maxbytes", err)
	}
	if hi < lo {
		return nil, app.Usage("-e/--maxbytes", fmt.Errorf("%s is below -b %s", maxS, minS))
	}
	if factor < 2 {
		return nil, app.Usage("-f/--stepfactor", fmt.Errorf("%d: want an integer ≥ 2", factor))
	}
	var out []int
	for s := lo; s <= hi; s *= factor {
		out = append(out, s)
		if s > math.MaxInt/factor {
			break
		}
	}
	return out, nil
}

// envReader reads flag defaults from the environment and remembers the
// first malformed value, so that RunE reports it (a usage error naming the
// variable) instead of silently using the default.
type envReader struct{ errs []error }

func (e *envReader) err() error {
	if len(e.errs) > 0 {
		return e.errs[0]
	}
	return nil
}

func (e *envReader) bad(name, v, want string) {
	e.errs = append(e.errs, app.Usage(name, fmt.Errorf("%q is not %s", v, want)))
}

func (e *envReader) int(name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		e.bad(name, v, "an integer")
		return def
	}
	return n
}

func (e *envReader) uint64(name string, def uint64) uint64 {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64)
	if err != nil {
		e.bad(name, v, "an unsigned integer")
		return def
	}
	return n
}

func (e *envReader) bool(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		e.bad(name, v, "1, 0, true or false")
		return def
	}
	return b
}

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		e.bad(name, v, "a positive duration (e.g. 30s, 5m)")
		return def
	}
	return d
}

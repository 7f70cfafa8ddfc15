package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cmd/detcoll/internal/app"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
)

func init() { extraCommands = append(extraCommands, benchCmd) }

func benchCmd() *cobra.Command {
	var (
		dt, acc, device, output, plot string
		ops, algs                     []string
		sizes                         []string
		warmup, iters, samples, nproc int
		graph                         bool
		seed                          uint64
	)
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure the deterministic collectives against the native ones and write a detcoll.bench.v1 report",
		Long: `bench times AllReduce, AllGather and ReduceScatter with every algorithm
against the native collective on the same buffers (NCCL/RCCL on GPUs, the
ring reduce-scatter + all-gather Gloo uses on CPUs), checks that results are
bitwise stable across repeats and ranks and equal to the host oracle, and
prints a table. Every sample is the slowest rank's time.

Started by a launcher (detcoll launch, torchrun, Slurm, Open MPI) it runs as
one rank; otherwise it launches --nproc-per-node copies of itself on this
host over TCP loopback. List flags take space- or comma-separated values:
  detcoll bench --operations all_reduce all_gather --size-bytes 4096 65536`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := bench.Config{Warmup: warmup, Iterations: iters, Samples: samples, Graph: graph, Seed: seed, DetcollVersion: version}
			var err error
			if cfg.DType, err = dtype.Parse(dt); err != nil {
				return err
			}
			if cfg.Accumulate, err = reduce.ParseAccumulate(acc); err != nil {
				return err
			}
			for _, o := range splitList(ops) {
				op, err := bench.ParseOp(o)
				if err != nil {
					return err
				}
				cfg.Operations = append(cfg.Operations, op)
			}
			for _, a := range splitList(algs) {
				alg, err := detcoll.ParseAlgorithm(a)
				if err != nil {
					return err
				}
				cfg.Algorithms = append(cfg.Algorithms, alg)
			}
			for _, s := range splitList(sizes) {
				n, err := parseBytes(s)
				if err != nil {
					return err
				}
				cfg.SizesBytes = append(cfg.SizesBytes, n)
			}
			if len(cfg.SizesBytes) == 0 {
				cfg.SizesBytes = app.DefaultSizes
			}
			return app.Bench(cmd.Context(), app.BenchOptions{
				Config: cfg, Device: device, NprocPerNode: nproc, Output: output, Plot: plot,
				Args: os.Args[1:], Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&dt, "dtype", envDefault("DETCOLL_DTYPE", "bf16"), "bf16, fp16, fp32 or fp64 [DETCOLL_DTYPE]")
	f.StringSliceVar(&ops, "operations", strings.Fields(envDefault("DETCOLL_OPERATIONS", "all_reduce all_gather reduce_scatter")), "operations [DETCOLL_OPERATIONS]")
	f.StringSliceVar(&sizes, "size-bytes", strings.Fields(envDefault("DETCOLL_SIZE_BYTES", "")), "per-rank input sizes in bytes (K, M, G suffixes allowed) [DETCOLL_SIZE_BYTES]")
	f.StringSliceVar(&algs, "algorithms", strings.Fields(envDefault("DETCOLL_ALGORITHMS", "gather_tree a2a_tree")), "algorithms: auto, gather_tree, a2a_tree, one_shot, two_shot (all_gather rows: direct for the NCCL ones, ipc for the peer-memory ones) [DETCOLL_ALGORITHMS]")
	f.StringVar(&acc, "accumulate", envDefault("DETCOLL_ACCUMULATE", "native"), "fp16/bf16 accumulation: native or f32 [DETCOLL_ACCUMULATE]")
	f.IntVar(&warmup, "warmup", envInt("DETCOLL_WARMUP", 3), "warm-up iterations [DETCOLL_WARMUP]")
	f.IntVar(&iters, "iterations", envInt("DETCOLL_ITERATIONS", 5), "iterations per sample [DETCOLL_ITERATIONS]")
	f.IntVar(&samples, "samples", envInt("DETCOLL_SAMPLES", 5), "samples per row [DETCOLL_SAMPLES]")
	f.StringVar(&output, "output", envDefault("DETCOLL_OUTPUT", "detcoll-bench.json"), "write the JSON report here; empty for none [DETCOLL_OUTPUT]")
	f.StringVar(&plot, "plot", envDefault("DETCOLL_PLOT", ""), "write a latency plot (.svg or .png) [DETCOLL_PLOT]")
	f.StringVar(&device, "device", envDefault("DETCOLL_DEVICE", "auto"), "auto, cpu, cuda or rocm [DETCOLL_DEVICE]")
	f.IntVar(&nproc, "nproc-per-node", envInt("DETCOLL_NPROC_PER_NODE", 4), "ranks to start when no launcher started this process [DETCOLL_NPROC_PER_NODE]")
	f.BoolVar(&graph, "graph", envDefault("DETCOLL_GRAPH", "") == "1", "time CUDA-graph launches (GPU only) [DETCOLL_GRAPH=1]")
	f.Uint64Var(&seed, "seed", 1, "input seed")
	return cmd
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
	u := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "IB"), "B"))
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
	return n * mult, nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

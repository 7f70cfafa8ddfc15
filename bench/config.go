package bench

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// Op is a benchmarked operation, named as in the report.
//
// What input_bytes (the per-rank input) means for each:
//
//   - all_reduce: the buffer of count elements every rank sends (and receives).
//   - all_gather: the count elements every rank sends; it receives W times that.
//   - reduce_scatter: the W·count elements every rank sends; it receives count.
type Op string

// The operations.
const (
	AllReduce     Op = "all_reduce"
	AllGather     Op = "all_gather"
	ReduceScatter Op = "reduce_scatter"
)

// Ops lists every operation in report order.
var Ops = []Op{AllReduce, AllGather, ReduceScatter}

// Valid reports whether o is a known operation.
func (o Op) Valid() bool { return o == AllReduce || o == AllGather || o == ReduceScatter }

// ParseOp accepts all_reduce, all_gather and reduce_scatter, also with '-'
// for '_' or without the separator ("allreduce").
func ParseOp(s string) (Op, error) {
	k := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(strings.TrimSpace(s)))
	for _, o := range Ops {
		if strings.ReplaceAll(string(o), "_", "") == k {
			return o, nil
		}
	}
	return "", fmt.Errorf("bench: unknown operation %q (want all_reduce, all_gather or reduce_scatter)", s)
}

// DirectAlgorithm is the algorithm name of all_gather rows: AllGather has one
// algorithm, every rank sending its block straight to every other rank.
const DirectAlgorithm = "direct"

// IPCAlgorithm is the algorithm name of all_gather rows that copy through
// direct peer memory (the one_shot and two_shot algorithms of the list).
const IPCAlgorithm = "ipc"

// Config is one benchmark run. Every rank must pass the same Config (Run
// checks that before anything else).
type Config struct {
	// Operations to run, in this order; nil means Ops.
	Operations []Op
	// SizesBytes are the requested per-rank input sizes (see Op). Each is
	// rounded down to whole elements (at least one), and for reduce_scatter
	// to a multiple of W elements (at least W); rows record both the
	// requested size and the input_bytes actually run.
	SizesBytes []int
	// DType of every row; must be reducible (bf16, fp16, fp32, fp64).
	DType dtype.DType
	// Algorithms of the reductions (all_reduce, reduce_scatter), one row
	// each; nil means gather_tree and a2a_tree. all_gather rows run
	// "direct" for the NCCL algorithms of the list, "ipc" for one_shot or
	// two_shot and "auto" for auto.
	Algorithms []detcoll.Algorithm
	// Accumulate is the fp16/bf16 accumulate mode (recorded in the contract).
	Accumulate detcoll.Accumulate
	// Warmup iterations before the samples of every measurement (≥ 0).
	Warmup int
	// Iterations per sample (≥ 1); a sample is their mean.
	Iterations int
	// Samples per measurement (≥ 1).
	Samples int
	// Graph asks GPU backends to time CUDA-graph launches; recorded, ignored on CPU.
	Graph bool
	// Seed of the inputs (see FillInput).
	Seed uint64
	// Nodes is the number of hosts, recorded in the report (0 means 1).
	Nodes int
	// InPlace also measures each row in place, when the backend's cases
	// can (InPlaceCase), and checks that output too (nccl-tests' in-place
	// columns).
	InPlace bool
	// Timeout bounds every phase of the run on every rank (a case's
	// preparation, a first run, a warm-up, one sample, the checks, each
	// with the agreement after it); 0 means none beyond the Comm's own
	// (which does not cover the CPU ring baseline).
	Timeout time.Duration
	// OnStart, when set, is called on every rank once the ranks agree on
	// the configuration, with the report so far (no rows).
	OnStart func(rep *Report)
	// OnRow, when set, is called on every rank with each row as soon as
	// it is finished (identical on every rank), in report order.
	OnRow func(rep *Report, row Row)
	// Build is the code recorded in the report; a zero Build means
	// ResolveBuild("", "") (the build information, then git).
	Build Build
	// DetcollVersion is recorded in the report; empty means the main
	// module's version from the build information, or "dev".
	DetcollVersion string
}

// normalize fills defaults and validates.
func (c Config) normalize() (Config, error) {
	if c.Operations == nil {
		c.Operations = append([]Op(nil), Ops...)
	}
	if c.Algorithms == nil {
		c.Algorithms = []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree}
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	switch {
	case len(c.Operations) == 0:
		return c, fmt.Errorf("bench: no operations")
	case len(c.SizesBytes) == 0:
		return c, fmt.Errorf("bench: no sizes")
	case !c.DType.Valid():
		return c, fmt.Errorf("bench: dtype %v is not reducible (want bf16, fp16, fp32 or fp64)", c.DType)
	case !c.Accumulate.Valid():
		return c, fmt.Errorf("bench: unknown accumulate mode %v", c.Accumulate)
	case c.Warmup < 0 || c.Iterations < 1 || c.Samples < 1:
		return c, fmt.Errorf("bench: want warmup ≥ 0, iterations ≥ 1 and samples ≥ 1 (got %d, %d, %d)", c.Warmup, c.Iterations, c.Samples)
	case c.Timeout < 0:
		return c, fmt.Errorf("bench: timeout %v is negative", c.Timeout)
	case c.Nodes < 0:
		return c, fmt.Errorf("bench: nodes %d < 0", c.Nodes)
	}
	for _, o := range c.Operations {
		if !o.Valid() {
			return c, fmt.Errorf("bench: unknown operation %q", o)
		}
	}
	for _, s := range c.SizesBytes {
		if s <= 0 {
			return c, fmt.Errorf("bench: size %d bytes is not positive", s)
		}
	}
	needAlg := false
	for _, o := range c.Operations {
		needAlg = needAlg || o != AllGather
	}
	if needAlg && len(c.Algorithms) == 0 {
		return c, fmt.Errorf("bench: no algorithms for the reductions")
	}
	for _, a := range c.Algorithms {
		if !a.Valid() {
			return c, fmt.Errorf("bench: unknown algorithm %v", a)
		}
	}
	return c, nil
}

type configField struct {
	name  string // as the user knows it (the CLI's flag)
	value []byte // JSON
}

// fingerprintFields is what every rank must agree on, field by field.
func (c Config) fingerprintFields() []configField {
	algs := make([]string, len(c.Algorithms))
	for i, a := range c.Algorithms {
		algs[i] = a.String()
	}
	f := func(name string, v any) configField {
		b, _ := json.Marshal(v)
		return configField{name, b}
	}
	return []configField{
		f("operations", c.Operations), f("size-bytes", c.SizesBytes), f("dtype", c.DType.String()),
		f("accumulate", c.Accumulate.String()), f("algorithms", algs), f("warmup", c.Warmup),
		f("iterations", c.Iterations), f("samples", c.Samples), f("nodes", c.Nodes), f("graph", c.Graph),
		f("seed", c.Seed), f("timeout", c.Timeout.String()), f("in-place", c.InPlace),
	}
}

// InputBytes rounds a requested per-rank size to what op runs with dt over
// w ranks: whole elements, at least one; for reduce_scatter a multiple of w
// elements, at least w.
func InputBytes(op Op, dt dtype.DType, w, requested int) int {
	sz := dt.Size()
	if sz == 0 || w < 1 {
		return 0
	}
	n := requested / sz
	if op == ReduceScatter {
		n = n / w * w
		return max(n, w) * sz
	}
	return max(n, 1) * sz
}

// rowAlgorithms is the algorithm column of op's rows and the detcoll
// algorithm each runs.
func (c Config) rowAlgorithms(op Op) ([]string, []detcoll.Algorithm) {
	if op == AllGather {
		// AllGather has no reduction: the NCCL algorithms are one row,
		// "direct" (forced as gather_tree), the peer-memory ones another,
		// "ipc" (forced as one_shot), and auto its own.
		var names []string
		var algs []detcoll.Algorithm
		add := func(n string, a detcoll.Algorithm) {
			for _, m := range names {
				if m == n {
					return
				}
			}
			names, algs = append(names, n), append(algs, a)
		}
		for _, a := range c.Algorithms {
			switch a {
			case detcoll.Auto:
				add("auto", detcoll.Auto)
			case detcoll.OneShot, detcoll.TwoShot:
				add(IPCAlgorithm, detcoll.OneShot)
			default:
				add(DirectAlgorithm, detcoll.GatherTree)
			}
		}
		if names == nil {
			add(DirectAlgorithm, detcoll.GatherTree)
		}
		return names, algs
	}
	names := make([]string, len(c.Algorithms))
	for i, a := range c.Algorithms {
		names[i] = a.String()
	}
	return names, c.Algorithms
}

// BusBytes is the numerator of bus_gbps under nccl-tests' conventions:
// bus_gbps = BusBytes / median time / 1e9, with S the size nccl-tests
// reports for the operation:
//
//   - all_reduce: S = input_bytes, bus bytes = 2(W-1)/W · S;
//   - all_gather: S = the total output, W · input_bytes, bus bytes = (W-1)/W · S;
//   - reduce_scatter: S = the total input, input_bytes, bus bytes = (W-1)/W · S.
//
// It is the number of bytes a bandwidth-optimal algorithm moves over each
// rank's link, so it is comparable with the link's peak bandwidth.
func BusBytes(op Op, w, inputBytes int) float64 {
	fw, s := float64(w), float64(inputBytes)
	switch op {
	case AllReduce:
		return 2 * (fw - 1) / fw * s
	case AllGather:
		return (fw - 1) / fw * fw * s
	case ReduceScatter:
		return (fw - 1) / fw * s
	}
	return 0
}

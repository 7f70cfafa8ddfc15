// Package devverify checks a device communicator (gpu/devcomm) against the
// host oracle, bit for bit: every collective, dtype, count and algorithm,
// in place, on another stream, many lanes, CUDA-graph replays. It is the
// engine of `detcoll verify --device cuda|rocm` and of the GPU tests; all
// ranks call it together with the same options (it issues collectives).
package devverify

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/internal/gputest"
	"github.com/detcoll/detcoll/reduce"
)

type (
	// Comm is the communicator under test.
	Comm = devcomm.Comm
	// Buffer is a device buffer of the communicator.
	Buffer = devcomm.Buffer
	// Stream is a stream of the communicator's runtime.
	Stream = devcomm.Stream
	// DevicePtr is a device address.
	DevicePtr = devcomm.DevicePtr
)

// op is the collective of a case.
type op uint8

const (
	opAllReduce op = iota + 1
	opAllGather
	opReduceScatter
	opAllGatherMany
	opReduceScatterMany
)

var opNames = []string{"?", "AllReduce", "AllGather", "ReduceScatter", "AllGatherMany", "ReduceScatterMany"}

// VerifyOptions choose the checks of Verify. Every rank must pass the same
// options.
type VerifyOptions struct {
	// DTypes to check (default bf16, fp16, fp32, fp64).
	DTypes []dtype.DType
	// Counts, in elements: AllReduce's count, AllGather's send count,
	// ReduceScatter's receive count (default 1, 7, 1009, 65537, 1000003).
	Counts []int
	// Algorithms of the reductions (default gather_tree and a2a_tree, plus
	// one_shot and two_shot when the peer-memory path is on). AllGather
	// runs over NCCL when the list has gather_tree or a2a_tree and over
	// peer memory when it has one_shot or two_shot.
	Algorithms []detcoll.Algorithm
	// Accumulate modes for bf16 and fp16 (default native).
	Accumulate []detcoll.Accumulate
	// LargeBytes, when positive, adds bf16 cases whose per-rank input is
	// this many bytes (e.g. 256 MiB) for every operation and algorithm.
	LargeBytes int
	// Repeats of every case (default 3); all must give the same bits.
	Repeats int
	// NoLanes skips the AllGatherMany and ReduceScatterMany cases.
	NoLanes bool
	// NoGraph skips the CUDA-graph capture and replay cases.
	NoGraph bool
	// Seed of the inputs (default 1).
	Seed uint64
	// Log, when set, is called with one line per case.
	Log func(string)
	// Vendor is VerifyJob's WithVendor ("" picks as New does).
	Vendor string
}

// Result is the outcome of one check on this rank.
type Result struct {
	Case      string        `json:"case"`
	Operation string        `json:"operation"`
	DType     string        `json:"dtype"`
	Algorithm string        `json:"algorithm,omitempty"`
	Counts    []int         `json:"counts"`
	Repeats   int           `json:"repeats"`
	Bitwise   bool          `json:"oracle_bitwise"` // every repeat equal to the host oracle
	Stable    bool          `json:"repeat_bitwise"` // every repeat equal to the first
	Error     string        `json:"error,omitempty"`
	Elapsed   time.Duration `json:"elapsed_ns"`
}

// OK reports whether the check passed.
func (r Result) OK() bool { return r.Error == "" && r.Bitwise && r.Stable }

func (r Result) String() string {
	status := "ok"
	switch {
	case r.Error != "":
		status = "ERROR " + r.Error
	case !r.Bitwise:
		status = "DIFFERS FROM THE ORACLE"
	case !r.Stable:
		status = "NOT STABLE OVER REPEATS"
	}
	return fmt.Sprintf("%-62s %s (%v)", r.Case, status, r.Elapsed.Round(time.Millisecond))
}

// VerifyJob opens a communicator on the job (New), runs Verify and closes it.
func VerifyJob(ctx context.Context, job *cluster.Job, opt VerifyOptions) ([]Result, error) {
	c, err := devcomm.New(ctx, job, devcomm.WithVendor(opt.Vendor))
	if err != nil {
		return nil, err
	}
	res, err := Verify(ctx, c, opt)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return res, err
}

// Verify runs every collective of the communicator on device memory and
// compares the result on this rank with the host oracle (reduce.Oracle; for
// AllGather the concatenation), bit for bit, over several repeats: every
// dtype, count and algorithm; in place; on the communicator's stream and on
// another stream; the many-lane variants; and a CUDA-graph capture replayed
// several times. All ranks must call it together with the same options. It
// returns one Result per check; the error is for failures that stop the
// run (a collective that fails poisons the communicator).
// Verify runs every collective of the communicator on device memory and
// compares the result on this rank with the host oracle (reduce.Oracle; for
// AllGather the concatenation), bit for bit, over several repeats: every
// dtype, count and algorithm; in place; on the communicator's stream and on
// another stream; the many-lane variants; and a CUDA-graph capture replayed
// several times. All ranks must call it together with the same options. It
// returns one Result per check; the error is for failures that stop the
// run (a collective that fails poisons the communicator).
func Verify(ctx context.Context, c *Comm, opt VerifyOptions) ([]Result, error) {
	if opt.Algorithms == nil {
		opt.Algorithms = []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree}
		if on, _ := c.IPC(); on {
			opt.Algorithms = append(opt.Algorithms, detcoll.OneShot, detcoll.TwoShot)
		}
	}
	opt = opt.withDefaults()
	v := &verifier{c: c, opt: opt, dev: c.Device()}
	var err error
	if v.other, err = v.dev.NewStream(); err != nil {
		return nil, err
	}
	defer func() {
		_ = c.ReleaseStream(v.other)
		_ = v.dev.DestroyStream(v.other)
	}()
	var results []Result
	for i, vc := range cases(opt, c.Size()) {
		vc.seed = opt.Seed*1_000_003 + uint64(i)
		res := v.run(ctx, vc)
		if opt.Log != nil {
			opt.Log(res.String())
		}
		results = append(results, res)
		if res.Error != "" && c.Err() != nil {
			return results, c.Err()
		}
	}
	return results, nil
}

// gatherAlgorithms are the AllGather paths the reduction algorithms stand
// for: GatherTree for NCCL, OneShot for peer memory.
func gatherAlgorithms(algs []detcoll.Algorithm) []detcoll.Algorithm {
	var out []detcoll.Algorithm
	for _, a := range algs {
		ag := detcoll.GatherTree
		if a == detcoll.OneShot || a == detcoll.TwoShot {
			ag = detcoll.OneShot
		}
		if !slices.Contains(out, ag) {
			out = append(out, ag)
		}
	}
	return out
}

// cases lists the checks of opt on w ranks, in the order every rank runs
// them.
func cases(opt VerifyOptions, w int) []vcase {
	agAlgs := gatherAlgorithms(opt.Algorithms)
	var cs []vcase
	for _, dt := range opt.DTypes {
		accs := []detcoll.Accumulate{detcoll.AccumulateNative}
		if dt.Size() == 2 {
			accs = opt.Accumulate
		}
		for _, n := range opt.Counts {
			for _, acc := range accs {
				for _, alg := range opt.Algorithms {
					cs = append(cs,
						vcase{op: opAllReduce, dt: dt, acc: acc, alg: alg, counts: []int{n}},
						vcase{op: opReduceScatter, dt: dt, acc: acc, alg: alg, counts: []int{n}})
				}
			}
			for _, ag := range agAlgs {
				cs = append(cs, vcase{op: opAllGather, dt: dt, alg: ag, counts: []int{n}})
			}
		}
	}
	cs = append(cs, shapeCases(opt, agAlgs)...)
	if opt.LargeBytes > 0 {
		n := opt.LargeBytes / 2
		for _, alg := range opt.Algorithms {
			cs = append(cs,
				vcase{op: opAllReduce, dt: dtype.BF16, alg: alg, counts: []int{n}},
				vcase{op: opReduceScatter, dt: dtype.BF16, alg: alg, counts: []int{n / w}})
		}
		for _, ag := range agAlgs {
			cs = append(cs, vcase{op: opAllGather, dt: dtype.BF16, alg: ag, counts: []int{n}})
		}
	}
	return cs
}

// shapeCases are in place, lanes and graphs on a few shapes.
func shapeCases(opt VerifyOptions, agAlgs []detcoll.Algorithm) []vcase {
	var cs []vcase
	for _, alg := range opt.Algorithms {
		for _, n := range []int{7, 65537} {
			cs = append(cs, vcase{op: opAllReduce, dt: dtype.BF16, alg: alg, counts: []int{n}, inPlace: true})
		}
		if !opt.NoLanes {
			cs = append(cs,
				vcase{op: opReduceScatterMany, dt: dtype.BF16, alg: alg, counts: []int{3, 0, 4097, 1}},
				vcase{op: opReduceScatterMany, dt: dtype.FP32, alg: alg, counts: []int{65536, 7}})
		}
		if !opt.NoGraph {
			cs = append(cs,
				vcase{op: opAllReduce, dt: dtype.BF16, alg: alg, counts: []int{1000003}, graph: true},
				vcase{op: opReduceScatter, dt: dtype.FP32, alg: alg, counts: []int{4099}, graph: true})
		}
	}
	for _, ag := range agAlgs {
		cs = append(cs, vcase{op: opAllGather, dt: dtype.FP16, alg: ag, counts: []int{65537}, inPlace: true})
		if !opt.NoLanes {
			cs = append(cs,
				vcase{op: opAllGatherMany, dt: dtype.BF16, alg: ag, counts: []int{5, 0, 65536, 1}},
				vcase{op: opAllGatherMany, dt: dtype.Byte, alg: ag, counts: []int{3, 1 << 20}})
		}
		if !opt.NoGraph {
			cs = append(cs, vcase{op: opAllGather, dt: dtype.BF16, alg: ag, counts: []int{12345}, graph: true})
		}
	}
	return cs
}

func (o VerifyOptions) withDefaults() VerifyOptions {
	if o.DTypes == nil {
		o.DTypes = []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64}
	}
	if o.Counts == nil {
		o.Counts = []int{1, 7, 1009, 65537, 1000003}
	}
	if o.Algorithms == nil {
		o.Algorithms = []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree}
	}
	if o.Accumulate == nil {
		o.Accumulate = []detcoll.Accumulate{detcoll.AccumulateNative}
	}
	if o.Repeats < 1 {
		o.Repeats = 3
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

type vcase struct {
	op      op
	dt      dtype.DType
	acc     detcoll.Accumulate
	alg     detcoll.Algorithm
	counts  []int
	inPlace bool
	graph   bool
	seed    uint64
}

func (vc vcase) name() string {
	s := fmt.Sprintf("%s %v", opNames[vc.op], vc.dt)
	switch vc.op {
	case opAllGather, opAllGatherMany:
		s += " " + vc.algName()
	case opAllReduce, opReduceScatter, opReduceScatterMany:
		s += " " + vc.alg.String()
		if vc.dt.Size() == 2 && vc.acc != detcoll.AccumulateNative {
			s += " acc=" + vc.acc.String()
		}
	}
	if len(vc.counts) == 1 {
		s += fmt.Sprintf(" count=%d", vc.counts[0])
	} else {
		s += fmt.Sprintf(" counts=%v", vc.counts)
	}
	if vc.inPlace {
		s += " in-place"
	}
	if vc.graph {
		s += " graph-replay"
	}
	return s
}

// algName is the algorithm column: AllGather has "nccl" and "ipc".
func (vc vcase) algName() string {
	switch {
	case vc.op != opAllGather && vc.op != opAllGatherMany:
		return vc.alg.String()
	case vc.alg == detcoll.OneShot || vc.alg == detcoll.TwoShot:
		return "ipc"
	case vc.alg == detcoll.Auto:
		return "auto"
	}
	return "nccl"
}

type verifier struct {
	c     *Comm
	dev   *gpu.Device
	opt   VerifyOptions
	other Stream
}

// vlane is one lane of a case: host inputs of every rank, the expected
// output of this rank, device buffers.
type vlane struct {
	inputs   [][]byte
	want     []byte
	got      []byte
	first    []byte
	send     Buffer
	recv     Buffer
	inBytes  int
	outBytes int
	alloc    []DevicePtr
}

func (v *verifier) run(ctx context.Context, vc vcase) (res Result) {
	start := time.Now()
	res = Result{Case: vc.name(), Operation: opNames[vc.op], DType: vc.dt.String(), Counts: vc.counts, Repeats: v.opt.Repeats, Bitwise: true, Stable: true}
	res.Algorithm = vc.algName()
	defer func() { res.Elapsed = time.Since(start) }()
	lanes, err := v.prepare(vc)
	defer func() {
		for _, l := range lanes {
			for _, p := range l.alloc {
				_ = v.dev.Free(p)
			}
		}
	}()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	var graph gpu.GraphExec
	defer func() {
		if graph != 0 {
			_ = v.dev.DestroyGraph(graph)
		}
	}()
	for rep := 0; rep < v.opt.Repeats; rep++ {
		if err := v.repeat(ctx, vc, lanes, rep, &graph, &res); err != nil {
			res.Error = err.Error()
			return res
		}
	}
	return res
}

// repeat runs repeat rep of vc (eagerly, on the other stream for rep 1, or
// as a graph replay) and compares the outputs with the oracle and with the
// first repeat.
func (v *verifier) repeat(ctx context.Context, vc vcase, lanes []*vlane, rep int, graph *gpu.GraphExec, res *Result) error {
	if err := v.reset(vc, lanes); err != nil {
		return err
	}
	stream := v.c.Stream()
	var err error
	switch {
	case vc.graph:
		if *graph == 0 {
			if *graph, err = v.capture(ctx, vc, lanes); err != nil {
				return err
			}
		}
		stream = v.other
		err = v.c.LaunchGraph(*graph, v.other)
	case rep == 1:
		stream = v.other // a stream of the caller's, joined to the communicator's
		err = v.issue(ctx, vc, lanes, stream)
	default:
		err = v.issue(ctx, vc, lanes, stream)
	}
	if err == nil {
		err = v.dev.Synchronize(stream)
	}
	if err != nil {
		return err
	}
	for _, l := range lanes {
		if err := v.dev.CopyDtoH(l.got, l.recv.Ptr); err != nil {
			return err
		}
		if !bytes.Equal(l.got, l.want) {
			res.Bitwise = false
		}
		if rep == 0 {
			l.first = append(l.first[:0], l.got...)
		} else if !bytes.Equal(l.got, l.first) {
			res.Stable = false
		}
	}
	return nil
}

// capture runs vc once outside a capture (grows the workspace, checks the
// signature), then captures it on the other stream.
func (v *verifier) capture(ctx context.Context, vc vcase, lanes []*vlane) (gpu.GraphExec, error) {
	if err := v.issue(ctx, vc, lanes, v.c.Stream()); err != nil {
		return 0, err
	}
	if err := v.c.Synchronize(); err != nil {
		return 0, err
	}
	if err := v.reset(vc, lanes); err != nil {
		return 0, err
	}
	g, err := v.dev.Capture(v.other, func() error { return v.issue(ctx, vc, lanes, v.other) })
	if err != nil {
		return 0, fmt.Errorf("capture: %w", err)
	}
	return g, nil
}

func (v *verifier) issue(ctx context.Context, vc vcase, lanes []*vlane, s Stream) error {
	opts := []devcomm.CallOption{devcomm.OnStream(s), devcomm.WithAlgorithm(vc.alg), devcomm.WithAccumulate(vc.acc)}
	sends := make([]Buffer, len(lanes))
	recvs := make([]Buffer, len(lanes))
	for i, l := range lanes {
		sends[i], recvs[i] = l.send, l.recv
	}
	n := vc.counts[0]
	switch vc.op {
	case opAllReduce:
		return v.c.AllReduce(ctx, sends[0], recvs[0], n, vc.dt, opts...)
	case opAllGather:
		return v.c.AllGather(ctx, sends[0], recvs[0], n, vc.dt, opts...)
	case opReduceScatter:
		return v.c.ReduceScatter(ctx, sends[0], recvs[0], n, vc.dt, opts...)
	case opAllGatherMany:
		return v.c.AllGatherMany(ctx, sends, recvs, vc.counts, vc.dt, opts...)
	case opReduceScatterMany:
		return v.c.ReduceScatterMany(ctx, sends, recvs, vc.counts, vc.dt, opts...)
	}
	return fmt.Errorf("unknown operation %d", vc.op)
}

// prepare makes the inputs of every rank, this rank's expected output and
// the device buffers.
func (v *verifier) prepare(vc vcase) ([]*vlane, error) {
	w, r := v.c.Size(), v.c.Rank()
	sz := vc.dt.Size()
	var lanes []*vlane
	for li, count := range vc.counts {
		l := &vlane{}
		lanes = append(lanes, l)
		switch vc.op {
		case opAllReduce:
			l.inBytes, l.outBytes = count*sz, count*sz
		case opAllGather, opAllGatherMany:
			l.inBytes, l.outBytes = count*sz, w*count*sz
		default:
			l.inBytes, l.outBytes = w*count*sz, count*sz
		}
		l.inputs = make([][]byte, w)
		for p := range l.inputs {
			l.inputs[p] = make([]byte, l.inBytes)
			gputest.FillInput(l.inputs[p], vc.dt, vc.seed*31+uint64(li), p)
		}
		l.want = make([]byte, l.outBytes)
		l.got = make([]byte, l.outBytes)
		if err := expect(vc, l, w, r); err != nil {
			return lanes, err
		}
		recv, err := v.dev.Alloc(max(l.outBytes, 1))
		if err != nil {
			return lanes, err
		}
		l.alloc = append(l.alloc, recv)
		l.recv = Buffer{Ptr: recv, Bytes: l.outBytes}
		switch {
		case vc.inPlace && vc.op == opAllReduce:
			l.send = l.recv
		case vc.inPlace && vc.op == opAllGather:
			l.send = l.recv.Slice(r*l.inBytes, l.inBytes)
		default:
			send, err := v.dev.Alloc(max(l.inBytes, 1))
			if err != nil {
				return lanes, err
			}
			l.alloc = append(l.alloc, send)
			l.send = Buffer{Ptr: send, Bytes: l.inBytes}
			if err := v.dev.CopyHtoD(send, l.inputs[r]); err != nil {
				return lanes, err
			}
		}
	}
	return lanes, nil
}

// reset poisons the outputs (0xFF bytes: NaN in every float format) and,
// for in-place cases, uploads the input again.
func (v *verifier) reset(vc vcase, lanes []*vlane) error {
	r := v.c.Rank()
	for _, l := range lanes {
		if l.outBytes > 0 {
			if err := v.dev.Memset(l.recv.Ptr, 0xFF, l.outBytes); err != nil {
				return err
			}
		}
		if vc.inPlace && l.inBytes > 0 {
			if err := v.dev.CopyHtoD(l.send.Ptr, l.inputs[r]); err != nil {
				return err
			}
		}
	}
	return nil
}

// expect computes this rank's expected output of lane l.
func expect(vc vcase, l *vlane, w, r int) error {
	sz := vc.dt.Size()
	switch vc.op {
	case opAllGather, opAllGatherMany:
		for p := 0; p < w; p++ {
			copy(l.want[p*l.inBytes:], l.inputs[p])
		}
		return nil
	}
	n := l.outBytes / sz
	base := 0 // element offset of the reduced block in the inputs
	if vc.op == opReduceScatter || vc.op == opReduceScatterMany {
		base = r * n
	}
	return gputest.Parallel(n, 1<<15, func(lo, hi int) error {
		ins := make([][]byte, w)
		for p := range ins {
			ins[p] = l.inputs[p][(base+lo)*sz : (base+hi)*sz]
		}
		return reduce.Oracle(vc.dt, vc.acc, ins, l.want[lo*sz:hi*sz])
	})
}

package devcomm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/reduce"
)

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
	c, err := New(ctx, job, WithVendor(opt.Vendor))
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
func Verify(ctx context.Context, c *Comm, opt VerifyOptions) ([]Result, error) {
	if opt.Algorithms == nil {
		opt.Algorithms = []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree}
		if on, _ := c.IPC(); on {
			opt.Algorithms = append(opt.Algorithms, detcoll.OneShot, detcoll.TwoShot)
		}
	}
	opt = opt.withDefaults()
	var agAlgs []detcoll.Algorithm // GatherTree: NCCL, OneShot: peer memory
	for _, a := range opt.Algorithms {
		ag := detcoll.GatherTree
		if a == detcoll.OneShot || a == detcoll.TwoShot {
			ag = detcoll.OneShot
		}
		if !slices.Contains(agAlgs, ag) {
			agAlgs = append(agAlgs, ag)
		}
	}
	v := &verifier{c: c, opt: opt, dev: c.Device()}
	var err error
	if v.other, err = v.dev.NewStream(); err != nil {
		return nil, err
	}
	defer func() {
		_ = c.ReleaseStream(v.other)
		_ = v.dev.DestroyStream(v.other)
	}()
	var cases []vcase
	for _, dt := range opt.DTypes {
		accs := []detcoll.Accumulate{detcoll.AccumulateNative}
		if dt.Size() == 2 {
			accs = opt.Accumulate
		}
		for _, n := range opt.Counts {
			for _, acc := range accs {
				for _, alg := range opt.Algorithms {
					cases = append(cases,
						vcase{op: opAllReduce, dt: dt, acc: acc, alg: alg, counts: []int{n}},
						vcase{op: opReduceScatter, dt: dt, acc: acc, alg: alg, counts: []int{n}})
				}
			}
			for _, ag := range agAlgs {
				cases = append(cases, vcase{op: opAllGather, dt: dt, alg: ag, counts: []int{n}})
			}
		}
	}
	// In place, lanes and graphs on a few shapes.
	for _, alg := range opt.Algorithms {
		for _, n := range []int{7, 65537} {
			cases = append(cases, vcase{op: opAllReduce, dt: dtype.BF16, alg: alg, counts: []int{n}, inPlace: true})
		}
		if !opt.NoLanes {
			cases = append(cases,
				vcase{op: opReduceScatterMany, dt: dtype.BF16, alg: alg, counts: []int{3, 0, 4097, 1}},
				vcase{op: opReduceScatterMany, dt: dtype.FP32, alg: alg, counts: []int{65536, 7}})
		}
		if !opt.NoGraph {
			cases = append(cases,
				vcase{op: opAllReduce, dt: dtype.BF16, alg: alg, counts: []int{1000003}, graph: true},
				vcase{op: opReduceScatter, dt: dtype.FP32, alg: alg, counts: []int{4099}, graph: true})
		}
	}
	for _, ag := range agAlgs {
		cases = append(cases, vcase{op: opAllGather, dt: dtype.FP16, alg: ag, counts: []int{65537}, inPlace: true})
		if !opt.NoLanes {
			cases = append(cases,
				vcase{op: opAllGatherMany, dt: dtype.BF16, alg: ag, counts: []int{5, 0, 65536, 1}},
				vcase{op: opAllGatherMany, dt: dtype.Byte, alg: ag, counts: []int{3, 1 << 20}})
		}
		if !opt.NoGraph {
			cases = append(cases, vcase{op: opAllGather, dt: dtype.BF16, alg: ag, counts: []int{12345}, graph: true})
		}
	}
	if opt.LargeBytes > 0 {
		n := opt.LargeBytes / 2
		for _, alg := range opt.Algorithms {
			cases = append(cases,
				vcase{op: opAllReduce, dt: dtype.BF16, alg: alg, counts: []int{n}},
				vcase{op: opReduceScatter, dt: dtype.BF16, alg: alg, counts: []int{n / c.Size()}})
		}
		for _, ag := range agAlgs {
			cases = append(cases, vcase{op: opAllGather, dt: dtype.BF16, alg: ag, counts: []int{n}})
		}
	}
	var results []Result
	for i, vc := range cases {
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
	op      uint8
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
		if err := v.reset(vc, lanes); err != nil {
			res.Error = err.Error()
			return res
		}
		stream := v.c.Stream()
		switch {
		case vc.graph:
			if graph == 0 {
				// Once outside the capture (grows the workspace, checks the
				// signature), then capture on the other stream.
				if err := v.issue(ctx, vc, lanes, stream); err != nil {
					res.Error = err.Error()
					return res
				}
				if err := v.c.Synchronize(); err != nil {
					res.Error = err.Error()
					return res
				}
				if err := v.reset(vc, lanes); err != nil {
					res.Error = err.Error()
					return res
				}
				graph, err = v.dev.Capture(v.other, func() error { return v.issue(ctx, vc, lanes, v.other) })
				if err != nil {
					res.Error = "capture: " + err.Error()
					return res
				}
			}
			stream = v.other
			err = v.dev.LaunchGraph(graph, v.other)
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
			res.Error = err.Error()
			return res
		}
		for _, l := range lanes {
			if err := v.dev.CopyDtoH(l.got, l.recv.Ptr); err != nil {
				res.Error = err.Error()
				return res
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
	}
	return res
}

// issue enqueues the case's collective on s.
func (v *verifier) issue(ctx context.Context, vc vcase, lanes []*vlane, s Stream) error {
	opts := []CallOption{OnStream(s), WithAlgorithm(vc.alg), WithAccumulate(vc.acc)}
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
			fillVerifyInput(l.inputs[p], vc.dt, vc.seed*31+uint64(li), p)
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
	return parallel(n, 1<<15, func(lo, hi int) error {
		ins := make([][]byte, w)
		for p := range ins {
			ins[p] = l.inputs[p][(base+lo)*sz : (base+hi)*sz]
		}
		return reduce.Oracle(vc.dt, vc.acc, ins, l.want[lo*sz:hi*sz])
	})
}

// parallel runs fn over [0, n) in blocks on every core.
func parallel(n, block int, fn func(lo, hi int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range next {
				if err := fn(lo, min(lo+block, n)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for lo := 0; lo < n; lo += block {
		next <- lo
	}
	close(next)
	wg.Wait()
	return first
}

// fillVerifyInput writes rank's input: mostly finite values of varied
// magnitude and sign (sums sensitive to their order), with about one element
// in 61 special: ±0, ±inf, a NaN with a payload, a subnormal, the largest
// finite value. Generated in parallel; a pure function of (dt, seed, rank, index).
func fillVerifyInput(dst []byte, dt dtype.DType, seed uint64, rank int) {
	sz := dt.Size()
	key := mix64(seed ^ mix64(uint64(rank)+1) ^ uint64(dt)<<56)
	_ = parallel(len(dst)/sz, 1<<16, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			h := mix64(key + uint64(i)*0x9E3779B97F4A7C15)
			putElem(dst[i*sz:], dt, h)
		}
		return nil
	})
}

func putElem(b []byte, dt dtype.DType, h uint64) {
	e := int((h>>52)&0xFF)%13 - 10
	sign := h >> 63
	f := math.Ldexp(1+float64(h&(1<<52-1))/(1<<52), e)
	if sign != 0 {
		f = -f
	}
	if (h>>8)%61 == 0 {
		switch (h >> 16) % 7 {
		case 0:
			f = 0
		case 1:
			f = math.Copysign(0, -1)
		case 2:
			f = math.Inf(1)
		case 3:
			f = math.Inf(-1)
		case 4:
			f = math.NaN()
		case 5:
			f = 1e-300 // a subnormal after narrowing (or tiny in f64)
		case 6:
			f = math.MaxFloat64
		}
	}
	switch dt {
	case dtype.FP64:
		bits := math.Float64bits(f)
		if f != f {
			bits = 0x7FF4000000000123 // a signalling NaN with a payload
		}
		putLE(b, bits, 8)
	case dtype.FP32:
		x := float32(f)
		bits := math.Float32bits(x)
		if f != f {
			bits = 0xFFA00001
		} else if f == 1e-300 {
			bits = 0x00000003
		}
		putLE(b, uint64(bits), 4)
	case dtype.BF16:
		v := dtype.Float32ToBF16(float32(f))
		if f != f {
			v = 0xFF81
		} else if f == 1e-300 {
			v = 0x0003
		}
		putLE(b, uint64(v), 2)
	case dtype.FP16:
		v := dtype.Float32ToFP16(float32(f))
		if f != f {
			v = 0xFC01
		} else if f == 1e-300 {
			v = 0x0003
		}
		putLE(b, uint64(v), 2)
	default:
		putLE(b, h, dt.Size())
	}
}

func putLE(b []byte, v uint64, n int) {
	for i := 0; i < n; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

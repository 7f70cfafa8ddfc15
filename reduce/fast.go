package reduce

import (
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/tree"
)

// blockElems is the number of elements one worker reduces per pass: small
// enough that W staged inputs and the tree scratch stay in L1/L2.
const blockElems = 1024

// minParallelElems is the input size (elements × W) below which one
// goroutine is faster than waking the pool.
const minParallelElems = 1 << 16

// Reducer is the fast host reducer: blocked over elements, spread over a
// fixed pool of worker goroutines, and allocation-free per call once its
// scratch has grown. It produces exactly Oracle's bits.
//
// A Reducer is safe for concurrent use (calls are serialised). Close stops
// its workers; a closed Reducer still works, on the calling goroutine.
type Reducer struct {
	mu      sync.Mutex
	workers []*worker
	tasks   chan task
	done    chan struct{}
	closed  bool
	levels  map[int][]tree.Level
}

type task struct {
	w      *worker
	dt     dtype.DType
	acc    Accumulate
	inputs [][]byte
	out    []byte
	levels []tree.Level
	lo, hi int
	nt     bool // the fused kernels write out with non-temporal stores (ReduceUncached)
}

type worker struct {
	stage   [][]float32 // widened/aligned copies of the inputs, one block each
	stage64 [][]float64
	scratch [][]float32 // tree nodes, ceil(W/2) blocks
	scr64   [][]float64
	cur     [][]float32 // per-level value references
	cur64   [][]float64
}

// NewReducer returns a Reducer with the given number of workers (≤ 0: GOMAXPROCS).
func NewReducer(workers int) *Reducer {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	r := &Reducer{tasks: make(chan task), done: make(chan struct{}, workers), levels: map[int][]tree.Level{}}
	for i := 0; i < workers; i++ {
		r.workers = append(r.workers, &worker{})
	}
	for i := 1; i < workers; i++ { // worker 0 runs on the caller
		go r.loop()
	}
	return r
}

// Workers is the number of goroutines a large reduction uses.
func (r *Reducer) Workers() int { return len(r.workers) }

func (r *Reducer) loop() {
	for t := range r.tasks {
		t.w.run(t)
		r.done <- struct{}{}
	}
}

// Close stops the worker goroutines. It is idempotent.
func (r *Reducer) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.tasks)
	}
}

// Reduce writes the canonical reduction of inputs into out: the same bits as
// Oracle. out may be one of the inputs (exactly), never a partial overlap.
func (r *Reducer) Reduce(dt dtype.DType, acc Accumulate, inputs [][]byte, out []byte) error {
	return r.reduce(dt, acc, inputs, out, false)
}

// ReduceUncached is Reduce for an output that nobody reads soon and that,
// with the rest of the caller's output, is larger than the last-level
// cache: where a fused kernel applies (fp32, and bf16 native, at W = 2, 4
// and 8, on amd64 with AVX2) it writes out with non-temporal stores, so no
// output line is fetched before it is written and the inputs stay in the
// cache. The bits are Reduce's. Where no such kernel applies, or out is not
// aligned for it (32 bytes for fp32, 16 for bf16), it is Reduce. A 16 MiB
// fp32 reduction at W = 2 on one core took 1.1–1.3 ms this way against 1.7
// (docs/shm.md, "Uncached reduce output").
func (r *Reducer) ReduceUncached(dt dtype.DType, acc Accumulate, inputs [][]byte, out []byte) error {
	return r.reduce(dt, acc, inputs, out, true)
}

func (r *Reducer) reduce(dt dtype.DType, acc Accumulate, inputs [][]byte, out []byte, nt bool) error {
	n, err := Check(dt, acc, inputs, out)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	levels, ok := r.levels[len(inputs)]
	if !ok {
		levels = tree.Levels(len(inputs))
		r.levels[len(inputs)] = levels
	}
	parts := len(r.workers)
	if r.closed || n*len(inputs) < minParallelElems {
		parts = 1
	}
	if parts > 1 {
		// Split into whole blocks so that every worker gets aligned work.
		blocks := (n + blockElems - 1) / blockElems
		if blocks < parts {
			parts = blocks
		}
		perBlocks := (blocks + parts - 1) / parts
		parts = (blocks + perBlocks - 1) / perBlocks // no worker gets an empty (or negative) range
		per := perBlocks * blockElems
		for i := 1; i < parts; i++ {
			lo, hi := i*per, min((i+1)*per, n)
			r.tasks <- task{w: r.workers[i], dt: dt, acc: acc, inputs: inputs, out: out, levels: levels, lo: lo, hi: hi, nt: nt}
		}
		r.workers[0].run(task{w: r.workers[0], dt: dt, acc: acc, inputs: inputs, out: out, levels: levels, lo: 0, hi: min(per, n), nt: nt})
		for i := 1; i < parts; i++ {
			<-r.done
		}
		return nil
	}
	r.workers[0].run(task{w: r.workers[0], dt: dt, acc: acc, inputs: inputs, out: out, levels: levels, lo: 0, hi: n, nt: nt})
	return nil
}

func (w *worker) grow(nin int, wide bool) {
	half := (nin + 1) / 2
	if wide {
		for len(w.stage64) < nin {
			w.stage64 = append(w.stage64, make([]float64, blockElems))
		}
		for len(w.scr64) < half {
			w.scr64 = append(w.scr64, make([]float64, blockElems))
		}
		if cap(w.cur64) < nin {
			w.cur64 = make([][]float64, nin)
		}
		return
	}
	for len(w.stage) < nin {
		w.stage = append(w.stage, make([]float32, blockElems))
	}
	for len(w.scratch) < half {
		w.scratch = append(w.scratch, make([]float32, blockElems))
	}
	if cap(w.cur) < nin {
		w.cur = make([][]float32, nin)
	}
}

func aligned(b []byte, a uintptr) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%a == 0
}

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
func f64s(b []byte) []float64 {
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
func u16s(b []byte) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}
func u32s(b []byte) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
func u64s(b []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

func (w *worker) run(t task) {
	if t.dt == dtype.FP64 {
		w.grow(len(t.inputs), true)
		for lo := t.lo; lo < t.hi; lo += blockElems {
			w.block64(t, lo, min(lo+blockElems, t.hi))
		}
		return
	}
	w.grow(len(t.inputs), false)
	lo0 := t.lo
	switch t.dt {
	case dtype.BF16: // W = 2, 4, 8 native: one fused pass, the tree in registers
		lo0 += treeBF16Vec(t, t.lo, t.hi)
	case dtype.FP32:
		lo0 += treeF32Vec(t, t.lo, t.hi)
	}
	for lo := lo0; lo < t.hi; lo += blockElems {
		w.block32(t, lo, min(lo+blockElems, t.hi))
	}
}

// block32 reduces elements [lo, hi) of fp32, bf16 or fp16 inputs.
func (w *worker) block32(t task, lo, hi int) {
	n := hi - lo
	sz := t.dt.Size()
	nin := len(t.inputs)
	cur := w.cur[:nin]
	round := t.acc == Native && t.dt != dtype.FP32
	levels := t.levels
	if t.dt == dtype.BF16 && len(levels) > 0 && w.firstLevelBF16(t, lo, hi, round) {
		levels = levels[1:]
	} else {
		w.widen(t, lo, hi)
	}
	for _, l := range levels {
		for _, p := range l.Pairs {
			d := w.scratch[p.Dst][:n]
			a, b := cur[p.Left][:n], cur[p.Right][:n]
			switch {
			case !round:
				addF32(d, a, b)
			case t.dt == dtype.BF16:
				addRoundBF16(d, a, b)
			default:
				addRoundFP16(d, a, b)
			}
			cur[p.Dst] = d
		}
		if l.Carry >= 0 {
			cur[l.CarryDst] = cur[l.Carry]
		}
	}
	// Root: narrow to the dtype with canonical NaN.
	res := cur[0][:n]
	ob := t.out[lo*sz : hi*sz]
	switch t.dt {
	case dtype.FP32:
		if aligned(ob, 4) {
			o := u32s(ob)
			k0 := canonF32Vec(o, res)
			for k, v := range res[k0:] {
				k += k0
				bits := math.Float32bits(v)
				if v != v {
					bits = dtype.CanonicalNaN32
				}
				o[k] = bits
			}
			return
		}
		for k, v := range res {
			bits := math.Float32bits(v)
			if v != v {
				bits = dtype.CanonicalNaN32
			}
			put32(ob[4*k:], bits)
		}
	case dtype.BF16, dtype.FP16:
		narrow := dtype.Float32ToBF16
		if t.dt == dtype.FP16 {
			narrow = dtype.Float32ToFP16
		}
		if aligned(ob, 2) {
			o := u16s(ob)
			if t.dt == dtype.BF16 {
				for k := narrowBF16Vec(o, res); k < len(res); k++ {
					o[k] = dtype.Float32ToBF16(res[k])
				}
				return
			}
			for k, v := range res {
				o[k] = narrow(v)
			}
			return
		}
		for k, v := range res {
			put16(ob[2*k:], narrow(v))
		}
	}
}

// addF32 is d = a + b, IEEE float32.
func addF32(d, a, b []float32) {
	a = a[:len(d)]
	b = b[:len(d)]
	for k := addF32Vec(d, a, b); k < len(d); k++ {
		d[k] = a[k] + b[k]
	}
}

// addRoundBF16 is d = round_bf16(a + b) with the NaN test folded into the
// rounding so the loop stays branch-light; NaN payloads are canonicalised at
// the root.
func addRoundBF16(d, a, b []float32) {
	b = b[:len(d)]
	a = a[:len(d)]
	for k := addRoundBF16Vec(d, a, b); k < len(d); k++ {
		u := math.Float32bits(a[k] + b[k])
		if u&0x7FFFFFFF > 0x7F800000 {
			d[k] = math.Float32frombits(u)
			continue
		}
		u += 0x7FFF + (u>>16)&1
		d[k] = math.Float32frombits(u &^ 0xFFFF)
	}
}

func (w *worker) block64(t task, lo, hi int) {
	n := hi - lo
	nin := len(t.inputs)
	cur := w.cur64[:nin]
	for r, in := range t.inputs {
		b := in[lo*8 : hi*8]
		if aligned(b, 8) {
			cur[r] = f64s(b)
			continue
		}
		st := w.stage64[r][:n]
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(st))), n*8), b)
		cur[r] = st
	}
	for _, l := range t.levels {
		for _, p := range l.Pairs {
			d := w.scr64[p.Dst][:n]
			a, b := cur[p.Left][:n], cur[p.Right][:n]
			for k := range d {
				d[k] = a[k] + b[k]
			}
			cur[p.Dst] = d
		}
		if l.Carry >= 0 {
			cur[l.CarryDst] = cur[l.Carry]
		}
	}
	res := cur[0][:n]
	ob := t.out[lo*8 : hi*8]
	if aligned(ob, 8) {
		o := u64s(ob)
		for k, v := range res {
			bits := math.Float64bits(v)
			if v != v {
				bits = dtype.CanonicalNaN64
			}
			o[k] = bits
		}
		return
	}
	for k, v := range res {
		bits := math.Float64bits(v)
		if v != v {
			bits = dtype.CanonicalNaN64
		}
		put64(ob[8*k:], bits)
	}
}

// addRoundFP16 is d = round_fp16(a + b): a bit-level fast path for sums in
// the normal fp16 range, the general conversion for the rest.
func addRoundFP16(d, a, b []float32) {
	b = b[:len(d)]
	a = a[:len(d)]
	for k := range d {
		s := a[k] + b[k]
		u := math.Float32bits(s)
		if m := u & 0x7FFFFFFF; m >= 0x38800000 && m < 0x477FF000 {
			// normal fp16 range: drop 13 fraction bits, ties to even; the
			// bound keeps the carry below the fp16 overflow point.
			u += 0xFFF + (u>>13)&1
			d[k] = math.Float32frombits(u &^ 0x1FFF)
			continue
		}
		d[k] = dtype.RoundFP16(s)
	}
}

// widen makes cur[r] a float32 view of every input's block [lo, hi).
func (w *worker) widen(t task, lo, hi int) {
	n := hi - lo
	sz := t.dt.Size()
	cur := w.cur[:len(t.inputs)]
	for r, in := range t.inputs {
		b := in[lo*sz : hi*sz]
		st := w.stage[r][:n]
		switch t.dt {
		case dtype.FP32:
			if aligned(b, 4) {
				cur[r] = f32s(b)
				continue
			}
			copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(st))), n*4), b)
		case dtype.BF16:
			if aligned(b, 2) {
				for k, h := range u16s(b) {
					st[k] = math.Float32frombits(uint32(h) << 16)
				}
			} else {
				for k := range st {
					st[k] = math.Float32frombits(uint32(b[2*k])<<16 | uint32(b[2*k+1])<<24)
				}
			}
		case dtype.FP16:
			if aligned(b, 2) {
				for k, h := range u16s(b) {
					st[k] = dtype.FP16ToFloat32(h)
				}
			} else {
				for k := range st {
					st[k] = dtype.FP16ToFloat32(uint16(b[2*k]) | uint16(b[2*k+1])<<8)
				}
			}
		}
		cur[r] = st
	}
}

// firstLevelBF16 evaluates the first tree level straight from aligned bf16
// inputs (widening inside the addition saves a pass over the data), widening
// only a carried odd input. It reports false, doing nothing, when an input is
// misaligned.
func (w *worker) firstLevelBF16(t task, lo, hi int, round bool) bool {
	for _, in := range t.inputs {
		if !aligned(in[lo*2:hi*2], 2) {
			return false
		}
	}
	n := hi - lo
	cur := w.cur[:len(t.inputs)]
	l := t.levels[0]
	for _, p := range l.Pairs {
		d := w.scratch[p.Dst][:n]
		a, b := u16s(t.inputs[p.Left][lo*2:hi*2]), u16s(t.inputs[p.Right][lo*2:hi*2])
		if round {
			addRoundBF16u(d, a, b)
		} else {
			for k := range d {
				d[k] = math.Float32frombits(uint32(a[k])<<16) + math.Float32frombits(uint32(b[k])<<16)
			}
		}
		cur[p.Dst] = d
	}
	if l.Carry >= 0 {
		st := w.stage[l.Carry][:n]
		for k, h := range u16s(t.inputs[l.Carry][lo*2 : hi*2]) {
			st[k] = math.Float32frombits(uint32(h) << 16)
		}
		cur[l.CarryDst] = st
	}
	return true
}

// addRoundBF16u is addRoundBF16 on bf16 bit patterns.
func addRoundBF16u(d []float32, a, b []uint16) {
	a = a[:len(d)]
	b = b[:len(d)]
	for k := addRoundBF16uVec(d, a, b); k < len(d); k++ {
		u := math.Float32bits(math.Float32frombits(uint32(a[k])<<16) + math.Float32frombits(uint32(b[k])<<16))
		if u&0x7FFFFFFF > 0x7F800000 {
			d[k] = math.Float32frombits(u)
			continue
		}
		u += 0x7FFF + (u>>16)&1
		d[k] = math.Float32frombits(u &^ 0xFFFF)
	}
}

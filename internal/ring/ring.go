// Package ring is the conventional, non-deterministic-by-design CPU baseline
// that the benchmark compares detcoll with: the ring reduce-scatter followed
// by the ring all-gather, the schedule Gloo (and NCCL's ring) use, over any
// transport.Transport on host memory.
//
// It is a performance reference, not a contract: the sum of an element is
// accumulated around the ring, so its parenthesisation depends on which rank
// owns the element's chunk, which differs from detcoll's tree and from one
// world size or chunking to the next. Do not use it where bits matter.
//
// # Schedule
//
// Rank r sends to its right neighbour (r+1) mod W and receives from its left
// neighbour (r-1) mod W. A buffer of count elements is cut into W chunks of
// nearly equal size (tree.Shard: the first count mod W chunks have one extra
// element; chunks may be empty when count < W, and empty chunks are not
// sent). Reduce-scatter: in step s = 0 … W-2 rank r sends its partial sum of
// chunk (r-s-1) mod W and receives the left neighbour's partial sum of chunk
// (r-s-2) mod W, which it adds to its own input of that chunk; after W-1
// steps rank r holds the full sum of chunk r, accumulated in the order
// r+1, r+2, …, r (mod W). All-gather: in step s rank r sends chunk (r-s) mod W
// and receives chunk (r-s-1) mod W. Every rank therefore sends and receives
// 2(W-1)/W of the buffer for an AllReduce.
//
// # Arithmetic
//
// Sum only. fp32 and fp64 are one IEEE addition per step in the dtype. bf16
// and fp16 are widened to float32, added, and rounded back to the dtype
// (round to nearest even) at every step, as a typical CPU implementation
// does; NaNs of those types come out canonical because the narrowing
// conversion canonicalises them, fp32 and fp64 NaN payloads are whatever the
// hardware produces. The additions run on the calling goroutine.
//
// # Cancellation
//
// Every call is bounded by its context alone (a stopped peer is otherwise
// waited for): give it a deadline. detcoll bench bounds each phase with
// its timeout (package bench, Config.Timeout).
//
// # Tags
//
// Messages carry the tag 0xF1<<24 | tag&0xFFFFFF in the reduce-scatter
// phase and 0xF2<<24 | tag&0xFFFFFF in the all-gather phase, disjoint from
// detcoll's (whose high byte is 1…8). Every rank must pass the same tag to
// the same call. Calls must not run concurrently with each other or with a
// detcoll.Comm's collectives on the same transport; one after another is
// fine, since messages between a pair of ranks are delivered in order.
//
// # Scratch
//
// Each function takes a scratch buffer; when it is shorter than the
// function's ...ScratchBytes it allocates one for the call. The buffers
// passed in are only borrowed for the duration of the call.
package ring

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/tree"
)

// Tag phases (the high byte of every message's tag).
const (
	PhaseReduceScatter uint32 = 0xF1
	PhaseAllGather     uint32 = 0xF2
)

func wireTag(phase, tag uint32) transport.Tag { return transport.Tag{Phase: phase, Sig: uint64(tag)} }

func mod(a, w int) int { return ((a % w) + w) % w }

// AllReduceScratchBytes is the scratch AllReduce needs for n bytes of dt
// over w ranks: one chunk, the largest.
func AllReduceScratchBytes(n, w int, dt dtype.DType) int {
	sz := dt.Size()
	if sz == 0 || w < 1 {
		return 0
	}
	_, c := tree.Shard(n/sz, w, 0)
	return c * sz
}

// ReduceScatterScratchBytes is the scratch ReduceScatter needs for an
// output of recvBytes: two chunks (a partial sum in flight and one arriving).
func ReduceScatterScratchBytes(recvBytes int) int { return 2 * recvBytes }

// AllReduce writes the ring sum of every rank's send into recv on every
// rank. len(recv) == len(send); send and recv may be the same slice. The
// result is identical on every rank (the all-gather copies it) but not, in
// general, equal to detcoll's tree sum.
func AllReduce(ctx context.Context, t transport.Transport, tag uint32, send, recv []byte, dt dtype.DType, scratch []byte) error {
	if err := checkReducible(dt); err != nil {
		return err
	}
	if len(send)%dt.Size() != 0 || len(recv) != len(send) {
		return fmt.Errorf("ring: AllReduce: send %d bytes, recv %d bytes: want equal whole numbers of %v elements", len(send), len(recv), dt)
	}
	if overlaps(send, recv) && !sameBuf(send, recv) {
		return fmt.Errorf("ring: AllReduce: send and recv overlap without being the same buffer")
	}
	if !sameBuf(send, recv) {
		copy(recv, send)
	}
	w, r := t.Size(), t.Rank()
	if w == 1 {
		return nil
	}
	sz := dt.Size()
	count := len(recv) / sz
	chunk := func(c int) []byte {
		off, n := tree.Shard(count, w, c)
		return recv[off*sz : (off+n)*sz]
	}
	need := AllReduceScratchBytes(len(recv), w, dt)
	if len(scratch) < need {
		scratch = make([]byte, need)
	}
	right, left := (r+1)%w, mod(r-1, w)
	rsTag := wireTag(PhaseReduceScatter, tag)
	for s := 0; s < w-1; s++ {
		out := chunk(mod(r-s-1, w))
		dst := chunk(mod(r-s-2, w))
		in := scratch[:len(dst)]
		if err := step(ctx, t, rsTag, right, out, left, in); err != nil {
			return err
		}
		add(dt, dst, dst, in)
	}
	return allGatherRing(ctx, t, tag, chunk)
}

// ReduceScatter writes into recv on rank r the ring sum of block r
// ([r*n, (r+1)*n) with n = len(recv)) of every rank's send, which holds
// W*len(recv) bytes. send is not modified.
func ReduceScatter(ctx context.Context, t transport.Transport, tag uint32, send, recv []byte, dt dtype.DType, scratch []byte) error {
	if err := checkReducible(dt); err != nil {
		return err
	}
	w, r := t.Size(), t.Rank()
	n := len(recv)
	if n%dt.Size() != 0 || len(send) != w*n {
		return fmt.Errorf("ring: ReduceScatter: send %d bytes, recv %d bytes: want send = W*recv = %d*recv, whole %v elements", len(send), len(recv), w, dt)
	}
	if overlaps(send, recv) {
		return fmt.Errorf("ring: ReduceScatter: send and recv overlap")
	}
	if w == 1 {
		copy(recv, send)
		return nil
	}
	if n == 0 {
		return nil
	}
	own := func(c int) []byte { return send[c*n : (c+1)*n] }
	need := ReduceScatterScratchBytes(n)
	if len(scratch) < need {
		scratch = make([]byte, need)
	}
	a, b := scratch[:n], scratch[n:2*n] // a: partial sum to send, b: arriving
	right, left := (r+1)%w, mod(r-1, w)
	rsTag := wireTag(PhaseReduceScatter, tag)
	for s := 0; s < w-1; s++ {
		out := a
		if s == 0 {
			out = own(mod(r-1, w))
		}
		if err := step(ctx, t, rsTag, right, out, left, b); err != nil {
			return err
		}
		dst := b
		if s == w-2 {
			dst = recv
		}
		add(dt, dst, b, own(mod(r-s-2, w)))
		a, b = b, a
	}
	return nil
}

// AllGather gathers every rank's send into recv (W*len(send) bytes), rank
// p's block at [p*n, (p+1)*n), around the ring. Any element type; send may
// be this rank's block of recv (in place).
func AllGather(ctx context.Context, t transport.Transport, tag uint32, send, recv []byte, dt dtype.DType) error {
	w, r := t.Size(), t.Rank()
	n := len(send)
	if sz := dt.Size(); sz == 0 || n%sz != 0 || len(recv) != w*n {
		return fmt.Errorf("ring: AllGather: send %d bytes, recv %d bytes: want recv = W*send = %d*send, whole %v elements", len(send), len(recv), w, dt)
	}
	mine := recv[r*n : (r+1)*n]
	if overlaps(send, recv) && !sameBuf(send, mine) {
		return fmt.Errorf("ring: AllGather: send overlaps recv but is not this rank's block")
	}
	if !sameBuf(send, mine) {
		copy(mine, send)
	}
	if w == 1 {
		return nil
	}
	return allGatherRing(ctx, t, tag, func(c int) []byte { return recv[c*n : (c+1)*n] })
}

// allGatherRing circulates the chunks in place: rank r owns chunk r.
func allGatherRing(ctx context.Context, t transport.Transport, tag uint32, chunk func(c int) []byte) error {
	w, r := t.Size(), t.Rank()
	right, left := (r+1)%w, mod(r-1, w)
	agTag := wireTag(PhaseAllGather, tag)
	for s := 0; s < w-1; s++ {
		if err := step(ctx, t, agTag, right, chunk(mod(r-s, w)), left, chunk(mod(r-s-1, w))); err != nil {
			return err
		}
	}
	return nil
}

// step sends out to right and receives in from left concurrently. Empty
// buffers are skipped on both sides (both ends know the chunk sizes).
func step(ctx context.Context, t transport.Transport, tg transport.Tag, right int, out []byte, left int, in []byte) error {
	var sendErr chan error
	if len(out) > 0 {
		sendErr = make(chan error, 1)
		go func() { sendErr <- t.Send(ctx, right, tg, out) }()
	}
	var err error
	if len(in) > 0 {
		err = t.Recv(ctx, left, tg, in)
	}
	if sendErr != nil {
		if serr := <-sendErr; err == nil {
			err = serr
		}
	}
	return err
}

func checkReducible(dt dtype.DType) error {
	if !dt.Valid() {
		return fmt.Errorf("ring: dtype %v is not reducible (want bf16, fp16, fp32 or fp64)", dt)
	}
	return nil
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func sameBuf(a, b []byte) bool { return len(a) == len(b) && (len(a) == 0 || addrOf(a) == addrOf(b)) }

func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := addrOf(a), addrOf(b)
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// add writes x + y elementwise into dst (which may be x or y exactly).
func add(dt dtype.DType, dst, x, y []byte) {
	switch dt {
	case dtype.FP32:
		if aligned(dst, 4) && aligned(x, 4) && aligned(y, 4) {
			d, a, b := f32s(dst), f32s(x), f32s(y)
			b = b[:len(d)]
			a = a[:len(d)]
			for i := range d {
				d[i] = a[i] + b[i]
			}
			return
		}
		for i := 0; i+4 <= len(dst); i += 4 {
			v := math.Float32frombits(le32(x[i:])) + math.Float32frombits(le32(y[i:]))
			put32(dst[i:], math.Float32bits(v))
		}
	case dtype.FP64:
		if aligned(dst, 8) && aligned(x, 8) && aligned(y, 8) {
			d, a, b := f64s(dst), f64s(x), f64s(y)
			b = b[:len(d)]
			a = a[:len(d)]
			for i := range d {
				d[i] = a[i] + b[i]
			}
			return
		}
		for i := 0; i+8 <= len(dst); i += 8 {
			v := math.Float64frombits(le64(x[i:])) + math.Float64frombits(le64(y[i:]))
			put64(dst[i:], math.Float64bits(v))
		}
	case dtype.BF16:
		for i := 0; i+2 <= len(dst); i += 2 {
			v := dtype.BF16ToFloat32(le16(x[i:])) + dtype.BF16ToFloat32(le16(y[i:]))
			put16(dst[i:], dtype.Float32ToBF16(v))
		}
	case dtype.FP16:
		for i := 0; i+2 <= len(dst); i += 2 {
			v := dtype.FP16ToFloat32(le16(x[i:])) + dtype.FP16ToFloat32(le16(y[i:]))
			put16(dst[i:], dtype.Float32ToFP16(v))
		}
	}
}

func aligned(b []byte, a uintptr) bool { return len(b) == 0 || addrOf(b)%a == 0 }

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func f64s(b []byte) []float64 {
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }
func put16(b []byte, v uint16) {
	b[0], b[1] = byte(v), byte(v>>8)
}
func put32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
func put64(b []byte, v uint64) { put32(b, uint32(v)); put32(b[4:], uint32(v>>32)) }

package devcomm

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/gputest"
	"github.com/detcoll/detcoll/reduce"
)

// GPU tests of the peer-memory path (run like the other GPU tests). With
// DETCOLL_TEST_REQUIRE_IPC=1 a communicator without it fails the tests
// instead of skipping them (set on machines known to have peer access).

func ipcComm(t *testing.T, opts ...Option) *Comm {
	t.Helper()
	job, _ := gpuComm(t)
	c, err := New(testCtx(t), job, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if on, why := c.IPC(); !on {
		c.Close()
		if os.Getenv("DETCOLL_TEST_REQUIRE_IPC") == "1" {
			t.Fatalf("no peer-memory path: %s", why)
		}
		t.Skipf("no peer-memory path here: %s", why)
	}
	return c
}

// TestGPUIPCInterleavedLagging: many collectives of different kinds, sizes
// and algorithms enqueued back to back, with one rank sleeping before
// some calls (its kernels start late), keep their order and their bits.
func TestGPUIPCInterleavedLagging(t *testing.T) {
	c := ipcComm(t, WithIPC(1<<20))
	defer c.Close()
	ctx := testCtx(t)
	w, r, dev := c.Size(), c.Rank(), c.Device()
	type call struct {
		op    collOp
		alg   detcoll.Algorithm
		dt    dtype.DType
		count int
		in    [][]byte
		want  []byte
		send  Buffer
		recv  Buffer
	}
	rng := rand.New(rand.NewPCG(5, 6)) // the same sequence on every rank
	lag := rand.New(rand.NewPCG(uint64(r)+9, 1))
	var calls []*call
	for i := 0; i < 40; i++ {
		k := &call{op: []collOp{opAllReduce, opReduceScatter, opAllGather}[rng.IntN(3)],
			alg: []detcoll.Algorithm{detcoll.OneShot, detcoll.TwoShot, detcoll.A2ATree, detcoll.GatherTree}[rng.IntN(4)],
			dt:  []dtype.DType{dtype.BF16, dtype.FP32, dtype.FP16}[rng.IntN(3)], count: 1 + rng.IntN(700000)}
		sz := k.dt.Size()
		inN, outN := k.count*sz, k.count*sz
		switch k.op {
		case opReduceScatter:
			inN = w * k.count * sz
		case opAllGather:
			outN = w * k.count * sz
		}
		k.in = make([][]byte, w)
		for p := range k.in {
			k.in[p] = make([]byte, inN)
			gputest.FillInput(k.in[p], k.dt, uint64(i), p)
		}
		switch k.op {
		case opAllReduce:
			k.want = make([]byte, outN)
			must(t, reduce.Oracle(k.dt, 0, k.in, k.want))
		case opReduceScatter:
			blocks := make([][]byte, w)
			for p := range blocks {
				blocks[p] = k.in[p][r*k.count*sz : (r+1)*k.count*sz]
			}
			k.want = make([]byte, outN)
			must(t, reduce.Oracle(k.dt, 0, blocks, k.want))
		default:
			k.want = bytes.Join(k.in, nil)
		}
		var err error
		k.send, err = c.Alloc(inN)
		must(t, err)
		defer c.Free(k.send)
		k.recv, err = c.Alloc(outN)
		must(t, err)
		defer c.Free(k.recv)
		must(t, dev.CopyHtoD(k.send.Ptr, k.in[r]))
		calls = append(calls, k)
	}
	for _, k := range calls {
		if lag.IntN(3) == 0 {
			time.Sleep(time.Duration(lag.IntN(3000)) * time.Microsecond)
		}
		var err error
		switch k.op {
		case opAllReduce:
			err = c.AllReduce(ctx, k.send, k.recv, k.count, k.dt, WithAlgorithm(k.alg))
		case opReduceScatter:
			err = c.ReduceScatter(ctx, k.send, k.recv, k.count, k.dt, WithAlgorithm(k.alg))
		default:
			err = c.AllGather(ctx, k.send, k.recv, k.count, k.dt, WithAlgorithm(k.alg))
		}
		must(t, err)
	}
	must(t, c.Synchronize())
	for i, k := range calls {
		got := make([]byte, len(k.want))
		must(t, dev.CopyDtoH(got, k.recv.Ptr))
		if !bytes.Equal(got, k.want) {
			t.Fatalf("rank %d: call %d (%s %v %v count %d) differs from the oracle", r, i, opNames[k.op], k.alg, k.dt, k.count)
		}
	}
}

// TestGPUIPCPeerStops: when the last rank stops calling, every other rank's
// peer-memory collective fails with ErrIPCTimeout within about the
// timeout instead of spinning forever, and the communicators close.
func TestGPUIPCPeerStops(t *testing.T) {
	const timeout = 2 * time.Second
	c := ipcComm(t, WithIPC(1<<20), WithIPCTimeout(timeout))
	ctx := testCtx(t)
	w, r := c.Size(), c.Rank()
	buf, err := c.Alloc(1 << 20)
	must(t, err)
	must(t, c.AllReduce(ctx, buf, buf, 1000, dtype.FP32, WithAlgorithm(detcoll.OneShot)))
	must(t, c.Synchronize())
	start := time.Now()
	if r != w-1 {
		err := c.AllReduce(ctx, buf, buf, 1000, dtype.FP32, WithAlgorithm(detcoll.OneShot))
		if err == nil {
			err = c.Synchronize()
		}
		took := time.Since(start)
		if !errors.Is(err, ErrIPCTimeout) {
			t.Errorf("rank %d: got %v after %v, want ErrIPCTimeout", r, err, took)
		} else {
			t.Logf("rank %d: %v after %v (timeout %v)", r, err, took.Round(time.Millisecond), timeout)
		}
		if took > timeout+5*time.Second {
			t.Errorf("rank %d: the error took %v", r, took)
		}
		if err := c.AllReduce(ctx, buf, buf, 1000, dtype.FP32); !errors.Is(err, detcoll.ErrPoisoned) {
			t.Errorf("rank %d: after the timeout: got %v, want ErrPoisoned", r, err)
		}
	} else {
		time.Sleep(timeout + time.Second) // the stopped rank: calls nothing
	}
	_ = c.Free(buf)
	closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		t.Logf("rank %d: close: %v", r, err)
	case <-closeCtx.Done():
		t.Fatalf("rank %d: Close hung", r)
	}
}

package devcomm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/gputest"
)

// GPU tests. They run as every rank of a launched job, one GPU per rank:
//
//	CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
//	go test -c -o bin/devcomm.test ./gpu/devcomm
//	bin/detcoll launch --standalone --nproc-per-node 2 -- bin/devcomm.test -test.run GPU -test.v
//
// They skip, saying why, when the process was not started by a launcher or
// no GPU, CUDA driver or NCCL is usable. Every rank runs the same tests in
// the same order (a skip is the same on every rank), so the collectives
// match. DETCOLL_TEST_LARGE_BYTES sets the size of the large cases
// (default 256 MiB; 0 skips them).

var (
	setupOnce sync.Once
	testJob   *cluster.Job
	testComm  *Comm
	setupErr  error
)

func TestMain(m *testing.M) {
	if os.Getenv(peerEnv) == "1" {
		peerMain() // peerexit_test.go: this process is the peer that dies
	}
	code := m.Run()
	if testComm != nil {
		if err := testComm.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the communicator:", err)
			code = 1
		}
	}
	if testJob != nil {
		testJob.Close()
	}
	os.Exit(code)
}

func gpuComm(t *testing.T) (*cluster.Job, *Comm) {
	t.Helper()
	gputest.RequireLaunchedGPU(t, "devcomm.test", false)
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if testJob, setupErr = cluster.Init(ctx, cluster.Options{}); setupErr != nil {
			return
		}
		start := time.Now()
		testComm, setupErr = New(ctx, testJob)
		if setupErr == nil {
			fmt.Printf("rank %d of %d: GPU %d %s, NCCL %s, communicator ready in %v\n", testComm.Rank(), testComm.Size(),
				testComm.Device().Ordinal(), testComm.Device().Name(), testComm.NCCLVersion(), time.Since(start).Round(time.Millisecond))
		}
	})
	if setupErr != nil {
		t.Fatalf("setting up the job and the communicator: %v", setupErr)
	}
	return testJob, testComm
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestGPUGraphReplay captures several collectives of both algorithms into
// one graph and replays it: every replay gives the eager bits.
func TestGPUGraphReplay(t *testing.T) {
	_, c := gpuComm(t)
	ctx := testCtx(t)
	dev := c.Device()
	const count = 3<<20 + 5
	w := c.Size()
	in, err := c.Alloc(2 * count)
	must(t, err)
	defer c.Free(in)
	outs := make([]Buffer, 3)
	for i := range outs {
		outs[i], err = c.Alloc(2 * count * w)
		must(t, err)
		defer c.Free(outs[i])
	}
	host := make([]byte, 2*count)
	gputest.FillInput(host, dtype.BF16, 77, c.Rank())
	must(t, dev.CopyHtoD(in.Ptr, host))
	enqueue := func(s Stream) error {
		if err := c.AllReduce(ctx, in, outs[0], count, dtype.BF16, OnStream(s), WithAlgorithm(detcoll.A2ATree)); err != nil {
			return err
		}
		if err := c.AllReduce(ctx, in, outs[1], count, dtype.BF16, OnStream(s), WithAlgorithm(detcoll.GatherTree)); err != nil {
			return err
		}
		return c.AllGather(ctx, in, outs[2], count, dtype.BF16, OnStream(s), WithAlgorithm(detcoll.GatherTree))
	}
	before := c.Stats().Captured
	for _, o := range outs { // the bytes no collective writes compare equal too
		must(t, dev.Memset(o.Ptr, 0xFF, o.Bytes))
	}
	// Eager reference.
	must(t, enqueue(c.Stream()))
	must(t, c.Synchronize())
	want := make([][]byte, len(outs))
	for i, o := range outs {
		want[i] = make([]byte, o.Bytes)
		must(t, dev.CopyDtoH(want[i], o.Ptr))
	}
	if string(want[0][:2*count]) != string(want[1][:2*count]) {
		t.Fatal("a2a_tree and gather_tree differ")
	}
	s, err := dev.NewStream()
	must(t, err)
	defer func() { c.ReleaseStream(s); dev.DestroyStream(s) }()
	g, err := dev.Capture(s, func() error {
		for i := 0; i < 2; i++ {
			if err := enqueue(s); err != nil {
				return err
			}
		}
		return nil
	})
	must(t, err)
	defer dev.DestroyGraph(g)
	got := make([]byte, 2*count*w)
	for rep := 0; rep < 3; rep++ {
		for _, o := range outs {
			must(t, dev.Memset(o.Ptr, 0xFF, o.Bytes))
		}
		must(t, dev.LaunchGraph(g, s))
		must(t, dev.Synchronize(s))
		for i, o := range outs {
			must(t, dev.CopyDtoH(got[:o.Bytes], o.Ptr))
			if string(got[:o.Bytes]) != string(want[i]) {
				t.Fatalf("replay %d: output %d differs from the eager run", rep, i)
			}
		}
	}
	if n := c.Stats().Captured - before; n != 4 {
		t.Errorf("stats report %d captured collectives using the workspace, want 4", n)
	}
}

// TestGPUWorkspaceBounds: gather_tree retains at most W× the input, a2a_tree
// at most 2×, AllGather nothing.
func TestGPUWorkspaceBounds(t *testing.T) {
	_, c := gpuComm(t)
	ctx := testCtx(t)
	w := c.Size()
	const count = 1<<20 + 3
	in, err := c.Alloc(4 * count * w)
	must(t, err)
	defer c.Free(in)
	out, err := c.Alloc(4 * count * w)
	must(t, err)
	defer c.Free(out)
	round := func(n int) int { return (n + 255) &^ 255 }
	check := func(name string, limit int, run func() error) {
		must(t, c.ReleaseWorkspace())
		must(t, run())
		must(t, c.Synchronize())
		st := c.Stats()
		t.Logf("%s: workspace %d bytes (limit %d)", name, st.WorkspaceBytes, limit)
		if st.WorkspaceBytes > limit {
			t.Errorf("%s retains %d bytes of workspace, more than %d", name, st.WorkspaceBytes, limit)
		}
	}
	n := 4 * count
	check("AllReduce gather_tree", round(w*n), func() error {
		return c.AllReduce(ctx, in, out, count, dtype.FP32, WithAlgorithm(detcoll.GatherTree))
	})
	check("AllReduce a2a_tree", round(2*n), func() error {
		return c.AllReduce(ctx, in, out, count, dtype.FP32, WithAlgorithm(detcoll.A2ATree))
	})
	check("ReduceScatter gather_tree", round(w*w*n+16), func() error {
		return c.ReduceScatter(ctx, in, out, count, dtype.FP32, WithAlgorithm(detcoll.GatherTree))
	})
	check("ReduceScatter a2a_tree", round(2*w*n), func() error {
		return c.ReduceScatter(ctx, in, out, count, dtype.FP32, WithAlgorithm(detcoll.A2ATree))
	})
	check("AllGather", 0, func() error { return c.AllGather(ctx, in.Slice(0, n), out, count, dtype.FP32) })
}

// TestGPUMisuse: bad arguments are errors, not crashes, and leave the
// communicator usable; growth inside a capture is refused; a closed
// communicator says so.
func TestGPUMisuse(t *testing.T) {
	job, c := gpuComm(t)
	ctx := testCtx(t)
	w := c.Size()
	buf, err := c.Alloc(4096 * w)
	must(t, err)
	defer c.Free(buf)
	other, err := c.Alloc(4096 * w)
	must(t, err)
	defer c.Free(other)
	bad := []struct {
		name string
		call func() error
	}{
		{"nil send", func() error { return c.AllReduce(ctx, Buffer{0, 64}, other, 5, dtype.BF16) }},
		{"nil recv", func() error { return c.AllGather(ctx, buf, Buffer{0, 1 << 20}, 5, dtype.BF16) }},
		{"count beyond declared send", func() error { return c.AllReduce(ctx, buf.Slice(0, 8), other, 5, dtype.BF16) }},
		{"count beyond declared recv", func() error { return c.AllGather(ctx, buf, other.Slice(0, 10*w-2), 5, dtype.BF16) }},
		{"reduce-scatter send too small", func() error { return c.ReduceScatter(ctx, buf.Slice(0, 2*5*w-2), other, 5, dtype.BF16) }},
		{"negative count", func() error { return c.AllReduce(ctx, buf, other, -1, dtype.FP32) }},
		{"bytes are not reducible", func() error { return c.AllReduce(ctx, buf, other, 5, dtype.Byte) }},
		{"unknown dtype", func() error { return c.AllReduce(ctx, buf, other, 5, dtype.DType(42)) }},
		{"unknown dtype in AllGather", func() error { return c.AllGather(ctx, buf, other, 5, dtype.DType(42)) }},
		{"misaligned fp32", func() error { return c.AllReduce(ctx, buf.Slice(2, 64), other, 5, dtype.FP32) }},
		{"partial overlap", func() error { return c.AllReduce(ctx, buf.Slice(0, 64), buf.Slice(4, 64), 8, dtype.FP32) }},
		{"reduce-scatter in place", func() error { return c.ReduceScatter(ctx, buf, buf.Slice(0, 20), 5, dtype.FP32) }},
		{"unknown algorithm", func() error { return c.AllReduce(ctx, buf, other, 5, dtype.FP32, WithAlgorithm(detcoll.Algorithm(9))) }},
		{"lane count mismatch", func() error {
			return c.ReduceScatterMany(ctx, []Buffer{buf}, []Buffer{other, other}, []int{1}, dtype.FP32)
		}},
	}
	if w > 1 {
		bad = append(bad, struct {
			name string
			call func() error
		}{"all-gather into another rank's block", func() error {
			return c.AllGather(ctx, buf.Slice(((c.Rank()+1)%w)*20, 20), buf.Slice(0, 20*w), 5, dtype.FP32)
		}})
	}
	for _, b := range bad {
		err := b.call()
		if !errors.Is(err, detcoll.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidArgument", b.name, err)
		} else if c.Rank() == 0 {
			t.Logf("%s: %v", b.name, err)
		}
	}
	if err := c.AllGather(ctx, buf.Slice(4, 20), buf.Slice(0, 20*w), 5, dtype.FP32); !errors.Is(err, detcoll.ErrInvalidArgument) {
		t.Errorf("all-gather send overlapping recv off its block: got %v", err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("argument errors poisoned the communicator: %v", err)
	}
	// Still usable.
	must(t, c.AllReduce(ctx, buf, other, 1000, dtype.BF16))
	must(t, c.Synchronize())

	// Growth inside a capture is refused before anything is enqueued.
	must(t, c.ReleaseWorkspace())
	dev := c.Device()
	s, err := dev.NewStream()
	must(t, err)
	_, err = dev.Capture(s, func() error {
		return c.AllReduce(ctx, buf, other, 1000, dtype.BF16, OnStream(s), WithAlgorithm(detcoll.GatherTree))
	})
	switch {
	case w == 1:
		// One rank reduces nothing: the call needs no workspace, so there
		// is no growth to refuse and the capture succeeds.
		if err != nil {
			t.Errorf("capture at W = 1: %v", err)
		}
	case !errors.Is(err, ErrCaptureGrowth):
		t.Errorf("growth inside a capture: got %v, want ErrCaptureGrowth", err)
	default:
		t.Logf("growth inside a capture: %v", err)
	}
	if err := c.Err(); err != nil {
		t.Errorf("refused growth poisoned the communicator: %v", err)
	}
	must(t, c.ReleaseStream(s))
	must(t, dev.DestroyStream(s))
	must(t, c.AllReduce(ctx, buf, other, 1000, dtype.BF16, WithAlgorithm(detcoll.GatherTree)))
	must(t, c.Synchronize())

	// A second communicator: allocation checks, close.
	c2, err := New(ctx, job, WithAllocationChecks(true))
	must(t, err)
	small, err := c2.Alloc(4096)
	must(t, err)
	if err := c2.AllReduce(ctx, Buffer{small.Ptr, 1 << 20}, other, 1<<18, dtype.FP32); !errors.Is(err, detcoll.ErrInvalidArgument) {
		t.Errorf("a declared size beyond the allocation: got %v", err)
	} else {
		t.Logf("beyond the allocation: %v", err)
	}
	if err := c2.AllReduce(ctx, Buffer{0x1000, 4096}, other, 8, dtype.FP32); !errors.Is(err, detcoll.ErrInvalidArgument) {
		t.Errorf("an address that is no device memory: got %v", err)
	}
	must(t, c2.AllReduce(ctx, small.Slice(0, 4000), other, 1000, dtype.FP32))
	must(t, c2.Synchronize())
	must(t, c2.Free(small))
	must(t, c2.Close())
	if err := c2.AllReduce(ctx, buf, other, 1000, dtype.BF16); !errors.Is(err, detcoll.ErrClosed) {
		t.Errorf("after Close: got %v, want ErrClosed", err)
	}
	if err := c2.Reserve(1 << 20); !errors.Is(err, detcoll.ErrClosed) {
		t.Errorf("Reserve after Close: got %v, want ErrClosed", err)
	}
	if err := c2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

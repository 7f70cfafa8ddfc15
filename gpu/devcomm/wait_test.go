package devcomm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devrt"
)

// The bounded waits of the NCCL path, on the host: a stand-in runtime
// whose streams complete only when the test says so (a dead NCCL peer
// leaves NCCL's kernel spinning: the stream never completes).

func TestWaitBounded(t *testing.T) {
	never := func() (bool, error) { return false, nil }
	t.Run("done", func(t *testing.T) {
		n := 0
		err := waitBounded(context.Background(), probe{done: func() (bool, error) { n++; return n > 3, nil }})
		if err != nil || n != 4 {
			t.Fatalf("err %v after %d polls", err, n)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := waitBounded(ctx, probe{done: never})
		if !errors.Is(err, ErrWaitTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("returned after %v with a 100ms bound", d)
		}
	})
	t.Run("async error", func(t *testing.T) {
		boom := errors.New("ncclRemoteError: a peer went away")
		start := time.Now()
		err := waitBounded(context.Background(), probe{done: never, asyncErr: func() error {
			if time.Since(start) > 30*time.Millisecond {
				return boom
			}
			return nil
		}})
		if !errors.Is(err, boom) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("device error word", func(t *testing.T) {
		err := waitBounded(context.Background(), probe{done: never, devErr: func() error { return ErrIPCTimeout }})
		if !errors.Is(err, ErrIPCTimeout) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("abort from another goroutine", func(t *testing.T) {
		var ab atomic.Bool
		time.AfterFunc(30*time.Millisecond, func() { ab.Store(true) })
		err := waitBounded(context.Background(), probe{done: never, aborted: ab.Load})
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("query error", func(t *testing.T) {
		bad := errors.New("illegal address")
		if err := waitBounded(context.Background(), probe{done: func() (bool, error) { return false, bad }}); !errors.Is(err, bad) {
			t.Fatalf("err %v", err)
		}
	})
}

// fakeRT is a device runtime whose streams complete when released; the
// calls a communicator makes at Synchronize, Abort and Close are recorded.
type fakeRT struct {
	devrt.Runtime // calls not listed below panic: the test never makes them
	mu            sync.Mutex
	done          map[devrt.Stream]bool
	calls         []string
	querier       bool
}

type fakeCtx struct{ devrt.Context }

func (fakeCtx) Do(fn func() error) error { return fn() }
func (fakeCtx) Release() error           { return nil }

func (f *fakeRT) Vendor() string            { return "cuda" }
func (f *fakeRT) DriverAvailable() error    { return nil }
func (f *fakeRT) DeviceCount() (int, error) { return 1, nil }
func (f *fakeRT) Open(int) (devrt.Context, devrt.Props, error) {
	return fakeCtx{}, devrt.Props{Name: "fake"}, nil
}
func (f *fakeRT) record(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }
func (f *fakeRT) StreamQuery(s devrt.Stream) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done[s], nil
}
func (f *fakeRT) StreamSynchronize(s devrt.Stream) error {
	for {
		if ok, _ := f.StreamQuery(s); ok {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}
func (f *fakeRT) release(s devrt.Stream)            { f.mu.Lock(); f.done[s] = true; f.mu.Unlock() }
func (f *fakeRT) MemFree(p devrt.Ptr) error         { f.record("MemFree"); return nil }
func (f *fakeRT) StreamDestroy(devrt.Stream) error  { f.record("StreamDestroy"); return nil }
func (f *fakeRT) EventDestroy(devrt.Event) error    { return nil }
func (f *fakeRT) IpcCloseMemHandle(devrt.Ptr) error { f.record("IpcCloseMemHandle"); return nil }
func (f *fakeRT) HostFree(devrt.HostMem) error      { f.record("HostFree"); return nil }
func (f *fakeRT) ModuleUnload(devrt.Module) error   { return nil }
func (f *fakeRT) has(c string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.calls {
		if x == c {
			return true
		}
	}
	return false
}

// fakeComm is a one-rank communicator on fakeRT (no NCCL, no host
// communicator) with a workspace "allocated".
func fakeComm(t *testing.T, waitTO time.Duration) (*Comm, *fakeRT) {
	t.Helper()
	rt := &fakeRT{done: map[devrt.Stream]bool{}}
	dev, err := gpu.OpenWith(rt, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.waitTO = waitTO
	c := &Comm{rt: rt, dev: dev, stream: 11, side: 12, cfg: cfg, rank: 0, size: 1, agree: newAgreement(),
		ws: 0x1000, wsBytes: 4096}
	return c, rt
}

// TestSynchronizeBounded: a stream that never completes (a dead NCCL
// peer) makes Synchronize return ErrWaitTimeout within the bound and
// poison the communicator; later calls fail at once.
func TestSynchronizeBounded(t *testing.T) {
	c, _ := fakeComm(t, 150*time.Millisecond)
	start := time.Now()
	err := c.Synchronize()
	if !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("Synchronize = %v, want ErrWaitTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Synchronize returned after %v with a 150ms bound", d)
	}
	if c.Err() == nil {
		t.Fatal("not poisoned")
	}
	start = time.Now()
	if err := c.Synchronize(); !errors.Is(err, detcoll.ErrPoisoned) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("second Synchronize = %v after %v", err, time.Since(start))
	}
}

// TestAbortUnblocksSynchronize: Abort from another goroutine ends a
// Synchronize that waits on a stream that never completes.
func TestAbortUnblocksSynchronize(t *testing.T) {
	c, _ := fakeComm(t, time.Hour)
	done := make(chan error, 1)
	go func() { done <- c.Synchronize() }()
	time.Sleep(50 * time.Millisecond)
	if err := c.Abort(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("Synchronize = %v, want ErrAborted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not unblock Synchronize")
	}
	if err := c.Reserve(1); !errors.Is(err, detcoll.ErrPoisoned) || !errors.Is(err, ErrAborted) {
		t.Fatalf("a call after Abort = %v", err)
	}
}

// TestCloseBounded: Close of a communicator whose stream never drains
// returns within the wait bound and leaks (does not free) the workspace a
// kernel may still use; with a drained stream it frees it.
func TestCloseBounded(t *testing.T) {
	c, rt := fakeComm(t, 100*time.Millisecond)
	start := time.Now()
	err := c.Close()
	if !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("Close = %v, want ErrWaitTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with a 100ms bound", d)
	}
	if rt.has("MemFree") || rt.has("StreamDestroy") {
		t.Fatalf("Close freed memory or streams the device may still use: %v", rt.calls)
	}
	if c.Stats().LeakedBytes != 4096 {
		t.Fatalf("LeakedBytes %d, want 4096", c.Stats().LeakedBytes)
	}

	c, rt = fakeComm(t, time.Minute)
	rt.release(11)
	rt.release(12)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !rt.has("MemFree") || !rt.has("StreamDestroy") || c.Stats().LeakedBytes != 0 {
		t.Fatalf("a drained Close did not free: %v, leaked %d", rt.calls, c.Stats().LeakedBytes)
	}
}

// hostComm is a one-rank host communicator (the close handshake's barrier).
func hostComm(t *testing.T) *detcoll.Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := cluster.Init(ctx, cluster.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Close() })
	return job.Comm
}

// TestIPCStateRaceAtClose: collectives (whose algorithm choice reads
// whether the peer-memory path is on), IPC, IPCStagingBytes, Abort and the
// waits' error-word poll read the peer-memory state while Close's
// handshake clears it (run with -race); the handshake then frees the
// staging.
func TestIPCStateRaceAtClose(t *testing.T) {
	c, rt := fakeComm(t, time.Minute)
	c.host = hostComm(t)
	for round := 0; round < 20; round++ {
		c.ipc = &ipcState{rt: rt, host: devrt.HostMem{Bytes: make([]byte, 64)}, bytes: 1 << 20, own: 0x9000, opened: []DevicePtr{0xa000}, timeout: time.Second}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					c.IPC()
					c.IPCStagingBytes()
					_ = c.ipcFailed()
					if err := c.AllReduce(context.Background(), Buffer{}, Buffer{}, 0, dtype.FP32); err != nil { // the choice reads c.ipc
						panic(err)
					}
				}
			}()
		}
		time.Sleep(2 * time.Millisecond)
		aborted := make(chan struct{})
		go func() {
			c.ipcStateAbortForTest()
			close(aborted)
		}()
		c.mu.Lock()
		err := c.closeIPC(true)
		c.mu.Unlock()
		time.Sleep(time.Millisecond) // readers after the close
		close(stop)
		wg.Wait()
		<-aborted
		if err != nil {
			t.Fatal(err)
		}
		if on, _ := c.IPC(); on {
			t.Fatal("the path is still on after close")
		}
	}
	if !rt.has("MemFree") || !rt.has("IpcCloseMemHandle") || c.stats.LeakedBytes != 0 {
		t.Fatalf("a completed handshake did not free the staging: leaked %d", c.stats.LeakedBytes)
	}
}

// TestIPCCloseHandshakeFailureLeaks: when the close barrier fails (a peer
// died), the staging a peer's kernel may still write is not freed: it is
// leaked and counted; the mappings of the peers' staging are closed.
func TestIPCCloseHandshakeFailureLeaks(t *testing.T) {
	c, rt := fakeComm(t, time.Minute)
	c.host = hostComm(t)
	c.host.Close() // the barrier fails
	c.ipc = &ipcState{rt: rt, host: devrt.HostMem{Bytes: make([]byte, 64)}, bytes: 1 << 20, own: 0x9000, opened: []DevicePtr{0xa000}, timeout: time.Second}
	c.mu.Lock()
	err := c.closeIPC(true)
	c.mu.Unlock()
	if err == nil {
		t.Fatal("a failed handshake reported no error")
	}
	if rt.has("MemFree") || rt.has("HostFree") {
		t.Fatalf("the staging was freed although a peer may still write it: %v", rt.calls)
	}
	if !rt.has("IpcCloseMemHandle") {
		t.Fatalf("the peers' mappings were not closed: %v", rt.calls)
	}
	if c.stats.LeakedBytes != 1<<20 {
		t.Fatalf("LeakedBytes %d, want %d", c.stats.LeakedBytes, 1<<20)
	}
}

func (f *fakeRT) EventRecord(e devrt.Event, s devrt.Stream) error {
	f.record(fmt.Sprintf("EventRecord(%d, %d)", e, s))
	return nil
}
func (f *fakeRT) StreamWaitEvent(s devrt.Stream, e devrt.Event) error {
	f.record(fmt.Sprintf("StreamWaitEvent(%d, %d)", s, e))
	return nil
}
func (f *fakeRT) StreamCapturing(devrt.Stream) (bool, error) { return false, nil }
func (f *fakeRT) GraphLaunch(g devrt.GraphExec, s devrt.Stream) error {
	f.record(fmt.Sprintf("GraphLaunch(%d, %d)", g, s))
	return nil
}

// TestLaunchGraphIsOrdered: a graph launched through the communicator
// waits for the previous call on another stream, and the next call on
// another stream waits for the graph (events, no host wait), so a replay
// of peer-memory collectives and eager calls never overlap.
func TestLaunchGraphIsOrdered(t *testing.T) {
	c, rt := fakeComm(t, time.Minute)
	c.joinEv = 5
	if err := c.AllReduce(context.Background(), Buffer{}, Buffer{}, 0, dtype.FP32, OnStream(21)); err != nil {
		t.Fatal(err)
	}
	if err := c.LaunchGraph(9, 22); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(context.Background(), Buffer{}, Buffer{}, 0, dtype.FP32, OnStream(23)); err != nil {
		t.Fatal(err)
	}
	want := []string{"EventRecord(5, 21)", "StreamWaitEvent(22, 5)", "GraphLaunch(9, 22)", "EventRecord(5, 22)", "StreamWaitEvent(23, 5)"}
	if fmt.Sprint(rt.calls) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", rt.calls, want)
	}
}

// ipcStateAbortForTest is Abort's access to the peer-memory state (the
// abort word), without poisoning the communicator.
func (c *Comm) ipcStateAbortForTest() {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	c.ipc.abort()
}

// blockingRT blocks in StreamCapturing (standing in for an enqueue that
// waits for a dead peer in ncclGroupEnd) until the communicator is
// aborted, as ncclCommAbort makes NCCL return.
type blockingRT struct {
	*fakeRT
	c *Comm
}

func (r *blockingRT) StreamCapturing(devrt.Stream) (bool, error) {
	for !r.c.aborted.Load() {
		time.Sleep(time.Millisecond)
	}
	return false, errors.New("ncclInternalError: aborted")
}

// TestContextBoundsTheEnqueue: a collective whose enqueue blocks returns
// when its context ends (the communicator aborts itself), poisoned.
func TestContextBoundsTheEnqueue(t *testing.T) {
	c, frt := fakeComm(t, time.Minute)
	c.rt = &blockingRT{fakeRT: frt, c: c}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.AllReduce(ctx, Buffer{}, Buffer{}, 0, dtype.FP32)
	if err == nil {
		t.Fatal("a blocked enqueue returned no error")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("returned after %v with a 100ms context", d)
	}
	if c.Err() == nil {
		t.Fatal("not poisoned")
	}
	// A call that completes before its context ends leaves the
	// communicator alone.
	c2, _ := fakeComm(t, time.Minute)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := c2.AllReduce(ctx2, Buffer{}, Buffer{}, 0, dtype.FP32); err != nil {
		t.Fatal(err)
	}
	cancel2()
	time.Sleep(20 * time.Millisecond)
	if c2.aborted.Load() || c2.Err() != nil {
		t.Fatal("a finished call's context aborted the communicator")
	}
}

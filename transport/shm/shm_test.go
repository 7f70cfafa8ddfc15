//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/transporttest"
)

func TestMain(m *testing.M) {
	if os.Getenv("SHM_HELPER") != "" {
		os.Exit(helperMain())
	}
	goleak.VerifyTestMain(m)
}

// store.Store is a Rendezvous.
var _ Rendezvous = store.Store(nil)

var prefixSeq atomic.Int64

func uniquePrefix(name string) string {
	return fmt.Sprintf("test/%s/%d/%d", name, os.Getpid(), prefixSeq.Add(1))
}

// connectGroup connects w ranks concurrently.
func connectGroup(t testing.TB, st Rendezvous, prefix string, w int, opt Options) []*Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts := make([]*Transport, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for r := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[r], errs[r] = Connect(ctx, st, prefix, r, w, opt)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, x := range ts {
				if x != nil {
					x.Close()
				}
			}
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return ts
}

func asTransports(ts []*Transport) []transport.Transport {
	out := make([]transport.Transport, len(ts))
	for i, x := range ts {
		out[i] = x
	}
	return out
}

// Every option set the suite runs under: the default (large messages
// direct), ring only, and a small ring (messages far larger than the ring
// stream through it).
var optionSets = map[string]Options{
	"default":   {},
	"ring":      {DirectBytes: -1},
	"smallring": {DirectBytes: -1, RingBytes: minRingBytes},
}

func TestConformance(t *testing.T) {
	for name, opt := range optionSets {
		t.Run(name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, w int) []transport.Transport {
				return asTransports(connectGroup(t, store.NewMemory(), uniquePrefix("conf"), w, opt))
			})
		})
	}
}

func TestDirectProbe(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("probe"), 2, Options{})
	defer ts[0].Close()
	defer ts[1].Close()
	// Same process: process_vm_readv on our own pid needs no privilege.
	if !ts[0].Direct(1) || !ts[1].Direct(0) {
		t.Fatalf("direct reads not enabled within one process: %v %v", ts[0].Direct(1), ts[1].Direct(0))
	}
	ring := connectGroup(t, store.NewMemory(), uniquePrefix("probe"), 2, Options{DirectBytes: -1})
	defer ring[0].Close()
	defer ring[1].Close()
	if ring[0].Direct(1) {
		t.Fatal("DirectBytes < 0 still probes")
	}
}

// TestSegmentUnlinked: once Connect returns, the segment has no name left
// in /dev/shm, and Close unmaps everything.
func TestSegmentUnlinked(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("unlink"), 3, Options{})
	name := ts[0].Segment()
	if !strings.HasPrefix(name, "/dev/shm/detcoll-") || name != ts[2].Segment() {
		t.Fatalf("segment names %q %q", name, ts[2].Segment())
	}
	if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment %s still exists after Connect: %v", name, err)
	}
	for _, x := range ts {
		x.Close()
		if x.seg.mem != nil {
			t.Fatal("Close did not unmap")
		}
	}
}

// TestUnavailableAgreed: when rank 0 cannot create the segment every rank
// gets ErrUnavailable (so all can fall back together), and nothing is left.
func TestUnavailableAgreed(t *testing.T) {
	old := shmDir
	shmDir = filepath.Join(t.TempDir(), "missing")
	defer func() { shmDir = old }()
	st := store.NewMemory()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = Connect(ctx, st, "unavail", r, 3, Options{})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("rank %d: want ErrUnavailable, got %v", r, err)
		}
	}
}

// TestOpenRejectsForeignSegment: a name that is not a detcoll segment of
// this size is refused, on every rank.
func TestOpenRejectsForeignSegment(t *testing.T) {
	f, err := os.CreateTemp(shmDir, "detcoll-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	f.Write(make([]byte, 2*pageSize))
	f.Close()
	if _, err := openSegment(f.Name(), 2); err == nil || !strings.Contains(err.Error(), "no detcoll header") {
		t.Fatalf("foreign file: %v", err)
	}
	if _, err := openSegment("/etc/passwd", 2); err == nil {
		t.Fatal("opened a file outside /dev/shm")
	}
	s, err := createSegment("x", 3, minRingBytes, minWindowBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer s.unmap()
	defer s.unlink()
	if _, err := openSegment(s.name, 2); err == nil || !strings.Contains(err.Error(), "3 ranks") {
		t.Fatalf("size mismatch: %v", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		st         Rendezvous
		rank, size int
	}{{nil, 0, 2}, {store.NewMemory(), 2, 2}, {store.NewMemory(), -1, 2}, {store.NewMemory(), 0, 0}, {store.NewMemory(), 0, MaxRanks + 1}} {
		if _, err := Connect(ctx, c.st, "x", c.rank, c.size, Options{}); err == nil {
			t.Errorf("Connect(rank %d size %d) succeeded", c.rank, c.size)
		}
	}
	one, err := Connect(ctx, store.NewMemory(), "one", 0, 1, Options{})
	if err != nil || one.Size() != 1 {
		t.Fatalf("group of one: %v", err)
	}
	if err := one.Send(ctx, 0, transport.Tag{}, nil); !errors.Is(err, transport.ErrInvalidPeer) {
		t.Fatalf("send to self: %v", err)
	}
	one.Close()
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.withDefaults(4, 4)
	if o.RingBytes != DefaultRingBytes || o.DirectBytes != DefaultDirectBytes || o.ConnectTimeout != DefaultConnectTimeout ||
		o.WindowBytes != DefaultWindowBytes || o.winFit {
		t.Fatalf("defaults %+v", o)
	}
	if o := (Options{}).withDefaults(64, 64); 64*63*o.RingBytes > maxSegmentBytes || o.RingBytes < minRingBytes {
		t.Fatalf("W=64 ring %d", o.RingBytes)
	}
	if o := (Options{RingBytes: 100 << 10}).withDefaults(2, 2); o.RingBytes != 64<<10 {
		t.Fatalf("100 KiB rounds to %d", o.RingBytes)
	}
	// More ranks than CPUs: the larger slot, fitted later; still within
	// maxWindowTotal for a large group; an explicit size is kept as it is.
	if o := (Options{}).withDefaults(4, 2); o.WindowBytes != OversubscribedWindowBytes || !o.winFit {
		t.Fatalf("W=4 on 2 CPUs: window %d, fit %v", o.WindowBytes, o.winFit)
	}
	if o := (Options{}).withDefaults(64, 2); 64*winSlots*o.WindowBytes > maxWindowTotal {
		t.Fatalf("W=64 on 2 CPUs: window %d", o.WindowBytes)
	}
	if o := (Options{WindowBytes: 2 << 20}).withDefaults(4, 2); o.WindowBytes != 2<<20 || o.winFit {
		t.Fatalf("an explicit window on 2 CPUs: %d, fit %v", o.WindowBytes, o.winFit)
	}
}

// TestFitWindow: an enlarged slot shrinks until the segment takes at most
// half of /dev/shm's free space, never below DefaultWindowBytes, and
// stays when the free space is unknown.
func TestFitWindow(t *testing.T) {
	const ring = DefaultRingBytes
	total := func(w int) int64 { return int64(newLayout(4, ring, w).total) }
	for _, tc := range []struct {
		free int64
		want int
	}{
		{-1, OversubscribedWindowBytes},
		{1 << 40, OversubscribedWindowBytes},
		{2 * total(OversubscribedWindowBytes), OversubscribedWindowBytes},
		{2*total(OversubscribedWindowBytes) - 1, OversubscribedWindowBytes / 2},
		{64 << 20, DefaultWindowBytes * 2}, // Docker's default /dev/shm
		{1 << 20, DefaultWindowBytes},
	} {
		if got := fitWindow(4, ring, OversubscribedWindowBytes, tc.free); got != tc.want {
			t.Errorf("free %d: window %d, want %d", tc.free, got, tc.want)
		}
	}
}

// TestOversubscribedWindow: a group of more ranks than CPUs gets the
// larger slot (this host has plenty of /dev/shm), and every rank reads
// the size rank 0 chose from the segment.
func TestOversubscribedWindow(t *testing.T) {
	if free := shmFree(); free >= 0 && free < 1<<30 {
		t.Skipf("/dev/shm has %d bytes free; the fit would shrink the slot", free)
	}
	w := runtime.NumCPU() + 1
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("oversub"), w, Options{})
	defer closeAll(ts)
	for _, tr := range ts {
		if got := tr.WindowBytes(); got != OversubscribedWindowBytes {
			t.Fatalf("rank %d: window slot %d, want %d", tr.Rank(), got, OversubscribedWindowBytes)
		}
	}
}

// TestNodeCPUs: a rank bound to fewer CPUs than its group shares (detcoll
// launch --bind-to) sizes its waits and window by $DETCOLL_NODE_CPUS, not by
// its own affinity; a malformed value fails Connect naming the variable.
func TestNodeCPUs(t *testing.T) {
	if free := shmFree(); free >= 0 && free < 1<<30 {
		t.Skipf("/dev/shm has %d bytes free; the fit would shrink the slot", free)
	}
	for _, c := range []struct {
		cpus       string
		spin       bool
		windowSlot int
	}{
		{"3", true, DefaultWindowBytes},         // W = 3 fits
		{"2", false, OversubscribedWindowBytes}, // W = 3 does not
		{" 64 ", true, DefaultWindowBytes},      // spaces are trimmed
		{"1", false, OversubscribedWindowBytes},
	} {
		t.Setenv(EnvNodeCPUs, c.cpus)
		ts := connectGroup(t, store.NewMemory(), uniquePrefix("nodecpus"), 3, Options{})
		for _, tr := range ts {
			if got := tr.spin != 0; got != c.spin {
				t.Errorf("%s=%q: rank %d spins = %v, want %v", EnvNodeCPUs, c.cpus, tr.Rank(), got, c.spin)
			}
			if got := tr.WindowBytes(); got != c.windowSlot {
				t.Errorf("%s=%q: rank %d window slot %d, want %d", EnvNodeCPUs, c.cpus, tr.Rank(), got, c.windowSlot)
			}
		}
		closeAll(ts)
	}
	for _, bad := range []string{"", "0", "-2", "two", "1.5"} {
		t.Setenv(EnvNodeCPUs, bad)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tr, err := Connect(ctx, store.NewMemory(), uniquePrefix("nodecpus"), 0, 2, Options{})
		cancel()
		if err == nil {
			tr.Close()
			t.Fatalf("%s=%q: Connect succeeded", EnvNodeCPUs, bad)
		}
		if !strings.Contains(err.Error(), EnvNodeCPUs) {
			t.Errorf("%s=%q: error %q does not name the variable", EnvNodeCPUs, bad, err)
		}
	}
}

// TestStreamsLargerThanRing moves messages of many sizes, around and far
// beyond the ring, in both directions at once, with and without direct
// copies, and checks every byte.
func TestStreamsLargerThanRing(t *testing.T) {
	for name, opt := range optionSets {
		t.Run(name, func(t *testing.T) {
			ts := connectGroup(t, store.NewMemory(), uniquePrefix("stream"), 2, opt)
			defer ts[0].Close()
			defer ts[1].Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sizes := []int{0, 1, hdrBytes, minRingBytes - hdrBytes, minRingBytes, minRingBytes + 1, 3*minRingBytes + 5, 5 << 20}
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for dir := 0; dir < 2; dir++ {
				from, to := dir, 1-dir
				wg.Add(2)
				go func() {
					defer wg.Done()
					for i, n := range sizes {
						if err := ts[from].Send(ctx, to, transport.Tag{Phase: uint32(i), Seq: uint64(n)}, pattern(n, from)); err != nil {
							errs <- err
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					for i, n := range sizes {
						got := make([]byte, n)
						if err := ts[to].Recv(ctx, from, transport.Tag{Phase: uint32(i), Seq: uint64(n)}, got); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(got, pattern(n, from)) {
							errs <- fmt.Errorf("%d→%d: %d bytes corrupt", from, to, n)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}

func pattern(n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + i>>9 + salt*17)
	}
	return b
}

// TestMismatchBeforePayload: a tag or size mismatch is reported before any
// payload is copied (buf untouched) and leaves the message in place.
func TestMismatchBeforePayload(t *testing.T) {
	for name, opt := range optionSets {
		t.Run(name, func(t *testing.T) {
			ts := connectGroup(t, store.NewMemory(), uniquePrefix("mism"), 2, opt)
			defer ts[0].Close()
			defer ts[1].Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const n = 256 << 10
			sent := transport.Tag{Phase: 3, Seq: 7, Sig: 11}
			go ts[0].Send(ctx, 1, sent, pattern(n, 1))
			buf := make([]byte, n)
			err := ts[1].Recv(ctx, 0, transport.Tag{Phase: 3, Seq: 8, Sig: 11}, buf)
			var te *transport.TagError
			if !errors.As(err, &te) || te.Got != sent {
				t.Fatalf("want TagError, got %v", err)
			}
			if !bytes.Equal(buf, make([]byte, n)) {
				t.Fatal("payload copied before the tag was checked")
			}
			if err := ts[1].Recv(ctx, 0, sent, make([]byte, n+1)); !errors.Is(err, transport.ErrSizeMismatch) {
				t.Fatalf("want ErrSizeMismatch, got %v", err)
			}
			// The message is still there for the right call.
			if err := ts[1].Recv(ctx, 0, sent, buf); err != nil || !bytes.Equal(buf, pattern(n, 1)) {
				t.Fatalf("the right receive after mismatches: %v", err)
			}
		})
	}
}

// TestContextMidMessageBreaksStream: a sender whose context expires half way
// through a message larger than the ring fails, and so does the receiver,
// instead of delivering half a message or hanging.
func TestContextMidMessageBreaksStream(t *testing.T) {
	for _, opt := range []Options{{DirectBytes: -1, RingBytes: minRingBytes}, {}} {
		ts := connectGroup(t, store.NewMemory(), uniquePrefix("midctx"), 2, opt)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := ts[0].Send(ctx, 1, transport.Tag{Phase: 1}, make([]byte, 1<<20))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%+v: send: want DeadlineExceeded, got %v", opt, err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = ts[1].Recv(rctx, 0, transport.Tag{Phase: 1}, make([]byte, 1<<20))
		rcancel()
		if !errors.Is(err, ErrBroken) {
			t.Fatalf("%+v: recv after an abandoned message: want ErrBroken, got %v", opt, err)
		}
		ts[0].Close()
		ts[1].Close()
	}
}

// TestCloseUnblocksPendingSend: a Send blocked on a full ring returns
// ErrClosed when its own transport closes, and the peer sees ErrPeerClosed.
func TestCloseUnblocksPendingSend(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("closesend"), 2, Options{DirectBytes: -1, RingBytes: minRingBytes})
	defer ts[1].Close()
	errc := make(chan error, 1)
	go func() { errc <- ts[0].Send(context.Background(), 1, transport.Tag{}, make([]byte, 1<<20)) }()
	time.Sleep(50 * time.Millisecond)
	ts[0].Close()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("want ErrClosed, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Send")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts[1].Send(ctx, 0, transport.Tag{}, make([]byte, 1<<20)); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("send to a closed peer: want ErrPeerClosed, got %v", err)
	}
}

// TestDataBeforeCloseDelivered: what a peer sent before closing still arrives.
func TestDataBeforeCloseDelivered(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("linger"), 2, Options{})
	defer ts[1].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts[0].Send(ctx, 1, transport.Tag{Phase: 9}, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	ts[0].Close()
	got := make([]byte, 3)
	if err := ts[1].Recv(ctx, 0, transport.Tag{Phase: 9}, got); err != nil || string(got) != "bye" {
		t.Fatalf("%q %v", got, err)
	}
	if err := ts[1].Recv(ctx, 0, transport.Tag{Phase: 9}, got); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("second recv: want ErrPeerClosed, got %v", err)
	}
}

func TestSubAndParentClose(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("sub"), 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subs := make([]transport.Transport, 3)
	var wg sync.WaitGroup
	for r := 1; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ts[r].Sub(ctx, 5, []int{2, 1})
			if err != nil {
				t.Error(err)
			}
			subs[r] = s
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if subs[2].Rank() != 0 || subs[1].Rank() != 1 || subs[1].Size() != 2 {
		t.Fatalf("sub ranks %d %d", subs[2].Rank(), subs[1].Rank())
	}
	if _, err := ts[0].Sub(ctx, 6, []int{1, 2}); err == nil {
		t.Fatal("Sub without this rank succeeded")
	}
	ts[1].Close()
	if err := subs[1].Send(ctx, 0, transport.Tag{}, nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("sub of a closed parent: %v", err)
	}
	for _, x := range ts {
		x.Close()
	}
	subs[2].Close()
}

// The helper process: rank HELPER_RANK of a 2-rank group over a file store;
// rank 1 dies (SIGKILL) while rank 0 waits on it.
func helperMain() int {
	rank, _ := strconv.Atoi(os.Getenv("SHM_RANK"))
	st := newFileStore(os.Getenv("SHM_DIR"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Connect(ctx, st, "dead", rank, 2, Options{})
	if err != nil {
		fmt.Println("CONNECT", err)
		return 1
	}
	switch os.Getenv("SHM_HELPER") {
	case "die":
		if rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		start := time.Now()
		err := tr.Recv(ctx, 1, transport.Tag{}, make([]byte, 8))
		fmt.Printf("RESULT %v|%v|%d\n", errors.Is(err, ErrPeerDead), err, time.Since(start).Milliseconds())
	case "windowdie":
		// Rank 1 publishes once and dies; rank 0's second publication
		// must fail with ErrPeerDead, not wait for its deadline.
		if _, err := tr.Stage(ctx, 8); err == nil {
			if _, err = tr.Publish(ctx, transport.Tag{Phase: 3}); err == nil {
				tr.Release()
			}
		}
		if rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		start := time.Now()
		if _, err = tr.Stage(ctx, 8); err == nil {
			_, err = tr.Publish(ctx, transport.Tag{Phase: 3})
		}
		fmt.Printf("RESULT %v|%v|%d\n", errors.Is(err, ErrPeerDead), err, time.Since(start).Milliseconds())
	case "direct":
		// Two processes: is the large message copied straight across?
		buf := pattern(1<<20, 3)
		if rank == 0 {
			err = tr.Send(ctx, 1, transport.Tag{Phase: 2}, buf)
		} else {
			got := make([]byte, len(buf))
			err = tr.Recv(ctx, 0, transport.Tag{Phase: 2}, got)
			if err == nil && !bytes.Equal(got, buf) {
				err = errors.New("payload differs")
			}
		}
		fmt.Printf("RESULT %v|%v|%v\n", err == nil, err, tr.Direct(1-rank))
	case "expose":
		// Two processes read each other's exposed 1 MiB buffers.
		got, err := exposeAll(ctx, tr, transport.Tag{Phase: 7}, pattern(1<<20, rank))
		if err == nil && !bytes.Equal(got[1-rank], pattern(1<<20, 1-rank)) {
			err = errors.New("the peer's buffer read wrong")
		}
		fmt.Printf("RESULT %v|%v|%v\n", err == nil || errors.Is(err, transport.ErrNoExpose), err, err == nil)
	case "exposedie":
		// Rank 1 exposes and dies before it reads; rank 0's Unexpose
		// (rank 0 reads nothing: a copy from a dead process is another
		// error),
		// waiting for rank 1 to be done with its buffer, must fail with
		// ErrPeerDead at once, not at its deadline.
		err := tr.Expose(ctx, transport.Tag{Phase: 7}, make([]byte, 64))
		if err == nil {
			_, err = tr.Exposed(ctx)
		}
		if rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		start := time.Now()
		if err == nil {
			err = tr.Unexpose(ctx)
		}
		fmt.Printf("RESULT %v|%v|%d\n", errors.Is(err, ErrPeerDead) || errors.Is(err, transport.ErrNoExpose), err, time.Since(start).Milliseconds())
	}
	tr.Close()
	return 0
}

func runHelpers(t *testing.T, mode string) []string {
	t.Helper()
	dir := t.TempDir()
	outs := make([]string, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "SHM_HELPER="+mode, "SHM_RANK="+strconv.Itoa(r), "SHM_DIR="+dir)
			out, _ := cmd.CombinedOutput()
			outs[r] = string(out)
		}()
	}
	wg.Wait()
	return outs
}

func result(t *testing.T, out string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "RESULT "); ok {
			return strings.Split(v, "|")
		}
	}
	t.Fatalf("no result in helper output:\n%s", out)
	return nil
}

// TestDeadPeerDetected: a peer process killed without closing fails the
// waiting rank with ErrPeerDead within a fraction of a second, not at its
// 30 s deadline: waiting for a message (die) and, between publications, for
// the next window publication (windowdie) and for its release of an
// exposed buffer (exposedie).
func TestDeadPeerDetected(t *testing.T) {
	for _, mode := range []string{"die", "windowdie", "exposedie"} {
		outs := runHelpers(t, mode)
		res := result(t, outs[0])
		ms, _ := strconv.Atoi(res[2])
		if res[0] != "true" || ms > 5000 {
			t.Fatalf("%s: rank 0 after its peer died: %v after %d ms", mode, res[1], ms)
		}
	}
}

// TestDirectAcrossProcesses: between two processes, large messages are
// copied directly when the kernel allows cross memory attach; either way
// they arrive intact.
func TestDirectAcrossProcesses(t *testing.T) {
	outs := runHelpers(t, "direct")
	for r := range 2 {
		res := result(t, outs[r])
		if res[0] != "true" {
			t.Fatalf("rank %d: %v", r, res[1])
		}
		t.Logf("rank %d reads its peer directly: %s", r, res[2])
	}
}

// TestExposeAcrossProcesses: two processes read each other's exposed
// buffers intact (or agree that they cannot, where the kernel refuses cross
// memory attach).
func TestExposeAcrossProcesses(t *testing.T) {
	outs := runHelpers(t, "expose")
	for r := range 2 {
		res := result(t, outs[r])
		if res[0] != "true" {
			t.Fatalf("rank %d: %v", r, res[1])
		}
		t.Logf("rank %d read its peer's exposed buffer: %s", r, res[2])
	}
}

// fileStore is a Rendezvous over files in one directory, for the helper
// processes (tests here must not depend on the store's server).
type fileStore struct{ dir string }

func newFileStore(dir string) fileStore { return fileStore{dir} }

func (f fileStore) path(key string) string {
	return filepath.Join(f.dir, strings.ReplaceAll(key, "/", "_"))
}

func (f fileStore) Set(ctx context.Context, key string, v []byte) error {
	tmp := f.path(key) + ".tmp"
	if err := os.WriteFile(tmp, v, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.path(key))
}

func (f fileStore) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		if b, err := os.ReadFile(f.path(key)); err == nil {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestGoschedWaits: waiters call runtime.Gosched with one P or when the
// group fits the CPUs, and not in an oversubscribed group with more Ps
// (docs/shm.md, "Gosched in the waits"); a new transport takes the rule.
func TestGoschedWaits(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	cpus := runtime.NumCPU()
	for _, c := range []struct {
		procs, size int
		want        bool
	}{
		{1, cpus + 1, true},
		{1, 2, true},
		{2, cpus + 1, false},
		{2, min(2, cpus), true},
		{4, 4 * cpus, false},
	} {
		runtime.GOMAXPROCS(c.procs)
		if got := goschedWaits(c.size, cpus); got != c.want {
			t.Errorf("GOMAXPROCS=%d W=%d (%d CPUs): goschedWaits = %v, want %v", c.procs, c.size, cpus, got, c.want)
		}
	}
	runtime.GOMAXPROCS(2)
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("gosched"), cpus+1, Options{})
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	for r, tr := range ts {
		if tr.gosched {
			t.Errorf("rank %d of an oversubscribed group (W=%d, %d CPUs, GOMAXPROCS=2) calls Gosched in its waits", r, cpus+1, cpus)
		}
	}
}

// TestSharesCPU: a waiter records its CPU and sees a peer that last waited
// on the same one (docs/shm.md, "Placement after a pause"), and only then.
func TestSharesCPU(t *testing.T) {
	if c := currentCPU(); c < 0 {
		t.Errorf("getcpu(2) failed: currentCPU = %d", c)
	}
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("cpu"), 3, Options{})
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	word := func(r int) *atomic.Uint32 { return ts[0].seg.u32(ts[0].seg.rankOff(r) + rbCPU) }
	if ts[0].sharerOn(5) >= 0 {
		t.Error("no peer has waited yet, but rank 0 finds one on its CPU")
	}
	if got := word(0).Load(); got != 6 {
		t.Errorf("rank 0 waiting on CPU 5 recorded %d, want 6 (1 + the CPU)", got)
	}
	word(2).Store(5 + 1)
	if got := ts[0].sharerOn(5); got != 2 {
		t.Errorf("rank 0 on CPU 5 finds sharer %d, want rank 2", got)
	}
	word(1).Store(5 + 1)
	if got := ts[2].sharerOn(5); got != 0 {
		t.Errorf("ranks 0 and 1 last waited on CPU 5: rank 2 finds sharer %d, want the lowest, 0", got)
	}
	word(1).Store(0)
	if ts[0].sharerOn(5) < 0 {
		t.Error("rank 2 last waited on CPU 5, rank 0 waits there and does not see it")
	}
	if ts[0].sharerOn(4) >= 0 {
		t.Error("rank 0 on CPU 4 sees a peer on its CPU; rank 2 was on 5 and rank 1 never waited")
	}
	if ts[1].sharerOn(4) != 0 {
		t.Error("rank 0 last waited on CPU 4, rank 1 waits there and does not see it")
	}
	if ts[0].sharerOn(-1) >= 0 {
		t.Error("an unknown CPU matched a peer")
	}
}

// TestTouchPagesChangesNothing: touching a mapping's pages at set-up (a
// read of every page, and a store of the same byte in the pages this rank
// writes) leaves every byte of the segment as it was, for every rank.
func TestTouchPagesChangesNothing(t *testing.T) {
	s, err := createSegment("touch", 3, minRingBytes, minWindowBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer s.unmap()
	defer s.unlink()
	for i := range s.mem {
		s.mem[i] = byte(i*7 + i>>12)
	}
	want := bytes.Clone(s.mem)
	for r := -1; r <= 3; r++ { // -1 and 3 are out of range: no-ops
		s.touchPages(r)
		if !bytes.Equal(s.mem, want) {
			t.Fatalf("touchPages(%d) changed the segment", r)
		}
	}
}

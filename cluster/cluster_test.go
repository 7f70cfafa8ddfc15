package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/tcp"
)

// The test binary doubles as a rank: CLUSTER_HELPER selects what it does.
func TestMain(m *testing.M) {
	if mode := os.Getenv("CLUSTER_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

const count = 1 << 14 // fp32 elements per rank

func input(rank int) []byte {
	b := make([]byte, 4*count)
	bench.FillInput(b, dtype.FP32, 42, rank, 0)
	return b
}

// killer wraps a transport and SIGKILLs this process on its first data send
// (after the signature exchange): a rank dying in the middle of a collective.
type killer struct{ transport.Transport }

func (k killer) Send(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	if tag.Phase != 1 { // not the signature phase
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return k.Transport.Send(ctx, peer, tag, buf)
}

// killerSharer is killer over a transport with a shared window (shm),
// whose collectives publish instead of sending: it dies at the first
// publication of data.
type killerSharer struct {
	killer
	sh transport.Sharer
}

func (k killerSharer) WindowBytes() int { return k.sh.WindowBytes() }
func (k killerSharer) Stage(ctx context.Context, n int) ([]byte, error) {
	return k.sh.Stage(ctx, n)
}
func (k killerSharer) Publish(ctx context.Context, tag transport.Tag) ([][]byte, error) {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
func (k killerSharer) Release() { k.sh.Release() }

func helper(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opt := Options{CommOptions: []detcoll.CommOption{detcoll.WithTimeout(2 * time.Second)}}
	rank, _ := strconv.Atoi(os.Getenv("DETCOLL_RANK"))
	if mode == "kill" && rank == 2 {
		opt.WrapTransport = func(t transport.Transport) transport.Transport {
			if sh, ok := t.(transport.Sharer); ok {
				return killerSharer{killer{t}, sh}
			}
			return killer{t}
		}
	}
	job, err := Init(ctx, opt)
	if err != nil {
		fmt.Println("INIT-ERROR", err)
		return 1
	}
	defer job.Comm.Close()
	c := job.Comm
	if n, ok := c.Transport().(transport.Namer); ok {
		fmt.Println("TRANSPORT", n.Name())
	}
	w := c.Size()
	switch mode {
	case "allreduce":
		ins := make([][]byte, w)
		for r := range ins {
			ins[r] = input(r)
		}
		want := make([]byte, 4*count)
		reduce.Oracle(dtype.FP32, reduce.Native, ins, want)
		for _, alg := range []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree} {
			out := make([]byte, 4*count)
			if err := c.AllReduce(ctx, ins[rank], out, detcoll.FP32, detcoll.WithAlgorithm(alg)); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
			if !bytes.Equal(out, want) {
				fmt.Println("MISMATCH", alg)
				return 1
			}
		}
		fmt.Println("OK")
		job.Close()
		return 0
	case "kill":
		start := time.Now()
		out := make([]byte, 4*count)
		err := c.AllReduce(context.Background(), input(rank), out, detcoll.FP32)
		fmt.Printf("RESULT err=%v elapsed=%v\n", err != nil, time.Since(start).Round(time.Millisecond))
		if err == nil || time.Since(start) > 5*time.Second {
			return 1
		}
		fmt.Println("ERR", err)
		return 0
	case "mismatch-cached":
		// All validate one AllReduce; then rank 1 diverges while the others
		// run the validated one again.
		b := make([]byte, 64)
		if err := c.AllReduce(ctx, b, b, detcoll.FP32); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		if rank == 1 {
			err = c.AllGather(ctx, make([]byte, 16), make([]byte, 16*w), detcoll.FP32)
		} else {
			err = c.AllReduce(ctx, b, b, detcoll.FP32)
		}
		fmt.Println("ERR", err)
		if errors.Is(err, detcoll.ErrMismatch) {
			return 0
		}
		return 1
	case "collision", "skip":
		// Issue 14 items 1 and 2 across processes: every rank validates two
		// collectives, then rank 1 swaps them (their old 24-bit tag hashes
		// collided) or skips one call; every rank must fail with ErrMismatch
		// at the first differing call.
		ar := func(dt detcoll.DType, n int) func() error {
			b := make([]byte, n*dt.Size())
			return func() error { return c.AllReduce(ctx, b, b, dt, detcoll.WithAlgorithm(detcoll.GatherTree)) }
		}
		x, y := ar(detcoll.FP32, 1843427), ar(detcoll.BF16, 3686854)
		if mode == "skip" {
			x, y = ar(detcoll.FP32, 1024), ar(detcoll.BF16, 2048)
		}
		for _, f := range []func() error{x, y} {
			if err := f(); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
		}
		prog := []func() error{x, y}
		switch {
		case mode == "collision" && rank == 1:
			prog = []func() error{y, x}
		case mode == "skip" && rank == 1:
			prog = []func() error{x, y}
		case mode == "skip":
			prog = []func() error{x, x, y}
		}
		for i, f := range prog {
			if err := f(); err != nil {
				fmt.Printf("ERR at %d: %v\n", i, err)
				want := 0
				if mode == "skip" {
					want = 1
				}
				if errors.Is(err, detcoll.ErrMismatch) && i == want {
					return 0
				}
				return 1
			}
		}
		fmt.Println("NO ERROR")
		return 1
	case "mismatch":
		var err error
		if rank == 1 {
			err = c.AllGather(ctx, make([]byte, 16), make([]byte, 16*w), detcoll.FP32)
		} else {
			err = c.AllReduce(ctx, make([]byte, 64), make([]byte, 64), detcoll.FP32)
		}
		fmt.Println("ERR", err)
		if errors.Is(err, detcoll.ErrMismatch) {
			return 0
		}
		return 1
	}
	return 2
}

type rankResult struct {
	out  string
	code int
}

// spawn runs w copies of this test binary as ranks, with a store served by
// the test, without the launcher (so that every rank's own outcome is seen).
func spawn(t *testing.T, mode string, w int, extraEnv ...string) []rankResult {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	res := make([]rankResult, w)
	var wg sync.WaitGroup
	for r := 0; r < w; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CLUSTER_HELPER="+mode,
			"DETCOLL_RANK="+strconv.Itoa(r), "DETCOLL_WORLD_SIZE="+strconv.Itoa(w),
			"DETCOLL_LOCAL_RANK="+strconv.Itoa(r), "DETCOLL_LOCAL_WORLD_SIZE="+strconv.Itoa(w),
			"DETCOLL_STORE_ADDR="+srv.Addr(), "DETCOLL_TOKEN=tok")
		cmd.Env = append(cmd.Env, extraEnv...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			res[r] = rankResult{out.String(), code}
		}(r)
	}
	wg.Wait()
	return res
}

// transports are the choices every multi-process test runs under: auto
// (which must pick shm here: every rank is on this host) and forced TCP.
var transports = []struct{ name, env, want string }{
	{"auto", "", "shm"},
	{"tcp", "DETCOLL_TRANSPORT=tcp", "tcp"},
}

func TestMultiProcessAllReduce(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for r, res := range spawn(t, "allreduce", 3, tr.env) {
				if res.code != 0 || !strings.Contains(res.out, "OK") || !strings.Contains(res.out, "TRANSPORT "+tr.want) {
					t.Errorf("rank %d: exit %d: %s", r, res.code, res.out)
				}
			}
		})
	}
}

// A rank killed in the middle of a collective: every other rank returns an
// error within the timeout (2 s), nothing hangs.
func TestKilledRankFailsEveryOther(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { killedRankFailsEveryOther(t, tr.env) })
	}
}

func killedRankFailsEveryOther(t *testing.T, env string) {
	res := spawn(t, "kill", 4, env)
	for r, rr := range res {
		t.Logf("rank %d exit %d: %s", r, rr.code, strings.TrimSpace(rr.out))
	}
	for r, rr := range res {
		if r == 2 {
			if rr.code != -1 {
				t.Errorf("rank 2 should have died by SIGKILL, exit %d", rr.code)
			}
			continue
		}
		if rr.code != 0 {
			t.Errorf("rank %d: exit %d: %s", r, rr.code, rr.out)
		}
	}
}

// Mismatched collectives in different processes: an error on every rank.
func TestMismatchAcrossProcesses(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for r, res := range spawn(t, "mismatch", 3, tr.env) {
				if res.code != 0 {
					t.Errorf("rank %d: exit %d: %s", r, res.code, res.out)
				}
			}
		})
	}
}

// The same when some ranks run an already validated collective: the tags
// tell them apart, and every rank still reports ErrMismatch.
func TestMismatchAfterValidationAcrossProcesses(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for r, res := range spawn(t, "mismatch-cached", 3, tr.env) {
				if res.code != 0 {
					t.Errorf("rank %d: exit %d: %s", r, res.code, res.out)
				}
			}
		})
	}
}

// A swap of two validated collectives whose old 24-bit tag hashes collide,
// and a skipped call, across processes over TCP: ErrMismatch on every rank at
// the first differing call (issue 14 items 1 and 2).
func TestSwapAndSkipAcrossProcesses(t *testing.T) {
	for _, mode := range []string{"collision", "skip"} {
		for r, res := range spawn(t, mode, 3) {
			t.Logf("%s: rank %d: exit %d: %s", mode, r, res.code, strings.TrimSpace(res.out))
			if res.code != 0 {
				t.Errorf("%s: rank %d: exit %d: %s", mode, r, res.code, res.out)
			}
		}
	}
}

// Under the launcher, the dead rank is named as the root cause.
func TestLauncherNamesDeadRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := launch.Run(ctx, launch.Config{
		NprocPerNode: 4, Standalone: true, Cmd: []string{os.Args[0], "-test.run=^$"},
		Env: append(os.Environ(), "CLUSTER_HELPER=kill"), Stdout: &out, Stderr: &out, GracePeriod: 2 * time.Second,
	})
	var we *launch.WorkerError
	if !errors.As(err, &we) {
		t.Fatalf("want a WorkerError, got %v\n%s", err, out.String())
	}
	if we.Rank != 2 || we.Signal != syscall.SIGKILL {
		t.Fatalf("root cause: rank %d signal %v, want rank 2 SIGKILL (%v)", we.Rank, we.Signal, err)
	}
}

func TestLauncherAllReduce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := launch.Run(ctx, launch.Config{
		NprocPerNode: 3, Standalone: true, Cmd: []string{os.Args[0], "-test.run=^$"},
		Env: append(os.Environ(), "CLUSTER_HELPER=allreduce"), Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for r := 0; r < 3; r++ {
		if !strings.Contains(out.String(), fmt.Sprintf("[rank %d] OK", r)) {
			t.Fatalf("rank %d did not report OK:\n%s", r, out.String())
		}
	}
}

// Two communicators in one process, over TCP, busy at the same time, never
// mix their traffic.
func TestTwoCommunicatorsDoNotMix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := store.NewMemory()
	const w = 3
	mk := func(prefix string) []*detcoll.Comm {
		comms := make([]*detcoll.Comm, w)
		var wg sync.WaitGroup
		errs := make([]error, w)
		for r := 0; r < w; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				tr, err := tcp.Connect(ctx, st, prefix, r, w, tcp.Options{})
				if err != nil {
					errs[r] = err
					return
				}
				comms[r], errs[r] = detcoll.New(tr)
			}(r)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			for _, c := range comms {
				c.Close()
			}
		})
		return comms
	}
	a, b := mk("a"), mk("b")
	ins := make([][]byte, w)
	for r := range ins {
		ins[r] = input(r)
	}
	want := make([]byte, 4*count)
	reduce.Oracle(dtype.FP32, reduce.Native, ins, want)
	var wg sync.WaitGroup
	errs := make(chan error, 2*w)
	for _, comms := range [][]*detcoll.Comm{a, b} {
		for r, c := range comms {
			wg.Add(1)
			go func(r int, c *detcoll.Comm) {
				defer wg.Done()
				for i := 0; i < 5; i++ {
					out := make([]byte, 4*count)
					if err := c.AllReduce(ctx, ins[r], out, detcoll.FP32, detcoll.WithAlgorithm(detcoll.A2ATree)); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(out, want) {
						errs <- fmt.Errorf("rank %d: result differs", r)
						return
					}
				}
			}(r, c)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

//go:build cgo

package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
)

// storeComms creates w communicators meeting in st under prefix (as
// detcollCommInitStore does) and registers them.
func storeComms(t *testing.T, st store.Store, prefix string, w int, timeout time.Duration) []uintptr {
	t.Helper()
	hs := make([]uintptr, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for r := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, o, err := initStore(noEnv, store.Prefix(st, ""), prefix, w, r, timeout)
			if err == nil {
				hs[r] = register(c, o)
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, h := range hs {
			destroyHandle("test", h, true)
		}
	})
	return hs
}

func TestInitStore(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	const w = 3
	hs := storeComms(t, st, "detcoll/1", w, 10*time.Second)
	outs := make([][]float32, w)
	rcs := onRanks(hs, func(r int, h uintptr) result {
		in := []float32{float32(r + 1)}
		outs[r] = make([]float32, 1)
		return hostCollective("AR", opAllReduce, ptr(in), ptr(outs[r]), 1, 7, h)
	})
	for r := range w {
		if rcs[r] != rcSuccess || outs[r][0] != 6 {
			t.Fatalf("rank %d: %v %v", r, rcs[r], outs[r])
		}
	}
	// The movement operations of movement.go through the handles.
	rcs = onRanks(hs, func(r int, h uintptr) result {
		e, err := lookup(h)
		if err != nil {
			return classify(err)
		}
		sends, recvs := make([][]byte, w), make([][]byte, w)
		for p := range w {
			sends[p], recvs[p] = []byte{byte(10*r + p)}, make([]byte, 1)
		}
		if err := e.comm.AllToAll(context.Background(), sends, recvs); err != nil {
			return classify(err)
		}
		for p := range w {
			if recvs[p][0] != byte(10*p+r) {
				return rcInternalError
			}
		}
		return rcSuccess
	})
	for r, rc := range rcs {
		if rc != rcSuccess {
			t.Fatalf("rank %d AllToAll: %v", r, rc)
		}
	}
}

// TestInitStoreTooMany: a fourth rank joining a prefix of three is
// InvalidUsage at once; bad arguments are InvalidArgument.
func TestInitStoreTooMany(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	storeComms(t, st, "p", 2, 10*time.Second)
	start := time.Now()
	_, _, err := initStore(noEnv, store.Prefix(st, ""), "p", 2, 1, 5*time.Second)
	if classify(err) != rcInvalidUsage {
		t.Fatalf("want InvalidUsage, got %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	for _, tc := range []struct {
		prefix       string
		nranks, rank int
	}{{"", 2, 0}, {"q", 0, 0}, {"q", 2, 2}, {"q", 2, -1}} {
		if _, _, err := initStore(noEnv, store.Prefix(st, ""), tc.prefix, tc.nranks, tc.rank, time.Second); classify(err) != rcInvalidArgument {
			t.Fatalf("%+v: want InvalidArgument, got %v", tc, err)
		}
	}
}

// TestInitStoreTimeout: the timeout argument bounds collectives: a rank
// whose peer never calls gets detcollTimeout within about that time.
func TestInitStoreTimeout(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	hs := storeComms(t, st, "t", 2, 500*time.Millisecond)
	e, err := lookup(hs[0])
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = e.comm.Barrier(context.Background())
	if classify(err) != rcTimeout {
		t.Fatalf("want Timeout, got %v", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 5*time.Second {
		t.Fatalf("timed out after %v, want about 500ms", d)
	}
}

// TestInitStoreTimeoutJoin: a missing rank makes creation fail within the
// timeout instead of hanging.
func TestInitStoreTimeoutJoin(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	start := time.Now()
	_, _, err := initStore(noEnv, store.Prefix(st, ""), "j", 2, 1, 300*time.Millisecond)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

// TestCStore compiles testdata/storetest.c: three ranks (threads) meet
// through a C store of the caller's (detcollCommInitStore's callbacks) and
// run the data-movement calls (Broadcast, Gather, Scatter, AllToAllv,
// Send/Recv, Barrier) and their argument errors.
func TestCStore(t *testing.T) {
	gcc := needTool(t, "gcc")
	lib, _ := buildArtifacts(t)
	exe := filepath.Join(t.TempDir(), "storetest")
	libDir := filepath.Dir(lib)
	cmd := exec.Command(gcc, "-std=c11", "-D_DEFAULT_SOURCE", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread",
		"-I", filepath.Join(repoRoot(t), "include"), "-o", exe, "testdata/storetest.c",
		"-L", libDir, "-ldetcoll", "-Wl,-rpath,"+libDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK\n") {
		t.Fatalf("storetest: %v\n%s", err, out)
	}
}

//go:build cgo && !detcoll_nodevice && (cuda || !rocm)

package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/nccl"
	"github.com/detcoll/detcoll/launch"
)

func TestCUDABackendRegistered(t *testing.T) {
	b := currentDeviceBackend()
	if b == nil || b.Name() != "cuda" {
		t.Fatalf("device backend %v, want the CUDA one registered by init", b)
	}
}

// commError is the last error recorded on a live communicator (the calling
// thread's message may belong to another OS thread in a Go test).
func commError(t *testing.T, h uintptr) string {
	t.Helper()
	e, err := lookup(h)
	if err != nil {
		t.Fatal(err)
	}
	return e.lastError()
}

// needNoCUDA skips where a CUDA driver can be loaded (the GPU machine runs
// the real thing).
func needNoCUDA(t *testing.T) {
	t.Helper()
	if cuda.Available() == nil {
		t.Skip("a CUDA driver is available here; these tests cover machines without one")
	}
}

// TestCUDABackendWithoutDriver: on a machine without CUDA every device call
// is detcollUnsupported, naming the CUDA driver, on every rank, without
// hanging (the attach is collective), and the failed attach is kept: later
// calls fail the same way at once.
func TestCUDABackendWithoutDriver(t *testing.T) {
	needNoCUDA(t)
	const dev, stream = 0xdead0000, 0x5151
	check := func(t *testing.T, h uintptr, o op) {
		t.Helper()
		if rc := deviceCollective("detcollX", o, dev, dev+4096, 8, 9, h, stream); rc != rcUnsupported {
			t.Fatalf("%v: result %d (%s), want detcollUnsupported", o, rc, commError(t, h))
		}
		msg := commError(t, h)
		for _, want := range []string{"detcollX: ", "CUDA driver", "device backend", "detcollHost"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("%v: message %q lacks %q", o, msg, want)
			}
		}
	}

	t.Run("in process", func(t *testing.T) {
		hs := inprocHandles(t, 1)
		for _, o := range []op{opAllReduce, opAllGather, opReduceScatter, opAllReduce} {
			check(t, hs[0], o)
		}
		// Argument errors are still reported first.
		if rc := deviceCollective("d", opAllReduce, 0, dev, 8, 9, hs[0], stream); rc != rcInvalidArgument {
			t.Fatalf("NULL send: %d", rc)
		}
		// Host collectives are unaffected.
		buf := []float32{1, 2}
		if rc := hostCollective("AR", opAllReduce, ptr(buf), ptr(buf), 2, C_detcollFloat32, hs[0]); rc != rcSuccess {
			t.Fatal(rc, commError(t, hs[0]))
		}
	})

	t.Run("unique id, two ranks", func(t *testing.T) {
		id, err := getUniqueID(noEnv)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const w = 2
		hs := make([]uintptr, w)
		errs := make([]error, w)
		var wg sync.WaitGroup
		for r := range w {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, o, err := initRank(ctx, noEnv, id, w, r)
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
		defer func() {
			for _, h := range hs {
				destroyHandle("d", h, false)
			}
		}()
		start := time.Now()
		for range 2 { // the second round hits the kept attach failure
			var wg sync.WaitGroup
			for _, h := range hs {
				wg.Add(1)
				go func() { defer wg.Done(); check(t, h, opReduceScatter) }()
			}
			wg.Wait()
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %v", d)
		}
		// The host communicator still works (the attach's split and
		// exchange were matched on both ranks).
		rcs := onRanks(hs, func(r int, h uintptr) result {
			buf := []float32{float32(r + 1)}
			if rc := hostCollective("AR", opAllReduce, ptr(buf), ptr(buf), 1, C_detcollFloat32, h); rc != rcSuccess || buf[0] != 3 {
				return rcInternalError
			}
			return rcSuccess
		})
		for r, rc := range rcs {
			if rc != rcSuccess {
				t.Fatalf("rank %d: host all-reduce after the failed attach: %d", r, rc)
			}
		}
	})
}

func TestPickDevice(t *testing.T) {
	env := launch.Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2}
	for _, v := range []string{"x", "-1", "1.5"} {
		_, _, err := pickDevice(envOf(map[string]string{envCUDADevice: v}), nil, env)
		if classify(err) != rcInvalidUsage || !strings.Contains(err.Error(), envCUDADevice) {
			t.Fatalf("%s=%q: %v", envCUDADevice, v, err)
		}
	}
	ord, how, err := pickDevice(envOf(map[string]string{envCUDADevice: " 3 "}), &origin{uid: true}, env)
	if err != nil || ord != 3 || !strings.Contains(how, envCUDADevice) {
		t.Fatalf("explicit device: %d %q %v", ord, how, err)
	}
	if cuda.Available() != nil {
		// No driver: no current device, no device count; devcomm decides
		// (and reports the missing driver).
		if ord, _, err := pickDevice(noEnv, nil, env); err != nil || ord != -1 {
			t.Fatalf("no driver: %d %v", ord, err)
		}
	}
}

func TestEnvLocal(t *testing.T) {
	for _, c := range []struct {
		env        map[string]string
		lr, lw     int
		rank, size int
	}{
		{nil, 2, 3, 2, 3},
		{map[string]string{"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, 1, 2, 2, 3},
		{map[string]string{"DETCOLL_LOCAL_RANK": "0", "LOCAL_RANK": "1", "DETCOLL_LOCAL_WORLD_SIZE": "4"}, 0, 4, 2, 3},
		{map[string]string{"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "0"}, 2, 3, 2, 3},
	} {
		if lr, lw := envLocal(envOf(c.env), c.rank, c.size); lr != c.lr || lw != c.lw {
			t.Errorf("%v: %d %d, want %d %d", c.env, lr, lw, c.lr, c.lw)
		}
	}
}

// TestOrigins: what each creation path hands the device backend.
func TestOrigins(t *testing.T) {
	id, err := getUniqueID(noEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, o, err := initRank(ctx, envOf(map[string]string{"LOCAL_RANK": "0", envAccumulate: "f32"}), id, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := decodeUniqueID(id)
	if !o.uid || o.store == nil || o.prefix != "detcoll/uid/"+hex.EncodeToString(u.key[:]) || o.acc != detcoll.AccumulateF32 ||
		o.env.Rank != 0 || o.env.WorldSize != 1 || o.env.LocalRank != 0 || o.release == nil {
		t.Fatalf("unique-id origin %+v", o)
	}
	job, done, err := deviceJob(c, o)
	if err != nil || job.Store != o.store || job.Comm != c || job.Env != o.env {
		t.Fatalf("job %+v %v", job, err)
	}
	done()
	h := register(c, o)
	if rc := destroyHandle("d", h, false); rc != rcSuccess {
		t.Fatal(rc)
	}

	// In process: a world of one gets an in-memory store, more ranks none.
	comms, err := detcoll.NewInProc(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		defer c.Close()
	}
	if _, _, err := deviceJob(comms[0], nil); classify(err) != rcInvalidUsage {
		t.Fatalf("in process, 2 ranks: %v", err)
	}
	one, err := detcoll.NewInProc(1)
	if err != nil {
		t.Fatal(err)
	}
	defer one[0].Close()
	job, done, err = deviceJob(one[0], nil)
	if err != nil || job.Store == nil || job.Env.WorldSize != 1 {
		t.Fatalf("in process, 1 rank: %+v %v", job, err)
	}
	if err := done(); err != nil {
		t.Fatal(err)
	}
}

func TestDeviceErrorClasses(t *testing.T) {
	cudaErr := &cuda.Error{Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS", Call: "cuStreamSynchronize"}
	ncclErr := &nccl.Error{Code: 3, Name: "ncclInternalError", Call: "ncclAllGather"}
	for _, c := range []struct {
		err  error
		want result
	}{
		{nil, rcSuccess},
		{&detcoll.Error{Op: "AllReduce", Peer: -1, Err: fmt.Errorf("%w: count", detcoll.ErrInvalidArgument)}, rcInvalidArgument},
		{&detcoll.Error{Op: "AllReduce", Peer: -1, Err: fmt.Errorf("%w: rank 1 called x", detcoll.ErrMismatch)}, rcMismatch},
		{&detcoll.Error{Op: "AllReduce", Peer: -1, Err: detcoll.ErrClosed}, rcClosed},
		{&detcoll.Error{Op: "AllReduce", Peer: -1, Err: cudaErr}, rcDeviceError},
		{&detcoll.Error{Op: "AllReduce", Peer: -1, Err: fmt.Errorf("%w: %w", detcoll.ErrPoisoned, ncclErr)}, rcDeviceError},
		{errors.New("something else"), rcSystemError},
	} {
		got := deviceError(c.err)
		if classify(got) != c.want {
			t.Errorf("%v: %d, want %d", c.err, classify(got), c.want)
		}
		if c.err != nil && got.Error() != c.err.Error() {
			t.Errorf("message changed: %q -> %q", c.err, got)
		}
	}
	// A missing library is detcollUnsupported, whichever it is.
	if cuda.Available() != nil {
		if err := attachError(errors.New("x"), ""); classify(err) != rcUnsupported || !strings.Contains(err.Error(), "CUDA driver") {
			t.Fatal(err)
		}
	}
}
